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

Layout: every tensor here is (B, H, T, D): batch, heads, positions, head dim; positions are read
on dim 2. Copied into a project:

    rope = RotaryEmbedding(head_dim=64)
    q = q.view(B, T, H, 64).transpose(1, 2)   # (B, T, H, D) -> (B, H, T, D): positions on dim 2
    k = k.view(B, T, H, 64).transpose(1, 2)
    q, k = rope(q, k)                         # turned by positions 0 .. T-1; v is never turned
    q1, k1 = rope(q1, k1, offset=T)           # decoding with a KV cache: the next token is position T

Without the transpose a (B, T, H, D) tensor would be turned along the heads; a tensor that is not
4-D, or whose last dim is not head_dim, is refused with one line.

Plain RoPE first, complete on its own: the file down to the first `# ----` fence works alone.
After it, with explicit arguments: two options (partial_rotary_factor, p-RoPE's rope_p), context
extension (linear, ntk, dynamic, yarn, llama3, longrope) and ScaledRotaryEmbedding, which takes them.
Hugging Face's config.json: rope_hf.py. Imports only torch and math.
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
                     inv_freq: torch.Tensor = None, device=None, theta: float = None):
    """cos and sin of m θ_i for m = offset .. offset+max_len-1: two (max_len, d/2) float32 tables.

    theta= is the tutorial's name for the base (θ_i are the frequencies here); inv_freq replaces θ_i."""
    if theta is not None:
        if base != 10000.0 and base != theta:
            raise ValueError(f"precompute_freqs got base={base} and theta={theta}, two names of the base; give one")
        base = theta
    if inv_freq is None:
        inv_freq = rope_inv_freq(dim, base)
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
    if D % 2 or cos.shape[-2:] != (x.shape[-2], D // 2):
        raise ValueError(f"RoPE needs an even head dim and (T, D/2) cos, sin; got {tuple(x.shape)}, {tuple(cos.shape)}")
    if pairing not in PAIRINGS:
        raise ValueError(f"unknown RoPE pairing {pairing!r}; use one of {PAIRINGS}")
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    if pairing == "half":
        # the same rotation on pairs (i, i + D/2):  x' = x * [cos, cos] + rotate_half(x) * [sin, sin]
        return x * torch.cat((cos, cos), dim=-1) + rotate_half(x) * torch.cat((sin, sin), dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]  # (B, H, T, D/2) each: dims 2i and 2i+1
    # a' = a cos - b sin ;  b' = a sin + b cos
    out = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1)  # (B, H, T, D/2, 2)
    return out.flatten(-2)  # (B, H, T, D/2, 2) -> (B, H, T, D), back to 2i, 2i+1 order


class RotaryEmbedding(nn.Module):
    """Holds the cos/sin tables; forward(q, k, offset) rotates q and k of shape (B, H, T, D).

    cos_sin(T, offset): the float32 (T, D/2) tables for positions offset .. offset+T-1, grown on demand;
    persistent=False buffers: a pure function of the arguments. A scaled RoPE changes frequencies(), tables()."""

    def __init__(self, head_dim: int, base: float = 10000.0, pairing: str = "adjacent", init_len: int = 256):
        super().__init__()
        if pairing not in PAIRINGS:
            raise ValueError(f"unknown RoPE pairing {pairing!r}; use one of {PAIRINGS}")
        self.head_dim, self.base, self.pairing = head_dim, base, pairing
        self.register_buffer("inv_freq", self.frequencies(), persistent=False)  # θ_i, (D/2,)
        cos, sin = self.tables(self.inv_freq, init_len)
        self.register_buffer("cos", cos, persistent=False)  # (init_len, D/2), grown by cos_sin
        self.register_buffer("sin", sin, persistent=False)

    def frequencies(self) -> torch.Tensor:
        """θ_i = base^(-2i/D), (D/2,) float32."""
        return rope_inv_freq(self.head_dim, self.base)

    def tables(self, inv_freq: torch.Tensor, n: int):
        """cos and sin of m θ_i for m = 0 .. n-1: (n, len(inv_freq)) float32 each."""
        return precompute_freqs(2 * len(inv_freq), n, inv_freq=inv_freq, device=inv_freq.device)

    def cos_sin(self, T: int, offset: int = 0):
        need = offset + T
        if need > self.cos.shape[0]:  # at least double, so decoding token by token rebuilds rarely
            self.cos, self.sin = self.tables(self.inv_freq, max(need, 2 * self.cos.shape[0]))
        return self.cos[offset:need], self.sin[offset:need]  # (T, D/2) each

    def _apply(self, fn, *args, **kwargs):
        # Module.to(dtype), .half(), .bfloat16() cast every floating buffer, but the angles must stay
        # float32 (bf16 angles at m ~ 4000 are off by radians): rebuild them, on the device fn chose.
        super()._apply(fn, *args, **kwargs)
        if self.inv_freq.dtype != torch.float32:
            self.inv_freq = self.frequencies().to(self.inv_freq.device)
            self.cos, self.sin = self.tables(self.inv_freq, self.cos.shape[0])
        return self

    def forward(self, q: torch.Tensor, k: torch.Tensor, offset: int = 0):
        """q, k: (B, H, T, D) -> both turned by positions offset .. offset+T-1 (read on dim 2)."""
        if q.dim() != 4 or k.dim() != 4 or q.shape[-2] != k.shape[-2]:
            raise ValueError(f"RoPE takes q and k as (B, H, T, D) with the same T (positions on dim 2); got "
                             f"{tuple(q.shape)} and {tuple(k.shape)}: a (B, T, H, D) tensor needs .transpose(1, 2)")
        if q.shape[-1] != self.head_dim or k.shape[-1] != self.head_dim:
            raise ValueError(f"q and k have head dim {q.shape[-1]} and {k.shape[-1]}, but this RotaryEmbedding was "
                             f"built for {self.head_dim}; a (B, T, C) tensor needs .view(B, T, H, D).transpose(1, 2)")
        cos, sin = self.cos_sin(q.shape[-2], offset)
        return apply_rope(q, cos, sin, self.pairing), apply_rope(k, cos, sin, self.pairing)


# ---- the form the model runs: one complex product ------------------------------------------

# tiny_lm.py's RoPE (ScaledRotaryEmbedding, below) turns q and k with rope_rotate: apply_rope's adjacent
# pairs as one complex product (Meta's Llama code), the same numbers in far fewer kernels forward and
# backward, wherever view_as_complex can read the pairs in place (float32/64); elsewhere (bf16, odd
# strides, the "half" pairing) apply_rope itself. tests/test_pos_rope.py holds the two equal.
#     pair (a, b) = a + ib:   (a + ib)(cos + i sin) = (a cos - b sin) + i (a sin + b cos)
def pairs_as_complex(x: torch.Tensor) -> bool:
    """Whether view_as_complex reads x's pairs in place: float32/64 on CPU or CUDA, even offset and strides."""
    return (x.dtype in (torch.float32, torch.float64) and x.device.type in ("cpu", "cuda") and x.stride(-1) == 1
            and x.storage_offset() % 2 == 0 and all(st % 2 == 0 for st in x.stride()[:-1]))


def apply_rope_complex(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """apply_rope with adjacent pairs, as a complex product; x (B, H, T, D) with pairs_as_complex(x)."""
    D = x.shape[-1]
    xc = torch.view_as_complex(x.unflatten(-1, (D // 2, 2)))  # (B, H, T, D) -> (B, H, T, D/2) complex
    rot = torch.complex(cos.to(x.dtype), sin.to(x.dtype))     # (T, D/2) complex
    return torch.view_as_real(xc * rot).flatten(-2)           # -> (B, H, T, D/2, 2) -> (B, H, T, D)


def rope_rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pairing: str = "adjacent") -> torch.Tensor:
    """The rotation the model runs: apply_rope_complex where it applies, else apply_rope (the same numbers)."""
    if pairing == "adjacent" and pairs_as_complex(x) and cos.shape[-2:] == (x.shape[-2], x.shape[-1] // 2):
        return apply_rope_complex(x, cos, sin)
    return apply_rope(x, cos, sin, pairing)


# ---- options: rotate only part of each head ----------------------------------------------
# Both leave channels of a head without position, exactly: dims past r are never touched, θ = 0 keeps a pair.
#   partial_rotary_factor f (HF's name; GPT-NeoX and Pythia 0.25, Phi-2 0.4): the first r = int(f D) dims turn
#     as an r-dim RoPE, θ_i = base^(-2i/r), scalings with d = r; "half" pairs i with i + r/2 inside them.
#     As in HF (q_rot / q_pass), yarn's attention factor scales those only.
#   rope_p = p (p-RoPE: Barbero et al. 2025, "Round and Round We Go! What makes Rotary Positional
#     Encodings useful?", ICLR): of the r/2 pairs, the fastest floor(p r/2) keep θ_i, the rest get 0.

def _is_number(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float))


def rotary_dim(head_dim: int, partial_rotary_factor: float = 1.0, rope_p: float = 1.0) -> int:
    """r = int(head_dim * partial_rotary_factor), the dims that turn, once both options are checked."""
    for name, v in (("partial_rotary_factor", partial_rotary_factor), ("rope_p", rope_p)):
        if not _is_number(v) or not 0 <= v <= 1:
            raise ValueError(f"{name} must be a number in [0, 1], got {v!r}")
    r = int(head_dim * partial_rotary_factor)  # int() rounds down, as in HF
    if partial_rotary_factor > 0 and (r < 2 or r % 2):
        raise ValueError(f"RoPE turns pairs of dims, so the rotated dim must be even and >= 2; got "
                         f"int(head dim {head_dim} * partial_rotary_factor {partial_rotary_factor}) = {r}")
    return r


def p_rope_inv_freq(inv_freq: torch.Tensor, p: float) -> torch.Tensor:
    """p-RoPE on the (r/2,) frequencies, fastest first: the last pairs get frequency 0."""
    # θ_i' = θ_i for i < floor(p r/2), else 0. Rounded down as the paper's apply_p_rope and HF's
    # "proportional" rope_type do (int(p * d // 2) pairs kept); p = 1 keeps them all.
    kept = math.floor(p * len(inv_freq))
    return torch.cat((inv_freq[:kept], torch.zeros_like(inv_freq[kept:])))


def apply_partial_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rot_dim: int,
                       pairing: str = "adjacent") -> torch.Tensor:
    """rope_rotate on x[..., :rot_dim] of x (B, H, T, D) with (T, rot_dim/2) tables; the rest passes through."""
    if rot_dim == x.shape[-1]:
        return rope_rotate(x, cos, sin, pairing)
    if rot_dim == 0:
        return x  # partial_rotary_factor 0: NoPE
    # (B, H, T, r) rotated, (B, H, T, D - r) as it was -> (B, H, T, D)
    return torch.cat((rope_rotate(x[..., :rot_dim], cos, sin, pairing), x[..., rot_dim:]), dim=-1)


# ---- context extension (RoPE scaling) ----------------------------------------------------
# Trained at length L0, a model has seen the angles m θ_i only for m < L0: pairs that turn less than once
# in L0 meet new angles beyond it. A scaling changes the frequencies (yarn and longrope also the attention
# temperature) so that a longer context reuses familiar angles. It is a dict (rope_hf.py reads HF's blocks):
#   {"rope_type": one of SCALING_TYPES, "factor": s >= 1 (target length / L0), "original_max_len": L0
#    (NEEDS_ORIGINAL_LEN types), + SCALING_DEFAULTS[rope_type]'s keys, + REQUIRED[rope_type]'s}; d, the rotated dim.

ROPE_TYPES = ("linear", "ntk", "dynamic", "yarn", "llama3")  # set by s (and L0) alone; "ntk" is ours, not HF's
SCALING_TYPES = ROPE_TYPES + ("longrope",)
# Optional keys of each rope_type with their defaults; attention_factor None = computed from s (and L0).
SCALING_DEFAULTS = {"linear": {}, "ntk": {}, "dynamic": {},
                    "yarn": {"beta_fast": 32.0, "beta_slow": 1.0, "truncate": True, "attention_factor": None},
                    "llama3": {"low_freq_factor": 1.0, "high_freq_factor": 4.0},
                    "longrope": {"attention_factor": None}}
REQUIRED = {"longrope": ("short_factor", "long_factor")}  # keys with no default: one number per rotated pair
NEEDS_ORIGINAL_LEN = ("dynamic", "yarn", "llama3", "longrope")
LENGTH_TYPES = ("dynamic", "longrope")  # frequencies set by the total length offset + T


def check_scaling(scaling: dict) -> dict:
    """Validate a scaling dict; return a copy with every default filled in (the attention factor too)."""
    if not isinstance(scaling, dict):
        raise ValueError(f"RoPE scaling must be a dict or None (see pos_rope.py), got {type(scaling).__name__}")
    kind = scaling.get("rope_type")
    if kind not in SCALING_TYPES:
        raise ValueError(f"unknown rope_type {kind!r}; use one of {', '.join(SCALING_TYPES)} (rope_hf.py reads HF's)")
    allowed = {"rope_type", "factor", "original_max_len", *SCALING_DEFAULTS[kind], *REQUIRED.get(kind, ())}
    extra, missing = sorted(set(scaling) - allowed), [k for k in REQUIRED.get(kind, ()) if k not in scaling]
    if extra:
        raise ValueError(f"rope_type {kind!r} does not take {extra}; it takes {sorted(allowed)}")
    if missing:
        raise ValueError(f"rope_type {kind!r} needs {missing} (one number per rotated pair)")
    out = {**SCALING_DEFAULTS[kind], "original_max_len": None, **scaling}
    s, L0 = out.get("factor"), out["original_max_len"]
    if s is None and not (kind == "longrope" and out["attention_factor"] is not None):  # longrope: s sets af only
        raise ValueError(f"{kind} needs " + ("factor or attention_factor" if kind == "longrope" else "a factor"))
    if s is not None and (not _is_number(s) or not s >= 1):  # also nan
        raise ValueError(f"RoPE scaling factor must be a number >= 1 (target length / training length), got {s!r}")
    out["factor"] = None if s is None else float(s)
    if L0 is None and kind in NEEDS_ORIGINAL_LEN:
        raise ValueError(f"rope_type {kind!r} needs original_max_len, the sequence length the model was trained at")
    if L0 is not None and (isinstance(L0, bool) or not isinstance(L0, int) or L0 < 1):
        raise ValueError(f"original_max_len must be a positive int (the training length), got {L0!r}")
    if kind == "yarn" and not (out["beta_fast"] > out["beta_slow"] > 0 and isinstance(out["truncate"], bool)):
        raise ValueError(f"yarn needs beta_fast > beta_slow > 0 and a bool truncate, got {out}")
    # high == low is a real config (Llama 4 Scout: both 1.0): no blend band, a step at w_i = L0 / low.
    if kind == "llama3" and not out["high_freq_factor"] >= out["low_freq_factor"] > 0:
        raise ValueError(f"llama3 needs high_freq_factor >= low_freq_factor > 0, got {out}")
    for k in REQUIRED.get(kind, ()):  # longrope's two lists of per-pair factors
        if not isinstance(out[k], (list, tuple)) or not out[k] or not all(_is_number(x) and x > 0 for x in out[k]):
            raise ValueError(f"longrope's {k} must be a list of numbers > 0, one per rotated pair, got {out[k]!r}")
        out[k] = [float(x) for x in out[k]]
    if kind == "longrope" and len(out["short_factor"]) != len(out["long_factor"]):
        raise ValueError(f"longrope's short_factor and long_factor must have one number per rotated pair each, got "
                         f"{len(out['short_factor'])} and {len(out['long_factor'])}")
    if out.get("attention_factor", 1.0) is None:  # yarn's and longrope's own default
        out["attention_factor"] = (yarn_attention_factor(out["factor"]) if kind == "yarn"
                                   else longrope_attention_factor(out["factor"], L0))
    af = out.get("attention_factor", 1.0)  # multiplies cos and sin, so the logits by af^2
    if not _is_number(af) or not af > 0:
        raise ValueError(f"{kind}'s attention_factor must be a number > 0, got {af!r}")
    return out


def ntk_base(base: float, factor: float, dim: int) -> float:
    """ntk, "NTK-aware" static scaling (bloc97, 2023; YaRN paper 3.1; HF has no static type)."""
    # base' = base * s^(d/(d-2)): pair 0 turns at 1 rad/token for any base (kept); the slowest,
    # i = d/2 - 1, at base'^(-(d-2)/d) = base^(-(d-2)/d) / s (interpolated); the others in between.
    if dim < 4:
        raise ValueError(f"NTK scaling changes the base, which needs at least two pairs (rotated dim >= 4), got {dim}")
    return base * factor ** (dim / (dim - 2))


def dynamic_ntk_base(base: float, factor: float, dim: int, seq_len: int, original_max_len: int) -> float:
    """dynamic, dynamic NTK (emozilla, 2023; YaRN paper 3.3), as HF's _compute_dynamic_ntk_parameters."""
    # base' = base                                      if L <= L0
    # base' = base * (s L / L0 - (s - 1))^(d/(d-2))     if L >  L0,   L = offset + T (None = L0)
    # The bracket, 1 + s (L / L0 - 1), is 1 at L0: plain RoPE within L0, then static NTK with a growing factor.
    # Cached keys keep the base they were turned with, so beyond L0 cached decoding differs a little (as in HF).
    beyond = seq_len is not None and seq_len > original_max_len
    return ntk_base(base, factor * seq_len / original_max_len - (factor - 1) if beyond else 1.0, dim)


def yarn_correction_range(dim: int, base: float, original_max_len: int,
                          beta_fast: float = 32.0, beta_slow: float = 1.0, truncate: bool = True):
    """(low, high) pair indices of YaRN's ramp: pairs <= low are kept, pairs >= high interpolated."""
    # Pair i turns L0 θ_i / (2 pi) times in L0, so r times at i(r) = d ln(L0 / (2 pi r)) / (2 ln base); low =
    # floor(i(beta_fast)), high = ceil(i(beta_slow)) (truncate=False, gpt-oss: unrounded), in [0, d - 1] as HF
    low, high = (dim * math.log(original_max_len / (r * 2 * math.pi)) / (2 * math.log(base))
                 for r in (beta_fast, beta_slow))
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dim - 1)


def yarn_ramp(low: float, high: float, n: int) -> torch.Tensor:
    """r_i for i = 0 .. n-1: 0 up to low (keep), 1 from high on (interpolate), linear between."""
    # r_i = clamp((i - low) / (high - low), 0, 1);  low == high: high + 0.001, as in HF
    high = high + 0.001 if low == high else high
    return ((torch.arange(n, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)


def yarn_attention_factor(factor: float) -> float:
    """YaRN's sqrt(1/t) = 0.1 ln(s) + 1 (eq. 22, fitted on Llama): on cos and sin, so q.k times its square."""
    return 0.1 * math.log(factor) + 1.0


def llama3_inv_freq(inv_freq: torch.Tensor, factor: float, original_max_len: int,
                    low_freq_factor: float = 1.0, high_freq_factor: float = 4.0) -> torch.Tensor:
    """llama3 (Meta 2024, "The Llama 3 Herd of Models", Llama 3.1 code): bands of plain inv_freq (d/2,)."""
    # wavelength w_i = 2 pi / θ_i against the training length L0:
    #   w_i < L0 / high_freq_factor   -> θ_i                    (many turns in L0: keep)
    #   w_i > L0 / low_freq_factor    -> θ_i / s                (about a turn or less: interpolate)
    #   otherwise θ_i' = (1 - g) θ_i / s + g θ_i,  g = (L0 / w_i - low) / (high - low)
    # g > 1 in the first band, < 0 in the second: clamping g covers all three. high == low (Llama 4 Scout):
    # no middle band, g is a step, 1 where L0 / w_i >= low, else 0.
    turns = original_max_len / (2 * math.pi / inv_freq)  # (d/2,) turns of each pair within L0: L0 / w_i
    if high_freq_factor == low_freq_factor:
        g = (turns >= low_freq_factor).to(inv_freq.dtype)
    else:
        g = ((turns - low_freq_factor) / (high_freq_factor - low_freq_factor)).clamp(0, 1)
    return torch.lerp(inv_freq / factor, inv_freq, g)  # lerp(a, b, g) = a + g (b - a), exact at g = 0 and 1


def longrope_attention_factor(factor: float, original_max_len: int) -> float:
    """LongRoPE's scale on cos and sin (HF's default): sqrt(1 + ln(s) / ln(L0)), 1 for s <= 1."""
    return 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original_max_len))


def longrope_factors(dim: int, base: float, factor: float, original_max_len: int):
    """(short_factor, long_factor), d/2 floats each, for a longrope block at our scale; our rule, since
    Phi-3's published factors fit its head dim, L0 and data: long_factor_i = 1 + (s - 1) r_i, YaRN's ramp r_i."""
    ramp = yarn_ramp(*yarn_correction_range(dim, base, original_max_len), dim // 2).double()
    return [1.0] * (dim // 2), (1 + (factor - 1) * ramp).tolist()


def scaling_inv_freq(dim: int, base: float, sc: dict = None, seq_len: int = None) -> torch.Tensor:
    """θ'_i (d/2,) float32 for a dict check_scaling returned (None: plain), at total length seq_len (None: L0)."""
    if sc is None or dim == 0:
        return rope_inv_freq(dim, base)
    inv, kind, s, L0 = rope_inv_freq(dim, base), sc["rope_type"], sc["factor"], sc["original_max_len"]
    if kind == "linear":  # Position Interpolation (Chen et al. 2023, "Extending Context Window of Large
        return inv / s  # Language Models via Positional Interpolation"): θ_i' = θ_i / s, m s turns as m did
    if kind == "ntk":
        return rope_inv_freq(dim, ntk_base(base, s, dim))
    if kind == "dynamic":
        return rope_inv_freq(dim, dynamic_ntk_base(base, s, dim, seq_len, L0))
    if kind == "yarn":
        # yarn (Peng et al. 2023, "YaRN: Efficient Context Window Extension of Large Language Models"):
        # NTK-by-parts, pairs turning > beta_fast times in L0 kept, < beta_slow interpolated, a ramp between,
        # θ_i' = (1 - r_i) θ_i + r_i θ_i / s   (HF: interp * (1 - mask) + extrap * mask, mask = 1 - r)
        low, high = yarn_correction_range(dim, base, L0, sc["beta_fast"], sc["beta_slow"], sc["truncate"])
        return torch.lerp(inv, inv / s, yarn_ramp(low, high, dim // 2))
    if kind == "longrope":
        # longrope (Ding et al. 2024, "LongRoPE: Extending LLM Context Window Beyond 2 Million Tokens"), as HF:
        # θ_i' = θ_i / λ_i, λ = long_factor if the total length offset + T is beyond L0, else short_factor
        bad = [k for k in REQUIRED["longrope"] if len(sc[k]) != dim // 2]
        if bad:
            raise ValueError(f"longrope's {bad[0]} has {len(sc[bad[0]])} numbers, but the rotated dim {dim} has "
                             f"{dim // 2} pairs")
        lam = sc["long_factor"] if seq_len is not None and seq_len > L0 else sc["short_factor"]
        return inv / torch.tensor(lam, dtype=torch.float32)
    return llama3_inv_freq(inv, s, L0, sc["low_freq_factor"], sc["high_freq_factor"])


class ScaledRotaryEmbedding(RotaryEmbedding):
    """RotaryEmbedding with the options and a scaling (a dict as above, checked here; None: plain). Sets
    rot_dim, rope_p, scaling (defaults filled), attention_factor; dynamic and longrope swap inv_freq and
    the tables for those of the total length offset + T once it passes L0 (dynamic_from)."""

    def __init__(self, head_dim: int, base: float = 10000.0, pairing: str = "adjacent", init_len: int = 256,
                 scaling: dict = None, partial_rotary_factor: float = 1.0, rope_p: float = 1.0):
        # set before RotaryEmbedding.__init__, whose frequencies() and tables() read them
        self.rot_dim = rotary_dim(head_dim, partial_rotary_factor, rope_p)
        self.rope_p, self.scaling = rope_p, None if scaling is None else check_scaling(scaling)
        sc = self.scaling or {}
        self.attention_factor = sc.get("attention_factor", 1.0)  # yarn's and longrope's: on cos and sin
        self.dynamic_from = sc["original_max_len"] if sc.get("rope_type") in LENGTH_TYPES else None
        super().__init__(head_dim, base, pairing, init_len)

    def frequencies(self, seq_len: int = None) -> torch.Tensor:
        """θ'_i, (r/2,) float32: the scaling's (at total length seq_len), then p-RoPE's zeros."""
        return p_rope_inv_freq(scaling_inv_freq(self.rot_dim, self.base, self.scaling, seq_len), self.rope_p)

    def tables(self, inv_freq: torch.Tensor, n: int):
        af, (cos, sin) = self.attention_factor, super().tables(inv_freq, n)
        return (cos, sin) if af == 1.0 else (af * cos, af * sin)

    def cos_sin(self, T: int, offset: int = 0):
        need = offset + T
        if self.dynamic_from is not None:  # frequencies of this total length (within L0: the plain set)
            inv = self.frequencies(seq_len=need if need > self.dynamic_from else None).to(self.inv_freq.device)
            if not torch.equal(inv, self.inv_freq):  # a new set: new tables
                self.inv_freq, (self.cos, self.sin) = inv, self.tables(inv, need)
        return super().cos_sin(T, offset)

    def forward(self, q: torch.Tensor, k: torch.Tensor, offset: int = 0):
        if q.shape[-1] != self.head_dim:
            raise ValueError(f"q has head dim {q.shape[-1]}, but this RotaryEmbedding was built for {self.head_dim}")
        cos, sin = self.cos_sin(q.shape[-2], offset)
        return tuple(apply_partial_rope(x, cos, sin, self.rot_dim, self.pairing) for x in (q, k))


def scaled_inv_freq(dim: int, base: float = 10000.0, scaling: dict = None, seq_len: int = None,
                    partial_rotary_factor: float = 1.0, rope_p: float = 1.0):
    """(θ'_i (r/2,) float32, attention_factor) of ScaledRotaryEmbedding with these arguments, at total length
    seq_len (dynamic, longrope)."""
    rope = ScaledRotaryEmbedding(dim, base, scaling=scaling, init_len=0, partial_rotary_factor=partial_rotary_factor,
                                 rope_p=rope_p)
    return rope.frequencies(seq_len), rope.attention_factor


def _self_check() -> None:
    torch.manual_seed(0)
    D, T = 16, 32
    q, k = torch.randn(D, dtype=torch.float64), torch.randn(D, dtype=torch.float64)

    def turn(v, m):  # v (D,) at position m, in float64 from the float32 tables
        return apply_rope(v.view(1, 1, 1, D), *(t.double() for t in precompute_freqs(D, 1, offset=m))).view(D)

    s = [(turn(q, m) @ turn(k, m - 3)).item() for m in (3, 10, 1003, 4099)]
    assert max(s) - min(s) < 1e-3, f"q_m . k_n for m - n = 3 should not depend on m; spread {max(s) - min(s):.2e}"
    print(f"ok  q_m . k_n for m - n = 3 at m = 3, 10, 1003, 4099: {', '.join(f'{v:.5f}' for v in s)}")
    x, (cos, sin) = torch.randn(2, 4, T, D), precompute_freqs(D, T)
    a, b = x[..., 0::2], x[..., 1::2]
    err = (apply_rope(x, cos, sin) - torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)).abs().max()
    assert err < 1e-6, f"apply_rope differs from the rotation written out by {err:.2e}"
    rope = RotaryEmbedding(D, init_len=8)
    assert torch.equal(rope(x, x, offset=300)[0], apply_rope(x, *(t[300:] for t in precompute_freqs(D, 300 + T))))
    print("ok  apply_rope is the rotation written out; offset=300 rotates as rows 300.. of a longer table")
    x = torch.randn(1, 2, 64, 128)
    for t in ROPE_TYPES:  # dynamic is plain only up to L0, so L0 = the length here
        got = ScaledRotaryEmbedding(128, scaling={"rope_type": t, "factor": 1, "original_max_len": 64})(x, x)[0]
        assert torch.equal(got, RotaryEmbedding(128)(x, x)[0]), f"{t} with factor 1 should be plain RoPE within L0"
    assert torch.equal(ScaledRotaryEmbedding(128, rope_p=0.0)(x, x)[0], x), "p-RoPE with p = 0 is NoPE"
    print(f"ok  factor 1 is plain RoPE for all {len(ROPE_TYPES)} scalings; rope_p 0 is NoPE")


if __name__ == "__main__":
    import argparse  # --help prints this docstring; any argument is refused before the work starts
    argparse.ArgumentParser(description=__doc__ + "\nRun alone, it runs the self-check.",
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    _self_check()
