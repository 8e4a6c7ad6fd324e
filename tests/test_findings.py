"""lab/docsync/findings.py's rules on rows made here (each verdict, and the boundary of each threshold), and the
pages that show them: docs/settings.md's table and docs/results.md's where-lines are what results/ gives."""
import json
from pathlib import Path

import pytest

from lab.docsync import findings

ROOT = Path(__file__).resolve().parent.parent


def row(variant, near, far=None, L0=256, L=4096):
    return {"variant": variant, "train_len": L0, f"ppl_{L0}": near, f"ppl_{L}": far if far is not None else near}


def base(rope=4.9, alibi=5.0, sin=5.3, learned=5.6, far=None):
    far = far or {"rope": 29.0, "alibi": 5.0, "sin": 36.0, "learned": 34.0}
    return [row(s, v, far[s]) for s, v in (("rope", rope), ("alibi", alibi), ("sin", sin), ("learned", learned))]


def test_fit_holds_fails_and_is_not_measured():
    assert findings.fit(base())[0] == "holds"
    assert findings.fit(base(alibi=5.4))[0] == "fails", "ALiBi behind sinusoidal"
    assert findings.fit(base(rope=5.7))[0] == "fails", "RoPE behind learned"
    assert findings.fit(base()[:3])[0] == "not measured", "no learned row"
    # the mean over seeds decides: RoPE 5.2 and 5.5 average 5.35 > sin's 5.3
    rows = base(rope=5.2) + [row("rope [seed1]", 5.5)]
    verdict, nums = findings.fit(rows)
    assert verdict == "fails" and "rope 5.35" in nums, nums
    assert findings.seeds_at(rows + [row("rope+yarn", 1.0), row("rope (window)", 1.0)], "rope", "ppl_256") == [5.2, 5.5]


def test_order_needs_seeds_and_reads_overlap_as_a_tie():
    one = base()
    assert findings.order(one)[0] == "one seed"
    two = one + [row("rope [seed1]", 4.8), row("alibi [seed1]", 5.1)]
    assert findings.order(two) == ("holds", "rope 4.90/4.80, alibi 5.00/5.10")
    tie = one + [row("rope [seed1]", 5.05), row("alibi [seed1]", 4.95)]
    assert findings.order(tie)[0] == "tie"
    rev = base(rope=5.2, alibi=5.0) + [row("rope [seed1]", 5.1), row("alibi [seed1]", 4.9)]
    assert findings.order(rev)[0] == "reversed"


def test_break_uses_the_glance_threshold_at_16_training_lengths():
    assert findings.breaks(base())[0] == "holds"
    at_threshold = {"rope": 4.9 * 1.2, "alibi": 5.0, "sin": 36.0, "learned": 34.0}
    assert findings.breaks(base(far=at_threshold))[0] == "fails", "a ratio of exactly 1.2 is not a break"
    alibi_breaks = {"rope": 29.0, "alibi": 5.0 * 1.21, "sin": 36.0, "learned": 34.0}
    assert findings.breaks(base(far=alibi_breaks))[0] == "fails"
    gpu = [row(s, 3.8, f, L0=1024, L=16384) for s, f in (("rope", 25.0), ("alibi", 3.5), ("sin", 39.0), ("learned", 44.0))]
    gpu = [{**r, "ppl_32768": 99.0} for r in gpu]   # longer than 16 L0: not the length judged
    verdict, nums = findings.breaks(gpu)
    assert verdict == "holds" and nums.startswith("ppl@16384 / ppl@1024"), nums


def test_context_counts_text_models_only():
    ctx = [{"variant": "rope", "effective_context": 192}, {"variant": "alibi_copy", "effective_context": 960}]
    assert findings.context(ctx) == ("holds", "largest 192")
    ctx.append({"variant": "sin", "effective_context": 448})
    assert findings.context(ctx) == ("fails", "sin reach 448")
    assert findings.context([])[0] == "not measured"


def test_tasks_needs_every_task_and_fails_on_a_scheme_that_keeps_them_all():
    def rows(v, task, accs, split=None):
        from lab.long_context import clopper_pearson
        return [{"variant": v, "task": task, "split": split or task, "seed": 0, "L": 64, "multiple": k, "accuracy": a,
                 "ci_low": clopper_pearson(round(a * 1000), 1000)[0], "ci_high": clopper_pearson(round(a * 1000), 1000)[1]}
                for k, a in zip((1, 2, 4, 8), accs)]
    some = [r for t in findings.TASKS[:3] for r in rows("alibi", t, [1.0, 0.99, 0.99, 0.99])]
    assert findings.tasks(some)[0] == "not measured"
    every = some + rows("alibi", "reverse", [1.0, 0.5, 0.1, 0.1]) + rows("rope", "reverse", [1.0, 0.95, 0.1, 0.1])
    verdict, said = findings.tasks(every)
    assert verdict == "holds" and "reverse rope" in said and "trained at 64" in said and "mqar alibi" in said, said
    every += [r for t in findings.TASKS[:3] for r in rows("rope", t, [1.0, 0.99, 0.5, 0.5])]
    assert findings.tasks(every)[0] == "fails", "rope keeps all four at 2L"
    lost = every[:-4] + rows("rope", "selective_copy", [1.0, 0.5, 0.5, 0.5]) + rows("none", "mqar", [1.0, 0.99, 0.5, 0.5])
    said = findings.tasks([r for r in lost if not (r["task"] == "selective_copy" and r["variant"] == "alibi")])[1]
    assert "selective_copy no scheme" in said and "mqar alibi, rope, none" in said, "no scheme is not NoPE: " + said


def test_a_setting_without_its_folder_is_not_measured(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "extrapolation.json").write_text(json.dumps({"rows": base()}))
    got = findings.verdicts(tmp_path)
    assert got["1"]["CPU / Shakespeare"][0] == "holds" and got["1"]["CPU / SymPy"] == ("not measured", "")
    assert got["4"]["CPU / Shakespeare"] == ("not measured", "")
    table = findings.settings_table(tmp_path)
    assert table.count("\n") == 2 + len(findings.FINDINGS), table
    line = findings.where_line("1", tmp_path)
    assert line.strip() == "*Where it holds:* CPU / Shakespeare: holds, RoPE before ALiBi one seed.", line


def _block(page: Path, name: str) -> str:
    start, end = f"<!-- {name}-table:start -->", f"<!-- {name}-table:end -->"
    text = page.read_text(encoding="utf-8")
    assert start in text and end in text, f"{page.name} lacks the {name} markers"
    return text.split(start, 1)[1].split(end, 1)[0].strip()


def test_the_pages_show_what_results_give():
    """docs/settings.md's table and docs/results.md's where-lines equal what lab/docsync/findings.py computes now."""
    got = findings.verdicts()  # read once: results/' JSON files are large
    assert _block(ROOT / "docs" / "settings.md", "settings") == findings.settings_table(got=got).strip(), \
        "docs/settings.md's table is stale: python extrapolation_test.py --redraw"
    for fid in findings.WHERE_LINES:
        assert _block(ROOT / "docs" / "results.md", f"where{fid}") == findings.where_line(fid, got=got).strip(), \
            f"docs/results.md's line under finding {fid} is stale: python extrapolation_test.py --redraw"


def test_the_readme_says_of_the_synthetic_tasks_what_finding_8_decides():
    """The README's lesson 8 says no scheme keeps all four tasks: finding 8 must hold in results/."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    verdict, said = findings.verdicts()["8"]["CPU / Shakespeare"]
    if "no scheme keeps all four synthetic tasks" in readme:
        assert verdict == "holds", f"finding 8 {verdict} ({said}): the README's lesson 8 says otherwise"
