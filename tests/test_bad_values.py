"""Every entry script refuses a bad value before any work (issue 44): one line on stderr starting
`error:`, exit 2, nothing written, no training, scoring or drawing step taken.

Each script's main(argv) runs in this process, in an empty working folder (so every default output
folder, runs/... and results/, lies inside it), with every step that trains, scores, draws or writes
patched to raise Reached. The table holds the eleven commands of the issue, one bad value of each
kind for every flag (a negative, zero or non-number where a count is meant, NaN and inf where a
finite number is, an unknown name, a missing file or folder, a folder that cannot be written, a
corrupt or NaN-holding JSON for --redraw), and NaN and inf for every number option of every
registered scheme, generated from schemes.REGISTRY so that a new scheme's options are covered too."""
import importlib
import json
from pathlib import Path

import pytest

import schemes
import tiny_lm
from lab import corpora
from conftest import ROOT, tree_hashes

SCRIPTS = ("train_compare", "extrapolation_test", "long_context_test", "visualize_rope", "breakage_test",
           "benchmark", "recipe_ablation", "anchor_xtransformers", "copy_calibration")


class Reached(BaseException):
    """A step that trains, scores, draws or writes was reached (BaseException: no `except Exception` hides it)."""


# module -> the functions that do work: training, scoring, measuring, drawing, writing
WORK = {"training": ["train"], "perplexity": ["evaluate"], "lab.atomic": ["atomic_write"], "lab.checkpoint_io": ["save_checkpoint"],
        "tables": ["sync_recipe"],
        "train_compare": ["train", "train_one", "write_logs", "redraw"],
        "extrapolation_test": ["evaluate", "score_row", "redraw"],
        "long_context_test": ["measure_row", "context_use", "retrieval", "format_retrieval", "redraw"],
        "visualize_rope": ["fig_rotation", "fig_relative", "fig_decay", "fig_wavelengths", "fig_pairs",
                           "fig_attention", "theta_ablation", "redraw"],
        "breakage_test": ["train", "run_word_order", "run_char_lm", "redraw"],
        "benchmark": ["peak_memory", "forward_times", "train_throughput", "eval_times", "hook_costs", "redraw"],
        "recipe_ablation": ["train", "evaluate", "run_one", "save", "redraw"],
        "anchor_xtransformers": ["train", "evaluate", "run_one"],
        "copy_calibration": ["train", "calibrate", "save", "redraw"]}

# the modules above by where they live: the shared ones in lab/, the less-used entry scripts in experiments/
MODULE = {"training": "lab.training", "perplexity": "lab.perplexity", "tables": "lab.docsync.tables",
          **{s: f"experiments.{s}" for s in ("breakage_test", "benchmark", "recipe_ablation", "anchor_xtransformers",
                                             "copy_calibration")}}

WRAP = "in/file.txt/out"  # a folder inside a file: cannot be made
REDRAW = {"train_compare": ("--results", "train_log.json"), "extrapolation_test": ("--results", "extrapolation.json"),
          "long_context_test": ("--results", "retrieval.json"), "visualize_rope": ("--out", "rope_attention.json"),
          "breakage_test": ("--out", "breakage.json"), "benchmark": ("--results", "benchmark.json"),
          "recipe_ablation": ("--results", "recipe_ablation.json"),
          "anchor_xtransformers": ("--results", "anchor_xtransformers.json"),
          "copy_calibration": ("--results", "copy_calibration.json")}
CORRUPT = {"corrupt": '{"rows": [1, 2', "nan": '{"meta": {}, "rows": [{"ppl": NaN}]}',
           "inf": '{"meta": {}, "rows": [{"ppl": Infinity}]}', "list": "[1, 2]"}


def the_eleven() -> list:
    """The issue's table: (script, argv, what the line must name), with --quick unless stated."""
    return [("train_compare", ["--quick", "--variants", "fox{gate_bias=nan}", "--out", "o"], "gate_bias"),
            ("recipe_ablation", ["--quick", "--schemes", "t5{scale=nan}"], "scale"),
            ("extrapolation_test", ["--quick", "--scalings", "yarn@inf"], "yarn@inf"),
            ("extrapolation_test", ["--quick", "--scalings", "yarn@nan"], "yarn@nan"),
            ("long_context_test", ["--quick", "--scalings", "yarn@inf"], "yarn@inf"),
            ("benchmark", ["--threads", "-1"], "--threads"),
            ("breakage_test", ["--corpus", "in/empty.txt"], "in/empty.txt"),  # no --quick: the full run
            ("extrapolation_test", ["--quick", "--preset", "preview"], "--quick and --preset"),
            ("train_compare", ["--corpus", "in/folder"], "is a folder"),
            ("train_compare", ["--quick", "--out", "ck"], "rerun `python train_compare.py --quick --out ck`"),
            ("recipe_ablation", ["--quick", "--tokens", "-1"], "--tokens")]


def other_corpus_into_results() -> list:
    """A run on another corpus than the default, pointed at the repository's results/ (it holds the
    default corpus's real runs only; the second corpus's go to results/<name> by run_dirs' rule; the scripts
    that follow that rule are tested in test_corpus_sympy.py)."""
    repo = str(ROOT / "results")
    return [("breakage_test", ["--corpus", "sympy", "--out", repo], "--out FOLDER"),
            ("recipe_ablation", ["--corpus", "sympy", "--schemes", "rope", "--results", repo], "corpus sympy"),
            ("copy_calibration", ["--corpus", "sympy", "--results", repo], "corpus sympy"),
            ("anchor_xtransformers", ["--corpus", "sympy", "--results", repo], "default corpus")]


def per_flag() -> list:
    """One bad value of each kind for every flag of every script."""
    q = ["--quick"]
    cases = []
    add = lambda script, *rows: cases.extend((script, argv, want) for argv, want in rows)  # noqa: E731
    add("train_compare",
        *[([*q, f, v, "--out", "o"], f) for f in ("--steps", "--batch-size", "--seq-len", "--eval-every")
          for v in ("0", "-3")],
        *[([f, v, "--out", "o"], f) for f in ("--n-layer", "--n-head", "--n-embd") for v in ("0", "-1")],
        ([*q, "--steps", "x"], "--steps"), ([*q, "--n-embd", "1.5"], "--n-embd"),
        *[([*q, "--lr", v, "--out", "o"], "--lr") for v in ("nan", "inf", "-inf", "0", "-0.1", "x", "1e999")],
        ([*q, "--seed", "-1"], "--seed"), ([*q, "--seed", "x"], "--seed"), ([*q, "--seed", str(2 ** 64)], "--seed"),
        ([*q, "--save-every", "-1", "--out", "o"], "--save-every"),
        ([*q, "--variants", "rope,bogus", "--out", "o"], "bogus"),
        ([*q, "--variants", ",", "--out", "o"], "--variants"),
        ([*q, "--variants", "rope{x=1}", "--out", "o"], "option"), ([*q, "--variants", "t5{scale=big}"], "scale"),
        ([*q, "--variants", "alibi_ft_yarn"], "alibi_ft_yarn"),
        ([*q, "--corpus", "in/missing.txt", "--out", "o"], "does not exist"),
        ([*q, "--corpus", "in/empty.txt", "--out", "o"], "in/empty.txt"),
        ([*q, "--device", "nope", "--out", "o"], "nope"),
        ([*q, "--out", WRAP], WRAP), ([*q, "--out", "o", "--results", WRAP], WRAP),
        (["--preset", "bogus"], "--preset"), ([*q, "--amp", "fp8"], "--amp"), ([*q, "--preset", "gpu"], "--quick"),
        ([*q, "--scheme-file", "in/missing.py"], "--scheme-file"), ([*q, "--bogus"], "--bogus"),
        (["--n-embd", "30", "--n-head", "4", "--variants", "rope", "--out", "o"], "divisible"))
    ckpt = ["--ckpt-dir", "in/folder"]
    for script in ("extrapolation_test", "long_context_test"):
        add(script,
            ([*q, "--ckpt-dir", "in/missing"], "in/missing"), ([*q, *ckpt], "python train_compare.py --quick --out"),
            ([*q, "--variants", "rope,bogus"], "bogus"), ([*q, "--variants", ","], "--variants"),
            ([*q, "--batch-tokens", "0"], "--batch-tokens"), ([*q, "--batch-tokens", "x"], "--batch-tokens"),
            ([*q, "--corpus", "in/missing.txt"], "does not exist"), ([*q, "--corpus", "in/folder"], "is a folder"),
            ([*q, "--device", "nope"], "nope"), ([*q, "--redraw", "--results", WRAP], WRAP),
            (["--preset", "bogus"], "--preset"), ([*q, "--scheme-file", "in/missing.py"], "--scheme-file"),
            ([*q, "--scalings", "bogus"], "bogus"), ([*q, "--scalings", "yarn@0.5"], "yarn@0.5"),
            ([*q, "--scalings", "yarn@-inf"], "yarn@-inf"), ([*q, "--scalings", "yarn@x"], "yarn@x"),
            ([*q, "--bogus"], "--bogus"))
    add("extrapolation_test",
        *[([*q, "--lengths", v], "--lengths") for v in ("", "x", "64,nan", "-64,128", "1")],
        ([*q, "--lengths", "64,100"], "divide"),
        *[([*q, "--tokens", v], "--tokens") for v in ("0", "-1", "nan")],
        ([*q, "--decode-len", "-1"], "--decode-len"), ([*q, "--decode-windows", "0"], "--decode-windows"),
        ([*q, "--seed-dirs", "in/missing"], "--seed-dirs"))
    add("long_context_test",
        *[([*q, f, v], f) for f in ("--contexts", "--distances", "--format-distances") for v in ("", "x", "0,48,16")],
        *[([*q, f, v], f) for f in ("--target-len", "--spans", "--trials", "--copy-trials") for v in ("0", "-1")],
        ([*q, "--format-trials", "0"], "--format-trials"), ([*q, "--format-distances", "4"], "--format-distances"),
        ([*q, "--short", "5"], "--short"), ([*q, "--key-len", "1"], "--key-len"),
        ([*q, "--key-len", "40"], "--key-len"),
        ([*q, "--distances", "4,8"], "--key-len"), ([*q, "--key-alphabet", "bogus"], "--key-alphabet"),
        ([*q, "--only", "bogus"], "--only"), ([*q, "--seed", "-1"], "--seed"),
        ([*q, "--seed-dirs", "in/missing"], "--seed-dirs"),
        ([*q, "--fixed-scalings", "yarn@nan"], "--fixed-scalings"),
        ([*q, "--retrieval-scalings", "yarn@inf"], "--retrieval-scalings"))
    add("visualize_rope",
        *[(["--only", v], "--only") for v in ("", "0", "7", "x")],
        *[([f, v], f) for f in ("--theta", "--factor") for v in ("nan", "inf", "-inf", "0", "x")],
        (["--factor", "0.5"], "--factor"), (["--theta", "-1"], "--theta"),
        *[([f, v], f) for f in ("--head-dim",) for v in ("0", "3", "-2", "x")],
        *[([f, "0"], f) for f in ("--positions", "--radius", "--train-len", "--long-len", "--windows", "--length")],
        (["--head", "-1"], "--head"), (["--ckpt", "in/missing.pt"], "in/missing.pt"),
        (["--ckpt-dir", "in/missing"], "in/missing"), (["--only", "1", "--out", WRAP], WRAP),
        (["--quick", "--bogus"], "--bogus"))
    add("breakage_test",
        ([*q, "--out", WRAP], WRAP), ([*q, "--seed", "-1"], "--seed"), ([*q, "--device", "nope"], "nope"),
        ([*q, "--threads", "-1"], "--threads"), ([*q, "--threads", "x"], "--threads"),
        ([*q, "--wo-names", "2"], "--wo-names"), ([*q, "--wo-names", "99"], "--wo-names"),
        ([*q, "--wo-verbs", "0"], "--wo-verbs"),
        *[([*q, f, v], f) for f in ("--wo-steps", "--wo-seeds", "--wo-test-pairs", "--lm-steps") for v in ("0", "-1")],
        ([*q, "--wo-schemes", "rope,bogus"], "bogus"), ([*q, "--wo-schemes", ","], "--wo-schemes"),
        ([*q, "--lm-pos", "bogus"], "--lm-pos"), ([*q, "--corpus", "in/missing.txt"], "does not exist"),
        ([*q, "--corpus", "in/folder"], "is a folder"), ([*q, "--scheme-file", "in/missing.py"], "--scheme-file"))
    add("benchmark",
        *[([*q, "--lengths", v], "--lengths") for v in ("x", "0,64", "-32")],
        ([*q, "--schemes", "rope,bogus"], "bogus"), ([*q, "--schemes", "alibi"], "rope"),
        *[([*q, f, "0"], f) for f in ("--repeats", "--train-steps", "--train-repeats", "--eval-windows",
                                       "--eval-repeats")],
        ([*q, "--warmup", "-1"], "--warmup"), ([*q, "--threads", "x"], "--threads"),
        ([*q, "--device", "nope"], "nope"), ([*q, "--results", WRAP], WRAP),
        ([*q, "--scheme-file", "in/missing.py"], "--scheme-file"))
    add("recipe_ablation",
        ([*q, "--knobs", "baseline,bogus"], "bogus"), ([*q, "--schemes", "rope,bogus"], "bogus"),
        ([*q, "--schemes", "t5{scale=inf}"], "scale"), ([*q, "--seed", "-1"], "--seed"),
        *[([*q, "--lengths", v], "--lengths") for v in ("", "x", "0,64", "64,100")],
        ([*q, "--tokens", "0"], "--tokens"), ([*q, "--tokens", "x"], "--tokens"),
        ([*q, "--tokens", "100"], "--tokens"),
        ([*q, "--corpus", "in/missing.txt"], "does not exist"), ([*q, "--device", "nope"], "nope"),
        ([*q, "--out", WRAP], WRAP), ([*q, "--results", WRAP], WRAP), ([*q, "--main-dir", "in/missing"], "--main-dir"),
        ([*q, "--threads", "-1"], "--threads"))
    add("anchor_xtransformers",
        ([*q, "--schemes", "rope,bogus"], "bogus"), ([*q, "--seed", "-1"], "--seed"),
        ([*q, "--threads", "-1"], "--threads"), ([*q, "--corpus", "in/missing.txt"], "does not exist"),
        ([*q, "--device", "nope"], "nope"), ([*q, "--out", WRAP], WRAP), ([*q, "--results", WRAP], WRAP))
    add("copy_calibration",
        ([*q, "--mixtures", "bogus"], "bogus"), ([*q, "--mixtures", ","], "--mixtures"),
        ([*q, "--pos", "bogus"], "--pos"), ([*q, "--steps", "0"], "--steps"), ([*q, "--steps", "-1"], "--steps"),
        ([*q, "--seed", "-1"], "--seed"), ([*q, "--corpus", "in/missing.txt"], "does not exist"),
        ([*q, "--device", "nope"], "nope"), ([*q, "--out", WRAP], WRAP), ([*q, "--results", WRAP], WRAP))
    for script, (flag, name) in REDRAW.items():  # --redraw on a file that is not JSON, or holds NaN or Infinity
        add(script, *[([*q, "--redraw", flag, f"redraw/{kind}"], f"redraw/{kind}/{name}") for kind in CORRUPT])
    return cases


def scheme_options() -> list:
    """NaN and inf for every number option of every registered scheme, in every script that reads
    options in braces: train_compare and the evaluation scripts (--variants), recipe_ablation (--schemes)."""
    cases = []
    for name, entry in schemes.REGISTRY.items():
        for option, default in entry.options.items():
            if isinstance(default, bool) or not isinstance(default, (int, float)):
                continue
            for bad in ("nan", "inf", "-inf", "1e999"):
                spec = f"{name}{{{option}={bad}}}"
                cases += [("train_compare", ["--quick", "--variants", spec, "--out", "o"], option),
                          ("train_compare", ["--quick", "--variants", f"{spec}_copy_ft_none", "--out", "o"], option),
                          ("extrapolation_test", ["--quick", "--variants", spec], option),
                          ("long_context_test", ["--quick", "--variants", f"{spec}_copy"], option),
                          ("recipe_ablation", ["--quick", "--schemes", spec], option)]
    assert cases, "no registered scheme has a number option: the generator tests nothing"
    return cases


def make_inputs(work: Path) -> None:
    """The files the table names, in the working folder."""
    (work / "in" / "folder").mkdir(parents=True)
    (work / "in" / "empty.txt").write_text("")
    (work / "in" / "file.txt").write_text("a file, not a folder")
    (work / "ck").mkdir()
    (work / "ck" / "rope.pt").write_bytes(b"not a checkpoint")  # garbage in a --quick --out folder
    for script, (_, name) in REDRAW.items():
        for kind, text in CORRUPT.items():
            (work / "redraw" / kind).mkdir(parents=True, exist_ok=True)
            (work / "redraw" / kind / name).write_text(text)
            if script == "long_context_test":  # it redraws whichever of its files exist: a good one beside
                (work / "redraw" / kind / "context_use.json").write_text('{"meta": {}, "rows": []}')


def listing(root: Path) -> dict:
    """{relative path: (size, mtime)} of every file and folder under root."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


@pytest.fixture
def no_work(monkeypatch):
    """Every function that trains, scores, draws or writes raises Reached."""
    if not (corpora.DATA_DIR / "sympy.txt").exists():  # a named corpus is built on first use, into data/:
        corpora.load_corpus("sympy")                     # not the work other_corpus_into_results refuses
    for module, names in WORK.items():
        mod = importlib.import_module(MODULE.get(module, module))
        for name in names:
            def reached(*a, _where=f"{module}.{name}", **k):
                raise Reached(f"{_where} was reached")
            monkeypatch.setattr(mod, name, reached)


@pytest.mark.parametrize("table", ["the_eleven", "per_flag", "scheme_options", "other_corpus_into_results"])
def test_every_bad_value_is_one_line_exit_2_before_any_work(table, tmp_path, monkeypatch, capsys, no_work):
    work = tmp_path / "work"
    work.mkdir()
    make_inputs(work)
    monkeypatch.chdir(work)
    before, repo_before = listing(work), tree_hashes(ROOT)
    runs = sorted((ROOT / "runs").rglob("*")) if (ROOT / "runs").is_dir() else []
    problems = []
    for script, argv, want in globals()[table]():
        main = importlib.import_module(MODULE.get(script, script)).main
        capsys.readouterr()
        try:
            got = main(list(argv))
        except SystemExit as e:
            got = e.code
        except Reached as e:
            got = f"work done: {e}"
        out, err = capsys.readouterr()
        lines = [ln for ln in err.splitlines() if ln.strip()]
        cmd = f"{script}.py {' '.join(argv)}"
        if got != 2 or len(lines) != 1 or not lines[0].startswith("error: "):
            problems.append(f"{cmd}: exit {got}, stderr {err.strip()[-300:]!r}")
        elif want not in lines[0]:
            problems.append(f"{cmd}: the line does not name {want!r}: {lines[0]}")
        elif out.strip():
            problems.append(f"{cmd}: printed before refusing: {out.strip()[-200:]!r}")
        now = listing(work)
        if now != before:
            problems.append(f"{cmd}: wrote {sorted(set(now.items()) ^ set(before.items()))[:3]}")
            before = now
    assert not problems, f"{len(problems)} bad values not refused as they should be:\n" + "\n".join(problems)
    assert tree_hashes(ROOT) == repo_before, "the repository's results/, README.md or docs/ changed"
    assert (sorted((ROOT / "runs").rglob("*")) if (ROOT / "runs").is_dir() else []) == runs, "runs/ changed"


def test_the_registry_generator_covers_every_number_option():
    """A scheme registered now (a toy with a float and an int option) gets its cases without editing the table."""
    entry = schemes.Scheme("toy_badvalues", "nothing", options={"width": 2.5, "count": 3, "kind": "a", "on": True})
    schemes.register(entry)
    try:
        specs = {argv[argv.index("--variants") + 1] if "--variants" in argv else argv[-1]
                 for _, argv, _ in scheme_options()}
        for option in ("width", "count"):
            assert {f"toy_badvalues{{{option}={v}}}" for v in ("nan", "inf")} <= specs, option
        assert not any("kind=" in s or "on=" in s for s in specs), "text and bool options have no NaN"
    finally:
        schemes.unregister("toy_badvalues")


def test_progress_is_plain_lines_off_a_terminal(capsys, monkeypatch):
    """Off a terminal (a log file, a pipe) progress() writes a plain line at most every EVERY_S seconds and
    one at the end, no bar; a disabled one writes nothing."""
    import sys
    from lab import cli
    monkeypatch.setattr(cli, "EVERY_S", 1e9)
    bar = cli.progress(range(500), desc="rope", unit="step")
    for _ in bar:
        bar.set_postfix(loss="1.234")
    assert capsys.readouterr().err == "rope: 500/500 step, 0 s, loss=1.234\n"
    for _ in cli.progress(range(3), desc="quiet", disable=True):
        pass
    for _ in cli.progress(range(3), desc="gone", leave=False):
        pass
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(cli, "EVERY_S", 0.0)
    with cli.progress(desc="memory", unit="run", file=sys.stderr) as bar:
        bar.update()
        bar.set_description("forward")
        bar.update()
    assert capsys.readouterr().err.splitlines() == ["memory: 1 run, 0 s", "forward: 2 run, 0 s", "forward: 2 run, 0 s"]
