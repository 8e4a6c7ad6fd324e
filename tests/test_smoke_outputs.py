"""The scripts' smoke paths: --quick and the preview never touch results/, README.md or docs/;
every table and figure in results/ redraws from results/*.json alone; figures 1-4 need no
checkpoint; and every --help lists every flag the script defines."""
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ["train_compare.py", "extrapolation_test.py", "long_context_test.py", "benchmark.py", "breakage_test.py",
           "visualize_rope.py", "recipe_ablation.py", "copy_calibration.py"]
ENV = dict(os.environ, OMP_NUM_THREADS="1", MPLBACKEND="Agg")  # tiny tensors: one thread is faster


def tree_hashes(root: Path, paths) -> dict:
    """{relative path: sha256} of every file under each of paths (files or folders) in root."""
    out = {}
    for p in paths:
        p = root / p
        for f in ([p] if p.is_file() else sorted(p.rglob("*")) if p.is_dir() else []):
            if f.is_file():
                out[str(f.relative_to(root))] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def copy_checkout(dst: Path) -> None:
    """The tracked files as they are in the working tree, plus the built corpus if present."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():  # a tracked file someone is deleting right now is simply left out
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)
    for rel in ("data/shakespeare.txt", "data/shakespeare.split.json"):  # ignored by git; saves the build
        if (ROOT / rel).is_file():
            shutil.copy2(ROOT / rel, dst / rel)


# Each script's smoke mode, with the smallest sizes it accepts where it has such flags; none of
# those flags chooses an output path. train -> extrapolation -> figures depend on each other.
# The commands in NOT_REAL (run after CHAIN, in one interpreter) choose no mode at all: the
# checkpoints they read are not real runs, and that alone must keep them out of results/ (each
# says where it writes instead). The last
# one scores a preview-shaped rope at the lengths and tokens of results/extrapolation.json, as a
# new user would: it would merge its rows into results/ and rewrite the README's tables.
QUICK_EVAL = ["--lengths", "64,128,256,512", "--tokens", "4096", "--scalings", "yarn", "--decode-len", "0"]
SHRUNK_PREVIEW = ["--preset", "preview", "--steps", "3", "--seq-len", "32", "--batch-size", "4", "--n-layer", "1",
                  "--n-embd", "16", "--n-head", "2"]
NOT_REAL = [["extrapolation_test.py", "--ckpt-dir", "runs/quick", *QUICK_EVAL],
            ["long_context_test.py", "--ckpt-dir", "runs/quick", "--contexts", "0,16,48,112", "--target-len", "32",
             "--spans", "4", "--short", "16", "--distances", "24,48,96", "--trials", "4", "--copy-trials", "8",
             "--scalings", "yarn", "--fixed-scalings", "", "--retrieval-scalings", "", "--variants", "rope,alibi"],
            ["visualize_rope.py", "--only", "5", "--ckpt", "runs/quick/rope.pt"],
            ["train_compare.py", "--steps", "2", "--variants", "rope"],  # the real model, 2 steps: runs/main
            ["extrapolation_test.py", "--ckpt-dir", "runs/preview_rope", "--variants", "rope", "--scalings", "yarn",
             "--decode-len", "0"]]
CHAIN = [["train_compare.py", "--quick", "--steps", "5"],
         ["extrapolation_test.py", "--quick"],
         ["long_context_test.py", "--quick"],
         ["visualize_rope.py", "--quick"],
         # the preview's code path, shrunk: its presets, folders and table, not its sizes
         ["train_compare.py", *SHRUNK_PREVIEW],
         ["extrapolation_test.py", "--preset", "preview", "--lengths", "32,64", "--tokens", "256"],
         ["train_compare.py", *SHRUNK_PREVIEW, "--variants", "rope", "--out", "runs/preview_rope"]]
INDEPENDENT = [["benchmark.py", "--quick", "--no-memory"],
               ["breakage_test.py", "--quick", "--wo-steps", "5", "--lm-steps", "4"],
               ["recipe_ablation.py", "--quick", "--knobs", "baseline", "--schemes", "rope"]]
WATCHED = ["results", "README.md", "docs"]

# One interpreter runs several commands as __main__ (torch is imported once), each given as
# "script|arg|arg"; it prints "@@@ <command> <exit code>" and then what the command wrote on stderr.
DRIVER = """
import contextlib, io, runpy, sys
for cmd in sys.argv[1:]:
    script, *args = cmd.split("|")
    sys.argv, err, code = [script, *args], io.StringIO(), None
    with contextlib.redirect_stderr(err):
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as e:
            code = e.code
    print(f"@@@ {cmd} {code}")
    print(err.getvalue())
"""


def run_in_one(repo: Path, cmds) -> dict:
    """{command as one string: (exit code as text, its stderr)} of cmds run by DRIVER in repo."""
    r = subprocess.run([sys.executable, "-c", DRIVER, *("|".join(c) for c in cmds)], cwd=repo, env=ENV,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    parts = re.split(r"^@@@ (.*) (\S+)$", r.stdout, flags=re.M)[1:]  # [command, code, stderr, ...]
    assert len(parts) == 3 * len(cmds), r.stdout[-2000:]
    return {c.replace("|", " "): (code, err) for c, code, err in zip(parts[::3], parts[1::3], parts[2::3])}


@pytest.fixture(scope="module")
def quick_copy(tmp_path_factory):
    """A copy of the repository in which CHAIN and then NOT_REAL ran, INDEPENDENT beside them: (the
    copy, hashes of results/, README.md and docs/ before, failures, seconds, {NOT_REAL command: its stderr})."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to list the tracked files")
    repo = tmp_path_factory.mktemp("copy") / "repo"
    copy_checkout(repo)
    before = tree_hashes(repo, WATCHED)
    t0 = time.perf_counter()
    log = repo.parent / "logs"
    log.mkdir()
    procs = [(cmd, subprocess.Popen([sys.executable, *cmd], cwd=repo, env=ENV, stdout=subprocess.DEVNULL,
                                    stderr=open(log / f"{cmd[0]}.err", "w")))
             for cmd in INDEPENDENT]  # these run beside the chain: two cores
    failures = []
    for cmd in CHAIN:
        r = subprocess.run([sys.executable, *cmd], cwd=repo, env=ENV, capture_output=True, text=True, timeout=300)
        if r.returncode:
            failures.append(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr[-800:]}")
            break
    stderr = {}
    for cmd, (code, err) in ({} if failures else run_in_one(repo, NOT_REAL)).items():
        stderr[cmd] = err
        if code not in ("None", "0"):
            failures.append(f"{cmd} exited {code}: {err[-800:]}")
    for cmd, p in procs:
        if p.wait(timeout=300):
            failures.append(f"{' '.join(cmd)} exited {p.returncode}: {(log / f'{cmd[0]}.err').read_text()[-800:]}")
    return repo, before, failures, time.perf_counter() - t0, stderr


def test_quick_modes_leave_results_untouched(quick_copy):
    """Every --quick run, the preview, and runs of checkpoints that are not real runs without any
    mode flag, in a copy of the repository: results/, README.md and docs/ byte-identical after."""
    repo, before, failures, secs, stderr = quick_copy
    assert before, "the copy has no results/ to compare"
    after = tree_hashes(repo, WATCHED)
    changed = sorted(f for f in before if f in after and after[f] != before[f])
    added, removed = sorted(set(after) - set(before)), sorted(set(before) - set(after))
    assert not (changed or added or removed), \
        (f"a --quick or preview run wrote into results/, README.md or docs/ ({secs:.0f} s of runs): changed {changed}, "
         f"added {added}, removed {removed}")
    assert not failures, "\n".join(failures)
    for rel in ("runs/quick/results/extrapolation.md", "runs/quick/results/rope_rotation.png",
                "runs/quick/results/context_use.png", "runs/quick/results/retrieval.png",
                "runs/preview/results/ppl_vs_length.png", "runs/preview/results/extrapolation.md",
                "runs/quick/results/rope_attention.json", "runs/main/results/train_log.json",
                "runs/preview_rope/results/extrapolation.json"):
        assert (repo / rel).is_file(), f"{rel} missing: the quick outputs went somewhere else"
    preview = (repo / "runs/preview/results/extrapolation.md").read_text()
    assert preview.startswith("| variant | ppl@32 | ppl@64 |") and "rope+yarn" in preview, preview
    for cmd in map(" ".join, NOT_REAL):
        notes = [ln for ln in stderr[cmd].splitlines() if ln.startswith("note: ")]
        assert len(notes) == 1 and "is not a real run" in notes[0] and "instead of results/" in notes[0], \
            f"{cmd} must say in one line where it writes instead of results/: {stderr[cmd][-600:]}"


def test_explicit_results_with_checkpoints_that_are_not_real_is_refused(quick_copy):
    """--results results (--out results for the figures) named explicitly with checkpoints that
    are not real runs: one line naming the checkpoint and how it differs, exit 2, nothing written."""
    repo, before, *_ = quick_copy
    cmds = [["extrapolation_test.py", "--ckpt-dir", "runs/quick", *QUICK_EVAL, "--results", "results"],
            [*NOT_REAL[1], "--results", "results"],
            ["visualize_rope.py", "--only", "5", "--ckpt", "runs/quick/rope.pt", "--out", "results"],
            ["train_compare.py", "--quick", "--results", "results"],
            ["train_compare.py", "--steps", "2", "--variants", "rope", "--results", "results"]]
    for cmd, (code, err) in run_in_one(repo, cmds).items():
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert code == "2" and len(lines) == 1 and lines[0].startswith("error: runs/"), \
            f"{cmd} exited {code}: {err[-600:]}"
        assert "is not a real run" in lines[0] and ("n_layer=2 (real run: 4)" in lines[0] or
                                                    "steps=2 (real run: 1100)" in lines[0]), lines[0]
    assert tree_hashes(repo, WATCHED) == before, "a refused run wrote into results/, README.md or docs/"


REDRAW = [["train_compare.py", "--redraw"], ["extrapolation_test.py", "--redraw"], ["long_context_test.py", "--redraw"],
          ["copy_calibration.py", "--redraw"], ["recipe_ablation.py", "--redraw"], ["breakage_test.py", "--redraw"],
          ["benchmark.py", "--redraw"], ["visualize_rope.py", "--redraw"]]


REDRAW_DRIVER = """
import runpy, sys
for cmd in sys.argv[1:]:
    script, *args = cmd.split()
    sys.argv = [script, *args]
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            print(f"{cmd} exited {e.code}")
            raise
"""


def test_every_table_and_figure_redraws_from_json(tmp_path):
    """In a copy with no runs/ and no checkpoint: delete every table and figure in results/, keep the
    JSON files, run each script's --redraw. Every file comes back; the tables byte-identical."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to list the tracked files")
    repo = tmp_path / "repo"
    copy_checkout(repo)
    assert not (repo / "runs").exists()
    drawn = {f.name: f.read_bytes() for f in (repo / "results").iterdir() if f.is_file() and f.suffix != ".json"}
    for name in drawn:
        (repo / "results" / name).unlink()
    # one interpreter runs every script's --redraw as __main__ (torch is imported once, not eight times)
    r = subprocess.run([sys.executable, "-c", REDRAW_DRIVER, *(" ".join(c) for c in REDRAW)], cwd=repo, env=ENV,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"a --redraw failed: {r.stdout[-400:]} {r.stderr[-800:]}"
    missing = sorted(n for n in drawn if not (repo / "results" / n).is_file())
    assert not missing, f"not redrawn from results/*.json: {missing}"
    differ = sorted(n for n, b in drawn.items() if not n.endswith(".png") and (repo / "results" / n).read_bytes() != b)
    assert not differ, f"redrawn tables differ from the committed ones: {differ}"
    for name in (n for n in drawn if n.endswith(".png")):
        assert (repo / "results" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{name} is not a PNG"
    for page in ["README.md"] + [f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")]:
        assert (repo / page).read_text() == (ROOT / page).read_text(), f"redrawing changed {page}"


@pytest.mark.usefixtures("one_thread")
def test_visualize_figures_1_to_4_need_no_checkpoint(tmp_path):
    import visualize_rope
    out = tmp_path / "fig"
    visualize_rope.main(["--only", "1,2,3,4", "--out", str(out), "--positions", "8", "--radius", "16",
                         "--ckpt", str(tmp_path / "none.pt"), "--ckpt-dir", str(tmp_path / "none")])
    pngs = ["rope_rotation.png", "rope_relative.png", "rope_decay.png", "rope_wavelengths.png", "rope_pairs.png"]
    for name in pngs:
        f = out / name
        assert f.is_file(), f"figure {name} was not written"
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f.stat().st_size > 5_000, \
            f"{name} is not a real PNG ({f.stat().st_size} bytes)"
    assert "| YaRN |" in (out / "rope_pairs.md").read_text(), "figure 4's pair table has no YaRN row"
    assert sorted(p.name for p in out.iterdir()) == sorted(pngs + ["rope_pairs.md"])


# One interpreter runs every script's `--help` as __main__ (torch is imported once, not six times).
# It records the long flags each script gives argparse.add_argument, and prints, per script,
# the exit code, those flags and the help text between markers.
HELP_DRIVER = """
import argparse, contextlib, io, runpy, sys
flags, add = [], argparse.ArgumentParser.add_argument
def recording_add(self, *names, **kw):
    flags.extend(n for n in names if n.startswith("--"))
    return add(self, *names, **kw)
argparse.ArgumentParser.add_argument = recording_add
for script in sys.argv[1:]:
    sys.argv, buf, code = [script, "--help"], io.StringIO(), None
    flags.clear()
    with contextlib.redirect_stdout(buf):
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as e:
            code = e.code
    print(f"@@@ {script} {code} {','.join(f for f in flags if f != '--help')}")
    print(buf.getvalue())
"""


def test_help_exits_0_and_lists_every_flag():
    r = subprocess.run([sys.executable, "-c", HELP_DRIVER, *SCRIPTS], cwd=ROOT, env=ENV, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    parts = re.split(r"^@@@ (\S+) (\S+) (\S*)$", r.stdout, flags=re.M)[1:]  # [script, code, flags, text, ...]
    helps = {parts[i]: (parts[i + 1], parts[i + 2].split(","), parts[i + 3]) for i in range(0, len(parts), 4)}
    assert sorted(helps) == sorted(SCRIPTS), r.stdout[-2000:]
    problems = []
    for s, (code, flags, out) in helps.items():
        if code != "0":
            problems.append(f"{s} --help exited {code}")
            continue
        if "--quick" not in flags:
            problems.append(f"{s}: defines no --quick ({flags})")
        missing = [f for f in flags if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", out)]
        if missing:
            problems.append(f"{s} --help does not mention {missing}")
    assert not problems, "\n".join(problems)
