"""KERPLE, logarithmic form: a learned score bias -r1 log(1 + r2 |i - j|), as a scheme file.

Paper: Chi, Fan, Ramadge and Rudnicky 2022, "KERPLE: Kernelized Relative Positional Embedding for
Length Extrapolation" (NeurIPS). Checked against their code (chijames/KERPLE, megatron/mpu/layers.py,
ParallelKerpleLog): one (r1, r2) per head, shared by every layer, drawn r1 ~ U(0, 2), r2 ~ U(0, 1),
and held at >= 0.01. They clamp the stored values after each step; this file clamps inside the
formula, the same bias with the gradient stopped below 0.01.

    bias_h(i, j) = -r1_h * log(1 + r2_h * |i - j|)        (causal: -inf where j > i)

The repository does not register it: every script takes it with `--scheme-file examples/kerple.py`
(docs/your_scheme.md). Shapes: (H, queries, keys) per chunk, as attn_common.attn_sdpa asks.
"""
import torch
import torch.nn as nn

import schemes
from attn_common import hide_later_keys

EPS = 1e-2  # the reference's floor for r1 and r2


class KerpleLog(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.causal = cfg.causal
        self.r1 = nn.Parameter(torch.rand(cfg.n_head) * 2)  # (H,), U(0, 2)
        self.r2 = nn.Parameter(torch.rand(cfg.n_head))      # (H,), U(0, 1)

    def score_bias(self, x, layer, offset, shared, past):
        """Per layer: nothing to do (one kernel for all layers). Per chunk: the bias of its queries."""
        if layer.nope:
            return None, None
        r1, r2 = (p.clamp(min=EPS)[:, None, None] for p in (self.r1, self.r2))  # (H, 1, 1) each

        def rows(a, b, s, e):  # queries at positions offset+a .. offset+b-1, keys at s .. e-1
            i = torch.arange(offset + a, offset + b, device=x.device)[:, None]  # (b-a, 1)
            j = torch.arange(s, e, device=x.device)[None, :]                    # (1, e-s)
            bias = -r1 * torch.log1p(r2 * (i - j).abs())                        # (H, 1, 1) * (b-a, e-s)
            return (hide_later_keys(bias, offset + a, s) if self.causal else bias).to(x.dtype)
        return rows, None  # no cache state: the bias depends on positions only


schemes.register(schemes.Scheme("kerple", "score bias (learned log kernel)", __file__, build=KerpleLog,
                                score_bias=KerpleLog.score_bias))
