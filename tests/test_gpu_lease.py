"""experiments/gpu_lease.py, the prepared call for a lent GPU: each part trains what issue 59 lists, in its order,
into the folders docs/bigger_runs.md names, scores it up to 32768 on CUDA, and its smoke form (CPU) never names a
real results folder. The commands are checked as built; nothing is trained here (the smoke run is a manual step)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
import gpu_lease as G


def flag(cmd, name):
    """The value of --name in a command (the last one, as argparse reads it)."""
    return [cmd[i + 1] for i, c in enumerate(cmd) if c == name][-1]


def test_the_parts_train_what_the_issue_lists_in_its_order():
    want = {1: [("rope", 0, "runs/gpu"), ("alibi", 0, "runs/gpu"), ("rope", 1, "runs/gpu/seed1"),
                ("alibi", 1, "runs/gpu/seed1")],
            2: [("rope", 0, "runs/gpu/amp_off"), ("alibi", 0, "runs/gpu/amp_off")],
            3: [(v, 0, "runs/gpu") for v in ("sin", "none", "learned")],
            4: [(v, 0, "runs/gpu") for v in ("kerple", "xpos", "fox", "t5", "fire")],
            5: [("rope", 0, "runs/gpu"), ("rope_ft_yarn", 0, "runs/gpu")]}
    for part, jobs in want.items():
        assert G.jobs(part, smoke=False) == jobs, (part, G.jobs(part, smoke=False))
        assert G.jobs(part, smoke=True) == [(v, s, o.replace("runs/gpu", "runs/gpu_smoke", 1)) for v, s, o in jobs]


def test_train_and_score_commands():
    rope1 = G.train_cmd(1, "rope", 1, "runs/gpu/seed1", smoke=False)
    assert rope1[1:] == ["train_compare.py", "--preset", "gpu", "--variants", "rope", "--seed", "1",
                         "--out", "runs/gpu/seed1", "--results", "runs/gpu/seed1/results"], rope1
    off = G.train_cmd(2, "alibi", 0, "runs/gpu/amp_off", smoke=False)
    assert (flag(off, "--amp"), flag(off, "--results")) == ("off", "results/gpu/amp_off"), off
    assert "--results" not in G.train_cmd(1, "rope", 0, "runs/gpu", smoke=False), "seed 0 keeps the preset's folder"
    score = G.eval_cmd(1, G.jobs(1, smoke=False), smoke=False)
    assert (flag(score, "--ckpt-dir"), flag(score, "--seed-dirs"), flag(score, "--variants")) == \
        ("runs/gpu", "runs/gpu/seed1", "alibi,rope"), score
    assert (flag(score, "--lengths"), flag(score, "--device"), flag(score, "--results")) == \
        ("1024,2048,4096,8192,16384,32768", "cuda", "results/gpu"), score
    assert "--scalings" not in score, "rope's scaling rows at their defaults"
    assert flag(G.eval_cmd(3, G.jobs(3, smoke=False), smoke=False), "--scalings") == "", "no rope: no scalings"


@pytest.mark.parametrize("part", sorted(G.PARTS))
def test_the_smoke_form_runs_on_the_cpu_and_writes_no_real_folder(part):
    jobs = G.jobs(part, smoke=True)
    cmds = [G.train_cmd(part, v, s, o, smoke=True) for v, s, o in jobs] + [G.eval_cmd(part, jobs, smoke=True)]
    for cmd in cmds:
        assert flag(cmd, "--device") == "cpu", cmd
        assert not any(c.startswith("results") for c in cmd), f"the smoke names a results/ folder: {cmd}"
    assert (flag(cmds[0], "--n-layer"), flag(cmds[0], "--steps")) == ("1", "2"), cmds[0]
    assert flag(cmds[-1], "--lengths") == "64,128", cmds[-1]
