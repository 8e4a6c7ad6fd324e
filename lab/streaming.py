"""StreamingLLM at evaluation: the first tokens kept beside a sliding window, positions read inside the cache.

Paper: Xiao, Tian, Chen, Han and Lewis, ICLR 2024, "Efficient Streaming Language Models with Attention
Sinks" (mit-han-lab/streaming-llm, enable_streaming_llm(start_size=4, recent_size=...)). A model trained
at length W reads a longer text through a cache of W entries: the first n tokens of the text (the sinks,
n = 4) and the W - n most recent ones. Positions are the entries' places in the cache, not in the text:

    query i >= W sits at cache position W - 1;  a recent key j (i - (W - n) < j <= i) at W - 1 - (i - j);
    a sink s < n at s.

So a recent key keeps its distance i - j, and a sink is seen from distance W - 1 - s instead of i - s: the
model never meets a distance it was not trained at. Queries i < W see every earlier key at its own
position (the cache is not full yet): plain causal attention. The control is the plain window of the W
most recent keys (n = 0, window): the same cache size, without sinks.

How it is computed here: the whole text in one forward, as the cache would see it. The scores of the
recent keys are the model's own (q and k turned at their text positions, the scheme's bias); a sink's
score takes the query turned at position W - 1 (rotate_qk at that offset) and the bias of row W - 1 on
keys 0..n-1. That is StreamingLLM's re-indexing for every scheme whose scores depend on positions only
through i - j (RoPE, ALiBi, NoPE): the hidden states of the text are computed once, as in the paper,
whose cache keeps keys before RoPE and turns them at their cache positions. Schemes that add positions
to the input (learned, sin) cannot be re-indexed and are refused (LabLM.set_streaming, lab/options.py).

Shapes: q, k, v (B, H, T, D); score_bias in any form attn_common.attn_sdpa takes.
"""
import math

import torch

from attn_common import _chunk_mask, visible_keys

N_SINK, WINDOW = 4, 256  # the paper's 4 sinks; a cache the size of our training length


def requery(q, rotate, position: int):
    """q (B, H, T, D) before positions -> every query turned as if it sat at `position`: rotate(q', k', offset)
    is the scheme's rotate_qk for one position (T moves into the batch so that offset applies to each)."""
    B, H, T, D = q.shape
    one = q.transpose(1, 2).reshape(B * T, H, 1, D)  # (B, H, T, D) -> (B, T, H, D) -> (B*T, H, 1, D)
    turned, _ = rotate(one, one, position)
    return turned.reshape(B, T, H, D).transpose(1, 2)  # (B*T, H, 1, D) -> (B, H, T, D)


def _scores(mask, like):
    """A mask from _chunk_mask (None, boolean keep, or float with -inf) as a float score term like `like`."""
    if mask is None:
        return torch.zeros((), dtype=like.dtype, device=like.device)
    if mask.dtype == torch.bool:  # True = may attend -> 0, else -inf
        return torch.zeros(mask.shape, dtype=like.dtype, device=like.device).masked_fill(~mask, float("-inf"))
    return mask.to(like.dtype)


def attend(q, k, v, score_bias=None, n_sink: int = N_SINK, window: int = WINDOW, q_sink=None, q_chunk: int = 256):
    """Causal attention of T queries on their own T keys through a StreamingLLM cache of `window` entries:
    n_sink sinks plus window - n_sink recent keys (n_sink = 0: the plain window). q_sink (B, H, T, D): the
    queries as seen from cache position window - 1 (requery), needed when n_sink > 0 and T > window.
    Returns (B, H, T, D)."""
    if not 0 <= n_sink < window:
        raise ValueError(f"n_sink must be in 0..window-1, got {n_sink} with window {window}")
    T, D = q.shape[-2], q.shape[-1]
    if n_sink and T > window and q_sink is None:
        raise ValueError("the sinks need the queries seen from cache position window - 1 (q_sink)")
    if T <= window:  # the cache never fills: every query sees every earlier key at its own position
        n_sink = 0
    recent, scale, outs = window - n_sink, 1.0 / math.sqrt(D), []
    for a in range(0, T, q_chunk):
        b = min(a + q_chunk, T)
        # the recent keys of rows a..b-1: j in (i - recent, i], and never a sink (j >= n_sink)
        s = max(n_sink, a - recent + 1)
        keep = _chunk_mask(q, score_bias, None, True, recent, "sliding", 0, a, b, s, b)
        # (B, H, b-a, D) @ (B, H, D, b-s) -> (B, H, b-a, b-s)
        scores = (q[..., a:b, :] @ k[..., s:b, :].transpose(-1, -2)).float() * scale + _scores(keep, q).float()
        values = v[..., s:b, :]
        if n_sink:
            i = torch.arange(a, b, device=q.device)
            cache_row = i.clamp(max=window - 1)  # where each query sits in the cache
            full = (i >= window)[:, None]        # (b-a, 1): rows whose sinks are seen from window - 1
            qs = q[..., a:b, :] if q_sink is None else torch.where(full, q_sink[..., a:b, :], q[..., a:b, :])
            lo, hi = int(cache_row[0]), int(cache_row[-1]) + 1
            # the bias of cache rows lo..hi-1 on keys 0..n_sink-1, picked per query (B?, H, b-a, n_sink); asked
            # without the causal mask (its bottom-right alignment needs as many keys as rows): `later` hides
            bias = _scores(_chunk_mask(q, score_bias, None, False, 0, "sliding", 0, lo, hi, 0, n_sink), q)
            bias = bias[..., cache_row - lo, :] if bias.dim() >= 2 else bias
            later = ~visible_keys(a, b - a, 0, n_sink, q.device)  # (b-a, n_sink): a sink after the query
            # (B, H, b-a, D) @ (B, H, D, n) -> (B, H, b-a, n)
            sink = (qs @ k[..., :n_sink, :].transpose(-1, -2)).float() * scale + bias.float()
            scores = torch.cat((sink.masked_fill(later, float("-inf")), scores.expand(*sink.shape[:-1], -1)), -1)
            values = torch.cat((v[..., :n_sink, :], values), dim=-2)  # (B, H, n + b-s, D)
        # softmax over the cache, then (B, H, b-a, n + b-s) @ (B, H, n + b-s, D) -> (B, H, b-a, D)
        outs.append(torch.softmax(scores, dim=-1).to(v.dtype) @ values)
    return torch.cat(outs, dim=-2)
