"""train_compare.py: the --quick run's checkpoints and log (conftest.quick_repo), a finished variant is
skipped on a rerun; for bigger runs a killed or interrupted variant resumes bit-identically, same
seed = same weights, two torchrun processes = one process, the GPU preset's flags on a CPU, the
answers to bad input (corpus, learning rate, preset conflicts, broken or foreign states), and which
results folder its checkpoints may write.

Only what is about a process runs in one: the SIGKILL and the Ctrl-C (SIGINT), and torchrun's two
ranks. Everything else calls train_compare.main in this process, on one thread, as the subprocesses
run (OMP_NUM_THREADS=1), so that their weights can be compared bit for bit."""
import contextlib
import csv
import io
import math
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

import tiny_lm
from lab import checkpoint_io
import train_compare as tcmp
from conftest import ENV, ROOT
from lab.eval_common import LOG_KEYS
from lab.options import make_config, make_model
from lab.variants import TrainConfig

STEPS = "40"


def weights(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def assert_same_run(a_path, b_path, what):
    """Every tensor of the two checkpoints torch.equal, and the same loss history."""
    a, b = weights(a_path), weights(b_path)
    assert a["model"].keys() == b["model"].keys()
    differ = [k for k in a["model"] if not torch.equal(a["model"][k], b["model"][k])]
    worst = max(((a["model"][k] - b["model"][k]).abs().max().item() for k in differ), default=0.0)
    assert not differ, f"{what}: {len(differ)} tensors differ (e.g. {differ[0]}, max abs diff {worst:.2e})"
    for k in ("step", "train_loss", "val_loss"):
        assert a["losses"][k] == b["losses"][k], \
            f"{what}: loss history {k} differs: {a['losses'][k]} vs {b['losses'][k]}"


def main_in_process(argv) -> tuple:
    """train_compare.main(argv) here, on one thread: (exit code, stdout, stderr)."""
    out, err, before = io.StringIO(), io.StringIO(), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = tcmp.main(argv)
            except SystemExit as e:
                code = e.code
    finally:
        torch.set_num_threads(before)
    return code or 0, out.getvalue(), err.getvalue()


# ----------------------------------------------------------------------------- the --quick run

def test_train_compare_writes_checkpoints_and_logs(quick_ck, quick_repo):
    names = ["none", "learned", "sin", "rope", "alibi", "rope_ft_linear", "rope_ft_yarn", "rope_ft_none", "alibi_ft"]
    for n in names:
        assert (quick_ck / f"{n}.pt").is_file(), f"no checkpoint for {n}"
    rows = list(csv.DictReader(open(quick_repo.res / "train_log.csv")))
    assert {row["variant"] for row in rows} == set(names) | {"rope_copy", "irope_copy", "rope_copy_ft_yarn",
                                                    "rope_ft_drope", "rope_ft_keep"}
    assert all(math.isfinite(float(row["val_loss"])) for row in rows)
    assert (quick_repo.res / "train_curves.png").stat().st_size > 10_000


def test_rerun_skips_finished_variants(quick_ck, tmp_path, unrasterised):
    unrasterised()  # what is checked is the skipping, not the curves drawn after it
    p = quick_ck / "rope.pt"
    before = p.stat().st_mtime_ns
    code, out, err = main_in_process(["--quick", "--variants", "rope", "--out", str(quick_ck), "--results",
                                      str(tmp_path / "t2")])
    assert code == 0, err[-1000:]
    assert "exists, skipping" in out
    assert p.stat().st_mtime_ns == before, "a finished checkpoint was rewritten without --force"
    assert "other settings" not in out, out
    # the same checkpoint under another recipe: still skipped, but the user is told what differs
    code, out, err = main_in_process(["--quick", "--variants", "rope", "--steps", "7", "--lr", "0.01",
                                      "--out", str(quick_ck), "--results", str(tmp_path / "t2")])
    assert code == 0, err[-1000:]
    assert "trained with other settings (lr, steps)" in out, out
    assert p.stat().st_mtime_ns == before


def test_bad_input_train_compare(tmp_path, refused):
    msg = refused(tcmp.main, ["--quick", "--variants", "rope,bogus", "--out", str(tmp_path)])
    assert "bogus" in msg and "known" in msg
    assert "--variants is empty" in refused(tcmp.main, ["--quick", "--variants", "", "--out", str(tmp_path)])
    msg = refused(tcmp.main, ["--quick", "--corpus", str(tmp_path / "nope.txt"), "--out", str(tmp_path)])
    assert "does not exist" in msg
    (tmp_path / "tiny.txt").write_text("abc")
    msg = refused(tcmp.main, ["--quick", "--corpus", str(tmp_path / "tiny.txt"), "--out", str(tmp_path)])
    assert "too small" in msg


# ----------------------------------------------------------------------------- resuming, seeds, processes

@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """300,000 characters of the default corpus (last 10% for validation): loads in no time."""
    from lab.corpora import load_corpus
    train_text, val_text, _ = load_corpus(None)
    p = tmp_path_factory.mktemp("corpus") / "small.txt"
    p.write_text((train_text + val_text)[:300_000], encoding="utf-8")
    return p


def quick_cmd(corpus, out, *more):
    return ["train_compare.py", "--quick", "--variants", "rope", "--steps", STEPS, "--save-every", "5",
            "--corpus", str(corpus), "--out", str(out), "--results", str(out / "res"), *more]


def stop_when_saved(runs: dict) -> dict:
    """Start each command of {name: (command, state file, signal)} at once (two cores), send each its signal
    as soon as its state file exists, and return {name: (returncode, stdout, stderr)}."""
    procs = {n: subprocess.Popen([sys.executable, *cmd], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for n, (cmd, _, _) in runs.items()}
    waiting, deadline = set(runs), time.monotonic() + 120
    while waiting and time.monotonic() < deadline:  # nothing else runs here: the signal follows within ms
        for n in sorted(waiting):
            _, state, sig = runs[n]
            if procs[n].poll() is not None:
                waiting.discard(n)
            elif state.exists():
                procs[n].send_signal(sig)
                waiting.discard(n)
        time.sleep(0.005)
    outputs = {n: p.communicate(timeout=120) for n, p in procs.items()}
    return {n: (procs[n].returncode, *outputs[n]) for n in procs}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, corpus):
    """B: a process SIGKILLed once its first state file exists, then the same command again (here).
    E, beside it: a process sent SIGINT (Ctrl-C) once its first state file exists;
    test_ctrl_c_saves_the_state_and_prints_the_command continues it. A: uninterrupted, here.
    The state B left behind is kept as B/kept.state.pt for the error tests."""
    d = tmp_path_factory.mktemp("resume")
    state = d / "B" / "rope.state.pt"
    done = stop_when_saved({"B": (quick_cmd(corpus, d / "B"), state, signal.SIGKILL),
                            "E": (quick_cmd(corpus, d / "E"), d / "E" / "rope.state.pt", signal.SIGINT)})
    code, _, err = done["B"]
    assert code == -signal.SIGKILL, f"the run was not killed (exit {code}): {err[-800:]}"
    assert not (d / "B" / "rope.pt").exists(), "the run finished before it was killed: nothing was resumed"
    assert state.is_file(), "no state file after the kill"
    killed_at = weights(state)["step"]
    assert 0 < killed_at < int(STEPS), killed_at
    shutil.copy(state, d / "B" / "kept.state.pt")
    code, out, err = main_in_process(quick_cmd(corpus, d / "A")[1:])
    assert code == 0, err[-2000:]
    code, out, err = main_in_process(quick_cmd(corpus, d / "B")[1:])
    assert code == 0, err[-2000:]
    assert f"resuming from step {killed_at} of {STEPS}" in out, out
    return d, killed_at, done["E"]


def test_killed_run_resumes_bit_identical(runs):
    d, killed_at, _ = runs
    assert_same_run(d / "A" / "rope.pt", d / "B" / "rope.pt", f"killed after step {killed_at}, then resumed")
    assert not (d / "B" / "rope.state.pt").exists(), "the state file must go once the checkpoint is written"
    assert not (d / "A" / "rope.state.pt").exists()


def test_same_seed_same_weights_other_seed_differs(runs, corpus):
    d, _, _ = runs
    code, _, err = main_in_process(quick_cmd(corpus, d / "C")[1:])
    assert code == 0, err[-2000:]
    assert_same_run(d / "A" / "rope.pt", d / "C" / "rope.pt", "two runs with seed 0")
    code, _, err = main_in_process(quick_cmd(corpus, d / "D", "--seed", "1")[1:])
    assert code == 0, err[-2000:]
    a, b = weights(d / "A" / "rope.pt")["model"], weights(d / "D" / "rope.pt")["model"]
    same = [k for k in a if torch.equal(a[k], b[k]) and a[k].abs().sum() > 0 and a[k].std() > 0]
    assert not same, f"seed 1 left these random tensors equal to seed 0's: {same}"


def test_ctrl_c_saves_the_state_and_prints_the_command(runs, corpus):
    d, _, (code, _, err) = runs
    out = d / "E"
    assert code == 130, f"exit {code} after SIGINT, stderr: {err[-800:]}"
    assert "Traceback" not in err, err[-1500:]
    assert f"training state saved to {out / 'rope.state.pt'}" in err, err[-800:]
    line = next((ln for ln in err.splitlines() if ln.startswith("continue with: ")), None)
    assert line, f"no 'continue with:' line in {err[-800:]}"
    argv = shlex.split(line[len("continue with: "):])
    assert argv[:2] == ["python", "train_compare.py"] and argv[2:] == quick_cmd(corpus, out)[1:], argv
    code, stdout, err = main_in_process(argv[2:])
    assert code == 0, err[-2000:]
    assert "resuming from step" in stdout, stdout
    assert_same_run(d / "A" / "rope.pt", out / "rope.pt", "interrupted by SIGINT, then continued")


def test_truncated_state_gets_one_line_error(runs, corpus, tmp_path, refused):
    d, _, _ = runs
    data = (d / "B" / "kept.state.pt").read_bytes()
    (tmp_path / "rope.state.pt").write_bytes(data[:len(data) // 2])
    msg = refused(tcmp.main, quick_cmd(corpus, tmp_path)[1:])
    assert str(tmp_path / "rope.state.pt") in msg and "delete it" in msg and "--force" in msg, msg
    assert not (tmp_path / "rope.pt").exists(), "a run with a broken state must not train"
    # not a torch file at all, and --force: start over instead
    (tmp_path / "x.state.pt").write_bytes(b"not a state")
    with pytest.raises(tcmp.StateError, match="not a readable training state"):
        tcmp.load_state(tmp_path / "x.state.pt", {})
    assert tcmp.load_state(tmp_path / "x.state.pt", {}, force=True) is None
    assert tcmp.load_state(tmp_path / "missing.state.pt", {}) is None


def test_state_from_other_settings_is_refused_and_named(runs, corpus, tmp_path, refused):
    d, _, _ = runs
    shutil.copy(d / "B" / "kept.state.pt", tmp_path / "rope.state.pt")
    msg = refused(tcmp.main, quick_cmd(corpus, tmp_path, "--seed", "3")[1:])
    assert str(tmp_path / "rope.state.pt") in msg and "train.seed" in msg, msg
    assert "other settings" in msg and "--force" in msg, msg
    saved = weights(tmp_path / "rope.state.pt")["identity"]
    cases = {"variant": dict(saved, variant="alibi"),
             "model.n_layer": dict(saved, model={**saved["model"], "n_layer": 9}),
             "corpus": dict(saved, corpus="another"), "train.lr": dict(saved, train={**saved["train"], "lr": 1.0}),
             "world_size": dict(saved, world_size=2), "amp": dict(saved, amp="bf16")}
    for name, identity in cases.items():
        with pytest.raises(tcmp.StateError, match=f"other settings \\({name}\\)"):
            tcmp.load_state(tmp_path / "rope.state.pt", identity)
        assert tcmp.load_state(tmp_path / "rope.state.pt", identity, force=True) is None, name
    assert tcmp.load_state(tmp_path / "rope.state.pt", saved)["step"] == weights(tmp_path / "rope.state.pt")["step"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_match_one(corpus, tmp_path):
    """torchrun, 2 CPU processes (gloo), each half of every batch = 1 process (here), whole batches."""
    common = ["--quick", "--variants", "rope", "--steps", "6", "--eval-every", "1", "--batch-size", "8",
              "--corpus", str(corpus)]
    two = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
                            "127.0.0.1", "--master_port", str(free_port()), "train_compare.py", *common,
                            "--out", str(tmp_path / "two"), "--results", str(tmp_path / "r2")],
                           cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    code, _, err = main_in_process([*common, "--out", str(tmp_path / "one"), "--results", str(tmp_path / "r1")])
    assert code == 0, err[-2000:]
    out2, err2 = two.communicate(timeout=300)
    assert two.returncode == 0, err2[-3000:]
    assert "x 2 processes" in out2 and out2.count("rope: val loss") == 1, f"only rank 0 may print: {out2}"
    a, b = weights(tmp_path / "one" / "rope.pt"), weights(tmp_path / "two" / "rope.pt")
    for k in ("train_loss", "val_loss"):
        x, y = torch.tensor(a["losses"][k]), torch.tensor(b["losses"][k])
        assert len(x) == 6 and len(y) == 6, (k, x, y)
        rel = ((x - y).abs() / x.abs()).max().item()
        assert rel < 1e-5, f"{k}: 1 process {x.tolist()} vs 2 processes {y.tolist()} (max rel diff {rel:.1e})"
    diff = max((a["model"][k] - b["model"][k]).abs().max().item() for k in a["model"])
    assert diff < 1e-4, f"weights after 6 steps differ by {diff:.1e}"
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == ["rope.pt"], "extra files: only rank 0 writes"


def test_batch_not_divisible_by_processes(tmp_path, capsys, monkeypatch):
    for k, v in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}.items():  # what torchrun sets
        monkeypatch.setenv(k, v)
    assert tcmp.main(["--quick", "--batch-size", "7", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--batch-size 7 is not divisible by the 2 processes" in err and len(err.strip().splitlines()) == 1, err
    monkeypatch.setenv("WORLD_SIZE", "8")  # 16 windows: 2 per process, but the fine-tunes' 16 // 4 = 4 cannot be
    assert tcmp.main(["--batch-size", "16", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "rope_ft_linear" in err and "multiple of 32" in err and len(err.strip().splitlines()) == 1, err
    assert not any(tmp_path.iterdir()), "a refused run wrote files"


def test_bad_learning_rate_is_one_line(tmp_path, capsys, refused):
    msg = refused(tcmp.main, ["--quick", "--lr", "nan", "--out", str(tmp_path)])
    assert "--lr" in msg and "nan" in msg, msg
    for lr in ("0", "-0.001", "inf"):
        assert tcmp.main(["--quick", "--lr", lr, "--out", str(tmp_path)]) == 2, lr
        err = capsys.readouterr().err
        assert err.startswith("error: --lr must be a positive finite number") and lr.lstrip("-") in err, err
    assert not any(tmp_path.iterdir()), "a refused run wrote files"


def test_preset_conflicts_and_overrides(capsys):
    assert tcmp.main(["--quick", "--preset", "gpu"]) == 2
    err = capsys.readouterr().err
    assert "--quick" in err and "--preset gpu" in err and len(err.strip().splitlines()) == 1, err
    gpu = tcmp.resolved(tcmp.parse_args(["--preset", "gpu"]))
    assert gpu["model"] == {"n_layer": 6, "n_head": 6, "n_embd": 384, "max_len": 32768}, gpu["model"]
    assert (gpu["train"].seq_len, gpu["amp"], gpu["fused"]) == (1024, "bf16", True), gpu
    assert gpu["out"] == Path("runs/gpu") and gpu["results"] == Path("results/gpu"), \
        "the preset must not share the CPU folders"
    # an explicit flag overrides the preset, nothing else changes
    mine = tcmp.resolved(tcmp.parse_args(["--preset", "gpu", "--n-layer", "1", "--lr", "0.01", "--amp", "off",
                                          "--no-fused", "--out", "x"]))
    assert mine["model"]["n_layer"] == 1 and mine["model"]["n_embd"] == 384, mine["model"]
    assert (mine["train"].lr, mine["train"].seq_len, mine["amp"], mine["fused"]) == (0.01, 1024, "off", False)
    assert mine["out"] == Path("x") and mine["results"] == Path("results/gpu")
    plain = tcmp.resolved(tcmp.parse_args([]))
    assert plain["train"] == tcmp.TrainConfig() and plain["model"] == {} and plain["amp"] == "off", plain
    assert (plain["out"], plain["results"], plain["fused"]) == (Path("runs/main"), Path("results"), False)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit):
        tcmp.parse_args(["--help"])
    for flag in ("--preset", "--amp", "--fused", "--compile", "--save-every", "--seq-len", "--eval-every"):
        assert flag in buf.getvalue(), f"--help does not list {flag}"
    assert "overrides the preset" in " ".join(buf.getvalue().split()), "--help must say how flags and --preset combine"


def test_gpu_preset_flags_work_on_cpu(corpus, tmp_path):
    """--preset gpu with tiny explicit sizes on the CPU: bf16 autocast, the fused-AdamW note."""
    code, out, err = main_in_process(["--preset", "gpu", "--device", "cpu", "--n-layer", "1", "--n-head", "2",
                                      "--n-embd", "32", "--seq-len", "32", "--batch-size", "4", "--steps", "2",
                                      "--variants", "rope", "--corpus", str(corpus), "--out", str(tmp_path / "ck"),
                                      "--results", str(tmp_path / "res")])
    assert code == 0, err[-2000:]
    assert "fused AdamW is CUDA-only" in out, out
    ck = weights(tmp_path / "ck" / "rope.pt")
    assert (ck["config"]["n_layer"], ck["config"]["n_embd"], ck["config"]["max_len"]) == (1, 32, 32768), ck["config"]
    tc = ck["extra"]["train_config"]
    assert (tc["seq_len"], tc["batch_size"], tc["lr"], tc["warmup"]) == (32, 4, 1e-3, 100), tc
    assert ck["extra"]["provenance"]["amp"] == "bf16", "the autocast goes into the checkpoint's provenance"


# ----------------------------------------------------------------------------- what a real run is

def test_train_compare_writes_results_only_for_real_runs(tmp_path, monkeypatch, capsys):
    """prepare_outputs, before any training: the default command (and the copy family's) plans real
    runs and keeps results/; --steps 10 or a checkpoint of other sizes already in --out sends the
    log to <out>/results with a note; an explicit --results results is then refused."""
    monkeypatch.chdir(ROOT)
    out = tmp_path / "ck"

    def prepared(*argv):
        args = tcmp.parse_args([*argv, "--out", str(out)])
        names = [m for n in (args.variants or ",".join(tcmp.DEFAULT_VARIANTS)).split(",")
                 for m in tcmp.FAMILIES.get(n, [n])]
        settings = tcmp.resolved(args)
        return tcmp.prepare_outputs(args, names, settings, print), settings["results"], capsys.readouterr().err

    assert prepared() == (None, Path("results"), ""), "the default command plans real runs"
    assert prepared("--variants", "copy") == (None, Path("results"), ""), "the copy family at 2,400 steps is real"
    msg, results, err = prepared("--steps", "10")
    assert (msg, results) == (None, out / "results") and "steps=10 (real run: 1100)" in err, (msg, results, err)
    msg, _, _ = prepared("--steps", "10", "--results", "results")
    assert msg.startswith(f"{out / 'none.pt'} is not a real run (steps=10 (real run: 1100))"), msg
    msg, results, err = prepared("--seed", "1")  # its curves would replace seed 0's, keyed by variant name
    assert (msg, results) == (None, out / "results") and "seed 1 (results/train_log.json" in err, (msg, results, err)
    # a finished checkpoint of other sizes in --out: its curve would go into the log
    small = make_model(make_config(vocab_size=65, n_layer=1, pos="alibi"))
    checkpoint_io.save_checkpoint(out / "alibi.pt", small, "a" * 65, 10, {k: [] for k in LOG_KEYS},
                            {"variant": "alibi", "train_config": asdict(TrainConfig())})
    msg, results, err = prepared("--variants", "rope")
    assert (msg, results) == (None, out / "results") and "alibi.pt is not a real run (n_layer=1" in err, err
    assert not (out / "results").exists(), "deciding the folder made it"
    (out / "alibi.pt").unlink()
    # the gpu preset: its real runs keep results/gpu (the fine-tune and a copy twin too), --amp off belongs in
    # results/gpu/amp_off, and the preset's CPU smoke (docs/bigger_runs.md) goes beside its checkpoints
    gpu = ("--preset", "gpu", "--variants", "rope,alibi,learned,rope_ft_yarn,rope_copy")
    assert prepared(*gpu) == (None, Path("results/gpu"), ""), "the gpu preset's real runs"
    assert prepared(*gpu, "--amp", "off", "--results", "results/gpu/amp_off")[:2] == (None, Path("results/gpu/amp_off"))
    msg, results, err = prepared(*gpu, "--amp", "off")
    assert (msg, results) == (None, out / "results") and "amp='off' (real run: 'bf16')" in err, (msg, results, err)
    smoke = ("--device", "cpu", "--n-layer", "1", "--n-head", "2", "--n-embd", "32", "--seq-len", "64", "--steps", "2")
    msg, results, err = prepared("--preset", "gpu", "--variants", "rope", *smoke)
    assert (msg, results) == (None, out / "results") and "n_layer=1 (real run: 6)" in err, (msg, results, err)
    msg, _, _ = prepared("--preset", "gpu", "--variants", "rope", *smoke, "--results", "results/gpu")
    assert msg and "holds only real runs" in msg, msg
