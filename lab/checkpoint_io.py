"""Checkpoints of tiny_lm.TinyLM: plain dicts (config, weights, vocabulary, step, losses, extra) written atomically,
read with torch.load(weights_only=True). A checkpoint of an older model loads: a config field it lacks takes the
value the model had before the field existed (BEFORE_FIELD), else its default."""
import sys
from pathlib import Path

import torch

import schemes
from lab.atomic import atomic_write
from tiny_lm import TinyLM
from lab.options import GPT_FIELDS, LAB_DEFAULTS, full_config, make_config, make_model


# What a model built before a field existed had (or before its default changed, for the init fields):
# a checkpoint without the field loads with this.
BEFORE_FIELD = {"qkv_init": "unit", "resid_init": "scaled", "linear_init": "gpt2", "norm_bias": True}



class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable or does not fit; the message says what to do."""




def save_checkpoint(path, model: TinyLM, vocab: str, step: int, losses: dict, extra: dict = None) -> None:
    """Write a plain dict atomically (atomic_write)."""
    ckpt = {"config": full_config(model.cfg), "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
            "vocab": vocab, "step": int(step), "losses": losses, "extra": extra or {}}
    atomic_write(path, lambda tmp: torch.save(ckpt, tmp))


def load_checkpoint(path, device="cpu", make_with: str = "python train_compare.py"):
    """Return (model, ckpt dict). Raises CheckpointError with a one-line reason. ckpt["config"] is the
    config the model was built with: fields an older checkpoint lacks hold the value the model had
    before the field existed (BEFORE_FIELD), else their defaults."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}; run `{make_with}` to make it")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated file, not a torch file, pickled code...
        raise CheckpointError(f"{path} is not a readable checkpoint ({type(e).__name__}); delete it and "
                              f"rerun `{make_with}`") from None
    if not isinstance(ckpt, dict) or not {"config", "model", "vocab"} <= ckpt.keys():
        raise CheckpointError(f"{path} is not a tiny_lm checkpoint (missing config/model/vocab); "
                              f"delete it and rerun `{make_with}`")
    pos, sf = ckpt["config"].get("pos"), (ckpt.get("extra") or {}).get("scheme_file")
    if isinstance(sf, dict) and pos not in schemes.REGISTRY:
        raise CheckpointError(f"{path} uses scheme {pos!r} from {sf.get('path')}; pass --scheme-file {sf.get('path')}")
    if isinstance(sf, dict) and pos in schemes.FILES and schemes.FILES[pos]["sha256"] != sf.get("sha256"):
        print(f"warning: {schemes.FILES[pos]['path']} has changed since {path.name} was trained with it "
              f"(SHA-256 {sf.get('sha256', '?')[:12]}, now {schemes.FILES[pos]['sha256'][:12]})", file=sys.stderr)
    known = set(GPT_FIELDS) | set(LAB_DEFAULTS)
    try:
        cfg = make_config(**{**BEFORE_FIELD, **{k: v for k, v in ckpt["config"].items() if k in known}})
        model = make_model(cfg)  # the teaching TinyLM, or LabLM where a bench field is set
        model.load_state_dict(ckpt["model"])
    except (RuntimeError, TypeError, ValueError, NotImplementedError) as e:
        raise CheckpointError(f"{path}: config and weights do not make a model ({str(e).splitlines()[0]}); "
                              f"delete it and rerun `{make_with}`") from None
    ckpt["config"] = {**ckpt["config"], **full_config(cfg)}
    return model.to(device), ckpt
