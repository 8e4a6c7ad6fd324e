"""pos_alibi: ALiBi (Press et al. 2022) against its definition written out here: the slopes, the bias
-m_h (i - j) entry by entry, the causal and key forms; and the fast path (attn_sdpa with a float mask, in
query chunks; TinyLM(pos="alibi") with and without the KV cache) keeps those numbers.

The fast path's references are built here from the definition, independently of pos_alibi.alibi_bias:
slope m_h = 2^(-8 h / n) for h = 1..n heads (n a power of two), bias -m_h (i - j) with query
i at absolute position Tk - Tq + i (or -m_h |i - j| for the symmetric option), fed to the
explicit attn() with its causal mask. Float32, the dtype the model runs in; no timing is
asserted anywhere (timings are experiments/benchmark.py's job).
"""
import functools

import pytest
import torch

import attn_common
import pos_alibi
import tiny_lm
from attn_common import attn, attn_sdpa
from tiny_lm import GPTConfig, TinyLM

pytestmark = pytest.mark.usefixtures("one_thread")

D = 16


def max_diff(a, b) -> float:
    return (a.double() - b.double()).abs().max().item()


@pytest.mark.parametrize("n_head,exponents", [
    (8, [1, 2, 3, 4, 5, 6, 7, 8]),
    (12, [1, 2, 3, 4, 5, 6, 7, 8, 0.5, 1.5, 2.5, 3.5]),
    (16, [0.5 * h for h in range(1, 17)]),
    (1, [8]),
])
def test_alibi_slopes_match_paper(n_head, exponents):
    """Press et al. section 3: m_h = 2^(-8h/n); non-powers of two interleave the next power's slopes."""
    got = pos_alibi.alibi_slopes(n_head)
    want = torch.tensor([2.0 ** -e for e in exponents], dtype=torch.float64)
    assert got.shape == (n_head,) and got.dtype == torch.float32
    err = max_diff(got, want)
    assert err < 1e-7, f"{n_head} heads: slopes max diff {err:.2e}; got {got.tolist()}"


def test_alibi_bias_definition():
    """bias[h, i, j] == -m_h (i - j); symmetric == -m_h |i - j|; checked entry by entry."""
    H, T = 4, 6
    m = [2.0 ** (-8.0 * h / H) for h in range(1, H + 1)]
    for symmetric in (False, True):
        bias = pos_alibi.alibi_bias(H, T, symmetric=symmetric)
        assert bias.shape == (H, T, T)
        worst = 0.0
        for h in range(H):
            for i in range(T):
                for j in range(T):
                    want = -m[h] * (abs(i - j) if symmetric else (i - j))
                    worst = max(worst, abs(bias[h, i, j].item() - want))
        assert worst < 1e-6, f"symmetric={symmetric}: bias vs -m(i-j) max diff {worst:.2e}"
    mod = pos_alibi.ALiBi(H)
    assert torch.equal(mod(T), pos_alibi.alibi_bias(H, T)), "ALiBi module vs alibi_bias differ"


def test_alibi_short_query_is_last_rows():
    """q_len < k_len (cached decoding): queries sit at positions k_len - q_len ..; equal to the full bias's last rows."""
    H, Tq, Tk = 4, 3, 10
    for symmetric in (False, True):
        full = pos_alibi.alibi_bias(H, Tk, symmetric=symmetric)
        last = pos_alibi.alibi_bias(H, Tq, Tk, symmetric=symmetric)
        assert last.shape == (H, Tq, Tk)
        err = max_diff(last, full[:, Tk - Tq:])
        assert err == 0.0, f"symmetric={symmetric}: q_len<k_len bias vs last rows max diff {err:.2e}"
    with pytest.raises(ValueError, match="k_len"):
        pos_alibi.alibi_bias(H, 5, 3)


@pytest.mark.parametrize("Tq,Tk", [(7, 7), (2, 7)])
def test_alibi_key_form_equals_distance_form_under_causal_mask(Tq, Tk):
    """softmax(s - m(i-j)) == softmax(s + m j) row by row when keys j > i are masked (row constants cancel)."""
    H = 4
    gen = torch.Generator().manual_seed(8)
    q = torch.randn(1, H, Tq, D, dtype=torch.float64, generator=gen)
    k = torch.randn(1, H, Tk, D, dtype=torch.float64, generator=gen)
    v = torch.randn(1, H, Tk, D, dtype=torch.float64, generator=gen)
    dist = pos_alibi.alibi_bias(H, Tq, Tk).double()
    key = pos_alibi.alibi_bias(H, Tq, Tk, form="key").double()
    assert key.shape == (H, 1, Tk)
    out_d, w_d = attn(q, k, v, score_bias=dist, causal=True, return_weights=True)
    out_k, w_k = attn(q, k, v, score_bias=key, causal=True, return_weights=True)
    err = max_diff(w_d, w_k)
    assert err < 1e-10, f"causal weights, distance vs key form max diff {err:.2e}"
    masked = pos_alibi.alibi_bias(H, Tq, Tk, causal=True).double()  # the form the model hands attn_sdpa
    err = max_diff(attn_sdpa(q, k, v, score_bias=masked, causal=True), out_k)
    assert err < 1e-10, f"attn_sdpa with the causal bias vs attn with the key form max diff {err:.2e}"
    # Under the mask only j <= i is seen, where |i - j| = i - j: the symmetric form agrees too.
    sym = pos_alibi.alibi_bias(H, Tq, Tk, symmetric=True).double()
    _, w_s = attn(q, k, v, score_bias=sym, causal=True, return_weights=True)
    err = max_diff(w_s, w_k)
    assert err < 1e-10, f"causal weights, symmetric vs key form max diff {err:.2e}"
    # Not vacuous: without the mask, m j is not -m |i - j| (it rewards keys to the right).
    _, w_open_s = attn(q, k, v, score_bias=sym, return_weights=True)
    _, w_open_k = attn(q, k, v, score_bias=key, return_weights=True)
    diff = max_diff(w_open_s, w_open_k)
    assert diff > 1e-3, f"key and symmetric forms should differ without the mask (max diff {diff:.2e})"
    # (The directional form -m(i - j) = m j - m i differs from m j by a per-row constant, so those two
    # agree with or without a mask; "key form needs the causal mask" is about the symmetric meaning.)
    _, w_open_d = attn(q, k, v, score_bias=dist, return_weights=True)
    err = max_diff(w_open_d, w_open_k)
    assert err < 1e-10, f"unmasked weights, directional distance vs key form max diff {err:.2e}"
    with pytest.raises(ValueError, match="causal"):
        pos_alibi.alibi_bias(H, Tq, Tk, symmetric=True, form="key")


@pytest.mark.parametrize("Tq,Tk", [(6, 6), (3, 9), (1, 5)])
def test_alibi_causal_bias_definition(Tq, Tk):
    """causal=True: -m_h (i - j) where key j <= query position i = Tk - Tq + r, -inf where j > i; entry by entry."""
    H = 4
    m = [2.0 ** (-8.0 * h / H) for h in range(1, H + 1)]
    for bias in (pos_alibi.alibi_bias(H, Tq, Tk, causal=True), pos_alibi.ALiBi(H, causal=True)(Tq, Tk)):
        assert bias.shape == (H, Tq, Tk)
        worst = 0.0
        for h in range(H):
            for r in range(Tq):
                i = Tk - Tq + r
                for j in range(Tk):
                    got = bias[h, r, j].item()
                    if j > i:
                        assert got == float("-inf"), f"h={h}, i={i}, j={j}: a later key got {got}, want -inf"
                    else:
                        worst = max(worst, abs(got + m[h] * (i - j)))
        assert worst < 1e-6, f"causal bias vs -m(i-j) on the visible keys: max diff {worst:.2e}"


# ============================================================================ the fast path (attn_sdpa, TinyLM)

TOL = 1e-5


def slopes(n_head: int) -> torch.Tensor:
    return torch.tensor([2.0 ** (-8.0 * h / n_head) for h in range(1, n_head + 1)])


def alibi_reference_bias(n_head: int, Tq: int, Tk: int, symmetric: bool = False) -> torch.Tensor:
    """(H, Tq, Tk): -m_h (i - j), query i at absolute position Tk - Tq + i."""
    i = torch.arange(Tk - Tq, Tk, dtype=torch.float32)[:, None]  # (Tq, 1) absolute query positions
    j = torch.arange(Tk, dtype=torch.float32)[None, :]           # (1, Tk)
    dist = (i - j).abs() if symmetric else i - j                 # (Tq, Tk)
    return -slopes(n_head)[:, None, None] * dist                 # (H, Tq, Tk)


# (name, Tq, Tk, causal, q_chunk): chunk sizes that divide Tq, that do not, one row per chunk, one chunk
CASES = [
    ("full_T64_chunk16", 64, 64, True, 16),
    ("full_T50_chunk16", 50, 50, True, 16),
    ("full_T9_chunk1", 9, 9, True, 1),
    ("full_T40_one_chunk", 40, 40, True, 256),
    ("cached_Tq1_Tk37", 1, 37, True, 4),
    ("cached_Tq5_Tk37_chunk2", 5, 37, True, 2),
    ("cached_Tq20_Tk50_chunk8", 20, 50, True, 8),
    ("symmetric_T33", 33, 33, False, 8),
    ("symmetric_cached_Tq4_Tk21", 4, 21, False, 8),
]


@pytest.mark.parametrize("name,Tq,Tk,causal,q_chunk", CASES, ids=[c[0] for c in CASES])
def test_fast_alibi_equals_explicit_formula(name, Tq, Tk, causal, q_chunk):
    """attn_sdpa (4-D float mask, query chunks) == attn() with -m(i-j) (or -m|i-j|) and the causal mask.
    A causal model hands attn_sdpa the bias with the mask inside (-inf on later keys), as TinyLM does."""
    B, H, D = 2, 4, 16
    gen = torch.Generator().manual_seed(11)
    q = torch.randn(B, H, Tq, D, generator=gen)
    k, v = torch.randn(B, H, Tk, D, generator=gen), torch.randn(B, H, Tk, D, generator=gen)
    bias = alibi_reference_bias(H, Tq, Tk, symmetric=not causal)  # (H, Tq, Tk)
    want = attn(q, k, v, score_bias=bias, causal=causal)
    if causal:
        hidden = torch.tensor([[j > Tk - Tq + i for j in range(Tk)] for i in range(Tq)])  # (Tq, Tk)
        bias = bias.masked_fill(hidden, float("-inf"))
    for shape in ("(1, H, Tq, Tk)", "(H, Tq, Tk)"):
        b = bias[None] if shape.startswith("(1") else bias
        got = attn_sdpa(q, k, v, score_bias=b, causal=causal, q_chunk=q_chunk)
        assert got.shape == want.shape
        err = max_diff(got, want)
        assert err < TOL, f"{name}, bias {shape}: attn_sdpa vs explicit attn() max diff {err:.2e}"


def reference_logits(model: TinyLM, idx: torch.Tensor, monkeypatch) -> torch.Tensor:
    """The model's own forward with every attention layer swapped for the explicit attn() and the
    definition's bias (the bias and flags the model passes are ignored): only the fast path differs."""
    H, causal = model.cfg.n_head, model.cfg.causal

    def explicit(q, k, v, **ignored):
        bias = alibi_reference_bias(H, q.shape[-2], k.shape[-2], symmetric=not causal)  # (H, Tq, Tk)
        return attn(q, k, v, score_bias=bias, causal=causal)

    with monkeypatch.context() as m:
        m.setattr(tiny_lm, "attn_sdpa", explicit)
        return model(idx).logits  # (B, T, V)


def small_alibi(causal: bool = True) -> TinyLM:
    torch.manual_seed(0)
    return TinyLM(GPTConfig(vocab_size=23, n_layer=2, n_head=4, n_embd=32, pos="alibi", causal=causal)).eval()


@pytest.mark.parametrize("q_chunk", [None, 8], ids=["default_chunk", "chunks_of_8"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "symmetric"])
def test_tinylm_alibi_logits_equal_reference(monkeypatch, causal, q_chunk):
    """TinyLM(pos='alibi') logits == the written-out forward with attn() and -m(i-j) / -m|i-j|."""
    if q_chunk is not None:  # force several chunks, the last one partial (T = 45)
        monkeypatch.setattr(tiny_lm, "attn_sdpa", functools.partial(attn_common.attn_sdpa, q_chunk=q_chunk))
    model = small_alibi(causal)
    idx = torch.randint(0, 23, (2, 45), generator=torch.Generator().manual_seed(13))
    with torch.no_grad():
        got, want = model(idx).logits, reference_logits(model, idx, monkeypatch)
    err = max_diff(got, want)
    assert err < TOL, f"TinyLM alibi ({'causal' if causal else 'symmetric'}, q_chunk {q_chunk}) " \
                      f"vs reference: max logit diff {err:.2e}"


def test_tinylm_alibi_cached_decoding_equals_reference(monkeypatch):
    """A prefix, then one token at a time with the KV cache (Tq = 1 < Tk), then 4 at once (Tq = 4 < Tk):
    every step's logits equal the reference full forward's rows."""
    monkeypatch.setattr(tiny_lm, "attn_sdpa", functools.partial(attn_common.attn_sdpa, q_chunk=3))
    model = small_alibi()
    idx = torch.randint(0, 23, (2, 30), generator=torch.Generator().manual_seed(14))
    with torch.no_grad():
        want = reference_logits(model, idx, monkeypatch)  # (2, 30, V)
        logits, _, cache = model(idx[:, :20])
        pieces = [logits]
        for t in range(20, 26):
            logits, _, cache = model(idx[:, t:t + 1], cache=cache)
            pieces.append(logits)
        logits, _, cache = model(idx[:, 26:30], cache=cache)
        pieces.append(logits)
    got = torch.cat(pieces, dim=1)
    err = max_diff(got, want)
    assert err < TOL, f"cached ALiBi decoding vs reference full forward: max logit diff {err:.2e}"


@pytest.mark.parametrize("Tq,Tk", [(7, 7), (3, 4096)])
def test_the_models_key_form_equals_the_plain_bias(Tq, Tk):
    """pos_alibi.alibi_key_bias, the form the model runs: the plain causal bias -m(i-j) minus a constant of each row
    (so the same causal softmax), every value <= 0, and at 4096 keys the weights of the float32 fold into q.k through
    attn_sdpa equal the plain bias's in float64."""
    H = 4
    slopes = pos_alibi.alibi_slopes(H)
    key = pos_alibi.alibi_key_bias(slopes, Tk)
    plain = pos_alibi.alibi_bias(H, Tq, Tk).double()  # (H, Tq, Tk)
    err = (plain - key.double() - (plain - key.double())[..., -1:]).abs().max().item()
    assert key.shape == (H, 1, Tk) and key.max() <= 0 and err < 1e-9, f"a row constant apart: max diff {err:.2e}"
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, H, n, D, generator=gen) for n in (Tq, Tk, Tk))
    want = attn(q.double(), k.double(), v.double(), score_bias=plain, causal=True)
    err = max_diff(attn_sdpa(q, k, v, score_bias=key, causal=True), want)
    assert err < 1e-5, f"the model's key form through attn_sdpa vs the plain causal bias: max diff {err:.2e}"


def test_the_models_alibi_bias_is_pos_alibis(monkeypatch):
    """A causal ALiBi TinyLM's forward asks pos_alibi.alibi_key_bias for every layer's bias (a spy counts the calls)."""
    calls = []
    real = pos_alibi.alibi_key_bias
    monkeypatch.setattr(pos_alibi, "alibi_key_bias", lambda *a, **kw: calls.append(a) or real(*a, **kw))
    model = TinyLM(GPTConfig(vocab_size=20, n_layer=3, n_head=2, n_embd=16, pos="alibi")).eval()
    with torch.no_grad():
        model(torch.zeros(1, 9, dtype=torch.long))
    assert len(calls) == 3 and all(a[1] == 9 for a in calls), f"pos_alibi.alibi_key_bias calls: {calls}"
