"""The bench's model options, extending tiny_lm.py's teaching model: LabConfig (a GPTConfig with more fields)
and LabLM (a TinyLM that reads them), built by make_model when a config sets any of them.

What they add, each after a shipped model or a paper:
  * RoPE's shape: rope_pairing ("adjacent", or "half": GPT-NeoX / Hugging Face rotate_half),
    partial_rotary_factor (rotate the first int(f D) dims, GPT-NeoX 0.25), rope_p (p-RoPE);
  * layouts (layer_roles): nope_every = k leaves layers k, 2k, ... (from 1) without positions (Llama 4
    iRoPE); attn_window = w makes layers local (sliding window, or chunks of w) except every
    global_every-th, whose RoPE may have its own base and p (global_rope_theta, global_rope_p: Gemma 3/4);
    Llama 4's attention temperature on the NoPE layers (attn_temperature_tuning, switchable at evaluation);
  * attention sinks (sinks: one learned logit per head and layer, gpt-oss) and StreamingLLM at
    evaluation (LabLM.set_streaming, lab/streaming.py);
  * the init recipes of experiments/recipe_ablation.py (emb_scale, emb_init, qkv_init, resid_init, linear_init,
    norm_bias; "torch" keeps PyTorch's own nn.Linear init, the recipe's).
lab/variants.py's irope (Llama 4) and gemma_hybrid (Gemma 4) are built from these fields. Every default is the
teaching model's behaviour, so a LabConfig that sets none of them gives TinyLM's numbers
(tests/test_lab_options.py); make_config hands such a config back as a plain GPTConfig.
"""
import math
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn as nn

import schemes
from lab import streaming
from attn_common import WINDOW_KINDS, attn_sdpa, llama4_attn_temperature
from pos_rope import ScaledRotaryEmbedding, rotary_dim
from schemes import Layer
from tiny_lm import Attention, Block, GPTConfig, TinyLM, rope_names


@dataclass
class LabConfig(GPTConfig):
    sinks: bool = False             # attention sinks: one learned logit per head and layer in every softmax (gpt-oss)
    rope_pairing: str = "adjacent"  # or "half" (GPT-NeoX / Hugging Face rotate_half)
    partial_rotary_factor: float = 1.0  # rotate only the first int(f * head dim) dims (HF's name; GPT-NeoX 0.25)
    rope_p: float = 1.0             # p-RoPE: the fastest fraction p of the pairs turn, the rest have frequency 0
    nope_every: int = 0             # k > 0: layers k, 2k, ... (counting from 1) get no positions (Llama 4 iRoPE)
    attn_window: int = 0            # w > 0: local layers see w positions (window_kind); 0: every layer global
    window_kind: str = "sliding"    # "sliding": keys i-w < j <= i; "chunked": keys of i's chunk of w, j <= i
    global_every: int = 0           # with attn_window: layers g, 2g, ... (from 1) stay global; 0: all local
    global_rope_theta: float = None  # RoPE base of the global layers (Gemma 3/4: 1e6); None: rope_theta
    global_rope_p: float = None     # p-RoPE share of the global layers (Gemma 4: 0.25); None: rope_p
    attn_temperature_tuning: bool = False  # Llama 4: scale the NoPE layers' queries; read on every forward,
    #                                         so evaluation can switch it (long_context_test.py --scalings)
    temperature_floor: int = 8192   # its floor_scale (attn_common.llama4_attn_temperature; Llama 4's value)
    temperature_slope: float = 0.1  # its attn_scale (Llama 4's value)
    # Init recipes (experiments/recipe_ablation.py). "torch" keeps PyTorch's own nn.Linear init, weight and bias uniform in
    # +-1/sqrt(fan_in): the recipe's (docs/recipe.md); the other values are older or other projects' recipes.
    emb_scale: bool = True          # tokens at std C^-0.5 times sqrt(C) (Vaswani 3.4); False: GPT-2's std 0.02, no scale
    emb_init: str = "recipe"        # the token table's std: "recipe" (as emb_scale says); "kaiming": sqrt(2/C) (x-transformers)
    qkv_init: str = "torch"         # q/k/v weights: "torch"; "unit": std C^-0.5 (unit-scale logits); "gpt2": std 0.02
    resid_init: str = "torch"       # residual projections: "torch"; "scaled": std 0.02/sqrt(2 n_layer) (GPT-2); "plain": 0.02
    linear_init: str = "torch"      # the other Linears (MLP fc, head): "torch"; "gpt2": std 0.02, bias 0
    norm_bias: bool = True          # LayerNorms with a bias; False: a gain only (x-transformers, most newer models)

    def __post_init__(self):
        super().__post_init__()
        scheme = schemes.get(self.pos)
        inits = {"qkv_init": ("unit", "gpt2", "torch"), "resid_init": ("scaled", "plain", "torch"),
                 "linear_init": ("gpt2", "torch"), "emb_init": ("recipe", "kaiming")}
        for name, allowed in inits.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {getattr(self, name)!r}")
        if scheme.rope_options:
            rotary_dim(self.n_embd // self.n_head, self.partial_rotary_factor, self.rope_p)  # raises if unusable
        elif (self.partial_rotary_factor, self.rope_p) != (1.0, 1.0):
            raise ValueError(f"partial_rotary_factor and rope_p shape RoPE, but pos={self.pos!r}; use pos={rope_names()}")
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
                                 f"pos={rope_names()} and global_every > 0, got pos={self.pos!r}, global_every={g}")
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


GPT_FIELDS = tuple(f.name for f in fields(GPTConfig))
LAB_DEFAULTS = {f.name: f.default for f in fields(LabConfig) if f.name not in GPT_FIELDS}


def make_config(**kw) -> GPTConfig:
    """A GPTConfig of these fields, or a LabConfig where one of the bench's fields differs from its default."""
    if any(k in LAB_DEFAULTS and v != LAB_DEFAULTS[k] for k, v in kw.items()):
        return LabConfig(**kw)
    return GPTConfig(**{k: v for k, v in kw.items() if k not in LAB_DEFAULTS})


def make_model(cfg: GPTConfig) -> TinyLM:
    """LabLM for a LabConfig, the teaching TinyLM for a GPTConfig."""
    return LabLM(cfg) if isinstance(cfg, LabConfig) else TinyLM(cfg)


def option(cfg: GPTConfig, name: str):
    """A bench field of a config of either kind: a GPTConfig has every bench field at its default."""
    return getattr(cfg, name) if isinstance(cfg, LabConfig) else LAB_DEFAULTS[name]


def full_config(cfg: GPTConfig) -> dict:
    """Every field, the bench's included (their defaults for a GPTConfig): what checkpoints and provenance record."""
    return {**asdict(cfg), **{k: option(cfg, k) for k in LAB_DEFAULTS}}


def as_lab(model: TinyLM) -> "LabLM":
    """The same weights in a LabLM (for an evaluation switch only the bench has, StreamingLLM)."""
    if isinstance(model, LabLM):
        return model
    lab = LabLM(LabConfig(**asdict(model.cfg)))
    lab.load_state_dict(model.state_dict())
    return lab.to(next(model.parameters()).device)


def layer_roles(cfg: GPTConfig) -> tuple:
    """(nope_layers, local_layers): 0-based indices. Counting from 1, layers k, 2k, ... of nope_every = k
    have no positions; with attn_window > 0 every layer is local except layers g, 2g, ... of
    global_every = g (every layer when g = 0). Llama 4: NoPE layers = global layers; Gemma: no NoPE."""
    nope_every, window, global_every = (option(cfg, n) for n in ("nope_every", "attn_window", "global_every"))

    def every(k):  # layers k, 2k, ... counting from 1 -> 0-based indices k-1, 2k-1, ...
        return tuple(i for i in range(cfg.n_layer) if k and (i + 1) % k == 0)
    glob = every(global_every)
    return every(nope_every), tuple(i for i in range(cfg.n_layer) if window and i not in glob)


class LabAttention(Attention):
    """Attention with a local window (window > 0, cfg.window_kind), sinks, Llama 4's query temperature on a
    NoPE layer, and StreamingLLM's cache (stream, set by LabLM.set_streaming)."""

    def __init__(self, cfg: GPTConfig, window: int = 0):
        super().__init__(cfg)
        self.window, self.window_kind = window, option(cfg, "window_kind")
        self.stream = None  # (n_sink, cache size) while LabLM.set_streaming is on: StreamingLLM's cache (lab/streaming.py)
        self.temperature = None  # (floor, slope) while cfg.attn_temperature_tuning is on: set by LabLM.forward
        # attention sinks: one logit per head that joins every query's softmax over a key whose value is 0
        self.sink = nn.Parameter(torch.zeros(cfg.n_head)) if option(cfg, "sinks") else None

    def forward(self, x, scheme=None, module=None, layer: Layer = None, offset=0, shared=None, kv=None):
        if self.stream is not None and kv is not None:
            raise ValueError("StreamingLLM (set_streaming) scores a whole text in one forward; switch it off "
                             "(set_streaming(None)) before cached decoding")
        return super().forward(x, scheme, module, layer, offset, shared, kv)

    def turn(self, scheme, module, q, k, offset: int, layer: Layer) -> tuple:
        self._q_sink = None
        if self.stream is not None and scheme.rotate_qk is not None and q.shape[2] > self.stream[1]:
            # StreamingLLM: the queries as seen from the cache's last place, for their scores on the sinks
            self._q_sink = streaming.requery(q, lambda qq, kk, at: scheme.rotate_qk(module, qq, kk, at, layer),
                                             self.stream[1] - 1)
        q, k = super().turn(scheme, module, q, k, offset, layer)
        if self.temperature is not None and layer.nope:  # Llama 4: q times a factor of its text position
            pos = torch.arange(offset, offset + q.shape[2], device=q.device)
            q = q * llama4_attn_temperature(pos, *self.temperature)[:, None].to(q.dtype)  # (B, H, T, D) * (T, 1)
        return q, k

    def attend(self, q, k, v, bias, extra):
        if self.sink is not None:  # (H,) -> (1, H, 1, 1): the same logit for every query of a head
            sink = self.sink.view(1, -1, 1, 1).to(q.dtype)
            if extra is None:
                extra = sink
            else:  # (B?, H, T, n) beside (1, H, 1, 1) -> (B?, H, T, n + 1)
                lead = torch.broadcast_shapes(extra.shape[:-1], sink.shape[:-1])
                extra = torch.cat((extra.expand(*lead, extra.shape[-1]), sink.expand(*lead, 1)), dim=-1)
        if self.stream is not None:  # an evaluation switch (set_streaming); no training runs it
            return streaming.attend(q, k, v, bias, *self.stream, q_sink=q if self._q_sink is None else self._q_sink,
                                    q_chunk=self.q_chunk)  # (B, H, T, D)
        return attn_sdpa(q, k, v, score_bias=bias, causal=self.causal, window=self.window, q_chunk=self.q_chunk,
                         window_kind=self.window_kind, extra_logits=extra)  # (B, H, T, D)


class LabLM(TinyLM):
    """TinyLM reading LabConfig's fields: its layers' roles, RoPE's shape, norms, sinks and init recipes."""

    def __init__(self, cfg: LabConfig):
        self.nope_layers, self.local_layers = layer_roles(cfg)  # read by make_block, while TinyLM builds
        super().__init__(cfg)
        # the global layers' own RoPE (Gemma 3/4), when their base or p differ from the local layers'
        own_global = (cfg.global_rope_theta, cfg.global_rope_p) != (None, None)
        self.global_rope = self.make_rope(cfg.rope_scaling, global_layers=True) if own_global else None

    def make_rope(self, scaling: dict = None, global_layers: bool = False) -> ScaledRotaryEmbedding:
        cfg = self.cfg
        base, p = cfg.rope_theta, cfg.rope_p
        if global_layers:
            base = base if cfg.global_rope_theta is None else cfg.global_rope_theta
            p = p if cfg.global_rope_p is None else cfg.global_rope_p
        return ScaledRotaryEmbedding(cfg.n_embd // cfg.n_head, base, cfg.rope_pairing, scaling=scaling,
                                     partial_rotary_factor=cfg.partial_rotary_factor, rope_p=p)

    def make_block(self, cfg: LabConfig, i: int) -> Block:
        return Block(cfg, LabAttention(cfg, cfg.attn_window if i in self.local_layers else 0), norm=self.make_norm)

    def make_norm(self, C: int) -> nn.Module:
        return nn.LayerNorm(C, bias=self.cfg.norm_bias)

    def layer_of(self, i: int) -> Layer:
        nope, block = i in self.nope_layers, self.blocks[i]
        rope = None if nope else self.global_rope if self.global_rope is not None and i not in self.local_layers \
            else self.rope
        return Layer(i, nope, block.attn.window, rope, block.attn.window_kind)

    def emb_scale(self) -> float:
        return math.sqrt(self.cfg.n_embd) if self.cfg.emb_scale else 1.0

    def forward(self, idx, targets=None, cache=None):
        temperature = (self.cfg.temperature_floor, self.cfg.temperature_slope) \
            if self.cfg.attn_temperature_tuning and self.nope_layers else None
        for blk in self.blocks:  # read on every forward, so that evaluation can switch it
            blk.attn.temperature = temperature
        return super().forward(idx, targets, cache)

    def _init_weights(self, cfg: LabConfig) -> None:
        """The recipe's initialisation (LabConfig's init fields). A Linear set to "torch" keeps the weights
        nn.Linear drew when it was built; the others are redrawn here, in the order this model always drew
        them, so a config of the older fields gives the same weights as before."""
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

    def set_rope_scaling(self, scaling: dict = None) -> None:
        """TinyLM's, and the global layers' own RoPE too. Every RoPE layer gets it, local ones included
        (Gemma 3 scales only its global layers)."""
        super().set_rope_scaling(scaling)
        if self.global_rope is not None:
            self.global_rope = self.make_rope(scaling, global_layers=True).to(self.rope.inv_freq.device)

    def set_streaming(self, n_sink: int = None, window: int = None) -> None:
        """StreamingLLM at evaluation (lab/streaming.py): every layer reads through a cache of `window` entries,
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
