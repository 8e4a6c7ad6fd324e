"""The training loop every script trains with (tutorial: 观察指标): the batches (random_windows,
and the copy family's curriculum, copy_batches), one optimizer step (train_step), one point of the
loss curve (log_point), and train() around them, which can save and resume its state
(lab/train_state.py) and run data-parallel under torchrun.

train_compare.py trains the variants with it; experiments/recipe_ablation.py, experiments/copy_calibration.py and
experiments/breakage_test.py train their own models with the same loop. The recipe itself (TrainConfig, the
learning-rate schedule, the optimizer) is lab/variants.py's.
"""
import contextlib
import signal
import time
from dataclasses import replace

import torch
import torch.distributed as dist
from lab import cli
from lab import copy_mixture
import tiny_lm
from lab import lm_eval
from lab.corpora import CorpusError
from tiny_lm import TinyLM
from lab.train_state import Interrupted, RunConfig, StopRequest, restore, save_state, shard
from lab.variants import COPY_OF, TrainConfig, is_copy, lr_at, make_optimizer


# ----------------------------------------------------------------------------- the recipe's pieces

def copy_batches(name: str, tc: TrainConfig, train_ids, vocab: str):
    """None for a text variant (train() draws random windows); for the copy family, the
    curriculum of copy_mixture.COPY_RECIPE over tc.steps. A fine-tune of a copy model continues
    the second phase only (no warm-up), with gaps between copies up to its own, longer length."""
    if not is_copy(name):
        return None
    recipe = copy_mixture.COPY_RECIPE
    if name not in COPY_OF:
        recipe = replace(recipe, warm_frac=0.0, max_gap=tc.seq_len)
    return copy_mixture.curriculum_windows(random_windows(train_ids, tc.seq_len, tc.batch_size), tc.batch_size,
                                           tc.seq_len, copy_mixture.key_ids_of(vocab, recipe.alphabet), tc.seed,
                                           tc.steps, recipe)


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


# ----------------------------------------------------------------------------- the training loop

def train(model: TinyLM, train_ids, val_ids, tc: TrainConfig, desc: str = "train",
          device=torch.device("cpu"), batches=None, run: RunConfig = None, resume: dict = None,
          probe=None) -> dict:
    """Train in place; returns the loss history. Batches come from a generator seeded with
    tc.seed only, so every model trained with the same TrainConfig sees the same windows.

    batches: a function (step, generator) -> (x, y) of token ids; default random_windows(
    train_ids, tc.seq_len, tc.batch_size). A target of -100 (cross_entropy's ignore_index)
    adds no loss. val_ids=None skips validation (val_loss entries are None).
    run: how to run (RunConfig: precision, fused AdamW, compile, where and how often to save
    the state). resume: a state from train_state.load_state() to continue from. probe: a
    function model -> dict, called at every evaluation point; its answers go to hist["probe"].
    Under torch.distributed (torchrun), rank r trains on windows r::world of every global batch
    and DistributedDataParallel averages the gradients: the same update as one process."""
    run, device = run or RunConfig(), torch.device(device)
    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    rank = dist.get_rank() if world > 1 else 0
    if tc.batch_size % world:
        raise ValueError(f"{desc}: batch size {tc.batch_size} is not divisible by the {world} processes")
    gen = torch.Generator().manual_seed(tc.seed + 12345)
    model.to(device).train()  # before the optimizer: fused AdamW (torch 2.1-2.3) wants CUDA parameters
    opt = make_optimizer(model, tc, fused=run.fused and device.type == "cuda")
    hist = {"step": [], "train_loss": [], "val_loss": [], "tokens_per_s": []}
    batches = batches or random_windows(train_ids, tc.seq_len, tc.batch_size)
    # running means between two evaluation points; a resume continues them, so hist is that of one run
    start, acc, t0 = 0, {"loss": 0.0, "n": 0, "tokens": 0, "interval_s": 0.0}, time.perf_counter()
    wall0 = t0 - (resume or {}).get("wall_s", 0.0)  # training seconds, earlier sessions included
    if resume is not None:
        restore(resume, model, opt, gen)
        start, hist, acc = resume["step"], resume["hist"], dict(resume["running"])
        t0 -= acc["interval_s"]
    fwd = torch.compile(model) if run.compile else model
    if world > 1:
        fwd = torch.nn.parallel.DistributedDataParallel(fwd, device_ids=[device.index] if device.type == "cuda" else None)
    bar = cli.progress(range(start, tc.steps), desc=desc, unit="step", initial=start, total=tc.steps,
                       disable=rank != 0)
    with StopRequest(run.state_path is not None, loud=rank == 0) as stop:
        for step in bar:
            loss_value, stopping, tokens = train_step(fwd, model, opt, batches(step, gen), lr_at(step, tc), tc,
                                                      run.amp, stop, device)
            acc["loss"], acc["n"], acc["tokens"] = acc["loss"] + loss_value, acc["n"] + 1, acc["tokens"] + tokens
            if (step + 1) % tc.eval_every == 0 or step + 1 == tc.steps:
                t0 = log_point(model, val_ids, tc, hist, step + 1, acc, t0, probe, bar)
            due = run.save_every and (step + 1) % run.save_every == 0 and step + 1 < tc.steps
            if run.state_path is not None and (due or stopping):
                if rank == 0:
                    running = dict(acc, interval_s=time.perf_counter() - t0)
                    save_state(run.state_path, model, opt, gen, step + 1, hist, running, run.identity,
                               time.perf_counter() - wall0)
                if world > 1:
                    dist.barrier()  # nobody exits (and makes torchrun stop the others) before it is written
                if stopping:
                    bar.close()
                    raise Interrupted(stop.signum or signal.SIGTERM, step + 1, run.state_path)
    return hist


def train_step(fwd, model, opt, batch, lr: float, tc: TrainConfig, amp: str, stop, device):
    """One optimizer step on this process's share of a global batch (x, y), each (B, T).
    Returns (loss of the global batch, whether any process got a signal, tokens of the global batch)."""
    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    rank = dist.get_rank() if world > 1 else 0
    x, y = (shard(t, rank, world).to(device) for t in batch)  # this process's share: (B / world, T)
    for g in opt.param_groups:
        g["lr"] = lr
    amp_dtype = {"off": None, "bf16": torch.bfloat16}[amp]
    with torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else contextlib.nullcontext():
        loss = fwd(x, y).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
    opt.step()
    if world == 1:
        return loss.item(), stop.signum is not None, x.numel()
    # one collective: the loss of the global batch, and whether any rank got a signal
    both = torch.tensor([loss.item(), float(stop.signum is not None)], device=device)
    dist.all_reduce(both)
    return both[0].item() / world, both[1].item() > 0, x.numel() * world


def log_point(model, val_ids, tc: TrainConfig, hist: dict, step: int, acc: dict, t0: float, probe, bar) -> float:
    """Append one point of the loss curve (and the probe's answers) to hist, reset the running
    means in acc; returns the time the next interval starts at."""
    tok_s = acc["tokens"] / (time.perf_counter() - t0)
    val = None if val_ids is None else lm_eval.window_losses(model, val_ids, tc.seq_len, tc.eval_windows).mean().item()
    for k, v in zip(hist, (step, acc["loss"] / acc["n"], val, tok_s)):
        hist[k].append(v)
    if probe is not None:
        hist.setdefault("probe", []).append(probe(model))
    bar.set_postfix(loss=f"{acc['loss'] / acc['n']:.3f}", val="-" if val is None else f"{val:.3f}",
                    tok_s=f"{tok_s:,.0f}")
    acc.update(loss=0.0, n=0, tokens=0)
    return time.perf_counter()
