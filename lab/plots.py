"""Every figure of the evaluation pipeline, drawn from the data stored in results/*.json alone
(no checkpoint needed), under one colour rule.

The rule (colour: how the model meets positions; line: the scaling; marker: the training) and the checks for
lookalike lines and overlapping text live in lab/plot_style.py, the axis and layout helpers in lab/plot_axes.py.
Every function here saves through save(fig, path), which runs both checks; the scripts call these
functions, and their own figures go through save too. Row names are read by row_names.parse
(the grammar: lab/row_names.py).

    ppl_vs_length(path, rows, lengths)          results/extrapolation.json: the headline, <= 8 lines
    ppl_vs_length_all(path, rows, lengths)      the same rows, every one of them (docs/)
    loss_vs_position(path, rows, curves, lengths)
    train_curves(path, logs, finetunes)         results/train_log.json
    context_use(path, rows, meta)               results/context_use.json (+ context_use_all.png)
    retrieval(path, rows, meta)                 results/retrieval.json: the copy family (+ retrieval_all.png)
    copy_calibration(path, curves)              results/copy_calibration.json
"""
import math
from pathlib import Path

from lab import row_names
import schemes
from lab.plot_axes import _end_labels, _grid, _log2_x, _mark_off_axes, _plain_log_y, _ref, _tight
from lab.plot_style import _line, _plt, save, style

SCHEMES = schemes.REGISTRY.keys()  # every registered scheme (a live view: later registrations too)


def headline() -> tuple:
    """The lines of the headline figure: the schemes (the field's have their own panel: field()), RoPE + YaRN
    without training, RoPE fine-tuned with YaRN."""
    return (*(s for s in SCHEMES if s not in field()), "rope+yarn", "rope_ft_yarn")


MAX_LINES = 8  # a panel holds at most this many data lines (STYLE.md, point 15)


# ----------------------------------------------------------------------------- which rows go in which panel

HYBRIDS = ("irope", "gemma_hybrid", "irope_global", "hybrid_rope")  # layouts that mix layer kinds (lab/variants.py)
STREAM_SWITCHES = ("streaming", "window")  # lab/streaming.py's evaluation switches: a panel of their own
# the field's comparison set: its schemes (field_*.py), the sink models, and DroPE with its
# control (recipes drope and keep, variants.RECALIBRATIONS)
FIELD_SINKS, FIELD_RECIPES = ("rope_sink", "alibi_sink"), ("drope", "keep", "drope_full", "keep_full")


def field() -> tuple:
    """The field's rows: its schemes (schemes.field(), every field_*.py) and the sink models."""
    return (*schemes.field(), *FIELD_SINKS)


def _group(name: str) -> str:
    """The panel a row belongs to: five (the schemes), scaled (RoPE + a training-free scaling),
    fixed (the same at a fixed factor), finetune, streaming (StreamingLLM and its window), field (field();
    field_scaled: one of them with a scaling), hybrid (mixed layer layouts), option (RoPE's options: rope_theta10,
    rope_p75, or a scheme with options set that uses RoPE's tables), scheme_option (every other base variant: a
    scheme file's with options set, kerple_power{p=2}, or a scheme not registered now); a copy-trained row gets
    "copy_" before its group."""
    r = row_names.parse(name)
    if r.switch in STREAM_SWITCHES:
        group = "streaming"
    elif r.base.partition("{")[0] in field() or r.finetune in FIELD_RECIPES:  # fox{gate_bias=5.0}: fox's
        group = "field_scaled" if r.scaling else "field"  # xpos+yarn: a field scheme that takes RoPE's scalings
    elif r.finetune is not None:
        group = "finetune"
    elif r.scaling:
        group = "fixed" if r.fixed else "scaled"
    elif r.base in HYBRIDS:
        group = "hybrid"
    elif "{" in r.base:  # beside RoPE's options only if its scheme turns q/k with RoPE's tables
        scheme = schemes.REGISTRY.get(r.base.partition("{")[0])
        group = "option" if scheme is not None and scheme.rope_options else "scheme_option"
    else:  # lab/variants.py names RoPE's options rope_<option>
        group = "five" if r.base in SCHEMES else "option" if r.base.startswith("rope_") else "scheme_option"
    return ("copy_" if r.copy else "") + group


def _panels(names, spec) -> list:
    """[(title, group, names)] from spec [(title, group, baselines)]: each panel holds the names of its group
    (after the baselines that exist), cut into pieces of at most MAX_LINES; groups absent are dropped."""
    out = []
    for title, group, baselines in spec:
        members = [n for n in names if _group(n) == group and n not in baselines]
        if not members:
            continue
        base = [b for b in baselines if b in names]
        step = max(1, MAX_LINES - len(base))
        for k in range(0, len(members), step):
            part = "" if len(members) <= step else f" ({k // step + 1})"
            out.append((title + part, group, base + members[k:k + step]))
    return out


# ----------------------------------------------------------------------------- perplexity against length

def _gloss(row) -> str:
    """A headline label: the name, and what a reader needs to tell the RoPE rows apart."""
    name = row["variant"]
    r = row_names.parse(name)
    if r.finetune is not None:
        return f"{name} (fine-tuned at {row['train_len']})"
    if r.scaling:
        return f"{name} (no training)"
    return name


def ppl_vs_length(path, rows, lengths) -> None:
    """The headline: perplexity against evaluation length for the five schemes, RoPE + YaRN without
    training and RoPE fine-tuned with YaRN (whichever exist in rows), labelled at their ends."""
    plt = _plt()
    train_len = rows[0]["train_len"]
    pick = [r for r in rows if r["variant"] in headline()] or rows  # rows of schemes not loaded now: all of them
    fig, ax = plt.subplots(figsize=(10, 5.6))
    values = [r[f"ppl_{L}"] for r in pick for L in lengths]
    ends = []
    for r in pick:
        ys = [r[f"ppl_{L}"] for L in lengths]
        line = _line(ax, lengths, ys, r["variant"])
        ends.append((ys[-1], _gloss(r), line.get_color()))
    _ref(ax, "x", train_len, f"training length {train_len}")
    _log2_x(ax, lengths)
    ax.set_xlim(lengths[0] / 1.15, lengths[-1] * 1.15)
    _plain_log_y(ax, min(values) / 1.1, max(values) * 1.1)
    _end_labels(ax, lengths[-1], ends)
    ax.set_xlabel("evaluation length (characters per window)")
    ax.set_ylabel("perplexity per character (log scale)")
    ax.set_title(f"Trained on {train_len}-character windows, evaluated on longer ones: lower is better")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.subplots_adjust(right=0.74)  # room for the labels at the lines' ends
    save(fig, path)


def _same_as(rows, lengths) -> dict:
    """{name: earlier name} for rows whose every value equals an earlier row's (drawn on top of it)."""
    first, out = {}, {}
    for r in rows:
        key = tuple(r[f"ppl_{L}"] for L in lengths)
        if key in first:
            out[r["variant"]] = first[key]
        first.setdefault(key, r["variant"])
    return out


PPL_PANELS = [("the five schemes (other seeds grey)", "five", ()),
              ("RoPE + a training-free scaling, factor from the window", "scaled", ("rope",)),
              ("RoPE + a training-free scaling at a fixed factor", "fixed", ("rope",)),
              ("fine-tuned at 4x the training length", "finetune", ("rope", "alibi")),
              ("RoPE options", "option", ("rope",)),
              ("other schemes and their options", "scheme_option", ("rope", "alibi")),
              ("hybrid layer layouts", "hybrid", ("rope",)),
              ("StreamingLLM (4 first tokens + the latest) and a plain window, a cache of 256", "streaming",
               ("rope", "alibi")),
              ("the field's comparison set", "field", ("rope", "alibi")),
              ("the field's schemes + RoPE's training-free scalings", "field_scaled", ()),
              ("the copy-trained family", "copy_five", ()),
              ("the copy-trained family: hybrid layouts", "copy_hybrid", ("rope_copy",)),
              ("the copy-trained family: fine-tunes", "copy_finetune", ("rope_copy", "alibi_copy")),
              ("the copy-trained family: the field's comparison set", "copy_field", ("rope_copy", "alibi_copy")),
              ("the copy-trained family: RoPE options", "copy_option", ("rope_copy",)),
              ("the copy-trained family: other schemes and their options", "copy_scheme_option",
               ("rope_copy", "alibi_copy"))]


def ppl_vs_length_all(path, rows, lengths) -> None:
    """Every row of extrapolation.json (the full-detail figure for docs/), one panel per family of rows
    of at most MAX_LINES lines; other seeds thin and grey in the first; a row drawn exactly on another
    says so in its label."""
    plt = _plt()
    train_len = rows[0]["train_len"]
    by = {r["variant"]: r for r in rows}
    seeds = [n for n in by if row_names.parse(n).seed]
    panels = _panels([n for n in by if n not in seeds], PPL_PANELS)
    fig, axes = _grid(plt, len(panels), width=6.6, height=4.4, sharey=True)
    values = [r[f"ppl_{L}"] for r in rows for L in lengths]
    for k, (ax, (title, group, names)) in enumerate(zip(axes, panels)):
        if k == 0:
            for j, n in enumerate(seeds):
                _line(ax, lengths, [by[n][f"ppl_{L}"] for L in lengths], n, label="other seeds" if j == 0 else "_seed")
        same = _same_as([by[n] for n in names], lengths)
        for n in names:
            _line(ax, lengths, [by[n][f"ppl_{L}"] for L in lengths], n,
                  label=n + (f" (under {same[n]})" if n in same else ""))
        _ref(ax, "x", train_len, label=f"training length {train_len}")
        _log2_x(ax, lengths)
        _plain_log_y(ax, min(values) / 1.1, max(values) * 1.1)
        ax.set_title(f"({chr(ord('a') + k)}) {title}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    for ax in axes[::2]:
        ax.set_ylabel("perplexity per character (log scale)")
    for ax in axes[-2:]:
        ax.set_xlabel("evaluation length (characters per window)")
    fig.suptitle(f"Every row: trained at {train_len} (fine-tunes at their own length), evaluated longer", fontsize=11)
    _tight(fig, rect=(0, 0, 1, 0.985))
    save(fig, path)


def _binned(values, edges) -> list:
    """Mean of values[a-1 : b-1] over each bin [a, b) of 1-based positions (a single position if b = a)."""
    return [sum(values[a - 1:b - 1]) / (b - a) if b > a else values[a - 1] for a, b in zip(edges, edges[1:])]


def loss_vs_position(path, rows, curves, lengths) -> None:
    """Per position of the longest windows: (a) the raw loss, (b) minus the loss of the same
    character in the shortest windows, which cancels how hard the text is there."""
    import numpy as np
    plt = _plt()
    train_len, L = rows[0]["train_len"], lengths[-1]
    names = [r["variant"] for r in rows if r["variant"] in headline() and r["variant"] in curves]
    edges = np.unique(np.logspace(0, math.log10(L), 60).astype(int).clip(1, L)).tolist()  # log-spaced bins
    xs = [(a + b) / 2 for a, b in zip(edges, edges[1:])]
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5))
    for name in names:
        for ax, key in zip(axes, ("loss", "minus_short")):
            _line(ax, xs, _binned(curves[name][key], edges), name, markevery=6, ms=5, lw=1.5)
    for ax in axes:
        _ref(ax, "x", train_len, f"training length {train_len}")
        _log2_x(ax, [4 ** k for k in range(int(math.log(L, 4)) + 1)])
        ax.set_xlabel("position in the window (log scale)")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("mean loss (nats/char)")
    axes[0].set_title(f"(a) loss at each position of {L}-long windows")
    axes[0].set_ylim(top=min(axes[0].get_ylim()[1], 5.0))
    _ref(axes[1], "y", 0, color="black", ls="-", lw=0.8)
    axes[1].set_ylabel(f"loss minus the same character's loss in {lengths[0]}-long windows")
    axes[1].set_title("(b) the same, text difficulty removed (< 0: the long window helps)")
    axes[1].set_ylim(max(axes[1].get_ylim()[0], -0.5), min(axes[1].get_ylim()[1], 3.0))
    for ax in axes:
        _mark_off_axes(ax)
    if names:  # a redraw whose rows hold none of the headline schemes draws no line to name
        axes[1].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    save(fig, path)


# ----------------------------------------------------------------------------- training

def train_curves(path, logs, finetunes) -> None:
    """Validation loss against step: (a) the five schemes, (b) the other base variants, (c) the
    fine-tunes, on their own axis since they run a tenth of the steps. logs: {variant: {"step",
    "train_loss", "val_loss"}}; finetunes: the names that are fine-tunes."""
    plt = _plt()
    names = [n for n in logs if not row_names.parse(n).copy]  # the copy family: copy_curves
    fts = [n for n in names if n in finetunes]
    five = [n for n in names if n in SCHEMES]
    groups = [("(a) the five schemes", five),
              ("(b) other base variants", [n for n in names if n not in fts and n not in five]),
              ("(c) fine-tunes at 4x length (their own steps)", fts)]
    panels = [(t, ns[k:k + MAX_LINES]) for t, ns in groups for k in range(0, len(ns), MAX_LINES)]
    # at least 7 inches: one panel (the preview's five schemes) must still hold the one-line title
    fig, axes = plt.subplots(1, len(panels), figsize=(max(5.2 * len(panels), 7.0), 4.6), squeeze=False)
    axes = list(axes.flat)
    for ax, (title, members) in zip(axes, panels):
        if ax is not axes[0] and not set(members) & set(fts):
            ax.sharey(axes[0])  # base variants on one scale; fine-tunes on their own, to be readable
        for n in members:
            _line(ax, logs[n]["step"], logs[n]["val_loss"], n, ms=3, lw=1.5)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("optimizer step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_ylabel("validation loss (nats/char)")
    axes[0].set_ylim(top=min(axes[0].get_ylim()[1], 3.5))
    fig.suptitle("Training curves: validation loss (training loss per step: train_log.csv)")
    _tight(fig)
    save(fig, path)


def copy_curves(path, logs) -> None:
    """The copy family's base models in training (fine-tunes: the tables): (a) validation loss on
    text, (b) per-character accuracy and (c) exact match of the passkey probe (train_compare: letter keys at d = 32 and 128, 32
    windows each; the last distance probed is drawn), against step. One row of panels per group, the
    field's twins apart from the rest, a group cut into even pieces of at most MAX_LINES. logs:
    train_log.json's, whose copy-trained entries carry "probe"."""
    plt = _plt()
    parsed = {n: row_names.parse(n) for n in logs}
    names = [n for n in logs if parsed[n].copy and parsed[n].finetune is None and logs[n].get("probe")]
    d = sorted(logs[names[0]]["probe"][-1], key=lambda k: int(k[1:]))[-1]  # e.g. "d128"
    rows = []
    for title, members in (("the copy family", [n for n in names if _group(n) != "copy_field"]),
                           ("the field's copy twins", [n for n in names if _group(n) == "copy_field"])):
        if not members:
            continue
        pieces = math.ceil(len(members) / MAX_LINES)
        size = math.ceil(len(members) / max(1, pieces))
        rows += [(title + (f" ({k // size + 1})" if pieces > 1 else ""), members[k:k + size])
                 for k in range(0, len(members), size)]
    panels = [("validation loss on text (nats/char)", None),
              (f"passkey at d = {d[1:]}: per-character accuracy", 0),
              (f"passkey at d = {d[1:]}: exact match", 1)]
    fig, grid = plt.subplots(len(rows), 3, figsize=(16, 4.4 * len(rows)), squeeze=False)
    lowest = min(min(logs[n]["val_loss"]) for n in names)
    for i, (axes, (group, members)) in enumerate(zip(grid, rows)):
        for j, (ax, (title, k)) in enumerate(zip(axes, panels)):
            for n in members:
                h = logs[n]
                ys = h["val_loss"] if k is None else [p[d][k] for p in h["probe"]]
                _line(ax, h["step"], ys, n, ms=2.5, lw=1.4)
            ax.set_title(f"({chr(97 + 3 * i + j)}) {group}: {title}", fontsize=10)
            ax.set_xlabel("optimizer step")
            ax.grid(alpha=0.3)
            if k is not None:
                ax.set_ylim(-0.03, 1.03)
        axes[0].set_ylim(top=min(axes[0].get_ylim()[1], max(3.5, lowest + 1.0)))
        axes[0].legend(fontsize=8)
    fig.suptitle("The copy family in training: text and copying (probe windows are not the retrieval table's)")
    _tight(fig)
    save(fig, path)


# ----------------------------------------------------------------------------- long context

FT_MULT = 4  # fine-tunes train on windows this many times longer (variants.FINETUNES, seq_len_mult)
CONTEXT_PANELS = [("the five schemes", "five", ()),
                  ("RoPE + a training-free scaling, factor from the window", "scaled", ("rope",)),
                  ("RoPE + a training-free scaling at a fixed factor", "fixed", ("rope",)),
                  ("fine-tuned at 4x the training length", "finetune", ("rope", "alibi")),
                  ("RoPE options", "option", ("rope",)),
                  ("other schemes and their options", "scheme_option", ("rope", "alibi")),
                  ("hybrid layer layouts", "hybrid", ("rope",)),
                  ("the field's comparison set", "field", ("rope", "alibi")),
                  ("the field's schemes + RoPE's training-free scalings", "field_scaled", ())]


CONTEXT_EXTRA = ("irope",)  # beside headline(), at most MAX_LINES: the schemes, YaRN, its fine-tune, a hybrid


def _context_axes(ax, cs, target, train_lens) -> None:
    """The x axis of a context-use panel (symlog, a tick per context) and where c + target passes each length."""
    lin = max(1, cs[1] if len(cs) > 1 else 1)
    for L in (L for L in train_lens if L and L - target > 0):  # where the window c + target passes L
        _ref(ax, "x", L - target, f"c + {target} = {L}")
    ax.set_xscale("symlog", linthresh=lin)
    ax.set_xlim(-0.1 * lin, cs[-1] * 1.15)
    ax.set_xticks(cs, [str(c) for c in cs])
    ax.set_xlabel("visible context c before the targets (characters)")
    ax.grid(alpha=0.3)


def context_use(path, rows, meta) -> None:
    """The headline of context use: loss on the same targets as the context before them grows, for
    at most MAX_LINES rows (headline() and CONTEXT_EXTRA), titled with the largest effective context of any
    row (its one message); every row, in panels, goes to context_use_all.png beside it."""
    plt = _plt()
    cs, target, train_len = meta["contexts"], meta["target_len"], meta["train_len"]
    pick = [r for r in rows if r["variant"] in (*headline(), *CONTEXT_EXTRA)]
    fig, ax = plt.subplots(figsize=(10, 5.6))
    ends = []
    for r in pick:
        ys = [r[f"c{c}"] for c in cs]
        line = _line(ax, cs, ys, r["variant"], colours=True, ms=3.5, lw=1.6)
        ends.append((ys[-1], _gloss_context(r["variant"]), line.get_color()))
    _context_axes(ax, cs, target, [train_len])
    _end_labels(ax, cs[-1], ends, log=False, gap=0.05)
    ax.set_xlabel(f"visible context c before the targets (characters); the window, c + {target}, is longer "
                  f"than training's {train_len} for every c > {max(0, train_len - target)}")
    ax.set_ylabel(f"loss on the same {target} targets (nats/char, lower is better)")
    most = max(r["effective_context"] for r in rows)
    ax.set_title(f"No model uses more than {most} characters of context: past that, the loss on the same "
                 f"targets stays flat or rises\n(effective context of every row, {len(rows)} in all: "
                 f"docs/long_context.md)", fontsize=10)
    fig.tight_layout()
    fig.subplots_adjust(right=0.78)  # room for the labels at the lines' ends
    save(fig, path, colours=True)
    context_use_all(Path(path).with_name("context_use_all.png"), rows, meta)


def _gloss_context(name: str) -> str:
    r = row_names.parse(name)
    return f"{name} (recalibrated at 1x)" if r.finetune in FIELD_RECIPES else \
        f"{name} (fine-tuned at {FT_MULT}x)" if r.finetune is not None else \
        f"{name} (no training)" if r.scaling else name


def context_use_all(path, rows, meta) -> None:
    """Every row of context use, one panel per group of rows; every line stays inside the axes."""
    plt = _plt()
    cs, target, train_len = meta["contexts"], meta["target_len"], meta["train_len"]
    by = {r["variant"]: r for r in rows}
    panels = _panels(list(by), CONTEXT_PANELS)
    fig, axes = _grid(plt, len(panels), sharey=True)
    for k, (ax, (title, group, names)) in enumerate(zip(axes, panels)):
        for n in names:
            _line(ax, cs, [by[n][f"c{c}"] for c in cs], n, ms=3.5, lw=1.5)
        _context_axes(ax, cs, target, [train_len] + ([FT_MULT * train_len] if group == "finetune" else []))
        ax.set_title(f"({chr(ord('a') + k)}) {title}", fontsize=10)
        ax.legend(fontsize=8, loc="upper left")
    for ax in axes[::2]:
        ax.set_ylabel(f"loss on the same {target} targets (nats/char)")
    window = (f"the window is c + {target} characters, so every c > {max(0, train_len - target)} is longer "
              f"than the {train_len} characters of training" if train_len else f"window = c + {target}")
    fig.suptitle(f"Context use: the same targets, more and more context before them (lower is better)\n"
                 f"{window}; fine-tunes trained on {FT_MULT}x longer windows", fontsize=11)
    _tight(fig)
    save(fig, path)


RETRIEVAL_PANELS = [("the five schemes, copy-trained", "copy_five", ()),
                    ("RoPE and its extensions, copy-trained: training-free", "copy_scaled", ("rope_copy",)),
                    ("RoPE and ALiBi fine-tuned at 4x, copy-trained", "copy_finetune", ("rope_copy", "alibi_copy")),
                    ("hybrid layer layouts, copy-trained", "copy_hybrid", ("rope_copy",)),
                    ("the field's comparison set, copy-trained", "copy_field", ("rope_copy", "alibi_copy")),
                    ("xPos + RoPE's training-free scalings, copy-trained", "copy_field_scaled", ("xpos_copy",)),
                    ("RoPE options, copy-trained", "copy_option", ("rope_copy",)),
                    ("other schemes and their options, copy-trained", "copy_scheme_option",
                     ("rope_copy", "alibi_copy")),
                    ("text-trained: the five schemes", "five", ()),
                    ("text-trained: RoPE options", "option", ()),
                    ("text-trained: other schemes and their options", "scheme_option", ()),
                    ("text-trained: fine-tunes", "finetune", ()),
                    ("text-trained: hybrid layer layouts", "hybrid", ()),
                    ("text-trained: the field's comparison set", "field", ())]


# the headline's panel (b): what carries the copy past the training length (README findings 5 and 7), each cause
# beside the control that removes it: RoPE alone; YaRN without training, fine-tuned with it, and the same fine-tune
# without a scaling; the hybrid with a p-RoPE global layer and with a plain-RoPE one; KERPLE's slowly growing bias
RETRIEVAL_FAR = ("rope_copy", "rope_copy+yarn", "rope_copy_ft_yarn", "rope_copy_ft_none", "gemma_hybrid_copy",
                 "hybrid_rope_copy", "kerple_copy")
RETRIEVAL_Y = "keys copied exactly (share of windows)"  # exact match: letters 2..K of the repeat all greedy-correct


def _retrieval_panel(ax, by, names, title, train_len) -> None:
    """Exact match against distance (log x) for names (a line drawn exactly on an earlier one says so in its
    label), on the full 0-1 scale; the training length dotted, a fine-tune's length dashed, each named at the
    foot of its line; the legend inside, left, short (row names only) so that it ends before the lines fall."""
    first = {}
    for n in names:
        rs = by[n]
        under = first.setdefault(tuple((r["distance"], r["exact"]) for r in rs), n)
        _line(ax, [r["distance"] for r in rs], [r["exact"] for r in rs], n, colours=True, ms=3.5, lw=1.5,
              label=n if under == n else f"{n} (under {under})")
    for L in sorted({by[n][0]["train_len"] for n in names} | {train_len}):
        _ref(ax, "x", L, f"{'training' if L == train_len else 'fine-tune'} length {L}", bottom=True,
             ls=":" if L == train_len else "--")
    _log2_x(ax, [r["distance"] for r in by[names[0]]])
    ax.set_ylim(-0.03, 1.03)  # the full scale: a model that copies reaches 1
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("distance d from the key to its repeat (characters)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="center left")


def _train_len(rows, meta) -> int:
    """The base models' training length: the run's (meta), else the shortest of the rows (a fine-tune's is longer)."""
    return meta.get("train_len") or min(r["train_len"] for r in rows)


def _retrieval_groups(by) -> tuple:
    """([(title, group, names)] of the everything-figure, [text-trained rows not drawn]): every copy-trained row;
    a text-trained group whose exact match is zero at every distance gets no panel (all of them: the first)."""
    panels = _panels(list(by), RETRIEVAL_PANELS)
    zero = [p for p in panels if not p[1].startswith("copy") and all(r["exact"] == 0 for n in p[2] for r in by[n])]
    drawn = [p for p in panels if p not in zero] or panels[:1]
    return drawn, [n for p in zero if p not in drawn for n in p[2]]


def _retrieval_rows(rows) -> tuple:
    """(the rows without other seeds' (retrieval.md's seeds table holds those), {variant: its rows})."""
    rows = [r for r in rows if not row_names.parse(r["variant"]).seed]
    by = {}
    for r in rows:
        by.setdefault(r["variant"], []).append(r)
    return rows, by


def retrieval(path, rows, meta) -> None:
    """The headline of retrieval: exact match against distance for the models trained to copy, (a) the five
    schemes, (b) RETRIEVAL_FAR, at most MAX_LINES lines each; every row, in panels, goes to retrieval_all.png
    beside it. Where no row of either exists, the first panel of retrieval_all.png.
    rows: the long format of retrieval.json, one row per variant and distance; other seeds' rows are left to
    retrieval.md's seeds table."""
    rows, by = _retrieval_rows(rows)
    if not rows:  # other seeds only (a folder of their own): nothing to draw, the seeds table holds them
        return
    plt = _plt()
    K, train_len = meta.get("key_len", "K"), _train_len(rows, meta)
    five = [n for n in by if _group(n) == "copy_five"]
    far = [n for n in RETRIEVAL_FAR if n in by]
    panels = [p for p in (("(a) the five schemes, trained to copy", five),
                          (f"(b) past the training length, {train_len}: what keeps the copy", far)) if p[1]]
    text = [n for n in by if by[n][0]["family"] == "text"]
    quiet = all(r["exact"] == 0 for n in text for r in by[n])
    note = "" if not text else " (text-trained models: 0 at every d)" if quiet else " (text-trained: retrieval_all.png)"
    title = f"Models trained to copy: is a {K}-letter key copied from d characters back?{note}"
    if not panels:  # no copy-trained row of either panel: the first panel of retrieval_all.png
        panels = [(t, names) for t, _, names in _retrieval_groups(by)[0][:1]]
        title = f"Retrieval: is a {K}-letter key copied from d characters back?"
    fig, axes = _grid(plt, len(panels), width=6.4, height=4.8, sharey=True)
    for ax, (panel_title, names) in zip(axes, panels):
        _retrieval_panel(ax, by, names[:MAX_LINES], panel_title, train_len)
    axes[0].set_ylabel(RETRIEVAL_Y)
    fig.suptitle(title, fontsize=11)
    _tight(fig)
    save(fig, path, colours=True)
    retrieval_all(Path(path).with_name("retrieval_all.png"), rows, meta)


def retrieval_all(path, rows, meta) -> None:
    """Every row of retrieval (the full-detail figure for docs/), one panel per group of at most MAX_LINES rows
    (RETRIEVAL_PANELS); a text-trained group at 0 at every distance is counted in the title, not drawn; other
    seeds are not drawn (retrieval.md's seeds table)."""
    rows, by = _retrieval_rows(rows)
    if not rows:  # other seeds only (a folder of their own): nothing to draw, the seeds table holds them
        return
    plt = _plt()
    panels, skipped = _retrieval_groups(by)
    train_len = _train_len(rows, meta)
    fig, axes = _grid(plt, len(panels), width=6.4, height=4.6, sharey=True)
    for k, (ax, (title, group, names)) in enumerate(zip(axes, panels)):
        _retrieval_panel(ax, by, names, f"({chr(ord('a') + k)}) {title}", train_len)
    for ax in axes[::2]:
        ax.set_ylabel(RETRIEVAL_Y)
    note = f" ({len(skipped)} text-trained rows, 0 at every d, not drawn)" if skipped else ""
    fig.suptitle(f"Retrieval, every row: is a {meta.get('key_len', 'K')}-letter key copied from d characters "
                 f"back?{note}", fontsize=11)
    _tight(fig)
    save(fig, path, colours=True)


# ----------------------------------------------------------------------------- copy calibration

def mixture_styles(names) -> dict:
    """{mixture: style} for copy_calibration: a colour per mixture family (the name without a
    trailing _4x or _lr... setting), a line style per setting, in order of appearance."""
    palette = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#17becf", "#bcbd22", "#222222")
    dashes = ["-", (0, (4, 2)), (0, (1, 1.5)), (0, (6, 2, 1.5, 2))]
    fams, settings, out = [], [""], {}
    for n in names:
        head, _, tail = n.rpartition("_")
        fam, setting = (head, tail) if head and (tail.endswith("x") or tail.startswith("lr")) else (n, "")
        fams += [fam] if fam not in fams else []
        settings += [setting] if setting not in settings else []
        out[n] = {"color": palette[fams.index(fam) % len(palette)],
                  "ls": dashes[settings.index(setting) % len(dashes)], "marker": "o"}
    return out


def copy_calibration(path, curves) -> None:
    """The copy gain of each mixture against the training step: (a) on its own mixture, then one
    panel per passkey distance. curves: {mixture: {"step", "probe", "val_loss"}}. With more than
    MAX_LINES mixtures, those of the shortest schedule (the recipe's 1,100 steps) are drawn as one
    grey range, from the lowest to the highest of them at each step: the lines left are the longer
    runs, where copying appears."""
    plt = _plt()
    end = {n: c["step"][-1] for n, c in curves.items()}
    banded = [n for n in curves if end[n] == min(end.values())] if len(curves) > MAX_LINES else []
    lines = [n for n in curves if n not in banded]
    styles = mixture_styles(lines)
    first = next(iter(curves.values()))["probe"][0]
    ds = [k for k in first if k.startswith("d")][:3]
    panels = [("own", "(a) own mixture: first copy minus later copies")] + \
             [(d, f"({'bcd'[i]}) passkey at d = {d[1:]}: control minus repeat") for i, d in enumerate(ds)]
    fig, axes = _grid(plt, len(panels), width=6, height=4.2, sharex=True)
    for ax, (key, title) in zip(axes, panels):
        if banded:  # the banded runs share their probe steps
            gains = [[p[key]["gain"] for p in curves[n]["probe"]] for n in banded]  # (mixtures, steps)
            ax.fill_between(curves[banded[0]]["step"], [min(g) for g in zip(*gains)], [max(g) for g in zip(*gains)],
                            color="0.6", alpha=0.5, lw=0, label=f"{len(banded)} runs, {min(end.values()):,} steps")
        for name in lines:
            c = curves[name]
            ax.plot(c["step"], [p[key]["gain"] for p in c["probe"]], label=name, ms=2.5, lw=1.4, **styles[name])
        _ref(ax, "y", 0, color="0.3", ls="-", lw=0.8)
        ax.grid(alpha=0.3)
        ax.set(title=title, xlabel="training step", ylabel="copy gain (nats/char)")
    fig.legend(*axes[0].get_legend_handles_labels(), fontsize=8, loc="center left", bbox_to_anchor=(0.83, 0.5))
    fig.suptitle("Copy calibration: does each mixture teach copying? (> 0: the copy got cheaper)")
    _tight(fig, rect=(0, 0, 0.83, 1))  # the right strip holds the shared legend
    save(fig, path)


def grouped_bars(ax, cells: list, series: dict, ylabel: str, title: str, top: float, **legend) -> None:
    """Grouped bars from 0 to top: one group per cell, one bar per series {legend name: key} (None drawn as 0).
    Colour = the cell's position scheme (plots.style, the rule of every figure); fill = the series:
    solid, then hatched, then dotted, so that no colour means two things."""
    from matplotlib.patches import Patch
    w = 0.8 / len(series)
    colors = [style(c["pos"])["color"] for c in cells]
    fills = [{"fill": True}, {"fill": False, "hatch": "////"}, {"fill": False, "hatch": "...."}]
    handles = ax.get_legend_handles_labels()[0]  # the reference line drawn before, if any
    for i, (name, key) in enumerate(series.items()):
        ax.bar([x + (i - (len(series) - 1) / 2) * w for x in range(len(cells))], [c[key] or 0 for c in cells], w,
               color=colors, edgecolor=colors, lw=1, **fills[i % len(fills)])
        handles.append(Patch(facecolor="0.35", edgecolor="0.35", label=name, **fills[i % len(fills)]))
    labels = [c["cell"].replace("bidirectional", "bidir.").replace(" / ", "\n").replace(", ", "\n") for c in cells]
    ax.set_xticks(range(len(cells)), labels, fontsize=8)
    for text, color in zip(ax.get_xticklabels(), colors):
        text.set_color(color)
    ax.set(ylabel=ylabel, ylim=(0, top))
    ax.set_title(title, fontsize=10)
    ax.legend(handles=handles, fontsize=8, **legend)


# ----------------------------------------------------------------------------- experiments/benchmark.py's figure

def benchmark(path, L, names, times, memory, device_type: str, title: str) -> None:
    """Forward time and peak memory against length (experiments/benchmark.py's measurements: times {(scheme, T): s},
    memory {(scheme, "forward T"): bytes}), a row of two panels per group of at most MAX_LINES schemes:
    the five schemes (_group's "five"), then the others beside RoPE and ALiBi."""
    plt, MiB = _plt(), 2 ** 20
    five, refs = [s for s in names if _group(s) == "five"], [s for s in ("rope", "alibi") if s in names]
    rest, step = [s for s in names if s not in five], MAX_LINES - len(refs)
    groups = ([five] if five else []) + [refs + rest[k:k + step] for k in range(0, len(rest), step)]
    fig, grid = plt.subplots(len(groups), 2, figsize=(11, 4.5 * len(groups)), squeeze=False)
    for (ax_t, ax_m), group in zip(grid, groups):
        for s in group:  # each scheme in its colour of the shared rule (style), apart from the others (_line)
            _line(ax_t, L, [times[(s, T)] * 1e3 for T in L], s, ms=6, lw=1.5)
            if memory:
                _line(ax_m, L, [memory[(s, f"forward {T}")] / MiB for T in L], s, ms=6, lw=1.5)
        ax_t.set(title="Forward time of the whole LM, batch 1", ylabel="milliseconds (median)", yscale="log")
        ax_m.set(title="Peak memory of that forward" if memory else "Peak memory: not measured",
                 ylabel="MiB above the baseline (" + ("max_memory_allocated)" if device_type == "cuda" else "ru_maxrss)"))
        for ax in (ax_t, ax_m):
            _log2_x(ax, L)
            ax.set_xlabel("sequence length T")
            ax.grid(alpha=0.3, which="both")
            if ax.has_data():
                ax.legend(fontsize=8)
    fig.suptitle(title)
    _tight(fig)
    save(fig, path)
