"""experiments/breakage_test.py: the word-order task, the permutation argument behind it, training it with
training.train(), and a --quick run."""
import json
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments import breakage_test as bt  # noqa: E402
import schemes  # noqa: E402
from lab.options import make_config, make_model
from lab import lm_eval


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny tensors: a second thread only adds overhead."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _model(pos="none", causal=False, n_layer=2, vocab=19, seed=0):
    torch.manual_seed(seed)
    m = make_model(make_config(vocab_size=vocab, n_layer=n_layer, n_head=4, n_embd=32, pos=pos, causal=causal, max_len=64))
    with torch.no_grad():  # the 0.02 init is nearly silent; larger weights make any order signal visible
        for mod in m.modules():
            if isinstance(mod, torch.nn.Linear) and mod is not m.head:
                mod.weight.mul_(10.0)
    return m.eval()


# ----------------------------------------------------------------------------- the task

def test_training_set_is_balanced_and_closed_under_swap():
    task = bt.make_task(12, 6, heldout_rings=1, seed=3)
    x, y = bt.training_set(task)
    assert torch.equal(y, x[:, 0]), "the answer must be the first name (the agent)"
    counts = Counter(task.vocab[int(i)] for i in y)
    assert set(counts) == set(task.names) and len(set(counts.values())) == 1, \
        f"every name should be the answer equally often, got {dict(counts)}"
    rows = {tuple(r.tolist()) for r in x}
    assert len(rows) == x.shape[0], "duplicate training sentences"
    for a, v, b, q in rows:
        assert (b, v, a, q) in rows, f"the twin of {task.decode([a, v, b, q])!r} is missing"
    pairs_in_train = {frozenset((task.vocab[a], task.vocab[b])) for a, _, b, _ in rows}
    assert not pairs_in_train & task.heldout, "a held-out name pair leaked into training"
    assert len(task.heldout) == 12


def test_twins_have_the_same_tokens_and_opposite_answers():
    task = bt.make_task(12, 6, heldout_rings=1, seed=0)
    x, y, unseen = bt.make_twins(task, 200, seed=99)
    assert x.shape == (400, 4) and torch.equal(y, x[:, 0])
    for i in range(0, 400, 2):
        s, t = x[i].tolist(), x[i + 1].tolist()
        assert sorted(s) == sorted(t), "twins must hold the same multiset of tokens"
        assert s[0] != s[2] and t == [s[2], s[1], s[0], s[3]], "a twin swaps the two names and nothing else"
        assert y[i] != y[i + 1], "twins must have different answers"
        assert unseen[i] == unseen[i + 1]
    # half the twins use held-out pairs, and those really are held out
    assert int(unseen.sum()) == 200
    for r in x[unseen]:
        assert frozenset((task.vocab[int(r[0])], task.vocab[int(r[2])])) in task.heldout
    # each name is the answer as often as it is the patient: balanced labels within the test set
    assert Counter(x[:, 0].tolist()) == Counter(x[:, 2].tolist())


def test_test_set_depends_on_its_own_seed():
    task = bt.make_task(seed=0)
    a, _, _ = bt.make_twins(task, 50, seed=1)
    b, _, _ = bt.make_twins(task, 50, seed=1)
    c, _, _ = bt.make_twins(task, 50, seed=2)
    assert torch.equal(a, b) and not torch.equal(a, c)


# ----------------------------------------------------------------------------- the permutation argument

def test_bidirectional_nope_is_permutation_equivariant():
    m = _model(pos="none", causal=False, vocab=50)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 50, (3, 17), generator=g)
    perm = torch.randperm(17, generator=g)
    with torch.no_grad():
        out, out_p = m(x).logits, m(x[:, perm]).logits
    diff = (out_p - out[:, perm]).abs().max().item()
    assert diff < 1e-5, f"f(x[perm]) != f(x)[perm]: max diff {diff:.2e}"
    assert out.abs().max() > 0.1, "outputs are too small for the check to mean anything"


@pytest.mark.parametrize("pos", ["rope", "learned", "sin", "alibi"])
def test_positions_break_the_equivariance(pos):
    m = _model(pos=pos, causal=False, vocab=50)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 50, (3, 17), generator=g)
    perm = torch.randperm(17, generator=g)
    with torch.no_grad():
        diff = (m(x[:, perm]).logits - m(x).logits[:, perm]).abs().max().item()
    assert diff > 1e-2, f"pos={pos}: a permuted input gave the permuted output (max diff {diff:.2e})"


def _twin_logits(model, task):
    x = torch.tensor([task.encode("alice", "hit", "bob"), task.encode("bob", "hit", "alice")])
    with torch.no_grad():
        last = model(x).logits[:, -1, :]  # (2, V) at "?"
    return last[0], last[1]


def test_bidirectional_nope_cannot_tell_twins_apart():
    task = bt.make_task()
    a, b = _twin_logits(_model(pos="none", causal=False, vocab=len(task.vocab)), task)
    diff = (a - b).abs().max().item()
    assert diff < 1e-5, f"'alice hit bob ?' and 'bob hit alice ?' differ at '?' by {diff:.2e}"


def test_one_layer_causal_nope_is_blind_two_layers_are_not():
    """The causal mask leaks order, but only a second layer can read it at the last position."""
    task = bt.make_task()
    a, b = _twin_logits(_model(pos="none", causal=True, n_layer=1, vocab=len(task.vocab)), task)
    assert (a - b).abs().max().item() < 1e-5, "1-layer causal NoPE: its last position attends to a set"
    a, b = _twin_logits(_model(pos="none", causal=True, n_layer=2, vocab=len(task.vocab)), task)
    assert (a - b).abs().max().item() > 1e-3, "2-layer causal NoPE should see the order through the mask"


def test_evaluate_twins_gives_exact_chance_for_a_blind_model():
    task = bt.make_task()
    x, y, unseen = bt.make_twins(task, 100, seed=5)
    ev = bt.evaluate_twins(_model(pos="none", causal=False, vocab=len(task.vocab)), x, y, unseen, task,
                           torch.device("cpu"))
    assert ev["acc"] == 0.5 and ev["twins_same_prediction"] == 1.0, ev


# ----------------------------------------------------------------------------- the answer batches

def test_answer_batches_put_the_loss_on_the_answer_only():
    task = bt.make_task()
    x, y = bt.training_set(task)
    xb, tb = bt.answer_batches(x, y, 16)(0, torch.Generator().manual_seed(0))
    assert xb.shape == tb.shape == (16, 4)
    assert (tb[:, :-1] == bt.IGNORE).all() and torch.equal(tb[:, -1], xb[:, 0]), tb
    m = _model(pos="rope", causal=True, vocab=len(task.vocab))
    with torch.no_grad():
        out = m(xb, tb)
        ref = F.cross_entropy(out.logits[:, -1, :], xb[:, 0]).item()  # the answer's loss, by definition
    diff = abs(out.loss.item() - ref)
    assert diff < 1e-5, f"TinyLM's loss with IGNORE targets is {out.loss.item():.6f}, CE at '?' is {ref:.6f} " \
                        f"(diff {diff:.1e}): does TinyLM still skip target {bt.IGNORE}?"


# ----------------------------------------------------------------------------- left-to-right tools

def test_own_sampler_equals_generate_for_a_causal_model():
    m = _model(pos="rope", causal=True, vocab=30)
    prompt = torch.tensor([1, 2, 3, 4])
    ours = bt.sample_left_to_right(m, prompt, 12, ctx=64, temperature=1.0,
                                   generator=torch.Generator().manual_seed(7))
    ref = m.generate(prompt[None], 12, temperature=1.0, use_cache=False, generator=torch.Generator().manual_seed(7))
    assert torch.equal(ours, ref[0]), f"{ours.tolist()} vs {ref[0].tolist()}"


def test_left_to_right_loss_matches_last_window_position():
    """For any model, scoring character p from the ctx before it = the last column of window_losses."""
    m = _model(pos="rope", causal=False, vocab=30)
    ids = torch.randint(0, 30, (200,), generator=torch.Generator().manual_seed(1))
    ctx = 16
    ltr = lm_eval.left_to_right_loss(m, ids, ctx, n_chars=1)  # predicts ids[16] from ids[0:16]
    ref = lm_eval.window_losses(m, ids, ctx, n_windows=1)[0, -1].item()
    assert abs(ltr - ref) < 1e-4, f"{ltr} vs {ref}"


# ----------------------------------------------------------------------------- the script

def test_quick_writes_under_runs_quick_by_default():
    assert bt.parse_args(["--quick"]).out == "runs/quick/breakage"
    # every registered scheme by default: one from a --scheme-file (EXTRA_SCHEME_FILE) sends it to runs/custom
    assert bt.parse_args([]).out == ("runs/custom/breakage" if schemes.FILES else "results")
    assert bt.parse_args(["--quick", "--out", "/elsewhere"]).out == "/elsewhere"


def test_quick_run_writes_its_files(quick_repo):
    """The --quick run of conftest.INDEPENDENT (fewer steps: the blind cells are blind by symmetry), into
    runs/quick/breakage/ of the copy of the checkout."""
    (run,) = [r for r in quick_repo.ran["independent"] if r.cmd.startswith("experiments/breakage_test.py")]
    assert run.code == "0", run.err[-800:]
    out = quick_repo.repo / bt.parse_args(["--quick"]).out
    for name in ("breakage.md", "breakage.json", "breakage.png"):
        assert (out / name).stat().st_size > 0, f"{name} not written"
    res = json.loads((out / "breakage.json").read_text())
    cells = {c["cell"]: c for c in res["word_order"]["cells"]}
    blind = cells["bidirectional / none"]
    assert blind["acc"] == 0.5 and blind["twins_same_prediction"] == 1.0, blind
    assert len(res["char_lm"]["cells"]) == 4
    md = (out / "breakage.md").read_text(encoding="utf-8")
    table_rows = [line for line in md.splitlines() if line.startswith("| ") and "---" not in line]
    n_rows = len(res["word_order"]["cells"]) + len(res["char_lm"]["cells"]) + 2  # + 2 header rows
    assert len(table_rows) == n_rows, f"expected {n_rows} table rows, got {len(table_rows)}"
    settings = json.loads(md.split("## Settings", 1)[1].split("```")[1])
    assert settings["config"] == res["config"], "the settings block is not the run's config"
    assert not list(out.glob("*.tmp")), "a temporary file was left behind"


def test_schemes_with_options_set_are_trained_tabulated_and_drawn(tmp_path):
    """--wo-schemes and --lm-pos take a scheme with options set (t5{scale=2.0}; {a=1,b=2} for two), through
    variants.admit as every script: each is a cell, causal and bidirectional, built with its options, in the
    table and the figure in a colour of its own; a name that is no scheme is one line naming its flag."""
    two = "fox{gate_bias=1.0}{decay_max=64.0}"
    cfg = bt.parse_args(["--quick", "--wo-schemes", "none,t5{scale=2.0},t5{scale=5.657}", "--lm-pos",
                         "fox{gate_bias=1.0,decay_max=64.0}", "--out", str(tmp_path)])
    assert cfg.wo_schemes == ("none", "t5{scale=2.0}", "t5{scale=5.657}") and cfg.lm_pos == two, cfg
    assert bt.scheme_config(two)["pos_options"] == {"gate_bias": 1.0, "decay_max": 64.0}
    assert bt.left_out(cfg) == ["no mask / " + two + ": left out, the scheme is causal only (it has no "
                                "bidirectional form)"], bt.left_out(cfg)
    cfg = bt.replace(cfg, wo_steps=2, wo_test_pairs=8, wo_schemes=cfg.wo_schemes[1:], wo_n_layer=1)
    wo = bt.run_word_order(cfg, torch.device("cpu"))
    cells = [c["cell"] for c in wo["cells"]]
    assert cells == [f"{m} / t5{{scale={s}}}" for m in ("causal", "bidirectional") for s in ("2.0", "5.657")], cells
    lm = [{"cell": "causal / " + two, "pos": two, "train_loss": 2.0, "val_loss_teacher_forced": 2.1,
           "val_loss_left_to_right": 2.2}]
    bt.make_plot({"word_order": wo, "char_lm": {"cells": lm}}, tmp_path / "b.png")
    assert (tmp_path / "b.png").is_file()
    assert bt.plots.style("t5{scale=2.0}")["color"] != bt.plots.style("t5{scale=5.657}")["color"]
    for flag in ("--wo-schemes", "--lm-pos"):
        with pytest.raises(SystemExit) as e:
            bt.parse_args(["--quick", flag, "no_such_scheme"])
        assert e.value.code == 2, flag
