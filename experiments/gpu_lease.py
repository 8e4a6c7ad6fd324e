"""One prepared call for a lent GPU (issue 59): train part of the `--preset gpu` family and score it, inside one
deadline, and pack its tables into one archive that comes back.

A lent GPU is given for minutes, one call at a time, on a machine that starts bare: nothing trained in one call
survives to the next. So each part below trains and evaluates in the same call, and what comes back is
results/gpu/ (tables, figures, logs), never checkpoints. The parts, in the issue's order:

    1  rope and alibi, seed 0 in runs/gpu, then seed 1 in runs/gpu/seed1      -> results/gpu/
    2  rope and alibi with --amp off, in runs/gpu/amp_off                     -> results/gpu/amp_off/
    3  sin, none and learned                                                  -> results/gpu/ (rows merged)
    4  kerple, xpos, fox, t5 and fire                                         -> results/gpu/ (rows merged)
    5  rope and its fine-tune rope_ft_yarn (the fine-tune needs rope's weights, so both train here)

Before each model the runner checks the clock: a model starts only if the time the last one took, plus
--eval-reserve-s for scoring, still ends before --deadline-s. What was trained is then scored at 1024 ... 32768
(extrapolation_test.py, the device in each row's provenance) and packed. A part cut short says which models it
left out; run it again on the next lease and the rows merge.

    python experiments/gpu_lease.py --part 1 --archive "$OUT"     # on the GPU: results/gpu/ in $OUT/gpu_part1.tar.gz
    python experiments/gpu_lease.py --part 1 --smoke              # here, on the CPU: the same code path, tiny, seconds

--smoke is docs/bigger_runs.md's CPU smoke test (1 layer, 2 heads, 32 wide, length 64, 2 steps) with checkpoints in
runs/gpu_smoke; its results are not a real run, so they land in runs/gpu_smoke/results (never results/gpu/).
"""
import argparse
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as python experiments/gpu_lease.py: the repository's modules

from lab import cli
GPU_LENGTHS = "1024,2048,4096,8192,16384,32768"
SMOKE_TRAIN = ["--device", "cpu", "--n-layer", "1", "--n-head", "2", "--n-embd", "32", "--seq-len", "64",
               "--steps", "2"]
SMOKE_EVAL = ["--device", "cpu", "--lengths", "64,128", "--tokens", "256", "--decode-len", "0"]

# part -> (folder the part's checkpoints go to, extra train flags, [(variants, seed folder or "")], results folder)
PARTS = {
    1: ("runs/gpu", [], [("rope,alibi", ""), ("rope,alibi", "seed1")], "results/gpu"),
    2: ("runs/gpu/amp_off", ["--amp", "off"], [("rope,alibi", "")], "results/gpu/amp_off"),
    3: ("runs/gpu", [], [("sin,none,learned", "")], "results/gpu"),
    4: ("runs/gpu", [], [("kerple,xpos,fox,t5,fire", "")], "results/gpu"),
    5: ("runs/gpu", [], [("rope,rope_ft_yarn", "")], "results/gpu"),
}


def jobs(part: int, smoke: bool) -> list:
    """The models of one part, in training order: (variant, seed, checkpoint folder)."""
    out, _, groups, _ = PARTS[part]
    base = "runs/gpu_smoke" + out[len("runs/gpu"):] if smoke else out
    return [(v, 1 if sub else 0, f"{base}/{sub}" if sub else base) for names, sub in groups for v in names.split(",")]


def train_cmd(part: int, variant: str, seed: int, out: str, smoke: bool) -> list:
    """train_compare.py for one model of the preset (its flags overriding the preset's, as --help says)."""
    cmd = [sys.executable, "train_compare.py", "--preset", "gpu", "--variants", variant, "--seed", str(seed),
           "--out", out, *PARTS[part][1]]
    if seed:  # another seed's curves go beside its checkpoints, not over seed 0's results/gpu/train_log.json
        cmd += ["--results", f"{out}/results"]
    elif not smoke and PARTS[part][3] != "results/gpu":  # --amp off: its own real folder, results/gpu/amp_off
        cmd += ["--results", PARTS[part][3]]
    return cmd + (SMOKE_TRAIN if smoke else [])


def eval_cmd(part: int, done: list, smoke: bool) -> list:
    """extrapolation_test.py over the part's trained models: seed 0's folder, the seed folders as --seed-dirs."""
    folders = sorted({out for _, _, out in done})
    base = min(folders, key=len)
    seeds = [f for f in folders if f != base]
    variants = sorted({v for v, s, _ in done if s == 0})
    cmd = [sys.executable, "extrapolation_test.py", "--ckpt-dir", base, "--variants", ",".join(variants),
           "--seed-dirs", ",".join(seeds), "--lengths", GPU_LENGTHS, "--device", "cuda"]
    if not smoke:
        cmd += ["--results", PARTS[part][3]]
    if "rope" not in variants:
        cmd += ["--scalings", ""]  # the scalings are rows of the rope checkpoint only
    elif smoke:
        cmd += ["--scalings", "yarn"]  # one of them is enough to run its code path
    return cmd + (SMOKE_EVAL if smoke else [])  # later flags win: the smoke's --device and --lengths


def run(cmd: list, log) -> int:
    print("$ " + " ".join(repr(c) if c == "" or " " in c else c for c in cmd), file=log, flush=True)
    print("$ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT).returncode


def pack(folders: list, archive: Path) -> None:
    """One .tar.gz of the part's result folders (figures, tables, logs; never a checkpoint)."""
    with tarfile.open(archive, "w:gz") as tar:
        for folder in folders:
            for f in sorted(Path(ROOT, folder).rglob("*")):
                if f.is_file() and f.suffix != ".pt":
                    tar.add(f, arcname=str(f.relative_to(ROOT)))


def main(argv=None) -> int:
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", type=int, required=True, choices=sorted(PARTS), help="which part of the family")
    p.add_argument("--smoke", action="store_true", help="the CPU smoke test of the same code path (seconds)")
    p.add_argument("--deadline-s", type=cli.finite(above=0), default=530.0,
                   help="wall-clock seconds this call may take in all, packing included (default 530, for a "
                        "600-second call)")
    p.add_argument("--eval-reserve-s", type=cli.finite(at_least=0), default=120.0,
                   help="seconds kept for scoring and packing when deciding whether one more model fits (default 120)")
    p.add_argument("--archive", default=None,
                   help="folder the archive gpu_part<N>.tar.gz is written to (default: the part's checkpoint folder)")
    args = p.parse_args(argv)
    archive_dir = Path(args.archive or ROOT / jobs(args.part, args.smoke)[0][2])
    start, last, done, left = time.monotonic(), 0.0, [], []
    archive_dir.mkdir(parents=True, exist_ok=True)
    with open(archive_dir / f"gpu_part{args.part}.log", "w") as log:
        for variant, seed, out in jobs(args.part, args.smoke):
            if time.monotonic() - start + last + args.eval_reserve_s > args.deadline_s:
                left.append(f"{variant} seed {seed}")
                continue
            t0 = time.monotonic()
            rc = run(train_cmd(args.part, variant, seed, out, args.smoke), log)
            last = time.monotonic() - t0
            print(f"  {variant} seed {seed}: exit {rc}, {last:.0f} s", flush=True)
            if rc == 0:
                done.append((variant, seed, out))
        if done:
            rc = run(eval_cmd(args.part, done, args.smoke), log)
            print(f"  scoring: exit {rc}, {time.monotonic() - start:.0f} s since the start", flush=True)
    results = [f"{jobs(args.part, True)[0][2]}/results" if args.smoke else PARTS[args.part][3]]
    results += sorted({f"{out}/results" for _, s, out in done if s})
    pack([r for r in results if Path(ROOT, r).is_dir()], archive_dir / f"gpu_part{args.part}.tar.gz")
    print(f"trained {len(done)} of {len(done) + len(left)}" + (f"; left for the next lease: {', '.join(left)}"
                                                                if left else "")
          + f"; archive {archive_dir / f'gpu_part{args.part}.tar.gz'}; log beside it; "
            f"{time.monotonic() - start:.0f} s in all")
    return 0 if done and not left else 1


if __name__ == "__main__":
    sys.exit(main())
