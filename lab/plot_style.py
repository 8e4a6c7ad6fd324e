"""How a line of a figure looks, and the checks that every figure is readable: the colour rule, a free look
for a line that would match another in its axes, and the checks for lookalike lines and overlapping text.

It is apart from lab/plots.py, which draws the figures, so that a figure's code there reads as what it shows:
a figure asks for a row's look (style, _line) and is written through save, which checks it. This module knows
nothing of the figures and does not import lab/plots.py; the scripts' own figures use it through lab/plots.py.

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
marker, y = 0, chance), drawn by plot_axes._ref; and "seed" for the grey seed lines, which may look alike.
check_text(fig) raises if a title, label, tick label, text or legend lies outside the figure, or
two of them that belong to different axes (or to the figure, as the suptitle) overlap.
Every figure is written through save(fig, path), which calls both.
"""
import zlib

from lab import row_names
import schemes
from lab import atomic

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


def colour_distance(a: str, b: str) -> float:
    """How far apart two colours look, on 0-255 RGB: the "redmean" weighted distance,
    sqrt((2 + r/256) dR^2 + 4 dG^2 + (2 + (255 - r)/256) dB^2) with r the mean red (black to white: about 765).
    Below about 100, two lines of one panel are hard to tell apart by colour alone."""
    (r1, g1, b1), (r2, g2, b2) = ([int(c.lstrip("#")[i:i + 2], 16) for i in (0, 2, 4)] for c in (a, b))
    r = (r1 + r2) / 2
    return ((2 + r / 256) * (r1 - r2) ** 2 + 4 * (g1 - g2) ** 2 + (2 + (255 - r) / 256) * (b1 - b2) ** 2) ** 0.5


def _darker(hex_colour: str, f: float = 0.4) -> str:
    """hex_colour mixed with black: a fraction f of the way to it."""
    return "#" + "".join(f"{round(int(hex_colour[i:i + 2], 16) * (1 - f)):02x}" for i in (1, 3, 5))


def _lighter(hex_colour: str, f: float = 0.45) -> str:
    """hex_colour mixed with white: a fraction f of the way to it."""
    rgb = [int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + f * (255 - c)):02x}" for c in rgb)


# ----------------------------------------------------------------------------- lines told apart

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


# ----------------------------------------------------------------------------- texts apart

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


# ----------------------------------------------------------------------------- writing a figure

def _plt():
    """pyplot on the Agg backend, imported on first use so that importing lab/plots.py (and this) stays cheap."""
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
