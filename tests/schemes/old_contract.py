"""Two schemes written to the first hook contract (2026-12-02), kept as an outside author wrote them, for
tests/test_scheme_file.py: a file that worked then must still run (schemes.register wraps the old forms).

    score_bias(m, x, layer, offset, shared, past) -> (bias, state)     (no q and k: they came on 2026-12-05)
    extra_logits(m, q, layer) -> logits (B?, H, T, n) or None         (now the same arguments as score_bias)

old_alibi is ALiBi's causal bias -m_h (i - j) with pos_alibi's slopes; old_sink is no position at all and one
zero logit per head that joins every softmax, as LabConfig(sinks=True) starts.
"""
import torch
import torch.nn as nn

import schemes
from attn_common import hide_later_keys
from pos_alibi import alibi_slopes


class OldAlibi(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(cfg.n_head))

    def score_bias(self, x, layer, offset, shared, past):
        m = self.slopes[:, None, None]  # (H, 1, 1)

        def rows(a, b, s, e):
            i = torch.arange(offset + a, offset + b, dtype=torch.float32)[:, None]
            j = torch.arange(s, e, dtype=torch.float32)[None, :]
            return hide_later_keys(-m * (i - j), offset + a, s).to(x.dtype)
        return rows, None


class OldSink(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head = cfg.n_head

    def extra_logits(self, q, layer):
        return q.new_zeros(1, self.n_head, 1, 1)


schemes.register(schemes.Scheme("old_alibi", "score bias (old contract)", __file__, build=OldAlibi,
                                score_bias=OldAlibi.score_bias))
schemes.register(schemes.Scheme("old_sink", "extra logits (old contract)", __file__, build=OldSink,
                                extra_logits=OldSink.extra_logits))
