"""Rotary position embedding, RoPE (方案 C：RoPE).

Paper: Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding".

Each pair of dimensions (a, b) of q and k (never v) is turned by an angle proportional to
the token's position m. For pair i with frequency θ_i = base^(-2i/d):

    q'_a = q_a cos(m θ_i) - q_b sin(m θ_i)
    q'_b = q_a sin(m θ_i) + q_b cos(m θ_i)

so q'_m . k'_n = sum_i Re[(q_a + i q_b)(k_a - i k_b) e^{i (m - n) θ_i}] depends on m - n only.

Conventions:
  * pairing="adjacent" (default): a = 2i, b = 2i+1 (the tutorial, RoFormer, Meta's Llama);
    pairing="half": a = i, b = i + d/2 with rotate_half (GPT-NeoX, Hugging Face Llama). The
    same map up to a fixed permutation of the head dims. A positive angle turns counter-clockwise.
  * Angles are float32 whatever the model's dtype; only the result is cast to x's dtype.
  * `offset` is the position of the first row: cached decoding turns token 300 by 300 θ_i.

Plain RoPE first, complete on its own, then "context extension". Imports only torch and math.
"""
import math

import torch
import torch.nn as nn

PAIRINGS = ("adjacent", "half")


def rope_inv_freq(dim: int, base: float = 10000.0) -> torch.Tensor:
    """θ_i = base^(-2i/d) for i = 0 .. d/2-1, float32, shape (d/2,)."""
    if dim % 2:
        raise ValueError(f"RoPE rotates pairs of dimensions, so the head dim must be even; got {dim}")
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))


def precompute_freqs(dim: int, max_len: int, base: float = 10000.0, offset: int = 0,
                     inv_freq: torch.Tensor = None, device=None, attention_factor: float = 1.0):
    """cos and sin of m θ_i for m = offset .. offset+max_len-1: two (max_len, d/2) float32 tables.

    inv_freq replaces rope_inv_freq(dim, base); attention_factor (1 but for yarn) multiplies both."""
    if inv_freq is None:
        inv_freq = rope_inv_freq(dim, base)
    inv_freq = inv_freq.to(device=device, dtype=torch.float32)
    m = torch.arange(offset, offset + max_len, device=device, dtype=torch.float32)  # (T,)
    angles = torch.outer(m, inv_freq)  # (T,) x (d/2,) -> (T, d/2)
    if attention_factor == 1.0:
        return torch.cos(angles), torch.sin(angles)
    return attention_factor * torch.cos(angles), attention_factor * torch.sin(angles)


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
        if x.dtype in (torch.float32, torch.float64) and x.device.type in ("cpu", "cuda"):
            # Fast path (Meta's Llama form, fewer kernels than the form below): pair (a, b) is the
            # number a + ib, and (a + ib)(cos + i sin) = (a cos - b sin) + i(a sin + b cos).
            if x.storage_offset() % 2 or any(st % 2 for st in x.stride()[:-1]) or x.stride(-1) != 1:
                x = x.clone(memory_format=torch.contiguous_format)  # view_as_complex needs even strides
            xc = torch.view_as_complex(x.reshape(*x.shape[:-1], D // 2, 2))  # (B, H, T, D) -> (B, H, T, D/2) complex
            out = torch.view_as_real(xc * torch.complex(cos, sin))          # (B, H, T, D/2) -> (B, H, T, D/2, 2)
            return out.flatten(-2)                                           # (B, H, T, D/2, 2) -> (B, H, T, D)
        # fp16/bf16 (no complex type for them on most backends), or other devices: the rotation written out.
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

    cos_sin(T, offset): the float32 (T, D/2) tables for positions offset .. offset+T-1, grown on
    demand; persistent=False buffers, as they are a pure function of head_dim, base and scaling."""

    def __init__(self, head_dim: int, base: float = 10000.0, pairing: str = "adjacent",
                 init_len: int = 256, scaling: dict = None):
        super().__init__()
        if pairing not in PAIRINGS:
            raise ValueError(f"unknown RoPE pairing {pairing!r}; use one of {PAIRINGS}")
        self.head_dim, self.base, self.pairing = head_dim, base, pairing
        self.scaling = None if scaling is None else check_scaling(scaling)  # defaults filled in
        inv_freq, self.attention_factor = self._inv_freq()
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        cos, sin = precompute_freqs(head_dim, init_len, inv_freq=inv_freq, attention_factor=self.attention_factor)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        sc = self.scaling or {}  # dynamic NTK: a total length offset + T above L0 gets its own table
        self.dynamic_from = sc["original_max_len"] if sc.get("rope_type") == "dynamic" else None
        self.dyn_len = None  # the total length the dyn_cos/dyn_sin tables were built for
        self.register_buffer("dyn_cos", torch.empty(0, head_dim // 2), persistent=False)
        self.register_buffer("dyn_sin", torch.empty(0, head_dim // 2), persistent=False)

    def _inv_freq(self, seq_len: int = None):
        """(inv_freq (D/2,) float32, attention_factor); seq_len, the total length, matters only for dynamic."""
        if self.scaling is None:
            return rope_inv_freq(self.head_dim, self.base), 1.0
        return _scaled_inv_freq(self.head_dim, self.base, self.scaling, seq_len)

    def cos_sin(self, T: int, offset: int = 0):
        need = offset + T
        if self.dynamic_from is not None and need > self.dynamic_from:
            if need != self.dyn_len:  # the base depends on the length: rebuild for this one
                inv, _ = self._inv_freq(seq_len=need)
                self.dyn_cos, self.dyn_sin = precompute_freqs(self.head_dim, need, inv_freq=inv,
                                                              device=self.inv_freq.device)
                self.dyn_len = need
            return self.dyn_cos[offset:need], self.dyn_sin[offset:need]  # (T, D/2) each
        if need > self.cos.shape[0]:
            grown = max(need, 2 * self.cos.shape[0])
            self.cos, self.sin = precompute_freqs(self.head_dim, grown, inv_freq=self.inv_freq,
                                                  device=self.inv_freq.device, attention_factor=self.attention_factor)
        return self.cos[offset:need], self.sin[offset:need]  # (T, D/2) each

    def _apply(self, fn, *args, **kwargs):
        # Module.to(dtype), .half(), .bfloat16() cast every floating buffer, but the angles must stay
        # float32 (bf16 angles at m ~ 4000 are off by radians): rebuild them, on the device fn chose.
        super()._apply(fn, *args, **kwargs)
        if self.inv_freq.dtype != torch.float32:
            device = self.inv_freq.device
            self.inv_freq = self._inv_freq()[0].to(device)
            self.cos, self.sin = precompute_freqs(self.head_dim, self.cos.shape[0], inv_freq=self.inv_freq,
                                                  device=device, attention_factor=self.attention_factor)
            self.dyn_cos = self.dyn_sin = torch.empty(0, self.head_dim // 2, device=device)
            self.dyn_len = None
        return self

    def forward(self, q: torch.Tensor, k: torch.Tensor, offset: int = 0):
        cos, sin = self.cos_sin(q.shape[-2], offset)
        return apply_rope(q, cos, sin, self.pairing), apply_rope(k, cos, sin, self.pairing)


# ---- context extension (RoPE scaling) ----------------------------------------------------
# Trained at length L0, a model has seen the angles m θ_i only for m < L0: pairs that turn less
# than once in L0 meet new angles beyond it. A scaling changes the frequencies (yarn also the
# attention temperature) so that a longer context reuses familiar angles. The dict uses Hugging
# Face's rope_type names (HF's original_max_position_embeddings is original_max_len here):
#   {"rope_type": one of ROPE_TYPES, "factor": s >= 1 (target length / L0),
#    "original_max_len": L0 (needed by dynamic, yarn, llama3), + SCALING_DEFAULTS[rope_type]'s keys}
# d is the rotated head dim, s the factor.

ROPE_TYPES = ("linear", "ntk", "dynamic", "yarn", "llama3")
# Optional keys of each rope_type with their defaults; None = computed from the factor.
SCALING_DEFAULTS = {"linear": {}, "ntk": {}, "dynamic": {},
                    "yarn": {"beta_fast": 32.0, "beta_slow": 1.0, "attention_factor": None},
                    "llama3": {"low_freq_factor": 1.0, "high_freq_factor": 4.0}}
NEEDS_ORIGINAL_LEN = ("dynamic", "yarn", "llama3")


def check_scaling(scaling: dict) -> dict:
    """Validate a scaling dict; return a copy with every default filled in. Raises ValueError."""
    if not isinstance(scaling, dict):
        raise ValueError(f"RoPE scaling must be a dict like {{'rope_type': 'yarn', 'factor': 4.0, "
                         f"'original_max_len': 256}} or None, got {type(scaling).__name__}")
    kind = scaling.get("rope_type")
    if kind not in ROPE_TYPES:
        raise ValueError(f"unknown rope_type {kind!r}; use one of {', '.join(ROPE_TYPES)} (Hugging Face names)")
    allowed = {"rope_type", "factor", "original_max_len", *SCALING_DEFAULTS[kind]}
    extra = sorted(set(scaling) - allowed)
    if extra:
        hint = " (call it original_max_len here)" if "original_max_position_embeddings" in extra else ""
        raise ValueError(f"rope_type {kind!r} does not take {extra}{hint}; it takes {sorted(allowed)}")
    s = scaling.get("factor")
    if isinstance(s, bool) or not isinstance(s, (int, float)) or not s >= 1:  # `not >=` also catches nan
        raise ValueError(f"RoPE scaling factor must be a number >= 1 (target length / training length), got {s!r}")
    out = {**SCALING_DEFAULTS[kind], "original_max_len": None, **scaling, "factor": float(s)}
    L0 = out["original_max_len"]
    if L0 is None and kind in NEEDS_ORIGINAL_LEN:
        raise ValueError(f"rope_type {kind!r} needs original_max_len, the sequence length the model was trained at")
    if L0 is not None and (isinstance(L0, bool) or not isinstance(L0, int) or L0 < 1):
        raise ValueError(f"original_max_len must be a positive int (the training length), got {L0!r}")
    if kind == "yarn" and not out["beta_fast"] > out["beta_slow"] > 0:
        raise ValueError(f"yarn needs beta_fast > beta_slow > 0, got {out['beta_fast']} and {out['beta_slow']}")
    if kind == "yarn" and out["attention_factor"] is None:
        out["attention_factor"] = yarn_attention_factor(out["factor"])
    if kind == "llama3" and not out["high_freq_factor"] > out["low_freq_factor"] > 0:
        raise ValueError(f"llama3 needs high_freq_factor > low_freq_factor > 0, got "
                         f"{out['high_freq_factor']} and {out['low_freq_factor']}")
    return out


def ntk_base(base: float, factor: float, dim: int) -> float:
    """ntk, "NTK-aware" static scaling (bloc97, 2023; YaRN paper 3.1; HF has no static type)."""
    # base' = base * s^(d/(d-2))
    # Pair 0 turns at 1 rad/token for any base (kept); the slowest, i = d/2 - 1, at
    # base'^(-(d-2)/d) = base^(-(d-2)/d) / s (interpolated); the others in between.
    if dim < 4:
        raise ValueError(f"NTK scaling changes the base, which needs at least two pairs (head dim >= 4), got {dim}")
    return base * factor ** (dim / (dim - 2))


def dynamic_ntk_base(base: float, factor: float, dim: int, seq_len: int, original_max_len: int) -> float:
    """dynamic, dynamic NTK (emozilla, 2023; YaRN paper 3.3), as HF's _compute_dynamic_ntk_parameters."""
    # base' = base                                      if L <= L0
    # base' = base * (s L / L0 - (s - 1))^(d/(d-2))     if L >  L0,   L = offset + T (None = L0)
    # The bracket, 1 + s (L / L0 - 1), is 1 at L0: plain RoPE while the text fits in L0, then static
    # NTK with a growing factor. Cached keys keep the base they were rotated with, so beyond L0
    # cached decoding differs slightly from a full forward (as in HF).
    beyond = seq_len is not None and seq_len > original_max_len
    return ntk_base(base, factor * seq_len / original_max_len - (factor - 1) if beyond else 1.0, dim)


def yarn_correction_dim(num_rotations: float, dim: int, base: float, original_max_len: int) -> float:
    """The (fractional) pair index that turns num_rotations times over the training length."""
    # Pair i turns L0 θ_i / (2 pi) = L0 / (2 pi base^(2i/d)) times in L0. Set that to r:
    #   i(r) = d * ln(L0 / (2 pi r)) / (2 ln base)
    return dim * math.log(original_max_len / (num_rotations * 2 * math.pi)) / (2 * math.log(base))


def yarn_correction_range(dim: int, base: float, original_max_len: int,
                          beta_fast: float = 32.0, beta_slow: float = 1.0):
    """(low, high) pair indices of YaRN's ramp: pairs <= low are kept, pairs >= high interpolated."""
    # low = floor(i(beta_fast)), high = ceil(i(beta_slow)), clipped to [0, d - 1] as in HF
    low = math.floor(yarn_correction_dim(beta_fast, dim, base, original_max_len))
    high = math.ceil(yarn_correction_dim(beta_slow, dim, base, original_max_len))
    return max(low, 0), min(high, dim - 1)


def yarn_ramp(low: float, high: float, n: int) -> torch.Tensor:
    """r_i for i = 0 .. n-1: 0 up to low (keep), 1 from high on (interpolate), linear between."""
    # r_i = clamp((i - low) / (high - low), 0, 1)
    if low == high:
        high += 0.001  # as in HF: avoid dividing by zero
    return ((torch.arange(n, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)


def yarn_attention_factor(factor: float) -> float:
    """YaRN's sqrt(1/t): multiplies cos and sin, so q.k (the logits) by its square."""
    # sqrt(1/t) = 0.1 ln(s) + 1   (YaRN eq. 22, fitted on Llama; 1 at s = 1)
    return 0.1 * math.log(factor) + 1.0


def llama3_inv_freq(inv_freq: torch.Tensor, factor: float, original_max_len: int,
                    low_freq_factor: float = 1.0, high_freq_factor: float = 4.0) -> torch.Tensor:
    """llama3 (Meta 2024, "The Llama 3 Herd of Models", Llama 3.1 code): bands of plain inv_freq (d/2,)."""
    # wavelength w_i = 2 pi / θ_i against the training length L0:
    #   w_i < L0 / high_freq_factor   -> θ_i                    (many turns in L0: keep)
    #   w_i > L0 / low_freq_factor    -> θ_i / s                (about a turn or less: interpolate)
    #   otherwise θ_i' = (1 - g) θ_i / s + g θ_i,  g = (L0 / w_i - low) / (high - low)
    # g > 1 in the first band and g < 0 in the second, so clamping g covers all three.
    wavelen = 2 * math.pi / inv_freq
    g = ((original_max_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)).clamp(0, 1)
    return torch.lerp(inv_freq / factor, inv_freq, g)  # lerp(a, b, g) = a + g (b - a), exact at g = 0 and 1


def _scaled_inv_freq(dim: int, base: float, sc: dict, seq_len: int = None):
    """(inv_freq (d/2,) float32, attention_factor) for a dict check_scaling already returned."""
    inv = rope_inv_freq(dim, base)
    kind, s, L0 = sc["rope_type"], sc["factor"], sc["original_max_len"]
    if kind == "linear":  # Position Interpolation (Chen et al. 2023, "Extending Context Window of
        # Large Language Models via Positional Interpolation"; kaiokendev's SuperHOT):
        return inv / s, 1.0  # θ_i' = θ_i / s: position m s turns as far as m did, inside [0, L0)
    if kind == "ntk":
        return rope_inv_freq(dim, ntk_base(base, s, dim)), 1.0
    if kind == "dynamic":
        return rope_inv_freq(dim, dynamic_ntk_base(base, s, dim, seq_len, L0)), 1.0
    if kind == "yarn":
        # yarn (Peng et al. 2023, "YaRN: Efficient Context Window Extension of Large Language Models"):
        # NTK-by-parts, pairs turning > beta_fast times in L0 kept, < beta_slow interpolated, a ramp between,
        # θ_i' = (1 - r_i) θ_i + r_i θ_i / s   (HF: interp * (1 - mask) + extrap * mask, mask = 1 - r)
        low, high = yarn_correction_range(dim, base, L0, sc["beta_fast"], sc["beta_slow"])
        return torch.lerp(inv, inv / s, yarn_ramp(low, high, dim // 2)), sc["attention_factor"]
    return llama3_inv_freq(inv, s, L0, sc["low_freq_factor"], sc["high_freq_factor"]), 1.0


def scaled_inv_freq(dim: int, base: float, scaling: dict = None, seq_len: int = None):
    """(inv_freq, attention_factor) for a scaling dict, validated here (None = plain RoPE); seq_len for dynamic."""
    if scaling is None:
        return rope_inv_freq(dim, base), 1.0
    return _scaled_inv_freq(dim, base, check_scaling(scaling), seq_len)


def _self_check() -> None:
    torch.manual_seed(0)
    D = 16
    q, k = torch.randn(D, dtype=torch.float64), torch.randn(D, dtype=torch.float64)

    def score(m, n):  # q_m . k_n, in float64 from the float32 tables
        qm, kn = (apply_rope(v.view(1, 1, 1, D), *(t.double() for t in precompute_freqs(D, 1, offset=p)))
                  for v, p in ((q, m), (k, n)))
        return (qm * kn).sum().item()

    s = [score(m, n) for m, n in [(3, 0), (10, 7), (1003, 1000), (4099, 4096)]]
    assert max(s) - min(s) < 1e-3, f"q_m . k_n for m - n = 3 should not depend on m; spread {max(s) - min(s):.2e}"
    print(f"ok  q_m . k_n for m - n = 3 at m = 3, 10, 1003, 4099: {', '.join(f'{v:.5f}' for v in s)}")
    x = torch.randn(2, 4, 32, D)
    cos, sin = precompute_freqs(D, 32)
    for p in PAIRINGS:
        err = (apply_rope(x, cos, sin, p).norm(dim=-1) / x.norm(dim=-1)).sub(1).abs().max().item()
        assert err < 1e-5, f"{p}: rotation changed a norm by a relative {err:.2e}"
    print("ok  rotation keeps every vector's norm (both pairings)")
    rope = RotaryEmbedding(D, init_len=8)
    c, s_ = rope.cos_sin(4, offset=300)
    C, S = precompute_freqs(D, 304)
    assert torch.equal(c, C[300:]) and torch.equal(s_, S[300:]), "offset=300 must equal rows 300..303"
    print(f"ok  offset=300 equals rows 300..303 of a longer table (cache grew to {rope.cos.shape[0]} rows)")
    try:
        RotaryEmbedding(15)
    except ValueError as e:
        print(f"ok  odd head dim raises: {e}")
    else:
        raise AssertionError("RotaryEmbedding(15) should raise ValueError: odd head dim")
    x = torch.randn(1, 1, 64, 128)
    for t in ROPE_TYPES:  # dynamic is plain only up to L0, so L0 = the length here
        got = RotaryEmbedding(128, scaling={"rope_type": t, "factor": 1, "original_max_len": 64})(x, x)[0]
        assert torch.equal(got, RotaryEmbedding(128)(x, x)[0]), f"{t} with factor 1 should be plain RoPE within L0"
    print(f"ok  scaling with factor 1, within original_max_len, is plain RoPE for all {len(ROPE_TYPES)} types")


if __name__ == "__main__":
    _self_check()
