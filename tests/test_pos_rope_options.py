"""RoPE on part of each head, and layers without positions.

partial_rotary_factor (Hugging Face's name): only the first r = int(f * head_dim) dims turn, with
the frequencies of an r-dim RoPE. rope_p (p-RoPE, Barbero et al. 2025): the slowest pairs get
frequency 0. nope_every (Llama 4's iRoPE): every k-th layer attends without positions.
Each is checked against its definition written out here, and against NoPE / plain RoPE at its ends.
"""
import math

import pytest
import torch

import pos_rope
import test_tiny_lm
import tiny_lm
from lab import checkpoint_io
from pos_rope import PAIRINGS, RotaryEmbedding, ScaledRotaryEmbedding
from lab.options import LabAttention, layer_roles, make_config, make_model, option

pytestmark = pytest.mark.usefixtures("one_thread")

D = 32  # head dim of the module tests
V = 20
SMALL = dict(vocab_size=V, n_layer=4, n_head=2, n_embd=32, max_len=64)


def max_diff(a, b) -> float:
    return (a.double() - b.double()).abs().max().item()


def turn(rope, x, m):
    """x (D,) float64 as the module turns a query at position m (float32 angle tables)."""
    return rope(x.view(1, 1, 1, -1), x.view(1, 1, 1, -1), offset=m)[0].view(-1)


def written_out(x, m, thetas, pairing):
    """x (D,) float64 turned pair by pair: pair i = (2i, 2i+1) or (i, i + r/2) by angle m θ_i, in float64;
    dims outside the r = 2 len(thetas) rotated ones are copied."""
    out, n = x.clone(), len(thetas)
    for i, th in enumerate(thetas):
        a, b = (2 * i, 2 * i + 1) if pairing == "adjacent" else (i, i + n)
        c, s = math.cos(m * th), math.sin(m * th)
        out[a], out[b] = x[a] * c - x[b] * s, x[a] * s + x[b] * c
    return out


def thetas_of(r, p=1.0, base=10000.0):
    """θ_i = base^(-2i/r) for the r/2 pairs, then p-RoPE: pairs from floor(p r/2) on get 0."""
    kept = math.floor(p * r / 2)
    return [base ** (-2 * i / r) if i < kept else 0.0 for i in range(r // 2)]


# ============================================================================ partial rotary

@pytest.mark.parametrize("pairing", PAIRINGS)
@pytest.mark.parametrize("f, r", [(0.25, 8), (0.5, 16), (0.75, 24)])
def test_partial_rotary_matches_definition(pairing, f, r):
    """The first r dims turn as an r-dim RoPE (θ_i = base^(-2i/r)); dims r.. are the input, bit for bit."""
    rope = ScaledRotaryEmbedding(D, pairing=pairing, partial_rotary_factor=f)
    assert rope.rot_dim == r
    x = torch.randn(D, dtype=torch.float64)
    for m in (1, 7, 300):
        got = turn(rope, x, m)
        assert torch.equal(got[r:], x[r:]), f"f={f}, {pairing}, m={m}: dims {r}.. changed"
        err = max_diff(got, written_out(x, m, thetas_of(r), pairing))
        assert err < 1e-4, f"f={f}, {pairing}, m={m}: vs the rotation written out, max diff {err:.2e}"
        assert max_diff(got[:r], x[:r]) > 1e-3, f"f={f}, m={m}: the rotated part did not turn"


def test_partial_frequencies_come_from_the_rotated_dim():
    """inv_freq = base^(-2i/r), computed from r as Hugging Face does, not the first r/2 of the full head's."""
    base = 500000.0
    for f, r in ((0.25, 8), (0.5, 16)):
        got = ScaledRotaryEmbedding(D, base, partial_rotary_factor=f).inv_freq.double()
        want = torch.tensor([base ** (-2 * i / r) for i in range(r // 2)], dtype=torch.float64)
        rel = (got / want - 1).abs().max().item()
        assert got.shape == (r // 2,) and rel < 1e-6, f"f={f}: inv_freq vs base^(-2i/{r}), max relative diff {rel:.2e}"
        full = pos_rope.rope_inv_freq(D, base)[: r // 2].double()
        assert max_diff(got / full, torch.ones(r // 2)) > 0.5, "the full head's frequencies would pass this test"


@pytest.mark.parametrize("pairing", PAIRINGS)
@pytest.mark.parametrize("f, p", [(0.25, 1.0), (0.5, 0.75), (1.0, 0.5)])
def test_score_depends_only_on_m_minus_n(pairing, f, p):
    """q_m . k_n of the rotated part, and of the whole head, is a function of m - n, up to m = 8195."""
    rope = ScaledRotaryEmbedding(D, pairing=pairing, partial_rotary_factor=f, rope_p=p)
    r = rope.rot_dim
    q = torch.randn(D, dtype=torch.float64)
    k = q + 0.3 * torch.randn(D, dtype=torch.float64)  # close to q: the score then falls clearly with m - n
    scale = (q[:r].norm() * k[:r].norm()).item()
    seen = {}
    for delta in (0, 3, 100):
        pairs = [(m, m - delta) for m in (delta, 150, 1000, 4099, 8195)]
        rot = [(turn(rope, q, m)[:r] @ turn(rope, k, n)[:r]).item() for m, n in pairs]
        whole = [(turn(rope, q, m) @ turn(rope, k, n)).item() for m, n in pairs]
        for name, s in (("rotated part", rot), ("whole head", whole)):
            spread = (max(s) - min(s)) / scale  # float32 angles near m = 8000 carry ~1e-4 rad of rounding
            assert spread < 2e-4, f"f={f}, p={p}, {pairing}, {name}: q_m.k_(m-{delta}) = {s}, spread {spread:.2e}"
        seen[delta] = rot[0]
    assert max(seen.values()) - min(seen.values()) > 0.05 * scale, f"the score does not depend on m - n: {seen}"


@pytest.mark.parametrize("pairing", PAIRINGS)
def test_factor_and_p_ends_are_nope_and_rope(pairing):
    """partial_rotary_factor 0 and rope_p 0 change nothing; factor 1 and p 1 are plain RoPE, bit for bit."""
    q, k = torch.randn(2, 2, 40, D), torch.randn(2, 2, 40, D)
    plain = RotaryEmbedding(D, pairing=pairing)(q, k, offset=500)
    for kw in ({"partial_rotary_factor": 0.0}, {"rope_p": 0.0}, {"partial_rotary_factor": 0.5, "rope_p": 0.0}):
        got = ScaledRotaryEmbedding(D, pairing=pairing, **kw)(q, k, offset=500)
        assert torch.equal(got[0], q) and torch.equal(got[1], k), \
            f"{kw}: should be NoPE, max diff {max(max_diff(got[0], q), max_diff(got[1], k)):.2e}"
    for kw in ({"partial_rotary_factor": 1.0}, {"rope_p": 1.0}, {"partial_rotary_factor": 1, "rope_p": 1}):
        got = ScaledRotaryEmbedding(D, pairing=pairing, **kw)(q, k, offset=500)
        assert torch.equal(got[0], plain[0]) and torch.equal(got[1], plain[1]), f"{kw}: should be plain RoPE"
    assert max_diff(plain[0], q) > 0.1, "plain RoPE at offset 500 should move q"


@pytest.mark.parametrize("kw, match", [
    ({"partial_rotary_factor": 0.3}, r"even and >= 2; got int\(head dim 32 \* partial_rotary_factor 0.3\) = 9"),
    ({"partial_rotary_factor": 0.01}, r"even and >= 2; got .* = 0"),
    ({"partial_rotary_factor": 1.5}, r"partial_rotary_factor must be a number in \[0, 1\], got 1.5"),
    ({"partial_rotary_factor": True}, r"partial_rotary_factor must be a number"),
    ({"rope_p": -0.1}, r"rope_p must be a number in \[0, 1\], got -0.1"),
    ({"rope_p": "0.5"}, r"rope_p must be a number"),
])
def test_bad_options_raise_one_line(kw, match):
    with pytest.raises(ValueError, match=match) as e:
        ScaledRotaryEmbedding(D, **kw)
    assert "\n" not in str(e.value)


# ============================================================================ p-RoPE

# p -> pairs kept of 16 (head dim 32): floor(16 p), the paper's int(p * d // 2)
KEPT_OF_16 = {0.0: 0, 0.1: 1, 0.25: 4, 0.5: 8, 0.75: 12, 0.9: 14, 0.99: 15, 1.0: 16}


@pytest.mark.parametrize("p", sorted(KEPT_OF_16))
def test_p_rope_keeps_the_fastest_pairs_of_full_rope(p):
    inv = ScaledRotaryEmbedding(D, rope_p=p).inv_freq
    kept = KEPT_OF_16[p]
    full = pos_rope.rope_inv_freq(D)
    assert torch.equal(inv[:kept], full[:kept]), f"p={p}: the {kept} kept pairs must keep plain RoPE's frequencies"
    assert torch.equal(inv[kept:], torch.zeros(16 - kept)), f"p={p}: pairs {kept}.. must have frequency 0"
    want = torch.tensor(thetas_of(D, p), dtype=torch.float64)
    assert max_diff(inv, want) < 1e-7, f"p={p}: vs base^(-2i/d) written out"


@pytest.mark.parametrize("pairing", PAIRINGS)
def test_p_rope_zero_frequency_pairs_untouched(pairing):
    """p = 0.75 of 16 pairs: pairs 12..15 (dims 24..31 adjacent; 12..15 and 28..31 half) are the input exactly."""
    rope = ScaledRotaryEmbedding(D, pairing=pairing, rope_p=0.75)
    still = list(range(24, 32)) if pairing == "adjacent" else list(range(12, 16)) + list(range(28, 32))
    moving = [d for d in range(D) if d not in still]
    x = torch.randn(3, 2, 50, D)
    y, _ = rope(x, x, offset=1000)
    assert torch.equal(y[..., still], x[..., still]), f"{pairing}: zero-frequency dims changed"
    assert max_diff(y[..., moving], x[..., moving]) > 0.1, f"{pairing}: the kept pairs did not turn"
    x64 = torch.randn(D, dtype=torch.float64)
    err = max_diff(turn(rope, x64, 300), written_out(x64, 300, thetas_of(D, 0.75), pairing))
    assert err < 1e-4, f"{pairing}: vs the rotation written out, max diff {err:.2e}"


def test_p_rope_inside_partial_counts_the_rotated_pairs():
    """f = 0.5 of 32 dims: r = 16, 8 pairs; p = 0.5 keeps the fastest 4, with θ_i = base^(-2i/16)."""
    rope = ScaledRotaryEmbedding(D, partial_rotary_factor=0.5, rope_p=0.5)
    want = torch.tensor(thetas_of(16, 0.5), dtype=torch.float64)
    assert rope.inv_freq.shape == (8,) and max_diff(rope.inv_freq, want) < 1e-7, rope.inv_freq


# ============================================================================ scalings on the rotated dim

def test_ntk_with_partial_uses_the_rotated_dim():
    """head dim 64, f = 0.25: r = 16, so base' = 10000 * 4^(16/14) (not 4^(64/62))."""
    rope = ScaledRotaryEmbedding(64, partial_rotary_factor=0.25, scaling={"rope_type": "ntk", "factor": 4.0})
    base_r = 10000.0 * 4.0 ** (16 / 14)  # = 40000 * e^(ln 4 / 7) = 48760.5...
    assert base_r == pytest.approx(48760.5, abs=0.1)
    want = torch.tensor([base_r ** (-2 * i / 16) for i in range(8)], dtype=torch.float64)
    rel = (rope.inv_freq.double() / want - 1).abs().max().item()
    assert rel < 1e-6, f"ntk with r = 16: max relative diff {rel:.2e}"
    wrong = torch.tensor([(10000.0 * 4.0 ** (64 / 62)) ** (-2 * i / 16) for i in range(8)], dtype=torch.float64)
    assert (rope.inv_freq.double() / wrong - 1).abs().max().item() > 1e-2, "the head-dim exponent would pass too"


def test_yarn_and_linear_with_partial_match_the_formula_on_r():
    """yarn on r = 16 of 64 dims: HF's formula written out with dim = 16 (the ramp too); linear: θ / s."""
    r, base, s, L0 = 16, 10000.0, 8.0, 4096
    pos_freqs = base ** (torch.arange(0, r, 2, dtype=torch.float64) / r)
    # i(n) = r ln(L0 / (2 pi n)) / (2 ln base): i(32) = 2.62 -> 2, i(1) = 5.63 -> 6
    low = math.floor(r * math.log(L0 / (2 * math.pi * 32)) / (2 * math.log(base)))
    high = math.ceil(r * math.log(L0 / (2 * math.pi * 1)) / (2 * math.log(base)))
    assert (low, high) == (2, 6)
    ramp = ((torch.arange(r // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    want = (1 / pos_freqs) * (1 - ramp) + (1 / (s * pos_freqs)) * ramp
    yarn = ScaledRotaryEmbedding(64, base, partial_rotary_factor=0.25,
                                 scaling={"rope_type": "yarn", "factor": s, "original_max_len": L0})
    rel = (yarn.inv_freq.double() / want - 1).abs().max().item()
    assert rel < 1e-6, f"yarn on r = 16: max relative diff {rel:.2e}"
    assert yarn.attention_factor == pytest.approx(0.1 * math.log(s) + 1)
    lin = ScaledRotaryEmbedding(64, base, partial_rotary_factor=0.25, scaling={"rope_type": "linear", "factor": s})
    rel = (lin.inv_freq.double() * s * pos_freqs - 1).abs().max().item()
    assert rel < 1e-6, f"linear on r = 16: max relative diff {rel:.2e}"


def test_dynamic_with_partial_rebuilds_on_the_rotated_dim():
    """dynamic, r = 16 of 64, s = 2, L0 = 16, total length 64: base' = 10000 (2 * 64/16 - 1)^(16/14)."""
    rope = ScaledRotaryEmbedding(64, partial_rotary_factor=0.25,
                                 scaling={"rope_type": "dynamic", "factor": 2.0, "original_max_len": 16})
    cos, sin = rope.cos_sin(64)
    base_r = 10000.0 * 7.0 ** (16 / 14)
    angles = torch.tensor([[m * base_r ** (-2 * i / 16) for i in range(8)] for m in range(64)], dtype=torch.float64)
    err = max(max_diff(cos, torch.cos(angles)), max_diff(sin, torch.sin(angles)))
    assert cos.shape == (64, 8) and err < 1e-5, f"dynamic on r = 16 at length 64: max diff {err:.2e}"
    p_rope = ScaledRotaryEmbedding(64, partial_rotary_factor=0.25, rope_p=0.5,
                                   scaling={"rope_type": "dynamic", "factor": 2.0, "original_max_len": 16})
    cos_p, sin_p = p_rope.cos_sin(64)  # the rebuilt table keeps p-RoPE: pairs 4..7 stay at angle 0
    assert torch.equal(cos_p[:, :4], cos[:, :4]) and torch.equal(cos_p[:, 4:], torch.ones(64, 4))
    assert torch.equal(sin_p[:, 4:], torch.zeros(64, 4))


def test_options_survive_a_cast_to_bfloat16():
    """.to(bfloat16) rebuilds the float32 tables with the same r and the same zero-frequency pairs."""
    kw = {"partial_rotary_factor": 0.5, "rope_p": 0.5}
    want = ScaledRotaryEmbedding(D, **kw).cos_sin(4, 4000)
    got = ScaledRotaryEmbedding(D, **kw).to(torch.bfloat16).cos_sin(4, 4000)
    assert got[0].dtype == torch.float32 and got[0].shape == (4, 8)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), "tables changed with the cast"


# ============================================================================ NoPE layers (nope_every)

def test_attention_without_positions_is_permutation_equivariant():
    """LabAttention(x) without a scheme and no mask: permuting the tokens permutes the output; with RoPE it does not."""
    torch.manual_seed(0)
    attn = LabAttention(make_config(**{**SMALL, "causal": False})).double()
    x = torch.randn(2, 12, 32, dtype=torch.float64)
    perm = torch.randperm(12)
    out = attn(x)[0]
    err = max_diff(attn(x[:, perm])[0], out[:, perm])
    assert err < 1e-12, f"NoPE attention: out(x[perm]) vs out(x)[perm], max diff {err:.2e}"
    kw = {"scheme": tiny_lm.SCHEMES["rope"], "layer": tiny_lm.Layer(0, False, 0, RotaryEmbedding(16))}
    err = max_diff(attn(x[:, perm], **kw)[0], attn(x, **kw)[0][:, perm])
    assert err > 1e-3, f"RoPE attention looks permutation-equivariant (max diff {err:.2e})"


@pytest.mark.parametrize("pos, every, nope", [("rope", 4, (3,)), ("rope", 2, (1, 3)), ("alibi", 4, (3,)),
                                               ("alibi", 1, (0, 1, 2, 3)), ("rope", 0, ())])
def test_nope_layers_attend_without_positions(pos, every, nope):
    """In the model, each NoPE layer's attention, called as the model calls it, is permutation-equivariant
    (causal=False); every other layer is not."""
    torch.manual_seed(0)
    model = make_model(make_config(**{**SMALL, "pos": pos, "causal": False, "nope_every": every})).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    assert layer_roles(model.cfg)[0] == nope
    calls = {}  # layer -> (input, keyword arguments) of its attention in the model's forward

    def keep_call(i):
        def hook(module, args, kw, out):
            calls.setdefault(i, (args[0], kw))  # returns nothing: the output stays as it was
        return hook

    for i, blk in enumerate(model.blocks):
        blk.attn.register_forward_hook(keep_call(i), with_kwargs=True)
    perm = torch.randperm(16)
    with torch.no_grad():
        model(torch.randint(0, V, (2, 16)))
        for i, blk in enumerate(model.blocks):
            x, kw = calls[i]
            assert kw["layer"].nope == (i in nope) and (kw["layer"].rope is None) == (pos != "rope" or i in nope), \
                f"layer {i}: {kw}"
            err = max_diff(blk.attn(x[:, perm], **kw)[0], blk.attn(x, **kw)[0][:, perm])
            if i in nope:
                assert err < 1e-12, f"{pos}, nope_every={every}: layer {i} should ignore order, max diff {err:.2e}"
            else:
                assert err > 1e-4, f"{pos}, nope_every={every}: layer {i} should see positions (diff {err:.2e})"


def test_all_nope_model_is_permutation_equivariant():
    """nope_every=1, causal=False: no layer sees positions, so the whole model permutes with its input."""
    torch.manual_seed(0)
    model = make_model(make_config(**{**SMALL, "causal": False, "nope_every": 1})).double().eval()
    x, perm = torch.randint(0, V, (2, 16)), torch.randperm(16)
    with torch.no_grad():
        err = max_diff(model(x[:, perm]).logits, model(x).logits[:, perm])
    assert err < 1e-10, f"all-NoPE model: logits(x[perm]) vs logits(x)[perm], max diff {err:.2e}"


@pytest.mark.parametrize("pos, kw", [("rope", {"nope_every": 2, "partial_rotary_factor": 0.5, "rope_p": 0.75}),
                                     ("rope", {"nope_every": 1, "rope_pairing": "half", "partial_rotary_factor": 0.25}),
                                     ("alibi", {"nope_every": 2})])
def test_cached_decoding_with_options_equals_full_forward(pos, kw):
    """test_tiny_lm's KV-cache check (2 layers), on models with the options set."""
    test_tiny_lm.test_cached_forward_equals_full_forward(pos, kw)


@pytest.mark.parametrize("kw, match", [
    ({"pos": "sin", "nope_every": 2}, "nope_every removes positions inside attention"),
    ({"pos": "learned", "nope_every": 4}, "nope_every removes positions inside attention"),
    ({"pos": "none", "nope_every": 1}, "nope_every removes positions inside attention"),
    ({"pos": "rope", "nope_every": 5}, r"nope_every must be an int from 0 \(off\) to n_layer=4, got 5"),
    ({"pos": "rope", "nope_every": -1}, "nope_every must be an int"),
    ({"pos": "rope", "nope_every": 2.0}, "nope_every must be an int"),
    ({"pos": "alibi", "partial_rotary_factor": 0.5}, "partial_rotary_factor and rope_p shape RoPE"),
    ({"pos": "none", "rope_p": 0.5}, "partial_rotary_factor and rope_p shape RoPE"),
    ({"pos": "rope", "partial_rotary_factor": 0.2}, r"even and >= 2; got .* = 3"),
    ({"pos": "rope", "rope_p": 2.0}, r"rope_p must be a number in \[0, 1\]"),
])
def test_bad_model_options_raise_one_line(kw, match):
    with pytest.raises(ValueError, match=match) as e:
        make_config(**{**SMALL, **kw})
    assert "\n" not in str(e.value)


# ============================================================================ defaults and checkpoints

def test_options_add_no_parameters_and_draw_no_random_numbers():
    """Same seed: the default model, the defaults spelled out, and a model with every option set have the
    same weights and leave the RNG in the same state; the defaults give bit-identical logits."""
    built = {}
    for name, kw in (("default", {}), ("spelled", {"partial_rotary_factor": 1.0, "rope_p": 1.0, "nope_every": 0}),
                     ("options", {"partial_rotary_factor": 0.5, "rope_p": 0.5, "nope_every": 2})):
        torch.manual_seed(0)
        model = make_model(make_config(**SMALL, **kw)).eval()
        built[name] = (model, torch.get_rng_state())
    ref, ref_rng = built["default"]
    x = torch.randint(0, V, (2, 30))
    with torch.no_grad():
        want = ref(x).logits
        for name, (model, rng) in built.items():
            sd, rsd = model.state_dict(), ref.state_dict()
            assert sd.keys() == rsd.keys() and all(torch.equal(sd[k], rsd[k]) for k in sd), f"{name}: weights differ"
            assert torch.equal(rng, ref_rng), f"{name}: building the model drew a different amount of randomness"
            got = model(x).logits
            if name == "options":
                assert max_diff(got, want) > 1e-4, "the options changed nothing"
            else:
                assert torch.equal(got, want), f"{name}: logits differ from the default by {max_diff(got, want):.2e}"


def test_checkpoint_keeps_the_options_and_old_checkpoints_load(tmp_path):
    torch.manual_seed(0)
    model = make_model(make_config(**SMALL, partial_rotary_factor=0.5, rope_p=0.75, nope_every=2)).eval()
    path = tmp_path / "m.pt"
    checkpoint_io.save_checkpoint(path, model, "a" * V, step=1, losses={})
    loaded, ckpt = checkpoint_io.load_checkpoint(path)
    x = torch.randint(0, V, (1, 24))
    with torch.no_grad():
        assert loaded.cfg == model.cfg and torch.equal(loaded(x).logits, model(x).logits)
    assert layer_roles(loaded.cfg)[0] == (1, 3) and loaded.rope.rot_dim == 8
    # a checkpoint written before these fields existed: they load as their defaults
    old = torch.load(path, weights_only=True)
    for name in ("partial_rotary_factor", "rope_p", "nope_every"):
        del old["config"][name]
    torch.save(old, tmp_path / "old.pt")
    loaded, ckpt = checkpoint_io.load_checkpoint(tmp_path / "old.pt")
    assert tuple(option(loaded.cfg, k) for k in ("partial_rotary_factor", "rope_p", "nope_every")) == (1.0, 1.0, 0)
    assert ckpt["config"]["nope_every"] == 0, "ckpt['config'] should show the defaults the model was built with"
