"""attn_common: the explicit attn() against torch's fused kernel, the causal and local-window masks,
extra logits (attention sinks), Llama 4's temperature, and attention as a set operation.

Every reference mask here is built independently of attn_common.causal_mask, from the
definition "query i sits at absolute position Tk - Tq + i and may attend to keys j <= that".
Float64 throughout, so agreement is to ~1e-12, not to float32 noise. The window masks likewise, with
loops: a sliding window of w keeps keys i - w < j <= i, a chunked one keeps keys j <= i with
j // w == i // w.
"""
import math

import pytest
import torch
import torch.nn.functional as F

import pos_alibi
import pos_learned
import pos_rope
import pos_sin
import attn_common
from attn_common import (attn, attn_sdpa, causal_mask, first_visible_key, hide_later_keys, llama4_attn_temperature,
                         window_mask)
from pos_alibi import alibi_bias

pytestmark = pytest.mark.usefixtures("one_thread")

B, H, D = 2, 3, 8
TOL64 = 1e-12


def max_diff(a, b) -> float:
    return (a - b).abs().max().item()


def keep_bottom_right(Tq: int, Tk: int) -> torch.Tensor:
    """(Tq, Tk) bool, True where key j <= Tk - Tq + i, written out with loops (the definition)."""
    keep = torch.zeros(Tq, Tk, dtype=torch.bool)
    for i in range(Tq):
        for j in range(Tk):
            keep[i, j] = j <= Tk - Tq + i
    return keep


def qkv(Tq, Tk, gen):
    q = torch.randn(B, H, Tq, D, dtype=torch.float64, generator=gen)
    k = torch.randn(B, H, Tk, D, dtype=torch.float64, generator=gen)
    v = torch.randn(B, H, Tk, D, dtype=torch.float64, generator=gen)
    return q, k, v


# (name, Tq, Tk, causal, bias shape or None, padding mask?)
CASES = [
    ("plain", 5, 5, False, None, False),
    ("causal", 6, 6, True, None, False),
    ("bias_HTT", 5, 5, False, "H", False),
    ("bias_BHTT", 5, 5, False, "BH", False),
    ("bias_causal", 6, 6, True, "H", False),
    ("bool_mask", 6, 6, False, None, True),
    ("bool_mask_causal_bias", 6, 6, True, "BH", True),
    ("cached_causal_Tq3_Tk7", 3, 7, True, None, False),
    ("cached_causal_Tq1_Tk7", 1, 7, True, None, False),
    ("cached_bias_causal_Tq2_Tk7", 2, 7, True, "H", False),
    ("cached_bias_noncausal_Tq3_Tk7", 3, 7, False, "H", False),
]


@pytest.mark.parametrize("name,Tq,Tk,causal,bias_kind,use_mask", CASES, ids=[c[0] for c in CASES])
def test_attn_equals_sdpa(name, Tq, Tk, causal, bias_kind, use_mask):
    """attn() == attn_sdpa() == F.scaled_dot_product_attention with an independently built float mask."""
    gen = torch.Generator().manual_seed(1)
    q, k, v = qkv(Tq, Tk, gen)
    bias = None
    if bias_kind == "H":
        bias = torch.randn(H, Tq, Tk, dtype=torch.float64, generator=gen)
    elif bias_kind == "BH":
        bias = torch.randn(B, H, Tq, Tk, dtype=torch.float64, generator=gen)
    mask = None
    if use_mask:  # padding-style mask: batch b sees only its first n_b keys (never an empty row)
        lengths = [Tk, Tk - 2]
        mask = torch.zeros(B, 1, Tq, Tk, dtype=torch.bool)
        for b, n in enumerate(lengths):
            mask[b, :, :, :n] = True

    out = attn(q, k, v, mask=mask, score_bias=bias, causal=causal)
    out_sdpa = None
    if mask is None:  # attn_sdpa has no boolean mask, and takes a causal model's mask inside its bias
        sdpa_bias = bias
        if causal and bias is not None:
            sdpa_bias = bias.masked_fill(~keep_bottom_right(Tq, Tk), float("-inf"))
        out_sdpa = attn_sdpa(q, k, v, score_bias=sdpa_bias, causal=causal)

    # Independent float mask for torch's kernel: bias, then -inf where not allowed.
    keep = torch.ones(Tq, Tk, dtype=torch.bool)
    if causal:
        keep = keep & keep_bottom_right(Tq, Tk)
    if mask is not None:
        keep = keep & mask
    float_mask = torch.zeros(Tq, Tk, dtype=torch.float64) if bias is None else bias
    float_mask = float_mask.masked_fill(~keep, float("-inf"))
    out_torch = F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask)

    assert out.shape == (B, H, Tq, D)
    err = max_diff(out, out_torch)
    assert err < TOL64, f"{name}: attn() vs F.scaled_dot_product_attention max diff {err:.2e}"
    if out_sdpa is not None:
        err = max_diff(out_sdpa, out_torch)
        assert err < TOL64, f"{name}: attn_sdpa() vs F.scaled_dot_product_attention max diff {err:.2e}"


@pytest.mark.parametrize("Tq,Tk,causal,window,q_chunk", [(6, 6, True, 0, 2), (3, 7, True, 0, 2), (7, 7, False, 0, 3),
                                                    (9, 9, True, 3, 4), (2, 9, True, 4, 1)])
def test_sdpa_chunk_function_equals_whole_bias(Tq, Tk, causal, window, q_chunk):
    """A bias given as a function of the chunk (schemes.py's score_bias) gives attn()'s output with the whole
    tensor; each call asks only for the rows of its chunk and the keys they can see, and the function hides
    the later keys with hide_later_keys."""
    gen = torch.Generator().manual_seed(9)
    q, k, v = qkv(Tq, Tk, gen)
    bias = torch.randn(H, Tq, Tk, dtype=torch.float64, generator=gen)
    asked, past = [], Tk - Tq

    def chunk(a, b, s, e):
        asked.append((a, b, s, e))
        rows = bias[:, a:b, s:e].clone()
        return hide_later_keys(rows, past + a, s) if causal else rows

    want = attn(q, k, v, score_bias=bias, causal=causal, window=window)
    whole = bias.masked_fill(~keep_bottom_right(Tq, Tk), float("-inf")) if causal else bias
    for given in (whole, chunk):
        got = attn_sdpa(q, k, v, score_bias=given, causal=causal, window=window, q_chunk=q_chunk)
        err = max_diff(got, want)
        assert err < TOL64, f"attn_sdpa with a {'function' if given is chunk else 'tensor'} bias vs attn(): {err:.2e}"
    rows = [r for a, b, *_ in asked for r in range(a, b)]
    assert rows == list(range(Tq)) and all(b - a <= q_chunk for a, b, *_ in asked), asked
    if causal:  # never a key after the chunk's last query
        assert all(e == past + b for a, b, s, e in asked), asked


@pytest.mark.parametrize("Tq,Tk,q_chunk", [(6, 6, 256), (3, 7, 256), (9, 9, 4)])
def test_sdpa_refuses_a_causal_bias_without_the_mask(Tq, Tk, q_chunk):
    """causal=True with a bias (tensor or chunk function) that is finite at a hidden key raises, rather than
    letting the chunk see the future."""
    gen = torch.Generator().manual_seed(9)
    q, k, v = qkv(Tq, Tk, gen)
    bias = torch.randn(H, Tq, Tk, dtype=torch.float64, generator=gen)
    for given in (bias, lambda a, b, s, e: bias[:, a:b, s:e]):
        with pytest.raises(ValueError, match="-inf at the hidden keys"):
            attn_sdpa(q, k, v, score_bias=given, causal=True, q_chunk=q_chunk)


def test_a_float_mask_chunk_fits_the_cache(monkeypatch):
    """rows_per_chunk: a chunk's (H, rows, keys) float mask stays within MASK_BYTES, between MIN_ROWS and q_chunk
    rows (4 heads in float32: 256 rows at 256 keys, 64 at 4096, 32 at a million). attn_sdpa asks a bias function
    for chunks of that many rows, and its output is still attn()'s."""
    q = torch.zeros(1, 4, 1, 32)
    got = [attn_common.rows_per_chunk(q, 256, keys) for keys in (256, 4096, 10 ** 6)]
    want = [256, attn_common.MASK_BYTES // (4 * 4096 * 4), attn_common.MIN_ROWS]
    assert got == want and want[1] == 64, f"rows per chunk at 256, 4096 and 1e6 keys: {got}, want {want}"
    monkeypatch.setattr(attn_common, "MIN_ROWS", 1)
    monkeypatch.setattr(attn_common, "MASK_BYTES", 3 * 20 * 8 * 2)  # 2 rows of 3 heads x 20 float64 keys
    gen = torch.Generator().manual_seed(10)
    q, k, v = qkv(7, 20, gen)
    bias = torch.randn(H, 7, 20, dtype=torch.float64, generator=gen)
    asked = []

    def chunk(a, b, s, e):
        asked.append((a, b))
        return hide_later_keys(bias[:, a:b, s:e].clone(), 13 + a, s)
    err = max_diff(attn_sdpa(q, k, v, score_bias=chunk, causal=True, q_chunk=4), attn(q, k, v, score_bias=bias,
                                                                                     causal=True))
    assert asked == [(0, 2), (2, 4), (4, 6), (6, 7)] and err < TOL64, f"chunks {asked}, max diff {err:.2e}"


@pytest.mark.parametrize("Tq,Tk,causal,q_chunk,batch", [(6, 6, True, 2, False), (7, 7, True, 256, True),
                                                       (3, 7, True, 2, False), (1, 7, True, 256, False),
                                                       (7, 7, False, 3, True), (3, 7, False, 2, False)])
def test_distance_bias_is_read_from_its_row(Tq, Tk, causal, q_chunk, batch):
    """A chunk function with .distance = (r, d0) is never asked for a chunk: attn_sdpa reads every mask from r
    and gives attn()'s output and gradients (r's too) with the whole bias r[i - j + d0], written out with loops.
    With a window it is asked for its chunks, as any function is."""
    gen = torch.Generator().manual_seed(12)
    q, k, v = qkv(Tq, Tk, gen)
    d0, L = Tk + 1, 2 * Tk + 3  # room on both sides: only r[d0 - (Tk - 1) .. d0 + Tk - 1] is read
    r = torch.randn(*((B,) if batch else ()), H, L, dtype=torch.float64, generator=gen)
    if causal:
        r[..., :d0] = float("-inf")  # every later key, d = i - j < 0
    idx = torch.zeros(Tq, Tk, dtype=torch.long)
    for i in range(Tq):
        for j in range(Tk):
            idx[i, j] = (Tk - Tq + i) - j + d0  # query row i sits at position Tk - Tq + i
    runs = {}
    for how in ("whole", "row", "window")[:3 if causal else 2]:
        leaves = [t.clone().requires_grad_() for t in (q, k, v, r)]
        whole = leaves[3][..., idx]  # (B?, H, Tq, Tk), differentiable in r

        def chunk(a, b, s, e):
            if how == "row":
                raise AssertionError(f"asked for rows {a}..{b - 1} on keys {s}..{e - 1}: the distance row serves")
            return whole[..., a:b, s:e]
        chunk.distance = (leaves[3], d0)
        if how == "whole":
            out = attn(*leaves[:3], score_bias=whole, causal=causal)
        else:  # a window of 2 keys is not a bias of distance alone: its chunks are asked for
            window = 2 if how == "window" and causal else 0
            out = attn_sdpa(*leaves[:3], score_bias=chunk, causal=causal, window=window, q_chunk=q_chunk)
            if window:
                err = max_diff(out, attn(q, k, v, score_bias=whole.detach(), causal=True, window=window))
                assert err < TOL64, f"windowed, asked for chunks, vs attn(): max diff {err:.2e}"
                continue
        out.square().sum().backward()
        runs[how] = [out, *(t.grad for t in leaves)]
    for what, got, want in zip(("out", "q grad", "k grad", "v grad", "r grad"), runs["row"], runs["whole"]):
        err = max_diff(got, want)
        assert err < 1e-10, f"distance bias read from its row: {what} vs attn() with the whole bias, max diff {err:.2e}"


def test_distance_bias_refuses_what_it_cannot_read():
    """A causal distance row finite at a negative distance, or one too short for the call, raises ValueError."""
    gen = torch.Generator().manual_seed(13)
    q, k, v = qkv(5, 5, gen)
    row = lambda a, b, s, e: None  # noqa: E731 (never asked)
    row.distance = (torch.randn(H, 9, dtype=torch.float64, generator=gen), 4)
    with pytest.raises(ValueError, match="-inf at every distance"):
        attn_sdpa(q, k, v, score_bias=row, causal=True)
    row.distance = (torch.zeros(H, 8, dtype=torch.float64), 4)
    with pytest.raises(ValueError, match="must hold every distance"):
        attn_sdpa(q, k, v, score_bias=row, causal=False)


@pytest.mark.parametrize("Tq,Tk", [(40, 40), (3, 40)])
def test_per_key_bias_is_the_bias_w_j_minus_w_i(Tq, Tk):
    """A per-key bias w (H, 1, Tk) stands for w_j - w_i: in float32 without extra logits attn_sdpa folds it into
    q.k (one more head dim, the causal kernel), with extra logits or in float64 it builds the chunks; each equals
    attn() with the whole bias w_j - w_i and the causal mask. ALiBi's key form gives ALiBi."""
    gen = torch.Generator().manual_seed(11)
    q, k, v = qkv(Tq, Tk, gen)
    w = torch.randn(H, 1, Tk, dtype=torch.float64, generator=gen) * 3
    pos = torch.arange(Tk - Tq, Tk)
    full = w - w[:, 0, pos][..., None]  # (H, 1, Tk) - (H, Tq, 1) -> (H, Tq, Tk): w_j - w_i
    sinks = torch.randn(H, 1, 2, dtype=torch.float64, generator=gen)
    for dtype, tol in ((torch.float64, TOL64), (torch.float32, 1e-5)):
        qd, kd, vd, wd = (t.to(dtype) for t in (q, k, v, w))
        for extra in (None, sinks.to(dtype)):
            want = attn(q, k, v, score_bias=full, causal=True, extra_logits=extra)
            got = attn_sdpa(qd, kd, vd, score_bias=wd, causal=True, q_chunk=16, extra_logits=extra)
            err = max_diff(got, want)
            assert err < tol, f"{dtype}, extra logits {extra is not None}: per-key bias vs w_j - w_i, max diff {err:.2e}"
    m = torch.tensor([0.5, 0.25, 0.125])[:, None, None]  # ALiBi: w_j = m j  ->  -m (i - j)
    alibi = alibi_bias(3, Tq, Tk, slopes=m.flatten())
    j = torch.arange(Tk, dtype=torch.float64)
    err = max_diff((m * j) - (m * j)[:, :, Tk - Tq:].transpose(1, 2), alibi)
    assert err == 0, f"ALiBi's key form minus its row term vs alibi_bias: {err:.2e}"


@pytest.mark.parametrize("before", [False, True])
def test_subnormals_are_flushed_inside_the_fast_path_and_the_setting_comes_back(monkeypatch, before):
    """ALiBi's key form at 4096 runs the fused kernel (q with one more dim) with subnormal floats flushed to zero,
    and after the call the thread flushes exactly as it did before (off, or on as the user set it); the output
    is the one without flushing, to 1e-6."""
    if not torch.set_flush_denormal(before) and before:
        pytest.skip("this CPU cannot flush subnormal floats")
    seen, sdpa = [], F.scaled_dot_product_attention

    def spy(q, *args, **kw):
        seen.append((q.shape[-1], attn_common.flushes_denormals()))
        return sdpa(q, *args, **kw)
    try:
        gen = torch.Generator().manual_seed(3)
        q, k, v = (torch.randn(1, 2, 4096, 8, generator=gen) for _ in range(3))
        w = pos_alibi.alibi_slopes(2)[:, None, None] * torch.arange(4096.0)  # (H, 1, Tk): m_h j
        with monkeypatch.context() as mp:
            mp.setattr(attn_common.F, "scaled_dot_product_attention", spy)
            got = attn_sdpa(q, k, v, score_bias=w, causal=True)
        assert seen == [(9, True)], f"(head dim, flushing) of each kernel call: {seen}; want the key form, flushing"
        assert attn_common.flushes_denormals() == before, f"flushing after the call: want {before} as before it"
        torch.set_flush_denormal(False)
        err = (attn_common._attn_sdpa(q, k, v, score_bias=w, causal=True) - got).abs().max().item()
        assert err < 1e-6, f"flushed vs not: max diff {err:.2e}"
    finally:
        torch.set_flush_denormal(False)


def team_flushes() -> list:
    """flushes_denormals() in every thread of this thread's OpenMP team (torch's intra-op pool)."""
    seen = []
    body = attn_common._TEAM_BODY(lambda _: seen.append(attn_common.flushes_denormals()))
    attn_common._gomp_parallel()(body, None, torch.get_num_threads(), 0)
    return seen


def test_subnormals_are_flushed_in_every_intra_op_thread(monkeypatch):
    """torch.set_flush_denormal switches one thread, and a pool started before the first call keeps its own setting:
    inside attn_sdpa every thread of the pool flushes, after it none does (the caller's setting: off)."""
    if attn_common._gomp_parallel() is None or not torch.set_flush_denormal(False):
        pytest.skip("no libgomp in this process, or a CPU that cannot flush subnormal floats")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch.randn(600, 600) @ torch.randn(600, 600)  # the pool starts unflushed
        assert team_flushes() == [False, False], f"before the call: {team_flushes()}"
        seen, sdpa = [], F.scaled_dot_product_attention

        def spy(q, *args, **kw):
            seen.append(team_flushes())
            return sdpa(q, *args, **kw)
        q, k, v = (torch.randn(1, 2, 64, 8) for _ in range(3))
        w = pos_alibi.alibi_slopes(2)[:, None, None] * torch.arange(64.0)  # (H, 1, Tk): m_h j
        with monkeypatch.context() as mp:
            mp.setattr(attn_common.F, "scaled_dot_product_attention", spy)
            attn_sdpa(q, k, v, score_bias=w, causal=True)
        assert seen == [[True, True]], f"flushing in each thread of the pool during the kernel call: {seen}"
        assert team_flushes() == [False, False], f"after the call: {team_flushes()}, want the setting before it"
    finally:
        torch.set_flush_denormal(False)
        torch.set_num_threads(before)


def test_hide_later_keys_matches_the_causal_mask():
    """hide_later_keys on any block equals that block of the causal mask applied to the whole bias."""
    bias = torch.randn(2, 12, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    whole = bias.masked_fill(~keep_bottom_right(12, 12), float("-inf"))
    for i0, i1, j0, j1 in ((0, 12, 0, 12), (4, 8, 0, 8), (4, 8, 2, 6), (9, 12, 10, 12), (3, 5, 0, 3)):
        got = hide_later_keys(bias[:, i0:i1, j0:j1].clone(), i0, j0)
        assert torch.equal(got, whole[:, i0:i1, j0:j1]), (i0, i1, j0, j1)


def test_attn_equals_written_out_softmax():
    """attn() against softmax(q.k / sqrt(d) + bias) v written per query with math.exp (no torch softmax)."""
    gen = torch.Generator().manual_seed(2)
    Tq, Tk = 3, 5
    q, k, v = qkv(Tq, Tk, gen)
    bias = torch.randn(H, Tq, Tk, dtype=torch.float64, generator=gen)
    out = attn(q, k, v, score_bias=bias, causal=True)
    want = torch.zeros_like(out)
    for b in range(B):
        for h in range(H):
            for i in range(Tq):
                visible = range(Tk - Tq + i + 1)
                s = [float(q[b, h, i] @ k[b, h, j]) / math.sqrt(D) + float(bias[h, i, j]) for j in visible]
                top = max(s)
                w = [math.exp(x - top) for x in s]
                z = sum(w)
                want[b, h, i] = sum((wj / z) * v[b, h, j] for j, wj in zip(visible, w))
    err = max_diff(out, want)
    assert err < TOL64, f"attn() vs written-out formula max diff {err:.2e}"


def test_causal_square_matches_torch_is_causal():
    """For Tq == Tk the bottom-right mask is torch's own is_causal=True mask."""
    gen = torch.Generator().manual_seed(3)
    q, k, v = qkv(6, 6, gen)
    err = max_diff(attn(q, k, v, causal=True), F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert err < TOL64, f"attn(causal=True) vs sdpa(is_causal=True) max diff {err:.2e}"


@pytest.mark.parametrize("Tq,Tk", [(6, 6), (3, 7), (1, 4)])
def test_causal_mask_definition(Tq, Tk):
    """causal_mask(Tq, Tk)[i, j] is True exactly when j <= Tk - Tq + i."""
    got = causal_mask(Tq, Tk)
    want = keep_bottom_right(Tq, Tk)
    assert got.dtype == torch.bool and got.shape == (Tq, Tk)
    assert torch.equal(got, want), f"causal_mask({Tq}, {Tk}) differs in {(got != want).sum().item()} entries"


@pytest.mark.parametrize("Tq,Tk", [(6, 6), (3, 7)])
def test_return_weights(Tq, Tk):
    """Weights: rows sum to 1, exactly 0 above the (bottom-right) diagonal, > 0 on it, and out = weights @ v."""
    gen = torch.Generator().manual_seed(4)
    q, k, v = qkv(Tq, Tk, gen)
    bias = torch.randn(H, Tq, Tk, dtype=torch.float64, generator=gen)
    for kw in ({}, {"score_bias": bias}):
        out, w = attn(q, k, v, causal=True, return_weights=True, **kw)
        assert w.shape == (B, H, Tq, Tk)
        err = (w.sum(-1) - 1).abs().max().item()
        assert err < TOL64, f"rows do not sum to 1: max |sum - 1| {err:.2e}"
        future = ~keep_bottom_right(Tq, Tk)
        above = w[..., future].abs().max().item()
        assert above == 0.0, f"weight on a future key: max {above:.2e}"
        assert (w[..., ~future] > 0).all(), "every visible key should get a positive weight"
        err = max_diff(out, w @ v)
        assert err < TOL64, f"out vs weights @ v max diff {err:.2e}"
        ref = attn(q, k, v, causal=True, **kw)
        err = max_diff(out, ref)
        assert err < TOL64, f"return_weights changed the output: max diff {err:.2e}"


def test_return_weights_without_mask_are_softmax():
    """Without a mask the weights are the softmax of q k^T / sqrt(d): every entry positive, rows sum to 1."""
    gen = torch.Generator().manual_seed(5)
    q, k, v = qkv(4, 4, gen)
    _, w = attn(q, k, v, return_weights=True)
    want = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(D), dim=-1)
    err = max_diff(w, want)
    assert err < TOL64, f"weights vs softmax(qk^T/sqrt d) max diff {err:.2e}"


# ----------------------------------------------------------------------------- extra logits (attention sinks)

# (name, Tq, Tk, causal, window, bias?, shape of the extra logits)
EXTRA_CASES = [
    ("one_per_head", 5, 5, False, 0, False, (H, 1, 1)),
    ("causal_bias", 6, 6, True, 0, True, (H, 1, 1)),
    ("cached_two_per_query", 3, 7, True, 0, False, (B, H, 3, 2)),
    ("sliding_window", 7, 7, True, 3, True, (1, H, 1, 1)),
]


@pytest.mark.parametrize("name,Tq,Tk,causal,window,with_bias,shape", EXTRA_CASES, ids=[c[0] for c in EXTRA_CASES])
def test_extra_logits_join_the_softmax_and_are_dropped(name, Tq, Tk, causal, window, with_bias, shape):
    """attn(extra_logits=E) == attn_sdpa(extra_logits=E) == the definition written out with loops:
    w_ij = exp(s_ij) / (sum_j' exp(s_ij') + sum_e exp(E_ie)) over the visible keys, out_i = sum_j w_ij v_j."""
    gen = torch.Generator().manual_seed(3)
    q, k, v = qkv(Tq, Tk, gen)
    bias = torch.randn(H, Tq, Tk, dtype=torch.float64, generator=gen) if with_bias else None
    extra = torch.randn(*shape, dtype=torch.float64, generator=gen)
    keep = keep_bottom_right(Tq, Tk) if causal else torch.ones(Tq, Tk, dtype=torch.bool)
    if window:  # sliding: the query at absolute position Tk - Tq + i sees its last `window` keys
        keep &= torch.tensor([[j > Tk - Tq + i - window for j in range(Tk)] for i in range(Tq)])
    if causal and bias is not None:  # attn_sdpa's contract: a causal bias carries the mask
        bias = bias.masked_fill(~keep, float("-inf"))
    want = torch.zeros(B, H, Tq, D, dtype=torch.float64)
    E = extra.expand(B, H, Tq, shape[-1])
    for b in range(B):
        for h in range(H):
            for i in range(Tq):
                s = [(q[b, h, i] @ k[b, h, j]).item() / math.sqrt(D) + (0.0 if bias is None else bias[h, i, j].item())
                     for j in range(Tk)]
                e = [math.exp(s[j]) if keep[i, j] else 0.0 for j in range(Tk)]
                total = sum(e) + sum(math.exp(x) for x in E[b, h, i].tolist())
                want[b, h, i] = sum(e[j] / total * v[b, h, j] for j in range(Tk))
    kw = dict(score_bias=bias, causal=causal, window=window, extra_logits=extra)
    err = max(max_diff(attn(q, k, v, **kw), want), max_diff(attn_sdpa(q, k, v, **kw), want))
    assert err < TOL64, f"{name}: attn / attn_sdpa with extra logits vs the written-out definition, max diff {err:.2e}"
    no_extra = dict(kw, extra_logits=torch.full(shape, float("-inf"), dtype=torch.float64))
    err = max_diff(attn_sdpa(q, k, v, **no_extra), attn_sdpa(q, k, v, **dict(kw, extra_logits=None)))
    assert err < TOL64, f"{name}: extra logits of -inf should change nothing, max diff {err:.2e}"
    _, w = attn(q, k, v, return_weights=True, **kw)
    assert (w.sum(-1) < 1).all(), f"{name}: with extra logits the real keys' weights should sum to less than 1"


# ----------------------------------------------------------------------------- permutation

T, NH, HD = 6, 2, 8          # tokens, heads, head dim
C = NH * HD
PERM = [2, 0, 5, 1, 4, 3]    # neither the identity nor the reversal
REVERSE = list(range(T - 1, -1, -1))


def one_layer(x: torch.Tensor, scheme: str, mods: dict, W) -> torch.Tensor:
    """One bidirectional attention layer (T, C) -> (T, C) with the given position scheme."""
    if scheme == "learned":
        x = x + mods["learned"](T).double()
    elif scheme == "sin":
        x = x + mods["sin"](T).double()
    Wq, Wk, Wv = W
    heads = lambda M: (x @ M).view(T, NH, HD).transpose(0, 1)[None]  # (T, C) -> (1, H, T, D)
    q, k, v = heads(Wq), heads(Wk), heads(Wv)
    if scheme == "rope":
        q, k = mods["rope"](q, k)
    bias = None
    if scheme in ("alibi", "alibi-sym"):
        bias = mods[scheme](T, T)
    y = attn(q, k, v, score_bias=bias)  # (1, H, T, D), no causal mask: a set operation
    return y[0].transpose(0, 1).reshape(T, C)


@pytest.fixture
def layer_parts():
    gen = torch.Generator().manual_seed(6)
    W = tuple(torch.randn(C, C, dtype=torch.float64, generator=gen) / math.sqrt(C) for _ in range(3))
    x = torch.randn(T, C, dtype=torch.float64, generator=gen)
    mods = {
        "learned": pos_learned.LearnedPositionalEmbedding(T, C, init_std=1.0),
        "sin": pos_sin.SinusoidalPositionalEncoding(C),
        "rope": pos_rope.RotaryEmbedding(HD),
        "alibi": pos_alibi.ALiBi(NH),
        "alibi-sym": pos_alibi.ALiBi(NH, symmetric=True),
    }
    return x, mods, W


def test_perm_is_not_trivial():
    assert sorted(PERM) == list(range(T)) and PERM != list(range(T)) and PERM != REVERSE


def test_no_position_is_permutation_equivariant(layer_parts):
    """Without positions and without a mask, attention(x[perm]) == attention(x)[perm] for any permutation."""
    x, mods, W = layer_parts
    base = one_layer(x, "none", mods, W)
    gen = torch.Generator().manual_seed(7)
    for perm in [PERM, REVERSE] + [torch.randperm(T, generator=gen).tolist() for _ in range(3)]:
        err = max_diff(one_layer(x[perm], "none", mods, W), base[perm])
        assert err < TOL64, f"no positions, perm {perm}: max diff {err:.2e} (should be a pure row permutation)"


@pytest.mark.parametrize("scheme", ["learned", "sin", "rope", "alibi", "alibi-sym"])
def test_position_scheme_breaks_equivariance(layer_parts, scheme):
    """With any position scheme, permuting the input is no longer just permuting the output."""
    x, mods, W = layer_parts
    with torch.no_grad():
        err = max_diff(one_layer(x[PERM], scheme, mods, W), one_layer(x, scheme, mods, W)[PERM])
    assert err > 1e-3, f"{scheme}: permuted input gives permuted output (max diff {err:.2e}); order is invisible"


def test_symmetric_alibi_is_blind_to_reversal(layer_parts):
    """Reversal keeps every |i - j|, so symmetric ALiBi stays equivariant to it; the causal form -m(i-j) does not."""
    x, mods, W = layer_parts
    err = max_diff(one_layer(x[REVERSE], "alibi-sym", mods, W), one_layer(x, "alibi-sym", mods, W)[REVERSE])
    assert err < TOL64, f"symmetric ALiBi under reversal: max diff {err:.2e} (should be equivariant)"
    err = max_diff(one_layer(x[REVERSE], "alibi", mods, W), one_layer(x, "alibi", mods, W)[REVERSE])
    assert err > 1e-3, f"directional ALiBi -m(i-j) under reversal: max diff {err:.2e} (should see the order)"


# ----------------------------------------------------------------------------- local windows and the temperature

def keep_by_definition(Tq: int, Tk: int, w: int, kind: str) -> torch.Tensor:
    """(Tq, Tk) bool from the definition, with loops."""
    keep = torch.zeros(Tq, Tk, dtype=torch.bool)
    for r in range(Tq):
        i = Tk - Tq + r
        for j in range(Tk):
            keep[r, j] = (i - w < j <= i) if kind == "sliding" else (j <= i and j // w == i // w)
    return keep


@pytest.mark.parametrize("kind", attn_common.WINDOW_KINDS)
@pytest.mark.parametrize("Tq, Tk, w", [(1, 1, 1), (8, 8, 1), (8, 8, 3), (16, 16, 4), (16, 16, 16), (7, 7, 20),
                                       (3, 19, 4), (1, 19, 5), (5, 33, 8)])
def test_window_mask_matches_definition(kind, Tq, Tk, w):
    """window_mask == the loop definition; each row's first True key is first_visible_key; every row keeps
    its own position; a window at least Tk wide is the causal mask (sliding; chunked: one chunk)."""
    got = window_mask(Tq, Tk, w, kind)
    want = keep_by_definition(Tq, Tk, w, kind)
    assert torch.equal(got, want), f"{kind} w={w} ({Tq}, {Tk}): {(got != want).sum().item()} entries differ"
    for r in range(Tq):
        i = Tk - Tq + r
        assert got[r, i] and got[r].nonzero()[0].item() == first_visible_key(i, w, kind), f"row {r}"
    if w >= Tk:
        assert torch.equal(got, attn_common.causal_mask(Tq, Tk))


@pytest.mark.parametrize("kind", attn_common.WINDOW_KINDS)
@pytest.mark.parametrize("Tq, Tk, q_chunk", [(12, 12, 256), (12, 12, 5), (4, 17, 3), (1, 17, 256)])
@pytest.mark.parametrize("with_bias", [False, True], ids=["no_bias", "alibi"])
def test_windowed_sdpa_equals_explicit_softmax(kind, Tq, Tk, q_chunk, with_bias):
    """attn_sdpa(window=) and attn(window=) == softmax(QK^T/sqrt(d) + bias, masked by the definition) V,
    in query chunks (some partial) and with Tq < Tk (cached decoding); ALiBi's bias carries the causal mask."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, T, 8, dtype=torch.float64, generator=g) for T in (Tq, Tk, Tk))
    bias = alibi_bias(3, Tq, Tk, causal=True).double() if with_bias else None
    scores = q @ k.transpose(-2, -1) / math.sqrt(8) + (0 if bias is None else bias)  # (B, H, Tq, Tk)
    want = scores.masked_fill(~keep_by_definition(Tq, Tk, 4, kind), float("-inf")).softmax(-1) @ v
    got = attn_sdpa(q, k, v, score_bias=bias, causal=True, q_chunk=q_chunk, window=4, window_kind=kind)
    assert max_diff(got, want) < TOL64, f"attn_sdpa vs definition, max diff {max_diff(got, want):.2e}"
    got = attn(q, k, v, score_bias=bias, causal=True, window=4, window_kind=kind)
    assert max_diff(got, want) < TOL64, f"attn vs definition, max diff {max_diff(got, want):.2e}"


@pytest.mark.parametrize("floor_scale, attn_scale", [(64, 0.1), (8192, 0.1), (4, 0.25)])
def test_temperature_matches_direct_computation(floor_scale, attn_scale):
    """llama4_attn_temperature(i) == log(floor((i + 1) / floor_scale) + 1) * attn_scale + 1, in Python floats."""
    positions = torch.tensor([0, 1, 2, 3, 62, 63, 64, 127, 255, 1000, 4095, 8190, 8191, 100_000])
    got = llama4_attn_temperature(positions, floor_scale, attn_scale)
    want = torch.tensor([math.log(math.floor((i + 1) / floor_scale) + 1) * attn_scale + 1 for i in positions.tolist()])
    assert got.dtype == torch.float32 and max_diff(got, want) < 1e-6, f"max diff {max_diff(got, want):.2e}"
    assert (got[positions < floor_scale - 1] == 1).all(), "the factor must be exactly 1 before the first step"


def test_bad_window_arguments_raise():
    q = torch.randn(1, 1, 4, 8)
    with pytest.raises(ValueError, match="needs causal=True"):
        attn_sdpa(q, q, q, window=2)
    with pytest.raises(ValueError, match="needs causal=True"):
        attn(q, q, q, window=2)
    with pytest.raises(ValueError, match="unknown window kind"):
        window_mask(4, 4, 2, "dilated")
    with pytest.raises(ValueError, match="a local window is an int >= 1"):
        window_mask(4, 4, 0)



def test_every_mask_of_the_model_is_the_one_causal_rule():
    """attn_common's masks against a double loop of j <= i: causal_mask, window_mask (both kinds) and hide_later_keys
    on an off-diagonal block agree with the rule visible_keys owns (mismatches counted in the message)."""
    import attn_common as ac
    Tq, Tk, w = 5, 12, 4
    loop = torch.tensor([[j <= Tk - Tq + r for j in range(Tk)] for r in range(Tq)])
    bad = (ac.causal_mask(Tq, Tk) != loop).sum().item()
    assert bad == 0, f"causal_mask: {bad} entries differ from j <= i"
    for kind, near in (("sliding", lambda i, j: j > i - w), ("chunked", lambda i, j: j // w == i // w)):
        want = torch.tensor([[loop[r, j].item() and near(Tk - Tq + r, j) for j in range(Tk)] for r in range(Tq)])
        bad = (ac.window_mask(Tq, Tk, w, kind) != want).sum().item()
        assert bad == 0, f"window_mask {kind}: {bad} entries differ from the rule"
    block = ac.hide_later_keys(torch.zeros(3, 6), 4, 2)  # queries 4..6, keys 2..7
    want = torch.tensor([[0.0 if j <= i else float("-inf") for j in range(2, 8)] for i in range(4, 7)])
    assert torch.equal(block, want), f"hide_later_keys on a block: {block}"
