"""Which schemes generalise on which synthetic task, and the papers' claims against ours, decided by rules in code
(tested in tests/test_synthetic_claims.py), as lab/docsync/findings.py decides the text findings. The rows are
experiments/synthetic_test.py's (results/synthetic.json): one per variant, split, seed and test length, with the
accuracy on the answers and its 95% Clopper-Pearson interval.

The rules:
  * learned(v, task): every seed of v is at least LEARNED right at L on its task's own split. A model that is not
    did not learn the task, and its longer lengths are not testable (a twin that never copied).
  * reach(v, split): the largest multiple k of L (1, 2, 4, 8) such that at every length up to kL the lowest
    interval bound over v's seeds is at least HOLDS: "generalises to kL". 0 for a model that did not learn.
  * above(a, b, split, k): at kL, a is above b when every seed of a has its interval's lower bound above the upper
    bound of every seed of b; below, the other way; otherwise a tie. Rankings of rows with one seed say so.
A claim is judged at 2L, one step outside the training length, on the tasks where every row it names learned
the task (the others are listed as not testable); "not testable" where no task is left, "not measured" where a row
is not in the results yet; a verdict that ranks a row with one seed ends in ", one seed".
"""
LEARNED = 0.95   # accuracy at L: learned the task
HOLDS = 0.90     # interval's lower bound at kL: still does it
AT = 2           # the multiple of L the claims are judged at
CORE = ("none", "learned", "sin", "rope", "alibi")


def _rows(rows: list, v: str, split: str, k: int = None) -> list:
    return [r for r in rows if r["variant"] == v and r["split"] == split and (k is None or r["multiple"] == k)]


def _task(split: str) -> str:
    """The task a split belongs to (flip_flop_sparse -> flip_flop)."""
    return split.split("_sparse")[0].split("_dense")[0]


def learned(rows: list, v: str, task: str) -> bool:
    at_l = _rows(rows, v, task, 1)
    return bool(at_l) and all(r["accuracy"] >= LEARNED for r in at_l)


def reach(rows: list, v: str, split: str) -> int:
    task = _task(split)
    if not learned(rows, v, task):
        return 0
    best = 0
    for k in (1, 2, 4, 8):
        rs = _rows(rows, v, split, k)
        if not rs or min(r["ci_low"] for r in rs) < HOLDS:
            break
        best = k
    return best


def above(rows: list, a: str, b: str, split: str, k: int = AT) -> str:
    """"above", "below", "tie", or "not testable" (either did not learn its task, or a row is missing)."""
    task = _task(split)
    ra, rb = _rows(rows, a, split, k), _rows(rows, b, split, k)
    if not (ra and rb and learned(rows, a, task) and learned(rows, b, task)):
        return "not testable"
    if min(r["ci_low"] for r in ra) > max(r["ci_high"] for r in rb):
        return "above"
    if min(r["ci_low"] for r in rb) > max(r["ci_high"] for r in ra):
        return "below"
    return "tie"


def _acc(rows: list, v: str, split: str, k: int) -> str:
    rs = _rows(rows, v, split, k)
    if not rs:
        return f"{v} -"
    accs = [r["accuracy"] for r in rs]
    return f"{v} {sum(accs) / len(accs):.2f}" + (f" ({len(rs)} seeds)" if len(rs) > 1 else " (one seed)")


def pairwise(rows: list, winners, losers, splits, k: int = AT) -> tuple:
    """A claim "each of winners above each of losers on these splits at kL": (verdict, evidence), judged on the
    splits where every row named learned its task (the others are named as not testable). holds: every pair
    above; reversed: every pair below; tie: every pair tied; else mixed. not testable: no split left;
    not measured: a row is not in the results yet."""
    named = (*winners, *losers)
    evidence = "; ".join(f"{s} at {k}L: " + ", ".join(_acc(rows, v, s, k) for v in named) for s in splits)
    missing = sorted({v for s in splits for v in named if not _rows(rows, v, s, k)})
    if missing:
        return "not measured", evidence + f"; no rows yet: {', '.join(missing)}"
    judged = [s for s in splits if all(learned(rows, v, _task(s)) for v in named)]
    left_out = [s for s in splits if s not in judged]
    if left_out:
        bad = sorted({v for s in left_out for v in named if not learned(rows, v, _task(s))})
        evidence += f"; not testable on {', '.join(left_out)} (not learned at L: {', '.join(bad)})"
    if not judged:
        return "not testable", evidence
    got = [above(rows, a, b, s, k) for s in judged for a in winners for b in losers]
    verdict = ("holds" if all(g == "above" for g in got) else "reversed" if all(g == "below" for g in got)
               else "tie" if all(g == "tie" for g in got) else "mixed")
    one = any(len(_rows(rows, v, s, k)) == 1 for s in judged for v in named)
    if one and verdict != "tie":  # a ranking that rests on one seed says so
        verdict += ", one seed"
    return verdict, evidence + (f"; judged on {', '.join(judged)}" if left_out else "")


def glitches(rows: list, v: str = "rope") -> tuple:
    """Liu et al.'s flip-flop glitches: v, right in distribution (FFL(0.8) at L), errs more on the sparse or the
    dense split at L, the intervals apart."""
    base = _rows(rows, v, "flip_flop", 1)
    if not base:
        return "not measured", f"no rows yet: {v}"
    if not learned(rows, v, "flip_flop"):
        return "not testable", f"{v} did not learn flip-flop at L"
    worse = [s for s in ("flip_flop_sparse", "flip_flop_dense")
             if _rows(rows, v, s, 1) and max(r["ci_high"] for r in _rows(rows, v, s, 1)) < min(r["ci_low"] for r in base)]
    evidence = ", ".join(f"{s} {_acc(rows, v, s, 1).split(' ', 1)[1]}" for s in ("flip_flop", "flip_flop_sparse",
                                                                                  "flip_flop_dense"))
    return ("holds" if worse else "fails"), f"{v} at L: {evidence}"


NAMED = ("t5", "cope", "stickbreaking", "fox")  # the field's schemes the claims below name
SELECTIVE, STRINGS = ("selective_copy",), ("reverse", "selective_copy")
# (source, their claim, their setting against ours, the rule)
CLAIMS = (
    ("CoPE (Golovneva et al. 2024)", "CoPE solves selective copy where RoPE fails",
     "theirs: tested on denser and sparser blanks at the training length; ours: the same density, longer",
     lambda rows: pairwise(rows, ["cope"], ["rope"], SELECTIVE)),
    ("CoPE (Golovneva et al. 2024)", "CoPE solves flip-flop where RoPE fails (sparse and dense splits)",
     "theirs and ours: FFL(0.8) training, sparse and dense tests; ours at L = 64, and also longer",
     lambda rows: pairwise(rows, ["cope"], ["rope"], ("flip_flop_sparse", "flip_flop_dense"), k=1)),
    ("Liu et al. 2023", "a RoPE model right in distribution makes glitches on sparse or dense flip-flop",
     "theirs: GPT-2-sized models, length 512; ours: 0.8M parameters, L = 64",
     lambda rows: glitches(rows, "rope")),
    ("Kazemnejad et al. 2023", "NoPE and T5's bias generalise to longer inputs better than RoPE and ALiBi",
     "theirs: decoder-only models (about 100M) on copy, reverse, addition and other tasks; ours: reverse and selective copy",
     lambda rows: pairwise(rows, ["none", "t5"], ["rope", "alibi"], STRINGS)),
    ("Stick-breaking (Tan et al. 2024)", "stick-breaking attention extrapolates past its training length better than RoPE",
     "theirs: language-model perplexity and retrieval at 350M-1B; ours: the four tasks",
     lambda rows: pairwise(rows, ["stickbreaking"], ["rope"], ("flip_flop", "mqar", "selective_copy", "reverse"))),
    ("FoX (Lin et al. 2025)", "the forgetting gate extrapolates past its training length better than RoPE",
     "theirs: language-model perplexity at 760M; ours: the four tasks",
     lambda rows: pairwise(rows, ["fox"], ["rope"], ("flip_flop", "mqar", "selective_copy", "reverse"))),
)


def claims_table(rows: list) -> str:
    lines = ["| source | claim | setting | ours | on |", "|---|---|---|---|---|"]
    for source, claim, where, rule in CLAIMS:
        verdict, evidence = rule(rows)
        lines.append(f"| {source} | {claim} | {where} | **{verdict}** | {evidence} |")
    return "\n".join(lines)


def generalise_table(rows: list) -> str:
    """Rows: variants; columns: splits; a cell: the longest length the variant still does the task at (reach)."""
    splits = [s for s in ("flip_flop", "flip_flop_sparse", "flip_flop_dense", "mqar", "selective_copy", "reverse")
              if any(r["split"] == s for r in rows)]
    seen = list(dict.fromkeys(r["variant"] for r in rows))
    names = [v for v in (*CORE, "rope+yarn") if v in seen] + [v for v in seen if v not in (*CORE, "rope+yarn")]
    lines = ["| variant | seeds | " + " | ".join(splits) + " |", "|---|---|" + "---|" * len(splits)]
    for v in names:
        per = sorted({len({r["seed"] for r in _rows(rows, v, sp)}) for sp in splits if _rows(rows, v, sp)})
        seeds = f"{per[0]}" if len(per) == 1 else f"{per[0]}-{per[-1]}"  # by task: the core five's come in later
        cell = {0: "not learned", 1: "L only"}
        lines.append(f"| {v} | {seeds} | " + " | ".join(cell.get(k := reach(rows, v, s), f"{k}L") if _rows(rows, v, s)
                                                         else "-" for s in splits) + " |")
    return "\n".join(lines)
