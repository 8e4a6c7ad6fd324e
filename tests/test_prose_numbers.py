"""prose_numbers: every number the README and docs state inside a sentence is results/' number, printed
at the page's rounding; sync() writes them, and a fragment whose words changed is named."""
import prose_numbers as P
from eval_common import HERE

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
    rows = P.read_json(RESULTS / "retrieval.json")["rows"]
    r = next(r for r in rows if r["variant"] == "alibi_copy" and r["distance"] == 512)
    k = round(r["exact"] * r["trials"])
    lo, hi = P.share_ci(r["exact"], r["trials"])
    assert P.value("exact:alibi_copy:512", RESULTS) == f"{100 * k / r['trials']:.0f}%"
    assert (P.value("lo:alibi_copy:512", RESULTS), P.value("hi:alibi_copy:512", RESULTS)) == \
        (f"{100 * lo:.0f}", f"{100 * hi:.0f}")
    ex = {r["variant"]: r for r in P.read_json(RESULTS / "extrapolation.json")["rows"]}
    assert P.value("ratio:alibi:4096", RESULTS) == f"{ex['alibi']['ppl_4096'] / ex['alibi']['ppl_256']:.2f}"
