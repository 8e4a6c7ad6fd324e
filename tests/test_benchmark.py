"""The fast ALiBi path keeps ALiBi's numbers, and benchmark.py --quick writes its report.

References are built here from the definition, independently of pos_alibi.alibi_bias:
slope m_h = 2^(-8 h / n) for h = 1..n heads (n a power of two), bias -m_h (i - j) with query
i at absolute position Tk - Tq + i (or -m_h |i - j| for the symmetric option), fed to the
explicit attn() with its causal mask. Float32, the dtype the model runs in; no timing is
asserted anywhere (the machine is shared, timings are the benchmark's job).
"""
import functools

import pytest
import torch

import attn_common
import benchmark
import tiny_lm
from attn_common import attn, attn_sdpa
from tiny_lm import GPTConfig, TinyLM

pytestmark = pytest.mark.usefixtures("one_thread")

TOL = 1e-5


def max_diff(a, b) -> float:
    return (a - b).abs().max().item()


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


def test_benchmark_quick_writes_report(tmp_path, monkeypatch):
    """--quick runs end to end into runs/quick/benchmark/ (never results/), honours --lengths and
    --repeats, and the report carries the two ratio lines and a memory row per scheme."""
    monkeypatch.chdir(tmp_path)
    assert benchmark.main(["--quick", "--lengths", "16,40", "--repeats", "1"]) == 0
    out = tmp_path / "runs" / "quick" / "benchmark"
    md, png = out / "benchmark.md", out / "benchmark.png"
    assert md.is_file() and png.is_file(), sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert not (tmp_path / "results").exists(), "--quick wrote into results/"
    text = md.read_text(encoding="utf-8")
    assert "| scheme | T=16 | T=40 |" in text and "median of 1 runs" in text, f"flags ignored under --quick:\n{text}"
    lines = text.splitlines()
    for start in ("Training throughput ratio vs the SDPA reference", "ALiBi / RoPE evaluation time ratio"):
        hits = [line for line in lines if line.startswith(start)]
        assert len(hits) == 1, f"expected one line starting {start!r} in benchmark.md:\n{text}"
    for s in tiny_lm.SCHEMES:
        assert f"| {s} |" in text, f"no table row for {s} in benchmark.md:\n{text}"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "benchmark.png is not a PNG file"
    assert not list(out.glob("*.tmp")), "a temporary file was left behind"


def test_benchmark_flags_override_quick():
    """Every flag given wins over the --quick preset; the rest of the preset stays; bad values exit 2."""
    cfg = benchmark.parse_args(
        ["--quick", "--lengths", "8,24", "--repeats", "3", "--warmup", "0", "--train-steps", "2",
         "--train-repeats", "4", "--eval-windows", "5", "--eval-repeats", "6", "--schemes", "rope,alibi"])
    assert (cfg.lengths, cfg.repeats, cfg.warmup, cfg.train_steps, cfg.train_repeats, cfg.eval_windows,
            cfg.eval_repeats, cfg.schemes) == ((8, 24), 3, 0, 2, 4, 5, 6, ("rope", "alibi")), cfg
    assert cfg.n_embd == benchmark.QUICK["n_embd"], "the rest of --quick's preset was lost"
    assert cfg.results == "runs/quick/benchmark" and benchmark.parse_args(["--quick", "--out", "x"]).results == "x"
    for bad in (["--lengths", "a,b"], ["--schemes", "rope"], ["--repeats", "0"]):
        with pytest.raises(SystemExit) as e:
            benchmark.parse_args(["--quick", *bad])
        assert e.value.code == 2, bad
