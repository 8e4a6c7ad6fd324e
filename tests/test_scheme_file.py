"""Bring your own scheme: a file outside the repository, one flag, every measure (schemes.py's contract).

The toy is tests/schemes/toy_forget.py: a forget gate with learned parameters, an nn.Linear of its own
init, cache state, an option (gate_bias) and no bidirectional form. conftest's quick_repo copies it
beside the copy of the checkout and runs plugin_commands: training, perplexity, context use, retrieval,
benchmark and breakage in quick mode, each with --scheme-file and its own output folder. The other tests
here load it in this process and take it out again.
"""
import contextlib
import hashlib
import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from experiments import benchmark
import extrapolation_test
from lab import row_names
import schemes
import tiny_lm
from lab import checkpoint_io
import train_compare
from lab import variants
from conftest import chunks_and_cache_agree, cached_logits, repo_files, scheme_file_loaded
from lab.checkpoint_io import CheckpointError
from lab.options import make_config, make_model
from tiny_lm import TinyLM

pytestmark = pytest.mark.usefixtures("one_thread")

TOY = Path(__file__).resolve().parent / "schemes" / "toy_forget.py"
KW = {"vocab_size": 20, "n_layer": 2, "n_head": 2, "n_embd": 16, "max_len": 64}


@contextlib.contextmanager
def toy_loaded(path: Path = TOY, name: str = "toy_forget"):
    """The scheme registered from its file inside the block only; its variants and record go with it. One the
    session registered already (EXTRA_SCHEME_FILE) stays."""
    mine = name not in schemes.REGISTRY
    try:
        assert schemes.load_files([path]) == ([name] if mine else [])
        yield schemes.get(name)
    finally:
        if mine and name in schemes.REGISTRY:
            schemes.unregister(name)
        if mine:
            schemes.FILES.pop(name, None)
        for ft in [n for n in variants.FINETUNES if n.startswith(name)]:
            del variants.FINETUNES[ft]
            variants.ALL_NAMES.remove(ft)


# ----------------------------------------------------------------------------- every measure, one flag

def test_a_scheme_file_goes_through_every_measure(quick_repo):
    """Each command exits 0 and writes both toys' rows (toy_forget: state and init; toy_qk: a bias reading q and k)
    into every table and figure, in its own folders; the checkpoint records the file; no file of the repository
    changes."""
    ran = quick_repo.ran["plugin"]
    failed = [f"{r.cmd} exited {r.code}: {r.err[-1500:]}" for r in ran if r.code != "0"]
    assert not failed, "\n".join(failed)
    out = quick_repo.repo / "runs" / "plugin"
    ck = torch.load(out / "toy_forget.pt", weights_only=True)
    toy = quick_repo.repo.parent / "toy_forget.py"
    assert ck["extra"]["scheme_file"] == {"path": str(toy), "sha256": hashlib.sha256(toy.read_bytes()).hexdigest()}
    assert ck["config"]["pos_options"] == {"gate_bias": 3.0} and ck["config"]["train_len"] == 64, ck["config"]
    res = out / "results"
    for toy_name in ("toy_forget", "toy_qk"):
        for name in ("extrapolation", "context_use", "retrieval"):
            rows = json.loads((res / f"{name}.json").read_text(encoding="utf-8"))["rows"]
            assert any(r["variant"] == toy_name for r in rows), f"{name}.json has no {toy_name} row"
            assert f"| {toy_name} |" in (res / f"{name}.md").read_text(encoding="utf-8"), f"{name}.md"
        bench = (out / "benchmark" / "benchmark.md").read_text(encoding="utf-8")
        for table in bench.split("\n## ")[1:]:  # forward time, memory, hooks, ratios
            assert f"| {toy_name} |" in table, f"benchmark.md, section without {toy_name}:\n{table}"
        assert f"| {toy_name} | score_bias |" in bench, bench
        breakage = (out / "breakage" / "breakage.md").read_text(encoding="utf-8")
        assert f"| causal / {toy_name} |" in breakage and \
            f"- bidirectional / {toy_name}: left out, the scheme is causal only" in breakage, breakage[:1500]
        assert f"| bidirectional / {toy_name} |" not in breakage
        synthetic = json.loads((out / "synthetic" / "synthetic.json").read_text(encoding="utf-8"))["rows"]
        assert {(r["split"], r["multiple"]) for r in synthetic if r["variant"] == toy_name} == {
            ("reverse", k) for k in (1, 2, 4, 8)}, f"synthetic.json: {toy_name}'s rows"
    figures = [res / f for f in ("train_curves.png", "ppl_vs_length.png", "context_use.png", "retrieval.png")]
    figures += [out / "benchmark" / "benchmark.png", out / "breakage" / "breakage.png", out / "synthetic" / "synthetic.png"]
    assert all(f.is_file() and f.read_bytes()[:4] == b"\x89PNG" for f in figures), [str(f) for f in figures]
    now = repo_files(quick_repo.repo)
    changed = sorted(k for k in now.keys() | quick_repo.files.keys() if now.get(k) != quick_repo.files.get(k))
    assert not changed, f"files of the checkout changed or appeared outside runs/: {changed}"


# ----------------------------------------------------------------------------- the contract, in this process

def test_the_toy_keeps_its_init_decays_what_it_says_and_decodes_through_the_cache():
    """TinyLM's init leaves the scheme's own Linear as its module made it (weight 0, bias = the option); the
    optimizer decays the gate weights the entry names, not their biases; cached decoding equals a full
    forward; the colour is a free one; an option set by name reaches build."""
    with toy_loaded() as entry:
        assert entry.colour in schemes.SPARE_COLOURS and entry.causal_only and entry.options == {"gate_bias": 3.0}
        assert len({e.colour for e in schemes.REGISTRY.values()}) == len(schemes.REGISTRY), "colours clash"
        for options, bias in ((None, 3.0), ({"gate_bias": 1.5}, 1.5)):
            torch.manual_seed(0)
            model = make_model(make_config(**KW, pos="toy_forget", pos_options=options)).eval()
            for gate in model.toy_forget.gates:
                assert torch.equal(gate.weight, torch.zeros_like(gate.weight)), "TinyLM's init redrew the gate"
                assert torch.equal(gate.bias, torch.full_like(gate.bias, bias)), gate.bias
        opt = variants.make_optimizer(model, variants.TrainConfig())
        decayed = {id(p) for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]}
        assert all(id(g.weight) in decayed and id(g.bias) not in decayed for g in model.toy_forget.gates)
        x = torch.randint(0, 20, (2, 30), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            for gate in model.toy_forget.gates:
                torch.nn.init.normal_(gate.weight, 0.0, 0.5)
            full = model(x).logits
            cached, cache = cached_logits(model, x, 11)
        err = (cached - full).abs().max().item()
        assert err < 1e-5, f"toy_forget: cached decoding vs full forward, max logit diff {err:.2e}"
        assert cache[0].state.shape == (2, KW["n_head"], 30), "the cache keeps the gate sums of every key"
        assert "toy_forget" in benchmark.parse_args(["--quick", "--scheme-file", str(TOY)]).schemes, \
            "experiments/benchmark.py measures every scheme registered when it runs, a --scheme-file's included"
        with pytest.raises(ValueError, match="causal only"):
            make_config(**KW, pos="toy_forget", causal=False)
        with pytest.raises(ValueError, match="has no option gate"):
            make_config(**KW, pos="toy_forget", pos_options={"gate": 1.0})
        with pytest.raises(ValueError, match="is a float"):
            make_config(**KW, pos="toy_forget", pos_options={"gate_bias": "high"})


def test_options_and_finetunes_follow_the_grammar_and_the_declaration():
    """toy_forget{gate_bias=1.5} is a variant with that option (and its copy twin); a fine-tune without a
    scaling is admitted for any scheme, one with a scaling only for a scheme that uses RoPE's tables."""
    with toy_loaded():
        assert row_names.scheme_options("toy_forget{gate_bias=1.5}") == ("toy_forget", {"gate_bias": 1.5})
        assert variants.admit(["toy_forget{gate_bias=1.5}_copy", "toy_forget_ft_none", "nope"]) == ["nope"]
        assert variants.VARIANTS["toy_forget{gate_bias=1.5}"] == {"pos": "toy_forget", "pos_options": {"gate_bias": 1.5}}
        assert variants.COPY_OF["toy_forget{gate_bias=1.5}_copy"] == "toy_forget{gate_bias=1.5}"
        assert variants.FINETUNES["toy_forget_ft_none"]["rope_scaling"] is None
        cfg = variants.variant_config("toy_forget{gate_bias=1.5}", KW)
        assert cfg.pos_options == {"gate_bias": 1.5}
        with pytest.raises(ValueError, match="needs a scheme that uses RoPE's tables"):
            variants.admit(["toy_forget_ft_yarn"])
        assert variants.admit(["rope_ft_ntk"]) == [] and variants.scaled("rope") and not variants.scaled("toy_forget")
    for name in ("toy_forget{gate_bias=1.5}", "toy_forget{gate_bias=1.5}_copy"):
        assert name not in variants.VARIANTS or "toy_forget" in schemes.REGISTRY, "the option variants left with it"
    variants.FINETUNES.pop("rope_ft_ntk")
    variants.ALL_NAMES.remove("rope_ft_ntk")


def test_a_checkpoint_names_its_scheme_file(tmp_path, capsys):
    """Loaded without its --scheme-file: one line naming the flag and the file. Loaded with the file changed
    since: it loads, with a one-line warning."""
    if "toy_forget" in schemes.REGISTRY:
        pytest.skip("the session registered toy_forget from its own file (EXTRA_SCHEME_FILE)")
    toy = tmp_path / "toy_forget.py"
    shutil.copy2(TOY, toy)
    with toy_loaded(toy):
        model = make_model(make_config(**KW, pos="toy_forget"))
        extra = {"scheme_file": dict(schemes.FILES["toy_forget"])}
        checkpoint_io.save_checkpoint(tmp_path / "t.pt", model, "a" * 20, 1, {}, extra)
    with pytest.raises(CheckpointError) as e:
        checkpoint_io.load_checkpoint(tmp_path / "t.pt")
    assert str(e.value) == f"{tmp_path / 't.pt'} uses scheme 'toy_forget' from {toy}; pass --scheme-file {toy}"
    toy.write_text(toy.read_text(encoding="utf-8") + "\n# changed\n", encoding="utf-8")
    with toy_loaded(toy):
        capsys.readouterr()
        checkpoint_io.load_checkpoint(tmp_path / "t.pt")
        err = capsys.readouterr().err.strip()
    assert err.startswith(f"warning: {toy} has changed since t.pt was trained with it") and "\n" not in err, err


def test_a_bad_scheme_file_is_one_line(tmp_path, capsys):
    """A missing file, one that raises, one that registers nothing: one line on stderr and exit 2, before any work."""
    (tmp_path / "raises.py").write_text("raise RuntimeError('broken on purpose')\n", encoding="utf-8")
    (tmp_path / "empty.py").write_text("x = 1\n", encoding="utf-8")
    for path, says in ((tmp_path / "missing.py", "does not exist"), (tmp_path / "raises.py", "broken on purpose"),
                       (tmp_path / "empty.py", "registered no scheme")):
        with pytest.raises(SystemExit) as e:
            schemes.load_argv(["--scheme-file", str(path)])
        err = capsys.readouterr().err.strip()
        assert e.value.code == 2 and says in err and "\n" not in err, err


def test_the_kerple_power_example_is_its_formula_and_trains(tmp_path):
    """docs/your_scheme.md's example, examples/kerple_power.py: its chunks are -r1 |i - j|^p computed here with
    math (-inf after the query; r1 and p held inside their bounds), chunks of 3 equal one chunk, cached decoding
    equals the full forward, and train_compare --scheme-file trains its kernel."""
    path = Path(__file__).resolve().parent.parent / "examples" / "kerple_power.py"
    assert len(path.read_text(encoding="utf-8").splitlines()) <= 60, "the example is at most 60 lines"
    with toy_loaded(path, "kerple_power") as entry:
        torch.manual_seed(0)
        model = make_model(make_config(**KW, pos="kerple_power")).eval()
        r1, p = [0.5, 0.001], [1.5, 2.5]  # the second head's r1 below 0.01 and p above 2: the bounds are used
        with torch.no_grad():
            model.kerple_power.r1.copy_(torch.tensor(r1))
            model.kerple_power.p.copy_(torch.tensor(p))
            x = torch.randn(1, 5, KW["n_embd"])
            rows, state = entry.score_bias(model.kerple_power, x, schemes.Layer(0, False, 0, None), 3, None, None)
            got = rows(1, 4, 2, 8)  # queries at 4..6, keys 2..7
        want = torch.tensor([[[-max(r1[h], 0.01) * (i - j) ** min(p[h], 2.0) if j <= i else -math.inf
                               for j in range(2, 8)] for i in range(4, 7)] for h in range(2)])
        err = (got - want).abs().nan_to_num(0.0).max().item()
        assert state is None and torch.equal(got.isinf(), want.isinf()) and err < 1e-5, f"max diff {err:.2e}"
        ids = chunks_and_cache_agree(model, "kerple_power")
        rc = train_compare.main(["--quick", "--scheme-file", str(path), "--variants", "kerple_power", "--steps", "4",
                                 "--eval-every", "2", "--seq-len", "32", "--out", str(tmp_path), "--results",
                                 str(tmp_path / "res")])
        assert rc == 0
        ck = torch.load(tmp_path / "kerple_power.pt", weights_only=True)
        assert ck["extra"]["scheme_file"]["path"] == str(path)
        torch.manual_seed(0)  # the model train_compare built at seed 0, before its 4 steps
        start = make_model(make_config(**ck["config"])).kerple_power
        moved = [(ck["model"][f"kerple_power.{n}"] - getattr(start, n)).abs().max().item() for n in ("r1", "p")]
        assert min(moved) > 0, f"the kernel did not train: r1, p moved by {moved}"


def test_the_page_shows_the_example_file_as_it_is():
    """docs/your_scheme.md holds examples/kerple_power.py verbatim between its markers, so the page cannot drift."""
    root = Path(__file__).resolve().parent.parent
    page = (root / "docs" / "your_scheme.md").read_text(encoding="utf-8")
    shown = page.split("<!-- example:start -->\n```python\n", 1)[1].split("\n```\n<!-- example:end -->", 1)[0]
    assert shown == (root / "examples" / "kerple_power.py").read_text(encoding="utf-8").rstrip("\n"), \
        "docs/your_scheme.md's example differs from examples/kerple_power.py; copy the file into the page"


def test_a_redraw_keeps_the_rows_of_a_scheme_not_loaded(tmp_path):
    """A results folder may hold rows of a --scheme-file's scheme that a later run did not load: extrapolation_test
    --redraw keeps those rows and their code-line count instead of failing on the unknown scheme."""
    res = tmp_path / "res"
    with toy_loaded():
        assert train_compare.main(["--quick", "--scheme-file", str(TOY), "--variants", "toy_forget", "--steps", "2",
                                   "--eval-every", "1", "--seq-len", "32", "--out", str(tmp_path), "--results",
                                   str(res)]) == 0
        assert extrapolation_test.main(["--quick", "--scheme-file", str(TOY), "--ckpt-dir", str(tmp_path), "--variants",
                                        "toy_forget", "--results", str(res), "--lengths", "32,64", "--tokens", "128",
                                        "--scalings", "", "--decode-len", "0"]) == 0
    before = json.loads((res / "extrapolation.json").read_text(encoding="utf-8"))["rows"][0]["pos_file_loc"]
    if "toy_forget" in schemes.REGISTRY:
        pytest.skip("the session registered toy_forget (EXTRA_SCHEME_FILE): nothing is unloaded here")
    assert extrapolation_test.main(["--redraw", "--results", str(res)]) == 0
    text = (res / "extrapolation.md").read_text(encoding="utf-8")
    assert "| toy_forget |" in text and before > 0, text[:600]


# ----------------------------------------------------------------------------- a bias that reads q and k

QK = Path(__file__).resolve().parent / "schemes" / "toy_qk.py"


def test_a_bias_reads_the_queries_and_keys_attention_uses(tmp_path):
    """tests/schemes/toy_qk.py, written from the page alone: its chunks equal -m_h sum_{l=j..i} sigmoid(q_i.k_l/sqrt D)
    computed here from the q and k attention uses (after RoPE's turn would be; here none), row by row; chunks of 3
    equal one chunk; cached decoding, where k holds the cached keys, equals a full forward; the gradient reaches the
    q/k projection through the bias; and train_compare --scheme-file trains it."""
    with toy_loaded(QK, "toy_qk") as entry:
        torch.manual_seed(0)
        model = make_model(make_config(**KW, pos="toy_qk")).eval()
        B, H, D = 2, KW["n_head"], KW["n_embd"] // KW["n_head"]
        q, k = torch.randn(B, H, 5, D), torch.randn(B, H, 9, D)  # 5 new queries at 4..8, keys 0..8
        with torch.no_grad():
            model.toy_qk.slope[0] = torch.tensor([0.3, -1.0])
            rows, state = entry.score_bias(model.toy_qk, torch.randn(B, 5, KW["n_embd"]), schemes.Layer(0, False, 0, None),
                                           4, None, None, q=q, k=k)
            got = rows(1, 4, 2, 8)  # queries at 5..7, keys 2..7
        m = torch.nn.functional.softplus(torch.tensor([0.3, -1.0]))
        want = torch.full((B, H, 3, 6), -math.inf)
        for b in range(B):
            for h in range(H):
                for r, i in enumerate(range(5, 8)):
                    for c, j in enumerate(range(2, 8)):
                        if j <= i:
                            want[b, h, r, c] = -m[h] * sum(torch.sigmoid(q[b, h, i - 4] @ k[b, h, l] / math.sqrt(D))
                                                           for l in range(j, i + 1))
        err = (got - want).abs().nan_to_num(0.0).max().item()
        assert state is None and torch.equal(got.isinf(), want.isinf()) and err < 1e-5, f"max diff {err:.2e}"
        ids = chunks_and_cache_agree(model, "toy_qk")
        model.train()
        model(ids[:, :-1], ids[:, 1:]).loss.backward()
        assert model.toy_qk.slope.grad.abs().min() > 0, "no gradient reached the slopes"
        rc = train_compare.main(["--quick", "--scheme-file", str(QK), "--variants", "toy_qk", "--steps", "3",
                                 "--eval-every", "3", "--seq-len", "32", "--out", str(tmp_path), "--results",
                                 str(tmp_path / "res")])
        assert rc == 0 and (tmp_path / "toy_qk.pt").is_file()


def test_what_a_hook_returns_is_checked_with_the_scheme_and_the_hook_named():
    """A rotate_qk that returns (B, T, H, D), a score_bias whose chunk has the wrong shape, one that returns a bare
    tensor, a full bias of the wrong length, a distance row one short, extra logits of the wrong shape: each a
    SchemeError (a ValueError)
    naming the scheme and the hook, raised before attention runs."""
    def turn_wrong(m, q, k, offset, layer):
        return q.transpose(1, 2), k.transpose(1, 2)  # (B, T, H, D): the wrong layout

    def chunk_wrong(m, x, layer, offset, shared, past, q=None, k=None):
        return (lambda a, b, s, e: torch.zeros(b - a + 1, e - s)), None

    def bare(m, x, layer, offset, shared, past, q=None, k=None):
        return torch.zeros(1, 1, 1, x.shape[1])

    def full_wrong(m, x, layer, offset, shared, past, q=None, k=None):
        return torch.zeros(KW["n_head"], x.shape[1], x.shape[1] + 1), None

    def extra_wrong(m, x, layer, offset, shared, past, q=None, k=None):
        return torch.zeros(KW["n_head"] + 1, 1, 1), None

    def row_short(m, x, layer, offset, shared, past, q=None, k=None):
        def rows(a, b, s, e):
            return torch.zeros(b - a, e - s)
        rows.distance = (torch.zeros(KW["n_head"], 2 * x.shape[1] - 2), x.shape[1] - 1)  # distance 11 missing
        return rows, None

    cases = {"rotate_qk": (dict(rotate_qk=turn_wrong), "rotate_qk returned q shape (2, 12, 2, 8)"),
             "chunk": (dict(score_bias=chunk_wrong), "score_bias's function gave rows 0..11 against keys 0..11 shape (13, 12)"),
             "bare": (dict(score_bias=bare), "score_bias returned Tensor; it must return a pair (bias, state)"),
             "full": (dict(score_bias=full_wrong), "score_bias returned a bias of shape (2, 12, 13)"),
             "extra": (dict(extra_logits=extra_wrong), "extra_logits returned shape (3, 1, 1)"),
             "distance": (dict(score_bias=row_short), "has .distance = shape (2, 22), 11; it must be (r, d0)")}
    for case, (hooks, says) in cases.items():
        with contextlib.ExitStack() as stack:
            entry = schemes.register(schemes.Scheme(f"toy_bad_{case}", "nothing", **hooks))
            stack.callback(schemes.unregister, entry.name)
            model = make_model(make_config(**KW, pos=entry.name)).eval()
            with pytest.raises(schemes.SchemeError) as e, torch.no_grad():
                model(torch.zeros(2, 12, dtype=torch.long))
            msg = str(e.value)
            assert f"scheme {entry.name!r}: " in msg and says in msg and "\n" not in msg, msg


def test_train_compare_says_a_wrong_hook_in_one_line_before_training(tmp_path, capsys):
    """A scheme file whose bias chunks have the wrong shape: train_compare exits 2 with one line naming the scheme
    and the hook, and writes no checkpoint."""
    bad = tmp_path / "bad_bias.py"
    bad.write_text("import torch\nimport schemes\n\n\ndef bias(m, x, layer, offset, shared, past, q=None, k=None):\n"
                   "    return (lambda a, b, s, e: torch.zeros(3, 3)), None\n\n\n"
                   "schemes.register(schemes.Scheme('bad_bias', 'nothing', score_bias=bias))\n", encoding="utf-8")
    with toy_loaded(bad, "bad_bias"):
        capsys.readouterr()
        rc = train_compare.main(["--quick", "--scheme-file", str(bad), "--variants", "bad_bias", "--steps", "2",
                                 "--seq-len", "32", "--out", str(tmp_path / "ck"), "--results", str(tmp_path / "res")])
        err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and not (tmp_path / "ck" / "bad_bias.pt").exists(), rc
    assert err[-1].startswith("error: bad_bias: scheme 'bad_bias': score_bias's function gave rows 0..7"), err


# ----------------------------------------------------------------------------- files written to an earlier contract

OLD = Path(__file__).resolve().parent / "schemes" / "old_contract.py"


def _same_weights(model: TinyLM, like: TinyLM) -> TinyLM:
    """model with like's weights wherever the names agree (the scheme's own module differs by name only)."""
    mine = model.state_dict()
    model.load_state_dict({k: like.state_dict().get(k, v) for k, v in mine.items()})
    return model.eval()


def test_a_file_written_to_the_first_contract_still_runs():
    """tests/schemes/old_contract.py's hooks, written without q and k (score_bias) and as extra_logits(m, q, layer):
    old_alibi's logits equal the built-in alibi's, old_sink's equal none with sinks=True, both in chunks and
    through the cache."""
    with scheme_file_loaded(OLD, ["old_alibi", "old_sink"]):
        x = torch.randint(0, 20, (2, 24), generator=torch.Generator().manual_seed(4))
        for old, want_kw in (("old_alibi", {"pos": "alibi"}), ("old_sink", {"pos": "none", "sinks": True})):
            torch.manual_seed(0)
            want = make_model(make_config(**KW, **want_kw)).eval()
            with torch.no_grad():
                for name, p in want.named_parameters():
                    p.add_(torch.randn_like(p) * 0.1 * (not name.endswith(".sink")))  # the sinks' logits stay 0
            model = _same_weights(make_model(make_config(**KW, pos=old)), want)
            with torch.no_grad():
                err = (model(x).logits - want(x).logits).abs().max().item()
            assert err < 1e-5, f"{old}, written to the first contract, vs {want_kw}: max logit diff {err:.2e}"
            chunks_and_cache_agree(model, old)


def test_a_hook_of_no_known_signature_and_a_name_clash_are_one_line(tmp_path, capsys):
    """A hook that fits neither today's signature nor an earlier one is refused as the file loads, naming today's;
    a name taken already names the file that took it and suggests a rename; a refused file leaves none of its
    schemes registered."""
    bad = tmp_path / "bad_sig.py"
    bad.write_text("import schemes\nschemes.register(schemes.Scheme('bad_sig', 'b', score_bias=lambda m, x: (None, None)))\n")
    clash = tmp_path / "clash.py"
    clash.write_text("import schemes\nschemes.register(schemes.Scheme('first_ok', 'nothing'))\n"
                     "schemes.register(schemes.Scheme('cope', 'nothing'))\n")
    for path, want in ((bad, "score_bias(m, x, layer, offset, shared, past, q=None, k=None)"),
                       (clash, "field_cope.py registered it first; rename yours (e.g. 'cope_mine')")):
        with pytest.raises(SystemExit) as e:
            schemes.load_argv(["--scheme-file", str(path)])
        err = capsys.readouterr().err.strip()
        assert e.value.code == 2 and len(err.splitlines()) == 1 and want in err and str(path) in err, err
    assert "first_ok" not in schemes.REGISTRY and "bad_sig" not in schemes.REGISTRY, "a refused file left schemes"


def test_a_rotation_read_from_content_goes_in_as_the_pages_score_bias():
    """docs/your_scheme.md's route for a rotation rotate_qk cannot express (its angle a running sum of a gate read
    from the tokens): the bias (q'_i . k'_j - q_i . k_j) / sqrt(D), per chunk, gives attention on the turned q', k'."""
    from attn_common import attn_sdpa, hide_later_keys
    torch.manual_seed(5)
    B, H, T, D = 2, 2, 11, 8
    q, k, v = (torch.randn(B, H, T, D, dtype=torch.float64) for _ in range(3))
    angle = torch.sigmoid(torch.randn(B, 1, T, 1, dtype=torch.float64)).cumsum(2) * torch.linspace(1, 0.1, D // 2)

    def turn(t):  # each adjacent pair (t0, t1) by its position's angle, (B, H, T, D)
        a, b = t[..., 0::2], t[..., 1::2]
        c, s = angle.cos(), angle.sin()
        return torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2)
    qt, kt = turn(q), turn(k)

    def rows(a, b, s, e):
        new, plain = qt[..., a:b, :] @ kt[..., s:e, :].transpose(-2, -1), q[..., a:b, :] @ k[..., s:e, :].transpose(-2, -1)
        return hide_later_keys((new - plain) / D ** 0.5, a, s)
    want = attn_sdpa(qt, kt, v, causal=True)
    err = (attn_sdpa(q, k, v, score_bias=rows, causal=True, q_chunk=4) - want).abs().max().item()
    assert err < 1e-10, f"the page's score-bias route vs attention on the turned q and k: max diff {err:.2e}"
