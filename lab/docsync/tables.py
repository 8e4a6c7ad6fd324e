"""The tables in README.md and the docs/ pages. Each sits between the markers
<!-- <name>-table:start --> and <!-- <name>-table:end --> of one page, and is written there by
code, never by hand: a script's own table is copied from what it wrote to results/ (sync_table),
and the glance table, the copy family's table, the current models' table and the field's are
computed from results/*.json of three scripts (glance_table, copy_family_table, current_models_table,
field_table; sync_glance writes them), the recipe tables from experiments/recipe_ablation.py's, experiments/anchor_xtransformers.py's
and extrapolation_test.py's JSON (recipe_table, recipe_seeds_table, seeds_vs_anchor; sync_recipe).
Only for the repository's own results/ (eval_common.is_repo_results), never for smoke runs or
previews.

extrapolation_test.py and long_context_test.py call sync_table and sync_glance when they redraw,
experiments/copy_calibration.py sync_table, experiments/recipe_ablation.py and experiments/anchor_xtransformers.py sync_recipe.
tests/test_readme.py checks that every page holds what these give.
"""
from dataclasses import replace
from pathlib import Path

from lab.docsync import findings
from lab import row_names
import schemes
import tiny_lm
from lab import atomic
from lab.eval_common import GLANCE_ROWS, HERE, code_lines, is_repo_results, own_definitions, read_results


def sync_table(name: str, table_md: str, results: Path) -> None:
    """Copy a table into the page (README.md or docs/*.md) that holds its markers
    <!-- name-table:start --> ... <!-- name-table:end -->, so no page shows a number a script
    did not write. Only for the repository's own results/ (never for smoke runs or previews)."""
    if not is_repo_results(results):
        return
    start, end = f"<!-- {name}-table:start -->", f"<!-- {name}-table:end -->"
    for page in [HERE / "README.md"] + sorted((HERE / "docs").glob("*.md")):
        text = page.read_text(encoding="utf-8") if page.exists() else ""
        a, b = text.find(start), text.find(end)
        if a >= 0 and b > a:
            # strip("\n"), not strip(), and the end marker's indent kept: a block inside a list item stays in it
            indent = text[text.rfind("\n", 0, b) + 1:b]
            indent = indent if not indent.strip() else ""
            atomic.atomic_write_text(page, text[:a + len(start)] + "\n" + table_md.strip("\n") + "\n" + indent
                                      + text[b:])


def glance_table(results: Path) -> str:
    """The table at a glance (docs/results.md), computed from results/*.json by the rules stated under it.
    The first six columns are the text-trained model's: breaks = ppl@4096 / ppl@256 > 1.2; uses
    context beyond 200 characters = effective context >= 448; passkey = exact match >= 50% at every
    d <= 200. The last two are its copy-trained twin's (<scheme>_copy, a separate model trained on
    the copy curriculum), named in its own column: the same passkey at d <= 200 (the curriculum's
    own format and distances) and at d = 512 (beyond the training window); "not measured" where a
    row has no such measurement."""
    ex = read_results(results / "extrapolation.json")
    ctx = {r["variant"]: r for r in read_results(results / "context_use.json").get("rows", [])}
    ret = {}
    for r in read_results(results / "retrieval.json").get("rows", []):
        ret.setdefault(r["variant"], {})[r["distance"]] = r["exact"]
    rows = {r["variant"]: r for r in ex.get("rows", [])}
    lines = ["| text-trained model | ppl@256 | ppl@4096 | breaks past 256? | uses context beyond 200 chars? | "
             "passkey at d <= 200? | copy-trained twin | twin's passkey, d <= 200 / d = 512 |",
             "|---|---|---|---|---|---|---|---|"]
    for name in (n for n in (*schemes.names(), *GLANCE_ROWS) if n in rows and n not in schemes.field()):
        r = rows[name]
        breaks = "yes" if r["ppl_4096"] / r["ppl_256"] > 1.2 else "no"
        c = ctx.get(name)
        uses = "not measured" if c is None else ("yes" if c["effective_context"] >= 448 else "no") + \
            f" ({c['effective_context']})"
        copy = row_names.copy_counterpart(name)
        own, twin = _passkey(ret.get(name, {})), ret.get(copy, {})
        own = "not measured" if own is None else f"{_yes(own)} ({100 * own:.0f}%)"
        near = _passkey(twin)
        if near is None or 512 not in twin:
            copy, retr = copy if copy in ret else "-", "not measured"
        else:
            retr = f"{_yes(near)} / {_yes(twin[512])} ({100 * near:.0f}% / {100 * twin[512]:.0f}%)"
        lines.append(f"| {name} | {r['ppl_256']:.2f} | {r['ppl_4096']:.2f} | {breaks} | {uses} | {own} | {copy} | "
                     f"{retr} |")
    return "\n".join(lines) + "\n"


def _passkey(at: dict):
    """The worst exact match at d <= 200 of one row's {distance: exact}, or None if none was measured."""
    near = [e for d, e in at.items() if d <= 200]
    return min(near) if near else None


def _yes(exact: float) -> str:
    return "yes" if exact >= 0.5 else "no"


def copy_family_table(results: Path) -> str:
    """The copy family at a glance, from retrieval.json and extrapolation.json ("" without copy
    rows): for each copy-trained row, its text perplexity beside its text-trained counterpart's,
    and the passkey inside the training window (the worst cell at d <= 200) and beyond it."""
    ex = read_results(results / "extrapolation.json").get("rows", [])
    ppl = {r["variant"]: r.get(f"ppl_{r['train_len']}") for r in ex if "train_len" in r}
    by = {}
    for r in read_results(results / "retrieval.json").get("rows", []):
        if r["family"] == "copy":
            by.setdefault(r["variant"], {})[r["distance"]] = r
    if not by:
        return ""
    ds = sorted({d for at in by.values() for d in at})
    within, beyond = [d for d in ds if d <= 200], [d for d in ds if d > 200]
    lines = ["| model | text ppl | its text-trained counterpart | exact match, worst at d <= 200 | per-character "
             "accuracy, worst at d <= 200 | " + " | ".join(f"exact d={d}" for d in beyond) + " |",
             "|" + "---|" * (5 + len(beyond))]
    for name, at in by.items():
        model = row_names.parse(name).plain_row  # a scaled or switched row: its checkpoint's ppl
        twin = row_names.text_counterpart(name)  # irope_copy_notemp: irope
        cells = [name, f"{ppl[model]:.2f}" if ppl.get(model) else "-",
                 f"{twin} {ppl[twin]:.2f}" if ppl.get(twin) else "-"]
        for key in ("exact", "per_char"):
            d = min((d for d in within if d in at), key=lambda d: at[d][key], default=None)
            cells.append("-" if d is None else f"{100 * at[d][key]:.0f}% (d={d})")
        cells += [f"{100 * at[d]['exact']:.0f}%" if d in at else "-" for d in beyond]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "text ppl: perplexity per character on held-out text at the model's training length "
              "(results/extrapolation.csv; '-': not measured); a scaled or switched row shows its checkpoint's. "
              "The family's bar: at least 90% per character and 50% exact match at every d <= 200 "
              "(results/retrieval.csv)."]
    return "\n".join(lines) + "\n"


CURRENT_ROWS = ("rope", "rope_partial25", "rope_p75", "irope_global", "irope", "irope (no temp)", "gemma_hybrid")


def current_models_table(results: Path) -> str:
    """docs/current_models.md's table, from extrapolation.json and context_use.json: for plain RoPE
    and the current models' text-trained rows, ppl at the training length seed by seed (seed 0,
    then the rows of runs/seed1, runs/seed2, ...), ppl@4096 of seed 0, and the loss on fixed
    targets with no context, 192 characters and the longest context measured. "" without rows."""
    ex_data = read_results(results / "extrapolation.json")
    ex, longest = ex_data.get("rows", []), max(ex_data.get("meta", {}).get("lengths", [4096]))
    ctx = read_results(results / "context_use.json")
    by_ctx = {r["variant"]: r for r in ctx.get("rows", [])}
    contexts = ctx.get("meta", {}).get("contexts", [])
    shown = [c for c in (0, 192, max(contexts, default=0)) if c in contexts]
    seeds, plain = {}, {}
    for r in ex:
        row = row_names.parse(r["variant"])
        name = replace(row, seed="").name  # rope [seed1] -> rope
        if name in CURRENT_ROWS:
            seeds.setdefault(name, []).append((row.seed, r[f"ppl_{r['train_len']}"]))
            if not row.seed:
                plain[name] = r
    names = [n for n in CURRENT_ROWS if n in plain or n in by_ctx]
    if not names or not any(n != "rope" for n in names):
        return ""
    lines = [f"| variant | ppl at the training length, seed 0 / 1 / 2 | ppl@{longest} (seed 0) | loss with "
             + " / ".join(str(c) for c in shown) + " characters of context |", "|---|---|---|---|"]
    for name in names:
        ppl = " / ".join(f"{v:.2f}" for _, v in sorted(seeds.get(name, []))) or "-"
        far = plain.get(name, {}).get(f"ppl_{longest}")
        c = by_ctx.get(name)
        loss = " / ".join(f"{c[f'c{k}']:.3f}" for k in shown) if c else "-"
        lines.append(f"| {name} | {ppl} | {'-' if far is None else f'{far:.2f}'} | {loss} |")
    return "\n".join(lines) + "\n"


def text_retrieval_paragraph(results: Path) -> str:
    """docs/long_context.md's paragraph on the text-trained models' retrieval, computed from
    results/retrieval.json: their best exact match and per-character accuracy (against a uniform guess
    among the key's letters, and the same model's control window), the range of their copy gains, and
    how many gain intervals lie above zero. "" without text rows."""
    data = read_results(Path(results) / "retrieval.json")
    rows = [r for r in data.get("rows", []) if r["family"] == "text"]
    if not rows:
        return ""
    letters = len(data["meta"].get("key_alphabet", "")) or 26
    best = max(rows, key=lambda r: (r["per_char"], r["distance"]))
    top = max(rows, key=lambda r: r["gain"])
    above = [r for r in rows if r["gain_lo"] > 0]
    exact = max(r["exact"] for r in rows)
    n = sorted({r["trials"] for r in rows})
    says = f"is 0% in all {len(rows)} cells" if exact == 0 else f"is at most {100 * exact:.0f}% over their {len(rows)} cells"
    return (f"**The text-trained models do not copy.** Exact match {says} ({' or '.join(map(str, n))} windows "
            f"each). Per-character accuracy is at most "
            f"{100 * best['per_char']:.2f}% ({best['variant']} at d = {best['distance']}, where its control window, "
            f"with no first copy to read, scores {100 * best['per_char_control']:.2f}%), against "
            f"{100 / letters:.1f}% for a uniform guess among the {letters} letters. The copy gain lies between "
            f"{min(r['gain'] for r in rows):+.2f} and {top['gain']:+.2f} nats/char (the largest: {top['variant']} "
            f"at d = {top['distance']}); {len(above)} of its {len(rows)} intervals have a lower bound above zero, "
            f"none above {max(r['gain_lo'] for r in rows):+.2f}.\n")


FIELD_ANCHORS = ("sin", "rope", "alibi", "none")  # ALiBi's Fig. 1 set and NoPE, beside the field's rows
FIELD_OPTIONS = {"fox": ("fox{gate_bias=5.0}", "fox{decay_max=256.0}")}  # option rows measured, after their scheme
FIELD_AFTER = ("rope_sink", "alibi_sink", "rope_ft_drope", "rope_ft_keep", "rope_ft_drope_full", "rope_ft_keep_full")


def field_text() -> tuple:
    """The field's text rows in table order: each field scheme (schemes.field()) and its option rows, then
    the sink models and the DroPE rows."""
    return (*(n for s in schemes.field() for n in (s, *FIELD_OPTIONS.get(s, ()))), *FIELD_AFTER)


def _cp(r: dict) -> str:
    """Exact match of one retrieval cell with its Clopper-Pearson interval, in percent."""
    return f"{100 * r['exact']:.0f}% [{100 * r['exact_lo']:.0f}, {100 * r['exact_hi']:.0f}]"


def field_table(results: Path) -> str:
    """docs/field.md's table, from extrapolation.json, context_use.json and retrieval.json: for the
    field's text models (field_text()) beside sin, rope, alibi and none, ppl at 256 (seed 0, and the
    mean over the seeds run, with their number), at 4096, whether it breaks (the glance table's rule:
    ppl@4096 / ppl@256 > 1.2), its effective context; and its copy twin's exact match, the worst at
    d <= 200 and at each d beyond the window with its Clopper-Pearson interval. "" without a field row."""
    ex = read_results(results / "extrapolation.json").get("rows", [])
    ctx = {r["variant"]: r for r in read_results(results / "context_use.json").get("rows", [])}
    ret = {}
    for r in read_results(results / "retrieval.json").get("rows", []):
        ret.setdefault(r["variant"], {})[r["distance"]] = r
    plain, seeds = {}, {}
    for r in ex:
        row = row_names.parse(r["variant"])
        if row.switch or row.scaling or r.get("train_len") != 256:
            continue
        name = replace(row, seed="").name
        seeds.setdefault(name, []).append(r["ppl_256"])
        if not row.seed:
            plain[name] = r
    if not any(n in plain for n in field_text()):
        return ""
    far = sorted({d for at in ret.values() for d in at if d > 200})
    lines = ["| text model | ppl@256, seed 0 (mean of n) | ppl@4096 | breaks past 256? | effective context | "
             "copy twin | twin's exact match, worst at d <= 200 | " + " | ".join(f"d = {d}" for d in far) + " |",
             "|" + "---|" * (7 + len(far))]
    for name in (n for n in (*FIELD_ANCHORS, *field_text()) if n in plain):
        r, s = plain[name], seeds[name]
        ppl = f"{r['ppl_256']:.2f}" + (f" ({sum(s) / len(s):.2f} of {len(s)})" if len(s) > 1 else "")
        c = ctx.get(name)
        twin = row_names.copy_counterpart(name)
        at = ret.get(twin, {})
        near = [at[d] for d in at if d <= 200]
        cells = [name, ppl, f"{r['ppl_4096']:.2f}", "yes" if r["ppl_4096"] / r["ppl_256"] > 1.2 else "no",
                 "-" if c is None else str(c["effective_context"]), twin if at else "-",
                 _cp(min(near, key=lambda x: x["exact"])) if near else "-"]
        cells += [_cp(at[d]) if d in at else "-" for d in far]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "ppl: perplexity per character on held-out text (results/extrapolation.csv); effective context: "
              "the largest context whose loss on fixed targets beats every shorter one by more than the 95% "
              "interval of the difference (results/context_use.csv); exact match: the whole key copied, with its "
              "Clopper-Pearson 95% interval (results/retrieval.csv), of the twin's seed 0 (other seeds: the seeds "
              "table of results/retrieval.md); '-': not measured yet."]
    return "\n".join(lines) + "\n"


# What differs between our scheme and x-transformers' beyond the recipe (docs/recipe.md lists the recipe's
# differences, which every row shares): experiments/anchor_xtransformers.py's SCHEMES comment, read from its 2.31.10 source.
ANCHOR_DIFFERS = {
    "rope": "none beyond the recipe (the whole head turned, as ours)",
    "alibi": "none beyond the recipe (the same slopes)",
    "t5": "its table starts at N(0, 1) and is multiplied by sqrt(head dim) = 5.7, so its bias has std 5.7 at "
          "step 0 (ours: 0.09, Hugging Face's init); the same 32 causal buckets to 128, one table per model",
    "xpos": "positions centred at the middle of each input (ours: a fixed centre at 128; a centre shared by q and k "
            "cancels in q.k, so it does not explain the gap at 4096); scale base 512 as ours",
    "fox": "the gate's bias starts at 5 (gates near 1, little forgetting; ours at 0, the FoX reference's); "
           "the same gate sigma(w x + b) per head and layer",
}


def field_anchor_table(results: Path) -> str:
    """docs/field.md's independent check: our seed-0 row of each field scheme x-transformers has, and of rope and
    alibi (whose gap is the recipe's, docs/recipe.md), beside x-transformers' seed 0 (anchor_xtransformers.json),
    at 256 and 4096, with ours / theirs at 256 and what differs. "" until a field scheme has an anchor row."""
    anchor = read_results(Path(results) / "anchor_xtransformers.json")
    theirs = {r["scheme"]: r for r in anchor.get("rows", []) if r.get("seed", 0) == 0}
    ours = {r["variant"]: r for r in read_results(Path(results) / "extrapolation.json").get("rows", [])}
    if not any(s in theirs and s in ours for s in schemes.field()):
        return ""
    L0, L1 = anchor["meta"]["lengths"][0], anchor["meta"]["lengths"][-1]
    lines = [f"| scheme | ours, ppl@{L0} | x-transformers, ppl@{L0} | ours / theirs @{L0} | ours, ppl@{L1} | "
             f"x-transformers, ppl@{L1} | what differs besides the recipe |", "|---|---|---|---|---|---|---|"]
    for name in ("rope", "alibi", *schemes.field()):
        if name in theirs and name in ours:
            a, b = ours[name], theirs[name]
            lines.append(f"| {name} | {a[f'ppl_{L0}']:.2f} | {b[f'ppl@{L0}']:.2f} | {a[f'ppl_{L0}'] / b[f'ppl@{L0}']:.3f} | "
                         f"{a[f'ppl_{L1}']:.2f} | {b[f'ppl@{L1}']:.2f} | {ANCHOR_DIFFERS.get(name, '-')} |")
    lines += ["", f"Seed 0 of both. ours: results/extrapolation.json (train_compare.py's recipe); x-transformers: "
              f"results/anchor_xtransformers.json (`python experiments/anchor_xtransformers.py --schemes t5,xpos,fox`), the same "
              f"batches, scored on {anchor['meta']['tokens']:,} held-out characters."]
    return "\n".join(lines) + "\n"


def field_cost_table(results: Path) -> str:
    """docs/field.md's cost table: for rope, alibi and the field's schemes, the file its core lives in and
    its code lines (eval_common.code_lines: the plain form before the first fence, as extrapolation.csv's
    core LoC; a file several schemes share, whole, once for each), the parameters it adds (params_added),
    and one forward of the whole model at the longest benchmarked length, time and peak memory, with their
    ratio to RoPE's (benchmark.json). "" until the benchmark has RoPE and a field scheme."""
    bench = read_results(Path(results) / "benchmark.json")
    if not bench or "rope" not in bench["config"]["schemes"] or \
            not any(s in bench["config"]["schemes"] for s in schemes.field()):
        return ""
    T = bench["config"]["lengths"][-1]
    ms = {s: t * 1e3 for s, L, t in bench["times"] if L == T}
    mib = {s: m / 2 ** 20 for s, what, m in bench["memory"] if what == f"forward {T}"}
    ex = {r["variant"]: r for r in read_results(Path(results) / "extrapolation.json").get("rows", [])}
    lines = [f"| scheme | file | its code lines | parameters added | forward ms @{T} | / RoPE | "
             f"peak MiB @{T} | / RoPE |", "|---|---|---|---|---|---|---|---|"]
    for name in ("rope", "alibi", *schemes.field()):
        if name not in ms or name not in ex:
            continue
        r = ex[name]
        entry = schemes.get(name)
        pos_file = Path(entry.pos_file)
        lines.append(f"| {name} | {pos_file.name} | {code_lines(pos_file, only=own_definitions(entry))} | "
                     f"{r['params_added']:,} | "
                     f"{ms[name]:.0f} | {ms[name] / ms['rope']:.2f} | "
                     + (f"{mib[name]:.0f} | {mib[name] / mib['rope']:.2f} |" if name in mib and "rope" in mib else "- | - |"))
    lines += ["", f"Code lines: the plain form of the scheme's file (before its first `# ----` fence) without blank "
              f"lines, comments, docstrings and its self-check; in field_relbias.py, which holds t5, kerple and fire, "
              f"each counts its own classes and the definitions they use. Time and memory: results/benchmark.md (`python experiments/benchmark.py`), one "
              f"forward of the whole tiny LM at batch 1 on {bench['machine'].split(';')[0]}; parameters added to the "
              f"4-layer model, from results/extrapolation.csv."]
    return "\n".join(lines) + "\n"


def sync_settings(results: Path) -> None:
    """After a run wrote one of the settings' folders (results/, results/sympy, results/gpu): docs/settings.md's
    table of the findings in every setting, the second corpus's own tables, and docs/results.md's lines on where
    each finding holds (lab/docsync/findings.py)."""
    if not any(Path(results).resolve() == (HERE / folder).resolve() for _, folder in findings.SETTINGS):
        return
    repo = HERE / "results"
    got = findings.verdicts()  # every setting's folder, not only this one
    sync_table("settings", findings.settings_table(got=got), repo)
    for fid in findings.WHERE_LINES:
        sync_table(f"where{fid}", findings.where_line(fid, got=got), repo)
    for name in ("extrapolation", "context_use"):  # the second corpus's tables, as its scripts wrote them
        md = repo / "sympy" / f"{name}.md"
        if md.exists():
            sync_table(f"sympy_{name}", md.read_text(encoding="utf-8"), repo)


def sync_glance(results: Path) -> None:
    """Recompute the glance table, the copy family's table and the current models' table and write
    them into their pages (repository results only)."""
    if (Path(results) / "extrapolation.json").exists():
        sync_table("glance", glance_table(Path(results)), results)
    for name, table in (("copy_family", copy_family_table(Path(results))),
                        ("current_models", current_models_table(Path(results))),
                        ("text_retrieval", text_retrieval_paragraph(Path(results))),
                        ("field", field_table(Path(results))),
                        ("field_anchor", field_anchor_table(Path(results))),
                        ("field_cost", field_cost_table(Path(results)))):
        if table:
            sync_table(name, table, results)
    if is_repo_results(results):
        from lab.docsync import prose_numbers  # the numbers inside sentences (its module docstring)
        prose_numbers.sync(Path(results))


def recipe_table(results: Path, anchor: bool = True) -> str:
    """The recipe ablation's rows (results/recipe_ablation.json, in its order) and, with
    anchor=True, the independent anchor's seed 0 (results/anchor_xtransformers.json, last): ppl at
    the first and last scored length for each scheme, the change against the baseline row in brackets, and the ALiBi / RoPE ratio
    at the training length where both were scored. "" when there is no ablation."""
    data = read_results(Path(results) / "recipe_ablation.json")
    if not data:
        return ""
    # other seeds: recipe_seeds_table; the field's schemes (t5's controls): docs/field.md's anchor section
    rows = [dict(r) for r in data["rows"] if row_seed(r) == 0 and r["scheme"].partition("{")[0] not in schemes.field()]
    other = read_results(Path(results) / "anchor_xtransformers.json") if anchor else {}
    if other and other["meta"]["lengths"] == data["meta"]["lengths"]:
        half = "x-transformers, its default RoPE on half of each head"  # a row of its own, in the rope columns
        ablated = {r["scheme"] for r in rows}  # the field's anchors (t5, xpos, fox) have docs/field.md's table
        rows += [dict(r, knob="x-transformers (experiments/anchor_xtransformers.py)") for r in other["rows"]
                 if r.get("seed", 0) == 0 and r["scheme"] in ablated]
        rows += [dict(r, knob=half, scheme="rope") for r in other["rows"]
                 if r.get("seed", 0) == 0 and r["scheme"] == "rope_half"]
    schemes_ = list(dict.fromkeys(r["scheme"] for r in rows))
    by = {(r["knob"], r["scheme"]): r for r in rows}
    L0, L1 = data["meta"]["lengths"][0], data["meta"]["lengths"][-1]
    ratio = {"rope", "alibi"} <= set(schemes_)
    head = "| knob | " + " | ".join(f"{s} ppl@{L0} | {s} ppl@{L1}" for s in schemes_) + \
           (f" | alibi / rope @{L0} |" if ratio else " |")
    lines = [head, "|---|" + "---|" * (2 * len(schemes_) + ratio)]
    for knob in dict.fromkeys(r["knob"] for r in rows):
        cells = []
        for s in schemes_:
            r, b = by.get((knob, s)), by.get(("baseline", s))
            for L in (L0, L1):
                v = None if r is None else r[f"ppl@{L}"]
                rel = "" if v is None or b is None or knob == "baseline" else f" ({100 * (v / b[f'ppl@{L}'] - 1):+.1f}%)"
                cells.append("" if v is None else f"{v:.2f}{rel}")
        if ratio:
            a, o = by.get((knob, "alibi")), by.get((knob, "rope"))
            cells.append(f"{a[f'ppl@{L0}'] / o[f'ppl@{L0}']:.3f}" if a and o else "")
        lines.append(f"| {knob} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def row_seed(row: dict) -> int:
    """The training seed of a recipe_ablation row (rows from before it was recorded: seed 0)."""
    return (row.get("train_config") or {}).get("seed", 0)


def sync_recipe(results: Path) -> None:
    """Write recipe_table, recipe_seeds_table and seeds_vs_anchor into their page (docs/recipe.md), and
    field_anchor_table into docs/field.md; repository results only."""
    for name, table in (("recipe", recipe_table(Path(results))), ("recipe_seeds", recipe_seeds_table(Path(results))),
                        ("anchor_seeds", seeds_vs_anchor(Path(results))),
                        ("field_anchor", field_anchor_table(Path(results)))):
        if table:
            sync_table(name, table, results)


def main_seeds(results: Path, L0: int) -> dict:
    """{(scheme, seed): ppl at L0} of train_compare.py's runs of the five schemes in
    results/extrapolation.json (rows rope, rope [seed1], ...: the checkpoint rope of runs/main,
    runs/seed1, ...), without scaled or switched rows."""
    out = {}
    for r in (read_results(Path(results) / "extrapolation.json") or {}).get("rows", []):
        row = row_names.parse(r["variant"])
        seed = row.seed.removeprefix("seed") or "0"  # "" for runs/main: seed 0
        if not row.scaling and not row.switch and seed.isdigit() and f"ppl_{L0}" in r:
            out[(row.checkpoint, int(seed))] = r[f"ppl_{L0}"]
    return out


def recipe_seeds_table(results: Path) -> str:
    """The knobs of results/recipe_ablation.json trained at more than one seed, against the recipe
    at the same seeds: ppl at the training length seed by seed and the means. The recipe's value
    of a seed is the ablation's baseline row of that seed, else train_compare.py's run of it
    (main_seeds: the same settings). "" when no knob has a second seed."""
    data = read_results(Path(results) / "recipe_ablation.json")
    if not data:
        return ""
    L0 = data["meta"]["lengths"][0]
    ppl = {(r["knob"], r["scheme"], row_seed(r)): r[f"ppl@{L0}"] for r in data["rows"]}
    base = {**main_seeds(results, L0), **{(s, seed): v for (k, s, seed), v in ppl.items() if k == "baseline"}}
    lines = [f"| knob | scheme | seeds | knob, ppl@{L0} by seed | recipe, by seed | knob, mean | recipe, mean | "
             f"knob / recipe |", "|---|---|---|---|---|---|---|---|"]
    for knob, scheme in dict.fromkeys((k, s) for (k, s, _) in ppl if k != "baseline"):
        seeds = sorted(seed for (k, s, seed) in ppl if (k, s) == (knob, scheme) and (s, seed) in base)
        if len(seeds) < 2:
            continue
        a, b = [ppl[(knob, scheme, s)] for s in seeds], [base[(scheme, s)] for s in seeds]
        ma, mb = sum(a) / len(a), sum(b) / len(b)
        lines.append(f"| {knob} | {scheme} | {', '.join(map(str, seeds))} | {' / '.join(f'{v:.2f}' for v in a)} | "
                     f"{' / '.join(f'{v:.2f}' for v in b)} | {ma:.3f} | {mb:.3f} | {ma / mb:.3f} |")
    return "\n".join(lines) + "\n" if len(lines) > 2 else ""


def seeds_vs_anchor(results: Path) -> str:
    """Our rope and alibi against the x-transformers anchor at the training length, seed by seed:
    ours from results/extrapolation.json (rows rope, rope [seed1], ...), the anchor's from
    results/anchor_xtransformers.json; the mean of the seeds both have, and ours / anchor of the
    means. "" until both have a seed of a scheme."""
    anchor = read_results(Path(results) / "anchor_xtransformers.json")
    if not anchor:
        return ""
    L0 = anchor["meta"]["lengths"][0]
    ours = main_seeds(results, L0)
    theirs = {(r["scheme"], r.get("seed", 0)): r[f"ppl@{L0}"] for r in anchor["rows"]}
    lines = [f"| scheme | ours, ppl@{L0} by seed | x-transformers, by seed | ours, mean | x-transformers, mean | "
             f"ours / x-transformers |", "|---|---|---|---|---|---|"]
    # (our scheme, theirs, label): x-transformers' rope turns the whole head as ours does; rope_half is its default
    for scheme, their, label in (("rope", "rope", "rope"), ("alibi", "alibi", "alibi"),
                                 ("rope", "rope_half", "rope (theirs on half of each head)")):
        seeds = sorted(s for (sc, s) in ours if sc == scheme and (their, s) in theirs)
        if not seeds:
            continue
        a = [ours[(scheme, s)] for s in seeds]
        b = [theirs[(their, s)] for s in seeds]
        ma, mb = sum(a) / len(a), sum(b) / len(b)
        lines.append(f"| {label} | {' / '.join(f'{v:.2f}' for v in a)} | {' / '.join(f'{v:.2f}' for v in b)} | "
                     f"{ma:.3f} | {mb:.3f} | {ma / mb:.3f} |")
    return "\n".join(lines) + "\n" if len(lines) > 2 else ""
