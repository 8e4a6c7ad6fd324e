"""The README and docs/ must not drift from results/: every table between markers is the one
its script wrote, the glance table is recomputed from results/*.json, and the numbers the
prose quotes (throughput ratios, final validation losses) are the measured ones."""
import csv
import re
from pathlib import Path

import pytest

from lab.docsync import tables

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))


def block(name: str):
    """(page, text between <!-- name-table:start --> and its end marker); fails if no page has them."""
    start, end = f"<!-- {name}-table:start -->", f"<!-- {name}-table:end -->"
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        if start in text and end in text:
            return page, text.split(start, 1)[1].split(end, 1)[0].strip()
    pytest.fail(f"no page in README.md or docs/ holds the {name} table markers")


@pytest.mark.parametrize("name,script", [("extrapolation", "extrapolation_test.py"),
                                         ("context_use", "long_context_test.py"),
                                         ("retrieval", "long_context_test.py"),
                                         ("retrieval_formats", "long_context_test.py"),
                                         ("copy_calibration", "experiments/copy_calibration.py")])
def test_tables_are_the_results_tables(name, script):
    page, text = block(name)
    results = (ROOT / "results" / f"{name}.md").read_text(encoding="utf-8").strip()
    assert text == results, f"{page.name}'s {name} table differs from results/{name}.md: rerun {script} --redraw"


def test_glance_table_is_computed_from_results():
    page, text = block("glance")
    assert page.name == "results.md", "the glance table belongs on docs/results.md, beside the findings' detail"
    want = tables.glance_table(ROOT / "results").strip()
    assert text == want, f"docs/results.md's glance table differs from the one results/ gives:\n{want}"
    assert text.count("\n") >= 6, f"the glance table lost rows:\n{text}"


def test_copy_family_table_is_computed_from_results():
    page, text = block("copy_family")
    want = tables.copy_family_table(ROOT / "results").strip()
    assert want, "results/retrieval.json has no copy-trained rows"
    assert text == want, f"{page.name}'s copy_family table differs from the one results/ gives:\n{want}"


@pytest.mark.parametrize("name,make", [("recipe", tables.recipe_table), ("anchor_seeds", tables.seeds_vs_anchor),
                                       ("recipe_seeds", tables.recipe_seeds_table),
                                       ("current_models", tables.current_models_table)])
def test_recipe_tables_are_computed_from_results(name, make):
    page, text = block(name)
    want = make(ROOT / "results").strip()
    assert text == want, f"{page.name}'s {name} table differs from the one results/ gives:\n{want}"


def test_readme_is_short_and_finished():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme) <= 15_000, f"README.md has {len(readme):,} characters; the limit is 15,000"
    assert "{{" not in readme, "README.md still has a placeholder: " + readme[readme.index("{{"):][:40]
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        assert "\u00ab" not in text, f"{page.name} still has a placeholder: " + text[text.index("\u00ab"):][:40]


def test_links_resolve():
    bad = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)", page.read_text(encoding="utf-8")):
            if "://" not in target and not (page.parent / target).exists():
                bad.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not bad, "links to files that do not exist: " + "; ".join(bad)


def test_results_page_quotes_final_validation_losses():
    """The findings quote each scheme's last validation loss; they must be train_log.csv's."""
    page = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    m = re.search(r"Validation loss at 256 after training\s+\(`results/train_log.csv`[^)]*\):(.*?)nats/char", page, re.S)
    assert m, "docs/results.md lost the sentence quoting the final validation losses"
    quoted = dict(re.findall(r"(none|learned|sin|rope|alibi) (\d\.\d{3})", m.group(1)))
    assert len(quoted) == 5, f"expected five quoted losses, got {quoted}"
    last = {}
    with open(ROOT / "results" / "train_log.csv", newline="") as f:
        for row in csv.DictReader(f):
            last[row["variant"]] = float(row["val_loss"])  # rows are in step order: the last one wins
    for scheme, value in quoted.items():
        diff = abs(float(value) - last[scheme])
        assert diff < 5e-4, f"docs quote {scheme} {value}, train_log.csv ends at {last[scheme]:.4f} (diff {diff:.1e})"


def test_breakage_page_quotes_the_char_lm_table():
    """docs/breakage.md's 实验 2 table: every row is results/breakage.md's row without its wall-time column."""
    page = (ROOT / "docs" / "breakage.md").read_text(encoding="utf-8")
    results = (ROOT / "results" / "breakage.md").read_text(encoding="utf-8")
    written = {ln.rsplit(" | ", 1)[0] + " |" for ln in results.split("## 2.", 1)[1].splitlines() if ln.startswith("| ")}
    quoted = [ln for ln in page.split("## 2.", 1)[1].split("\n\n(from", 1)[0].splitlines() if ln.startswith("| ")][1:]
    assert len(quoted) == 4, f"docs/breakage.md's 实验 2 table lost rows (the header aside): {quoted}"
    stale = [ln for ln in quoted if ln not in written]
    assert not stale, f"docs/breakage.md quotes rows results/breakage.md does not hold: {stale}"
