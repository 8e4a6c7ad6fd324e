"""RoPE context-extension scaling (pos_rope.scaled_inv_freq and ScaledRotaryEmbedding(scaling=...)),
in pos_rope's keys; Hugging Face's blocks pasted as they stand (rope_hf.py): tests/test_rope_hf.py.

Checks against hand-computed numbers, against the formulas written out independently
(the way Hugging Face's modeling_rope_utils.py writes them), and the properties that must
survive scaling: factor 1 is plain RoPE (dynamic: up to original_max_len, as in Hugging Face),
q_m . k_n depends only on m - n; longrope's switch of its factor set by the total length.
"""
import math
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pos_rope  # noqa: E402
from pos_rope import ROPE_TYPES, RotaryEmbedding, ScaledRotaryEmbedding, precompute_freqs, scaled_inv_freq  # noqa: E402


def cfg(kind, factor, L0=64, **kw):
    return {"rope_type": kind, "factor": factor, "original_max_len": L0, **kw}


def maxdiff(a, b):
    return (a.double() - b.double()).abs().max().item()


@pytest.mark.parametrize("kind", ROPE_TYPES)
def test_factor_one_is_plain_rope(kind):
    # Lengths beyond original_max_len too, except for dynamic: its base follows the length L
    # from L0 on even at factor 1 (test_dynamic_matches_hugging_face_bases).
    plain = RotaryEmbedding(32)
    scaled = ScaledRotaryEmbedding(32, scaling=cfg(kind, 1.0, L0=16))
    cases = ((8, 0), (16, 0), (5, 11)) if kind == "dynamic" else ((8, 0), (300, 0), (5, 1000))
    for T, off in cases:
        c0, s0 = plain.cos_sin(T, off)
        c1, s1 = scaled.cos_sin(T, off)
        assert torch.equal(c0, c1) and torch.equal(s0, s1), \
            f"{kind}, factor 1, T={T}, offset={off}: max diff {max(maxdiff(c0, c1), maxdiff(s0, s1)):.2e}"


def test_ntk_base_hand_computed():
    # 10000 * 4^(128/126) = 40000 * e^(ln 4 / 63) = 40889.96...
    base = pos_rope.ntk_base(10000.0, 4.0, 128)
    assert abs(base - 40890) < 1, f"static NTK base {base:.3f}, expected about 40890"
    inv, af = scaled_inv_freq(128, 10000.0, {"rope_type": "ntk", "factor": 4.0})
    plain = pos_rope.rope_inv_freq(128)
    assert af == 1.0
    assert inv[0] == plain[0] == 1.0, "pair 0 turns at 1 rad/token for any base"
    ratio = (plain[-1] / inv[-1]).item()
    assert abs(ratio - 4.0) < 1e-4, f"slowest pair should turn s = 4 times slower, got {ratio:.6f}"


def test_yarn_correction_range_hand_computed():
    # i(r) = d ln(L0 / (2 pi r)) / (2 ln base): i(32) = 20.94 -> 20, i(1) = 45.03 -> 46
    low, high = pos_rope.yarn_correction_range(128, 10000.0, 4096, 32, 1, truncate=False)
    assert low == pytest.approx(20.94, abs=0.01) and high == pytest.approx(45.03, abs=0.01)
    assert pos_rope.yarn_correction_range(128, 10000.0, 4096, 32, 1) == (20, 46)


@pytest.mark.parametrize("s, expected", [(4, 1.1386), (8, 1.2079), (16, 1.2773), (32, 1.3466)])
def test_yarn_temperature(s, expected):
    got = pos_rope.yarn_attention_factor(s)
    assert round(got, 4) == expected, f"0.1 ln {s} + 1 = {got:.6f}, expected {expected}"
    rope = ScaledRotaryEmbedding(16, scaling=cfg("yarn", float(s)))
    c, sn = rope.cos_sin(40)
    norm = (c ** 2 + sn ** 2).sqrt()
    assert maxdiff(norm, torch.full_like(norm, expected)) < 1e-4, "cos and sin should both carry the factor"


def test_yarn_matches_reference_formula():
    # HF form: inv = interp * (1 - mask) + extrap * mask, mask = 1 - ramp(low, high)
    d, base, s, L0 = 128, 10000.0, 8.0, 4096
    pos_freqs = base ** (torch.arange(0, d, 2).float() / d)
    extrap, interp = 1.0 / pos_freqs, 1.0 / (s * pos_freqs)
    ramp = ((torch.arange(d // 2).float() - 20) / (46 - 20)).clamp(0, 1)
    mask = 1 - ramp
    ref = interp * (1 - mask) + extrap * mask
    inv, af = scaled_inv_freq(d, base, cfg("yarn", s, L0))
    rel = maxdiff(inv / ref, torch.ones_like(ref))
    assert rel < 1e-6, f"yarn inv_freq vs the reference formula: max relative diff {rel:.2e}"
    assert torch.equal(inv[:21], extrap[:21]), "pairs up to low = 20 must be kept exactly"
    assert maxdiff(inv[46:] / interp[46:], torch.ones(d // 2 - 46)) < 1e-6, "pairs from high = 46 on are theta / s"
    assert af == pytest.approx(0.1 * math.log(8) + 1)


def test_linear_position_m_times_s_is_plain_m():
    plain = RotaryEmbedding(32)
    for s in (4.0, 3.0):
        lin = ScaledRotaryEmbedding(32, scaling={"rope_type": "linear", "factor": s})
        m = torch.arange(0, 200)
        cp, sp = plain.cos_sin(200)
        cl, sl = lin.cos_sin(int(200 * s))
        rows = (m * s).long()
        d = max(maxdiff(cl[rows], cp), maxdiff(sl[rows], sp))
        assert d < 1e-4, f"linear s={s}: cos/sin at m*s vs plain at m, max diff {d:.2e}"


def test_llama3_bands():
    d, base, s, L0 = 128, 500000.0, 8.0, 8192  # Llama 3.1's own numbers
    plain = pos_rope.rope_inv_freq(d, base)
    inv, af = scaled_inv_freq(d, base, cfg("llama3", s, L0, low_freq_factor=1.0, high_freq_factor=4.0))
    assert af == 1.0
    assert inv[0] == plain[0], f"highest frequency changed: {inv[0].item()} vs {plain[0].item()}"
    assert inv[-1] == plain[-1] / s, \
        f"lowest frequency should be divided by {s}: {inv[-1].item()} vs {plain[-1].item()}"
    wavelen = 2 * math.pi / plain
    hi, lo = wavelen < L0 / 4, wavelen > L0 / 1
    assert torch.equal(inv[hi], plain[hi]) and torch.equal(inv[lo], plain[lo] / s)
    mid = ~hi & ~lo
    assert mid.any(), "these numbers should leave some pairs in the blend band"
    g = (L0 / wavelen[mid] - 1) / (4 - 1)
    ref = (1 - g) * plain[mid] / s + g * plain[mid]
    assert maxdiff(inv[mid] / ref, torch.ones_like(ref)) < 1e-6
    assert ((inv[mid] < plain[mid]) & (inv[mid] > plain[mid] / s)).all(), "blend must lie between theta/s and theta"


def test_llama3_with_equal_factors_is_a_step():
    """Llama 4 Scout's block (low = high = 1): pairs turning at least once in L0 keep θ_i, the others get θ_i / s,
    and no pair is blended; counted against the wavelength rule directly (29 of Scout's 64 pairs are divided)."""
    d, base, s, L0 = 128, 500000.0, 16.0, 8192
    plain = pos_rope.rope_inv_freq(d, base)
    inv, _ = scaled_inv_freq(d, base, cfg("llama3", s, L0, low_freq_factor=1.0, high_freq_factor=1.0))
    slow = 2 * math.pi / plain.double() > L0  # wavelength longer than L0: under one turn
    assert torch.equal(inv[slow], plain[slow] / s) and torch.equal(inv[~slow], plain[~slow]), \
        f"max diff {maxdiff(inv, torch.where(slow, plain / s, plain)):.2e} from the step"
    assert int(slow.sum()) == 29, f"{int(slow.sum())} of 64 pairs divided, Scout's config divides 29"


def test_dynamic_identity_up_to_L0_then_different():
    L0, s, d = 64, 4.0, 32
    plain, dyn = RotaryEmbedding(d), ScaledRotaryEmbedding(d, scaling=cfg("dynamic", s, L0))
    for T, off in ((L0, 0), (10, L0 - 10), (1, L0 - 1)):
        assert torch.equal(dyn.cos_sin(T, off)[0], plain.cos_sin(T, off)[0]), f"T={T} offset={off} is within L0"
    c_dyn, _ = dyn.cos_sin(4 * L0)
    c_pl, _ = plain.cos_sin(4 * L0)
    assert maxdiff(c_dyn, c_pl) > 0.1, "beyond L0 the base must change"
    # the bracket s L / L0 - (s - 1) is s + 1 at L = 2 L0: the static NTK base for factor s + 1
    ntk = scaled_inv_freq(d, 10000.0, {"rope_type": "ntk", "factor": s + 1})[0]
    at_2L0 = scaled_inv_freq(d, 10000.0, cfg("dynamic", s, L0), seq_len=2 * L0)[0]
    assert maxdiff(at_2L0, ntk) < 1e-7, f"dynamic at 2 L0 vs static NTK (s+1): max diff {maxdiff(at_2L0, ntk):.2e}"
    # tables are keyed by the total length: a longer one gives a new base, a shorter one
    # (still above L0) goes back, and rows of the same length agree however they are asked for
    c_long, _ = dyn.cos_sin(8 * L0)
    assert maxdiff(c_long[: 4 * L0], c_dyn) > 1e-3
    c_again, _ = dyn.cos_sin(10, 4 * L0 - 10)
    assert torch.equal(c_again, c_dyn[4 * L0 - 10:]), "same total length must give the same table"
    assert torch.equal(dyn.cos_sin(L0)[0], plain.cos_sin(L0)[0]), "back at L0: plain again"
    # HF's formula: base * ((s L / L0) - (s - 1))^(d / (d - 2))
    L = 3 * L0
    base = 10000.0 * ((s * L / L0) - (s - 1)) ** (d / (d - 2))
    ref = 1.0 / (base ** (torch.arange(0, d, 2).float() / d))
    assert maxdiff(scaled_inv_freq(d, 10000.0, cfg("dynamic", s, L0), seq_len=L)[0], ref) < 1e-7


def hf_dynamic_base(base, s, d, L, L0):
    """Hugging Face's _compute_dynamic_ntk_parameters, written out: L is raised to L0 at least."""
    L = max(L, L0)
    return base * ((s * L / L0) - (s - 1)) ** (d / (d - 2))


# d = 32, L0 = 256, base 10000: the exponent is 32/30 and the bracket 1 + s (L/256 - 1)
HAND_BASES = {  # (factor, L): base', each checked against the formula in the test too
    (1, 256): 10000.0, (2, 256): 10000.0, (4, 256): 10000.0,
    (1, 512): 10000.0 * 2 ** (16 / 15), (2, 512): 10000.0 * 3 ** (16 / 15), (4, 512): 10000.0 * 5 ** (16 / 15),
    (1, 1024): 10000.0 * 4 ** (16 / 15), (2, 1024): 10000.0 * 7 ** (16 / 15), (4, 1024): 10000.0 * 13 ** (16 / 15),
    (1, 4096): 10000.0 * 16 ** (16 / 15), (2, 4096): 10000.0 * 31 ** (16 / 15), (4, 4096): 10000.0 * 61 ** (16 / 15),
}


@pytest.mark.parametrize("s, L", sorted(HAND_BASES))
def test_dynamic_matches_hugging_face_bases(s, L):
    d, L0, base = 32, 256, 10000.0
    want = HAND_BASES[(s, L)]
    assert want == pytest.approx(hf_dynamic_base(base, s, d, L, L0), rel=1e-12), "the hand table is off"
    # the frequencies for the total length L, from the module as a model uses it
    rope = ScaledRotaryEmbedding(d, base, scaling=cfg("dynamic", float(s), L0))
    cos, sin = rope.cos_sin(L)
    inv = [want ** (-2 * i / d) for i in range(d // 2)]  # θ_i = base'^(-2i/d), float64
    angles = torch.tensor([[m * th for th in inv] for m in range(L)], dtype=torch.float64)  # (L, d/2)
    err = max(maxdiff(cos, torch.cos(angles)), maxdiff(sin, torch.sin(angles)))
    tol = 1e-6 + 2e-7 * L  # float32 angles: rounding grows with the position m
    assert err < tol, f"dynamic s={s} L={L}: cos/sin vs base' = {want:.2f} written out, max diff {err:.2e}"
    got_inv, af = scaled_inv_freq(d, base, cfg("dynamic", float(s), L0), seq_len=L)
    rel = maxdiff(got_inv / torch.tensor(inv, dtype=torch.float64), torch.ones(d // 2))
    assert rel < 1e-6 and af == 1.0, f"dynamic s={s} L={L}: inv_freq vs base' {want:.2f}, max relative diff {rel:.2e}"
    if L > L0:  # not vacuous: the neighbouring factor gives another table at this length
        other = ScaledRotaryEmbedding(d, base, scaling=cfg("dynamic", 3.0, L0)).cos_sin(L)[0]
        assert maxdiff(other, cos) > 100 * tol, f"s=3 and s={s} agree at L={L}: the check cannot tell factors apart"


@pytest.mark.parametrize("L, offset", [(257, 0), (512, 0), (1000, 0), (4096, 0), (4096, 300)])
def test_dynamic_factor_one_is_static_ntk_at_L_over_L0(L, offset):
    # with s = 1 the bracket is L / L0: dynamic at length L is static ntk with factor L / L0
    d, L0 = 32, 256
    dyn = ScaledRotaryEmbedding(d, scaling=cfg("dynamic", 1.0, L0)).cos_sin(L - offset, offset)
    ntk = ScaledRotaryEmbedding(d, scaling={"rope_type": "ntk", "factor": L / L0}).cos_sin(L - offset, offset)
    err = max(maxdiff(dyn[0], ntk[0]), maxdiff(dyn[1], ntk[1]))
    assert err == 0.0, f"dynamic s=1 vs ntk s={L / L0:g} at L={L}, offset={offset}: max diff {err:.2e}"
    plain = RotaryEmbedding(d).cos_sin(L - offset, offset)[0]
    assert maxdiff(dyn[0], plain) > 1e-2, f"dynamic s=1 at L={L} > L0 should not be plain RoPE"


def test_scaling_validated_once(monkeypatch):
    calls = []
    real = pos_rope.check_scaling
    monkeypatch.setattr(pos_rope, "check_scaling", lambda sc: calls.append(1) or real(sc))
    rope = ScaledRotaryEmbedding(16, scaling=cfg("dynamic", 2.0, L0=8))
    for T, off in ((4, 0), (20, 0), (30, 0), (5, 40), (100, 0)):  # new lengths beyond L0: table rebuilds
        rope.cos_sin(T, off)
    rope.to(torch.bfloat16)  # a cast rebuilds the tables too
    assert len(calls) == 1, f"check_scaling ran {len(calls)} times for one module; it should run at construction only"


@pytest.mark.parametrize("kind", (None,) + ROPE_TYPES)
def test_relative_position_property_survives_scaling(kind):
    torch.manual_seed(0)
    D, L0 = 32, 64
    rope = ScaledRotaryEmbedding(D, scaling=None if kind is None else cfg(kind, 8.0, L0))
    T = 2000  # one table for the whole length (dynamic: one base for this length)
    c, s = rope.cos_sin(T)
    q, k = torch.randn(D, dtype=torch.float64), torch.randn(D, dtype=torch.float64)

    def rot(x, m):
        return pos_rope.apply_rope(x.view(1, 1, 1, D), c[m:m + 1].double(), s[m:m + 1].double()).flatten()

    for delta in (0, 3, 100):
        scores = [rot(q, m) @ rot(k, m - delta) for m in (delta, 500, 1999)]
        spread = max(scores) - min(scores)
        assert spread < 1e-3 * max(1.0, abs(scores[0])), \
            f"{kind}: q_m . k_(m-{delta}) at m = {delta}, 500, 1999 = {[round(x.item(), 5) for x in scores]}"


@pytest.mark.parametrize("kind", ROPE_TYPES)
def test_tiny_lm_runs_beyond_training_length(kind):
    import tiny_lm
    torch.manual_seed(0)
    model = tiny_lm.TinyLM(tiny_lm.GPTConfig(vocab_size=11, n_layer=1, n_head=2, n_embd=16, pos="rope")).eval()
    L0 = 16
    idx = torch.randint(0, 11, (1, 4 * L0))
    with torch.no_grad():
        before = model(idx).logits
        model.set_rope_scaling(cfg(kind, 4.0, L0))
        after = model(idx).logits
    assert after.shape == (1, 4 * L0, 11) and torch.isfinite(after).all()
    assert maxdiff(before, after) > 1e-6, f"{kind}: scaling changed nothing at length {4 * L0}"
    assert model.cfg.rope_scaling["rope_type"] == kind


@pytest.mark.parametrize("bad, match", [
    ({"rope_type": "axial", "factor": 2.0}, "unknown rope_type 'axial'"),
    ({"factor": 2.0}, "unknown rope_type None"),  # pos_rope's dicts name their type (HF's blocks: test_rope_hf)
    ({"rope_type": "longrope", "factor": 2.0, "original_max_len": 64}, r"needs \['short_factor', 'long_factor'\]"),
    ({"rope_type": "linear", "factor": 0.5}, "factor must be a number >= 1"),
    ({"rope_type": "linear"}, "linear needs a factor"),
    ({"rope_type": "yarn", "factor": 4.0}, "needs original_max_len"),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_len": 64, "attention_factor": 0.0}, "attention_factor must be"),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_len": 64, "attention_factor": "1"}, "attention_factor must be"),
    ({"rope_type": "llama3", "factor": 8.0, "original_max_len": 64, "low_freq_factor": 5.0}, "high_freq_factor >="),
    ({"rope_type": "linear", "factor": 2.0, "beta_fast": 32.0}, r"does not take \['beta_fast'\]"),
    ({"rope_type": "dynamic", "factor": 2.0, "original_max_len": 64, "factr": 3.0}, r"does not take \['factr'\]"),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},  # HF's name: rope_hf.py reads it
     r"does not take \['original_max_position_embeddings'\]"),
    ({"rope_type": "longrope", "factor": 2.0, "original_max_len": 64, "long_factor": [1.0], "short_factor": [1.0]},
     "short_factor has 1 numbers, but the rotated dim 16 has 8 pairs"),
])
def test_bad_scaling_raises(bad, match):
    with pytest.raises(ValueError, match=match) as e:
        ScaledRotaryEmbedding(16, scaling=bad)
    assert "\n" not in str(e.value), f"the message should be one line: {str(e.value)!r}"


def test_attention_factor_multiplies_both_tables():
    """A yarn or longrope attention factor: the module's cos and sin are the plain tables of its frequencies
    times the factor (precompute_freqs stays plain RoPE's)."""
    rope = ScaledRotaryEmbedding(16, scaling=cfg("yarn", 4.0, attention_factor=1.5), init_len=10)
    c1, s1 = precompute_freqs(16, 10, inv_freq=rope.inv_freq)
    c2, s2 = rope.cos_sin(10)
    assert maxdiff(c2, 1.5 * c1) < 1e-6 and maxdiff(s2, 1.5 * s1) < 1e-6


@pytest.mark.parametrize("kind", ("yarn", "dynamic"))
def test_scaled_tables_stay_float32_after_module_cast(kind):
    rope = ScaledRotaryEmbedding(16, scaling=cfg(kind, 4.0, L0=8))
    want = [t.clone() for t in rope.cos_sin(40, 3000)]
    rope = rope.to(torch.bfloat16)
    got = rope.cos_sin(40, 3000)
    assert got[0].dtype == torch.float32
    d = max(maxdiff(got[0], want[0]), maxdiff(got[1], want[1]))
    assert d < 1e-6, f"{kind}: tables after .to(bfloat16) differ from float32 ones by {d:.2e}"


def test_yarn_attention_factor_overrides_the_temperature():
    """attention_factor replaces 0.1 ln(s) + 1 and multiplies cos and sin (so q.k by its square)."""
    for af in (1.0, 0.7, 1.5):
        rope = ScaledRotaryEmbedding(16, scaling=cfg("yarn", 16.0, attention_factor=af))
        c, s = rope.cos_sin(50, 10)
        norm = (c.double() ** 2 + s.double() ** 2).sqrt()
        assert maxdiff(norm, torch.full_like(norm, af)) < 1e-6, f"attention_factor {af}: |(cos, sin)| is not {af}"
    default = ScaledRotaryEmbedding(16, scaling=cfg("yarn", 16.0))
    assert default.attention_factor == pytest.approx(0.1 * math.log(16) + 1)


# ---------------------------------------------------------------------------- longrope
def l_block(L0=16, short=None, long=None, **kw):
    n = 8  # head dim 16
    return {"rope_type": "longrope", "factor": 4.0, "original_max_len": L0,
            "short_factor": short or [1.0 + 0.1 * i for i in range(n)],
            "long_factor": long or [1.0 + i for i in range(n)],
            **kw}


def test_longrope_switches_by_total_length_never_by_position():
    rope = ScaledRotaryEmbedding(16, scaling=l_block())
    plain = pos_rope.rope_inv_freq(16)
    af = math.sqrt(1 + math.log(4.0) / math.log(16))
    assert rope.attention_factor == pytest.approx(af, abs=1e-12)
    short = [af * t for t in precompute_freqs(16, 40, inv_freq=plain / torch.tensor(l_block()["short_factor"]))]
    long = [af * t for t in precompute_freqs(16, 40, inv_freq=plain / torch.tensor(l_block()["long_factor"]))]
    c, s = rope.cos_sin(16)  # total length 16 = L0: short, every row
    assert torch.equal(c, short[0][:16]) and torch.equal(s, short[1][:16])
    c, s = rope.cos_sin(40)  # total length 40 > L0: long, rows 0..15 included
    assert torch.equal(c, long[0]) and torch.equal(s, long[1]), "beyond L0 every position gets the long factors"
    assert maxdiff(c[:16], short[0][:16]) > 1e-3
    c, s = rope.cos_sin(1, offset=39)  # cached decoding at total length 40: row 39 of the long table
    assert torch.equal(c, long[0][39:40])
    c, s = rope.cos_sin(4, offset=10)  # back within L0: short again
    assert torch.equal(c, short[0][10:14])


def test_longrope_long_table_grows_without_rebuilding_per_step():
    """Decoding token by token beyond L0 reuses the long table (its frequencies do not change with length)."""
    rope = ScaledRotaryEmbedding(16, scaling=l_block(), init_len=8)
    rope.cos_sin(100)
    table = rope.cos
    for off in range(17, 100):
        rope.cos_sin(1, offset=off)
    assert rope.cos is table, "the long table was rebuilt although its frequencies did not change"


@pytest.mark.parametrize("bad, match", [
    (l_block(short=[1.0] * 3), "short_factor and long_factor must have one number per rotated pair each, got 3 and 8"),
    (l_block(short=[1.0] * 3, long=[1.0] * 3), "short_factor has 3 numbers, but the rotated dim 16 has 8 pairs"),
    (l_block(long=[1.0] * 7 + [0.0]), "long_factor must be a list of numbers > 0"),
    ({**l_block(), "factor": None}, "longrope needs factor or attention_factor"),
])
def test_longrope_bad_blocks(bad, match):
    with pytest.raises(ValueError, match=match):
        ScaledRotaryEmbedding(16, scaling=bad)


def test_longrope_factors_rule():
    """Our longrope factors: short all 1; long 1 for pairs YaRN keeps, s for pairs it interpolates,
    a linear ramp between."""
    d, base, s, L0 = 32, 10000.0, 16.0, 256
    short, long = pos_rope.longrope_factors(d, base, s, L0)
    assert short == [1.0] * 16 and len(long) == 16
    low, high = pos_rope.yarn_correction_range(d, base, L0)
    assert all(f == 1.0 for f in long[:low + 1]) and all(f == s for f in long[high:])
    assert all(a <= b for a, b in zip(long, long[1:])), "the factors should grow with the wavelength"
    rope = ScaledRotaryEmbedding(d, scaling={"rope_type": "longrope", "short_factor": short, "long_factor": long,
                                             "factor": s, "original_max_len": L0})
    assert torch.equal(rope.inv_freq, pos_rope.rope_inv_freq(d)), "short factors 1: plain frequencies up to L0"
    rope.cos_sin(4 * L0)
    ratio = pos_rope.rope_inv_freq(d) / rope.inv_freq  # the long set, in use at total length 4 L0
    assert maxdiff(ratio, torch.tensor(long)) < 1e-4
