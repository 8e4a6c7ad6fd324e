"""A tiny GPT-style character LM whose position scheme is one config field: the tutorial's model.

Decoder-only Transformer (Radford et al. 2019, GPT-2 layout): token embedding, n_layer
pre-LayerNorm blocks (x + attn(LN(x)), x + MLP(LN(x))), a final LayerNorm and a linear
head (optionally tied to the token embedding). Shapes: (B, T) ids, (B, T, C) activations,
(B, H, T, D) inside attention, C = H * D.

GPTConfig.pos picks where position information enters (tutorial sections 方案 A-D), one of the
schemes registered in schemes.py; the model calls the scheme's hooks and never its name:
    none     NoPE: nothing; only the causal mask carries order (破坏实验 1)
    learned  + P[t]              at the input        (pos_learned.py)
    sin      + PE(t)             at the input        (pos_sin.py)
    rope     rotate q and k      inside attention    (pos_rope.py: rope_rotate)
    alibi    - m_h (i - j)       on the scores       (pos_alibi.py: alibi_key_bias)
`causal=False` removes the causal mask (破坏实验 2); ALiBi then uses -m_h |i - j|.
rope_scaling (pos_rope.ScaledRotaryEmbedding: linear, NTK, YaRN ...) stretches RoPE past its
training length, at evaluation (set_rope_scaling) or for a fine-tune.

Reading order: the config, Attention, MLP, Block, TinyLM (forward, then generate). The main job's
models are this TinyLM. The bench's options (local windows and hybrid layouts, iRoPE and Gemma
layouts, NoPE layers, partial and p-RoPE, sinks, StreamingLLM, Llama 4's temperature, the init
recipes) extend it from lab/options.py (LabConfig, LabLM), through the methods marked "the bench
overrides"; this file never reads them. What the scripts do with a model lives in lab/ too:
checkpoints, corpora and tokenizer, evaluation windows, the device.
"""
import math
from dataclasses import dataclass
from typing import NamedTuple, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

import schemes
from attn_common import attn_sdpa
from pos_rope import ScaledRotaryEmbedding
from schemes import Layer

# On our machine torch 2.13's first float32 torch.cos or torch.sin of a process was off by up to 1.5e-4
# in about 1 process in 4 (a 256 x 16 RoPE table; every later call exact), and building the RoPE tables
# is often that first call. Make it here, on a throwaway tensor (24 of 24 processes then exact).
torch.cos(torch.zeros(8)), torch.sin(torch.zeros(8))

SCHEMES = schemes.REGISTRY  # name -> schemes.Scheme, every registered scheme (a later registration included)


# ----------------------------------------------------------------------------- model

@dataclass
class GPTConfig:
    vocab_size: int = 80
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    pos: str = "rope"              # one of SCHEMES
    pos_options: dict = None       # the scheme's options (schemes.Scheme.options), defaults filled in; None: it has none
    train_len: int = 256           # the length it is trained at: a scheme's build may read it (FIRE, xPos)
    max_len: int = 4096            # rows of the learned table (other schemes have no limit)
    rope_theta: float = 10000.0
    rope_scaling: dict = None      # e.g. {"rope_type": "yarn", "factor": 4.0, "original_max_len": 256}
    causal: bool = True
    tie_weights: bool = False

    def __post_init__(self):
        scheme = schemes.get(self.pos)  # unknown: one line naming the registered schemes
        self.pos_options = schemes.options_of(self.pos, self.pos_options) or None
        if scheme.causal_only and not self.causal:
            raise ValueError(f"scheme {self.pos!r} is causal only (it has no bidirectional form); keep causal=True")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")

    @property
    def emb_std(self) -> float:
        """The init std of a token vector (and a learned position row): C^-0.5, times sqrt(C) in forward."""
        return self.n_embd ** -0.5


class LayerCache(NamedTuple):
    """One layer's KV cache: keys and values (B, H, Tk, D), as they were written (rotated), and the states
    the position scheme's score_bias and extra_logits keep for the next call (None for the built-in schemes)."""
    k: torch.Tensor
    v: torch.Tensor
    state: object = None
    extra_state: object = None


class Attention(nn.Module):
    q_chunk = 256  # queries per attn_sdpa chunk when there is a bias (any value: same numbers)

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head, self.head_dim, self.causal = cfg.n_head, cfg.n_embd // cfg.n_head, cfg.causal
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)
        self.out = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)

    def split_heads(self, x):
        """x (B, T, C) -> q, k, v, each (B, H, T, D): the projection cut into heads, before RoPE."""
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)  # (B, T, 3C) -> 3 x (B, T, C)
        # (B, T, C) -> (B, T, H, D) -> (B, H, T, D)
        return tuple(t.view(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in (q, k, v))

    def forward(self, x, scheme=None, module=None, layer: Layer = None, offset=0, shared=None, kv=None):
        """x (B, T, C) -> (out (B, T, C), LayerCache). scheme: the model's schemes.Scheme (None: no positions), module: its module,
        layer: this layer's schemes.Layer, shared: what scheme.prepare built for this forward, kv: this
        layer's LayerCache or None."""
        B, T, C = x.shape
        scheme = scheme or schemes.get("none")
        q, k, v = self.split_heads(x)
        q, k = self.turn(scheme, module, q, k, offset, layer)  # RoPE: q and k turned by their positions
        if kv is not None:  # cached decoding: prepend the past keys/values (already rotated)
            k, v = torch.cat((kv.k, k), dim=2), torch.cat((kv.v, v), dim=2)  # (B, H, Tpast+T, D)
        # the bias and the extra logits see this call's queries q (B, H, T, D) and every key they attend to,
        # k (B, H, Tk, D); each keeps its own state in the cache
        past = (None, None) if kv is None else (kv.state, kv.extra_state)
        bias, state, extra, extra_state = None, None, None, None
        if scheme.score_bias is not None:  # ALiBi: -m_h (i - j) added to the scores, as a function of the chunk
            out = scheme.score_bias(module, x, layer, offset, shared, past[0], q=q, k=k)
            bias, state = schemes.checked_bias(scheme, out, B, self.n_head, T, k.shape[2])
        if scheme.extra_logits is not None:  # (B?, H, T, n): columns that join the softmax (a field scheme's)
            out = scheme.extra_logits(module, x, layer, offset, shared, past[1], q=q, k=k)
            extra, extra_state = schemes.checked_extra(scheme, out, B, self.n_head, T)
        y = self.attend(q, k, v, bias, extra)  # (B, H, T, D)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, H, T, D) -> (B, T, H, D) -> (B, T, C)
        return self.out(y), LayerCache(k, v, state, extra_state)

    def turn(self, scheme, module, q, k, offset: int, layer: Layer) -> tuple:
        """q, k (B, H, T, D) turned by the scheme's rotate_qk (RoPE), or as they are. The bench overrides."""
        if scheme.rotate_qk is None:
            return q, k
        return schemes.check_qk(scheme, scheme.rotate_qk(module, q, k, offset, layer), q.shape, k.shape)

    def attend(self, q, k, v, bias, extra):
        """softmax(q k^T / sqrt(D) + bias, causal) v, (B, H, T, D): attn_common.attn_sdpa, the fused form of
        attn_common.attn (written out there, the tutorial's). The bench overrides (windows, sinks, streaming)."""
        return attn_sdpa(q, k, v, score_bias=bias, causal=self.causal, q_chunk=self.q_chunk, extra_logits=extra)


class MLP(nn.Module):
    """fc (C -> 4C), GELU, proj (back to C): the position-wise feed-forward layer."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.act = nn.GELU()
        self.proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x):
        return self.proj(self.act(self.fc(x)))  # (B, T, C) -> (B, T, 4C) -> (B, T, C)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, attn: Attention = None, norm=nn.LayerNorm):
        super().__init__()
        self.ln1 = norm(cfg.n_embd)
        self.ln2 = norm(cfg.n_embd)
        self.attn = Attention(cfg) if attn is None else attn
        self.mlp = MLP(cfg)

    def forward(self, x, **kw):
        a, kv = self.attn(self.ln1(x), **kw)
        x = x + a
        return x + self.mlp(self.ln2(x)), kv


class LMOutput(NamedTuple):
    """What TinyLM.forward returns, always: logits (B, T, V); loss (scalar, None without
    targets); cache, one LayerCache (k, v of (B, H, Tk, D), the scheme's state) per layer, for cached decoding."""
    logits: torch.Tensor
    loss: Optional[torch.Tensor]
    cache: list


class TinyLM(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        C = cfg.n_embd
        self.scheme = schemes.get(cfg.pos)  # its registry entry: the hooks forward calls
        self.tok_emb = nn.Embedding(cfg.vocab_size, C)
        # The scheme's module, kept as model.<scheme name> (a learned table: learned.table.weight); built
        # here, before the blocks, so that its initial values use the same random numbers as always.
        module = None if self.scheme.build is None else self.scheme.build(cfg)
        if module is not None:
            self.add_module(cfg.pos, module)
        # RoPE's tables (no parameters) for a scheme that takes RoPE's options; its rotate_qk gets them
        # in the layer's schemes.Layer (rope_of)
        self.rope = self.make_rope(cfg.rope_scaling) if self.scheme.rope_options else None
        self.blocks = nn.ModuleList(self.make_block(cfg, i) for i in range(cfg.n_layer))
        self.ln_f = self.make_norm(C)
        self.head = nn.Linear(C, cfg.vocab_size, bias=False)
        self._init_weights(cfg)
        if cfg.tie_weights:
            self.head.weight = self.tok_emb.weight
        if module is not None and self.pos_module is not module:
            raise ValueError(f"scheme {cfg.pos!r} shares its name with an attribute of TinyLM; rename the scheme")

    # What a layer is made of; the bench overrides these four (lab/options.py).
    def make_rope(self, scaling: dict = None) -> ScaledRotaryEmbedding:
        """RoPE's tables at base rope_theta, scaled by `scaling` (None: plain RoPE)."""
        return ScaledRotaryEmbedding(self.cfg.n_embd // self.cfg.n_head, self.cfg.rope_theta, scaling=scaling)

    def make_block(self, cfg: GPTConfig, i: int) -> Block:
        return Block(cfg)

    def make_norm(self, C: int) -> nn.Module:
        return nn.LayerNorm(C)

    def layer_of(self, i: int) -> Layer:
        """What the scheme's hooks know of layer i: every layer global, with positions, RoPE's tables."""
        return Layer(i, False, 0, self.rope)

    @property
    def pos_module(self):
        """The scheme's module, model.<scheme name> (for rope: the RoPE tables), or None."""
        return self._modules.get(self.cfg.pos)

    def rope_of(self, i: int):
        """The RotaryEmbedding layer i turns q and k with, or None (no RoPE)."""
        return self.layer_of(i).rope

    def _init_weights(self, cfg: GPTConfig) -> None:
        """Every Linear keeps the weights nn.Linear drew when it was built, U(+-1/sqrt(fan_in)) for weight and bias
        (std 1/sqrt(3 fan_in): 0.051 at C = 128); the token table is drawn at std C^-0.5, so that times sqrt(C) in
        forward it has unit scale (docs/recipe.md). The bench's init recipes override this."""
        nn.init.normal_(self.tok_emb.weight, 0.0, cfg.emb_std)

    def embed(self, idx, offset: int):
        """idx (B, T) -> x (B, T, C): the tokens, and the rows of a scheme that adds positions at the input.
        Vaswani et al. 3.4: embeddings times sqrt(C), so tokens and the sinusoidal PE are on one scale when
        added. The tied head uses the unscaled table, so its logits start small."""
        scheme, module, T = self.scheme, self.pos_module, idx.shape[1]
        x = self.tok_emb(idx)  # (B, T, C)
        if scheme.input_rows is not None and scheme.input_before_scale:  # learned: stored and scaled like a token
            x = x + scheme.input_rows(module, T, offset)  # (B, T, C) + (T, C)
        x = x * self.emb_scale()
        if scheme.input_rows is not None and not scheme.input_before_scale:  # sinusoidal: on the scaled tokens
            x = x + scheme.input_rows(module, T, offset).to(x.dtype)  # (B, T, C) + (T, C)
        return x

    def emb_scale(self) -> float:
        return math.sqrt(self.cfg.n_embd)

    def forward(self, idx, targets=None, cache=None) -> LMOutput:
        """idx (B, T) -> LMOutput(logits (B, T, V), loss or None, cache). `cache`: per-layer (k, v) of the past."""
        offset = 0 if cache is None else cache[0].k.shape[2]  # tokens already seen
        x = self.embed(idx, offset)  # learned, sinusoidal: rows added at the input
        # Work every layer shares, once per forward (T5's bucket table, looked up once).
        shared = None if self.scheme.prepare is None else self.scheme.prepare(self.pos_module, x, offset)
        new_cache = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, scheme=self.scheme, module=self.pos_module, layer=self.layer_of(i), offset=offset,
                          shared=shared, kv=None if cache is None else cache[i])
            new_cache.append(kv)
        logits = self.head(self.ln_f(x))  # (B, T, C) -> (B, T, V)
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return LMOutput(logits, loss, new_cache)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens: int, temperature: float = 1.0, top_k: int = None,
                 use_cache: bool = True, generator: torch.Generator = None):
        """Append max_new_tokens sampled tokens to idx (B, T). temperature=0 means greedy."""
        if not self.cfg.causal:
            raise ValueError("generate() needs a causal model: without the mask, position t saw t+1 in training")
        cache = None
        for _ in range(max_new_tokens):
            if use_cache:
                step_in = idx if cache is None else idx[:, -1:]
                logits, _, cache = self.forward(step_in, cache=cache)
            else:
                logits = self.forward(idx).logits
            logits = logits[:, -1, :]  # (B, V)
            if temperature == 0:
                nxt = logits.argmax(dim=-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None:
                    kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                nxt = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)
            idx = torch.cat((idx, nxt), dim=1)
        return idx

    def set_rope_scaling(self, scaling: dict = None) -> None:
        """Swap the RoPE tables for a scaled version (None = plain RoPE); weights are untouched.
        Recorded in cfg.rope_scaling, so a fine-tuned checkpoint reloads with its scaling."""
        if self.rope is None:
            raise ValueError(f"RoPE scaling needs a scheme that uses RoPE's tables ({rope_names()}); "
                             f"this model uses pos={self.cfg.pos!r}")
        self.rope = self.make_rope(scaling).to(self.rope.inv_freq.device)
        self.cfg.rope_scaling = scaling

    def num_params(self, pos_only: bool = False) -> int:
        mods = [self.pos_module] if pos_only else [self]
        return sum(p.numel() for m in mods if m is not None for p in m.parameters())


def rope_names() -> str:
    """The schemes that take RoPE's options, for an error message: 'rope' (or 'rope' or 'xpos' ...)."""
    return " or ".join(repr(n) for n, e in schemes.REGISTRY.items() if e.rope_options)
