"""lab/plots.py draws every figure from the committed results/*.json, and no figure has two data lines
that look alike (plot_style.check_distinct) or a text outside the figure or on another's (plot_style.check_text);
the headlines keep to 8 lines with plain tick labels. The figures of breakage_test, benchmark and
visualize_rope follow the same rules."""
import csv
import json
from pathlib import Path

import pytest

from lab import plot_style
from lab import plots
from lab import row_names
import tiny_lm  # noqa: F401  (registers the field's schemes, whose colours the tests read alone too)
from test_plot_style import _sharing_a_slot  # option sets that style() draws alike, drawn here in every figure

RESULTS = Path(__file__).resolve().parent.parent / "results"


def _json(name):
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def _logs():
    """results/train_log.csv as the {variant: {"step", "train_loss", "val_loss"}} that train_curves takes."""
    logs = {}
    with open(RESULTS / "train_log.csv", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            h = logs.setdefault(r["variant"], {"step": [], "train_loss": [], "val_loss": []})
            h["step"].append(int(r["step"]))
            h["train_loss"].append(float(r["train_loss"]))
            h["val_loss"].append(float(r["val_loss"]))
    return logs


def _draw(name, path):
    """Draw figure `name` of lab/plots.py from the committed results into path."""
    ex = _json("extrapolation.json")
    rows, lengths = ex["rows"], ex["meta"]["lengths"]
    if name == "ppl_vs_length":
        plots.ppl_vs_length(path, rows, lengths)
    elif name == "ppl_vs_length_all":
        plots.ppl_vs_length_all(path, rows, lengths)
    elif name == "loss_vs_position":
        plots.loss_vs_position(path, rows, ex["loss_vs_position"], lengths)
    elif name == "train_curves":
        logs = _logs()
        plots.train_curves(path, logs, {n for n in logs if row_names.parse(n).finetune is not None})
    elif name in ("context_use", "context_use_all", "retrieval"):
        d = _json(f"{name.replace('_all', '')}.json")
        getattr(plots, name)(path, d["rows"], d["meta"])
    elif name == "copy_calibration":
        plots.copy_calibration(path, _json("copy_calibration.json")["curves"])
    elif name == "copy_curves":
        plots.copy_curves(path, _json("train_log.json")["logs"])


FIGURES = ["ppl_vs_length", "ppl_vs_length_all", "loss_vs_position", "train_curves", "context_use",
           "context_use_all", "retrieval", "copy_calibration", "copy_curves"]  # retrieval draws retrieval_all too


class Saved(list):
    """The figures plots.save was given, in order; .paths: where each was to be written."""
    def __init__(self):
        super().__init__()
        self.paths = []

    def save(self, fig, path, colours=False):
        """plots.save's stand-in: check_distinct and check_text (they raise on a clash, failing the test), then
        the figure is kept and closed unwritten. Nothing is rasterised, the slow half of a figure."""
        plot_style.check_distinct(fig, colours)
        plot_style.check_text(fig)
        self.append(fig)
        self.paths.append(Path(path))
        plot_style._plt().close(fig)


@pytest.fixture
def checked(monkeypatch):
    """The figures plots.save was given, each after check_distinct and check_text passed on it (they raise on
    a clash, failing the test). Nothing is rasterised, the slow half of a figure: the figure is closed
    unwritten and its path kept. test_smoke_outputs.py's redraw writes every figure of results/ as a PNG."""
    figs = Saved()
    monkeypatch.setattr(plots, "save", figs.save)
    return figs


DRAWN, _drawn = Path("drawn"), {}  # the figures of the committed results, drawn once per test process


def drawn(name) -> Saved:
    """Figure `name` drawn from the committed results once per process (the tests that read it share one worker:
    the committed_figures group), as the checked fixture draws: each figure saved after check_distinct and
    check_text passed on it (they raise on a clash), nothing rasterised; kept for the tests to read.
    Its paths are under DRAWN, never written."""
    if name not in _drawn:
        figs = Saved()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(plots, "save", figs.save)
            _draw(name, DRAWN / f"{name}.png")
        _drawn[name] = figs
    return _drawn[name]


def _data_lines(ax):
    return [ln for ln in ax.get_lines() if ln.get_visible() and ln.get_gid() not in plot_style.EXEMPT]


@pytest.mark.xdist_group("committed_figures")
@pytest.mark.parametrize("name", FIGURES)
def test_figure_from_committed_results(name):
    figs, path = drawn(name), DRAWN / f"{name}.png"
    want = [path] + ([path.with_name(f"{name}_all.png")] if name in ("context_use", "retrieval") else [])
    assert figs.paths == want, f"{name}: figures saved to {figs.paths}, expected {want} (a headline, then its _all)"
    if name != "ppl_vs_length_all":  # every row, by design
        for ax in figs[0].axes:
            assert len(_data_lines(ax)) <= plots.MAX_LINES, f"{name}, {ax.get_title()!r}: too many lines"


@pytest.mark.xdist_group("committed_figures")
def test_headline_has_at_most_8_lines_and_plain_ticks():
    (ax,) = drawn("ppl_vs_length")[0].axes
    labels = [ln.get_label() for ln in _data_lines(ax)]
    present = {r["variant"] for r in _json("extrapolation.json")["rows"]} & set(plots.headline())
    assert len(labels) <= 8 and set(labels) == present, labels
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    assert ticks and all(t.replace(".", "").isdigit() for t in ticks), f"y ticks should read as plain numbers: {ticks}"
    colours = [ln.get_color() for ln in _data_lines(ax)]
    assert len(set(colours)) == len(colours), f"each headline line has its own colour: {colours}"


@pytest.mark.xdist_group("committed_figures")
def test_context_use_headline_is_one_panel_of_distinct_colours():
    """One axes, at most MAX_LINES lines each in its own colour, and a title whose number is the largest
    effective context of any row in the JSON."""
    figs = drawn("context_use")
    (ax,) = figs[0].axes
    colours = [ln.get_color() for ln in _data_lines(ax)]
    assert 0 < len(colours) <= plots.MAX_LINES and len(set(colours)) == len(colours), colours
    most = max(r["effective_context"] for r in _json("context_use.json")["rows"])
    assert f"more than {most} characters" in ax.get_title(), ax.get_title()
    assert figs.paths[1] == DRAWN / "context_use_all.png", figs.paths


def test_retrieval_panels(tmp_path, checked):
    """The headline draws only copy-trained rows, at most MAX_LINES a panel, and says in its one-line title that
    the text-trained ones are 0 everywhere; retrieval_all draws every copy-trained row and counts, in its title,
    the text-trained rows at 0 at every distance, which it does not draw; exact match on its full 0-1 scale."""
    rows = [dict(r, exact=0.0) if r["family"] == "text" else dict(r, exact=0.5) for r in _json("retrieval.json")["rows"]]
    rows += [dict(r, variant="rope_copy", family="copy", exact=0.9) for r in rows if r["variant"] == "rope"]
    plots.retrieval(tmp_path / "r.png", rows, {"key_len": 10})
    headline, every = checked
    copy = {r["variant"] for r in rows if r["family"] == "copy" and not row_names.parse(r["variant"]).seed}  # seeds: a table
    text = {r["variant"] for r in rows if r["family"] == "text"}
    for fig in checked:
        labels = [ln.get_label() for ax in fig.axes for ln in _data_lines(ax)]
        assert not {label.split(" (under ")[0] for label in labels} & text, "an all-zero text row was drawn"
        assert all(len(_data_lines(ax)) <= plots.MAX_LINES for ax in fig.axes)
        assert all(ax.get_ylim() == (-0.03, 1.03) for ax in fig.axes), "exact match on its full 0-1 scale"
        assert "\n" not in fig._suptitle.get_text(), fig._suptitle.get_text()
    drawn = {ln.get_label().split(" (under ")[0] for ax in every.axes for ln in _data_lines(ax)}
    assert copy <= drawn, f"copy-trained rows not drawn: {copy - drawn}"
    hidden = [ln.get_label() for ax in every.axes for ln in _data_lines(ax) if " (under " in ln.get_label()]
    assert hidden and all(label.endswith(")") for label in hidden), "lines drawn on others are not named"
    assert f"({len(text)} text-trained rows, 0 at every d, not drawn)" in every._suptitle.get_text()
    assert "text-trained models: 0 at every d" in headline._suptitle.get_text()
    assert checked.paths[1] == tmp_path / "retrieval_all.png", checked.paths


@pytest.mark.xdist_group("committed_figures")
def test_retrieval_from_the_committed_results_reads_at_a_glance():
    """results/retrieval.json drawn: both figures pass check_text, each panel has at most MAX_LINES data lines,
    the titles are one line, the y label names the measure plainly; the headline has the five schemes and
    RETRIEVAL_FAR's rows."""
    figs = drawn("retrieval")
    assert len(figs) == 2, "retrieval.png, then retrieval_all.png, each checked"
    for fig in figs:
        assert "\n" not in fig._suptitle.get_text(), f"a suptitle of more than one line: {fig._suptitle.get_text()!r}"
        for ax in fig.axes:
            assert len(_data_lines(ax)) <= plots.MAX_LINES, f"{ax.get_title()!r}: {len(_data_lines(ax))} lines"
            assert "\n" not in ax.get_title(), ax.get_title()
        assert fig.axes[0].get_ylabel() == plots.RETRIEVAL_Y
    names = list(dict.fromkeys(r["variant"] for r in _json("retrieval.json")["rows"]))
    five, far = ([ln.get_label().split(" (under ")[0] for ln in _data_lines(ax)] for ax in figs[0].axes)
    # other seeds' rows go to retrieval.md's seeds table, not the figure
    assert five == [n for n in names if plots._group(n) == "copy_five" and not row_names.parse(n).seed], five
    assert far == [n for n in plots.RETRIEVAL_FAR if n in names], far


def test_retrieval_without_copy_trained_rows(tmp_path, checked):
    """A run of text-trained models only (a scheme file's, say), all at 0: both figures draw their first group."""
    rows = [dict(r, exact=0.0) for r in _json("retrieval.json")["rows"] if r["variant"] in ("rope", "alibi")]
    plots.retrieval(tmp_path / "r.png", rows, {"key_len": 10})
    for fig in checked:
        assert [ln.get_label() for ax in fig.axes for ln in _data_lines(ax)] == ["rope", "alibi (under rope)"]
    assert checked[0]._suptitle.get_text() == "Retrieval: is a 10-letter key copied from d characters back?"


def test_other_scripts_follow_the_rule(tmp_path, checked):
    """breakage_test.make_plot on results/breakage.json, benchmark.plot on a small made-up
    measurement (its timings are not stored in results/), visualize_rope figures 1-4, small."""
    from experiments import benchmark
    from experiments import breakage_test
    import visualize_rope
    breakage_test.make_plot(_json("breakage.json"), tmp_path / "breakage.png")
    cfg = benchmark.BenchConfig(lengths=(64, 128), schemes=("none", "learned", "sin", "rope", "alibi"))
    times = {(s, T): 1e-3 * T * (i + 1) for i, s in enumerate(cfg.schemes) for T in cfg.lengths}
    memory = {(s, f"forward {T}"): 2 ** 20 * T * (i + 1) for i, s in enumerate(cfg.schemes) for T in cfg.lengths}
    benchmark.plot(cfg, times, memory, tmp_path / "benchmark.png", "cpu")
    visualize_rope.fig_rotation(tmp_path, 16, 1e4, 8)
    visualize_rope.fig_relative(tmp_path, 16, 1e4, 16)
    visualize_rope.fig_decay(tmp_path, (16, 32), 1e4, max_dist=500)
    visualize_rope.fig_wavelengths(tmp_path, 16, 1e4, 64, 4.0)
    visualize_rope.fig_pairs(tmp_path, [("small", 16, 64, 1e4)], 4.0)
    written = ["breakage", "benchmark", "rope_rotation", "rope_relative", "rope_decay", "rope_wavelengths",
               "rope_pairs"]
    assert checked.paths == [tmp_path / f"{name}.png" for name in written], checked.paths


def test_copy_curves_draws_every_copy_base_model_once(tmp_path, checked):
    """Every copy-trained base model of train_log.json with a probe is drawn in each column of panels, once:
    none is cut to keep a panel at MAX_LINES (the field's twins get their own row)."""
    logs = _json("train_log.json")["logs"]
    plots.copy_curves(tmp_path / "c.png", logs)
    want = sorted(n for n in logs if row_names.parse(n).copy and row_names.parse(n).finetune is None and logs[n].get("probe"))
    for col in range(3):
        drawn = sorted(ln.get_label() for ax in checked[0].axes[col::3] for ln in _data_lines(ax))
        assert drawn == want, f"column {col}: drawn {drawn}, want {want}"


def test_benchmark_figure_keeps_every_scheme_and_at_most_8_lines_a_panel(tmp_path, checked):
    """benchmark.plot with every registered scheme: each is drawn in both columns, and no panel holds more
    than MAX_LINES lines (the tutorial's five in one row, the rest beside RoPE and ALiBi in the next)."""
    from experiments import benchmark
    import schemes
    cfg = benchmark.BenchConfig(lengths=(64, 128), schemes=tuple(schemes.names()))
    times = {(s, T): 1e-3 * T * (i + 1) for i, s in enumerate(cfg.schemes) for T in cfg.lengths}
    memory = {(s, f"forward {T}"): 2 ** 20 * T * (i + 1) for i, s in enumerate(cfg.schemes) for T in cfg.lengths}
    benchmark.plot(cfg, times, memory, tmp_path / "b.png", "cpu")
    axes = checked[0].axes
    assert all(len(_data_lines(ax)) <= plots.MAX_LINES for ax in axes), [len(_data_lines(ax)) for ax in axes]
    for col in range(2):
        drawn = {ln.get_label() for ax in axes[col::2] for ln in _data_lines(ax)}
        assert drawn == set(cfg.schemes), f"column {col}: {sorted(set(cfg.schemes) - drawn)} not drawn"


def _draw_every_figure(names, tmp_path) -> None:
    """Every figure function of lab/plots.py that draws the rows it is given, on made-up numbers for names (text
    rows) and their copy twins (copy_curves, retrieval): each one's check_distinct must pass."""
    lengths, cs, ds = [64, 128, 256], [0, 16, 64], [32, 64]
    rows = [{"variant": n, "train_len": 64, **{f"ppl_{L}": 2 + i + L / 1e3 for L in lengths}} for i, n in enumerate(names)]
    plots.ppl_vs_length(tmp_path / "p.png", rows, lengths)
    plots.ppl_vs_length_all(tmp_path / "pa.png", rows, lengths)
    logs = {n: {"step": [0, 10], "train_loss": [3, 2], "val_loss": [3, 2 + i / 10]} for i, n in enumerate(names)}
    copies = {f"{n}_copy": {**h, "probe": [{"d32": [0.1, 0.0]}, {"d32": [0.5 + i / 20, 0.2]}]}
              for i, (n, h) in enumerate(logs.items())}
    plots.train_curves(tmp_path / "t.png", logs, set())
    plots.copy_curves(tmp_path / "cc.png", copies)
    ctx = [{"variant": n, "effective_context": 16, **{f"c{c}": 2 - c / 100 + i / 50 for c in cs}}
           for i, n in enumerate(names)]
    plots.context_use(tmp_path / "c.png", ctx, {"contexts": cs, "target_len": 16, "train_len": 64})
    ret = [{"variant": f"{n}_copy", "distance": d, "exact": 0.9 - d / 100 + i / 50, "train_len": 64, "family": "copy"}
           for i, n in enumerate(names) for d in ds]
    plots.retrieval(tmp_path / "r.png", ret, {"key_len": 6, "train_len": 64})
    times = {(n, T): 1e-3 * T * (i + 1) for i, n in enumerate(names) for T in lengths}
    memory = {(n, f"forward {T}"): 2 ** 20 * T * (i + 1) for i, n in enumerate(names) for T in lengths}
    plots.benchmark(tmp_path / "b.png", lengths, names, times, memory, "cpu", "made-up times")


def test_option_sets_that_share_a_slot_are_drawn_apart_in_every_figure(tmp_path, checked):
    """t5 and three option sets of it to which style() gives the same look (the crc32 slot): every figure function
    draws each in a look of its own (check_distinct passes; context use and retrieval: a colour of its own)."""
    same = _sharing_a_slot("t5", "scale", 3)
    looks = {tuple(map(str, plot_style.style(n).values())) for n in same}
    assert len(looks) == 1, same  # the rule alone: one look
    _draw_every_figure(["t5", *same], tmp_path)
    assert len(checked) == 9, f"{len(checked)} figures checked"
    for fig in checked:
        for ax in fig.axes:
            lines = {ln.get_label().split(" (under")[0]: plot_style._line_key(ln) for ln in _data_lines(ax)}
            drawn = [n for n in lines if n.removesuffix("_copy") in same]
            assert len({lines[n] for n in drawn}) == len(drawn), f"{ax.get_title()!r}: {lines}"


def test_a_scheme_holding_a_fixed_colour_is_drawn_apart_where_it_meets_that_line(tmp_path, checked):
    """A scheme may take a colour plots gives another line (YaRN's): registering it is not refused, and a figure
    that tells lines apart by colour alone draws it in another colour beside rope+yarn."""
    import schemes
    schemes.register(schemes.Scheme("toy_purple", "nothing", colour=plot_style.COLOURS["yarn"]))
    try:
        cs = [0, 16, 64]
        ctx = [{"variant": n, "effective_context": 16, **{f"c{c}": 2 - c / 100 + i / 50 for c in cs}}
               for i, n in enumerate(["rope+yarn", "toy_purple"])]
        plots.context_use(tmp_path / "c.png", ctx, {"contexts": cs, "target_len": 16, "train_len": 64})
    finally:
        schemes.unregister("toy_purple")
    colours = {ln.get_label(): ln.get_color() for ln in _data_lines(checked[0].axes[0])}
    yarn = plot_style.COLOURS["yarn"]
    assert colours["rope+yarn"] == yarn and colours["toy_purple"] != yarn, colours


def test_options_of_a_scheme_without_ropes_tables_are_not_drawn_as_ropes_options():
    """A scheme file's option set (its scheme does not use RoPE's tables) goes to the panel of other schemes and
    their options; RoPE's own options, and a RoPE-table scheme's option set, stay under 'RoPE options'."""
    import schemes
    schemes.register(schemes.Scheme("toy_bias", "score bias", options={"p": 1}))
    schemes.register(schemes.Scheme("toy_turn", "Q/K rotation", rope_options=True, options={"p": 1}))
    try:
        groups = {n: plots._group(n) for n in ("toy_bias{p=2}", "toy_bias{p=2}_copy", "toy_turn{p=2}", "rope_theta10",
                                               "rope_p75", "toy_bias", "not_loaded_now")}
        panels = {g: t for t, g, _ in plots._panels(list(groups), plots.PPL_PANELS)}
    finally:
        schemes.unregister("toy_bias")
        schemes.unregister("toy_turn")
    assert groups == {"toy_bias{p=2}": "scheme_option", "toy_bias{p=2}_copy": "copy_scheme_option",
                      "toy_turn{p=2}": "option", "rope_theta10": "option", "rope_p75": "option", "toy_bias": "five",
                      "not_loaded_now": "scheme_option"}, groups
    assert "RoPE" not in panels["scheme_option"] and "RoPE" not in panels["copy_scheme_option"], panels
    for spec in (plots.CONTEXT_PANELS, plots.RETRIEVAL_PANELS):
        assert "RoPE" not in next(t for t, g, _ in spec if g == "scheme_option"), spec
