"""Every figure of the evaluation pipeline, drawn from the data stored in results/*.json alone
(no checkpoint needed), under one colour rule.

The colour rule, the same in every figure (style(name) returns it):
  colour  = how the model meets positions: one fixed colour per scheme (none, learned, sin, rope,
            alibi), per RoPE option (rope_theta10, rope_theta1e6, rope_partial25, rope_p75, irope),
            per training-free RoPE scaling (linear, ntk, ntk(4s), ntk(16s), dynamic, yarn, llama3),
            and one for RoPE fine-tuned at 4x its training length (rope_ft_*; alibi_ft keeps
            alibi's colour);
  line    = the exact scaling: solid none, dotted linear, dashed ntk, its own dash for ntk(4s),
            ntk(16s), dynamic, llama3, dash-dot yarn; a fine-tune shares the dash of its scaling
            (rope+yarn and rope_ft_yarn: both dash-dot), and `learned (clamped)` has its own;
  marker  = the training: o trained at the training length on text, ^ fine-tuned at 4x that
            length, s trained on the copy mixture, D the copy mixture then fine-tuned.
So `rope+yarn` is purple dash-dot with circles, `rope_ft_yarn` brown dash-dot with triangles.
Seed rows (`rope [seed1]`) are thin grey lines with one legend entry between them.

A line that would look like one already drawn in its axes (two option sets of one scheme in one slot, a
scheme whose colour is a fixed one of COLOURS beside that line) is drawn in the first of its other looks
that is free there (_line, _free_style): the colours are checked where the lines are drawn.
check_distinct(fig) raises if two data lines of one axes share colour, line style and marker.
It skips two kinds of line, marked by their gid: "ref" for reference lines (the training-length
marker, y = 0, chance), drawn by _ref; and "seed" for the grey seed lines, which may look alike.
check_text(fig) raises if a title, label, tick label, text or legend lies outside the figure, or
two of them that belong to different axes (or to the figure, as the suptitle) overlap.
Every function here saves through save(fig, path), which calls both; the scripts call these
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
import zlib
from pathlib import Path

from lab import row_names
import schemes
from lab import atomic

SCHEMES = schemes.REGISTRY.keys()  # every registered scheme (a live view: later registrations too)


def headline() -> tuple:
    """The lines of the headline figure: the schemes (the field's have their own panel: field()), RoPE + YaRN
    without training, RoPE fine-tuned with YaRN."""
    return (*(s for s in SCHEMES if s not in field()), "rope+yarn", "rope_ft_yarn")


MAX_LINES = 8  # a panel holds at most this many data lines (STYLE.md, point 15)

COLOURS = {  # the schemes' own come from their registry entries (schemes.Scheme.colour)
    # training-free RoPE scalings
    "linear": "#e377c2", "ntk": "#17becf", "ntk(4s)": "#0b6e79", "ntk(16s)": "#74c476", "dynamic": "#bcbd22",
    "yarn": "#9467bd", "llama3": "#e6ab02", "longrope": "#a6761d",
    # fine-tuned at 4x the length: one colour per recipe, so that a panel of fine-tunes tells them apart
    "rope_ft_yarn": "#8c564b", "rope_ft_linear": "#c51b7d", "rope_ft_none": "#08519c", "alibi_ft_none": "#7f0000",
    # recalibrated at the training length: DroPE and its control with RoPE kept
    "rope_ft_drope": "#1b9e77", "rope_ft_keep": "#fdbf6f",
    # the same two and the YaRN fine-tune at the parent's whole step budget (variants.FULL_BUDGET): darker
    "rope_ft_drope_full": "#00441b", "rope_ft_keep_full": "#b35806", "rope_ft_yarn_full": "#4d2a20",
    # RoPE options
    "rope_theta10": "#393b79", "rope_theta1e6": "#637939", "rope_partial25": "#d6616b",
    "rope_p75": "#7b4173", "irope": "#3b9c9c", "irope_global": "#9edae5", "gemma_hybrid": "#c49c94",
    "hybrid_rope": "#b15928",
    "irope_notemp": "#2f4f4f",
}
# names neither this table nor the registry knows (rope_sink, a scheme file's variant) get one of these by
# a hash of the name: none is a scheme's (schemes.SPARE_COLOURS are those) or a line's above, so only two
# such names can clash, which check_distinct catches (then give one a fixed colour). A scheme with options
# set takes its scheme's colour, darker, and a dash of its own (style, OPTION_DASHES).
SPARE = ("#6b486b", "#a05d56", "#d0743c", "#98abc5", "#8a89a6", "#7b6888", "#ff8c00", "#556b2f")


def fixed_owner(colour: str):
    """The line a fixed colour above belongs to, or None. A scheme may hold one (schemes.register does not ask
    this file): a line drawn beside the owner's then gets another look (_free_style)."""
    return {c.lower(): n for n, c in COLOURS.items()}.get(colour.lower())


DASHES = {
    "": "-", "linear": (0, (1, 1.5)), "ntk": (0, (4, 2)), "ntk(4s)": (0, (4, 1.5, 1, 1.5, 1, 1.5)),
    "ntk(16s)": (0, (9, 2.5)), "dynamic": (0, (2, 1.2)), "yarn": (0, (6, 2, 1.5, 2)),
    "llama3": (0, (3, 1, 1, 1)), "longrope": (0, (8, 1.5, 1, 1.5)),
    # evaluation switches: the learned table clamped at its last row; irope with its temperature off
    "clamped": (0, (1, 3)), "no temp": (0, (2, 3)), "temp on": (0, (5, 1.5, 1, 1.5)),
    # StreamingLLM's cache (4 first tokens + the latest) and its control, the plain window (lab/streaming.py)
    "streaming": (0, (6, 1.5)), "window": (0, (1, 1.2)),
}
STREAM_SWITCHES = ("streaming", "window")
# a scheme with options set beside its default (t5{scale=5.657} beside t5): its scheme's colour darker by one of
# OPTION_SHADES and one of OPTION_DASHES, a slot picked by a hash of the options; two option sets of one scheme
# whose slots are the same in one axes get the next free slot where they are drawn (_free_style)
OPTION_SHADES = (0.4, 0.25, 0.55)
OPTION_DASHES = ((0, (5, 1.5, 1, 1.5)), (0, (6, 2)), (0, (3, 1, 1, 1, 1, 1)))
MARKERS = {(False, False): "o", (True, False): "^", (False, True): "s", (True, True): "D"}  # (fine-tuned, copy)
SEED_STYLE = {"color": "0.72", "ls": "-", "marker": ""}
# a scaling of a scheme other than RoPE that uses its tables (xpos+yarn, selective+yarn; RoPE's row has the scaling's
# colour too): a marker per such scheme, in registry order; its copy twin's from the second tuple
OTHER_SCALED_MARKERS, OTHER_SCALED_COPY_MARKERS = ("v", ">", "P", "X", "h"), ("<", "d", "p", "*", "H")
EXEMPT = ("ref", "seed")  # gids check_distinct skips


# ----------------------------------------------------------------------------- the rule

def style(name: str) -> dict:
    """dict(color=..., ls=..., marker=...) of a row name under the colour rule (module docstring)."""
    r = row_names.parse(name)
    if r.seed:
        return dict(SEED_STYLE)
    finetuned = r.finetune is not None
    recipe = "" if r.finetune in (None, "none") else r.finetune
    if finetuned:
        color = COLOURS.get(f"{r.base}_ft_{recipe or 'none'}") or _colour(r.base)
    elif r.scaling:  # a fixed-factor row: its scaling's colour, darker, so that it differs beside the other
        color = _darker(_colour(r.scaling)) if r.fixed else _colour(r.scaling)
    elif "{" in r.base:  # a scheme with options set (fox{gate_bias=5.0}): its scheme's colour, darker, own dash
        color = _option_look(r.base, _option_hash(r.base))[0]
    else:
        color = _colour(r.base + ("_notemp" if r.notemp else ""))
    # a fine-tune shares the dash of the scaling it was tuned with
    ls = DASHES[r.switch] if r.switch else DASHES.get(r.scaling or recipe, "-")
    if ls == "-" and "{" in r.base:
        ls = _option_look(r.base, _option_hash(r.base))[1]
    if r.switch:  # an evaluation switch of a model: its model's colour, lighter, so that it has its own
        color = _lighter(color)
    if r.scaling and r.base != "rope":
        others = [n for n, e in schemes.REGISTRY.items() if e.rope_options and n != "rope"]
        base = r.base.partition("{")[0]
        k = others.index(base) if base in others else 0
        marker = (OTHER_SCALED_COPY_MARKERS if r.copy else OTHER_SCALED_MARKERS)[k % len(OTHER_SCALED_MARKERS)]
    else:
        marker = MARKERS[(finetuned, r.copy)]
    return {"color": color, "ls": ls, "marker": marker}


def _option_look(base: str, k: int) -> tuple:
    """(colour, dash) of slot k of a scheme with options set: its scheme's colour darker by OPTION_SHADES[k mod 3],
    dash OPTION_DASHES[k div 3 mod 3]; style() takes slot _option_hash(base), _looks the others in turn."""
    n = len(OPTION_SHADES)
    return _darker(_colour(base.partition("{")[0]), OPTION_SHADES[k % n]), OPTION_DASHES[k // n % len(OPTION_DASHES)]


def _option_hash(base: str) -> int:
    """A number fixed by the options of fox{gate_bias=5.0} ("gate_bias=5.0"), whatever the scheme's name."""
    return zlib.crc32(base.partition("{")[2].rstrip("}").encode())


def _colour(key: str) -> str:
    fixed = COLOURS.get(key) or (schemes.REGISTRY[key].colour if key in schemes.REGISTRY else None)
    return fixed or SPARE[zlib.crc32(key.encode()) % len(SPARE)]


def _darker(hex_colour: str, f: float = 0.4) -> str:
    """hex_colour mixed with black: a fraction f of the way to it."""
    return "#" + "".join(f"{round(int(hex_colour[i:i + 2], 16) * (1 - f)):02x}" for i in (1, 3, 5))


def _lighter(hex_colour: str, f: float = 0.45) -> str:
    """hex_colour mixed with white: a fraction f of the way to it."""
    rgb = [int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + f * (255 - c)):02x}" for c in rgb)


def _line_key(line) -> tuple:
    """What a reader tells lines apart by: colour, dash pattern, marker."""
    from matplotlib.colors import to_hex
    # get_linestyle() says "--" for every custom dash; the pattern itself is only kept here
    dash = "None" if line.get_linestyle() in ("None", " ", "") else \
        getattr(line, "_unscaled_dash_pattern", None) or line.get_linestyle()
    marker = line.get_marker()
    return to_hex(line.get_color(), keep_alpha=True), str(dash), "" if marker in (None, "None", " ") else marker


def check_distinct(fig, colours: bool = False) -> None:
    """Raise ValueError naming two visible data lines of one axes with the same colour, line
    style and marker (colours=True: the same colour alone). Lines with gid "ref" (reference
    lines) or "seed" (grey seed rows) are skipped."""
    for i, ax in enumerate(fig.axes):
        seen = {}
        for n, line in enumerate(ax.get_lines()):
            if not line.get_visible() or line.get_gid() in EXEMPT:
                continue
            name = line.get_label() if not line.get_label().startswith("_") else f"line {n}"
            key = _line_key(line)[:1] if colours else _line_key(line)
            if key in seen:
                raise ValueError(f"axes {i} ({ax.get_title()!r}): lines {seen[key]!r} and {name!r} "
                                 f"share colour, line style and marker {key}")
            seen[key] = name


TEXT_TOLERANCE = 1.5  # pixels: boxes this far out of the figure, or into each other, still pass


def _texts(fig) -> list:
    """[(owner, name, artist)] of the visible, non-empty texts of fig: the suptitle, figure texts and
    legends (each its own owner), and per visible axes i (owner i) its titles, axis labels, tick
    labels inside the view, texts, annotations and legend."""
    def shown(t):
        return t is not None and t.get_visible() and (not hasattr(t, "get_text") or t.get_text().strip())

    out = [("suptitle", f"suptitle {fig._suptitle.get_text()!r}", fig._suptitle)] if fig._suptitle else []
    out += [(f"figure {k}", f"figure text {t.get_text()!r}", t) for k, t in enumerate(fig.texts)
            if t is not fig._suptitle]  # fig.texts holds the suptitle too
    out += [(f"figure legend {k}", f"figure legend {[t.get_text() for t in leg.get_texts()][:3]}", leg)
            for k, leg in enumerate(fig.legends)]
    for i, ax in enumerate(fig.axes):
        if not ax.get_visible():
            continue
        where = f"axes {i} ({ax.get_title()!r})" if ax.get_title() else f"axes {i}"
        out += [(i, f"{where} {loc}title {t.get_text()!r}", t)
                for loc, t in (("left ", ax._left_title), ("", ax.title), ("right ", ax._right_title))]
        out += [(i, f"{where} {a}-label {axis.label.get_text()!r}", axis.label)
                for a, axis in (("x", ax.xaxis), ("y", ax.yaxis))]
        for a, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            lo, hi = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks():
                if lo - 1e-9 * abs(hi - lo) <= tick.get_loc() <= hi + 1e-9 * abs(hi - lo):
                    out += [(i, f"{where} {a} tick label {t.get_text()!r}", t) for t in (tick.label1, tick.label2)]
        out += [(i, f"{where} text {t.get_text()!r}", t) for t in ax.texts]
        leg = ax.get_legend()
        if leg is not None:
            out.append((i, f"{where} legend {[t.get_text() for t in leg.get_texts()][:3]}", leg))
    return [(owner, name, t) for owner, name, t in out if shown(t)]


def check_text(fig) -> None:
    """Raise ValueError naming the texts when, drawn by Agg, a text or legend of fig (_texts) lies
    outside the figure, or two of different owners overlap (one axes' legend on another's tick
    labels, the suptitle on a panel title), each beyond TEXT_TOLERANCE pixels. Texts of one axes
    may touch each other: its legend sits inside it by design."""
    import numpy as np
    from matplotlib.text import Text
    fig.draw_without_rendering()  # the layout and every text's place, without rasterising the lines
    renderer = fig.canvas.get_renderer()
    tol, page = TEXT_TOLERANCE, fig.bbox
    boxes = []
    for owner, name, t in _texts(fig):
        # an annotation's own box, without its arrow
        box = Text.get_window_extent(t, renderer) if isinstance(t, Text) else t.get_window_extent(renderer)
        if not np.isfinite(box.get_points()).all() or box.width <= 0 or box.height <= 0:
            continue
        if box.x0 < page.x0 - tol or box.y0 < page.y0 - tol or box.x1 > page.x1 + tol or box.y1 > page.y1 + tol:
            raise ValueError(f"{name} lies outside the figure: its box spans x {box.x0:.0f}..{box.x1:.0f}, "
                             f"y {box.y0:.0f}..{box.y1:.0f} pixels, the figure's {page.width:.0f} x {page.height:.0f}")
        boxes.append((owner, name, box))
    for k, (owner, name, box) in enumerate(boxes):
        for owner2, name2, box2 in boxes[k + 1:]:
            if owner != owner2 and min(box.x1, box2.x1) - max(box.x0, box2.x0) > tol \
                    and min(box.y1, box2.y1) - max(box.y0, box2.y0) > tol:
                raise ValueError(f"{name} and {name2} overlap")


# ----------------------------------------------------------------------------- drawing helpers

def _plt():
    """pyplot on the Agg backend, imported on first use so that `import plots` stays cheap."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save(fig, path, colours: bool = False) -> None:
    """check_distinct and check_text, then write the PNG atomically and free the figure."""
    check_distinct(fig, colours)
    check_text(fig)
    atomic.atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120))
    _plt().close(fig)


def _looks(name: str) -> list:
    """The styles a row may be drawn in, best first: style(name); for a scheme with options set, the other
    (shade, dash) slots of OPTION_SHADES x OPTION_DASHES from its own on; then its colour darker or lighter,
    then each SPARE colour, with its dash and marker."""
    st = style(name)
    out = [st]
    if not st["color"].startswith("#"):  # a seed row's grey: seed rows may look alike (EXEMPT)
        return out
    base = row_names.parse(name).base
    if "{" in base and st["ls"] in OPTION_DASHES:  # an option set drawn in its slot (not a scaled or tuned row)
        n = len(OPTION_SHADES) * len(OPTION_DASHES)
        out += [{**st, **dict(zip(("color", "ls"), _option_look(base, k)))}
                for k in (_option_hash(base) + i for i in range(1, n))]
    out += [{**st, "color": c} for c in (_darker(st["color"], 0.3), _lighter(st["color"], 0.35), *SPARE)]
    return out


def _style_key(st: dict, colours: bool) -> tuple:
    """check_distinct's key of a line drawn in style st (colours=True: its colour alone)."""
    from matplotlib.lines import Line2D
    key = _line_key(Line2D([], [], color=st["color"], ls=st["ls"], marker=st["marker"]))
    return key[:1] if colours else key


def _free_style(ax, name: str, colours: bool = False) -> dict:
    """The first of _looks(name) that no data line already in ax has (check_distinct's key; colours=True: the
    colour alone). So two option sets of one scheme, or a scheme that holds a fixed colour of COLOURS beside
    that colour's line, are drawn apart where they meet; a seed row keeps its grey."""
    looks = _looks(name)
    if len(looks) == 1:
        return looks[0]
    taken = {_line_key(ln)[:1] if colours else _line_key(ln) for ln in ax.get_lines()
             if ln.get_visible() and ln.get_gid() not in EXEMPT}
    return next((st for st in looks if _style_key(st, colours) not in taken), looks[0])


def _line(ax, xs, ys, name, label=None, colours: bool = False, **kw):
    """One data line in the rule's style, or the first look of it that no line of ax has (_free_style;
    colours=True where the figure tells lines apart by colour alone); a seed row is thin grey with gid "seed"."""
    st = _free_style(ax, name, colours)
    opts = {"color": st["color"], "ls": st["ls"], "marker": st["marker"], "ms": 4, "lw": 1.8,
            "label": name if label is None else label}
    if row_names.parse(name).seed:
        opts.update(lw=0.8, ms=0, gid="seed", zorder=1)
    opts.update(kw)
    return ax.plot(xs, ys, **opts)[0]


def _ref(ax, axis: str, value, text: str = None, bottom: bool = False, **kw):
    """A reference line (gid "ref", skipped by check_distinct), with an optional note at its top (bottom=True:
    at its foot and right of it, for a vertical line)."""
    opts = {"color": "0.45", "ls": ":", "lw": 1.2, "gid": "ref", "zorder": 1, **kw}
    line = ax.axvline(value, **opts) if axis == "x" else ax.axhline(value, **opts)
    if text and axis == "x" and bottom:  # right of the line, where a line that falls past it has fallen
        from matplotlib.transforms import offset_copy
        ax.text(value, 0.08, text, transform=offset_copy(ax.get_xaxis_transform(), ax.figure, x=2, units="points"),
                rotation=90, va="bottom", ha="left", fontsize=8, color="0.3")
    elif text and axis == "x":
        ax.text(value, 0.99, " " + text, transform=ax.get_xaxis_transform(), rotation=90, va="top",
                ha="right", fontsize=8, color="0.3")
    elif text:
        ax.text(0.01, value, text, transform=ax.get_yaxis_transform(), va="bottom", fontsize=8, color="0.3")
    return line


def _log2_x(ax, xs) -> None:
    """Log-2 x axis with a tick, in plain numbers, at each value of xs."""
    from matplotlib.ticker import NullLocator
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(xs), [str(x) for x in xs])
    ax.xaxis.set_minor_locator(NullLocator())


def _plain_log_y(ax, lo: float, hi: float) -> None:
    """Log y from lo to hi with ticks that read as plain numbers (5, 10, 20, 30), not 2x10^1."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    for mantissas in ((1, 1.5, 2, 3, 4, 5, 6, 8), (1, 2, 3, 5), (1, 2, 5), (1,)):  # the finest with <= 8 ticks
        ticks = [m * 10 ** k for k in decades for m in mantissas if lo <= m * 10 ** k <= hi]
        if len(ticks) <= 8:
            break
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_locator(NullLocator())


def _end_labels(ax, x_end, items, log: bool = True, gap: float = 0.06) -> None:
    """Direct labels right of the axes for items (y at x_end, the lines' last x; text; colour), spread so
    that no two are closer than `gap` of the axis height, each tied to its line by a thin stroke."""
    f = math.log10 if log else (lambda v: v)
    lo, hi = (f(v) for v in ax.get_ylim())
    items = sorted(items)
    pos = [f(y) for y, _, _ in items]
    for i in range(1, len(pos)):  # push up until apart, then back down from the top edge
        pos[i] = max(pos[i], pos[i - 1] + gap * (hi - lo))
    if pos and pos[-1] > hi - gap * (hi - lo) / 2:  # keep the top label inside the axes' height
        pos[-1] = hi - gap * (hi - lo) / 2
        for i in range(len(pos) - 2, -1, -1):
            pos[i] = min(pos[i], pos[i + 1] - gap * (hi - lo))
    for (y, text, color), p in zip(items, pos):
        ax.annotate(text, xy=(x_end, y), xytext=(1.03, 10 ** p if log else p),
                    textcoords=("axes fraction", "data"), color=color, fontsize=9, va="center",
                    annotation_clip=False, arrowprops={"arrowstyle": "-", "color": color, "lw": 0.6,
                                                       "shrinkA": 0, "shrinkB": 3})


def _mark_off_axes(ax) -> None:
    """Lines that leave the axes through the top or the bottom: an arrow in the line's colour at
    the edge, where each first leaves, so that no line vanishes unseen."""
    lo, hi = ax.get_ylim()
    for line in ax.get_lines():
        if line.get_gid() in EXEMPT:
            continue
        for edge, arrow, out in ((hi, "\u2191", lambda y: y > hi), (lo, "\u2193", lambda y: y < lo)):
            xs = [x for x, y in zip(line.get_xdata(), line.get_ydata()) if out(y)]
            if xs:
                ax.annotate(arrow, xy=(xs[0], edge), ha="center", va="top" if edge == hi else "bottom",
                            color=line.get_color(), fontsize=13, fontweight="bold", annotation_clip=False)


HYBRIDS = ("irope", "gemma_hybrid", "irope_global", "hybrid_rope")  # layouts that mix layer kinds (lab/variants.py)
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


def _grid(plt, n: int, width: float = 6.2, height: float = 4.6, **kw):
    """n panels, two per row from 3 on; returns (fig, flat list of the n axes used)."""
    cols = n if n <= 2 else 2
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False, **kw)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _wrap_to_width(fig, text, margin: float = 0.96) -> None:
    """Re-wrap a figure-wide text, line by line, so that it is at most `margin` of the figure's width."""
    import textwrap
    renderer = fig.canvas.get_renderer()
    width = text.get_window_extent(renderer).width
    if width <= margin * fig.bbox.width:
        return
    lines = text.get_text().split("\n")
    chars = max(10, int(max(map(len, lines)) * margin * fig.bbox.width / width))  # characters per line that fit
    text.set_text("\n".join(w for line in lines for w in textwrap.wrap(line, chars)))


def _tight(fig, rect=(0, 0, 1, 1), gap: float = 6) -> None:
    """tight_layout within rect, then lowered until the panels' titles end gap pixels below the suptitle:
    tight_layout alone can let a suptitle of two lines reach into the top row's titles. A suptitle
    wider than the figure (a run with fewer panels than the full one) is first wrapped to fit it."""
    if fig._suptitle is not None:
        _wrap_to_width(fig, fig._suptitle)
    fig.tight_layout(rect=rect)
    if fig._suptitle is not None:
        renderer = fig.canvas.get_renderer()  # Agg's: measures without a draw
        foot = fig._suptitle.get_window_extent(renderer).y0
        top = max(ax.get_tightbbox(renderer).y1 for ax in fig.axes if ax.get_visible())
        if top > foot - gap:
            fig.tight_layout(rect=(*rect[:3], rect[3] - (top - foot + gap) / fig.bbox.height))


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
