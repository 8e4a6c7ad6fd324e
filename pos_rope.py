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

Plain RoPE first, complete on its own; then two options (partial_rotary_factor, p-RoPE's rope_p), "context
extension" (every Hugging Face rope_type) and RotaryEmbedding.from_hf_config(config.json). Imports only torch and math.
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
                     inv_freq: torch.Tensor = None, device=None, attention_factor: float = 1.0,
                     theta: float = None):
    """cos and sin of m θ_i for m = offset .. offset+max_len-1: two (max_len, d/2) float32 tables.

    theta= is the tutorial's name for the base (here θ_i are the frequencies); give base or theta.
    inv_freq replaces rope_inv_freq(dim, base); attention_factor (1 but for yarn) multiplies both."""
    if theta is not None:
        if base != 10000.0 and base != theta:
            raise ValueError(f"precompute_freqs got base={base} and theta={theta}, two names of the base; give one")
        base = theta
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

    cos_sin(T, offset): the float32 (T, r/2) tables for positions offset .. offset+T-1 (r = rot_dim,
    the dims that turn), grown on demand; persistent=False buffers: a pure function of the arguments."""

    def __init__(self, head_dim: int, base: float = 10000.0, pairing: str = "adjacent", init_len: int = 256,
                 scaling: dict = None, partial_rotary_factor: float = 1.0, rope_p: float = 1.0,
                 max_position_embeddings: int = None):
        super().__init__()
        if pairing not in PAIRINGS:
            raise ValueError(f"unknown RoPE pairing {pairing!r}; use one of {PAIRINGS}")
        # a Hugging Face block may also set rope_theta and partial_rotary_factor; scaling: checked, or None if plain
        base, partial_rotary_factor, rope_p, self.scaling = split_rope_settings(
            scaling, base, partial_rotary_factor, rope_p, max_position_embeddings)
        self.head_dim, self.base, self.pairing, self.rope_p = head_dim, base, pairing, rope_p
        self.rot_dim = rotary_dim(head_dim, partial_rotary_factor, rope_p)
        inv_freq, self.attention_factor = self._inv_freq()
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        cos, sin = precompute_freqs(self.rot_dim, init_len, inv_freq=inv_freq, attention_factor=self.attention_factor)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        sc = self.scaling or {}  # dynamic NTK, longrope: a total length offset + T above L0 gets its own table
        self.dynamic_from = sc["original_max_len"] if sc.get("rope_type") in LENGTH_TYPES else None
        self.register_buffer("dyn_inv", torch.empty(0), persistent=False)  # the frequencies of dyn_cos/dyn_sin
        self.register_buffer("dyn_cos", torch.empty(0, self.rot_dim // 2), persistent=False)
        self.register_buffer("dyn_sin", torch.empty(0, self.rot_dim // 2), persistent=False)

    def _inv_freq(self, seq_len: int = None):
        """(inv_freq (r/2,) float32, attention_factor); seq_len, the total length: dynamic and longrope only."""
        if self.scaling is None or self.rot_dim == 0:
            inv, factor = rope_inv_freq(self.rot_dim, self.base), 1.0
        else:
            inv, factor = _scaled_inv_freq(self.rot_dim, self.base, self.scaling, seq_len)
        return p_rope_inv_freq(inv, self.rope_p), factor

    def cos_sin(self, T: int, offset: int = 0):
        need = offset + T
        if self.dynamic_from is not None and need > self.dynamic_from:  # frequencies set by the total length
            inv, factor = self._inv_freq(seq_len=need)
            inv = inv.to(self.inv_freq.device)
            if need > self.dyn_cos.shape[0] or not torch.equal(inv, self.dyn_inv):  # new frequencies: rebuild
                self.dyn_cos, self.dyn_sin = precompute_freqs(self.rot_dim, need, inv_freq=inv, device=inv.device,
                                                              attention_factor=factor)
                self.dyn_inv = inv
            return self.dyn_cos[offset:need], self.dyn_sin[offset:need]  # (T, r/2) each
        if need > self.cos.shape[0]:
            grown = max(need, 2 * self.cos.shape[0])
            self.cos, self.sin = precompute_freqs(self.rot_dim, grown, inv_freq=self.inv_freq,
                                                  device=self.inv_freq.device, attention_factor=self.attention_factor)
        return self.cos[offset:need], self.sin[offset:need]  # (T, r/2) each

    def _apply(self, fn, *args, **kwargs):
        # Module.to(dtype), .half(), .bfloat16() cast every floating buffer, but the angles must stay
        # float32 (bf16 angles at m ~ 4000 are off by radians): rebuild them, on the device fn chose.
        super()._apply(fn, *args, **kwargs)
        if self.inv_freq.dtype != torch.float32:
            device = self.inv_freq.device
            self.inv_freq = self._inv_freq()[0].to(device)
            self.cos, self.sin = precompute_freqs(self.rot_dim, self.cos.shape[0], inv_freq=self.inv_freq,
                                                  device=device, attention_factor=self.attention_factor)
            self.dyn_cos = self.dyn_sin = torch.empty(0, self.rot_dim // 2, device=device)
            self.dyn_inv = torch.empty(0, device=device)
        return self

    def forward(self, q: torch.Tensor, k: torch.Tensor, offset: int = 0):
        if q.shape[-1] != self.head_dim:
            raise ValueError(f"q has head dim {q.shape[-1]}, but this RotaryEmbedding was built for {self.head_dim}")
        cos, sin = self.cos_sin(q.shape[-2], offset)
        return tuple(apply_partial_rope(x, cos, sin, self.rot_dim, self.pairing) for x in (q, k))


# ---- options: rotate only part of each head ----------------------------------------------
# Both leave channels of a head without position, exactly: dims past r are never touched, and a
# pair with θ = 0 has cos 1 and sin 0.
#   partial_rotary_factor f (Hugging Face's name; GPT-NeoX and Pythia 0.25, Phi-2 0.4): the first
#     r = int(f D) dims turn as an r-dim RoPE, θ_i = base^(-2i/r), scalings with d = r; "half" pairs
#     i with i + r/2 inside them. As in HF (q_rot / q_pass), yarn's attention factor scales those only.
#   rope_p = p (p-RoPE: Barbero et al. 2025, "Round and Round We Go! What makes Rotary Positional
#     Encodings useful?", ICLR): of the r/2 pairs, the fastest floor(p r/2) keep θ_i, the rest get 0.

def rotary_dim(head_dim: int, partial_rotary_factor: float = 1.0, rope_p: float = 1.0) -> int:
    """r = int(head_dim * partial_rotary_factor), the dims that turn, once both options are checked."""
    for name, v in (("partial_rotary_factor", partial_rotary_factor), ("rope_p", rope_p)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
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
    """apply_rope on x[..., :rot_dim] of x (B, H, T, D) with (T, rot_dim/2) tables; the rest passes through."""
    if rot_dim == x.shape[-1]:
        return apply_rope(x, cos, sin, pairing)
    if rot_dim == 0:
        return x  # partial_rotary_factor 0: NoPE
    # (B, H, T, r) rotated, (B, H, T, D - r) as it was -> (B, H, T, D)
    return torch.cat((apply_rope(x[..., :rot_dim], cos, sin, pairing), x[..., rot_dim:]), dim=-1)


# ---- context extension (RoPE scaling) ----------------------------------------------------
# Trained at length L0, a model has seen the angles m θ_i only for m < L0: pairs that turn less
# than once in L0 meet new angles beyond it. A scaling changes the frequencies (yarn and longrope
# also the attention temperature) so that a longer context reuses familiar angles. The dict takes
# Hugging Face's keys, so a config.json's rope_scaling block (transformers 4) or rope_parameters
# block (transformers 5) goes in as it is:
#   {"rope_type" (HF's legacy "type"; none = "default"): one of KNOWN_TYPES,
#    "factor": s >= 1 (target length / L0),
#    "original_max_len" (HF: "original_max_position_embeddings"): L0 (NEEDS_ORIGINAL_LEN types),
#    + SCALING_DEFAULTS[rope_type]'s keys, + REQUIRED[rope_type]'s keys,
#    + "rope_theta" and "partial_rotary_factor", which a transformers-5 block carries too}
# split_rope_settings hands the last two to RotaryEmbedding's base and partial_rotary_factor
# ("proportional": rope_p), and fills what HF fills from the model's max_position_embeddings.
# d is the rotated head dim, s the factor.

ROPE_TYPES = ("linear", "ntk", "dynamic", "yarn", "llama3")  # set by s (and L0) alone; "ntk" is ours, not HF's
HF_ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional")  # all of HF's
KNOWN_TYPES = HF_ROPE_TYPES + ("ntk",)
# Optional keys of each rope_type with their defaults; None = computed from the factor.
SCALING_DEFAULTS = {"default": {}, "linear": {}, "ntk": {}, "dynamic": {},
                    "yarn": {"beta_fast": 32.0, "beta_slow": 1.0, "attention_factor": None, "truncate": True,
                             "mscale": None, "mscale_all_dim": None},
                    "longrope": {"attention_factor": None},
                    "llama3": {"low_freq_factor": 1.0, "high_freq_factor": 4.0},
                    "proportional": {"partial_rotary_factor": 1.0}}
REQUIRED = {"longrope": ("short_factor", "long_factor")}  # keys with no default
NEEDS_ORIGINAL_LEN = ("dynamic", "yarn", "longrope", "llama3")
FACTOR_OPTIONAL = {"default": None, "proportional": 1.0, "longrope": None}  # factor's default where it may be left out
LENGTH_TYPES = ("dynamic", "longrope")  # frequencies set by the total length offset + T
HF_NAMES = {"type": "rope_type", "original_max_position_embeddings": "original_max_len"}  # HF name -> ours
BLOCK_KEYS = ("rope_theta", "partial_rotary_factor")  # module settings a transformers-5 block carries
REFUSED = {  # keys of real configs this module cannot honour
    "mrope_section": "multimodal RoPE (Qwen2-VL and later) splits the pairs among time, height and width "
                     "positions; this module turns every pair by one position per token"}


def check_scaling(scaling: dict) -> dict:
    """Validate a scaling dict (HF names allowed); return a copy in our names with every default filled in."""
    if not isinstance(scaling, dict):
        raise ValueError(f"RoPE scaling must be a dict like {{'rope_type': 'yarn', 'factor': 4.0, "
                         f"'original_max_len': 256}} or None, got {type(scaling).__name__}")
    scaling = dict(scaling)
    for hf, ours in HF_NAMES.items():
        if hf in scaling:
            if ours in scaling and scaling[ours] != scaling[hf]:
                raise ValueError(f"RoPE scaling has {hf}={scaling[hf]!r} and {ours}={scaling[ours]!r}, "
                                 f"two names of one setting; keep one")
            scaling[ours] = scaling.pop(hf)
    kind = scaling.setdefault("rope_type", "default")  # as HF: a block without a type is plain RoPE
    if kind not in KNOWN_TYPES:
        raise ValueError(f"unknown rope_type {kind!r}; use one of {', '.join(KNOWN_TYPES)} "
                         f"(Hugging Face's names, and our static 'ntk')")
    allowed = {"rope_type", "original_max_len", *BLOCK_KEYS, *SCALING_DEFAULTS[kind], *REQUIRED.get(kind, ())}
    if kind != "default":  # plain RoPE has no factor
        allowed.add("factor")
    extra = sorted(set(scaling) - allowed)
    if extra:
        why = next((f" ({k}: {REFUSED[k]})" for k in extra if k in REFUSED), "")
        raise ValueError(f"rope_type {kind!r} does not take {extra}{why}; it takes {sorted(allowed)} "
                         f"(or HF's {', '.join(HF_NAMES)})")
    missing = [k for k in REQUIRED.get(kind, ()) if k not in scaling]
    if missing:
        raise ValueError(f"rope_type {kind!r} needs {missing} (one number per rotated pair)")
    s = scaling.get("factor", FACTOR_OPTIONAL.get(kind))
    if s is None and kind == "yarn":
        raise ValueError("yarn needs a factor; Hugging Face sets a missing one to max_position_embeddings / "
                         "original_max_position_embeddings: give RotaryEmbedding(max_position_embeddings=...)")
    if s is not None and (isinstance(s, bool) or not isinstance(s, (int, float)) or not s >= 1):  # also nan
        raise ValueError(f"RoPE scaling factor must be a number >= 1 (target length / training length), got {s!r}")
    out = {**SCALING_DEFAULTS[kind], "original_max_len": None, **scaling}
    if kind != "default":
        out["factor"] = None if s is None else float(s)
    L0 = out["original_max_len"]
    if L0 is None and kind in NEEDS_ORIGINAL_LEN:
        raise ValueError(f"rope_type {kind!r} needs original_max_len (HF: original_max_position_embeddings), "
                         f"the sequence length the model was trained at; Hugging Face takes the model's "
                         f"max_position_embeddings when the block has none: give RotaryEmbedding("
                         f"max_position_embeddings=...) or from_hf_config(..., max_position_embeddings=...)")
    if L0 is not None and (isinstance(L0, bool) or not isinstance(L0, int) or L0 < 1):
        raise ValueError(f"original_max_len must be a positive int (the training length), got {L0!r}")
    theta = out.get("rope_theta", 10000.0)
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 1:
        raise ValueError(f"rope_theta (the base) must be a number > 1, got {theta!r}")
    _check_type_keys(kind, out)
    return out


def _check_type_keys(kind: str, out: dict) -> None:
    """The checks one rope_type's own keys need (check_scaling has filled the defaults)."""
    if kind == "yarn":
        _check_yarn(out)
    if kind == "longrope":
        _check_longrope(out)
    if kind == "proportional" and not _is_share(out["partial_rotary_factor"]):
        raise ValueError(f"proportional's partial_rotary_factor (the share of pairs that turn, p-RoPE's p) must be "
                         f"a number in [0, 1], got {out['partial_rotary_factor']!r}")
    af = out.get("attention_factor", 1.0)  # HF's name too: it multiplies cos and sin, so the logits by af^2
    if isinstance(af, bool) or not isinstance(af, (int, float)) or not af > 0:
        raise ValueError(f"{kind}'s attention_factor must be a number > 0, got {af!r}")
    # high == low is a real config (Llama 4 Scout: both 1.0): no blend band, a step at w_i = L0 / low.
    # HF only warns there; its frequencies are the step's (llama3_inv_freq).
    if kind == "llama3" and not out["high_freq_factor"] >= out["low_freq_factor"] > 0:
        raise ValueError(f"llama3 needs high_freq_factor >= low_freq_factor > 0, got "
                         f"{out['high_freq_factor']} and {out['low_freq_factor']}")


def _is_share(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and 0 <= v <= 1


def _check_yarn(out: dict) -> None:
    """yarn's own keys, in place: betas, truncate, DeepSeek's mscale pair; fills the attention factor."""
    for k in ("beta_fast", "beta_slow"):  # HF: a null beta is the default one
        out[k] = SCALING_DEFAULTS["yarn"][k] if out[k] is None else out[k]
    if not out["beta_fast"] > out["beta_slow"] > 0:
        raise ValueError(f"yarn needs beta_fast > beta_slow > 0, got {out['beta_fast']} and {out['beta_slow']}")
    if not isinstance(out["truncate"], bool):
        raise ValueError(f"yarn's truncate must be true or false, got {out['truncate']!r}")
    for k in ("mscale", "mscale_all_dim"):
        v = out[k]
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0):
            raise ValueError(f"yarn's {k} must be a number >= 0 or absent, got {v!r}")
    if out["attention_factor"] is None:
        out["attention_factor"] = yarn_attention_factor(out["factor"], out["mscale"], out["mscale_all_dim"])


def _check_longrope(out: dict) -> None:
    """longrope's own keys, in place: the two lists of per-pair factors; fills the attention factor."""
    for k in REQUIRED["longrope"]:
        v = out[k]
        if not isinstance(v, (list, tuple)) or not v or not all(
                not isinstance(x, bool) and isinstance(x, (int, float)) and x > 0 for x in v):
            raise ValueError(f"longrope's {k} must be a list of numbers > 0, one per rotated pair, got {v!r}")
        out[k] = [float(x) for x in v]
    if len(out["short_factor"]) != len(out["long_factor"]):
        raise ValueError(f"longrope's short_factor and long_factor must have one number per rotated pair each, "
                         f"got {len(out['short_factor'])} and {len(out['long_factor'])}")
    if out["attention_factor"] is None:
        if out["factor"] is None:
            raise ValueError("longrope needs factor or attention_factor; Hugging Face sets a missing factor to "
                             "max_position_embeddings / original_max_position_embeddings: give "
                             "RotaryEmbedding(max_position_embeddings=...)")
        out["attention_factor"] = longrope_attention_factor(out["factor"], out["original_max_len"])


def split_rope_settings(scaling: dict = None, base: float = 10000.0, partial_rotary_factor: float = 1.0,
                        rope_p: float = 1.0, max_position_embeddings: int = None):
    """(base, partial_rotary_factor, rope_p, scaling) from RotaryEmbedding's arguments and a scaling dict.

    scaling comes back checked (check_scaling), or None for plain RoPE ("default"). A transformers-5 block's
    rope_theta becomes the base, its partial_rotary_factor the GPT-NeoX rotated share (for "proportional",
    the share of pairs that turn: rope_p). Each replaces an argument left at its default; two different
    values of one setting are an error. max_position_embeddings, the model's, fills what Hugging Face
    fills from it: a missing original_max_position_embeddings, and yarn's or longrope's missing factor
    (max_position_embeddings / original_max_position_embeddings)."""
    if scaling is None:
        return base, partial_rotary_factor, rope_p, None
    if max_position_embeddings is not None and isinstance(scaling, dict):
        scaling = _fill_from_max_len(scaling, max_position_embeddings)
    sc = check_scaling(scaling)
    theta = sc.pop("rope_theta", None)
    base = base if theta is None else _one_value("base", base, 10000.0, "rope_theta", theta)
    if sc["rope_type"] == "proportional":  # the share of pairs that turn: p-RoPE's p (stays in sc for scaled_inv_freq)
        rope_p = _one_value("rope_p", rope_p, 1.0, "proportional's partial_rotary_factor", sc["partial_rotary_factor"])
    elif "partial_rotary_factor" in sc:
        share = sc.pop("partial_rotary_factor")
        partial_rotary_factor = _one_value("partial_rotary_factor", partial_rotary_factor, 1.0,
                                           "the block's partial_rotary_factor", share)
    return base, partial_rotary_factor, rope_p, None if sc["rope_type"] == "default" else sc


def _one_value(arg: str, given, default, key: str, value):
    """The block's value of a setting that is also an argument; refuses two different ones."""
    if given != default and given != value:
        raise ValueError(f"{arg}={given!r} and {key}={value!r} set one thing twice; keep one")
    return value


def _fill_from_max_len(scaling: dict, max_position_embeddings: int) -> dict:
    """A copy of a scaling dict with what Hugging Face fills from the model's max_position_embeddings M."""
    # HF (standardize_rope_params, _compute_yarn/_longrope_parameters): L0 = M when the block has none;
    # yarn's and longrope's factor = M / L0 when the block has none (Phi-3.5's longrope block has none).
    sc = dict(scaling)
    kind = sc.get("rope_type", sc.get("type", "default"))
    L0 = sc.get("original_max_len", sc.get("original_max_position_embeddings"))
    if kind in NEEDS_ORIGINAL_LEN and L0 is None:
        sc["original_max_len"] = L0 = max_position_embeddings
    if kind in ("yarn", "longrope") and sc.get("factor") is None and isinstance(L0, int) and L0 > 0:
        s = max_position_embeddings / L0
        sc["factor"] = max(s, 1.0) if kind == "longrope" else s  # longrope: s <= 1 means attention factor 1, as HF
    return sc


def ntk_base(base: float, factor: float, dim: int) -> float:
    """ntk, "NTK-aware" static scaling (bloc97, 2023; YaRN paper 3.1; HF has no static type)."""
    # base' = base * s^(d/(d-2))
    # Pair 0 turns at 1 rad/token for any base (kept); the slowest, i = d/2 - 1, at
    # base'^(-(d-2)/d) = base^(-(d-2)/d) / s (interpolated); the others in between.
    if dim < 4:
        raise ValueError(f"NTK scaling changes the base, which needs at least two pairs (rotated dim >= 4), got {dim}")
    return base * factor ** (dim / (dim - 2))


def dynamic_ntk_base(base: float, factor: float, dim: int, seq_len: int, original_max_len: int) -> float:
    """dynamic, dynamic NTK (emozilla, 2023; YaRN paper 3.3), as HF's _compute_dynamic_ntk_parameters."""
    # base' = base                                      if L <= L0
    # base' = base * (s L / L0 - (s - 1))^(d/(d-2))     if L >  L0,   L = offset + T (None = L0)
    # The bracket, 1 + s (L / L0 - 1), is 1 at L0: plain RoPE while the text fits in L0, then static
    # NTK with a growing factor. Cached keys keep the base they were rotated with, so beyond L0
    # cached decoding differs slightly from a full forward (as in HF). HF's L0 is the model's
    # max_position_embeddings (from_hf_config passes that).
    beyond = seq_len is not None and seq_len > original_max_len
    return ntk_base(base, factor * seq_len / original_max_len - (factor - 1) if beyond else 1.0, dim)


def yarn_correction_dim(num_rotations: float, dim: int, base: float, original_max_len: int) -> float:
    """The (fractional) pair index that turns num_rotations times over the training length."""
    # Pair i turns L0 θ_i / (2 pi) = L0 / (2 pi base^(2i/d)) times in L0. Set that to r:
    #   i(r) = d * ln(L0 / (2 pi r)) / (2 ln base)
    return dim * math.log(original_max_len / (num_rotations * 2 * math.pi)) / (2 * math.log(base))


def yarn_correction_range(dim: int, base: float, original_max_len: int,
                          beta_fast: float = 32.0, beta_slow: float = 1.0, truncate: bool = True):
    """(low, high) pair indices of YaRN's ramp: pairs <= low are kept, pairs >= high interpolated."""
    # low = floor(i(beta_fast)), high = ceil(i(beta_slow)), clipped to [0, d - 1] as in HF;
    # truncate=False (gpt-oss) keeps the fractional i(beta_fast), i(beta_slow)
    low = yarn_correction_dim(beta_fast, dim, base, original_max_len)
    high = yarn_correction_dim(beta_slow, dim, base, original_max_len)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dim - 1)


def yarn_ramp(low: float, high: float, n: int) -> torch.Tensor:
    """r_i for i = 0 .. n-1: 0 up to low (keep), 1 from high on (interpolate), linear between."""
    # r_i = clamp((i - low) / (high - low), 0, 1)
    if low == high:
        high += 0.001  # as in HF: avoid dividing by zero
    return ((torch.arange(n, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)


def yarn_get_mscale(factor: float, mscale: float = 1.0) -> float:
    """0.1 mscale ln(s) + 1, and 1 for s <= 1 (HF's get_mscale, DeepSeek's yarn_get_mscale)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def yarn_attention_factor(factor: float, mscale: float = None, mscale_all_dim: float = None) -> float:
    """YaRN's sqrt(1/t): multiplies cos and sin, so q.k (the logits) by its square."""
    # sqrt(1/t) = 0.1 ln(s) + 1   (YaRN eq. 22, fitted on Llama; 1 at s = 1)
    # A block with both mscale and mscale_all_dim (DeepSeek-V2/V3) gives it as a ratio, as HF does:
    #   mscale(s, mscale) / mscale(s, mscale_all_dim)   (1 for DeepSeek-V3's mscale = mscale_all_dim = 1)
    if mscale and mscale_all_dim:
        return yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)
    return 0.1 * math.log(factor) + 1.0


def deepseek_softmax_scale(scaling: dict = None) -> float:
    """The extra factor DeepSeek's attention puts on its logits outside RoPE: mscale(s, mscale_all_dim)^2."""
    # HF's modeling_deepseek_v3.py (yarn_apply_mscale), like DeepSeek's own code: softmax scale =
    # qk_head_dim^-0.5 * m^2, m = 0.1 mscale_all_dim ln(s) + 1, when the block sets mscale_all_dim
    # (DeepSeek-V3: s = 40, so m^2 = 1.874). 1.0 for every other block.
    if not scaling or scaling.get("rope_type") == "default" or not scaling.get("mscale_all_dim"):
        return 1.0
    m = yarn_get_mscale(scaling["factor"], scaling["mscale_all_dim"])
    return m * m


RotaryEmbedding.extra_softmax_scale = property(
    lambda self: deepseek_softmax_scale(self.scaling),
    doc="Multiply your attention's softmax scale (1/sqrt(d_qk)) by this: 1.0 but for a yarn block with "
        "mscale_all_dim (DeepSeek-V2/V3), whose attention scales its logits by mscale^2 outside RoPE. "
        "This module cannot do it for you: it turns q and k, it does not see the softmax.")


def longrope_attention_factor(factor: float, original_max_len: int) -> float:
    """LongRoPE's scale on cos and sin (HF's default): sqrt(1 + ln(s) / ln(L0)), 1 for s <= 1."""
    return 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original_max_len))


def longrope_factors(dim: int, base: float, factor: float, original_max_len: int,
                     beta_fast: float = 32.0, beta_slow: float = 1.0):
    """(short_factor, long_factor), lists of d/2 floats, for a longrope block at our scale.

    Our choice, not LongRoPE's evolutionary search: long_factor_i = 1 + (s - 1) r_i with YaRN's ramp r_i
    (pairs turning > beta_fast times in L0 keep 1, < beta_slow times get s), short_factor all 1.0."""
    # The published factors (Phi-3: head dim 96, L0 4096, searched on Phi's data) do not transfer to
    # another head dim, base or L0, so the tables' rope+longrope row uses this rule instead.
    low, high = yarn_correction_range(dim, base, original_max_len, beta_fast, beta_slow)
    ramp = yarn_ramp(low, high, dim // 2).double()
    return [1.0] * (dim // 2), (1 + (factor - 1) * ramp).tolist()


def llama3_inv_freq(inv_freq: torch.Tensor, factor: float, original_max_len: int,
                    low_freq_factor: float = 1.0, high_freq_factor: float = 4.0) -> torch.Tensor:
    """llama3 (Meta 2024, "The Llama 3 Herd of Models", Llama 3.1 code): bands of plain inv_freq (d/2,)."""
    # wavelength w_i = 2 pi / θ_i against the training length L0:
    #   w_i < L0 / high_freq_factor   -> θ_i                    (many turns in L0: keep)
    #   w_i > L0 / low_freq_factor    -> θ_i / s                (about a turn or less: interpolate)
    #   otherwise θ_i' = (1 - g) θ_i / s + g θ_i,  g = (L0 / w_i - low) / (high - low)
    # g > 1 in the first band and g < 0 in the second, so clamping g covers all three.
    # high == low (Llama 4 Scout) leaves no middle band: g is a step, 1 where L0 / w_i >= low, else 0.
    wavelen = 2 * math.pi / inv_freq
    turns = original_max_len / wavelen  # (d/2,) turns of each pair within L0
    if high_freq_factor == low_freq_factor:
        g = (turns >= low_freq_factor).to(inv_freq.dtype)
    else:
        g = ((turns - low_freq_factor) / (high_freq_factor - low_freq_factor)).clamp(0, 1)
    return torch.lerp(inv_freq / factor, inv_freq, g)  # lerp(a, b, g) = a + g (b - a), exact at g = 0 and 1


def _scaled_inv_freq(dim: int, base: float, sc: dict, seq_len: int = None):
    """(inv_freq (d/2,) float32, attention_factor) for a dict check_scaling already returned."""
    inv = rope_inv_freq(dim, base)
    kind, s, L0 = sc["rope_type"], sc.get("factor"), sc["original_max_len"]
    if kind == "default":
        return inv, 1.0
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
        low, high = yarn_correction_range(dim, base, L0, sc["beta_fast"], sc["beta_slow"], sc["truncate"])
        return torch.lerp(inv, inv / s, yarn_ramp(low, high, dim // 2)), sc["attention_factor"]
    if kind == "longrope":
        # longrope (Ding et al. 2024, "LongRoPE: Extending LLM Context Window Beyond 2 Million Tokens"),
        # as HF's _compute_longrope_parameters: θ_i' = θ_i / λ_i, one λ per pair, λ = long_factor when the
        # total length L = offset + T is beyond L0, short_factor otherwise: one set for every position.
        for k in ("short_factor", "long_factor"):
            if len(sc[k]) != dim // 2:
                raise ValueError(f"longrope's {k} has {len(sc[k])} numbers, but the rotated dim {dim} has "
                                 f"{dim // 2} pairs")
        lam = sc["long_factor"] if seq_len is not None and seq_len > L0 else sc["short_factor"]
        return inv / torch.tensor(lam, dtype=torch.float32), sc["attention_factor"]
    if kind == "proportional":
        # proportional (HF's name for p-RoPE, Gemma 4): the fastest floor(p d/2) pairs keep θ_i / s, the
        # rest get 0, with the exponent over the whole head dim d (p = partial_rotary_factor)
        return p_rope_inv_freq(inv / s, sc["partial_rotary_factor"]), 1.0
    return llama3_inv_freq(inv, s, L0, sc["low_freq_factor"], sc["high_freq_factor"]), 1.0


def scaled_inv_freq(dim: int, base: float, scaling: dict = None, seq_len: int = None,
                    max_position_embeddings: int = None):
    """(inv_freq, attention_factor) for a scaling dict, validated here (None = plain RoPE); seq_len for dynamic
    and longrope. dim is the head dim; a block's partial_rotary_factor turns the first int(dim f) of it (as HF)."""
    base, f, p, sc = split_rope_settings(scaling, base, 1.0, 1.0, max_position_embeddings)
    r = rotary_dim(dim, f, p)
    inv, factor = (rope_inv_freq(r, base), 1.0) if sc is None or r == 0 else _scaled_inv_freq(r, base, sc, seq_len)
    return p_rope_inv_freq(inv, p), factor


# ---- Hugging Face config.json ------------------------------------------------------------
# from_hf_config reads a whole config.json as transformers 5 does (configuration_utils'
# standardize_rope_params and the model configs' convert_rope_params_to_dict): the block is
# rope_scaling (transformers 4) or rope_parameters (5), inside text_config for multimodal models;
# rope_theta and partial_rotary_factor from the top level fill the block; Gemma's per-layer-type
# blocks need a layer_type. The module pairs dims as HF's code does: "half" (rotate_half), or
# "adjacent" for DeepSeek's and Llama 4's interleaved layout (the same dot products either way).

INTERLEAVED = ("deepseek_v2", "deepseek_v3", "llama4_text")  # model types whose HF code pairs 2i with 2i+1


def hf_rope_settings(config: dict, layer_type: str = None, max_position_embeddings: int = None) -> dict:
    """RotaryEmbedding's keyword arguments for (one layer type of) a Hugging Face config.json dict."""
    if not isinstance(config, dict):
        raise ValueError(f"from_hf_config takes a config.json as a dict (json.load), got {type(config).__name__}")
    cfg = config.get("text_config") or config  # multimodal configs nest the language model's settings
    model_type = cfg.get("model_type", config.get("model_type"))
    M = max_position_embeddings if max_position_embeddings is not None else cfg.get("max_position_embeddings")
    theta, share = cfg.get("rope_theta"), cfg.get("partial_rotary_factor")
    if model_type == "gpt_neox":  # GPTNeoXConfig's own names and defaults (Pythia: rotary_pct 0.25)
        theta = cfg.get("rotary_emb_base", 10000.0) if theta is None else theta
        share = cfg.get("rotary_pct", 0.25) if share is None else share
    blocks = _hf_blocks(cfg, theta)
    nested = bool(blocks) and all(isinstance(v, dict) or v is None for v in blocks.values())
    if nested:  # {"sliding_attention": {...}, "full_attention": {...}}: one block per layer type
        if layer_type not in blocks:
            raise ValueError(f"this config has one RoPE block per layer type; give layer_type= one of "
                             f"{sorted(blocks)}" + ("" if layer_type is None else f", not {layer_type!r}"))
        if blocks[layer_type] is None:
            raise ValueError(f"layer type {layer_type!r} has no RoPE in this config (its block is null)")
    block = dict(blocks[layer_type] if nested else blocks)
    block.setdefault("rope_theta", 10000.0 if theta is None else theta)  # HF's default_theta
    if share is not None:
        block.setdefault("partial_rotary_factor", share)
    kind = block.setdefault("rope_type", block.pop("type", "default"))
    if model_type == "phi3" and kind in ("su", "yarn"):  # Phi3Config's own renaming
        block["rope_type"] = kind = "longrope"
    if kind in ("llama3", "yarn", "longrope") and not nested and "original_max_position_embeddings" in cfg:
        # Phi-3 keeps the training length at the top level; HF lets it win over the block's
        block["original_max_position_embeddings"] = cfg["original_max_position_embeddings"]
    if kind == "dynamic" and M is not None:  # HF's dynamic NTK measures lengths against max_position_embeddings
        block.pop("original_max_len", None)
        block["original_max_position_embeddings"] = M
    head_dim = cfg.get("qk_rope_head_dim") or cfg.get("head_dim")  # DeepSeek's MLA: only the rope part turns
    if layer_type == "full_attention" and cfg.get("global_head_dim"):  # Gemma 4's wider global heads
        head_dim = cfg["global_head_dim"]
    if not head_dim:
        if not cfg.get("hidden_size") or not cfg.get("num_attention_heads"):
            raise ValueError("from_hf_config needs head_dim, or hidden_size and num_attention_heads, in the config")
        head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    interleaved = cfg.get("rope_interleave", model_type in INTERLEAVED)
    return {"head_dim": head_dim, "scaling": block, "max_position_embeddings": M,
            "pairing": "adjacent" if interleaved else "half"}


def _hf_blocks(cfg: dict, theta):
    """The config's RoPE block, or its blocks by layer type (Gemma 3's older keys turned into them)."""
    block = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}  # HF: rope_scaling wins when both
    if "rope_local_base_freq" not in cfg:
        return block
    # Gemma 3 (Gemma3TextConfig.convert_rope_params_to_dict): sliding layers plain RoPE at rope_local_base_freq,
    # full layers rope_scaling (Gemma 3 4B and up: linear, factor 8) at rope_theta (default 1e6)
    nested = dict(cfg.get("rope_parameters") or {})
    if not (nested and all(isinstance(v, dict) or v is None for v in nested.values())):
        nested = {}
    full = dict(nested.get("full_attention") or {"rope_type": "default"})
    sliding = dict(nested.get("sliding_attention") or {"rope_type": "default"})
    full.update(cfg.get("rope_scaling") or {})
    full.setdefault("rope_theta", 1000000.0 if theta is None else theta)
    sliding.setdefault("rope_theta", cfg["rope_local_base_freq"])
    return {"sliding_attention": sliding, "full_attention": full}


def from_hf_config(cls, config: dict, layer_type: str = None, max_position_embeddings: int = None,
                   pairing: str = None, init_len: int = 256):
    """A RotaryEmbedding for (one layer type of) a Hugging Face model, from its whole config.json dict.

    Head dim: head_dim (DeepSeek: qk_rope_head_dim; Gemma 4's full_attention: global_head_dim), else
    hidden_size // num_attention_heads; base, partial_rotary_factor and the scaling from the block.
    layer_type picks one of per-layer-type blocks (Gemma 3, Gemma 4): needed there, ignored elsewhere.
    max_position_embeddings replaces the config's (what HF fills L0 and a missing factor from).
    pairing defaults to HF's layout for the model ("half"; DeepSeek and Llama 4 "adjacent").
    DeepSeek's extra softmax scale is the module's extra_softmax_scale: apply it in your attention."""
    kw = hf_rope_settings(config, layer_type, max_position_embeddings)
    if pairing is not None:
        kw["pairing"] = pairing
    return cls(init_len=init_len, **kw)


RotaryEmbedding.from_hf_config = classmethod(from_hf_config)


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
    x = torch.randn(1, 2, 5, 16)
    for f, p in ((0.0, 1.0), (1.0, 0.0)):  # no dim turns / every pair at frequency 0
        assert torch.equal(RotaryEmbedding(16, partial_rotary_factor=f, rope_p=p)(x, x)[0], x), f"f={f} p={p}: not NoPE"
    y = RotaryEmbedding(16, partial_rotary_factor=0.5)(x, x)[0]
    assert torch.equal(y[..., 8:], x[..., 8:]) and not torch.equal(y[..., :8], x[..., :8]), "f=0.5: only dims 0..7 turn"
    print("ok  partial_rotary_factor 0 and rope_p 0 are NoPE exactly; with factor 0.5 only dims 0..7 turn")


if __name__ == "__main__":
    _self_check()
