"""Train the same tiny LM once per position scheme, on the same batches (tutorial: 观察指标, 交付物).

Every variant sees the identical sequence of training windows (one seeded generator per
variant, same seed) and starts from the same seed; only its GPTConfig change (lab/variants.py)
differs. Each finished variant is saved as <out>/<variant>.pt and skipped next time unless
--force; a stopped one (Ctrl-C, SIGTERM) continues from <out>/<variant>.state.pt when the
same command runs again (lab/train_state.py). The loss curves go to <results>/train_log.json,
merged with the curves already there, and train_log.csv and train_curves.png are drawn from it;
results/ only if every checkpoint in --out is a real run (see --results), checked before training.
Fine-tunes (*_ft_*) continue a checkpoint at 4x its length for 10% of its steps, with a RoPE
scaling (as the PI and YaRN papers extend real models) or without (the compute-matched controls).
The loop itself is training.train (lab/training.py), which the other scripts that train share.

    python train_compare.py                      # the main comparison (README)
    python train_compare.py --preset preview     # five schemes, small and short: a few minutes
    python train_compare.py --quick              # tiny smoke run, under a minute on 2 cores
    python train_compare.py --redraw             # train_log.csv and train_curves.png from train_log.json
    python train_compare.py --variants theta     # also: copy, current (see --help), or any names
    python train_compare.py --variants rope,alibi --seed 1 --out runs/seed1
    python train_compare.py --preset gpu         # 6 x 384 model at length 1024, bf16, for one GPU
    torchrun --nproc_per_node 4 train_compare.py --preset gpu   # the same, data-parallel over 4 GPUs
"""
import argparse
import hashlib
import json
import math
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch
import torch.distributed as dist

from lab import cli
from lab import copy_mixture
from lab import long_context
from lab import plots
import schemes
import tiny_lm
from lab import atomic
from lab import checkpoint_io
from lab import corpora
from lab import devices
from lab.eval_common import (LOG_KEYS, check_redraw, check_writable, corpus_mismatch, csv_text, git_commit, provenance_of,
                         read_json, read_logs, results_for_checkpoints, training_provenance)
from lab.checkpoint_io import CheckpointError
from lab.options import full_config
from tiny_lm import GPTConfig
from lab.train_state import (Interrupted, RunConfig, StateError, continue_command, distributed_env, load_state,
                         state_identity)
from lab.training import copy_batches, train
from lab.variants import (ALL_NAMES, COPY_OF, COPY_STEPS, DEFAULT_VARIANTS, FAMILIES, FINETUNES, PRESETS, QUICK_MODEL,
                      QUICK_TRAIN, VARIANTS, TrainConfig, admit, build_variant, finetune_setup, from_files,
                      is_copy, names_of, recipe_changes, run_dirs, scheme_file_of, variant_config)


# ----------------------------------------------------------------------------- command line

def resolved(args, names=()) -> dict:
    """The settings these arguments stand for: defaults, then --quick or --preset, then every
    flag given explicitly (an explicit flag overrides the preset)."""
    preset = PRESETS.get(args.preset, {})
    model = dict(preset.get("model", {}))
    model.update({k: v for k, v in (("n_layer", args.n_layer), ("n_head", args.n_head),
                                     ("n_embd", args.n_embd)) if v is not None})
    if args.quick:
        model.update(QUICK_MODEL)  # --quick ignores the --n-* flags (see --help)
    train_kw = dict(QUICK_TRAIN if args.quick else preset.get("train", {}))
    train_kw.update({k: v for k, v in (("steps", args.steps), ("batch_size", args.batch_size), ("lr", args.lr),
                                       ("seq_len", args.seq_len), ("eval_every", args.eval_every))
                     if v is not None})
    ckpt_dir, results_dir = run_dirs(args.quick, args.preset, args.corpus)
    if from_files(names) and not (args.quick or args.preset):  # a --scheme-file scheme: never runs/main, results/
        ckpt_dir = Path("runs/custom")
    out = Path(args.out or ckpt_dir)
    results = Path(args.results) if args.results else (
        out / "results" if args.quick or args.preset == "preview" else results_dir)
    train = replace(TrainConfig(), seed=args.seed, **train_kw)
    # the copy family's longer schedule, unless a smoke run, a preset or --steps sets the steps
    copy_train = train if (args.quick or args.preset or args.steps) else replace(train, steps=COPY_STEPS)
    return {"model": model, "train": train, "copy_train": copy_train,
            "amp": args.amp or preset.get("amp", "off"),
            "fused": args.fused if args.fused is not None else preset.get("fused", False),
            "out": out, "results": results}


def parse_args(argv=None):
    schemes.load_argv(argv)  # --scheme-file first: its scheme is a name like the others
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    schemes.file_flag(p)
    gpu, pv = PRESETS["gpu"], PRESETS["preview"]
    gm, gt = gpu["model"], gpu["train"]
    p.add_argument("--variants", default=None,
                   help=f"comma-separated variants to train, in order (default: {','.join(DEFAULT_VARIANTS)}); "
                        f"known: {','.join(ALL_NAMES)}; a family name stands for its list: "
                        + "; ".join(f"{k} = {','.join(v)}" for k, v in FAMILIES.items()))
    p.add_argument("--steps", type=int, default=None,
                   help=f"optimizer steps per base variant (default {TrainConfig.steps}; {QUICK_TRAIN['steps']} "
                        f"with --quick, {gt['steps']} with --preset gpu)")
    p.add_argument("--batch-size", type=int, default=None,
                   help=f"windows per step, all processes together (default {TrainConfig.batch_size}; "
                        f"{QUICK_TRAIN['batch_size']} with --quick, {gt['batch_size']} with "
                        f"--preset gpu); under torchrun a multiple of the number of processes")
    p.add_argument("--seq-len", type=int, default=None,
                   help=f"training length of the base variants (default {TrainConfig.seq_len}; "
                        f"{QUICK_TRAIN['seq_len']} with --quick, {gt['seq_len']} with --preset gpu)")
    p.add_argument("--lr", type=float, default=None,
                   help=f"peak learning rate, cosine schedule (default {TrainConfig.lr}; "
                        f"{gt['lr']} with --preset gpu)")
    p.add_argument("--eval-every", type=int, default=None,
                   help=f"steps between two points of the loss curve (default {TrainConfig.eval_every}; "
                        f"{QUICK_TRAIN['eval_every']} with --quick)")
    p.add_argument("--n-layer", type=int, default=None, help=f"transformer blocks (default {GPTConfig.n_layer})")
    p.add_argument("--n-head", type=int, default=None, help=f"attention heads (default {GPTConfig.n_head})")
    p.add_argument("--n-embd", type=int, default=None,
                   help=f"model width C, head dim = C / heads (default {GPTConfig.n_embd})")
    p.add_argument("--seed", type=cli.SEED, default=0, help="seed for initialisation and for the batch order")
    p.add_argument("--corpus", default=None,
                   help=f"the corpus to train on: a name ({', '.join(corpora.CORPORA)}; default {corpora.DEFAULT_NAME}), "
                        f"built offline into data/ on first use and checked against its recorded SHA-256 (data/README.md), "
                        f"or a UTF-8 text file. Another name than the default trains into runs/main/NAME and writes "
                        f"results/NAME, so no Shakespeare row is overwritten")
    p.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu), or a torch device name; "
                                                    "under torchrun each process takes cuda:LOCAL_RANK")
    p.add_argument("--out", default=None, help="checkpoint folder (default runs/main; runs/quick with --quick, "
                                               "runs/preview or runs/gpu with that --preset)")
    p.add_argument("--results", default=None,
                   help="where the training log and its plot go (default results/; <out>/results with --quick or "
                        "--preset preview, results/gpu with --preset gpu). Only real runs write results/: if a "
                        "checkpoint the log is made from is not the registry's real run of its variant (other "
                        "sizes or steps: variants.real_run_mismatch), the default is <out>/results and an "
                        "explicit --results results is refused")
    p.add_argument("--force", action="store_true",
                   help="retrain variants whose checkpoint already exists, and start over instead of refusing "
                        "a training state that is unreadable or from other settings. A state that matches "
                        "is always resumed: delete <out>/<variant>.state.pt to start that variant over")
    p.add_argument("--save-every", type=int, default=100,
                   help="save the training state to <out>/<variant>.state.pt every this many steps (default "
                        "%(default)s; 0: only on Ctrl-C / SIGTERM); the same command continues from it")
    p.add_argument("--quick", action="store_true",
                   help="a smoke test, not a result: the tiny QUICK_MODEL (the --n-* flags are ignored) and "
                        f"QUICK_TRAIN ({QUICK_TRAIN['steps']} steps of {QUICK_TRAIN['batch_size']} x "
                        f"{QUICK_TRAIN['seq_len']} unless --steps / --batch-size / --seq-len)")
    p.add_argument("--preset", choices=sorted(PRESETS), default=None,
                   help=f"preview: {', '.join(pv['variants'])} only, {pv['model']['n_layer']} layers x "
                        f"{pv['model']['n_embd']} wide, {pv['train']['steps']} steps of {pv['train']['batch_size']} x "
                        f"{pv['train']['seq_len']}, writing to runs/preview (the README's look in a few minutes; then "
                        f"extrapolation_test.py --preset preview). "
                        f"gpu: {gm['n_layer']} layers x {gm['n_embd']} wide x {gm['n_head']} heads, {gt['steps']:,} "
                        f"steps of {gt['batch_size']} x {gt['seq_len']}, lr {gt['lr']:g}, --amp {gpu['amp']}, "
                        f"{'--fused' if gpu['fused'] else '--no-fused'}, writing to runs/gpu and results/gpu. "
                        f"Any flag given explicitly overrides the preset's value (e.g. --preset gpu --device cpu "
                        f"--n-layer 1 --seq-len 64 for a CPU smoke test); --quick with --preset is an error")
    p.add_argument("--amp", choices=["off", "bf16"], default=None,
                   help="bf16: run the training forward under torch.autocast(bfloat16) on CUDA or CPU (default "
                        "off; bf16 with --preset gpu). Weights, optimizer and evaluation stay float32")
    p.add_argument("--fused", action=argparse.BooleanOptionalAction, default=None,
                   help="fused AdamW kernel, CUDA only (ignored with a note elsewhere; default off, on with "
                        "--preset gpu)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model for training (evaluation stays eager); worth it on CUDA, "
                        "slow to start on CPU (needs a C++ compiler)")
    p.add_argument("--redraw", action="store_true",
                   help="train nothing: rebuild train_log.csv and train_curves.png in --results from its "
                        "train_log.json (no checkpoint needed)")
    return p.parse_args(argv)


def check_args(args, world: int, names: list):
    """A one-line message for the first bad argument, or None."""
    ints = {"--steps": args.steps, "--batch-size": args.batch_size, "--n-layer": args.n_layer,
            "--n-head": args.n_head, "--n-embd": args.n_embd, "--seq-len": args.seq_len,
            "--eval-every": args.eval_every}
    bad = [f for f, v in ints.items() if v is not None and v < 1]
    if bad:
        return f"{', '.join(bad)} must be positive, got {', '.join(str(ints[f]) for f in bad)}"
    if args.save_every < 0:
        return f"--save-every must be 0 (only on a signal) or positive, got {args.save_every}"
    if args.lr is not None and not (math.isfinite(args.lr) and args.lr > 0):
        return f"--lr must be a positive finite number, got {args.lr}"
    if args.quick and args.preset:
        return f"--quick and --preset {args.preset} both choose the model and schedule; use one of them"
    batch = resolved(args)["train"].batch_size
    if batch % world:
        return (f"--batch-size {batch} is not divisible by the {world} processes (WORLD_SIZE); "
                f"every process takes an equal share of each batch")
    for name in (n for n in names if n in FINETUNES):  # checked now, not after hours of base variants
        mult = FINETUNES[name]["seq_len_mult"]
        if max(1, batch // mult) % world:
            return (f"{name} trains batch // {mult} = {max(1, batch // mult)} windows per step, not divisible by "
                    f"the {world} processes; use a --batch-size that is a multiple of {mult * world}")
    return None


def main(argv=None) -> int:
    args = parse_args(argv)
    git_commit()  # the code this process runs, read now: the checkpoints' provenance names it
    rank, world, local_rank = distributed_env()
    say = print if rank == 0 else (lambda *a, **k: None)

    def error(msg: str) -> int:
        if rank == 0:
            print(f"error: {msg}", file=sys.stderr)
        return 2

    if args.variants is not None and not args.variants.strip(", "):
        return error("--variants is empty; name variants or a family, or leave the flag out for the defaults")
    names = names_of(args.variants) if args.variants \
        else list(PRESETS.get(args.preset, {}).get("variants", DEFAULT_VARIANTS))
    try:  # names the grammar builds from a registered scheme: options, copy twins, fine-tunes
        unknown = admit(names)
    except ValueError as e:
        return error(f"--variants {args.variants or ','.join(names)}: {e}")
    if unknown:
        return error(f"unknown variant(s) {','.join(unknown)}; known: {','.join(ALL_NAMES)}"
                     f" and the families {','.join(FAMILIES)}{schemes.FILE_POINTER}")
    msg = check_args(args, world, names)
    if msg:
        return error(msg)
    settings = resolved(args, names)
    settings["rerun"] = continue_command(argv, names, names[0])  # the user's own command, for the hints
    if args.redraw:
        check_redraw([settings["results"] / "train_log.json"], cli.command("train_compare.py", argv))
        check_writable(settings["results"], "--results")
        try:
            return redraw(settings["results"], say)
        except (OSError, ValueError, KeyError) as e:
            return error(f"cannot redraw from {settings['results']}/train_log.json ({e}); run the training first")
    try:  # the device and the corpus, before any note or checkpoint is read
        device = devices.pick_device(args.device)
        if world > 1 and device.type == "cuda":
            device = torch.device("cuda", local_rank)
            torch.cuda.set_device(device)
        corpus = corpora.load_corpus(args.corpus, min_val_chars=2000)
    except ValueError as e:  # CorpusError is a ValueError
        return error(str(e))
    msg = prepare_outputs(args, names, settings, say_err=print if rank == 0 else (lambda *a, **k: None))
    if msg:
        return error(msg)
    if settings["amp"] == "bf16" and device.type not in ("cuda", "cpu"):
        return error(f"--amp bf16 needs a CUDA or CPU device, not {device.type}; use --amp off")
    if settings["amp"] == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return error(f"this GPU ({torch.cuda.get_device_name(device)}) has no bfloat16; use --amp off")
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        return run_variants(args, argv, names, settings, device, corpus, say, error)
    except KeyboardInterrupt:  # a signal outside a training loop (or a second one inside it)
        if rank == 0:
            print("\ninterrupted", file=sys.stderr)
        return 130
    finally:
        if world > 1:
            dist.destroy_process_group()


def planned_checkpoints(args, names, settings) -> dict:
    """{path: checkpoint dict} of every checkpoint write_logs will read after this run: the ones
    in --out that it keeps (loaded now; CheckpointError if one is unreadable), and the ones it
    will train, with the config and train_config they will be saved with."""
    out = settings["out"]
    model_kw = {"n_layer": GPTConfig.n_layer, "n_head": GPTConfig.n_head, "n_embd": GPTConfig.n_embd,
                **settings["model"]}  # vocab_size: the corpus's, not needed to compare runs
    retrain = {n for n in names if args.force or not (out / f"{n}.pt").exists()}
    rerun = settings.get("rerun", "python train_compare.py")  # what a message suggests: the user's command (main)
    cks = {}
    for name in (n for n in ALL_NAMES if n not in retrain and (out / f"{n}.pt").exists()):
        ck = checkpoint_io.load_checkpoint(out / f"{name}.pt", make_with=rerun)[1]
        if not all(k in ck.get("losses", {}) for k in LOG_KEYS):
            raise CheckpointError(f"{out / name}.pt holds no training log; delete it and rerun `{rerun}`")
        cks[out / f"{name}.pt"] = {"config": ck["config"], "extra": ck.get("extra", {})}  # not the weights
    for name in (n for n in names if n in retrain):
        if name in VARIANTS:
            tc = settings["copy_train" if name in COPY_OF else "train"]
            cfg = full_config(variant_config(name, {"train_len": tc.seq_len, **model_kw}))
        else:
            parent = out / f"{FINETUNES[name]['parent']}.pt"
            if parent not in cks and not parent.exists():
                raise CheckpointError(f"{name} continues {parent.name}, which is not in {out}/; train "
                                      f"{parent.stem} first (put it before {name} in --variants)")
            pk = cks.get(parent) or checkpoint_io.load_checkpoint(parent, make_with=rerun)[1]
            if not isinstance(pk.get("extra", {}).get("train_config"), dict):
                raise CheckpointError(f"{parent} records no training settings to fine-tune from; retrain it")
            cfg, tc = finetune_setup(name, pk["config"], pk["extra"]["train_config"])
        cks[out / f"{name}.pt"] = {"config": cfg, "extra": {"variant": name, "train_config": asdict(tc),
                                                            "provenance": {"amp": settings["amp"]},
                                                            **scheme_file_of(name)}}
    return cks


def prepare_outputs(args, names, settings, say_err) -> str:
    """Before any training: check the checkpoints the training log will be made from, choose the
    results folder (only real runs write results/: eval_common.results_for_checkpoints) and check
    that it and --out can be written. Returns a one-line error, or None (settings["results"] set)."""
    try:
        cks = planned_checkpoints(args, names, settings)
        # curves are keyed by variant name, so another seed's would replace seed 0's in results/train_log.json
        seed = [f"seed {args.seed} (results/train_log.json holds seed {TrainConfig.seed}'s curves)"] \
            if args.seed != TrainConfig.seed else []
        results, note = results_for_checkpoints(settings["results"], bool(args.results), cks,
                                                settings["out"] / "results", also=corpus_mismatch(args.corpus, settings["results"]) + seed)
    except (CheckpointError, ValueError) as e:
        return str(e)
    if note:
        say_err(note, file=sys.stderr)
    check_writable(settings["out"], "--out")
    check_writable(results, "--results")
    read_json(results / "train_log.json")  # the curves this run's are merged into: readable, or one line now
    settings["results"] = results
    return None


def run_variants(args, argv, names, settings, device, corpus, say, error) -> int:
    """main()'s loop over the variants, once the arguments, the device, the corpus (train text, validation
    text, vocabulary) and the processes are set up."""
    out, results = settings["out"], settings["results"]
    train_text, val_text, vocab = corpus
    tok = corpora.CharTokenizer(vocab)
    data = (tok.encode(train_text), tok.encode(val_text), vocab, corpora.corpus_fingerprint(train_text + val_text),
            hashlib.sha256((train_text + val_text).encode("utf-8")).hexdigest())
    world = distributed_env()[1]
    say(f"corpus: {len(train_text):,} train / {len(val_text):,} val characters, vocabulary {len(vocab)}; "
        f"device {device}{f' x {world} processes' if world > 1 else ''}; checkpoints in {out}/")
    if settings["fused"] and device.type != "cuda":
        say(f"note: fused AdamW is CUDA-only here; using the default AdamW on {device.type}")
    for name in names:
        if (out / f"{name}.pt").exists() and not args.force:
            say(f"{name}: {out / f'{name}.pt'} exists, skipping (use --force to retrain)")
            tc = settings["copy_train" if name in COPY_OF else "train"]
            changed = recipe_changes(out / f"{name}.pt", tc) if name in VARIANTS else []
            if changed:
                say(f"  note: it was trained with other settings ({', '.join(changed)}); results made "
                    f"from it will not match this recipe. --force retrains it.")
            continue
        code = train_one(name, args, argv, names, settings, data, device, say, error)
        if code:
            return code
    if distributed_env()[0] == 0:
        write_logs(out, results, ALL_NAMES)
    say(f"logs: {results}/train_log.json, train_log.csv, train_curves.png")
    return 0


def train_one(name, args, argv, names, settings, data, device, say, error) -> int:
    """Train one variant and save its checkpoint; returns 0, or an exit code after an error or a signal."""
    rank, world, _ = distributed_env()
    train_ids, val_ids, vocab, fingerprint = data[:4]
    out = settings["out"]
    path, state_path = out / f"{name}.pt", out / f"{name}.state.pt"
    model_kw = {"vocab_size": len(vocab), "n_layer": GPTConfig.n_layer, "n_head": GPTConfig.n_head,
                "n_embd": GPTConfig.n_embd, **settings["model"]}
    try:
        base_tc = settings["copy_train" if name in COPY_OF else "train"]
        model, tc, parent_step = build_variant(name, model_kw, base_tc, args.seed, out, settings.get("rerun"))
        with torch.no_grad():  # a scheme hook that returns the wrong shape: one line now (draws no random numbers)
            model(torch.zeros(1, min(8, tc.seq_len), dtype=torch.long, device=next(model.parameters()).device))
        batches = copy_batches(name, tc, train_ids, vocab)
        probe = None if batches is None else long_context.passkey_probe(
            val_ids, copy_mixture.key_ids_of(vocab, copy_mixture.COPY_RECIPE.alphabet), min(200, tc.seq_len // 2))
    except (CheckpointError, ValueError) as e:  # CorpusError is a ValueError
        return error(f"{name}: {e}")
    if tc.batch_size % world:
        return error(f"{name} trains {tc.batch_size} windows per step, not divisible by the {world} "
                     f"processes; use a --batch-size that keeps it a multiple")
    if tc.eval_windows * tc.seq_len + 1 > val_ids.numel():
        return error(f"validation text ({val_ids.numel()} tokens) is too short for {tc.eval_windows} windows "
                     f"of {tc.seq_len}; use a longer corpus")
    identity = state_identity(name, model, tc, fingerprint, settings["amp"], world)
    try:
        resume = load_state(state_path, identity, force=args.force)
    except StateError as e:
        return error(str(e))
    if resume is not None:
        say(f"{name}: resuming from step {resume['step']} of {tc.steps} ({state_path})")
    run = RunConfig(amp=settings["amp"], fused=settings["fused"], compile=args.compile,
                    state_path=state_path, save_every=args.save_every, identity=identity)
    t0 = time.perf_counter()
    try:
        hist = train(model, train_ids, val_ids, tc, desc=name, device=device, batches=batches, run=run, resume=resume,
                     probe=probe)
    except Interrupted as e:
        if rank == 0:
            print(f"interrupted: {name} stopped after step {e.step} of {tc.steps}; training state saved to "
                  f"{e.path}\ncontinue with: {continue_command(argv, names, name)}", file=sys.stderr)
        return 128 + int(e.signum)
    wall = time.perf_counter() - t0 + (resume or {}).get("wall_s", 0.0)
    extra = {"train_config": asdict(tc), "variant": name, "data": "copy" if is_copy(name) else "text",
             "corpus": fingerprint, "wall_s": round(wall, 1), "parent_step": parent_step,
             "tokens": tc.steps * tc.batch_size * tc.seq_len,
             "provenance": training_provenance(argv, data[4], tc.seed, "train_compare.py", device.type, settings["amp"]),
             **scheme_file_of(name)}
    if rank == 0:
        checkpoint_io.save_checkpoint(path, model.cpu(), vocab, parent_step + tc.steps, hist, extra)
        state_path.unlink(missing_ok=True)
    if world > 1:
        dist.barrier()  # the next variant (a fine-tune) reads this checkpoint on every rank
    say(f"{name}: val loss {hist['val_loss'][-1]:.4f} nats/char at length {tc.seq_len} after {tc.steps} "
        f"steps, {wall:.0f} s -> {path}")
    return 0


# ----------------------------------------------------------------------------- logs

def write_logs(out: Path, results: Path, names) -> None:
    """Merge the loss curves of every finished checkpoint in `out` into results/train_log.json
    (curves of variants not in `out` are kept), then draw the CSV and the figure from it."""
    logs = read_logs(results)
    made = read_json(results / "train_log.json").get("provenance", {})
    for name in names:
        if (out / f"{name}.pt").exists():
            ck = torch.load(out / f"{name}.pt", map_location="cpu", weights_only=True)
            h = ck["losses"]
            logs[name] = {k: h[k] for k in LOG_KEYS}
            if h.get("probe"):
                logs[name]["probe"] = h["probe"]  # the copy family's passkey probe (plots.copy_curves)
            made[name] = provenance_of(ck)
    if not logs:
        return
    order = sorted(logs, key=lambda n: (ALL_NAMES + [n]).index(n))  # registry order
    atomic.atomic_write_text(results / "train_log.json", json.dumps(
        {"logs": {n: logs[n] for n in order}, "provenance": {n: made[n] for n in order if n in made}}, indent=1))
    redraw(results)


def redraw(results: Path, say=print) -> int:
    """train_log.csv and train_curves.png from results/train_log.json alone."""
    logs = json.loads((results / "train_log.json").read_text(encoding="utf-8"))["logs"]
    rows = [{"variant": name, "step": s, "train_loss": round(tl, 4), "val_loss": round(vl, 4), "tokens_per_s": round(ts)}
            for name, h in logs.items() for s, tl, vl, ts in zip(*(h[k] for k in LOG_KEYS))]
    atomic.atomic_write_text(results / "train_log.csv", csv_text(rows))
    drawn = ["train_log.csv"]
    if any(not is_copy(n) for n in logs):
        plots.train_curves(results / "train_curves.png", logs, set(FINETUNES))
        drawn.append("train_curves.png")
    if any(h.get("probe") for h in logs.values()):
        plots.copy_curves(results / "copy_curves.png", logs)
        drawn.append("copy_curves.png")
    drawn = ", ".join(drawn)
    say(f"wrote {results}/{drawn}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
