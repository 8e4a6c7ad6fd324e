"""A toy scheme from outside the repository, for tests/test_scheme_file.py (and EXTRA_SCHEME_FILE, tests/README.md).

A forget gate in the manner of FoX (Lin et al. 2025, "Forgetting Transformer"): one gate per layer,
f_t = sigmoid(W x_t + b) per head from the layer's input, and the score bias

    bias_ij = sum_{l=j+1..i} log f_l = c_i - c_j,    c_i = sum_{l<=i} log f_l.

It has what the plug-in contract must carry: learned parameters (the gates), an nn.Linear whose
init is its own (weight 0, bias gate_bias: f = sigmoid(gate_bias) everywhere at the start, a flat
decay that TinyLM's init must not redraw), cache state (c of every key so far), an option
(gate_bias) and no bidirectional form (causal_only).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import schemes
from attn_common import hide_later_keys


class ForgetGate(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gates = nn.ModuleList(nn.Linear(cfg.n_embd, cfg.n_head) for _ in range(cfg.n_layer))
        for gate in self.gates:
            nn.init.zeros_(gate.weight)
            nn.init.constant_(gate.bias, cfg.pos_options["gate_bias"])

    def score_bias(self, x, layer, offset, shared, past, q=None, k=None):
        """Per layer: c for the new keys (continuing the cached sums); per chunk: c_i - c_j."""
        c = F.logsigmoid(self.gates[layer.index](x)).transpose(1, 2).cumsum(-1)  # (B, T, H) -> (B, H, T)
        if past is not None:
            c = c + past[..., -1:]
        keys = c if past is None else torch.cat((past, c), dim=-1)  # (B, H, Tk)
        first = keys.shape[-1] - c.shape[-1]  # the position of this call's first query

        def rows(a, b, s, e):  # rows a..b-1 against keys s..e-1: (B, H, b-a, 1) - (B, H, 1, e-s) -> (B, H, b-a, e-s)
            return hide_later_keys(c[..., a:b, None] - keys[..., None, s:e], first + a, s)
        return rows, keys


schemes.register(schemes.Scheme("toy_forget", "score bias from the input (forget gate)", __file__,
                                build=ForgetGate, score_bias=ForgetGate.score_bias, causal_only=True,
                                decay=tuple(f"gates.{i}.weight" for i in range(64)), options={"gate_bias": 3.0}))
