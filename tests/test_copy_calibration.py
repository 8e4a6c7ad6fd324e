"""copy_calibration.py and the planting options it adds to train_compare.py, each checked
against the definition (keys really repeated where reported) or an independent computation."""
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import copy_calibration as CC
import copy_mixture as CM
import tiny_lm
import training
import variants

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parent.parent
KEYS = torch.arange(40, 50)  # key characters: ids the text below never uses


@pytest.mark.parametrize("copies,max_gap", [(2, None), (2, 5), (4, None), (4, 3)])
def test_plant_keys_writes_each_key_where_it_says(copies, max_gap):
    g = torch.Generator().manual_seed(copies * 10 + (max_gap or 0))
    for _ in range(50):
        row = torch.randint(0, 40, (257,))
        planted = CM.plant_keys(row, g, KEYS, key_len=(8, 20), n_keys=2, copies=copies, max_gap=max_gap)
        assert planted, "nothing planted in a 257-token window"
        marked = torch.zeros_like(row, dtype=torch.bool)
        for starts, K in planted:
            assert len(starts) == copies and 8 <= K <= 20, (starts, K)
            assert starts[-1] + K <= row.numel(), f"copy past the window end: {starts}, K={K}"
            first = row[starts[0]:starts[0] + K]
            for a, b in zip(starts, starts[1:]):
                gap = b - a - K
                assert gap >= 0, f"copies overlap: {starts}, K={K}"
                assert max_gap is None or gap <= max_gap, f"gap {gap} > max_gap {max_gap}"
                assert torch.equal(row[b:b + K], first), "a later copy differs from the first"
            for s in starts:
                marked[s:s + K] = True
        assert int((row >= 40).sum()) == int(marked.sum()), "key characters outside the reported copies"


def test_synthetic_windows_hold_only_key_characters():
    ids = torch.randint(0, 40, (3000,))
    x, y = CM.copy_windows(training.random_windows(ids, 64, 8), 8, 64, KEYS, seed=0, key_len=(6, 6), copies=3,
                          synthetic=1.0)(0, torch.Generator())
    assert bool(((x >= 40) & (y >= 40)).all()), "a synthetic window kept some text"
    assert torch.equal(x[:, 1:], y[:, :-1])


def test_train_probe_is_called_at_each_eval_and_changes_nothing():
    tc = variants.TrainConfig(seq_len=16, batch_size=4, steps=6, warmup=2, eval_every=2, eval_windows=2)
    ids = torch.randint(0, 20, (2000,))
    cfg = tiny_lm.GPTConfig(vocab_size=20, n_layer=1, n_head=2, n_embd=8, pos="rope")
    models = []
    for probe in (None, lambda m: {"n": float(m(ids[None, :16]).logits.detach().sum())}):
        torch.manual_seed(0)
        models.append(tiny_lm.TinyLM(cfg))
        hist = training.train(models[-1], ids, ids, tc, probe=probe)
    assert [p["n"] for p in hist["probe"]] and len(hist["probe"]) == len(hist["step"]) == 3, hist
    for (n, a), b in zip(models[0].state_dict().items(), models[1].state_dict().values()):
        assert torch.equal(a, b), f"{n} differs with a probe: max diff {(a - b).abs().max():.2e}"


def test_probe_windows_and_own_gain_against_a_direct_computation():
    torch.manual_seed(0)
    val = torch.randint(0, 40, (4000,))
    mix = CC.Mixture("x", (5, 7), copies=3, max_gap=4)
    seqs, keys = CC.probe_windows(val, 48, mix, KEYS, seed=0, n=6)
    for r, starts, K in keys:
        for s in starts[1:]:
            assert torch.equal(seqs[r, s:s + K], seqs[r, starts[0]:starts[0] + K]), (r, starts)
    model = tiny_lm.TinyLM(tiny_lm.GPTConfig(vocab_size=50, n_layer=1, n_head=2, n_embd=8, pos="rope")).eval()
    got = CC.own_gain(model, seqs, keys)
    firsts, laters = [], []
    with torch.no_grad():
        for r, starts, K in keys:
            loss = F.cross_entropy(model(seqs[r:r + 1, :-1]).logits[0], seqs[r, 1:], reduction="none")  # (T,)
            # characters 2..K of the copy at s: predicted at positions s .. s + K - 2
            firsts.append(loss[starts[0]:starts[0] + K - 1].mean())
            laters.append(torch.stack([loss[s:s + K - 1].mean() for s in starts[1:]]).mean())
    want = (torch.stack(firsts) - torch.stack(laters)).mean().item()
    assert abs(got["gain"] - want) < 1e-5, f"own gain {got['gain']:.6f} vs direct {want:.6f}"


def test_alphabets_rare_is_the_least_frequent():
    text = "aaaa bbb cc d e"
    a = CC.alphabets(text, "".join(sorted(set(text + "\n"))))
    assert a["all"] == " abcde" and set(a["digits"]) == set("0123456789")
    assert set(a["rare"]) == set(" abcde\n"), a["rare"]  # fewer than 18 characters: all of them


def test_quick_run_outputs_and_bad_input(tmp_path):
    env_cmd = [sys.executable, str(ROOT / "copy_calibration.py"), "--quick", "--mixtures", "digits_long,synthetic",
               "--out", str(tmp_path / "out"), "--results", str(tmp_path / "res")]
    r = subprocess.run(env_cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-800:]
    rows = (tmp_path / "res" / "copy_calibration.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[0].startswith("mixture,"), rows
    data = json.loads((tmp_path / "res" / "copy_calibration.json").read_text())
    assert set(data["curves"]) == {"digits_long", "synthetic"}
    assert (tmp_path / "res" / "copy_calibration.png").stat().st_size > 1000
    saved = torch.load(tmp_path / "out" / "synthetic.pt", weights_only=True)
    model = tiny_lm.TinyLM(tiny_lm.GPTConfig(**saved["config"]))
    model.load_state_dict(saved["model"])  # the final weights reload into the model they came from
    again = subprocess.run(env_cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "reusing" in again.stderr, again.stderr[-400:]
    one = subprocess.run([*env_cmd[:4], "synthetic", *env_cmd[5:]], cwd=ROOT, capture_output=True, text=True, timeout=300)
    rows = (tmp_path / "res" / "copy_calibration.csv").read_text().splitlines()
    assert one.returncode == 0 and len(rows) == 3, f"a run of one mixture dropped the other's row: {rows}"
    bad = subprocess.run([sys.executable, str(ROOT / "copy_calibration.py"), "--quick", "--mixtures", "nope"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown mixture" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, \
        bad.stderr
    rec = json.loads((tmp_path / "out" / "synthetic.json").read_text())
    rec["train"]["lr"] = 1.0  # as if saved by other settings
    (tmp_path / "out" / "synthetic.json").write_text(json.dumps(rec))
    clash = subprocess.run(env_cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert clash.returncode == 2 and "other settings" in clash.stderr, clash.stderr[-400:]


def test_mixtures_fit_the_training_window():
    """Every mixture's keys fit a 257-token window with all their copies (plant_keys would raise)."""
    g = torch.Generator().manual_seed(0)
    for name, mix in CC.MIXTURES.items():
        row = torch.zeros(variants.TrainConfig.seq_len + 1, dtype=torch.long)
        big = replace(mix, key_len=(mix.key_len[1], mix.key_len[1]))
        assert CM.plant_keys(row, g, KEYS, big.key_len, big.n_keys, big.copies, big.max_gap), name


def test_only_real_runs_write_results(tmp_path, capsys):
    """--steps or --pos other than the real run's: <out>/results with a note, or refused in one
    line when --results results is given, before anything is trained. A mixture's own longer
    schedule (the *_4x ones) is its real run."""
    repo, out = ROOT / "results", tmp_path / "out"
    for argv, why in ((["--steps", "5"], "synthetic steps=5 (real run: 1100)"),
                      (["--pos", "alibi"], "model={'pos': 'alibi'} (real run: {'pos': 'rope'})")):
        with pytest.raises(SystemExit) as e:
            CC.main([*argv, "--mixtures", "synthetic", "--results", str(repo), "--out", str(out)])
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and len(err) == 1 and why in err[0], err
    args = CC.parse_args(["--steps", "5", "--mixtures", "synthetic,rare_near_4x"])
    assert CC.output_folder(args, *CC.settings(args), repo, out) == out / "results"
    note = capsys.readouterr().err
    assert note.startswith("note: ") and "rare_near_4x steps=5 (real run: 4400)" in note, note
    args = CC.parse_args(["--mixtures", "synthetic,rare_near_4x"])
    assert CC.real_run_changes(args, *CC.settings(args)) == [], "the real run (it may write results/)"
    assert not out.exists(), "deciding the folder made it"


def test_a_broken_record_is_reported_before_anything_is_trained(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "synthetic.json").write_text("{not json")
    with pytest.raises(SystemExit) as e:
        CC.main(["--quick", "--mixtures", "digits_long,synthetic", "--out", str(out), "--results", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "synthetic.json is not a record" in err[0], err
    assert sorted(p.name for p in out.iterdir()) == ["synthetic.json"], "digits_long was trained first"
