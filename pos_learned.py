"""Learned absolute position embeddings (方案 A：Learned).

Paper: the lookup table of GPT-1/GPT-2 and BERT (Radford et al. 2018, "Improving
Language Understanding by Generative Pre-Training"; Devlin et al. 2018).

    x_t = token_emb(id_t) + P[t],   P is a trainable (max_len, dim) table

Convention: positions start at 0; the table has `max_len` rows and the model adds
row t to the token embedding at position t (input embedding, before the first block).

Where this differs from the tutorial's `LearnedPosModel`: it takes a position
`offset` (so cached decoding adds row offset+t, not row t) and asking for a row past
the table raises a ValueError that names the limit, instead of an IndexError deep
inside torch. A table can be larger than the training length: rows the optimizer never
touched keep their random initial values. Those "untrained rows" are exactly what the
tutorial means by "position 2000 looks up an untrained random row".

Copyable alone: imports torch only.
"""
import torch
import torch.nn as nn


class LearnedPositionalEmbedding(nn.Module):
    """A trainable table P of shape (max_len, dim); forward(T, offset) -> P[offset:offset+T]."""

    def __init__(self, max_len: int, dim: int, init_std: float = 0.02):
        super().__init__()
        if max_len < 1 or dim < 1:
            raise ValueError(f"max_len and dim must be positive, got max_len={max_len}, dim={dim}")
        self.max_len = max_len
        self.table = nn.Embedding(max_len, dim)  # (max_len, dim)
        nn.init.normal_(self.table.weight, mean=0.0, std=init_std)

    def forward(self, T: int, offset: int = 0) -> torch.Tensor:
        """Return the rows for positions offset .. offset+T-1, shape (T, dim)."""
        last = offset + T - 1
        if last >= self.max_len:
            raise ValueError(
                f"position {last} is beyond the learned table ({self.max_len} rows, positions "
                f"0..{self.max_len - 1}); a learned table cannot extrapolate - build the model "
                f"with a larger max_len or use sin/rope/alibi")
        pos = torch.arange(offset, offset + T, device=self.table.weight.device)  # (T,)
        return self.table(pos)  # (T, dim)


def _self_check() -> None:
    torch.manual_seed(0)
    pe = LearnedPositionalEmbedding(max_len=16, dim=8)
    full = pe(16)
    part = pe(4, offset=10)
    assert torch.equal(part, full[10:14]), "offset rows differ from slicing the full table"
    print("ok  offset=10 returns rows 10..13 of the table")
    try:
        pe(4, offset=14)
    except ValueError as e:
        print(f"ok  overflow raises: {e}")
    else:
        raise AssertionError("asking past the table did not raise")
    # Rows never used in a loss get no gradient: they stay at their initial values.
    before = pe.table.weight.detach().clone()
    opt = torch.optim.SGD(pe.parameters(), lr=1.0)
    pe(8).pow(2).sum().backward()
    opt.step()
    moved = (pe.table.weight - before).abs().sum(dim=1) > 0  # (max_len,)
    assert moved[:8].all() and not moved[8:].any(), "only rows 0..7 should move"
    print("ok  training on length 8 moves rows 0..7 only; rows 8..15 stay untrained")


if __name__ == "__main__":
    import argparse  # --help prints this docstring; any argument is refused before the work starts
    argparse.ArgumentParser(description=__doc__ + "\nRun alone, it runs the self-check.",
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    _self_check()
