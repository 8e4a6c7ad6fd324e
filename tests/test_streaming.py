"""StreamingLLM (lab/streaming.py, TinyLM.set_streaming) against the paper's cache written out token by token.

The reference decodes one token at a time. Each layer keeps a cache of (key before positions, value): the
first n_sink tokens and the latest ones, at most `window` entries, the oldest non-sink evicted first, as
mit-han-lab/streaming-llm's StartRecentKVCache does. The keys are turned (RoPE) or biased (ALiBi) by their
places in the cache, the query by its own place, the last: the paper's re-indexing, computed from
pos_rope.precompute_freqs / apply_rope and pos_alibi.alibi_slopes, not from the model's attention code.
"""
import math

import pytest
import torch

from lab import streaming
from pos_alibi import alibi_slopes
from pos_rope import apply_rope, precompute_freqs
from lab.options import LabConfig, LabLM



def cache_attention(model, block, x, cache, n_sink, window):
    """One token's attention of one layer through its StreamingLLM cache (appended to, then evicted)."""
    att, cfg = block.attn, model.cfg
    q, k, v = att.split_heads(block.ln1(x))  # (1, H, 1, D) each, before positions
    cache.append((k, v))
    if len(cache) > window:
        del cache[n_sink]  # the oldest entry that is not a sink
    K = torch.cat([c[0] for c in cache], dim=2)  # (1, H, n, D)
    V = torch.cat([c[1] for c in cache], dim=2)
    n, D = K.shape[2], K.shape[-1]
    bias = torch.zeros(1, att.n_head, 1, n)
    if cfg.pos == "rope":  # places in the cache: keys 0..n-1, the query n-1
        cos, sin = precompute_freqs(D, n, cfg.rope_theta)
        K = apply_rope(K, cos, sin, cfg.rope_pairing)
        q = apply_rope(q, cos[-1:], sin[-1:], cfg.rope_pairing)
    elif cfg.pos == "alibi":  # -m (i - j) with i, j places in the cache
        dist = (n - 1) - torch.arange(n, dtype=torch.float32)
        bias = -(alibi_slopes(att.n_head)[:, None] * dist)[None, :, None, :]  # (1, H, 1, n)
    w = torch.softmax(q @ K.transpose(-1, -2) / math.sqrt(D) + bias, dim=-1)  # (1, H, 1, n)
    y = (w @ V).transpose(1, 2).reshape(1, 1, -1)  # (1, H, 1, D) -> (1, 1, C)
    return att.out(y)


@torch.no_grad()
def reference_logits(model, idx, n_sink, window):
    caches = [[] for _ in model.blocks]
    out = []
    for t in range(idx.shape[1]):
        x = model.tok_emb(idx[:, t:t + 1]) * math.sqrt(model.cfg.n_embd)  # (1, 1, C)
        for blk, cache in zip(model.blocks, caches):
            x = x + cache_attention(model, blk, x, cache, n_sink, window)
            x = x + blk.mlp(blk.ln2(x))
        out.append(model.head(model.ln_f(x)))
    return torch.cat(out, dim=1)  # (1, T, V)


@pytest.mark.parametrize("pos,n_sink", [("rope", 4), ("alibi", 4), ("none", 4), ("rope", 0)])
def test_streaming_equals_the_cache_token_by_token(pos, n_sink):
    torch.manual_seed(0)
    model = LabLM(LabConfig(vocab_size=20, n_layer=2, n_head=4, n_embd=32, pos=pos, max_len=128)).eval()
    idx = torch.randint(0, 20, (1, 48))
    window = 16
    model.set_streaming(n_sink, window)
    with torch.no_grad():
        got = model(idx).logits
    want = reference_logits(model, idx, n_sink, window)
    err = (got - want).abs().max().item()
    assert err < 2e-4, f"{pos}, {n_sink} sinks: max |streaming - token-by-token cache| = {err:.2e}"
    model.set_streaming(None)
    with torch.no_grad():
        plain = model(idx).logits
    head = (plain[:, :window] - got[:, :window]).abs().max().item()
    assert head < 2e-5, f"up to the cache size it is the model's own forward: max diff {head:.2e}"
    assert (plain[:, window:] - got[:, window:]).abs().max() > 1e-3, "beyond the cache it must differ"


def test_streaming_in_chunks_equals_one_chunk():
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 3, 90, 8) for _ in range(3))
    q_sink = torch.randn(2, 3, 90, 8)
    one = streaming.attend(q, k, v, None, 4, 20, q_sink=q_sink, q_chunk=512)
    for chunk in (1, 7, 32):
        err = (streaming.attend(q, k, v, None, 4, 20, q_sink=q_sink, q_chunk=chunk) - one).abs().max().item()
        assert err < 1e-5, f"q_chunk={chunk}: max diff {err:.2e}"


def test_streaming_refuses_what_it_cannot_reindex():
    for kw, why in ((dict(pos="learned"), "input"), (dict(pos="rope", sinks=True), "sinks"),
                    (dict(pos="rope", attn_window=8), "local")):
        model = LabLM(LabConfig(vocab_size=20, n_layer=2, n_head=2, n_embd=16, max_len=64, **kw))
        with pytest.raises(ValueError, match=why):
            model.set_streaming(4, 16)
    model = LabLM(LabConfig(vocab_size=20, n_layer=2, n_head=2, n_embd=16, max_len=64, pos="rope"))
    with pytest.raises(ValueError, match="n_sink < window"):
        model.set_streaming(16, 16)
    model.set_streaming(4, 8)
    with pytest.raises(ValueError, match="cached decoding"):
        model.generate(torch.zeros(1, 3, dtype=torch.long), 2)
    with pytest.raises(ValueError, match="q_sink"):
        streaming.attend(*(torch.randn(1, 1, 30, 4) for _ in range(3)), None, 4, 16)
