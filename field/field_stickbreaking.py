"""Stick-breaking attention: each key takes a share of what the keys nearer the query left (scheme "stickbreaking").

Paper: Tan, Shen, Yang, Panda and Courville, ICLR 2025, "Scaling Stick-Breaking Attention: An Efficient
Implementation and In-depth Study". No position encoding at all: the order of the keys is in the weights.
Going from the query back, each key j < i breaks off a fraction beta_ij of the stick left over, and what
no key took stays with the query's own value:

    z_ij = q_i . k_j / sqrt(D),   beta_ij = sigmoid(z_ij)
    A_ij = beta_ij prod_{j<l<i} (1 - beta_il)               (j < i)
    o_i  = sum_{j<i} A_ij v_j + (1 - sum_{j<i} A_ij) v_i

In softmax form, through the score bias alone. With log(1 - beta) = logsigmoid(-z) and
c_ij = sum_{l=j..i-1} logsigmoid(-z_il):
    z_ij + c_ij = logsigmoid(z_ij) + sum_{j<l<i} logsigmoid(-z_il) = log A_ij          (j < i)
    z_ii + (c_i0 - z_ii) = c_i0 = log prod_{l<i} (1 - beta_il) = log(1 - sum_j A_ij)    (j = i)
so bias_ij = c_ij below the diagonal and c_i0 - z_ii on it: the logits are log A and the log of the
remainder, their exponentials sum to 1, and softmax returns them unchanged, with the remainder on v_i.
(The same weights through the extra-logit slot, log A as bias and the log remainder as a dropped column,
would send the remainder nowhere: the reference's first output, not its attention.)

Checked against the authors' reference (shawntan/stickbreaking-attention, stickbreaking_attention/sb_ref.py
with tests/test_attn.py's ref_fwd: attend_current=False, o + rem v): tests/test_field_stickbreaking.py.
That remainder on v_i is also their earlier model code's (dolomite-engine, sb_remainder). Their current model
code instead adds rem times a learned vector per head (zero at the start) and a GroupNorm per head; not here.

Conventions: causal only; no parameters; cached decoding needs no state (k holds the cached keys). Under a
local window (LabConfig.attn_window, lab/options.py) each query's stick starts at the first key of its window. The
sums run in float32. Cost: each chunk of queries computes z against every key it sees and a cumulative
sum over them, O(T^2) per head as attention is. A NoPE layer (nope_every) is softmax attention.
Here: registered by lab/field.py (importing lab loads field/) (`--variants stickbreaking`);
`python field/field_stickbreaking.py` runs the self-check. Copied alone it needs torch only.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

try:  # inside the repository the scheme registers itself; a copy alone works without it
    import schemes
except ImportError:
    schemes = None


def stick_bias(z: torch.Tensor, i0: int, j0: int, window: int = 0, window_kind: str = "sliding") -> torch.Tensor:
    """Scores z_ij = q_i . k_j / sqrt(D) (B, H, R, C) of queries at positions i0.. against keys j0.. (j0 <= i0)
    -> the bias (B, H, R, C) whose softmax with z is stick-breaking: c_ij below the diagonal, c_i0 - z_ii on
    it, -inf past it. The sticks start at each query's first visible key: j0 (keys before it are outside the
    chunk), or with a local window w > 0 the first key of that query's window ("sliding": i - w + 1;
    "chunked": the start of i's chunk of w), so a key the window hides never shrinks the stick."""
    i = torch.arange(i0, i0 + z.shape[-2], device=z.device)[:, None]  # (R, 1) query positions
    j = torch.arange(j0, j0 + z.shape[-1], device=z.device)[None, :]  # (1, C) key positions
    hidden = j >= i  # log(1 - beta_il) counts for keys l < i only ...
    if window:  # ... and inside the query's window (the window mask hides the rest from softmax too)
        first = (i - window + 1).clamp(min=0) if window_kind == "sliding" else (i // window) * window  # (R, 1)
        hidden = hidden | (j < first)
    log_keep = F.logsigmoid(-z).masked_fill(hidden, 0.0)  # (B, H, R, C)
    # c_ij = sum_{l >= j} log(1 - beta_il): a cumulative sum from the last key back
    c = log_keep.flip(-1).cumsum(-1).flip(-1)             # (B, H, R, C)
    bias = torch.where(j == i, c[..., :1] - z, c)         # the remainder c_i0 on the query's own key
    return bias.masked_fill(j > i, float("-inf"))


class StickBreaking(nn.Module):
    """No parameters; score_bias is the hook."""

    def score_bias(self, x, layer, offset: int, shared, past, q=None, k=None):
        """Per chunk: queries q[a:b] (positions offset+a ..) against keys k[s:e] -> (B, H, b-a, e-s)."""
        if layer.nope:
            return None, None
        scale = 1.0 / math.sqrt(q.shape[-1])

        def rows(a, b, s, e):
            z = q[..., a:b, :].float() @ k[..., s:e, :].float().transpose(-2, -1) * scale  # (B, H, b-a, e-s)
            return stick_bias(z, offset + a, s, layer.window, getattr(layer, "window_kind", "sliding"))
        return rows, None


def _build(cfg) -> StickBreaking:
    return StickBreaking()


def _self_check() -> None:
    # z = 0 everywhere: beta = 1/2, so key i-1 takes 1/2, key i-2 takes 1/4, ..., the query keeps 2^-i
    z = torch.zeros(1, 1, 4, 4)
    w = torch.softmax(z + stick_bias(z, 0, 0), dim=-1)[0, 0]
    want = torch.tensor([[1, 0, 0, 0], [0.5, 0.5, 0, 0], [0.25, 0.5, 0.25, 0], [0.125, 0.25, 0.5, 0.125]])
    assert torch.allclose(w, want), w
    print("ok  beta = 1/2: the nearest earlier key takes 1/2, the next 1/4, the query keeps the rest")
    z = torch.randn(2, 3, 6, 6) * 4
    w = torch.softmax(z + stick_bias(z, 0, 0), dim=-1)
    assert torch.allclose(w.sum(-1), torch.ones(2, 3, 6)), w.sum(-1)
    print("ok  random scores: the weights with the remainder sum to 1 in every row")
    A = torch.sigmoid(z[0, 0])  # the product form, written out for row 5
    want = [A[5, j] * torch.prod(1 - A[5, j + 1:5]) for j in range(5)] + [torch.prod(1 - A[5, :5])]
    err = (w[0, 0, 5] - torch.stack(want)).abs().max().item()
    assert err < 1e-6, err
    print(f"ok  row 5 equals beta_5j prod_(j<l<5) (1 - beta_5l), the remainder on key 5 (max diff {err:.1e})")


if schemes is not None and __name__ != "__main__":
    schemes.register(schemes.Scheme("stickbreaking", "score bias from q and k (stick-breaking)", __file__,
                                    build=_build, score_bias=StickBreaking.score_bias,
                                    causal_only=True, colour="#4b0082"))  # apart from FIRE's blue-violet

if __name__ == "__main__":
    import argparse  # --help prints this docstring; any argument is refused before the work starts
    argparse.ArgumentParser(description=__doc__ + "\nRun alone, it runs the self-check.",
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    _self_check()
