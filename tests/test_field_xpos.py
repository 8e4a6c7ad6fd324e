"""field_xpos.py, the xPos scheme file (Sun et al. 2022): q.k is RoPE's term of each pair times zeta_i^((m-n)/s),
computed here pair by pair with plain math; it depends on m - n only; cached decoding equals the full forward;
bfloat16 keeps the float32 result within bf16 rounding. The scheme is loaded from its file inside a fixture
and taken out again, so the rest of the session never sees it."""
import math
from pathlib import Path

import pytest
import torch

import schemes
from conftest import scheme_file_loaded
from conftest import cached_logits
from pos_rope import RotaryEmbedding, ScaledRotaryEmbedding
from lab.options import make_config, make_model

pytestmark = pytest.mark.usefixtures("one_thread")

PATH = Path(__file__).resolve().parent.parent / "field" / "field_xpos.py"
KW = {"vocab_size": 20, "n_layer": 2, "n_head": 2, "n_embd": 16, "max_len": 64}
GAMMA, S = 0.4, 512.0


@pytest.fixture(scope="module")
def xpos():
    """The scheme's entry, registered from field_xpos.py for this module only."""
    with scheme_file_loaded(PATH, ["xpos"]) as entries:
        yield entries["xpos"]


def turn(entry, rope, v, pos, centre=128):
    """(q, k) of the vector v (D,) at position pos through the scheme's hook, each (D,) float64."""
    module = entry.build(make_config(**KW, pos="xpos", train_len=2 * centre))
    x = v.view(1, 1, 1, -1)
    q, k = entry.rotate_qk(module, x, x, pos, schemes.Layer(0, False, 0, rope))
    return q.view(-1).double(), k.view(-1).double()


def reference_score(q, k, m, n, D, pairs, base=10000.0):
    """xPos's q_m . k_n written out: for pair i = (a, b) with θ_i = base^(-2i/r), φ = (m - n) θ_i,
    RoPE's term A cos φ - B sin φ (A = q_a k_a + q_b k_b, B = q_b k_a - q_a k_b) times zeta_i^((m - n)/s),
    zeta_i = (2i/r + gamma)/(1 + gamma); the dims in no pair add q_d k_d."""
    r = 2 * len(pairs)
    total = sum(q[d] * k[d] for d in range(D) if all(d not in p for p in pairs))
    for i, (a, b) in enumerate(pairs):
        phi = (m - n) * base ** (-2 * i / r)
        zeta = (2 * i / r + GAMMA) / (1 + GAMMA)
        A, B = q[a] * k[a] + q[b] * k[b], q[b] * k[a] - q[a] * k[b]
        total += zeta ** ((m - n) / S) * (A * math.cos(phi) - B * math.sin(phi))
    return total


@pytest.mark.parametrize("pairing,factor", [("adjacent", 1.0), ("half", 1.0), ("adjacent", 0.5), ("half", 0.5)])
def test_score_is_ropes_pair_terms_times_zeta_to_the_distance(xpos, pairing, factor):
    """Pair by pair in plain Python, against the hook with the layer's rope of that pairing (and a rope that
    turns only half of the head: the other dims keep scale 1)."""
    D = 8
    r = int(D * factor)
    pairs = [(2 * i, 2 * i + 1) for i in range(r // 2)] if pairing == "adjacent" else \
        [(i, i + r // 2) for i in range(r // 2)]
    rope = ScaledRotaryEmbedding(D, pairing=pairing, partial_rotary_factor=factor)
    g = torch.Generator().manual_seed(0)
    for m, n in ((5, 5), (700, 3), (40, 900), (1300, 1000)):
        qv, kv = torch.randn(D, generator=g), torch.randn(D, generator=g)
        got = (turn(xpos, rope, qv, m)[0] @ turn(xpos, rope, kv, n)[1]).item()
        want = reference_score(qv.double().tolist(), kv.double().tolist(), m, n, D, pairs)
        err = abs(got - want)
        assert err < 1e-4 * (1 + abs(want)), f"{pairing}, r={r}, m={m}, n={n}: got {got}, want {want}, diff {err:.2e}"


def test_score_depends_only_on_the_distance(xpos):
    """Shift both positions by the same amount, up to 4096: the same score (float32 angles, 1e-3 of |q||k|)."""
    D, rope = 16, RotaryEmbedding(16)
    g = torch.Generator().manual_seed(1)
    qv, kv = torch.randn(D, generator=g), torch.randn(D, generator=g)
    for dist in (0, 7, 300):
        scores = [(turn(xpos, rope, qv, n + dist)[0] @ turn(xpos, rope, kv, n)[1]).item() for n in (0, 50, 1000, 3796)]
        spread = max(scores) - min(scores)
        assert spread < 1e-3 * qv.norm().item() * kv.norm().item(), \
            f"m - n = {dist}: scores {scores} at n = 0, 50, 1000, 3796; spread {spread:.2e}"
    q4096, k4096 = turn(xpos, rope, qv, 4096)
    assert torch.isfinite(q4096).all() and torch.isfinite(k4096).all(), "scales at 4096 must stay finite"


def test_cached_decoding_equals_the_full_forward(xpos):
    """TinyLM with xPos: one token at a time through the cache gives the full forward's logits."""
    torch.manual_seed(0)
    model = make_model(make_config(**KW, pos="xpos")).eval()
    assert model.xpos.centre == 128 and model.xpos.scale_base == S and model.xpos.gamma == GAMMA, model.xpos
    ids = torch.randint(0, 20, (2, 30), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = model(ids).logits
        cached = cached_logits(model, ids, 11)[0]
    err = (cached - full).abs().max().item()
    assert err < 1e-5, f"xpos: cached decoding vs full forward, max logit diff {err:.2e}"


def test_bfloat16_keeps_the_float32_result(xpos):
    """bf16 q, k at positions near 3000: rotation and scale in float32, only the result rounded to bf16, so it
    stays within bf16's rounding (2^-8 relative) of the float32 result on the same inputs."""
    module = xpos.build(make_config(**KW, pos="xpos"))
    layer = schemes.Layer(0, False, 0, RotaryEmbedding(32))
    g = torch.Generator().manual_seed(3)
    q, k = (torch.randn(2, 2, 16, 32, generator=g).bfloat16() for _ in range(2))
    q16, k16 = xpos.rotate_qk(module, q, k, 3000, layer)
    q32, k32 = xpos.rotate_qk(module, q.float(), k.float(), 3000, layer)
    assert q16.dtype == k16.dtype == torch.bfloat16, (q16.dtype, k16.dtype)
    for name, low, ref in (("q", q16, q32), ("k", k16, k32)):
        err = ((low.float() - ref).abs() / (ref.abs() + 1e-30)).max().item()
        assert err <= 2 ** -8, f"{name}: bf16 vs float32 result, max relative diff {err:.2e}"


def test_a_nope_layer_is_left_alone(xpos):
    """layer.rope None (nope_every): q and k come back as they were."""
    module = xpos.build(make_config(**KW, pos="xpos"))
    q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    q2, k2 = xpos.rotate_qk(module, q, k, 7, schemes.Layer(1, True, 0, None))
    assert q2 is q and k2 is k
