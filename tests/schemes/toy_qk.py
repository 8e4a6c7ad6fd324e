"""A toy scheme whose score bias reads q and k, for tests/test_scheme_file.py: written from docs/your_scheme.md alone.

Contextual counting in the manner of CoPE (Golovneva et al. 2024, "Contextual Position Encoding"): query i
counts the keys between key j and itself that its gate lets through, and pays a learned slope per head for
each one, as ALiBi pays per token:

    g_il = sigmoid(q_i . k_l / sqrt(D)),   p_ij = sum_{l=j..i} g_il,   bias_ij = -m_h p_ij   (j <= i)

(CoPE itself interpolates learned position vectors at p_ij; this toy keeps ALiBi's line, enough to need
q and k inside the bias.) p_ij of a chunk of queries needs only the keys that chunk sees, so the sum runs
inside each chunk; in cached decoding k holds the cached keys too, so there is no state to keep.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import schemes
from attn_common import hide_later_keys


class ContextualCount(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.slope = nn.Parameter(torch.zeros(cfg.n_layer, cfg.n_head))  # m_h = softplus(slope): 0.69 at the start

    def score_bias(self, x, layer, offset, shared, past, q=None, k=None):
        """Per chunk: queries q[a:b] against keys k[s:e], (B, H, b-a, e-s)."""
        m = F.softplus(self.slope[layer.index]).float()[:, None, None]  # (H, 1, 1)

        def rows(a, b, s, e):  # queries at positions offset+a .. offset+b-1, keys at s .. e-1
            qa, ks = q[..., a:b, :].float(), k[..., s:e, :].float()                  # (B, H, b-a, D), (B, H, e-s, D)
            g = torch.sigmoid(qa @ ks.transpose(-2, -1) / math.sqrt(q.shape[-1]))  # (B, H, b-a, e-s)
            i = torch.arange(offset + a, offset + b, device=q.device)[:, None]       # (b-a, 1)
            j = torch.arange(s, e, device=q.device)[None, :]                         # (1, e-s)
            g = g.masked_fill(j > i, 0.0)                                            # only keys l <= i count
            p = g.flip(-1).cumsum(-1).flip(-1)                                       # p_ij = sum_{l >= j} g_il
            return hide_later_keys(-m * p, offset + a, s).to(q.dtype)
        return rows, None


schemes.register(schemes.Scheme("toy_qk", "score bias from q and k (contextual count)", __file__,
                                build=ContextualCount, score_bias=ContextualCount.score_bias, causal_only=True))
