"""The scripts' smoke paths, end to end in a copy of the checkout: --quick and the preview never touch
results/, README.md or docs/, nor do runs of checkpoints that are not real runs (each says where it
writes instead), and naming results/ for those is refused; every table and figure in results/
redraws from results/*.json alone.

The runs: conftest.quick_repo, one interpreter running the commands one after another in the copy,
as __main__, from the copy's own files. In-process calls would not do here: the scripts decide whether
they may write the repository's results/ by comparing a folder with eval_common.HERE / "results", and
in this process eval_common is the checkout's own module, so its HERE is the real repository."""
import pytest

from conftest import CHAIN, INDEPENDENT, NOT_REAL, ROOT, copy_checkout, run_in_one, tree_hashes


def first_to_change(quick_repo, phases) -> str:
    """The first command after which results/, README.md or docs/ differed from the start, or ''."""
    for phase in phases:
        for r in quick_repo.ran[phase]:
            if r.digest != quick_repo.start:
                return f"{r.cmd} ({phase})"
    return ""


def test_quick_modes_leave_results_untouched(quick_repo):
    """Every --quick run, the preview, and runs of checkpoints that are not real runs without any
    mode flag, in a copy of the repository: results/, README.md and docs/ byte-identical after."""
    repo, before, secs = quick_repo.repo, quick_repo.before, quick_repo.secs
    assert before, "the copy has no results/ to compare"
    after = tree_hashes(repo)
    changed = sorted(f for f in before if f in after and after[f] != before[f])
    added, removed = sorted(set(after) - set(before)), sorted(set(before) - set(after))
    assert not (changed or added or removed), \
        (f"a --quick, preview or refused run wrote into results/, README.md or docs/ ({secs:.0f} s of runs), first "
         f"{first_to_change(quick_repo, ('chain', 'independent', 'not_real', 'refused'))}: changed {changed}, "
         f"added {added}, removed {removed}")
    failures = [f"{r.cmd} exited {r.code}: {r.err[-800:]}" for phase in ("chain", "independent", "not_real")
                for r in quick_repo.ran[phase] if r.code != "0"]
    assert not failures, "\n".join(failures)
    assert len(quick_repo.ran["chain"]) == len(CHAIN) and len(quick_repo.ran["independent"]) == len(INDEPENDENT)
    for rel in ("runs/quick/results/extrapolation.md", "runs/quick/results/rope_rotation.png",
                "runs/quick/results/context_use.png", "runs/quick/results/retrieval.png",
                "runs/preview/results/ppl_vs_length.png", "runs/preview/results/extrapolation.md",
                "runs/quick/results/rope_attention.json", "runs/main/results/train_log.json",
                "runs/preview_rope/results/extrapolation.json", "runs/quick/benchmark/benchmark.md",
                "runs/quick/breakage/breakage.md"):
        assert (repo / rel).is_file(), f"{rel} missing: the quick outputs went somewhere else"
    preview = (repo / "runs/preview/results/extrapolation.md").read_text()
    assert preview.startswith("| variant | ppl@32 | ppl@64 |") and "rope+yarn" in preview, preview
    assert [r.cmd for r in quick_repo.ran["not_real"]] == [" ".join(c) for c in NOT_REAL]
    for r in quick_repo.ran["not_real"]:
        notes = [ln for ln in r.err.splitlines() if ln.startswith("note: ")]
        why = "set: writing to runs/custom/results/" if "--theta" in r.cmd or "--factor" in r.cmd else "is not a real run"
        assert len(notes) == 1 and why in notes[0] and "instead of results/" in notes[0], \
            f"{r.cmd} must say in one line where it writes instead of results/: {r.err[-600:]}"
    custom = repo / "runs/custom/results"
    assert {p.name for p in custom.iterdir()} >= {"rope_rotation.png", "rope_relative.png", "rope_pairs.md"}, \
        "the figures of non-default options are not in runs/custom/results"


def test_explicit_results_with_checkpoints_that_are_not_real_is_refused(quick_repo):
    """--results results (--out results for the figures) named explicitly with checkpoints that
    are not real runs: one line naming the checkpoint and how it differs, exit 2, nothing written."""
    assert len(quick_repo.ran["refused"]) == 6
    *not_real, options = quick_repo.ran["refused"]
    lines = [ln for ln in options.err.splitlines() if ln.strip()]
    assert options.code == "2" and len(lines) == 1 and lines[0].startswith("error: --factor draw other figures"), \
        f"{options.cmd} exited {options.code}: {options.err[-600:]}"
    for r in quick_repo.ran["refused"]:
        lines = [ln for ln in r.err.splitlines() if ln.strip()]
        if r is options:
            assert r.digest == quick_repo.ran["not_real"][-1].digest, f"{r.cmd} wrote into results/"
            continue
        assert r.code == "2" and len(lines) == 1 and lines[0].startswith("error: runs/"), \
            f"{r.cmd} exited {r.code}: {r.err[-600:]}"
        assert "is not a real run" in lines[0] and ("n_layer=2 (real run: 4)" in lines[0] or
                                                    "steps=2 (real run: 1100)" in lines[0]), lines[0]
        assert r.digest == quick_repo.ran["not_real"][-1].digest, \
            f"{r.cmd}: a refused run wrote into results/, README.md or docs/"


REDRAW = [["train_compare.py", "--redraw"], ["extrapolation_test.py", "--redraw"], ["long_context_test.py", "--redraw"],
          ["experiments/copy_calibration.py", "--redraw"], ["experiments/recipe_ablation.py", "--redraw"], ["experiments/breakage_test.py", "--redraw"],
          ["experiments/benchmark.py", "--redraw"], ["visualize_rope.py", "--redraw"], ["experiments/field_probes.py", "--redraw"],
          ["experiments/synthetic_test.py", "--redraw"]]


@pytest.mark.slow
def test_every_table_and_figure_redraws_from_json(tmp_path):
    """In a copy with no runs/ and no checkpoint: delete every table and figure in results/, keep the
    JSON files, run each script's --redraw. Every file comes back; the tables byte-identical."""
    repo = tmp_path / "repo"
    copy_checkout(repo)
    assert not (repo / "runs").exists()
    drawn = {f.name: f.read_bytes() for f in (repo / "results").iterdir() if f.is_file() and f.suffix != ".json"}
    for name in drawn:
        (repo / "results" / name).unlink()
    # one interpreter runs every script's --redraw as __main__ in the copy (torch is imported once, not eight times);
    # the figures are drawn and checked whole and written at 12 dpi (what they show: test_plots.py)
    failed = [f"{r.cmd} exited {r.code}: {r.err[-800:]}" for r in run_in_one(repo, {"redraw": [["@low-dpi", "12"], *REDRAW]}) if r.code != "0"]
    assert not failed, "a --redraw failed:\n" + "\n".join(failed)
    missing = sorted(n for n in drawn if not (repo / "results" / n).is_file())
    assert not missing, f"not redrawn from results/*.json: {missing}"
    differ = sorted(n for n, b in drawn.items() if not n.endswith(".png") and (repo / "results" / n).read_bytes() != b)
    assert not differ, f"redrawn tables differ from the committed ones: {differ}"
    for name in (n for n in drawn if n.endswith(".png")):
        assert (repo / "results" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{name} is not a PNG"
    for page in ["README.md"] + [f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")]:
        assert (repo / page).read_text() == (ROOT / page).read_text(), f"redrawing changed {page}"


