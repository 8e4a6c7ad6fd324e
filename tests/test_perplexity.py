"""lab/perplexity.py: evaluate scores the same characters at every length (against direct forwards), and
cached_vs_full: one token at a time through the KV cache equals one forward."""
import pytest
import torch

import extrapolation_test as ET
from lab import perplexity
import tiny_lm
from tiny_models import VOCAB, direct_loss, tiny  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def test_evaluate_scores_the_same_characters_at_every_length():
    torch.manual_seed(3)
    model, ids = tiny("alibi"), torch.randint(0, len(VOCAB), (3000,))
    blocks = ET.spread_blocks(ids.numel(), 128, 3)
    losses, per_char, _ = perplexity.evaluate(model, ids, [32, 128], blocks, 256, "t")
    for i, b in enumerate(blocks):
        want_long = direct_loss(model, ids[b:b + 129])
        want_short = torch.cat([direct_loss(model, ids[b + j:b + j + 33]) for j in range(0, 128, 32)])
        d = max((per_char[128][i] - want_long).abs().max().item(), (per_char[32][i] - want_short).abs().max().item())
        assert d < 1e-5, f"block {i}: max diff {d:.2e}"
    assert losses[32] == pytest.approx(per_char[32].mean().item(), rel=1e-6)


def test_cached_vs_full_matches_for_plain_rope():
    """perplexity.cached_vs_full: one token at a time through the cache = one forward."""
    model = tiny_lm.TinyLM(tiny_lm.GPTConfig(vocab_size=20, n_layer=2, n_head=2, n_embd=16, pos="rope"))
    ids = torch.randint(0, 20, (2 * 32 + 1,))
    r = perplexity.cached_vs_full(model, ids, 32, 2)
    assert (r["length"], r["windows"]) == (32, 2)
    assert abs(r["difference"]) < 1e-4, f"cached decoding differs from the full forward by {r['difference']:.2e}"
    # dynamic, factor 1: plain RoPE while the length stays within original_max_len
    model.set_rope_scaling({"rope_type": "dynamic", "factor": 1.0, "original_max_len": 64})
    r = perplexity.cached_vs_full(model, ids, 32, 2)
    assert abs(r["difference"]) < 1e-4, f"max diff {r['difference']:.2e} below original_max_len"
