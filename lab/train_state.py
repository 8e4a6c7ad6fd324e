"""Resumable training: the state training.train() saves between two steps, and how a
run that stopped (Ctrl-C, SIGTERM, a lost session) continues from it.

The state holds everything the next step depends on: weights, optimizer, step, loss history,
the batch generator and the RNGs. It is written atomically to <out>/<variant>.state.pt, and
a resume must match the identity it was saved with (variant, model, recipe, corpus,
precision, number of processes): anything else would silently mix two runs. On the CPU a
resumed run ends with weights bit-identical to an uninterrupted one.
"""
import os
import shlex
import signal
import sys
import threading
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

import tiny_lm
from lab import atomic
from lab.options import full_config
from tiny_lm import GPTConfig, TinyLM
from lab.variants import TrainConfig


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



STATE_FORMAT = "train_compare.state/1"


def state_identity(name: str, model: TinyLM, tc: TrainConfig, corpus: str, amp: str, world: int) -> dict:
    """What a saved state must match to be resumed: the same variant, model, recipe (seed
    included), corpus, precision and number of processes. Anything else would silently mix two runs."""
    return {"variant": name, "model": full_config(model.cfg), "train": asdict(tc), "corpus": corpus,
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
    atomic.atomic_write(path, lambda tmp: torch.save(state, tmp))


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


def restore(resume: dict, model: TinyLM, opt, gen: torch.Generator) -> None:
    """Put a state from load_state() back into the model, optimizer, batch generator and RNGs."""
    model.load_state_dict(resume["model"])
    opt.load_state_dict(resume["optimizer"])
    gen.set_state(resume["gen"])
    torch.set_rng_state(resume["rng_torch"])
    if torch.cuda.is_available() and len(resume["rng_cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(resume["rng_cuda"])


# ----------------------------------------------------------------------------- processes, and the command that continues

def shard(batch: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Process `rank`'s share of a global batch (B, ...): rows rank, rank + world, ... (B / world of
    them). Together the processes see exactly the B windows one process would."""
    return batch if world == 1 else batch[rank::world]


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
