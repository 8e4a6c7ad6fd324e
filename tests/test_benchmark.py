"""experiments/benchmark.py: --quick writes its report under runs/quick/benchmark/ (never results/; the run is
conftest.quick_repo's), and every flag given wins over the --quick preset. That the fast ALiBi path
it times keeps ALiBi's numbers: test_pos_alibi.py. No timing is asserted anywhere (timings are the
benchmark's job).
"""
import json
from types import SimpleNamespace

import pytest
import torch

from experiments import benchmark
import tiny_lm
from lab import devices
from conftest import tree_hashes

pytestmark = pytest.mark.usefixtures("one_thread")


def test_benchmark_quick_writes_report(quick_repo):
    """--quick, run in a copy of the checkout (conftest.INDEPENDENT), goes end to end into
    runs/quick/benchmark/ (never results/), honours --lengths and --repeats, measures memory in a
    subprocess per scheme, and the report carries the two ratio lines and a row per scheme."""
    (run,) = [r for r in quick_repo.ran["independent"] if r.cmd.startswith("experiments/benchmark.py")]
    assert run.cmd == "experiments/benchmark.py --quick --lengths 16,40 --repeats 1" and run.code == "0", run.err[-800:]
    out = quick_repo.repo / "runs" / "quick" / "benchmark"
    md, png = out / "benchmark.md", out / "benchmark.png"
    assert md.is_file() and png.is_file(), sorted(p.name for p in out.parent.rglob("*"))
    now = tree_hashes(quick_repo.repo, ["results"])
    assert {f: h for f, h in now.items() if "benchmark" in f} == \
        {f: h for f, h in quick_repo.before.items() if f.startswith("results/") and "benchmark" in f}, \
        "--quick wrote into results/"
    text = md.read_text(encoding="utf-8")
    assert "| scheme | T=16 | T=40 |" in text and "median of 1 runs" in text, f"flags ignored under --quick:\n{text}"
    lines = text.splitlines()
    for start in ("Training throughput ratio vs the SDPA reference", "## Ratios to RoPE at T=40",
                  "## The hooks, one layer at T=40"):
        hits = [line for line in lines if line.startswith(start)]
        assert len(hits) == 1, f"expected one line starting {start!r} in benchmark.md:\n{text}"
    ratios = text.split("## Ratios to RoPE", 1)[1]
    hooks = text.split("## The hooks", 1)[1].split("##", 1)[0]
    measured = json.loads((out / "benchmark.json").read_text(encoding="utf-8"))["config"]["schemes"]
    assert set(measured) >= {"none", "learned", "sin", "rope", "alibi"}, measured  # every one registered there
    for s in measured:
        assert f"| {s} |" in text, f"no table row for {s} in benchmark.md:\n{text}"
        assert f"\n| {s} | " in ratios, f"no ratio row for {s}:\n{ratios}"
        for h in tiny_lm.SCHEMES[s].hooks:  # every hook the scheme has, timed and sized
            assert f"| {s} | {h} |" in hooks, f"hook {h} of {s} not measured:\n{hooks}"
    assert "\n| rope | 1.00 | " in ratios, ratios
    memory = text.split("## Peak memory", 1)[1].split("##", 1)[0]
    assert "Measured: one subprocess per scheme" in memory, f"memory was not measured:\n{memory}"
    for s in measured:
        row = next(ln for ln in memory.splitlines() if ln.startswith(f"| {s} |"))
        assert "| - |" not in row + "|", f"no measured memory for {s}: {row}"
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
    for bad in (["--lengths", "a,b"], ["--schemes", "alibi"], ["--repeats", "0"]):
        with pytest.raises(SystemExit) as e:
            benchmark.parse_args(["--quick", *bad])
        assert e.value.code == 2, bad


def test_a_partial_run_never_writes_results(capsys):
    """Only the full run (every registered scheme, every default) writes results/: the issue's check command, a
    subset of schemes at one length, goes to runs/benchmark/, and pointed at results/ it is refused (exit 2)."""
    assert benchmark.parse_args([]).results == "results"
    partial = ["--lengths", "4096", "--schemes", "rope,alibi,kerple"]
    assert benchmark.parse_args(partial).results == "runs/benchmark"
    assert benchmark.parse_args(["--repeats", "2"]).results == "runs/benchmark"
    assert benchmark.parse_args([*partial, "--out", "elsewhere"]).results == "elsewhere"
    with pytest.raises(SystemExit) as e:
        benchmark.parse_args([*partial, "--results", "results"])
    assert e.value.code == 2 and "lengths, schemes" in capsys.readouterr().err


def test_the_full_run_on_a_gpu_goes_to_results_gpu(monkeypatch):
    """results/ holds the CPU's full run: the full run on another device writes results/gpu/, and a partial run
    stays in runs/benchmark/ (the folder each would write, read where main checks it before measuring)."""
    class Checked(Exception):
        pass

    def stop(folder, flag):
        raise Checked(folder)
    monkeypatch.setattr(benchmark, "check_writable", stop)
    for kind, argv, want in (("cuda", [], "results/gpu"), ("cpu", [], "results"),
                             ("cuda", ["--lengths", "4096"], "runs/benchmark")):
        monkeypatch.setattr(devices, "pick_device", lambda name, mps=True, kind=kind: torch.device(kind))
        with pytest.raises(Checked) as e:
            benchmark.main(argv)
        got = e.value.args[0]
        assert got.resolve() == (benchmark.Path(benchmark.__file__).parents[1] / want).resolve(), (kind, argv, got)


def test_options_set_are_measured_tabulated_and_drawn(tmp_path):
    """--schemes takes a scheme with options set (t5{scale=2.0}; {a=1,b=2} for two), through variants.admit as
    every script: each is built with its options, timed, written into the report and drawn; a name that is no
    scheme is one line and exit 2, with the pointer to --scheme-file."""
    two = "fox{gate_bias=1.0}{decay_max=64.0}"
    cfg = benchmark.parse_args(["--quick", "--schemes", "rope,t5{scale=2.0},fox{gate_bias=1.0,decay_max=64.0}"])
    assert cfg.schemes == ("rope", "t5{scale=2.0}", two), cfg.schemes
    cfg = benchmark.replace(cfg, lengths=(8,), repeats=1, warmup=0)
    assert benchmark.make_lm(cfg, two).cfg.pos_options == {"gate_bias": 1.0, "decay_max": 64.0}
    assert benchmark.make_lm(cfg, "t5{scale=2.0}").cfg.pos_options == {"scale": 2.0}
    bar, cpu = SimpleNamespace(update=lambda n=1: None), torch.device("cpu")  # forward and hooks measured
    times, hooks = benchmark.forward_times(cfg, cpu, bar), benchmark.hook_costs(cfg, cpu, bar)
    made_up = {s: 1.0 + k for k, s in enumerate(("reference", *cfg.schemes))}
    report = benchmark.build_report(cfg, "test", "cpu", times, {}, hooks, made_up, made_up, ["--quick"])
    for name in ("t5{scale=2.0}", two):
        assert f"| {name} |" in report and (name, 8) in times, f"{name} is not in the report"
    benchmark.plot(cfg, times, {}, tmp_path / "b.png", "cpu")
    assert (tmp_path / "b.png").is_file()
    with pytest.raises(SystemExit) as e:
        benchmark.parse_args(["--quick", "--schemes", "rope,no_such_scheme"])
    assert e.value.code == 2


def test_the_memory_children_fork_from_a_server_that_holds_this_module(monkeypatch):
    """peak_memory's forkserver preloads the benchmark module by the name it is imported as: a preload that fails
    is skipped without a word, and every child then imports torch again (8 s more for the --quick run)."""
    import importlib.util
    got = []

    class Stop(Exception):
        pass

    class Context:
        def set_forkserver_preload(self, names):
            got.extend(names)
            raise Stop
    monkeypatch.setattr(benchmark.multiprocessing, "get_context", lambda kind: Context())
    with pytest.raises(Stop):
        benchmark.peak_memory(benchmark.BenchConfig(), "cpu", None)
    assert benchmark.__name__ in got, f"the server preloads {got}, not {benchmark.__name__}"
    assert all(importlib.util.find_spec(n) is not None for n in got), f"a preload that cannot be imported: {got}"
