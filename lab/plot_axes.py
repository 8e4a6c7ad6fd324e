"""Axis and layout helpers that any figure may use, whatever it shows: a reference line with its note, a log-2
x axis, a log y axis with plain tick labels, labels at the lines' ends, arrows where lines leave the axes, a
grid of panels, and a tight layout that keeps the suptitle clear of the panels.

They are apart from lab/plots.py so that a figure's code there reads as what it draws, not how an axis is
set up; and apart from lab/plot_style.py, since none of them picks a look for a data line. A reference line
carries the gid "ref", one of plot_style.EXEMPT, which the lookalike check and _mark_off_axes skip.
"""
import math

from lab.plot_style import EXEMPT


# ----------------------------------------------------------------------------- one axes

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


# ----------------------------------------------------------------------------- the figure's layout

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
