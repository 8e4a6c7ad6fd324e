"""TinyLM's local attention and hybrid layouts: a local layer is blind beyond its window, the global
NoPE layer, cached decoding with a window, Llama 4's attention temperature switched at evaluation,
the layout options' errors, and defaults left as they were. (The masks themselves and the
temperature's formula: test_attn_common.py; the hybrid variants' layouts: test_variants.py.)

Query row r sits at absolute position i = Tk - Tq + r. Models are tiny (4 layers, 2 heads,
32 channels, 20 tokens) and run in float64, so "unchanged" means to 1e-12.
"""
import math

import pytest
import torch

import attn_common
import schemes
import tiny_lm
from lab import checkpoint_io
from attn_common import first_visible_key, llama4_attn_temperature
from conftest import chunks_and_cache_agree
from lab.options import LAB_DEFAULTS, LabAttention, layer_roles, make_config as lab_config, make_model as lab_lm, LabConfig, LabLM, option
from schemes import Layer
from tiny_lm import TinyLM

pytestmark = pytest.mark.usefixtures("one_thread")

V = 20
SMALL = dict(vocab_size=V, n_layer=4, n_head=2, n_embd=32, max_len=64)
TOL = 1e-12
# The two hybrids of lab/variants.py at the SMALL size, window 5 and temperature floor 4, so that a
# 30-token input spans several windows and several temperature steps.
IROPE = dict(pos="rope", nope_every=4, attn_window=5, window_kind="chunked", global_every=4,
             attn_temperature_tuning=True, temperature_floor=4)
GEMMA = dict(pos="rope", attn_window=5, window_kind="sliding", global_every=4, global_rope_theta=1e6,
             global_rope_p=0.25)


def max_diff(a, b) -> float:
    return (a.double() - b.double()).abs().max().item()


def make_model(seed: int = 0, shake: float = 0.1, **kw) -> TinyLM:
    """A float64 TinyLM in eval mode; `shake` adds N(0, shake^2) to every weight so logits differ clearly."""
    torch.manual_seed(seed)
    model = lab_lm(lab_config(**{**SMALL, **kw})).double()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * shake)
    return model.eval()


def ids(B, T, seed):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


# ============================================================================ blind beyond the window

@pytest.mark.parametrize("kind", attn_common.WINDOW_KINDS)
@pytest.mark.parametrize("pos", ["rope", "alibi", "none"])
def test_local_layer_is_blind_beyond_its_window(kind, pos):
    """One local layer, window 6, 20 tokens: changing a token the last query cannot see leaves the last
    logits unchanged; changing the earliest token it can see moves them."""
    model = make_model(pos=pos, n_layer=1, attn_window=6, window_kind=kind)
    assert layer_roles(model.cfg)[1] == (0,)
    x, last = ids(2, 20, seed=1), 19
    first = first_visible_key(last, 6, kind)  # sliding: 14; chunked: 18 (chunk 18..23)
    assert first == (14 if kind == "sliding" else 18)
    with torch.no_grad():
        base = model(x).logits[:, -1]
        for j in (0, first - 1):  # outside the window
            y = x.clone()
            y[:, j] = (y[:, j] + 1) % V
            err = max_diff(model(y).logits[:, -1], base)
            assert err < TOL, f"{pos} {kind}: token {j}, outside the window, moved the last logits by {err:.2e}"
        y = x.clone()
        y[:, first] = (y[:, first] + 1) % V  # inside the window
        err = max_diff(model(y).logits[:, -1], base)
        assert err > 1e-4, f"{pos} {kind}: token {first}, inside the window, changed nothing ({err:.2e})"


@pytest.mark.parametrize("layout", [IROPE, GEMMA], ids=["irope", "gemma_hybrid"])
def test_global_layer_sees_beyond_the_window(layout):
    """The hybrids: 3 local layers reach back 3 windows at most, yet token 0 still moves the last logits
    at position 29, through the global layer; with that layer made local too, it does not."""
    x = ids(2, 30, seed=2)
    y = x.clone()
    y[:, 0] = (y[:, 0] + 1) % V
    for kw, moves in ((layout, True), ({**layout, "global_every": 0, "nope_every": 0, "global_rope_theta": None,
                                        "global_rope_p": None, "attn_temperature_tuning": False}, False)):
        model = make_model(**kw)
        with torch.no_grad():
            err = max_diff(model(y).logits[:, -1], model(x).logits[:, -1])
        assert (err > 1e-6) == moves, f"{kw}: token 0 moved the last logits by {err:.2e}"


# ============================================================================ the global NoPE layer

def layer_calls(model, x):
    """{layer: (input (B, T, C), keyword arguments)} of each attention layer, as the model calls it."""
    calls = {}

    def keep(i):
        def hook(module, args, kw, out):
            calls.setdefault(i, (args[0], kw))
        return hook

    handles = [blk.attn.register_forward_hook(keep(i), with_kwargs=True) for i, blk in enumerate(model.blocks)]
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    return calls


def test_causal_global_nope_layer_sees_its_past_as_a_set():
    """Causal, a NoPE layer's output at i is a function of x_i and the set {x_0 .. x_i}: reversing inputs
    0..t-1 leaves rows t.. unchanged, temperature tuning on (its factor depends on the query's own position
    only). irope's local RoPE layers see the order: the same reversal moves rows t.. of the chunk holding t."""
    model = make_model(**IROPE)
    assert (layer_roles(model.cfg)[0], layer_roles(model.cfg)[1]) == ((3,), (0, 1, 2))
    calls = layer_calls(model, ids(2, 16, seed=3))
    t = 11  # chunk 10..14: rows 11.. of the local layers see inputs 10 (moved) and 11 on
    perm = torch.cat((torch.arange(t - 1, -1, -1), torch.arange(t, 16)))
    with torch.no_grad():
        for i, blk in enumerate(model.blocks):
            x, kw = calls[i]
            assert (kw["layer"].rope is None, (blk.attn.temperature is not None and kw["layer"].nope)) == (i == 3, i == 3), f"layer {i}: {kw}"
            err = max_diff(blk.attn(x[:, perm], **kw)[0][:, t:], blk.attn(x, **kw)[0][:, t:])
            if i == 3:
                assert err < TOL, f"global NoPE layer: reordering its past moved rows {t}.. by {err:.2e}"
            else:
                assert err > 1e-4, f"local RoPE layer {i}: reordering inputs 0..{t - 1} changed nothing ({err:.2e})"


def test_bidirectional_nope_attention_is_permutation_equivariant_without_temperature():
    """Without a causal mask, a NoPE layer permutes with its input; Llama 4's temperature breaks that
    exactly: the factor stays with the position, not the token, so it is a (weak) position signal."""
    attn_layer = LabAttention(lab_config(**{**SMALL, "causal": False})).double()
    x, perm = torch.randn(2, 12, 32, dtype=torch.float64), torch.randperm(12)
    # Llama 4's factor at floor 4, slope 0.1: 1, 1, 1, 1.07, ... 1.16 (attn_common.llama4_attn_temperature)
    with torch.no_grad():
        err = max_diff(attn_layer(x[:, perm])[0], attn_layer(x)[0][:, perm])
        assert err < TOL, f"NoPE attention: out(x[perm]) vs out(x)[perm], max diff {err:.2e}"
        attn_layer.temperature, nope = (4, 0.1), Layer(0, True, 0, None)  # as LabLM sets it on a NoPE layer
        err = max_diff(attn_layer(x[:, perm], layer=nope)[0], attn_layer(x, layer=nope)[0][:, perm])
        assert err > 1e-6, f"with the temperature the layer still looks equivariant ({err:.2e})"


# ============================================================================ cached decoding

@pytest.mark.parametrize("kw", [IROPE, GEMMA, {**IROPE, "attn_temperature_tuning": False},
                                dict(pos="alibi", attn_window=5, window_kind="sliding", global_every=2),
                                dict(pos="alibi", attn_window=4, window_kind="chunked"),
                                dict(pos="learned", attn_window=3, window_kind="sliding")],
                         ids=["irope", "gemma_hybrid", "irope_temp_off", "alibi_sliding", "alibi_chunked", "learned"])
def test_cached_decoding_with_a_window_equals_full_forward(kw):
    """A prefix of 5, then single tokens, a chunk of 3 and one of 10 through the KV cache (30 keys,
    several windows) == one full forward; greedy generate with and without the cache agree."""
    model = make_model(**kw)
    x = ids(2, 30, seed=5)
    with torch.no_grad():
        full = model(x).logits
        pieces, cache, t = [], None, 0
        for n in [5] + [1] * 12 + [3] + [10]:
            logits, _, cache = model(x[:, t:t + n], cache=cache)
            pieces.append(logits)
            t += n
    assert t == 30 and cache[0][0].shape[2] == 30, "the cache keeps every key, longer than the window"
    err = max_diff(torch.cat(pieces, dim=1), full)
    assert err < 1e-10, f"{kw}: cached logits vs full forward, max diff {err:.2e}"
    a = model.generate(x[:, :4], 12, temperature=0, use_cache=True)
    b = model.generate(x[:, :4], 12, temperature=0, use_cache=False)
    assert torch.equal(a, b), f"{kw}: greedy tokens differ at {(a != b).nonzero().tolist()}"


@pytest.mark.parametrize("kind", ["sliding", "chunked"])
@pytest.mark.parametrize("pos", sorted(schemes.REGISTRY))
def test_every_scheme_under_a_window_agrees_in_chunks_and_through_the_cache(pos, kind):
    """Every registered scheme with local layers of window 5 (24 tokens, several windows): chunks of 3 queries and
    cached decoding, one token at a time, give one full forward's logits. A bias that reads q and k must start
    what it accumulates at each query's own window (stick-breaking's stick did not: 0.2 logits apart)."""
    chunks_and_cache_agree(make_model(n_layer=2, pos=pos, attn_window=5, window_kind=kind), f"{pos}, {kind} window 5")


# ============================================================================ attention temperature

def test_temperature_is_switched_at_evaluation():
    """One irope model, model.cfg.attn_temperature_tuning flipped: logits at positions 0..2 (factor exactly 1
    with floor 4) are bit-identical, later ones move; switching back restores them bit for bit."""
    model = make_model(**IROPE)
    x = ids(2, 16, seed=6)
    with torch.no_grad():
        on = model(x).logits
        model.cfg.attn_temperature_tuning = False
        off = model(x).logits
        model.cfg.attn_temperature_tuning = True
        again = model(x).logits
    assert torch.equal(on[:, :3], off[:, :3]), f"positions 0..2 moved by {max_diff(on[:, :3], off[:, :3]):.2e}"
    assert max_diff(on[:, 3:], off[:, 3:]) > 1e-6, "the temperature changed nothing from position 3 on"
    assert torch.equal(on, again)


# ============================================================================ bad options

@pytest.mark.parametrize("kw, match", [
    ({"attn_window": -1}, r"attn_window must be an int >= 0"),
    ({"attn_window": 2.0}, r"attn_window must be an int >= 0"),
    ({"attn_window": 4, "window_kind": "dilated"}, r"unknown window_kind 'dilated'"),
    ({"attn_window": 4, "causal": False}, r"attn_window narrows the causal mask"),
    ({"attn_window": 4, "global_every": 5}, r"global_every must be an int from 0 \(off\) to n_layer=4"),
    ({"global_every": 2}, r"global_every=2 picks the global layers among local ones, but attn_window=0"),
    ({"global_rope_theta": 1e6}, r"global_rope_theta and global_rope_p set the RoPE of the global layers"),
    ({"pos": "alibi", "attn_window": 4, "global_every": 2, "global_rope_p": 0.5}, r"they need pos='rope'"),
    ({"attn_window": 4, "global_every": 2, "global_rope_theta": -1.0}, r"global_rope_theta must be a number > 0"),
    ({"attn_window": 4, "global_every": 2, "global_rope_p": 2.0}, r"global_rope_p must be a number in \[0, 1\] or None"),
    ({"attn_temperature_tuning": True}, r"attn_temperature_tuning scales the queries of the NoPE layers"),
    ({"nope_every": 4, "attn_temperature_tuning": True, "temperature_floor": 0}, r"temperature_floor must be"),
    ({"temperature_slope": -0.1}, r"temperature_slope a number >= 0"),
])
def test_bad_layout_options_raise_one_line(kw, match):
    with pytest.raises(ValueError, match=match) as e:
        lab_config(**{**SMALL, **kw})
    assert "\n" not in str(e.value)


# ============================================================================ defaults unchanged

def forward_before_windows(model: TinyLM, idx: torch.Tensor) -> torch.Tensor:
    """TinyLM.forward and Attention.forward as they were before local attention existed (commit d22f857),
    on the model's own modules: every layer global, no q scale, one RoPE table. -> logits (B, T, V)."""
    cfg, (B, T) = model.cfg, idx.shape
    x = model.tok_emb(idx)
    if getattr(model, "learned", None) is not None:
        x = x + model.learned(T, 0)
    if option(cfg, "emb_scale"):
        x = x * math.sqrt(cfg.n_embd)
    if getattr(model, "sin", None) is not None:
        x = x + model.sin(T, 0).to(x.dtype)
    bias = None if getattr(model, "alibi", None) is None else model.alibi(T, T).to(x.dtype)
    for i, blk in enumerate(model.blocks):
        nope = i in layer_roles(model.cfg)[0]
        q, k, v = blk.attn.split_heads(blk.ln1(x))
        if model.rope is not None and not nope:
            q, k = model.rope(q, k, offset=0)
        y = tiny_lm.attn_sdpa(q, k, v, score_bias=None if nope else bias, causal=cfg.causal)  # (B, H, T, D)
        x = x + blk.attn.out(y.transpose(1, 2).reshape(B, T, cfg.n_embd))
        x = x + blk.mlp(blk.ln2(x))
    return model.head(model.ln_f(x))


@pytest.mark.parametrize("kw", [{"pos": s} for s in ("none", "learned", "sin", "rope", "alibi")] + [  # the forward of before
    {"pos": "rope", "nope_every": 2}, {"pos": "alibi", "causal": False}, {"pos": "rope", "rope_p": 0.5}])
def test_default_models_are_bit_identical_to_before(kw):
    """A model with the new fields at their defaults: the same weights and RNG use as with them spelled out,
    and logits bit-identical to the forward written as it was before local attention."""
    spelled = dict(attn_window=0, window_kind="sliding", global_every=0, global_rope_theta=None, global_rope_p=None,
                   attn_temperature_tuning=False, temperature_floor=8192, temperature_slope=0.1)
    built = []
    for extra in ({}, spelled):
        torch.manual_seed(0)
        make = (lambda c: LabLM(LabConfig(**c))) if extra else (lambda c: lab_lm(lab_config(**c)))
        built.append((make({**SMALL, **kw, **extra}).eval(), torch.get_rng_state()))
    (model, rng), (other, rng2) = built
    assert type(model) is (LabLM if kw.keys() & LAB_DEFAULTS.keys() else TinyLM) and torch.equal(rng, rng2) and type(other) is LabLM and other.local_layers == () and other.global_rope is None
    sd, sd2 = model.state_dict(), other.state_dict()
    assert sd.keys() == sd2.keys() and all(torch.equal(sd[k], sd2[k]) for k in sd)
    x = ids(2, 40, seed=7)
    with torch.no_grad():
        got, before, got2 = model(x).logits, forward_before_windows(model, x), other(x).logits
    # causal ALiBi now runs as its key form folded into q.k (attn_common._sdpa_key_bias): the same softmax,
    # rounded otherwise, so within 1e-5 rather than to the bit
    tol = 1e-5 if kw.get("pos") == "alibi" and kw.get("causal", True) else 0.0
    err = max_diff(got, before)
    assert err <= tol, f"{kw}: logits moved by {err:.2e} against the old forward (allowed {tol})"
    assert torch.equal(got, got2)


def test_checkpoint_keeps_the_layout_and_old_checkpoints_load(tmp_path):
    model = make_model(**GEMMA).float()
    path = tmp_path / "m.pt"
    checkpoint_io.save_checkpoint(path, model, "a" * V, step=1, losses={})
    loaded, _ = checkpoint_io.load_checkpoint(path)
    x = ids(1, 24, seed=8)
    with torch.no_grad():
        assert loaded.cfg == model.cfg and torch.equal(loaded(x).logits, model(x).logits)
    old = torch.load(path, weights_only=True)
    for name in ("attn_window", "window_kind", "global_every", "global_rope_theta", "global_rope_p",
                 "attn_temperature_tuning", "temperature_floor", "temperature_slope"):
        del old["config"][name]
    torch.save(old, tmp_path / "old.pt")
    loaded, ckpt = checkpoint_io.load_checkpoint(tmp_path / "old.pt")
    assert layer_roles(loaded.cfg)[1] == () and getattr(loaded, "global_rope", None) is None and ckpt["config"]["attn_window"] == 0
