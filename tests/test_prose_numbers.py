"""prose_numbers: every number the README and docs state inside a sentence is results/' number, printed
at the page's rounding; sync() writes them, and a fragment whose words changed is named."""
from lab.docsync import prose_numbers as P
from lab.eval_common import HERE

RESULTS = HERE / "results"


def test_every_number_in_the_prose_is_the_results_number():
    wrong, missing = [], []
    for page, fragment in P.CLAIMS:
        text = (HERE / page).read_text(encoding="utf-8")
        want = P.render(fragment, RESULTS)
        if want in text:
            continue
        found = P.pattern(fragment).search(text)
        (wrong if found else missing).append(f"{page}: {found.group(0) if found else fragment!r}\n   results/: {want!r}")
    assert not missing, "fragments whose words are no longer in their page (update prose_numbers.CLAIMS):\n" + \
        "\n".join(missing)
    assert not wrong, "numbers that differ from results/ (python <script>.py --redraw writes them):\n" + "\n".join(wrong)
    assert sum(len(P.keys_in(f)) for _, f in P.CLAIMS) >= 30, "the claims cover fewer numbers than they did"


def test_sync_writes_the_numbers_and_names_a_fragment_it_cannot_find(tmp_path):
    (tmp_path / "page.md").write_text("RoPE reaches 1.00 at 4096 (was typed by hand).\nOther text.\n")
    claims = [("page.md", "RoPE reaches {ppl:rope:4096} at 4096"), ("page.md", "ALiBi reaches {ppl:alibi:4096}")]
    missing = P.sync(RESULTS, claims, root=tmp_path)
    assert missing == [claims[1]], missing
    assert (tmp_path / "page.md").read_text() == \
        f"RoPE reaches {P.value('ppl:rope:4096', RESULTS)} at 4096 (was typed by hand).\nOther text.\n"


def test_keys_read_what_their_tables_print():
    rows = P.read_results(RESULTS / "retrieval.json")["rows"]
    r = next(r for r in rows if r["variant"] == "alibi_copy" and r["distance"] == 512)
    k = round(r["exact"] * r["trials"])
    lo, hi = P.share_ci(r["exact"], r["trials"])
    assert P.value("exact:alibi_copy:512", RESULTS) == f"{100 * k / r['trials']:.0f}%"
    assert (P.value("lo:alibi_copy:512", RESULTS), P.value("hi:alibi_copy:512", RESULTS)) == \
        (f"{100 * lo:.0f}", f"{100 * hi:.0f}")
    ex = {r["variant"]: r for r in P.read_results(RESULTS / "extrapolation.json")["rows"]}
    assert P.value("ratio:alibi:4096", RESULTS) == f"{ex['alibi']['ppl_4096'] / ex['alibi']['ppl_256']:.2f}"
    import csv  # rerun: the row of results/ and of every earlier run kept in results/reruns/
    sin = [ex["sin"]["ppl_4096"]] + [float(r["ppl_4096"]) for f in sorted((RESULTS / "reruns").glob("*.csv"))
                                     for r in csv.DictReader(f.open()) if r["variant"] == "sin"]
    assert len(sin) == 3 and P.value("reruns:sin", RESULTS) == "3", sin
    assert P.value("rerun:sin:4096", RESULTS) == f"{min(sin):.2f}-{max(sin):.2f}", sin


# Decimals and percentages in the prose that are not results/' values, and why (the broad check below).
NOT_RESULTS = {
    ("bigger_runs.md", "24.6"): "the gpu preset's tokens, arithmetic of its settings",
    ("long_context.md", "83.8"): "a wavelength from RoPE's formula", ("long_context.md", "6.3"): "the same",
    ("your_scheme.md", "3.5"): "the example's own benchmark run (runs/custom/, not committed)",
    ("recipe.md", "0.125"): "sqrt(2/C), the init's formula", ("recipe.md", "0.088"): "C^-0.5, the init's formula",
    ("rope_scaling.md", "1.874"): "YaRN's mscale formula worked out",
    ("long_context.md", "97"): "irope_copy's earlier run (results/train_log.json at commit 0e6dd48), said so",
}
SKIP = {"loss_vs_position", "per_span_loss", "panels", "logs", "provenance", "distance", "times", "memory", "built",
        "probe", "history"}  # curves: too many values to tell a stale number from a value


def _values(x, out) -> set:
    """Every number of a results JSON outside curves, printed at 0-4 decimals, as a share (x100) too."""
    if isinstance(x, bool):
        return out
    if isinstance(x, (int, float)):
        for n in range(5):
            out.update({f"{abs(x):.{n}f}", f"{abs(100 * x):.{n}f}"})
    elif isinstance(x, dict):
        for k, v in x.items():
            if k not in SKIP:
                _values(v, out)
    elif isinstance(x, list):
        for v in x:
            _values(v, out)
    return out


def test_every_decimal_in_the_prose_is_a_results_value():
    """The broad net under CLAIMS: a decimal or a percentage in README.md or docs/*.md, outside the synced
    tables, code blocks and CLAIMS' fragments, must be a value of results/ at some rounding (or be named in
    NOT_RESULTS). A stale typed number is rarely still a value of the regenerated files."""
    import json
    import re
    values = set()
    for f in RESULTS.glob("*.json"):
        _values(json.loads(f.read_text()), values)
    for f in RESULTS.glob("*.md"):
        values |= {m.lstrip("+-").replace(",", "") for m in re.findall(r"[-+]?\d[\d,]*\.?\d*", f.read_text())}
    number = re.compile(r"(?<![\w.])[-+]?\d+\.\d+|\d+(?:\.\d+)?%")
    unexplained, checked = [], 0
    for page in [HERE / "README.md"] + sorted((HERE / "docs").glob("*.md")):
        text = page.read_text(encoding="utf-8")
        text = re.sub(r"<!-- ([\w-]+)-table:start -->.*?<!-- \1-table:end -->", "", text, flags=re.S)
        text = re.sub(r"```.*?```", "", text, flags=re.S)
        for where, fragment in P.CLAIMS:
            if (HERE / where) == page:
                text = P.pattern(fragment).sub("", text)
        for m in number.finditer(text):
            tok = m.group(0).rstrip("%").lstrip("+-")
            checked += 1
            if tok not in values and (page.name, tok) not in NOT_RESULTS:
                line = text[:m.start()].count("\n") + 1
                unexplained.append(f"{page.name}: {m.group(0)} in {text.splitlines()[line - 1].strip()[:90]!r}")
    assert checked > 300, f"only {checked} numbers scanned"
    assert not unexplained, f"{len(unexplained)} numbers of {checked} are no value of results/ (regenerate, claim " \
                            f"them in prose_numbers.CLAIMS, or say why in NOT_RESULTS):\n" + "\n".join(unexplained)
