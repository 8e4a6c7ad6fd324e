"""The position schemes: one registry, keyed by scheme, and the hooks through which TinyLM calls them.

TinyLM never branches on a scheme's name. It asks the scheme's entry which hooks it has and calls
them; a hook the entry leaves at None does nothing. Each hook is a function whose first argument
is the scheme's module (what `build` returned, None without one), so an unbound method of that
module's class serves as a hook, e.g. input_rows=LearnedPositionalEmbedding.forward.

    input_rows(m, T, offset) -> (T, C)
        Added to the token embeddings at positions offset .. offset+T-1: before TinyLM's sqrt(C)
        embedding scale if input_before_scale (learned: a row stored like a token vector), else after
        it (sinusoidal: on the scale of the scaled embedding).
    rotate_qk(m, q, k, offset, layer) -> (q, k)
        q and k (B, H, T, D) of one layer, before the cache is prepended: RoPE and its relatives.
        layer.rope is the RotaryEmbedding TinyLM built for that layer when the entry takes RoPE's
        options (TinyLM.rope_of: local and global layers may differ; None on a NoPE layer).
    prepare(m, x, offset) -> shared
        Once per forward, x (B, T, C) the input of the first block: work every layer shares (ALiBi's
        (H, T, Tk) bias). Its result reaches every score_bias call of that forward.
    score_bias(m, x, layer, offset, shared, past) -> (bias, state)
        Added to the scores of one layer: x (B, T, C) the layer's normalised input, queries at
        positions offset .. offset+T-1 (the chunk this call scores: the whole window, or the new
        tokens in cached decoding), keys 0 .. offset+T-1. bias broadcasts to (B, H, T, Tk); with a
        causal model it holds -inf at every hidden key (attn_common.attn_sdpa's contract; a bias
        without it raises there). past is this layer's state from the KV cache (None on the first
        call); state is what the cache keeps for the next call.
    extra_logits(m, q, layer) -> (B?, H, T, n) or None
        n logits per query that join the softmax beside the keys and are then dropped (their values
        are 0): the weights of the real keys sum to less than 1. attn_sdpa(extra_logits=...).

`layer` is a Layer: index, nope (a NoPE layer of nope_every), window (0: global), rope. A scheme
decides what a NoPE layer means for it (rope: no rotation; alibi: no bias).

What comes next, and the hook each would use (none needs a new branch in TinyLM.forward):
  * T5's bucketed relative bias: prepare looks up a learned (buckets, H) table at the bucket of
    each i - j, once per forward (T5 shares it over layers); score_bias returns it.
  * KERPLE: score_bias, -r1 log(1 + r2 |i - j|) with r1, r2 > 0 learned per head (and layer).
  * FIRE: score_bias, an MLP over the normalised distance psi(i - j) / psi(max(L, i)); a shared MLP
    can run in prepare instead.
  * xPos: rotate_qk with rope_options=True: the layer's RoPE rotation times a per-pair scale
    zeta^(m / gamma) on q and zeta^(-n / gamma) on k.
  * FoX (forgetting attention): score_bias from the layer's input: a forget gate f_t = sigmoid(w x_t
    + b) per head, bias_ij = sum_{l=j+1..i} log f_l; the cumulative sums of the past keys are its
    state in the cache (tests/test_schemes.py holds a toy of this kind).
  * attention sinks (gpt-oss): extra_logits, one learned logit per head and layer.
  * DroPE (positions dropped from a trained model): an entry with no hooks, like none; RoPE has no
    weights, so a rope checkpoint loads into it as it is, and the recalibration is a fine-tune.

An entry (Scheme) also says what the rest of the repository needs: the "acts on" text and the pos
file of the extrapolation table (core LoC), whether it takes RoPE's options, a fixed colour for
the figures (plots.py: a scheme without one gets a spare colour by a hash of its name). Importing
a module that calls register() adds its scheme everywhere: GPTConfig, variants.VARIANTS (base and
copy variant of the same name), the figures, the tables, breakage_test.py, and benchmark.py if it
was registered before benchmark.py was imported.
"""
from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional

import torch.nn as nn

from pos_alibi import ALiBi
from pos_learned import LearnedPositionalEmbedding
from pos_sin import SinusoidalPositionalEncoding

HOOKS = ("input_rows", "rotate_qk", "prepare", "score_bias", "extra_logits")


class Layer(NamedTuple):
    """What a hook knows of the layer it serves (TinyLM builds one per layer and forward)."""
    index: int                    # 0-based
    nope: bool                    # a layer without positions (GPTConfig.nope_every)
    window: int                   # its local window; 0: global
    rope: Optional[nn.Module]     # its RotaryEmbedding (TinyLM.rope_of), or None


@dataclass(frozen=True)
class Scheme:
    """One registry entry: how to build the scheme, its hooks, and what the tables and figures say of it."""
    name: str                               # GPTConfig.pos; TinyLM keeps the module as model.<name>
    acts_on: str                            # the extrapolation table's "acts on" column
    pos_file: Optional[str] = None          # its code, relative to the repository or absolute (core LoC)
    build: Optional[Callable] = None        # GPTConfig -> nn.Module, or None: nothing to hold
    input_rows: Optional[Callable] = None
    input_before_scale: bool = False
    rotate_qk: Optional[Callable] = None
    prepare: Optional[Callable] = None
    score_bias: Optional[Callable] = None
    extra_logits: Optional[Callable] = None
    rope_options: bool = False              # TinyLM builds RoPE tables from rope_theta, rope_p, ... for it
    colour: Optional[str] = None            # fixed colour in every figure

    @property
    def hooks(self) -> tuple:
        """The names of the hooks it implements."""
        return tuple(h for h in HOOKS if getattr(self, h) is not None)

    @property
    def in_attention(self) -> bool:
        """Does it put positions inside attention (rotate q/k or bias the scores), where nope_every removes them?"""
        return self.rotate_qk is not None or self.score_bias is not None


REGISTRY = {}   # name -> Scheme, in registration order
_LISTENERS = []


def register(entry: Scheme) -> Scheme:
    """Add a scheme; its name must be new and usable as an attribute (TinyLM keeps model.<name>)."""
    if not entry.name.isidentifier() or entry.name in REGISTRY:
        raise ValueError(f"scheme name {entry.name!r} must be a Python identifier not yet registered "
                         f"(registered: {', '.join(REGISTRY)})")
    REGISTRY[entry.name] = entry
    for listener in _LISTENERS:
        listener()
    return entry


def unregister(name: str) -> None:
    """Take a scheme out again (a test's toy)."""
    get(name)
    del REGISTRY[name]
    for listener in _LISTENERS:
        listener()


def on_change(listener: Callable) -> None:
    """listener() runs now and after every register/unregister: for tables derived from the registry."""
    _LISTENERS.append(listener)
    listener()


def names() -> tuple:
    return tuple(REGISTRY)


def get(name: str) -> Scheme:
    if name not in REGISTRY:
        raise ValueError(f"unknown position scheme {name!r}; choose one of {', '.join(REGISTRY)}")
    return REGISTRY[name]


# ----------------------------------------------------------------------------- the built-in five

def _learned(cfg) -> LearnedPositionalEmbedding:
    """Rows stored and initialised like the token table (cfg.emb_std), so the two learn at the same rate."""
    return LearnedPositionalEmbedding(cfg.max_len, cfg.n_embd, init_std=cfg.emb_std)


def _rope_rotate(m, q, k, offset: int, layer: Layer) -> tuple:
    """Turn q and k (never v) by their absolute positions with the layer's tables; a NoPE layer has none."""
    return (q, k) if layer.rope is None else layer.rope(q, k, offset=offset)


def _alibi(cfg) -> ALiBi:
    """Causal: -m(i - j) with -inf on later keys (the bias is the causal mask); else -m|i - j|."""
    return ALiBi(cfg.n_head, symmetric=not cfg.causal, causal=cfg.causal)


def _alibi_prepare(m: ALiBi, x, offset: int):
    """The (H, T, Tk) bias for queries offset .. offset+T-1, built once per forward, shared by every layer."""
    T = x.shape[1]
    return m(T, offset + T).to(x.dtype)


def _alibi_bias(m: ALiBi, x, layer: Layer, offset: int, shared, past) -> tuple:
    """The shared bias, none on a NoPE layer (the causal mask stays: attn_sdpa applies it then); no cache state."""
    return (None if layer.nope else shared), None


register(Scheme("none", "nothing (NoPE)", colour="#222222"))
register(Scheme("learned", "input embedding", "pos_learned.py", build=_learned,
                input_rows=LearnedPositionalEmbedding.forward, input_before_scale=True, colour="#ff7f0e"))
register(Scheme("sin", "input embedding", "pos_sin.py", build=lambda cfg: SinusoidalPositionalEncoding(cfg.n_embd),
                input_rows=SinusoidalPositionalEncoding.forward, colour="#2ca02c"))
register(Scheme("rope", "Q/K rotation", "pos_rope.py", rotate_qk=_rope_rotate, rope_options=True, colour="#1f77b4"))
register(Scheme("alibi", "score bias", "pos_alibi.py", build=_alibi, prepare=_alibi_prepare, score_bias=_alibi_bias,
                colour="#d62728"))
