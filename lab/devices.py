"""The device a script runs on: cuda, then mps, then cpu, checked by allocating on it."""
import torch


def pick_device(name: str = "auto", mps: bool = True) -> torch.device:
    """"auto": cuda, then mps (unless mps=False), then cpu; otherwise the named device. Checked by
    allocating on it; an unusable one raises ValueError with a one-line message for the user."""
    if name == "auto":
        mps_ok = mps and getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
        name = "cuda" if torch.cuda.is_available() else "mps" if mps_ok else "cpu"
    try:
        device = torch.device(name)
        torch.empty(1, device=device)
    except (RuntimeError, ValueError, AssertionError) as e:  # a CPU-only torch asserts on "cuda"
        raise ValueError(f"device {name!r} is not usable here ({str(e).splitlines()[0]}); try --device cpu") from None
    return device
