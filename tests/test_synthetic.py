"""lab/synthetic.py and experiments/synthetic_test.py: the answers the loss and the score read, the fixed test
sets, the score against a count made here from the texts, and the command (--quick, resuming, --redraw, bad
input)."""
import json
import random
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments import synthetic_test as st  # noqa: E402
from lab import synthetic as SY  # noqa: E402
from lab import synthetic_tasks as S  # noqa: E402
from lab.long_context import clopper_pearson  # noqa: E402


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors (conftest.one_thread)


def test_encode_puts_each_answer_before_its_position():
    rng = random.Random(0)
    samples = [S.flip_flop(32, rng) for _ in range(5)]
    x, y = SY.encode(samples, S.alphabet("flip_flop"))
    vocab = S.alphabet("flip_flop")
    for b, s in enumerate(samples):
        assert "".join(vocab[i] for i in x[b]) == s.text
        want = {i - 1: vocab.index(s.text[i]) for i in s.answers}
        got = {i: int(v) for i, v in enumerate(y[b]) if v != SY.IGNORE}
        assert got == want, (b, got, want)


def test_test_set_is_fixed_and_large_enough():
    x1, y1 = SY.test_set("mqar", 128)
    x2, y2 = SY.test_set("mqar", 128)
    assert torch.equal(x1, x2) and torch.equal(y1, y2), "the same sequences for every model and run"
    assert (y1 != SY.IGNORE).sum() >= SY.MIN_ANSWERS and x1.shape[0] >= SY.MIN_SEQUENCES
    assert not torch.equal(SY.test_set("flip_flop", 64)[0], SY.test_set("flip_flop_sparse", 64)[0])
    # the sparse split really is sparse: about 98% of the instructions between the first and last are ignores
    xs, _ = SY.test_set("flip_flop_sparse", 256)
    ops = xs[:, 2:-2:2]
    share = (ops == S.alphabet("flip_flop").index("i")).float().mean().item()
    assert abs(share - 0.98) < 0.01, share


def test_batches_follow_the_generator_only():
    make = SY.batches("reverse", 64, 4)
    a = make(0, torch.Generator().manual_seed(5))
    b = make(7, torch.Generator().manual_seed(5))
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    assert not torch.equal(a[0], make(0, torch.Generator().manual_seed(6))[0])


class Constant(torch.nn.Module):
    """A stand-in model that predicts the character c everywhere."""

    def __init__(self, vocab, c):
        super().__init__()
        self.V, self.i = len(vocab), vocab.index(c)

    def forward(self, x):
        logits = torch.zeros(*x.shape, self.V)
        logits[..., self.i] = 1.0
        return SimpleNamespace(logits=logits)


def test_score_counts_the_answers_equal_to_the_prediction():
    """A model that always says '0' is right on exactly the reads whose bit is 0, counted here from the texts."""
    vocab = S.alphabet("flip_flop")
    got = SY.score(Constant(vocab, "0"), "flip_flop", 128, batch_tokens=1000)
    rng, right, answers, seqs = random.Random("synthetic/flip_flop/128"), 0, 0, 0
    while answers < SY.MIN_ANSWERS or seqs < SY.MIN_SEQUENCES:
        s = S.flip_flop(128, rng)
        right += sum(s.text[i] == "0" for i in s.answers)
        answers, seqs = answers + len(s.answers), seqs + 1
    assert got == {"right": right, "answers": answers, "sequences": seqs}


def test_plan_trains_seed_0_of_every_scheme_first():
    args = SimpleNamespace(seeds=[0], core_seeds=[0, 1], schemes=["kerple", "fox", "rope"], tasks=["mqar", "reverse"])
    assert st.plan(args) == [("rope", "mqar", 0), ("rope", "reverse", 0), ("fox", "mqar", 0), ("fox", "reverse", 0),
                             ("kerple", "mqar", 0), ("kerple", "reverse", 0), ("rope", "mqar", 1), ("rope", "reverse", 1)]


def test_recipe_table_counts_the_full_commands_models_in_results():
    def made(name, task, seed, train_s):
        return {"recipe": SY.recipe_of(task), "checkpoint": f"runs/synthetic/{task}/{name}_seed{seed}.pt",
                "device": "cpu", "train_s": train_s, "config": {"n_layer": 4, "n_head": 4, "n_embd": 128}}
    res = {"provenance": {"rope/mqar/seed0": made("rope", "mqar", 0, 1800.0),
                          "rope+yarn/mqar/seed0": made("rope", "mqar", 0, 1800.0),  # scored, not trained: not counted
                          "alibi/reverse/seed0": made("alibi", "reverse", 0, 1800.0)}}
    full = [("rope", "mqar", 0), ("alibi", "reverse", 0), ("alibi", "mqar", 0)]
    last = st.recipe_table(res, full).splitlines()[-1]
    assert "2 of the full command's 3 models trained so far" in last and "1.0 h of training" in last, last
    assert "all 2 models of the full command trained" in st.recipe_table(res, full[:2]).splitlines()[-1]
    assert "2 models trained on cpu" in st.recipe_table(res).splitlines()[-1], "without a plan: the count alone"
    rows = st.recipe_table(res, full).splitlines()[2:4]
    assert [r.split(" | ")[0] for r in rows] == ["| mqar", "| reverse"] and rows[0].endswith("| 1 | 30 min |"), rows
    assert "slowest seed" not in last, "one seed per scheme and task: no spread to state"


def test_recipe_table_states_the_spread_between_seeds():
    """The same scheme, task and recipe over seeds: the ratio of their slowest to fastest training time, its
    median over (scheme, task) and the largest (rope+yarn is rope's model scored again, not a model of its own)."""
    def made(task, train_s):
        return {"recipe": SY.recipe_of(task), "checkpoint": f"runs/synthetic/{task}/x.pt", "device": "cpu",
                "train_s": train_s, "config": {"n_layer": 4, "n_head": 4, "n_embd": 128}}
    res = {"provenance": {"rope/mqar/seed0": made("mqar", 400.0), "rope/mqar/seed1": made("mqar", 1000.0),
                          "rope+yarn/mqar/seed0": made("mqar", 40.0), "alibi/reverse/seed0": made("reverse", 60.0),
                          "alibi/reverse/seed1": made("reverse", 200.0), "alibi/reverse/seed2": made("reverse", 100.0)}}
    median, widest = st.seed_time_spread(res)
    assert widest == (200.0 / 60.0, "alibi", "reverse") and median == (2.5 + 200.0 / 60.0) / 2, (median, widest)
    last = st.recipe_table(res).splitlines()[-1]
    assert "a median 2.9x as long in its slowest seed" in last and "at most 3.3x, alibi on reverse" in last, last


def test_the_main_figures_lines_are_far_apart_in_colour():
    """The main panel's lines are told apart by colour alone (one marker, solid): no two are lookalikes
    (learned's orange and CoPE's old #e6550d were 94 apart)."""
    from lab import plot_style
    colour = {n: plot_style.style(n)["color"] for n in st.MAIN_LINES}
    near = min((plot_style.colour_distance(colour[a], colour[b]), a, b)
               for i, a in enumerate(st.MAIN_LINES) for b in st.MAIN_LINES[i + 1:])
    assert near[0] >= 120, f"{near[1]} and {near[2]} are {near[0]:.0f} apart in colour: {colour}"


# ----------------------------------------------------------------------------- the command

QUICK = ["--quick", "--variants", "rope", "--tasks", "flip_flop,mqar"]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic")
    argv = [*QUICK, "--out", str(out), "--ckpt-dir", str(out / "ckpt")]
    old = torch.get_num_threads()
    torch.set_num_threads(1)  # set up before one_thread runs
    try:
        assert st.main(argv) == 0
    finally:
        torch.set_num_threads(old)
    return out, argv


def test_quick_rows_and_intervals(quick_run):
    out, _ = quick_run
    res = json.loads((out / "synthetic.json").read_text())
    rows = res["rows"]
    want = {(v, s, k) for v in ("rope", "rope+yarn") for s in ("flip_flop", "flip_flop_sparse",
                                                                      "flip_flop_dense", "mqar") for k in SY.MULTIPLES}
    assert {(r["variant"], r["split"], r["multiple"]) for r in rows} == want
    for r in rows:
        lo, hi = clopper_pearson(r["right"], r["answers"])
        assert abs(r["ci_low"] - lo) < 1e-4 and abs(r["ci_high"] - hi) < 1e-4, r
        assert abs(r["accuracy"] - r["right"] / r["answers"]) < 1e-4, r
    # rope+yarn at L is rope itself (factor 1); its provenance names the scaling
    at_l = {(r["variant"], r["split"]): r["right"] for r in rows if r["multiple"] == 1}
    assert at_l[("rope", "mqar")] == at_l[("rope+yarn", "mqar")]
    assert "yarn" in res["provenance"]["rope+yarn/mqar/seed0"]["scaling"]
    for name in ("synthetic.md", "synthetic.csv", "synthetic.png", "synthetic_all.png"):
        assert (out / name).stat().st_size > 0, name


def test_rerun_trains_nothing_and_redraw_is_the_same(quick_run, capsys, unrasterised):
    out, argv = quick_run
    md = (out / "synthetic.md").read_text()
    unrasterised()  # the figures were written by quick_run; this rerun checks what it trains and its tables
    capsys.readouterr()
    assert st.main(argv) == 0
    said = capsys.readouterr().out
    assert said.count("already") == 2, said
    assert (out / "synthetic.md").read_text() == md, "the rerun's tables, drawn from synthetic.json, are the same"


def test_a_saved_model_is_scored_again_not_trained_and_a_broken_one_is_trained(quick_run, tmp_path, capsys,
                                                                               unrasterised):
    """Rows lost from synthetic.json (a run stopped between saving a model and writing its rows) come back from
    the checkpoint, the same numbers, with no training; a checkpoint that is not one is trained again."""
    out, argv = quick_run
    res = json.loads((out / "synthetic.json").read_text())
    work = tmp_path / "out"
    shutil.copytree(out, work)
    lost = {k for k in res["provenance"] if k.split("/")[0] in ("rope", "rope+yarn")}
    kept = {**res, "rows": [r for r in res["rows"] if r["variant"] not in ("rope", "rope+yarn")],
            "provenance": {k: v for k, v in res["provenance"].items() if k not in lost}}
    (work / "synthetic.json").write_text(json.dumps(kept))
    (work / "ckpt" / "mqar" / "rope_seed0.pt").write_bytes(b"not a checkpoint")
    unrasterised()
    capsys.readouterr()
    argv = [*QUICK, "--out", str(work), "--ckpt-dir", str(work / "ckpt")]
    assert st.main(argv) == 0
    said = capsys.readouterr()
    assert "rope on flip_flop, seed 0:" not in said.err, "the saved model was trained again"
    assert "rope on mqar, seed 0:" in said.err and "not a checkpoint to reuse" in said.out, said.out
    again = json.loads((work / "synthetic.json").read_text())
    def of(rows, split):
        return sorted((r["variant"], r["length"], r["right"]) for r in rows if r["split"] == split)
    assert of(again["rows"], "flip_flop") == of(res["rows"], "flip_flop")
    assert of(again["rows"], "mqar") == of(res["rows"], "mqar"), "the same recipe and seed train the same model"


@pytest.mark.parametrize("bad, says", [
    (["--tasks", "copy"], "--tasks copy"), (["--variants", "ropey"], "--variants"), (["--seeds", "x"], "--seeds"),
    (["--variants", "rope+yarn"], "rope+yarn"), (["--quick", "--out", "results"], "results/"),
    (["--device", "nonsense"], "nonsense")])
def test_bad_input_is_one_line_and_exit_2(bad, says, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        st.main([*bad, "--ckpt-dir", str(tmp_path / "ck")] + ([] if "--out" in bad else ["--out", str(tmp_path)]))
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and says in err, err
    assert not (tmp_path / "ck").exists(), "nothing trained"


def test_corrupt_results_refused_before_training(tmp_path, capsys):
    (tmp_path / "synthetic.json").write_text('{"rows": [NaN]}')
    with pytest.raises(SystemExit) as e:
        st.main([*QUICK, "--out", str(tmp_path), "--ckpt-dir", str(tmp_path / "ck")])
    assert e.value.code == 2 and "NaN" in capsys.readouterr().err
    assert not (tmp_path / "ck").exists()
