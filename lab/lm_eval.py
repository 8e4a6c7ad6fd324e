"""Per-position losses of a tiny_lm.TinyLM: the one place they are computed (token_losses), the honest left-to-right
loss, and the loss of non-overlapping evaluation windows."""
import torch
import torch.nn.functional as F

from lab.corpora import CorpusError
from tiny_lm import TinyLM


@torch.no_grad()
def token_losses(model: TinyLM, seqs: torch.Tensor, batch_size: int, hits: bool = False):
    """Loss (nats) of predicting seqs[:, 1:] from seqs[:, :-1] at every position: the one place
    per-position loss is computed. seqs: (N, T + 1) token ids -> (N, T), in batches of
    batch_size rows. hits=True also returns whether the most likely next token was the right
    one, (N, T) bool."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    loss, hit = [], []
    for i in range(0, len(seqs), batch_size):
        x, y = seqs[i:i + batch_size, :-1].to(device), seqs[i:i + batch_size, 1:].to(device)  # (n, T)
        logits = model(x).logits                                                          # (n, T, V)
        loss.append(F.cross_entropy(logits.transpose(1, 2).float(), y, reduction="none").cpu())  # (n, T)
        hit.append((logits.argmax(-1) == y).cpu())                                           # (n, T)
    model.train(was_training)
    return (torch.cat(loss), torch.cat(hit)) if hits else torch.cat(loss)


@torch.no_grad()
def left_to_right_loss(model: TinyLM, ids: torch.Tensor, ctx: int, n_chars: int, batch_size: int = 64) -> float:
    """Honest per-character loss (nats): character p is predicted from ids[p-ctx:p] only, by
    the logits at the last position - what left-to-right generation sees. Scores ids[ctx:ctx+n_chars]."""
    if ids.numel() < ctx + n_chars:
        raise CorpusError(f"left-to-right scoring needs {ctx + n_chars} validation characters, "
                          f"the text has {ids.numel()}")
    device = next(model.parameters()).device
    model.eval()
    total = 0.0
    for s in range(ctx, ctx + n_chars, batch_size):
        ps = range(s, min(s + batch_size, ctx + n_chars))
        x = torch.stack([ids[p - ctx:p] for p in ps]).to(device)   # (b, ctx): only the past
        y = torch.tensor([int(ids[p]) for p in ps], device=device)  # (b,)
        logits = model(x).logits[:, -1, :].float()                        # (b, ctx, V) -> last position (b, V)
        total += F.cross_entropy(logits, y, reduction="sum").item()
    return total / n_chars


def window_losses(model: TinyLM, ids: torch.Tensor, T: int, n_windows: int, batch_size: int = 8) -> torch.Tensor:
    """Cut ids (N,) into n_windows non-overlapping windows of T+1 tokens from the start and
    return the per-position loss of each, shape (n_windows, T) in nats. Same span for every T."""
    need = n_windows * T + 1
    if ids.numel() < need:
        raise CorpusError(f"validation text has {ids.numel()} tokens but {n_windows} windows of length {T} "
                          f"need {need}; use a longer corpus, fewer windows or shorter lengths")
    seqs = torch.stack([ids[w * T:(w + 1) * T + 1] for w in range(n_windows)])  # (n_windows, T + 1)
    return token_losses(model, seqs, batch_size)
