"""Where each lesson holds: the findings decided in every measured setting by rules written here.

A lesson measured once is a statement about one size, one training length and one corpus. The
settings, each a results folder that only real runs write:

    CPU / Shakespeare   results/            4 layers x 128, trained at 256 (the README's numbers)
    CPU / SymPy         results/sympy/      the same model and recipe on SymPy's Python source
    GPU / Shakespeare   results/gpu/        the --preset gpu model, trained at 1024 (when one was run)

The rules, from results/<setting>/extrapolation.json and context_use.json. "ppl" is perplexity per
character; L0 the training length; a scheme's ppl@L0 is the mean over the seeds it has:
  1. fit:    relative positions fit better: RoPE's and ALiBi's ppl@L0 are both below sinusoidal's and
             learned's. Fails otherwise.
  1b. order: "RoPE before ALiBi in every seed": holds when every RoPE seed is below every ALiBi seed,
             reversed when every ALiBi seed is below every RoPE seed, a tie when the seeds overlap;
             with one seed of either, "one seed" (no order claimed).
  2. break:  learned, sinusoidal and plain RoPE break past L0 and ALiBi does not, where breaking is
             ppl@16 L0 / ppl@L0 > 1.2 (the glance table's rule; at the longest length scored if shorter).
  4. context: no text-trained model uses more than 192 characters of context on fixed targets: every
             model's effective context (lab/long_context.py) is below 448.
  8. tasks:  past the training length no scheme keeps all four synthetic tasks (results/synthetic.json,
             experiments/synthetic_test.py): none reaches 2L on every task by lab/synthetic_claims.reach.
A finding "holds", "fails" (or for 1b "reversed"/"tie") with its numbers, or is "not measured" there.
tables.sync_settings writes the table into docs/settings.md and one line per finding under it in docs/results.md.
"""
from pathlib import Path

from lab.eval_common import HERE, read_results

SETTINGS = (("CPU / Shakespeare", "results"), ("CPU / SymPy", "results/sympy"), ("GPU / Shakespeare", "results/gpu"))
BREAK = 1.2         # ppl@16 L0 / ppl@L0 above this: breaks (tables.glance_table's rule)
FAR = 16            # the length breaking is judged at, in training lengths (4096 / 256 on the CPU)
USES_CONTEXT = 448  # effective context at or above this: uses context beyond 200 characters


def seeds_at(rows: list, scheme: str, key: str) -> list:
    """The values of `key` over every seed of a scheme's plain row ("rope", "rope [seed1]", ...)."""
    out = []
    for r in rows:
        if r["variant"].split(" [")[0] == scheme and r.get(key) is not None:
            out.append(r[key])
    return out


def _mean(xs: list) -> float:
    return sum(xs) / len(xs)


def lengths_of(rows: list) -> tuple:
    """(L0, the length breaking is judged at) of a folder's rows."""
    L0 = int(rows[0]["train_len"])
    scored = sorted(int(k[4:]) for k in rows[0] if k.startswith("ppl_") and k[4:].isdigit())
    return L0, max(L for L in scored if L <= FAR * L0)


def fit(rows: list) -> tuple:
    """Finding 1: (verdict, numbers)."""
    L0, _ = lengths_of(rows)
    ppl = {s: seeds_at(rows, s, f"ppl_{L0}") for s in ("rope", "alibi", "sin", "learned")}
    if not all(ppl.values()):
        return "not measured", ""
    m = {s: _mean(v) for s, v in ppl.items()}
    ok = max(m["rope"], m["alibi"]) < min(m["sin"], m["learned"])
    return ("holds" if ok else "fails"), ", ".join(f"{s} {m[s]:.2f}" for s in sorted(m, key=m.get))


def order(rows: list) -> tuple:
    """Finding 1b: RoPE below ALiBi in every seed."""
    L0, _ = lengths_of(rows)
    rope, alibi = seeds_at(rows, "rope", f"ppl_{L0}"), seeds_at(rows, "alibi", f"ppl_{L0}")
    if not rope or not alibi:
        return "not measured", ""
    nums = f"rope {'/'.join(f'{x:.2f}' for x in rope)}, alibi {'/'.join(f'{x:.2f}' for x in alibi)}"
    if min(len(rope), len(alibi)) < 2:
        return "one seed", nums
    if max(rope) < min(alibi):
        return "holds", nums
    return ("reversed" if max(alibi) < min(rope) else "tie"), nums


def breaks(rows: list) -> tuple:
    """Finding 2: learned, sin and rope break past L0; alibi does not."""
    L0, far = lengths_of(rows)
    ratio = {}
    for s in ("learned", "sin", "rope", "alibi"):
        near, at = seeds_at(rows, s, f"ppl_{L0}"), seeds_at(rows, s, f"ppl_{far}")
        if not near or not at:
            return "not measured", ""
        ratio[s] = at[0] / near[0]          # seed 0's row, the one every setting has
    ok = all(ratio[s] > BREAK for s in ("learned", "sin", "rope")) and ratio["alibi"] <= BREAK
    return ("holds" if ok else "fails"), f"ppl@{far} / ppl@{L0}: " + ", ".join(f"{s} {v:.2f}" for s, v in ratio.items())


def context(ctx_rows: list) -> tuple:
    """Finding 4: no text-trained model uses more than 192 characters of context."""
    plain = [r for r in ctx_rows if "_copy" not in r["variant"]]
    if not plain:
        return "not measured", ""
    eff = {r["variant"]: r["effective_context"] for r in plain}
    most = max(eff.values())
    users = [v for v, e in eff.items() if e >= USES_CONTEXT]
    return ("fails" if users else "holds"), (f"{', '.join(users)} reach {most}" if users else f"largest {most}")


TASKS = ("flip_flop", "mqar", "selective_copy", "reverse")  # lab/synthetic.TASKS, without importing torch


def tasks(syn_rows: list) -> tuple:
    """Finding 8: past the training length no scheme keeps all four synthetic tasks: none reaches 2L on every
    task (lab/synthetic_claims.reach: every seed's interval at 90% or more up to 2L)."""
    from lab import synthetic_claims
    measured = [t for t in TASKS if any(r["task"] == t for r in syn_rows)]
    if len(measured) < len(TASKS):
        return "not measured", f"tasks measured: {', '.join(measured) or 'none'}"
    names = list(dict.fromkeys(r["variant"] for r in syn_rows))
    kept = {t: [v for v in names if synthetic_claims.reach(syn_rows, v, t) >= 2] for t in TASKS}
    every = [v for v in names if all(v in kept[t] for t in TASKS)]
    said = "; ".join(f"{t} {', '.join(kept[t]) or 'no scheme'}" for t in TASKS)  # "none" is NoPE's name
    L = syn_rows[0]["L"]  # the results/ folder is a setting's, but these tasks are not its corpus: say so
    return ("fails" if every else "holds"), f"synthetic tasks, trained at {L}; kept at {2 * L}: {said}"


FINDINGS = (("1", "Relative positions fit better at the training length", fit, "extrapolation"),
            ("1b", "RoPE fits better than ALiBi in every seed", order, "extrapolation"),
            ("2", "Learned, sinusoidal and plain RoPE break past the training length; ALiBi does not", breaks,
             "extrapolation"),
            ("4", "No text-trained model uses more than 192 characters of context", context, "context_use"),
            ("8", "Past the training length no scheme keeps all four synthetic tasks", tasks, "synthetic"))


def verdicts(root: Path = HERE) -> dict:
    """{finding id: {setting label: (verdict, numbers)}} over SETTINGS, from the folders under root."""
    out = {}
    for fid, _, rule, source in FINDINGS:
        out[fid] = {}
        for label, folder in SETTINGS:
            rows = read_results(Path(root) / folder / f"{source}.json").get("rows", [])
            out[fid][label] = rule(rows) if rows else ("not measured", "")
    return out


def _cell(v: tuple) -> str:
    return v[0] + (f" ({v[1]})" if v[1] else "")


def settings_table(root: Path = HERE, got: dict = None) -> str:
    """docs/settings.md's table: one row per finding, one column per setting (got: verdicts(root), if known)."""
    got = got or verdicts(root)
    lines = ["| finding | " + " | ".join(label for label, _ in SETTINGS) + " |",
             "|---|" + "---|" * len(SETTINGS)]
    for fid, text, _, _ in FINDINGS:
        lines.append(f"| {fid}. {text} | " + " | ".join(_cell(got[fid][label]) for label, _ in SETTINGS) + " |")
    return "\n".join(lines) + "\n"


# docs/results.md's line under each finding: its rules, the second and later named (finding 1 and its order)
WHERE_LINES = {"1": (("1", ""), ("1b", "RoPE before ALiBi")), "2": (("2", ""),), "4": (("4", ""),)}


def where_line(fid: str, root: Path = HERE, got: dict = None) -> str:
    """One line for docs/results.md under a finding (indented into its list item): the verdicts of its
    rules, setting by setting; the numbers are docs/settings.md's (got: verdicts(root), if known)."""
    got = got or verdicts(root)
    cells = []
    for label, _ in SETTINGS:
        said = [got[rule][label][0] for rule, _ in WHERE_LINES[fid]]
        if all(v == "not measured" for v in said):  # the settings page lists it; this line names what was measured
            continue
        cells.append(f"{label}: " + ", ".join(f"{name} {v}".strip() for (_, name), v in zip(WHERE_LINES[fid], said)))
    return "   *Where it holds:* " + " · ".join(cells) + "."


if __name__ == "__main__":
    print(settings_table())
