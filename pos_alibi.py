"""ALiBi: Attention with Linear Biases (方案 D：ALiBi).

Paper: Press, Smith and Lewis 2022, "Train Short, Test Long: Attention with Linear Biases
Enables Input Length Extrapolation" (ICLR 2022).

No position vector anywhere: each head h adds a fixed penalty, linear in distance, to
the attention score of query i on key j:

    score_h(i, j) = q_i . k_j / sqrt(d) - m_h * (i - j)        (directional)
    score_h(i, j) = q_i . k_j / sqrt(d) - m_h * |i - j|        (symmetric option, bidirectional)

A causal (decoder) model also hides every key after the query. With causal=True the bias
carries that mask itself, so one tensor is all the attention needs:

    bias_h(i, j) = -m_h * (i - j)   if j <= i,     -inf   if j > i

Slopes m_h (paper, section 3): for n heads, n a power of two, the geometric sequence
starting at 2^(-8/n) with ratio 2^(-8/n): m_h = 2^(-8 h / n), h = 1..n. For 8 heads:
1/2, 1/4, ..., 1/256. If n is not a power of two, take the 2^k slopes of the closest
power of two below n, then every other slope of the 2^(k+1) sequence for the rest.
12 heads: 2^-1 .. 2^-8, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.

Where this differs from the tutorial's `alibi_bias`: its slopes 2^(-8 (h+1) / n) are the
paper's only when n is a power of two (for 12 heads they would be a different geometric
sequence); it builds a fixed (H, max_len, max_len) buffer (4096^2 floats per head, with a
silent cap); and it has no query offset, so a cached decoding step would treat the new
token as position 0. Here the bias is built for the (q_len, k_len) asked for, with query
positions k_len - q_len .. k_len - 1 (the last q_len positions, as in cached decoding).

-m (i - j) = m j - m i, and -m i is the same for every key in row i, so softmax gives the
same weights with the cheaper key-only bias m * j, shape (H, 1, T) (softmax is shift
invariant per row; this holds with or without a mask, but only the causal form can be
written this way: -m |i - j| cannot). The BLOOM / Hugging Face code uses that form.
`alibi_bias(..., form="key")` returns it; `alibi_key_bias`, after the fence, is the same shifted
by a constant so that float32 keeps it exact near the query: the form tiny_lm.py runs.

Copyable alone: imports torch and math only.
"""
import math

import torch
import torch.nn as nn


def alibi_slopes(n_head: int) -> torch.Tensor:
    """The paper's per-head slopes m_h, float32, shape (n_head,)."""
    if n_head < 1:
        raise ValueError(f"n_head must be >= 1, got {n_head}")

    def power_of_two(n):  # m_h = 2^(-8h/n), h = 1..n
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    closest = 2 ** math.floor(math.log2(n_head))
    slopes = power_of_two(closest)
    if closest < n_head:
        slopes += power_of_two(2 * closest)[0::2][: n_head - closest]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(n_head: int, q_len: int, k_len: int = None, symmetric: bool = False,
               form: str = "distance", slopes: torch.Tensor = None, device=None,
               causal: bool = False) -> torch.Tensor:
    """The score bias, float32.

    form="distance": -m_h * (i - j)  (or -m_h * |i - j| if symmetric), shape (H, q_len, k_len),
        query i at absolute position k_len - q_len + i, key j at position j.
        causal=True: -inf where j > i (the causal mask, aligned bottom-right for cached decoding).
    form="key": m_h * j, shape (H, 1, k_len); the same softmax as the causal distance form.
    """
    k_len = q_len if k_len is None else k_len
    if k_len < q_len:
        raise ValueError(f"k_len ({k_len}) must be >= q_len ({q_len}): queries are the last q_len positions")
    m = (alibi_slopes(n_head) if slopes is None else slopes).to(device=device, dtype=torch.float32)
    j = torch.arange(k_len, device=device, dtype=torch.float32)  # (Tk,)
    if form == "key":
        if symmetric or causal:
            raise ValueError("the key-only form m*j equals the causal (one-directional) -m(i-j) only under a causal "
                             "mask applied by the attention; it cannot be symmetric or carry the mask itself")
        return m[:, None, None] * j[None, None, :]  # (H, 1, 1) * (1, 1, Tk) -> (H, 1, Tk)
    if form != "distance":
        raise ValueError(f"unknown ALiBi form {form!r}; use 'distance' or 'key'")
    i = torch.arange(k_len - q_len, k_len, device=device, dtype=torch.float32)  # (Tq,)
    dist = i[:, None] - j[None, :]  # (Tq, 1) - (1, Tk) -> (Tq, Tk), i - j
    bias = -m[:, None, None] * (dist.abs() if symmetric else dist)[None]  # (H, 1, 1) * (1, Tq, Tk) -> (H, Tq, Tk)
    if causal:  # key j after query i: i - j < 0
        bias.masked_fill_(dist < 0, float("-inf"))  # (H, Tq, Tk) with a (Tq, Tk) mask; in place, the tensor is ours
    return bias


class ALiBi(nn.Module):
    """forward(q_len, k_len) -> the (H, q_len, k_len) bias to add to the attention scores
    (with causal=True, -inf on the keys after each query: the bias is the causal mask too)."""

    def __init__(self, n_head: int, symmetric: bool = False, causal: bool = False):
        super().__init__()
        self.n_head, self.symmetric, self.causal = n_head, symmetric, causal
        self.register_buffer("slopes", alibi_slopes(n_head), persistent=False)

    def forward(self, q_len: int, k_len: int = None) -> torch.Tensor:
        return alibi_bias(self.n_head, q_len, k_len, symmetric=self.symmetric, causal=self.causal,
                          slopes=self.slopes, device=self.slopes.device)

    def block(self, i0: int, i1: int, j0: int, j1: int) -> torch.Tensor:
        """alibi_bias_block with this module's slopes (and its causal mask if causal)."""
        return alibi_bias_block(self.slopes, i0, i1, j0, j1, symmetric=self.symmetric, causal=self.causal)

    def key_bias(self, k_len: int) -> torch.Tensor:
        """alibi_key_bias with this module's slopes: the causal form the model runs."""
        return alibi_key_bias(self.slopes, k_len)


# ---- one block of the bias, for attention that runs in chunks of queries --------------------

# The same bias for queries at positions i0..i1-1 against keys at j0..j1-1 only: a chunk of queries
# against the keys it can see, as attn_common.attn_sdpa asks for it. A model scoring 4096 positions
# then never holds the (H, 4096, 4096) tensor, only (H, chunk, keys) at a time, and the causal mask
# touches only the keys after the chunk's first query. alibi_bias(H, q_len, k_len) is the block
# (k_len - q_len, k_len, 0, k_len).
def alibi_bias_block(slopes: torch.Tensor, i0: int, i1: int, j0: int, j1: int, symmetric: bool = False,
                     causal: bool = False) -> torch.Tensor:
    """The bias of queries i0..i1-1 on keys j0..j1-1, float32 (H, i1-i0, j1-j0); causal: -inf where j > i."""
    i = torch.arange(i0, i1, device=slopes.device, dtype=torch.float32)  # (Tq,)
    j = torch.arange(j0, j1, device=slopes.device, dtype=torch.float32)  # (Tk,)
    if not symmetric:  # -m (i - j) = m j - m i: one broadcast subtraction, (H, 1, Tk) - (H, Tq, 1)
        m = slopes.float()[:, None]  # (H, 1)
        bias = (m * j)[:, None, :] - (m * i)[:, :, None]  # (H, Tq, Tk)
    else:
        bias = -slopes.float()[:, None, None] * (i[:, None] - j[None, :]).abs()[None]  # (H, Tq, Tk)
    c0 = max(0, i0 + 1 - j0)  # keys from j0 + c0 on come after some query
    if causal and c0 < j1 - j0:
        bias[..., c0:].masked_fill_(j[None, c0:] > i[:, None], float("-inf"))  # (H, Tq, Tk - c0), in place
    return bias


# ---- the form the model runs: one number per key ---------------------------------------------

# The causal model (tiny_lm.py) runs this form: a number per key that attention folds into q.k as one
# more head dimension (attn_common's per-key path), so the fused causal kernel runs with no (H, T, T)
# bias at all. It is the key form m_h j shifted by a constant of the whole call, m_h (k_len - 1):
#     bias_h(j) = m_h (j - (k_len - 1))  =  -m_h (i - j)  -  m_h (i - k_len + 1)
# and the last term is the same for every key of row i, which softmax ignores. The shift keeps the
# numbers near 0 at the keys nearest the last query, where float32 must resolve them (at 4096 keys,
# m_h j unshifted reaches 2048, whose float32 step is 2.4e-4). tests/test_pos_alibi.py holds it to
# alibi_bias under a causal softmax.
def alibi_key_bias(slopes: torch.Tensor, k_len: int) -> torch.Tensor:
    """m_h (j - k_len + 1) for keys j = 0..k_len-1, float32 (H, 1, k_len), every value <= 0."""
    j = torch.arange(k_len, device=slopes.device, dtype=torch.float32) - (k_len - 1)  # (Tk,), <= 0
    return slopes.float()[:, None, None] * j  # (H, 1, 1) * (Tk,) -> (H, 1, Tk)


def _self_check() -> None:
    s12 = alibi_slopes(12)
    want = [2.0 ** -e for e in (1, 2, 3, 4, 5, 6, 7, 8, 0.5, 1.5, 2.5, 3.5)]
    assert torch.allclose(s12, torch.tensor(want)), s12
    print("ok  12 heads: " + ", ".join(f"{v:.4g}" for v in s12.tolist()))
    b = alibi_bias(2, 4)
    assert b[0, 3, 1].item() == -0.0625 * 2  # head 0 slope 2^-4, i - j = 2
    print(f"ok  2 heads, bias[h=0, i=3, j=1] = -m*(i-j) = {b[0, 3, 1].item()}")
    full, last = alibi_bias(4, 10), alibi_bias(4, 3, 10)
    assert torch.equal(full[:, 7:], last)
    print("ok  q_len=3, k_len=10 equals the last 3 rows of the full 10x10 bias (cached decoding)")
    masked = alibi_bias(4, 3, 10, causal=True)
    assert torch.isneginf(masked[:, 0, 8:]).all() and torch.equal(masked[:, :, :8], last[:, :, :8])
    print("ok  causal=True: the same values, -inf on the keys after each query (bottom-right)")
    assert torch.equal(alibi_bias_block(alibi_slopes(4), 8, 10, 2, 9), full[:, 8:10, 2:9])
    assert torch.equal(alibi_bias_block(alibi_slopes(4), 7, 10, 2, 10, causal=True), masked[:, :, 2:])
    print("ok  alibi_bias_block(i 8..9, j 2..8) is that block of the full bias, with the mask if causal")
    torch.manual_seed(0)
    scores = torch.randn(4, 10, 10)
    causal = torch.ones(10, 10, dtype=torch.bool).tril()
    p1 = (scores + full).masked_fill(~causal, float("-inf")).softmax(-1)
    p2 = (scores + alibi_bias(4, 10, form="key")).masked_fill(~causal, float("-inf")).softmax(-1)
    err = (p1 - p2).abs().max().item()
    assert err < 1e-6, err
    print(f"ok  causal softmax with -m(i-j) and with m*j agree (max diff {err:.1e})")


if __name__ == "__main__":
    import argparse  # --help prints this docstring; any argument is refused before the work starts
    argparse.ArgumentParser(description=__doc__ + "\nRun alone, it runs the self-check.",
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    _self_check()
