"""Rotary position embedding, RoPE (方案 C：RoPE).

Paper: Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding".

Each pair of dimensions of q and k (never v) is turned by an angle proportional to the
token's position m. For pair i with frequency theta_i = base^(-2i/d):

    q'_a = q_a cos(m theta_i) - q_b sin(m theta_i)
    q'_b = q_a sin(m theta_i) + q_b cos(m theta_i)

Then q'_m . k'_n = sum_i Re[ (q_a + i q_b)(k_a - i k_b) e^{i (m - n) theta_i} ], which
depends on m and n only through m - n: attention sees relative positions.

Conventions (both are used by real models; the choice changes which (a, b) form a pair):
  * pairing="adjacent" (default): a = 2i, b = 2i+1. The tutorial, RoFormer and Meta's
    original Llama code (complex multiplication on adjacent pairs).
  * pairing="half": a = i, b = i + d/2, computed with rotate_half. GPT-NeoX and Hugging
    Face Llama. Same map up to a fixed permutation of the head dimensions.
  Positive angle = counter-clockwise rotation (the textbook sign).

Where this differs from the tutorial's `precompute_freqs` / `apply_rope`:
  * the tutorial precomputes a fixed max_len table and slices cos[:T], so cached decoding
    would rotate a new token at position 300 by angle 0 (position 0). Here `offset` picks
    rows offset .. offset+T-1, and `RotaryEmbedding` grows its table on demand;
  * angles are computed in float32 even when the model runs in bf16/fp16 (low precision
    angles at m ~ 4096 are off by whole radians), and cast to x's dtype only at the end;
  * an odd head dimension raises a clear error instead of a shape mismatch.

Copyable alone: imports torch only.
"""
import torch
import torch.nn as nn

PAIRINGS = ("adjacent", "half")


def rope_inv_freq(dim: int, theta: float = 10000.0) -> torch.Tensor:
    """theta_i = base^(-2i/d) for i = 0 .. d/2-1, float32, shape (d/2,)."""
    if dim % 2:
        raise ValueError(f"RoPE rotates pairs of dimensions, so the head dim must be even; got {dim}")
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))


def precompute_freqs(dim: int, max_len: int, theta: float = 10000.0, offset: int = 0,
                     inv_freq: torch.Tensor = None, device=None):
    """cos and sin of m * theta_i for m = offset .. offset+max_len-1: two (max_len, d/2) float32 tables."""
    if inv_freq is None:
        inv_freq = rope_inv_freq(dim, theta)
    inv_freq = inv_freq.to(device=device, dtype=torch.float32)
    m = torch.arange(offset, offset + max_len, device=device, dtype=torch.float32)  # (T,)
    angles = torch.outer(m, inv_freq)  # (T,) x (d/2,) -> (T, d/2)
    return torch.cos(angles), torch.sin(angles)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dim: a +90 degree turn of each (i, i+d/2) pair."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               pairing: str = "adjacent") -> torch.Tensor:
    """Rotate x: (B, H, T, D) by the angles whose cos/sin are (T, D/2). Returns x's dtype."""
    D = x.shape[-1]
    if D % 2:
        raise ValueError(f"RoPE needs an even head dim, got {D}")
    if cos.shape[-2:] != (x.shape[-2], D // 2):
        raise ValueError(f"cos/sin must be (T={x.shape[-2]}, D/2={D // 2}), got {tuple(cos.shape)}")
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    if pairing == "adjacent":
        a, b = x[..., 0::2], x[..., 1::2]  # (B, H, T, D/2) each: dims 2i and 2i+1
        # a' = a cos - b sin ;  b' = a sin + b cos
        out = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1)  # (B, H, T, D/2, 2)
        return out.flatten(-2)  # (B, H, T, D/2, 2) -> (B, H, T, D), back to 2i, 2i+1 order
    if pairing == "half":
        # same rotation on pairs (i, i + D/2):  x' = x * [cos, cos] + rotate_half(x) * [sin, sin]
        cos2, sin2 = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)  # (T, D)
        return x * cos2 + rotate_half(x) * sin2
    raise ValueError(f"unknown RoPE pairing {pairing!r}; use one of {PAIRINGS}")


class RotaryEmbedding(nn.Module):
    """Holds the cos/sin tables; forward(q, k, offset) rotates q and k of shape (B, H, T, D).

    `cos_sin(T, offset)` returns the float32 (T, D/2) tables for positions offset ..
    offset+T-1, growing the cached table if needed (buffers are persistent=False: they are
    a pure function of head_dim and theta, so checkpoints do not carry them).
    """

    def __init__(self, head_dim: int, theta: float = 10000.0, pairing: str = "adjacent",
                 init_len: int = 256, scaling: dict = None):
        super().__init__()
        if scaling is not None:
            raise NotImplementedError("RoPE scaling is not implemented yet")
        self.scaling = scaling
        if pairing not in PAIRINGS:
            raise ValueError(f"unknown RoPE pairing {pairing!r}; use one of {PAIRINGS}")
        self.head_dim, self.theta, self.pairing = head_dim, theta, pairing
        self.register_buffer("inv_freq", rope_inv_freq(head_dim, theta), persistent=False)
        cos, sin = precompute_freqs(head_dim, init_len, inv_freq=self.inv_freq)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def cos_sin(self, T: int, offset: int = 0):
        need = offset + T
        if need > self.cos.shape[0]:
            grown = max(need, 2 * self.cos.shape[0])
            self.cos, self.sin = precompute_freqs(self.head_dim, grown, inv_freq=self.inv_freq,
                                                  device=self.inv_freq.device)
        return self.cos[offset:need], self.sin[offset:need]  # (T, D/2) each

    def forward(self, q: torch.Tensor, k: torch.Tensor, offset: int = 0):
        cos, sin = self.cos_sin(q.shape[-2], offset)
        return apply_rope(q, cos, sin, self.pairing), apply_rope(k, cos, sin, self.pairing)


def _self_check() -> None:
    torch.manual_seed(0)
    D = 16
    q, k = torch.randn(D, dtype=torch.float64), torch.randn(D, dtype=torch.float64)

    def score(m, n):
        cq, sq = precompute_freqs(D, 1, offset=m)
        ck, sk = precompute_freqs(D, 1, offset=n)
        qm = apply_rope(q.view(1, 1, 1, D), cq.double(), sq.double())
        kn = apply_rope(k.view(1, 1, 1, D), ck.double(), sk.double())
        return (qm * kn).sum().item()

    pairs = [(3, 0), (10, 7), (1003, 1000), (4099, 4096)]
    s = [score(m, n) for m, n in pairs]
    spread = max(s) - min(s)
    assert spread < 1e-3, s
    print(f"ok  q_m . k_n for m - n = 3 at m = 3, 10, 1003, 4099: {', '.join(f'{v:.5f}' for v in s)}")
    x = torch.randn(2, 4, 32, D)
    cos, sin = precompute_freqs(D, 32)
    for p in PAIRINGS:
        ratio = (apply_rope(x, cos, sin, p).norm(dim=-1) / x.norm(dim=-1)).sub(1).abs().max().item()
        assert ratio < 1e-5
    print("ok  rotation keeps every vector's norm (both pairings)")
    rope = RotaryEmbedding(D, init_len=8)
    c, s_ = rope.cos_sin(4, offset=300)
    C, S = precompute_freqs(D, 304)
    assert torch.equal(c, C[300:]) and torch.equal(s_, S[300:])
    print(f"ok  offset=300 equals rows 300..303 of a longer table (cache grew to {rope.cos.shape[0]} rows)")
    try:
        RotaryEmbedding(15)
    except ValueError as e:
        print(f"ok  odd head dim raises: {e}")


if __name__ == "__main__":
    _self_check()
