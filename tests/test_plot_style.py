"""lab/plot_style.py: the colour rule gives every row name a look of its own (style), a line that would look like
one already in its axes is drawn in a free look of it (_line), and the checks catch lookalike lines
(check_distinct) and a text outside the figure or on another's (check_text). The figures that use them:
tests/test_plots.py."""
import json
from pathlib import Path

import pytest

from lab import plot_axes
from lab import plot_style
from lab import plots
import tiny_lm  # noqa: F401  (registers the field's schemes, whose colours the tests read alone too)

RESULTS = Path(__file__).resolve().parent.parent / "results"


def _json(name):
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def _texts_figure(plt, **kw):
    fig, axes = plt.subplots(1, 2, figsize=(6, 3), **kw)
    for ax in axes:
        ax.plot([0, 1], [0, 1])
    return fig, axes


def test_check_text_catches_a_text_outside_the_figure():
    plt = plot_style._plt()
    fig, (a, b) = _texts_figure(plt)
    fig.tight_layout()
    plot_style.check_text(fig)  # a laid-out figure passes
    b.legend(["a legend beside the axes"], loc="upper left", bbox_to_anchor=(1.01, 1.0))  # past the right edge
    with pytest.raises(ValueError, match=r"axes 1 legend \['a legend beside the axes'\] lies outside the figure"):
        plot_style.check_text(fig)
    b.get_legend().remove()
    a.set_xlabel("x " * 200)  # a label far wider than the figure
    with pytest.raises(ValueError, match="x-label .* lies outside the figure"):
        plot_style.check_text(fig)
    a.set_xlabel("x")
    fig.text(0.5, 1.02, "above the top")
    with pytest.raises(ValueError, match="figure text 'above the top' lies outside"):
        plot_style.check_text(fig)
    plt.close(fig)


def test_check_text_catches_overlapping_titles():
    plt = plot_style._plt()
    fig, (a, b) = _texts_figure(plt)
    fig.subplots_adjust(wspace=0.05)
    a.set_title("a long title that runs on into the next panel", loc="left")
    b.set_title("the next panel's title")
    with pytest.raises(ValueError, match="left title 'a long title.*title .the next panel's title. overlap"):
        plot_style.check_text(fig)
    b.set_title("")
    a.set_title("", loc="left")
    a.set_title("short")
    fig.suptitle("a suptitle of\nthree lines\nthat reaches the panels", y=0.95)
    with pytest.raises(ValueError, match="suptitle .* and axes 0 .*title 'short' overlap"):
        plot_style.check_text(fig)
    plot_axes._tight(fig)  # room under the suptitle
    plot_style.check_text(fig)
    plt.close(fig)


def test_check_text_passes_texts_of_one_axes_and_touching_boxes():
    """A legend over its own axes' text is the axes' business; boxes that touch within TEXT_TOLERANCE pass."""
    plt = plot_style._plt()
    fig, (a, b) = _texts_figure(plt)
    a.text(0.05, 0.9, "a note under the legend", transform=a.transAxes)
    a.legend(["line"], loc="upper left")
    fig.tight_layout()
    plot_style.check_text(fig)
    page = fig.bbox
    fig.text(1 + plot_style.TEXT_TOLERANCE / 2 / page.width, 0.5, "x", ha="right")  # 0.75 px past the right edge
    plot_style.check_text(fig)
    plt.close(fig)


def test_check_distinct_raises_on_lookalike_lines():
    plt = plot_style._plt()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], color="tab:blue", ls="--", marker="o", label="first")
    ax.plot([0, 1], [1, 2], color="tab:blue", ls="--", marker="o", label="second")
    with pytest.raises(ValueError, match="first.*second"):
        plot_style.check_distinct(fig)
    ax.lines[1].set_linestyle((0, (1, 1)))  # another dash pattern is enough
    plot_style.check_distinct(fig)
    plt.close(fig)


def test_check_distinct_skips_reference_and_seed_lines():
    plt = plot_style._plt()
    fig, ax = plt.subplots()
    plot_style._line(ax, [1, 2], [1, 2], "rope")
    plot_axes._ref(ax, "x", 1.5)
    plot_axes._ref(ax, "y", 1.5)
    plot_style._line(ax, [1, 2], [2, 3], "rope [seed1]")
    plot_style._line(ax, [1, 2], [3, 4], "alibi [seed1]")
    plot_style.check_distinct(fig)
    plt.close(fig)


def test_the_rule():
    style = plot_style.style
    yarn, ft = style("rope+yarn"), style("rope_ft_yarn")
    assert yarn["ls"] == ft["ls"] and yarn["color"] != ft["color"], "a fine-tune shares its scaling's dash"
    assert style("rope")["color"] == style("rope_copy")["color"] != style("alibi")["color"]
    assert style("rope")["marker"] != style("rope_copy")["marker"], "the marker tells copy-trained"
    assert style("alibi_ft")["color"] != style("alibi")["color"], "a fine-tune has its own colour"
    assert style("rope_ft_none")["color"] != style("rope_ft_yarn")["color"]
    assert style("irope (no temp)")["color"] != style("irope")["color"], "a switch has its own colour"
    assert style("irope (no temp)")["ls"] != style("irope")["ls"]
    four = ["irope_copy", "irope_copy (no temp)", "irope_copy_notemp", "irope_copy_notemp (temp on)"]
    assert {plots._group(n) for n in four} == {"copy_hybrid"}, "the temperature's four rows share one panel"
    assert len({style(n)["color"] for n in four}) == 4, [style(n) for n in four]
    assert style("rope [seed2]") == plot_style.SEED_STYLE
    names = {r["variant"] for d in ("extrapolation.json", "retrieval.json") for r in _json(d)["rows"]}
    seen = {}
    for n in sorted(n for n in names if " [" not in n):
        key = (style(n)["color"], str(style(n)["ls"]), style(n)["marker"])
        assert key not in seen, f"{n} and {seen[key]} look alike"
        seen[key] = n


def test_a_scheme_with_options_is_drawn_as_its_scheme_darker_and_dashed():
    """t5{scale=5.657} beside t5 and the sink rows of the field's panels: its scheme's colour, darker (not a
    hashed spare colour another row may hold), and its own dash; the copy twin keeps its copy marker."""
    opt, base = plot_style.style("t5{scale=5.657}"), plot_style.style("t5")
    assert opt["color"] in [plot_style._darker(base["color"], f) for f in plot_style.OPTION_SHADES], opt
    assert opt["ls"] in plot_style.OPTION_DASHES, opt
    for a, b in (("fox{gate_bias=5.0}", "fox{decay_max=256.0}"), ("t5{scale=5.657}", "t5{scale=2.0}")):
        assert plot_style.style(a) != plot_style.style(b), f"two option sets of one scheme drawn alike: {a}, {b}"
    assert plot_style.style("fox{gate_bias=5.0}_copy")["marker"] == plot_style.style("fox_copy")["marker"]
    looks = {n: tuple(map(str, plot_style.style(n).values())) for n in
             ("t5", "t5{scale=5.657}", "alibi_sink", "rope_sink", "fox", "fox{gate_bias=5.0}", "fox{decay_max=256.0}",
              "kerple", "fire", "xpos")}
    assert len(set(looks.values())) == len(looks), looks


def _sharing_a_slot(scheme: str, option: str, k: int) -> list:
    """k option sets of one scheme to which style() gives one look (the same hash slot), found by trying values."""
    by = {}
    for v in range(2, 200):
        name = f"{scheme}{{{option}={v}.0}}"
        by.setdefault(tuple(map(str, plot_style.style(name).values())), []).append(name)
    return next(names[:k] for names in by.values() if len(names) >= k)


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("colours", [False, True])
def test_option_sets_that_share_a_slot_are_drawn_apart(k, colours):
    """Option sets of one scheme that share a slot, at the level of the rule: drawn by _line into one axes, as
    every figure function draws (tests/test_plots.py draws them in every figure), each of
    the k option sets gets a look of its own under either rule (colours=True: context use and retrieval tell
    lines apart by colour alone), and the first keeps style()'s own."""
    from matplotlib.figure import Figure
    same = _sharing_a_slot("t5", "scale", k)
    for names in (["t5", *same], [f"{n}_copy" for n in ("t5", *same)]):
        ax = Figure().add_subplot()
        lines = [plot_style._line(ax, [1, 2], [1, 2], n, colours=colours) for n in names]
        keys = [plot_style._line_key(ln)[:1] if colours else plot_style._line_key(ln) for ln in lines]
        assert len(set(keys)) == len(keys), dict(zip(names, keys))
        assert lines[1].get_color() == plot_style.style(names[1])["color"], "the first option set keeps its own look"
        plot_style.check_distinct(ax.figure, colours)


def test_colour_distance_against_hand_computed_values():
    # black to white: sqrt((2 + 127.5/256) * 255^2 + 4 * 255^2 + (2 + 127.5/256) * 255^2) = 255 * sqrt(8.99609375)
    cases = [("#000000", "#ffffff", 255 * 8.99609375 ** 0.5), ("#ff0000", "#ff0000", 0.0),
             ("#000000", "#00ff00", 255 * 2.0), ("#000000", "#0000ff", 255 * (2 + 255 / 256) ** 0.5)]
    for a, b, want in cases:
        got = plot_style.colour_distance(a, b)
        assert abs(got - want) < 1e-9 and abs(plot_style.colour_distance(b, a) - want) < 1e-9, (a, b, got, want)


def test_registered_schemes_colours_are_not_lookalikes():
    """A figure of the field draws every scheme in its own colour: no two of the repository's schemes (the core
    five and field/'s; not a reader's file, which takes a spare) closer than 100 (sin and selective were 68 apart,
    FIRE and stick-breaking 75, xPos and FoX 89, learned and CoPE 94)."""
    import schemes
    names = ["none", "learned", "sin", "rope", "alibi", *schemes.field()]
    near = min((plot_style.colour_distance(schemes.REGISTRY[a].colour, schemes.REGISTRY[b].colour), a, b)
               for i, a in enumerate(names) for b in names[i + 1:])
    assert near[0] >= 100, f"{near[1]} and {near[2]} are {near[0]:.0f} apart in colour"
