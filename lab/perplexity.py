"""Perplexity of a trained model on held-out text (tutorial: 观察指标): the same characters scored
at every window length (evaluate), and one window scored whole against token by token through the
KV cache (cached_vs_full).

extrapolation_test.py reports both; experiments/recipe_ablation.py scores its models with evaluate on the
same characters. Per-position loss has one owner, lm_eval.token_losses; the blocks to score come
from eval_common.spread_blocks.
"""
import time

import torch
import torch.nn.functional as F
from lab import cli
import tiny_lm
from lab import lm_eval


def evaluate(model, val_ids, lengths, blocks, batch_tokens, desc, set_length=None):
    """Score the same characters at every length: each block of max(lengths) characters is cut
    into windows of length L. Returns ({L: mean loss}, per-character losses {L: (blocks, L_max)}
    for the shortest and longest L, seconds). set_length(L), if given, runs before each length
    (the training-free scalings set their factor there); the shortest length's per-character
    losses are then scored again under the longest length's scaling, so that the difference of
    the two compares one model at two window lengths."""
    L_max, losses, per_char, t0 = lengths[-1], {}, {}, time.perf_counter()

    def per_position(L):  # every window of length L in every block, in block order: (windows, L)
        seqs = torch.stack([val_ids[b + j * L:b + (j + 1) * L + 1] for b in blocks for j in range(L_max // L)])
        return lm_eval.token_losses(model, seqs, max(1, batch_tokens // L))

    for L in cli.progress(lengths, desc=desc, leave=False):
        if set_length:
            set_length(L)
        per_pos = per_position(L)
        losses[L] = per_pos.mean().item()
        if L in (lengths[0], L_max):
            per_char[L] = per_pos.reshape(len(blocks), -1)  # (blocks, L_max): block order kept
    if set_length and len(lengths) > 1:  # the short-window reference of a scaled row uses the long row's scaling
        per_char[lengths[0]] = per_position(lengths[0]).reshape(len(blocks), -1)
    return losses, per_char, time.perf_counter() - t0


@torch.no_grad()
def cached_vs_full(model, val_ids, L: int, n_windows: int) -> dict:
    """Mean loss of the first n_windows windows of length L scored by one full forward and
    by feeding one token at a time through the KV cache (what generate() does)."""
    full = lm_eval.window_losses(model, val_ids, L, n_windows).mean().item()
    device = next(model.parameters()).device
    ids = val_ids[:n_windows * L + 1]
    x = torch.stack([ids[w * L:(w + 1) * L] for w in range(n_windows)]).to(device)          # (N, L)
    y = torch.stack([ids[w * L + 1:(w + 1) * L + 1] for w in range(n_windows)]).to(device)  # (N, L)
    model.eval()
    cache, total = None, 0.0
    for t in range(L):
        out = model(x[:, t:t + 1], cache=cache)  # logits (N, 1, V); cache grows by one position
        cache = out.cache
        total += F.cross_entropy(out.logits[:, 0].float(), y[:, t], reduction="sum").item()
    cached = total / (n_windows * L)
    return {"length": L, "windows": n_windows, "loss_full": full, "loss_cached": cached,
            "difference": cached - full}
