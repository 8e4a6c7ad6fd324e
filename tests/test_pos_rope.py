"""pos_rope, plain RoPE (Su et al. 2021) against its definition written out independently: the rotation,
the relative-position identity (q_m . k_n depends only on m - n), offsets == slices of a longer table,
the complex fast path == the real rotation, float32 tables. Its options: test_pos_rope_options.py;
its scalings: test_pos_rope_scaling.py; Hugging Face's configs: test_rope_hf.py.
"""
import math
from pathlib import Path

import pytest
import torch

import pos_rope

pytestmark = pytest.mark.usefixtures("one_thread")


def max_diff(a, b) -> float:
    return (a.double() - b.double()).abs().max().item()


D = 16


def rope_reference(x: torch.Tensor, positions, base=10000.0) -> torch.Tensor:
    """Adjacent-pair rotation written with math.cos/math.sin in float64. x (T, D), one row per position."""
    out = x.clone().double()
    for r, m in enumerate(positions):
        for i in range(x.shape[-1] // 2):
            a = m * base ** (-2 * i / x.shape[-1])  # m θ_i
            xa, xb = x[r, 2 * i].item(), x[r, 2 * i + 1].item()
            out[r, 2 * i] = xa * math.cos(a) - xb * math.sin(a)
            out[r, 2 * i + 1] = xa * math.sin(a) + xb * math.cos(a)
    return out


def rotate(x, m, pairing="adjacent"):
    """Rotate a single vector x (D,) to position m with the library's float32 tables."""
    cos, sin = pos_rope.precompute_freqs(x.shape[-1], 1, offset=m)
    return pos_rope.apply_rope(x.view(1, 1, 1, -1), cos, sin, pairing).view(-1)


def relative_score(q, k, delta, base=10000.0) -> float:
    """sum_i Re[(q_2i + i q_2i+1)(k_2i - i k_2i+1) e^{i delta theta_i}]: the score as a function of m - n only."""
    s = 0.0
    for i in range(q.shape[-1] // 2):
        a = delta * base ** (-2 * i / q.shape[-1])
        z = complex(q[2 * i].item(), q[2 * i + 1].item()) * complex(k[2 * i].item(), -k[2 * i + 1].item())
        s += (z * complex(math.cos(a), math.sin(a))).real
    return s


def test_rope_matches_rotation_formula():
    """apply_rope (adjacent) equals the 2x2 rotation of each (2i, 2i+1) pair by m θ_i."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(6, D, dtype=torch.float64, generator=gen)
    positions = [0, 1, 2, 17, 300, 4100]
    cos = torch.stack([pos_rope.precompute_freqs(D, 1, offset=m)[0][0] for m in positions])  # (T, D/2)
    sin = torch.stack([pos_rope.precompute_freqs(D, 1, offset=m)[1][0] for m in positions])
    got = pos_rope.apply_rope(x.view(1, 1, 6, D), cos, sin).view(6, D)
    want = rope_reference(x, positions)
    # float32 angles: rounding grows with m (about m * 6e-8 rad), so near positions are held tighter.
    err = max_diff(got[:5], want[:5])
    assert err < 1e-5, f"apply_rope vs written-out rotation at m <= 300: max diff {err:.2e}"
    err = max_diff(got[5:], want[5:])
    assert err < 5e-4, f"apply_rope vs written-out rotation at m = 4100: max diff {err:.2e}"


def written_out(x, cos, sin):
    """The adjacent-pair rotation as apply_rope writes it out: a' = a cos - b sin, b' = a sin + b cos."""
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def attention_layout(layout, B, H, T, D, gen):
    """x (B, H, T, D) float32 as apply_rope meets it: contiguous; as attention hands it, (B, T, 3C) ->
    split -> (B, H, T, D) view; starting at an odd element; with an odd stride between rows."""
    if layout == "contiguous":
        return torch.randn(B, H, T, D, generator=gen)
    if layout == "qkv_view":
        return torch.randn(B, T, 3 * H * D, generator=gen)[..., H * D:2 * H * D].view(B, T, H, D).transpose(1, 2)
    if layout == "odd_offset":
        return torch.randn(B * H * T * D + 1, generator=gen)[1:].view(B, H, T, D)
    return torch.randn(B, H, T, D + 1, generator=gen)[..., :D]


@pytest.mark.parametrize("layout, as_complex", [("contiguous", True), ("qkv_view", True), ("odd_offset", False),
                                                ("odd_stride", False)])
def test_rope_complex_fast_path_equals_real_rotation(layout, as_complex):
    """rope_rotate, the model's rotation (one complex product where view_as_complex can read the pairs in place,
    apply_rope's written-out lines for other strides), and apply_rope itself equal the rotation written out,
    values and gradients."""
    gen = torch.Generator().manual_seed(2)
    x = attention_layout(layout, 2, 3, 7, D, gen).detach().requires_grad_(True)
    assert pos_rope.pairs_as_complex(x) == as_complex, f"{layout}: the test should cover the other path"
    cos, sin = pos_rope.precompute_freqs(D, 7, offset=5)
    got, want = pos_rope.rope_rotate(x, cos, sin), written_out(x, cos, sin)
    err = max_diff(got, want)
    assert err < 1e-6, f"complex fast path vs real rotation ({layout}): max diff {err:.2e}"
    err = max_diff(pos_rope.apply_rope(x, cos, sin), want)
    assert err < 1e-6, f"apply_rope, the plain form, vs the rotation written out ({layout}): max diff {err:.2e}"
    w = torch.randn(got.shape, generator=gen)
    g_got, = torch.autograd.grad((got * w).sum(), x)
    g_want, = torch.autograd.grad((want * w).sum(), x)
    err = max_diff(g_got, g_want)
    assert err < 1e-6, f"complex fast path gradient vs real rotation ({layout}): max diff {err:.2e}"


@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() not in ("DEFAULT", "AVX2", "AVX512"),
                    reason="checked bit for bit on x86 CPU kernels only")
@pytest.mark.parametrize("layout", ["contiguous", "qkv_view"])
def test_rope_complex_product_is_the_written_out_rotation_bit_for_bit(layout):
    """At the default tiny LM's training shape, (16, 4, 256, 32) float32 on CPU, the complex product computes
    a cos - b sin and a sin + b cos exactly as the written-out lines: outputs and gradients equal bit for bit.
    (Where a block of pairs is not a whole number of SIMD vectors, the last few can round once differently,
    e.g. 4.8e-7 at (3, 2, 17, 8): the 1e-6 test above holds those.)"""
    gen = torch.Generator().manual_seed(9)
    x = attention_layout(layout, 16, 4, 256, 32, gen).detach().requires_grad_(True)
    assert pos_rope.pairs_as_complex(x)
    cos, sin = pos_rope.precompute_freqs(32, 256, offset=3)
    got, want = pos_rope.apply_rope_complex(x, cos, sin), written_out(x, cos, sin)
    assert torch.equal(got, want), f"{layout}: max diff {max_diff(got, want):.2e}"
    assert torch.equal(pos_rope.apply_rope(x, cos, sin), want), "apply_rope is the written-out rotation"
    w = torch.randn(got.shape, generator=gen)
    g_got, = torch.autograd.grad((got * w).sum(), x)
    g_want, = torch.autograd.grad((want * w).sum(), x)
    assert torch.equal(g_got, g_want), f"{layout}: gradient max diff {max_diff(g_got, g_want):.2e}"


def test_plain_rope_works_alone():
    """pos_rope.py down to its first `# ---- ` fence, run alone in a fresh namespace (what a reader who copies
    it gets), within 160 lines: precompute_freqs, apply_rope and RotaryEmbedding work with nothing defined
    after the fence; q_m . k_n depends on m - n only, and offset=o rotates as rows o.. of a full forward."""
    lines = Path(pos_rope.__file__).read_text(encoding="utf-8").splitlines()
    fence = next(i for i, line in enumerate(lines) if line.startswith("# ---- "))
    assert fence <= 160, f"plain RoPE takes {fence} lines; the plain form should fit in the first 160"
    plain = {"__name__": "plain_rope"}
    exec(compile("\n".join(lines[:fence]), "pos_rope.py, plain part", "exec"), plain)
    assert "ScaledRotaryEmbedding" not in plain and "apply_partial_rope" not in plain, "the fence is misplaced"
    rope = plain["RotaryEmbedding"](D, init_len=8)
    gen = torch.Generator().manual_seed(10)
    q = torch.randn(D, generator=gen)
    k = q + 0.3 * torch.randn(D, generator=gen)

    def score(m, n):  # q_m . k_n with the copied module
        qm = rope(q.view(1, 1, 1, D), q.view(1, 1, 1, D), offset=m)[0]
        kn = rope(k.view(1, 1, 1, D), k.view(1, 1, 1, D), offset=n)[1]
        return (qm * kn).sum().item()

    scale = (q.norm() * k.norm()).item()
    seen = {}
    for delta in (0, 3, 50):
        s = [score(m, m - delta) for m in (delta, 100, 2000)]
        assert (max(s) - min(s)) / scale < 1e-4, f"q_m . k_(m-{delta}) depends on m: {s}"
        seen[delta] = s[0]
    assert max(seen.values()) - min(seen.values()) > 0.05 * scale, f"the score ignores m - n: {seen}"
    x = torch.randn(1, 2, 40, D, generator=gen)
    full = plain["RotaryEmbedding"](D, init_len=8)(x, x)[0]
    part = rope(x[:, :, 30:], x[:, :, 30:], offset=30)[0]
    err = max_diff(part, full[:, :, 30:])
    assert err < 1e-6, f"offset=30 vs rows 30.. of the full forward: max diff {err:.2e}"
    cos, sin = plain["precompute_freqs"](D, 40, theta=10000.0)
    assert torch.equal(plain["apply_rope"](x, cos, sin), full), "the copied apply_rope differs from its module"


def test_rope_score_depends_only_on_relative_position():
    """q_m . k_n == f(m - n) for m, n from 0 up to 9000 (far beyond any training length)."""
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(D, dtype=torch.float64, generator=gen)
    k = torch.randn(D, dtype=torch.float64, generator=gen)
    scale = (q.norm() * k.norm()).item()
    worst, seen = 0.0, {}
    for delta in (0, 3, -5, 100):
        want = relative_score(q, k, delta)
        seen[delta] = want
        for m in (0, 10, 1000, 4096, 4099, 5000, 9000):
            n = m - delta
            if n < 0:
                continue
            got = (rotate(q, m) @ rotate(k, n)).item()
            worst = max(worst, abs(got - want) / scale)
    # The tables are float32: angles near m = 9000 carry ~1e-4 rad of rounding.
    assert worst < 1e-4, f"q_m.k_n vs f(m-n): max relative diff {worst:.2e}"
    # Not vacuous: the score does change with m - n.
    spread = max(seen.values()) - min(seen.values())
    assert spread > 0.1 * scale, f"scores for different m - n are nearly equal ({seen}); the test is vacuous"


def test_rope_relative_identity_exact_with_float64_tables():
    """With float64 angle tables, apply_rope's identity q_m.k_n = f(m-n) holds to 1e-12 (it is the math, not luck)."""
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(D, dtype=torch.float64, generator=gen)
    k = torch.randn(D, dtype=torch.float64, generator=gen)
    inv = torch.tensor([10000.0 ** (-2 * i / D) for i in range(D // 2)], dtype=torch.float64)

    def rot64(x, m, pairing):
        a = m * inv[None]  # (1, D/2)
        return pos_rope.apply_rope(x.view(1, 1, 1, D), torch.cos(a), torch.sin(a), pairing).view(-1)

    for pairing in pos_rope.PAIRINGS:
        scores = [(rot64(q, m, pairing) @ rot64(k, m - 7, pairing)).item() for m in (7, 50, 4103, 6007)]
        spread = max(scores) - min(scores)
        assert spread < 1e-10, f"{pairing}: q_m.k_(m-7) spread over m {spread:.2e}"


@pytest.mark.parametrize("pairing", pos_rope.PAIRINGS)
def test_rope_preserves_norm(pairing):
    """A rotation keeps every vector's length, at every position (float32 cos^2+sin^2 = 1 to ~1e-7)."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 40, D, dtype=torch.float64, generator=gen)
    rope = pos_rope.RotaryEmbedding(D, pairing=pairing)
    for offset in (0, 5000):
        y, _ = rope(x, x, offset=offset)
        err = (y.norm(dim=-1) / x.norm(dim=-1) - 1).abs().max().item()
        assert err < 1e-6, f"{pairing} offset {offset}: max relative norm change {err:.2e}"


def test_rope_pairings_are_a_permutation_of_each_other():
    """adjacent pair i = dims (2i, 2i+1) <-> half pair (i, i + D/2): same map up to that fixed permutation."""
    gen = torch.Generator().manual_seed(5)
    T = 9
    x = torch.randn(2, 3, T, D, dtype=torch.float64, generator=gen)
    perm = [0] * D  # half-layout dim -> adjacent-layout dim
    for i in range(D // 2):
        perm[i], perm[i + D // 2] = 2 * i, 2 * i + 1
    cos, sin = pos_rope.precompute_freqs(D, T, offset=123)
    adj = pos_rope.apply_rope(x, cos, sin, "adjacent")
    half = pos_rope.apply_rope(x[..., perm], cos, sin, "half")
    err = max_diff(adj[..., perm], half)
    assert err < 1e-12, f"adjacent then permute vs permute then half max diff {err:.2e}"
    # Not vacuous: without the permutation the two conventions disagree.
    diff = max_diff(pos_rope.apply_rope(x, cos, sin, "adjacent"), pos_rope.apply_rope(x, cos, sin, "half"))
    assert diff > 1e-2, f"the two pairings agree without a permutation (max diff {diff:.2e})"


def test_rope_offset_equals_slice_of_longer_table():
    """precompute_freqs(offset=o) rows == rows o.. of a table built from 0."""
    cos, sin = pos_rope.precompute_freqs(D, 5, offset=300)
    C, S = pos_rope.precompute_freqs(D, 305)
    err = max(max_diff(cos, C[300:]), max_diff(sin, S[300:]))
    assert err < 1e-6, f"offset table vs slice max diff {err:.2e}"
    assert cos.dtype == torch.float32 and sin.dtype == torch.float32


def test_precompute_freqs_takes_the_tutorials_theta():
    """The tutorial calls precompute_freqs(dim, max_len, theta=10000.0): theta= is the base, checked against
    cos(m base^(-2i/d)) written out; base= and theta= both given and different is an error."""
    cos, _ = pos_rope.precompute_freqs(D, 7, theta=10.0)
    i, m = torch.arange(D // 2, dtype=torch.float64), torch.arange(7, dtype=torch.float64)
    ref = torch.cos(m[:, None] * 10.0 ** (-2 * i / D)[None, :])
    assert max_diff(cos, ref) < 1e-6, f"theta=10 vs the formula, max diff {max_diff(cos, ref):.2e}"
    assert torch.equal(cos, pos_rope.precompute_freqs(D, 7, base=10.0)[0])
    with pytest.raises(ValueError, match="two names of the base"):
        pos_rope.precompute_freqs(D, 7, base=100.0, theta=10.0)


@pytest.mark.parametrize("pairing", pos_rope.PAIRINGS)
def test_rope_module_offset_equals_full_then_slice(pairing):
    """RotaryEmbedding(q[:, :, o:], offset=o) == RotaryEmbedding(q)[:, :, o:] (what a KV cache relies on)."""
    gen = torch.Generator().manual_seed(6)
    T, o = 305, 300
    q = torch.randn(1, 2, T, D, generator=gen)
    k = torch.randn(1, 2, T, D, generator=gen)
    full_q, full_k = pos_rope.RotaryEmbedding(D, pairing=pairing, init_len=8)(q, k)
    rope = pos_rope.RotaryEmbedding(D, pairing=pairing, init_len=8)
    part_q, part_k = rope(q[:, :, o:], k[:, :, o:], offset=o)
    assert rope.cos.shape[0] >= T, f"table did not grow: {rope.cos.shape[0]} rows"
    err = max(max_diff(part_q, full_q[:, :, o:]), max_diff(part_k, full_k[:, :, o:]))
    assert err < 1e-6, f"{pairing}: offset forward vs full-then-slice max diff {err:.2e}"
    assert "cos" not in rope.state_dict() and "inv_freq" not in rope.state_dict()


def test_rope_angles_float32_for_bfloat16_input():
    """bf16 in, bf16 out, but the angles stay float32: at m ~ 4000 bf16 angles would be off by radians."""
    gen = torch.Generator().manual_seed(7)
    positions = list(range(4000, 4008))
    x = torch.randn(len(positions), D, generator=gen)
    rope = pos_rope.RotaryEmbedding(D)
    y, _ = rope(x.bfloat16().view(1, 1, -1, D), x.bfloat16().view(1, 1, -1, D), offset=positions[0])
    assert y.dtype == torch.bfloat16, f"output dtype {y.dtype}, expected x's dtype bfloat16"
    assert rope.cos.dtype == torch.float32 and rope.sin.dtype == torch.float32, "tables must stay float32"
    want = rope_reference(x.bfloat16().double(), positions)
    err = max_diff(y.view(-1, D), want)
    tol = 0.03 * x.abs().max().item()  # a few bf16 roundings of O(|x|) values
    assert err < tol, f"bf16 RoPE at m=4000..4007 vs float64 reference max diff {err:.2e} (tol {tol:.2e})"
    # What float32 angles avoid: the same positions with bf16 angles (m itself rounds to a multiple of 16/32).
    m = torch.tensor(positions, dtype=torch.bfloat16)[:, None]
    inv = pos_rope.rope_inv_freq(D).bfloat16()[None]
    bad = pos_rope.apply_rope(x.bfloat16().view(1, 1, -1, D), torch.cos(m * inv), torch.sin(m * inv))
    bad_err = max_diff(bad.view(-1, D), want)
    assert bad_err > 10 * tol, f"bf16 angles should be visibly wrong here (max diff {bad_err:.2e})"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_rope_tables_stay_float32_after_module_cast(dtype):
    """model.to(bf16/fp16) must not round the RoPE frequencies: the docstring promises float32 angles.

    inv_freq, cos and sin are floating buffers, so Module.to(dtype) would cast them, and tables grown
    afterwards would use a rounded inv_freq (off by radians at m ~ 4000) unless
    RotaryEmbedding._apply rebuilds them in float32.
    """
    rope = pos_rope.RotaryEmbedding(D).to(dtype)
    cos, sin = rope.cos_sin(4, offset=4000)  # beyond the initial table: forces a regrow
    want_cos, want_sin = pos_rope.precompute_freqs(D, 4, offset=4000)
    err = max(max_diff(cos, want_cos), max_diff(sin, want_sin))
    assert err < 1e-6, (
        f"after RotaryEmbedding.to({dtype}), cos/sin at m=4000..4003 differ from the float32 tables by "
        f"{err:.2e} (inv_freq is now {rope.inv_freq.dtype}); pos_rope.RotaryEmbedding must keep "
        f"inv_freq/cos/sin in float32 when the module is cast (e.g. override _apply)")
    x = torch.randn(1, 1, 4, D).to(dtype)
    y, _ = rope(x, x, offset=4000)
    assert y.dtype == dtype


def test_rope_odd_head_dim_raises():
    with pytest.raises(ValueError, match="even"):
        pos_rope.RotaryEmbedding(15)
    with pytest.raises(ValueError, match="even"):
        pos_rope.rope_inv_freq(7)
    cos, sin = pos_rope.precompute_freqs(8, 4)
    with pytest.raises(ValueError, match="even"):
        pos_rope.apply_rope(torch.randn(1, 1, 4, 9), cos, sin)
    with pytest.raises(ValueError, match="pairing"):
        pos_rope.RotaryEmbedding(8, pairing="interleaved")


def test_the_models_rope_is_pos_ropes(monkeypatch):
    """A RoPE TinyLM's forward turns q and k through pos_rope.rope_rotate, the complex product in float32 (spies
    count the calls: q and k of every layer)."""
    import tiny_lm
    calls = {"rope_rotate": 0, "apply_rope_complex": 0}
    for name in calls:
        real = getattr(pos_rope, name)
        monkeypatch.setattr(pos_rope, name, lambda *a, _r=real, _n=name, **kw: calls.__setitem__(_n, calls[_n] + 1)
                            or _r(*a, **kw))
    model = tiny_lm.TinyLM(tiny_lm.GPTConfig(vocab_size=20, n_layer=3, n_head=2, n_embd=16, pos="rope")).eval()
    with torch.no_grad():
        model(torch.zeros(1, 9, dtype=torch.long))
    assert calls == {"rope_rotate": 6, "apply_rope_complex": 6}, calls
