"""KERPLE, power form: a learned score bias -r1 |i - j|^p, as a scheme file.

Paper: Chi, Fan, Ramadge and Rudnicky 2022, "KERPLE: Kernelized Relative Positional Embedding for
Length Extrapolation" (NeurIPS). Checked against their code (chijames/KERPLE, megatron/mpu/layers.py,
ParallelKerplePower with a bias kernel only): one (r1, p) per head, shared by every layer, drawn
r1 ~ U(0, 1) and p ~ U(0, 2), held at r1 >= 0.01 and 0.01 <= p <= 2 (p = 1 is ALiBi with a learned
slope). They clamp the stored values after each step; this file clamps inside the formula, the same
bias with the gradient stopped outside the bounds. The log form is registered (field_relbias.py).

    bias_h(i, j) = -r1_h * |i - j| ** p_h        (causal: -inf where j > i)

The repository does not register it: every script takes it with `--scheme-file examples/kerple_power.py`
(docs/your_scheme.md). Shapes: (H, queries, keys) per chunk, as attn_common.attn_sdpa asks.
"""
import torch
import torch.nn as nn

import schemes
from attn_common import hide_later_keys

EPS, P_MAX = 1e-2, 2.0  # the reference's bounds: r1 >= 0.01, 0.01 <= p <= 2


class KerplePower(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.causal = cfg.causal
        self.r1 = nn.Parameter(torch.rand(cfg.n_head))     # (H,), U(0, 1)
        self.p = nn.Parameter(torch.rand(cfg.n_head) * 2)  # (H,), U(0, 2)

    def score_bias(self, x, layer, offset, shared, past, q=None, k=None):
        """Per layer: nothing to do (one kernel for all layers). Per chunk: the bias of its queries."""
        if layer.nope:
            return None, None
        r1 = self.r1.float().clamp(min=EPS)[:, None, None]              # (H, 1, 1)
        p = self.p.float().clamp(min=EPS, max=P_MAX)[:, None, None]     # (H, 1, 1)

        def rows(a, b, s, e):  # queries at positions offset+a .. offset+b-1, keys at s .. e-1
            i = torch.arange(offset + a, offset + b, device=x.device, dtype=torch.float32)[:, None]  # (b-a, 1)
            j = torch.arange(s, e, device=x.device, dtype=torch.float32)[None, :]                    # (1, e-s)
            bias = -r1 * (i - j).abs() ** p                                     # (H, 1, 1) * (b-a, e-s)
            return (hide_later_keys(bias, offset + a, s) if self.causal else bias).to(x.dtype)
        return rows, None  # no cache state: the bias depends on positions only


schemes.register(schemes.Scheme("kerple_power", "score bias (learned power kernel)", __file__,
                                build=KerplePower, score_bias=KerplePower.score_bias))
