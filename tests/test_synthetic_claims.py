"""lab/synthetic_claims.py: the rules that decide which scheme generalises on which synthetic task, and the
papers' claims, on rows built here with their intervals computed independently of the rules."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lab import synthetic_claims as C  # noqa: E402
from lab.long_context import clopper_pearson  # noqa: E402


def row(v, split, k, right, n=1000, seed=0, L=64):
    lo, hi = clopper_pearson(right, n)
    return {"variant": v, "task": split.split("_sparse")[0].split("_dense")[0], "split": split, "seed": seed,
            "L": L, "length": k * L, "multiple": k, "right": right, "answers": n, "accuracy": right / n,
            "ci_low": lo, "ci_high": hi}


def curve(v, split, accs, seed=0):
    """Rows of v on split at L, 2L, 4L, 8L with these accuracies (of 1000 answers)."""
    return [row(v, split, k, round(a * 1000), seed=seed) for k, a in zip((1, 2, 4, 8), accs)]


def test_learned_is_every_seed_at_l():
    rows = curve("rope", "mqar", [0.99, 0.5, 0.3, 0.1]) + curve("rope", "mqar", [0.94, 0.5, 0.3, 0.1], seed=1)
    assert not C.learned(rows, "rope", "mqar"), "one seed at 0.94 < 0.95: not learned"
    assert C.learned(rows[:4], "rope", "mqar")
    assert not C.learned(rows, "alibi", "mqar"), "no rows: not learned"


def test_reach_is_the_last_length_whose_lowest_bound_holds():
    rows = curve("alibi", "flip_flop", [1.0, 0.99, 0.95, 0.5])
    assert C.reach(rows, "alibi", "flip_flop") == 4
    rows = curve("alibi", "flip_flop", [1.0, 0.99, 0.5, 0.99])
    assert C.reach(rows, "alibi", "flip_flop") == 2, "a dip at 4L ends the reach even if 8L recovers"
    # 0.91 of 1000: its lower bound (about 0.891) is under 0.90
    rows = curve("rope", "reverse", [1.0, 0.91, 0.1, 0.1])
    assert clopper_pearson(910, 1000)[0] < C.HOLDS
    assert C.reach(rows, "rope", "reverse") == 1
    assert C.reach(curve("rope", "reverse", [0.9, 0.9, 0.9, 0.9]), "rope", "reverse") == 0, "not learned: 0"
    # a split is judged by its task's training split: sparse flip-flop of a model that learned flip-flop
    rows = curve("rope", "flip_flop", [1.0, 1.0, 1.0, 1.0]) + curve("rope", "flip_flop_sparse", [0.97, 0.5, 0.5, 0.5])
    assert C.reach(rows, "rope", "flip_flop_sparse") == 1


def test_above_needs_every_seed_apart():
    rows = (curve("none", "reverse", [1.0, 0.8, 0.5, 0.2]) + curve("none", "reverse", [1.0, 0.7, 0.5, 0.2], seed=1)
            + curve("rope", "reverse", [1.0, 0.2, 0.1, 0.1]) + curve("rope", "reverse", [1.0, 0.66, 0.1, 0.1], seed=1))
    # none's lowest seed at 2L is 0.70, rope's highest 0.66: the intervals (about +-0.03) overlap
    assert C.above(rows, "none", "rope", "reverse") == "tie"
    rows = [r for r in rows if not (r["variant"] == "rope" and r["seed"] == 1)]
    assert C.above(rows, "none", "rope", "reverse") == "above"
    assert C.above(rows, "rope", "none", "reverse") == "below"
    assert C.above(rows, "rope", "t5", "reverse") == "not testable"


def test_pairwise_verdicts():
    rows = (curve("none", "reverse", [1.0, 0.8, 0.5, 0.2]) + curve("rope", "reverse", [1.0, 0.2, 0.1, 0.1])
            + curve("none", "selective_copy", [1.0, 0.1, 0.1, 0.1]) + curve("rope", "selective_copy", [1.0, 0.6, 0.1, 0.1]))
    assert C.pairwise(rows, ["none"], ["rope"], ["reverse"])[0] == "holds, one seed"
    assert C.pairwise(rows, ["rope"], ["none"], ["reverse"])[0] == "reversed, one seed"
    assert C.pairwise(rows, ["none"], ["rope"], ["reverse", "selective_copy"])[0] == "mixed, one seed"
    seeded = rows + [dict(r, seed=s) for s in (1, 2) for r in rows]
    assert C.pairwise(seeded, ["none"], ["rope"], ["reverse"])[0] == "holds", "three seeds each: no caveat"
    verdict, evidence = C.pairwise(rows, ["none", "t5"], ["rope"], ["reverse"])
    assert verdict == "not measured" and "no rows yet: t5" in evidence
    rows += curve("t5", "reverse", [0.9, 0.9, 0.9, 0.9])
    verdict, evidence = C.pairwise(rows, ["none", "t5"], ["rope"], ["reverse"])
    assert verdict == "not testable" and "not learned at L: t5" in evidence
    # judged on the splits where every row learned: t5 did not learn reverse, so selective copy alone decides
    rows += curve("t5", "selective_copy", [1.0, 0.1, 0.1, 0.1])
    verdict, evidence = C.pairwise(rows, ["none", "t5"], ["rope"], ["reverse", "selective_copy"])
    assert verdict == "reversed, one seed" and "not testable on reverse" in evidence and "judged on selective_copy" in evidence
    assert "none 0.80 (one seed)" in C.pairwise(rows, ["none"], ["rope"], ["reverse"])[1]


def test_glitches():
    good = curve("rope", "flip_flop", [1.0, 1.0, 1.0, 1.0])
    assert C.glitches(good + curve("rope", "flip_flop_sparse", [0.95, 1, 1, 1]))[0] == "holds"
    assert C.glitches(good + curve("rope", "flip_flop_sparse", [1.0, 1, 1, 1])
                      + curve("rope", "flip_flop_dense", [0.999, 1, 1, 1]))[0] == "fails", "intervals overlap"
    assert C.glitches(curve("rope", "flip_flop", [0.5, 1, 1, 1]))[0] == "not testable"
    assert C.glitches(curve("alibi", "flip_flop", [1, 1, 1, 1]))[0] == "not measured"


def test_every_claim_is_decided_on_complete_rows():
    """Each claim's rule gives a verdict from the vocabulary on rows of every scheme it names."""
    names = ("none", "t5", "rope", "alibi", "cope", "stickbreaking", "fox")
    splits = ("flip_flop", "flip_flop_sparse", "flip_flop_dense", "mqar", "selective_copy", "reverse")
    rows = [r for v in names for s in splits for r in curve(v, s, [1.0, 0.6 if v == "rope" else 0.9, 0.5, 0.4])]
    for source, claim, _, rule in C.CLAIMS:
        verdict, evidence = rule(rows)
        assert verdict.split(",")[0] in ("holds", "fails", "reversed", "tie", "mixed"), (claim, verdict, evidence)
    table = C.claims_table(rows)
    assert table.count("\n") == len(C.CLAIMS) + 1


def test_generalise_table_cells_and_seeds_by_task():
    rows = (curve("rope", "reverse", [1.0, 0.95, 0.5, 0.1]) + curve("rope", "mqar", [1.0, 0.5, 0.1, 0.1])
            + curve("rope", "mqar", [1.0, 0.5, 0.1, 0.1], seed=1) + curve("none", "mqar", [0.5, 0.1, 0.1, 0.1])
            + curve("fox", "mqar", [1.0, 0.99, 0.99, 0.99]))
    lines = C.generalise_table(rows).splitlines()
    assert lines[0] == "| variant | seeds | mqar | reverse |", lines[0]
    assert lines[2:] == ["| none | 1 | not learned | - |", "| rope | 1-2 | L only | 2L |", "| fox | 1 | 8L | - |"], lines
