"""A tiny GPT-style character LM whose position scheme is one config field.

Decoder-only Transformer (Radford et al. 2019, GPT-2 layout): token embedding, n_layer
pre-LayerNorm blocks (x + attn(LN(x)), x + MLP(LN(x))), a final LayerNorm and a linear
head (optionally tied to the token embedding). Shapes: (B, T) ids, (B, T, C) activations,
(B, H, T, D) inside attention, C = H * D.

GPTConfig.pos picks where position information enters (tutorial sections 方案 A-D), one of the
schemes registered in schemes.py; the model calls the scheme's hooks and never its name:
    none     NoPE: nothing; only the causal mask carries order (破坏实验 1)
    learned  + P[t]              at the input        (pos_learned.py)
    sin      + PE(t)             at the input        (pos_sin.py)
    rope     rotate q and k      inside attention    (pos_rope.py)
    alibi    - m_h (i - j)       on the scores       (pos_alibi.py)
`causal=False` removes the causal mask (破坏实验 2); ALiBi then uses -m_h |i - j|.
RoPE options: partial_rotary_factor (rotate part of each head), rope_p (p-RoPE); and with rope
or alibi, nope_every = k leaves every k-th layer without positions.
Hybrid layouts (layer_roles): attn_window = w makes layers local (sliding window or chunks of
w positions, attn_common.window_mask) except every global_every-th; the global layers may have
their own RoPE (global_rope_theta, global_rope_p) or none (nope_every), and Llama 4's attention
temperature on the NoPE layers (attn_temperature_tuning) can be switched on or off at evaluation.
variants.py's irope (Llama 4) and gemma_hybrid (Gemma 4) are built from these fields.

Reading order: the config, Attention, MLP, Block, TinyLM (forward, then generate). What the
scripts do with a model lives beside it, in lab/: checkpoints (lab/checkpoint_io.py), the
corpora and their tokenizer (lab/corpora.py), evaluation windows (lab/lm_eval.py), the device
(lab/devices.py).
"""
import math
from dataclasses import dataclass
from typing import NamedTuple, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

import schemes
import streaming
from attn_common import WINDOW_KINDS, attn_sdpa, llama4_attn_temperature
from pos_rope import ScaledRotaryEmbedding, rotary_dim
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
    sinks: bool = False            # attention sinks: one learned logit per head and layer in every softmax (gpt-oss)
    max_len: int = 4096            # rows of the learned table (other schemes have no limit)
    rope_theta: float = 10000.0
    rope_pairing: str = "adjacent"  # or "half" (GPT-NeoX / Hugging Face rotate_half)
    rope_scaling: dict = None       # e.g. {"rope_type": "yarn", "factor": 4.0, "original_max_len": 256}
    partial_rotary_factor: float = 1.0  # rotate only the first int(f * head dim) dims (HF's name; GPT-NeoX 0.25)
    rope_p: float = 1.0             # p-RoPE: the fastest fraction p of the pairs turn, the rest have frequency 0
    nope_every: int = 0             # k > 0: layers k, 2k, ... (counting from 1) get no positions (Llama 4 iRoPE)
    # Local attention and hybrid layouts (layer_roles; Llama 4, Gemma 3/4, Command R7B):
    attn_window: int = 0            # w > 0: local layers see w positions (window_kind); 0: every layer global
    window_kind: str = "sliding"    # "sliding": keys i-w < j <= i; "chunked": keys of i's chunk of w, j <= i
    global_every: int = 0           # with attn_window: layers g, 2g, ... (from 1) stay global; 0: all local
    global_rope_theta: float = None  # RoPE base of the global layers (Gemma 3/4: 1e6); None: rope_theta
    global_rope_p: float = None     # p-RoPE share of the global layers (Gemma 4: 0.25); None: rope_p
    attn_temperature_tuning: bool = False  # Llama 4: scale the NoPE layers' queries; read on every forward,
                                           # so model.cfg.attn_temperature_tuning switches it at evaluation
    temperature_floor: int = 8192   # its floor_scale (attn_common.llama4_attn_temperature; Llama 4's value)
    temperature_slope: float = 0.1  # its attn_scale (Llama 4's value)
    causal: bool = True
    tie_weights: bool = False
    mlp_ratio: int = 4
    # Initialisation and input scale (the recipe, docs/recipe.md; recipe_ablation.py measures each choice).
    # "torch" keeps PyTorch's own nn.Linear init, weight and bias uniform in +-1/sqrt(fan_in): the recipe's
    # choice for every Linear. Against the GPT-2-style init it replaced it took ALiBi's ppl@256 3% lower at
    # seed 0, outside ALiBi's seed spread; RoPE's 0.5% is a tie (docs/recipe.md).
    emb_scale: bool = True          # tokens at std C^-0.5 times sqrt(C) (Vaswani 3.4); False: GPT-2's std 0.02, no scale
    emb_init: str = "recipe"        # the token table's std: "recipe" (as emb_scale says); "kaiming": sqrt(2/C) (x-transformers)
    qkv_init: str = "torch"         # q/k/v weights: "torch"; "unit": std C^-0.5 (unit-scale logits); "gpt2": std 0.02
    resid_init: str = "torch"       # residual projections: "torch"; "scaled": std 0.02/sqrt(2 n_layer) (GPT-2); "plain": 0.02
    linear_init: str = "torch"      # the other Linears (MLP fc, head): "torch"; "gpt2": std 0.02, bias 0
    norm_bias: bool = True          # LayerNorms with a bias; False: a gain only (x-transformers, most newer models)

    def __post_init__(self):
        scheme = schemes.get(self.pos)  # unknown: one line naming the registered schemes
        self.pos_options = schemes.options_of(self.pos, self.pos_options) or None
        if scheme.causal_only and not self.causal:
            raise ValueError(f"scheme {self.pos!r} is causal only (it has no bidirectional form); keep causal=True")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        inits = {"qkv_init": ("unit", "gpt2", "torch"), "resid_init": ("scaled", "plain", "torch"),
                 "linear_init": ("gpt2", "torch"), "emb_init": ("recipe", "kaiming")}
        for name, allowed in inits.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {getattr(self, name)!r}")
        if scheme.rope_options:
            rotary_dim(self.n_embd // self.n_head, self.partial_rotary_factor, self.rope_p)  # raises if unusable
        elif (self.partial_rotary_factor, self.rope_p) != (1.0, 1.0):
            raise ValueError(f"partial_rotary_factor and rope_p shape RoPE, but pos={self.pos!r}; use pos={_rope_names()}")
        k = self.nope_every
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= self.n_layer:
            raise ValueError(f"nope_every must be an int from 0 (off) to n_layer={self.n_layer}, got {k!r}")
        if k and not scheme.in_attention:
            inside = ", ".join(n for n, e in schemes.REGISTRY.items() if e.in_attention)
            raise ValueError(f"nope_every removes positions inside attention ({inside}), but pos={self.pos!r}")
        self._check_layout()

    @property
    def emb_std(self) -> float:
        """The init std of a token vector (and a learned position row): C^-0.5 with emb_scale, else GPT-2's 0.02;
        emb_init="kaiming": sqrt(2/C), nn.init.kaiming_normal_'s std for a (V, C) table (x-transformers' init)."""
        if self.emb_init == "kaiming":
            return math.sqrt(2 / self.n_embd)
        return self.n_embd ** -0.5 if self.emb_scale else 0.02

    def _check_layout(self):
        """The window, the global layers and the temperature: one-line errors, before a model is built."""
        w, g = self.attn_window, self.global_every
        if isinstance(w, bool) or not isinstance(w, int) or w < 0:
            raise ValueError(f"attn_window must be an int >= 0 (0: global attention), got {w!r}")
        if self.window_kind not in WINDOW_KINDS:
            raise ValueError(f"unknown window_kind {self.window_kind!r}; choose one of {', '.join(WINDOW_KINDS)}")
        if w and not self.causal:
            raise ValueError("attn_window narrows the causal mask, but causal=False; keep causal=True")
        if isinstance(g, bool) or not isinstance(g, int) or not 0 <= g <= self.n_layer:
            raise ValueError(f"global_every must be an int from 0 (off) to n_layer={self.n_layer}, got {g!r}")
        if g and not w:
            raise ValueError(f"global_every={g} picks the global layers among local ones, but attn_window=0 "
                             f"makes every layer global; set attn_window")
        if (self.global_rope_theta, self.global_rope_p) != (None, None):
            if not schemes.get(self.pos).rope_options or not g:
                raise ValueError(f"global_rope_theta and global_rope_p set the RoPE of the global layers; they need "
                                 f"pos={_rope_names()} and global_every > 0, got pos={self.pos!r}, global_every={g}")
            theta, p = self.global_rope_theta, self.global_rope_p
            if theta is not None and (isinstance(theta, bool) or not isinstance(theta, (int, float)) or theta <= 0):
                raise ValueError(f"global_rope_theta must be a number > 0 or None, got {theta!r}")
            if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1):
                raise ValueError(f"global_rope_p must be a number in [0, 1] or None, got {p!r}")
        f, s = self.temperature_floor, self.temperature_slope
        if isinstance(f, bool) or not isinstance(f, int) or f < 1 or isinstance(s, bool) \
                or not isinstance(s, (int, float)) or s < 0:
            raise ValueError(f"temperature_floor must be an int >= 1 and temperature_slope a number >= 0, "
                             f"got {f!r} and {s!r}")
        if self.attn_temperature_tuning and not self.nope_every:
            raise ValueError("attn_temperature_tuning scales the queries of the NoPE layers, but nope_every=0 "
                             "leaves none; set nope_every")


def _rope_names() -> str:
    """The schemes that take RoPE's options, for an error message: 'rope' (or 'rope' or 'xpos' ...)."""
    return " or ".join(repr(n) for n, e in schemes.REGISTRY.items() if e.rope_options)


def layer_roles(cfg: GPTConfig) -> tuple:
    """(nope_layers, local_layers): 0-based indices. Counting from 1, layers k, 2k, ... of nope_every = k
    have no positions; with attn_window > 0 every layer is local except layers g, 2g, ... of
    global_every = g (every layer when g = 0). Llama 4: NoPE layers = global layers; Gemma: no NoPE."""
    def every(k):  # layers k, 2k, ... counting from 1 -> 0-based indices k-1, 2k-1, ...
        return tuple(i for i in range(cfg.n_layer) if k and (i + 1) % k == 0)
    glob = every(cfg.global_every)
    return every(cfg.nope_every), tuple(i for i in range(cfg.n_layer) if cfg.attn_window and i not in glob)


class LayerCache(NamedTuple):
    """One layer's KV cache: keys and values (B, H, Tk, D), as they were written (rotated), and the states
    the position scheme's score_bias and extra_logits keep for the next call (None for the built-in schemes)."""
    k: torch.Tensor
    v: torch.Tensor
    state: object = None
    extra_state: object = None


class Attention(nn.Module):
    """window=w > 0: a local layer (cfg.window_kind); 0: global. No parameters depend on it."""
    q_chunk = 256  # queries per attn_sdpa chunk when there is a bias, sinks or a window (any value: same numbers)

    def __init__(self, cfg: GPTConfig, window: int = 0):
        super().__init__()
        self.n_head, self.head_dim, self.causal = cfg.n_head, cfg.n_embd // cfg.n_head, cfg.causal
        self.window, self.window_kind = window, cfg.window_kind
        self.stream = None  # (n_sink, cache size) while TinyLM.set_streaming is on: StreamingLLM's cache (streaming.py)
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)
        self.out = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        # attention sinks: one logit per head that joins every query's softmax over a key whose value is 0
        self.sink = nn.Parameter(torch.zeros(cfg.n_head)) if cfg.sinks else None

    def split_heads(self, x):
        """x (B, T, C) -> q, k, v, each (B, H, T, D): the projection cut into heads, before RoPE."""
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)  # (B, T, 3C) -> 3 x (B, T, C)
        # (B, T, C) -> (B, T, H, D) -> (B, H, T, D)
        return tuple(t.view(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in (q, k, v))

    def forward(self, x, scheme=None, module=None, layer=None, offset=0, shared=None, kv=None, q_scale=None):
        """x (B, T, C) -> (out (B, T, C), LayerCache). scheme: the model's schemes.Scheme (None: no positions),
        module: its module, layer: this layer's schemes.Layer, shared: what scheme.prepare built for this
        forward, kv: this layer's LayerCache or None. q_scale (T,): a factor on each query (Llama 4's
        temperature tuning), or None."""
        B, T, C = x.shape
        scheme = scheme or schemes.get("none")
        q, k, v = self.split_heads(x)
        q_sink = None
        if self.stream is not None and kv is None and scheme.rotate_qk is not None and T > self.stream[1]:
            # StreamingLLM: the queries as seen from the cache's last place, for their scores on the sinks
            q_sink = streaming.requery(q, lambda qq, kk, at: scheme.rotate_qk(module, qq, kk, at, layer),
                                       self.stream[1] - 1)
        if scheme.rotate_qk is not None:  # RoPE and its relatives: turn q and k (never v)
            q, k = schemes.check_qk(scheme, scheme.rotate_qk(module, q, k, offset, layer), q.shape, k.shape)
        if q_scale is not None:
            q = q * q_scale[:, None].to(q.dtype)  # (B, H, T, D) * (T, 1)
        if kv is not None:  # cached decoding: prepend the past keys/values (already rotated)
            k, v = torch.cat((kv.k, k), dim=2), torch.cat((kv.v, v), dim=2)  # (B, H, Tpast+T, D)
        # the bias and the extra logits see this call's queries q (B, H, T, D) and every key they attend to,
        # k (B, H, Tk, D); each keeps its own state in the cache
        past = (None, None) if kv is None else (kv.state, kv.extra_state)
        bias, state, extra, extra_state = None, None, None, None
        if scheme.score_bias is not None:  # a function of the chunk: bias(a, b, s, e) -> (B?, H, b-a, e-s)
            out = scheme.score_bias(module, x, layer, offset, shared, past[0], q=q, k=k)
            bias, state = schemes.checked_bias(scheme, out, B, self.n_head, T, k.shape[2])
        if scheme.extra_logits is not None:  # (B?, H, T, n)
            out = scheme.extra_logits(module, x, layer, offset, shared, past[1], q=q, k=k)
            extra, extra_state = schemes.checked_extra(scheme, out, B, self.n_head, T)
        if self.sink is not None:  # (H,) -> (1, H, 1, 1): the same logit for every query of a head
            sink = self.sink.view(1, -1, 1, 1).to(q.dtype)
            if extra is None:
                extra = sink
            else:  # (B?, H, T, n) beside (1, H, 1, 1) -> (B?, H, T, n + 1)
                lead = torch.broadcast_shapes(extra.shape[:-1], sink.shape[:-1])
                extra = torch.cat((extra.expand(*lead, extra.shape[-1]), sink.expand(*lead, 1)), dim=-1)
        if self.stream is not None and kv is not None:
            raise ValueError("StreamingLLM (set_streaming) scores a whole text in one forward; switch it off "
                             "(set_streaming(None)) before cached decoding")
        if self.stream is not None:  # an evaluation switch (set_streaming); no training runs it
            y = streaming.attend(q, k, v, bias, *self.stream, q_sink=q if q_sink is None else q_sink,
                                 q_chunk=self.q_chunk)  # (B, H, T, D)
        else:
            y = attn_sdpa(q, k, v, score_bias=bias, causal=self.causal, window=self.window, q_chunk=self.q_chunk,
                          window_kind=self.window_kind, extra_logits=extra)  # (B, H, T, D)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, H, T, D) -> (B, T, H, D) -> (B, T, C)
        return self.out(y), LayerCache(k, v, state, extra_state)


class MLP(nn.Module):
    """fc (C -> mlp_ratio C), GELU, proj (back to C): the position-wise feed-forward layer."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, cfg.mlp_ratio * cfg.n_embd)
        self.act = nn.GELU()
        self.proj = nn.Linear(cfg.mlp_ratio * cfg.n_embd, cfg.n_embd)

    def forward(self, x):
        return self.proj(self.act(self.fc(x)))  # (B, T, C) -> (B, T, 4C) -> (B, T, C)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, window: int = 0):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd, bias=cfg.norm_bias)
        self.ln2 = nn.LayerNorm(cfg.n_embd, bias=cfg.norm_bias)
        self.attn = Attention(cfg, window)
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
        # RoPE tables (no parameters) of a scheme that takes RoPE's options: self.rope for every RoPE
        # layer, or for the local ones when the global layers have their own base or p (self.global_rope,
        # Gemma 3/4). The scheme's rotate_qk gets the layer's table (rope_of) in its schemes.Layer.
        self.rope = self._rope(cfg.rope_scaling) if self.scheme.rope_options else None
        own_global = (cfg.global_rope_theta, cfg.global_rope_p) != (None, None)
        self.global_rope = self._rope(cfg.rope_scaling, global_layers=True) if own_global else None
        # nope_layers attend without positions; local_layers within cfg.attn_window (no parameters either)
        self.nope_layers, self.local_layers = layer_roles(cfg)
        self.blocks = nn.ModuleList(Block(cfg, cfg.attn_window if i in self.local_layers else 0)
                                    for i in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(C, bias=cfg.norm_bias)
        self.head = nn.Linear(C, cfg.vocab_size, bias=False)
        self._init_weights(cfg)
        if cfg.tie_weights:
            self.head.weight = self.tok_emb.weight
        if module is not None and self.pos_module is not module:
            raise ValueError(f"scheme {cfg.pos!r} shares its name with an attribute of TinyLM; rename the scheme")

    @property
    def pos_module(self):
        """The scheme's module, model.<scheme name> (for rope: the RoPE tables), or None."""
        return self._modules.get(self.cfg.pos)

    def _rope(self, scaling: dict = None, global_layers: bool = False) -> ScaledRotaryEmbedding:
        """The RoPE tables of every RoPE layer, or with global_layers=True those of global_rope_theta/_p."""
        cfg = self.cfg
        base, p = cfg.rope_theta, cfg.rope_p
        if global_layers:
            base = base if cfg.global_rope_theta is None else cfg.global_rope_theta
            p = p if cfg.global_rope_p is None else cfg.global_rope_p
        return ScaledRotaryEmbedding(cfg.n_embd // cfg.n_head, base, cfg.rope_pairing, scaling=scaling,
                                     partial_rotary_factor=cfg.partial_rotary_factor, rope_p=p)

    def rope_of(self, i: int):
        """The RotaryEmbedding layer i turns q and k with, or None (a NoPE layer, or no RoPE)."""
        if i in self.nope_layers:
            return None
        return self.global_rope if self.global_rope is not None and i not in self.local_layers else self.rope

    def _init_weights(self, cfg: GPTConfig) -> None:
        """The recipe's initialisation (GPTConfig's init fields). A Linear set to "torch" keeps the
        weights nn.Linear drew when it was built, U(+-1/sqrt(fan_in)) for weight and bias (std
        1/sqrt(3 fan_in): 0.051 at C = 128); the others are redrawn here, in the order this model
        always drew them, so a config of the older fields gives the same weights as before."""
        keep = set()  # the Linears that keep PyTorch's init, and every module of the scheme's (its own init)
        if self.pos_module is not None:
            keep |= set(self.pos_module.modules())
        if cfg.linear_init == "torch":
            keep |= {self.head, *(blk.mlp.fc for blk in self.blocks)}
        if cfg.qkv_init == "torch":
            keep |= {blk.attn.qkv for blk in self.blocks}
        if cfg.resid_init == "torch":
            keep |= {m for blk in self.blocks for m in (blk.attn.out, blk.mlp.proj)}
        for m in self.modules():  # GPT-2: every Linear at std 0.02, biases 0 ... (for those not "torch")
            if isinstance(m, nn.Linear) and m not in keep:
                nn.init.normal_(m.weight, 0.0, 0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        nn.init.normal_(self.tok_emb.weight, 0.0, cfg.emb_std)  # with emb_scale, times sqrt(C) in forward: unit scale
        if cfg.qkv_init != "torch":  # ... "unit": q and k at unit scale, so attention can leave "uniform" quickly
            for blk in self.blocks:
                nn.init.normal_(blk.attn.qkv.weight, 0.0, cfg.n_embd ** -0.5 if cfg.qkv_init == "unit" else 0.02)
        if cfg.resid_init != "torch":  # GPT-2: each block adds to the residual stream twice, so shrink both
            resid_std = 0.02 / math.sqrt(2 * cfg.n_layer) if cfg.resid_init == "scaled" else 0.02
            for blk in self.blocks:
                nn.init.normal_(blk.attn.out.weight, 0.0, resid_std)
                nn.init.normal_(blk.mlp.proj.weight, 0.0, resid_std)

    def forward(self, idx, targets=None, cache=None) -> LMOutput:
        """idx (B, T) -> LMOutput(logits (B, T, V), loss or None, cache). `cache`: per-layer (k, v) of the past."""
        B, T = idx.shape
        offset = 0 if cache is None else cache[0].k.shape[2]  # tokens already seen
        scheme, module = self.scheme, self.pos_module
        # Vaswani et al. 3.4: embeddings times sqrt(C), so tokens and the sinusoidal PE are on one
        # scale when added. The tied head uses the unscaled table, so its logits start small.
        x = self.tok_emb(idx)  # (B, T, C)
        if scheme.input_rows is not None and scheme.input_before_scale:  # learned: stored and scaled like a token
            x = x + scheme.input_rows(module, T, offset)  # (B, T, C) + (T, C)
        if self.cfg.emb_scale:
            x = x * math.sqrt(self.cfg.n_embd)
        if scheme.input_rows is not None and not scheme.input_before_scale:  # sinusoidal: on the scaled tokens
            x = x + scheme.input_rows(module, T, offset).to(x.dtype)  # (B, T, C) + (T, C)
        # Work every layer shares, once per forward (T5's bucket table, looked up once).
        shared = None if scheme.prepare is None else scheme.prepare(module, x, offset)
        temp = None  # Llama 4's temperature on the NoPE layers' queries, (T,), for positions offset .. offset+T-1
        if self.cfg.attn_temperature_tuning and self.nope_layers:
            pos = torch.arange(offset, offset + T, device=idx.device)
            temp = llama4_attn_temperature(pos, self.cfg.temperature_floor, self.cfg.temperature_slope)
        new_cache = []
        for i, block in enumerate(self.blocks):
            nope = i in self.nope_layers  # the scheme leaves it without positions (the causal mask stays)
            layer = Layer(i, nope, block.attn.window, self.rope_of(i), block.attn.window_kind)
            x, kv = block(x, scheme=scheme, module=module, layer=layer, offset=offset, shared=shared,
                          q_scale=temp if nope else None, kv=None if cache is None else cache[i])
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
        Recorded in cfg.rope_scaling, so a fine-tuned checkpoint reloads with its scaling. Every
        RoPE layer gets it, local ones included (Gemma 3 scales only its global layers)."""
        if self.rope is None:
            raise ValueError(f"RoPE scaling needs a scheme that uses RoPE's tables ({_rope_names()}); "
                             f"this model uses pos={self.cfg.pos!r}")
        device = self.rope.inv_freq.device
        self.rope = self._rope(scaling).to(device)
        if self.global_rope is not None:
            self.global_rope = self._rope(scaling, global_layers=True).to(device)
        self.cfg.rope_scaling = scaling

    def set_streaming(self, n_sink: int = None, window: int = None) -> None:
        """StreamingLLM at evaluation (streaming.py): every layer reads through a cache of `window` entries,
        n_sink first tokens and the most recent ones, positions read inside the cache; n_sink=0 is the plain
        window. set_streaming(None) switches it off. Refused where the cache's positions cannot be read again:
        positions added to the input (the scheme's input_rows), local layers, Llama 4's temperature, sinks."""
        if n_sink is None:
            for blk in self.blocks:
                blk.attn.stream = None
            return
        c = self.cfg
        why = ("positions added to the input cannot be read again inside the cache" if self.scheme.input_rows
               else "it has local layers already" if self.local_layers
               else "Llama 4's temperature reads text positions" if c.attn_temperature_tuning and self.nope_layers
               else "learned sinks take the first tokens' role" if c.sinks or self.scheme.extra_logits
               else "it is not causal" if not c.causal else None)
        if why:
            raise ValueError(f"StreamingLLM is not defined for this model (pos={c.pos!r}): {why}")
        if not (isinstance(window, int) and isinstance(n_sink, int) and 0 <= n_sink < window):
            raise ValueError(f"set_streaming needs ints 0 <= n_sink < window, got {n_sink!r}, {window!r}")
        for blk in self.blocks:
            blk.attn.stream = (n_sink, window)

    def num_params(self, pos_only: bool = False) -> int:
        mods = [self.pos_module] if pos_only else [self]
        return sum(p.numel() for m in mods if m is not None for p in m.parameters())
