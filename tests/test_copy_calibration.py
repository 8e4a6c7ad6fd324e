"""experiments/copy_calibration.py: the probe windows and the own-copy gain against a direct computation, the
alphabets, every mixture fits the training window, a --quick run's outputs, reuse and merge, and its
answers to bad input; only real runs write results/. (The planting itself: test_copy_mixture.py.)"""
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from experiments import copy_calibration as CC
from lab import copy_mixture as CM
from lab.options import make_config, make_model
import tiny_lm
from lab import variants

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parent.parent
KEYS = torch.arange(40, 50)  # key characters: ids the text below never uses


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


@pytest.mark.slow
def test_quick_run_outputs_and_bad_input(tmp_path, capsys, refused, unrasterised):
    argv = ["--quick", "--mixtures", "digits_long,synthetic", "--out", str(tmp_path / "out"), "--results",
            str(tmp_path / "res")]
    assert CC.main(argv) == 0
    rows = (tmp_path / "res" / "copy_calibration.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[0].startswith("mixture,"), rows
    data = json.loads((tmp_path / "res" / "copy_calibration.json").read_text())
    assert set(data["curves"]) == {"digits_long", "synthetic"}
    assert (tmp_path / "res" / "copy_calibration.png").stat().st_size > 1000
    saved = torch.load(tmp_path / "out" / "synthetic.pt", weights_only=True)
    model = make_model(make_config(**saved["config"]))
    model.load_state_dict(saved["model"])  # the final weights reload into the model they came from
    unrasterised()  # the figure was written above; the reruns below check reuse and merged rows
    capsys.readouterr()
    assert CC.main(argv) == 0
    assert "reusing" in capsys.readouterr().err
    assert CC.main([*argv[:2], "synthetic", *argv[3:]]) == 0
    rows = (tmp_path / "res" / "copy_calibration.csv").read_text().splitlines()
    assert len(rows) == 3, f"a run of one mixture dropped the other's row: {rows}"
    assert "unknown mixture" in refused(CC.main, ["--quick", "--mixtures", "nope"])
    rec = json.loads((tmp_path / "out" / "synthetic.json").read_text())
    rec["train"]["lr"] = 1.0  # as if saved by other settings
    (tmp_path / "out" / "synthetic.json").write_text(json.dumps(rec))
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        CC.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "other settings" in err, err[-400:]


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
