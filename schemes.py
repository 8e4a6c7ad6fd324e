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
        Once per forward, x (B, T, C) the input of the first block: work every layer shares (T5's
        bucket table looked up once). Its result reaches every score_bias call of that forward.
    score_bias(m, x, layer, offset, shared, past, q, k) -> (bias, state)
        The bias on the scores of one layer: x (B, T, C) the layer's normalised input, queries at
        positions offset .. offset+T-1 (the whole window, or the new tokens in cached decoding),
        keys 0 .. offset+T-1. q (B, H, T, D) are this call's queries and k (B, H, offset+T, D) every
        key they see, the cached ones first, both as attention will use them (after rotate_qk; CoPE,
        stick-breaking and selective attention read them). TinyLM passes q and k by keyword, so a hook
        that does not read them declares q=None, k=None. bias is None; or a per-key tensor
        w (B?, H, 1, Tk), standing for the bias w_j - w_i (ALiBi's key form m_h j; attn_sdpa adds the
        causal mask); or a function bias(a, b, s, e) -> the bias of query rows a..b-1 of this call
        (positions offset+a ..) against keys s..e-1, broadcastable to
        (B, H, b-a, e-s): attn_common.attn_sdpa asks for it one chunk of queries at a time, against
        only the keys that chunk can see. With a causal model it holds -inf at every key after its
        query (attn_common.hide_later_keys writes them; attn_sdpa raises on a bias without them).
        A function whose bias depends on the distance i - j alone may carry it whole, as
        bias.distance = (r, d0), r (B?, H, L) with the bias of query i on key j at r[..., i - j + d0]:
        attention then reads its chunks as views of r and writes no mask (T5, KERPLE).
        So no caller ever holds a (H, T, T) bias: do per-layer work (a gate's cumulative sums)
        here, per-chunk work inside the function (q[..., a:b, :] against k[..., s:e, :]). past is
        this hook's state from the KV cache (None on the first call); state is what the cache keeps
        for the next call.
    extra_logits(m, x, layer, offset, shared, past, q, k) -> (logits, state)
        The same arguments and state as score_bias (its own state). logits (B?, H, T, n) or None:
        n logits per query that join the softmax beside the keys and are then dropped (their values
        are 0): the weights of the real keys sum to less than 1. attn_sdpa(extra_logits=...).

In one layer TinyLM calls, in this order: rotate_qk on the new q and k; the cached keys and values
put before the new ones; score_bias, then extra_logits, on those q and k; attention. input_rows and
prepare run once per forward, before the first layer. What a hook returns is checked as it arrives
(check_qk, checked_bias, checked_extra): the wrong layout or shape is a SchemeError naming the scheme
and the hook, before attention runs.

`layer` is a Layer: index, nope (a NoPE layer of nope_every), window (0: global), rope, window_kind. A scheme
decides what a NoPE layer means for it (rope: no rotation; alibi: no bias).

The rest of the contract (Scheme's fields):
  * build(cfg) -> nn.Module: cfg is the GPTConfig, cfg.train_len the length the model is trained
    at (FIRE's threshold, xPos's centre); cfg.pos_options the scheme's options (below).
    The module's parameters keep the init it gives them: TinyLM's init redraws only its own Linears.
  * decay: the names of the module's parameters that get weight decay (default none).
  * causal_only: it has no bidirectional form (FoX's cumulative gate); GPTConfig(causal=False)
    refuses it and experiments/breakage_test.py leaves it out of the bidirectional cells, saying so.
  * options: {name: default}; a variant sets them in GPTConfig.pos_options, checked against the
    defaults' types, and row_names writes them into the row name (kerple{p=2}).
  * rope_options: it uses RoPE's tables (TinyLM builds them from rope_theta, rope_p, ...); the
    training-free scalings and the fine-tunes with a scaling apply to every scheme that says so.
  * colour: distinct among the registered schemes; None takes the first free one of SPARE_COLOURS. One that
    lab/plot_style.py gives another line (a scaling's) is drawn apart from that line where the two meet (plot_style._line).
  * Every model takes attention sinks (LabConfig.sinks, lab/options.py: one learned logit per head and layer, through
    the extra_logits path), whatever its scheme: rope_sink and alibi_sink are variants, not schemes.

A scheme from outside the repository comes in with `--scheme-file PATH` on every entry script
(load_files: the file is imported, and what it registers is recorded with the file's path and the
SHA-256 of its text, which the checkpoints keep). docs/your_scheme.md writes one.

Scheme files written to this contract, in field/: field_relbias.py (T5's bucketed bias, KERPLE, FIRE),
field_xpos.py (xPos, rotate_qk with rope_options), field_fox.py (FoX's forget gate, its sums as cache
state, causal only), and the biases that read q and k: field_cope.py, field_stickbreaking.py and
field_selective.py (its votes as cache state). This module never imports them: lab/field.py, above them, does, and so fills the
default registry from above (they import this module to register). examples/kerple_power.py
(KERPLE's power kernel) is loaded with --scheme-file (docs/your_scheme.md). DroPE (positions dropped from a trained model) needs no entry:
it is a fine-tune to none of a rope checkpoint, whose RoPE has no weights.

Importing a module that calls register() adds its scheme everywhere: GPTConfig, variants.VARIANTS
(base and copy variant of the same name), the figures, the tables, experiments/breakage_test.py and experiments/benchmark.py.
"""
import functools
import hashlib
import importlib.util
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, NamedTuple, Optional

import torch
import torch.nn as nn

from pos_alibi import ALiBi
from pos_learned import LearnedPositionalEmbedding
from pos_sin import SinusoidalPositionalEncoding

HOOKS = ("input_rows", "rotate_qk", "prepare", "score_bias", "extra_logits")


class Layer(NamedTuple):
    """What a hook knows of the layer it serves (TinyLM builds one per layer and forward)."""
    index: int                    # 0-based
    nope: bool                    # a layer without positions (LabConfig.nope_every, lab/options.py)
    window: int                   # its local window; 0: global
    rope: Optional[nn.Module]     # its RotaryEmbedding (TinyLM.rope_of), or None
    window_kind: str = "sliding"  # with window > 0: "sliding" (keys i-w < j <= i) or "chunked" (i's chunk of w)


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
    rope_options: bool = False              # it uses RoPE's tables (rope_theta, rope_p, ..., the scalings)
    colour: Optional[str] = None            # its colour in every figure, distinct; None: a free spare one
    decay: tuple = ()                       # names of its module's parameters that get weight decay
    causal_only: bool = False               # no bidirectional form: causal=False is refused
    options: dict = field(default_factory=dict)  # {option: default}, set per variant in GPTConfig.pos_options

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


# A scheme registered without a colour takes the first of these that no registered scheme has (none of
# them is a colour lab/plot_style.py gives another line); more schemes than spares must name their own.
SPARE_COLOURS = ("#843c39", "#5254a3", "#8ca252", "#bd9e39", "#ad494a", "#a55194", "#6b6ecf", "#e7969c")
FILES = {}       # scheme name -> {"path", "sha256"} of the --scheme-file that registered it
FIELD_DIR = Path(__file__).resolve().parent / "field"


def field() -> tuple:
    """The field's comparison set (docs/field.md): the registered schemes whose file lies in field/ (tiny_lm
    imports them), in registry order. Its own panel and page; the README's glance table and headline figure
    keep the rest."""
    return tuple(n for n, e in REGISTRY.items() if e.pos_file and _in_field_dir(e.pos_file))


@functools.lru_cache(maxsize=None)
def _in_field_dir(pos_file: str) -> bool:
    """Whether a pos file lies in field/ (resolved once per path: figures ask field() thousands of times)."""
    return Path(pos_file).resolve().parent == FIELD_DIR


# The hooks' signatures now and before (docs/your_scheme.md's changelog). A hook written to an earlier one
# still runs: register() wraps it so that it gets only the arguments it was written for.
SIGNATURES = {
    "input_rows": "input_rows(m, T, offset)",
    "rotate_qk": "rotate_qk(m, q, k, offset, layer)",
    "prepare": "prepare(m, x, offset)",
    "score_bias": "score_bias(m, x, layer, offset, shared, past, q=None, k=None) -> (bias, state)",
    "extra_logits": "extra_logits(m, x, layer, offset, shared, past, q=None, k=None) -> (logits, state)",
}
POSITIONAL = {"input_rows": 3, "rotate_qk": 5, "prepare": 3, "score_bias": 6, "extra_logits": 6}
_LOADING = []  # the --scheme-file being imported by load_files, for the messages of register()


def _takes(fn, n: int, keywords=()) -> Optional[bool]:
    """Can fn be called with n positional arguments and these keywords? None where Python cannot tell."""
    import inspect
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    try:
        sig.bind(*range(n), **{k: None for k in keywords})
        return True
    except TypeError:
        return False


def _adapted(entry: Scheme) -> Scheme:
    """The entry with each hook in today's form, or ValueError naming the hook's current signature.
    Written to the first contract (2026-12-02), score_bias(m, x, layer, offset, shared, past) gets no q and k,
    and extra_logits(m, q, layer) -> logits or None gets its q and returns (logits, None)."""
    new = {}
    for hook in entry.hooks:
        fn, n = getattr(entry, hook), POSITIONAL[hook]
        if _takes(fn, n, ("q", "k") if hook in ("score_bias", "extra_logits") else ()) in (True, None):
            continue
        if hook == "score_bias" and _takes(fn, 6):
            new[hook] = functools.wraps(fn)(lambda m, x, layer, offset, shared, past, q=None, k=None, _f=fn:
                                            _f(m, x, layer, offset, shared, past))
        elif hook == "extra_logits" and _takes(fn, 3):
            new[hook] = functools.wraps(fn)(lambda m, x, layer, offset, shared, past, q=None, k=None, _f=fn:
                                            (_f(m, q, layer), None))
        else:
            raise ValueError(f"scheme {entry.name!r}: its {hook} cannot be called as {SIGNATURES[hook]}; write it "
                             f"to that signature (docs/your_scheme.md, the changelog lists the earlier ones)")
    return replace(entry, **new) if new else entry


def _registered_by(name: str) -> str:
    """The file that registered a scheme: its --scheme-file, its pos_file, or schemes.py."""
    if name in FILES:
        return FILES[name]["path"]
    return REGISTRY[name].pos_file or "schemes.py"


def register(entry: Scheme) -> Scheme:
    """Add a scheme; its name must be new and usable as an attribute (TinyLM keeps model.<name>), its
    colour distinct from every registered scheme's (None: a free spare one); one-line errors. Hooks written
    to an earlier documented signature are wrapped to today's (_adapted)."""
    if not entry.name.isidentifier():
        raise ValueError(f"scheme name {entry.name!r} must be a Python identifier (TinyLM keeps model.<name>)")
    if entry.name in REGISTRY:
        here = f" in {_LOADING[-1]}" if _LOADING else ""
        raise ValueError(f"scheme name {entry.name!r}{here} is taken: {_registered_by(entry.name)} registered it "
                         f"first; rename yours (e.g. {entry.name + '_mine'!r})")
    entry = _adapted(entry)
    taken = {e.colour.lower(): n for n, e in REGISTRY.items()}
    if entry.colour is None:
        free = [c for c in SPARE_COLOURS if c not in taken]
        if not free:
            raise ValueError(f"scheme {entry.name!r}: every spare colour is taken; give it colour='#rrggbb'")
        entry = replace(entry, colour=free[0])
    owner = taken.get(entry.colour.lower())
    if owner:
        raise ValueError(f"scheme {entry.name!r}: colour {entry.colour} is {owner}'s in the figures; "
                         f"give it another (or colour=None for a free one)")
    bad = [o for o, v in entry.options.items() if not o.isidentifier() or not isinstance(v, (bool, int, float, str))]
    if bad:
        raise ValueError(f"scheme {entry.name!r}: options {bad} need identifier names and bool/int/float/str defaults")
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


def load_files(paths) -> list:
    """Import each --scheme-file (a Python file that calls schemes.register) and record, for every scheme
    it registers, the file's absolute path and the SHA-256 of its text. Returns the names registered.
    A missing or failing file raises ValueError with one line."""
    added = []
    for path in paths or ():
        path = Path(path).resolve()
        if not path.is_file():
            raise ValueError(f"--scheme-file {path} does not exist; give the path of a Python file that calls "
                             f"schemes.register (docs/your_scheme.md)")
        if any(f["path"] == str(path) for f in FILES.values()):
            continue  # already imported in this process
        text = path.read_bytes()
        before = set(REGISTRY)
        spec = importlib.util.spec_from_file_location(f"scheme_file_{path.stem}", path)
        _LOADING.append(str(path))
        try:
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
        except Exception as e:
            for n in [n for n in REGISTRY if n not in before]:  # a file is taken whole or not at all
                unregister(n)
            raise ValueError(f"--scheme-file {path} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                             ) from None
        finally:
            _LOADING.pop()
        new = [n for n in REGISTRY if n not in before]
        if not new:
            raise ValueError(f"--scheme-file {path} registered no scheme; call schemes.register(Scheme(...)) in it")
        for n in new:
            FILES[n] = {"path": str(path), "sha256": hashlib.sha256(text).hexdigest()}
        added += new
    return added


FILE_HELP = ("a Python file outside the repository that registers a position scheme (schemes.register); "
             "repeatable. Its scheme and <name>_copy become variants (docs/your_scheme.md)")


# the end of every script's "unknown variant" message: where a name not in the registry comes from
FILE_POINTER = "; a scheme of your own comes in with --scheme-file PATH (docs/your_scheme.md)"


def file_flag(parser) -> None:
    """Add --scheme-file to an entry script's parser (load_argv has already read it)."""
    parser.add_argument("--scheme-file", action="append", default=[], metavar="PATH", help=FILE_HELP)


def load_argv(argv) -> None:
    """Import every --scheme-file named in argv, before the script's parser checks any scheme or variant
    name; a bad file: one line on stderr and exit 2."""
    import sys
    argv = sys.argv[1:] if argv is None else list(argv)
    paths = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--scheme-file"]
    paths += [a.split("=", 1)[1] for a in argv if a.startswith("--scheme-file=")]
    try:
        load_files(paths)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def options_of(name: str, given: dict = None) -> dict:
    """The scheme's options with the given values over its defaults; an unknown option, a value of
    another type than its default, or NaN or inf for a number raises ValueError with one line. Every
    name with options in braces (kerple{p=2}) is checked here, whichever script reads it."""
    entry, given = get(name), dict(given or {})
    unknown = sorted(set(given) - set(entry.options))
    if unknown:
        raise ValueError(f"scheme {name!r} has no option {', '.join(unknown)}; its options: "
                         f"{', '.join(f'{o}={v!r}' for o, v in entry.options.items()) or 'none'}")
    out = dict(entry.options)
    for o, v in given.items():
        want = type(entry.options[o])
        ok = isinstance(v, want) and not (want is not bool and isinstance(v, bool)) or (want is float and
                                                                                     type(v) is int)
        if not ok:
            raise ValueError(f"option {o} of scheme {name!r} is a {want.__name__}, got {v!r}")
        if want is float and not math.isfinite(v):
            raise ValueError(f"option {o} of scheme {name!r} must be a finite number, got {v!r}; e.g. "
                             f"{name}{{{o}={entry.options[o]!r}}}, its default")
        out[o] = float(v) if want is float else v
    return out


def names() -> tuple:
    return tuple(REGISTRY)


def get(name: str) -> Scheme:
    if name not in REGISTRY:
        raise ValueError(f"unknown position scheme {name!r}; choose one of {', '.join(REGISTRY)}")
    return REGISTRY[name]


# ----------------------------------------------------------------------------- what a hook returns, checked

class SchemeError(ValueError):
    """A hook returned what the contract does not allow: one line naming the scheme and the hook."""


def _shape(t) -> str:
    return f"a {type(t).__name__}" if not torch.is_tensor(t) else f"shape {tuple(t.shape)}"


def check_qk(entry: Scheme, out, q_shape, k_shape) -> tuple:
    """rotate_qk's (q, k), each of the shape it was given, (B, H, T, D); else SchemeError."""
    ok = isinstance(out, tuple) and len(out) == 2 and all(torch.is_tensor(t) for t in out)
    if not ok or out[0].shape != q_shape or out[1].shape != k_shape:
        got = f"{type(out).__name__}" if not ok else f"q {_shape(out[0])}, k {_shape(out[1])}"
        raise SchemeError(f"scheme {entry.name!r}: rotate_qk returned {got}; it must return (q, k) as it got them, "
                          f"(B, H, T, D) = q {tuple(q_shape)}, k {tuple(k_shape)} (docs/your_scheme.md)")
    return out


def _pair(entry: Scheme, hook: str, out) -> tuple:
    if not (isinstance(out, tuple) and len(out) == 2):
        raise SchemeError(f"scheme {entry.name!r}: {hook} returned {type(out).__name__}; it must return a pair "
                          f"({'bias' if hook == 'score_bias' else 'logits'}, state), e.g. (None, None)")
    return out


def _fits(t, want: tuple) -> bool:
    """Does tensor t broadcast to exactly the shape want?"""
    try:
        return torch.is_tensor(t) and t.dim() <= len(want) and torch.broadcast_shapes(t.shape, want) == want
    except RuntimeError:
        return False


def checked_bias(entry: Scheme, out, B: int, H: int, T: int, Tk: int) -> tuple:
    """score_bias's (bias, state) with bias None, a tensor broadcastable to (B, H, T, Tk) (per key:
    (B?, H, 1, Tk)), or a function whose every chunk is checked as attention asks for it; else SchemeError."""
    bias, state = _pair(entry, "score_bias", out)
    if bias is None:
        return None, state
    if callable(bias):
        def rows(a, b, s, e):  # the scheme's chunk, checked: (B?, H, b-a, e-s)
            chunk = bias(a, b, s, e)
            if not _fits(chunk, (B, H, b - a, e - s)):
                raise SchemeError(f"scheme {entry.name!r}: score_bias's function gave rows {a}..{b - 1} against keys "
                                  f"{s}..{e - 1} {_shape(chunk)}; it must broadcast to (B, H, b-a, e-s) = "
                                  f"{(B, H, b - a, e - s)}")
            return chunk
        by_distance = getattr(bias, "distance", None)
        if by_distance is not None:  # (r, d0): r (B?, H, L), the bias of i - j at r[..., i - j + d0]
            r, d0 = by_distance if isinstance(by_distance, tuple) and len(by_distance) == 2 else (None, None)
            if not (_fits(r, (B, H, r.shape[-1]) if torch.is_tensor(r) else ()) and isinstance(d0, int)
                    and 0 <= d0 - (T - 1) and d0 + Tk <= r.shape[-1]):
                raise SchemeError(f"scheme {entry.name!r}: score_bias's function has .distance = "
                                  f"{_shape(r)}, {d0!r}; it must be (r, d0), r broadcastable to (B, H, L) with the "
                                  f"bias of query i on key j at r[..., i - j + d0], every distance {1 - T} .. "
                                  f"{Tk - 1} inside it")
            rows.distance = by_distance
        return rows, state
    if not _fits(bias, (B, H, T, Tk)):
        raise SchemeError(f"scheme {entry.name!r}: score_bias returned a bias of {_shape(bias)}; it must be None, a "
                          f"function of the chunk, or broadcast to (B, H, T, Tk) = {(B, H, T, Tk)} (per key: "
                          f"(B?, H, 1, Tk))")
    return bias, state


def checked_extra(entry: Scheme, out, B: int, H: int, T: int) -> tuple:
    """extra_logits's (logits, state) with logits None or broadcastable to (B, H, T, n); else SchemeError."""
    logits, state = _pair(entry, "extra_logits", out)
    if logits is not None and not (torch.is_tensor(logits) and logits.dim() >= 1 and
                                   _fits(logits, (B, H, T, logits.shape[-1]))):
        raise SchemeError(f"scheme {entry.name!r}: extra_logits returned {_shape(logits)}; it must broadcast to "
                          f"(B, H, T, n) = ({B}, {H}, {T}, n)")
    return logits, state


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


def _alibi_bias(m: ALiBi, x, layer: Layer, offset: int, shared, past, q=None, k=None) -> tuple:
    """None on a NoPE layer (attn_sdpa's own causal mask then); no cache state. Causal: the key form
    m_h (j - Tk + 1) for keys 0..Tk-1, (H, 1, Tk): -m_h (i - j) less the constant m_h (i - Tk + 1) of each row,
    which softmax ignores; attn_sdpa folds it into q.k in float32 (its size stays near 0 at the last keys).
    Bidirectional: -m_h |i - j| per chunk, query rows a..b-1 (positions offset+a ..) against keys s..e-1."""
    if layer.nope:
        return None, None
    if m.causal:  # pos_alibi.alibi_key_bias, (H, 1, Tk): the form the model runs
        return m.key_bias(offset + x.shape[1]).to(x.dtype), None
    return (lambda a, b, s, e: m.block(offset + a, offset + b, s, e).to(x.dtype)), None


register(Scheme("none", "nothing (NoPE)", colour="#222222"))
register(Scheme("learned", "input embedding", "pos_learned.py", build=_learned,
                input_rows=LearnedPositionalEmbedding.forward, input_before_scale=True, colour="#ff7f0e"))
register(Scheme("sin", "input embedding", "pos_sin.py", build=lambda cfg: SinusoidalPositionalEncoding(cfg.n_embd),
                input_rows=SinusoidalPositionalEncoding.forward, colour="#2ca02c"))
register(Scheme("rope", "Q/K rotation", "pos_rope.py", rotate_qk=_rope_rotate, rope_options=True, colour="#1f77b4"))
register(Scheme("alibi", "score bias", "pos_alibi.py", build=_alibi, score_bias=_alibi_bias, colour="#d62728"))

