"""CoPE, contextual position encoding: positions counted by gates on q.k, as a scheme file (scheme "cope").

Paper: Golovneva, Wang, Weston and Sukhbaatar 2024, "Contextual Position Encoding: Learning to Count
What's Important". Query i does not count tokens but the keys its gates let through, and reads a learned
embedding at that fractional count:

    g_il = sigmoid(q_i . k_l / sqrt(D))                    (l <= i; the same q, k as attention)
    p_ij = min(sum_{l=j..i} g_il, npos - 1)                 (a count, 0 .. npos - 1, not an integer)
    z_ij = q_i . e[p_ij],  e[p] = (1 - w) e[floor p] + w e[ceil p],  w = p - floor p
    logit_ij = (q_i . k_j + z_ij) / sqrt(D)                 (-inf where j > i)

so the score bias is z_ij / sqrt(D). Both terms are divided, as the authors' code does by default; the
paper's printed snippet divides q_i . k_j alone (the code's --cope-nodiv), a position term sqrt(D) times
larger. One table e (D, npos) per layer, shared by the heads, started at zero; npos = training length + 1
(a count runs 0 .. 256 inside a window of 256), and every count past it reads e[npos - 1], as there. That
clamp hands longer windows no trained embedding: a count nears npos - 1 only when nearly every gate of a
full window is open, so e[npos - 1] stays near its zero start (docs/field.md gives the measured |e[n]|).

Checked against the authors' code (facebookresearch/RAM, projects/cope/src/cope/context_position.py,
ContextPosSelfAttn with its defaults: gates from the attention's own keys, the sum divided by sqrt(D)
after the position logit is added, npos = block size + 1, a zero init): tests/test_field_cope.py.
As there, the floor and ceiling of p carry no gradient; w does.

Conventions: causal only (the count runs over the keys up to the query). Cached decoding needs no state:
k holds the cached keys. A NoPE layer (nope_every) has no table: plain causal attention. Cost: each chunk
of queries computes its gates against every key it sees, O(T^2) per head as attention is, in float32.
Here: registered by lab/field.py (importing lab loads field/) (`--variants cope`); `python field/field_cope.py`
runs the self-check. Copied alone it needs torch only.
"""
import math

import torch
import torch.nn as nn

try:  # inside the repository the scheme registers itself; a copy alone works without it
    import schemes
except ImportError:
    schemes = None


def cope_counts(gate_logits: torch.Tensor, i0: int, j0: int, npos: int) -> torch.Tensor:
    """Gate logits q_i . k_l / sqrt(D) (B, H, R, C) of queries at positions i0.. against keys j0.. ->
    the counts p_ij (B, H, R, C), clamped at npos - 1; 0 where j > i."""
    i = torch.arange(i0, i0 + gate_logits.shape[-2], device=gate_logits.device)[:, None]  # (R, 1)
    j = torch.arange(j0, j0 + gate_logits.shape[-1], device=gate_logits.device)[None, :]  # (1, C)
    g = torch.sigmoid(gate_logits).masked_fill(j > i, 0.0)  # only keys l <= i count
    # p_ij = sum_{l >= j} g_il: a cumulative sum from the last key back
    return g.flip(-1).cumsum(-1).flip(-1).clamp(max=npos - 1)


def cope_logits(q: torch.Tensor, emb: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """q (B, H, R, D), the table e (D, npos), counts p (B, H, R, C) -> z_ij = q_i . e[p_ij] (B, H, R, C),
    e interpolated between the integer counts around p."""
    fixed = q @ emb                      # (B, H, R, D) @ (D, npos) -> (B, H, R, npos): q_i . e[n], every n
    lo, hi = p.floor().long(), p.ceil().long()  # (B, H, R, C), no gradient through the indices
    w = p - lo                           # (B, H, R, C), the weight of the upper count
    return fixed.gather(-1, hi) * w + fixed.gather(-1, lo) * (1 - w)  # (B, H, R, C)


class CoPE(nn.Module):
    """The position tables of every layer, (L, D, npos); score_bias is the hook."""

    def __init__(self, n_layer: int, head_dim: int, npos: int):
        super().__init__()
        self.npos = npos
        self.emb = nn.Parameter(torch.zeros(n_layer, head_dim, npos))  # (L, D, npos), the reference's zero init

    def score_bias(self, x, layer, offset: int, shared, past, q=None, k=None):
        """Per chunk: queries q[a:b] (positions offset+a ..) against keys k[s:e] -> z / sqrt(D), (B, H, b-a, e-s).
        No cache state: the cached keys are in k."""
        if layer.nope:
            return None, None
        scale = 1.0 / math.sqrt(q.shape[-1])
        emb = self.emb[layer.index].float()  # (D, npos)

        def rows(a, b, s, e):
            qa, ks = q[..., a:b, :].float(), k[..., s:e, :].float()        # (B, H, b-a, D), (B, H, e-s, D)
            p = cope_counts(qa @ ks.transpose(-2, -1) * scale, offset + a, s, self.npos)  # (B, H, b-a, e-s)
            bias = cope_logits(qa, emb, p) * scale                          # (B, H, b-a, e-s)
            i = torch.arange(offset + a, offset + b, device=q.device)[:, None]
            j = torch.arange(s, e, device=q.device)[None, :]
            return bias.masked_fill(j > i, float("-inf"))                  # the causal mask rides on the bias
        return rows, None


def _build(cfg) -> CoPE:
    return CoPE(cfg.n_layer, cfg.n_embd // cfg.n_head, cfg.train_len + 1)


def _self_check() -> None:
    # gates at 0 logits are 1/2: key j of query i counts (i - j + 1) / 2
    p = cope_counts(torch.zeros(1, 1, 4, 4), 0, 0, npos=100)
    want = torch.tensor([[0.5, 0, 0, 0], [1.0, 0.5, 0, 0], [1.5, 1.0, 0.5, 0], [2.0, 1.5, 1.0, 0.5]])
    assert torch.equal(p[0, 0], want), p
    print("ok  gates of 1/2: p_ij = (i - j + 1) / 2, and 0 past the query")
    emb = torch.arange(6.0)[None, :]          # D = 1, e[n] = n: z = q * p
    z = cope_logits(torch.ones(1, 1, 1, 1), emb, torch.tensor([[[[2.25, 4.0]]]]))
    assert torch.allclose(z, torch.tensor([[[[2.25, 4.0]]]])), z
    print("ok  a table linear in n is read back linear at fractional counts (2.25 -> 2.25)")
    assert cope_counts(torch.full((1, 1, 9, 9), 30.0), 0, 0, npos=4).max().item() == 3
    print("ok  counts stop at npos - 1")


if schemes is not None and __name__ != "__main__":  # deep pink: apart from learned's orange, beside it in figures
    schemes.register(schemes.Scheme("cope", "score bias from q and k (gated counts)", __file__, build=_build,
                                    score_bias=CoPE.score_bias, causal_only=True, colour="#ff1493"))

if __name__ == "__main__":
    import argparse  # --help prints this docstring; any argument is refused before the work starts
    argparse.ArgumentParser(description=__doc__ + "\nRun alone, it runs the self-check.",
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    _self_check()
