"""field_stickbreaking.py (Tan et al. 2025) against the authors' reference: sb_ref.py's stickbreaking() with
tests/test_attn.py's ref_fwd (keys strictly before the query, the remainder added on the query's own value),
written out here, equals attn_sdpa with the scheme's bias; chunks of 3 and cached decoding equal one forward."""
import math

import pytest
import torch
import torch.nn.functional as F

import schemes
from attn_common import attn_sdpa
from conftest import chunks_and_cache_agree
from tiny_lm import GPTConfig, TinyLM

pytestmark = pytest.mark.usefixtures("one_thread")
KW = {"vocab_size": 20, "n_layer": 2, "n_head": 2, "n_embd": 16, "max_len": 64, "pos": "stickbreaking"}


def reference(q, k, v):
    """o + rem v of the reference for q, k, v (B, H, T, D): log A = log beta + the sum of log(1 - beta) over the
    keys between, as a matrix product with a strictly lower triangle of ones."""
    T = q.shape[-2]
    logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    hidden = torch.ones(T, T).triu(0).bool()                      # the key itself and later keys
    log_z = F.logsigmoid(logits).masked_fill(hidden, -1e5)
    log_beta = F.logsigmoid(-logits).masked_fill(hidden, 0.0)
    between = torch.ones(T, T).tril(-1)                           # between[l, j] = 1 where l > j
    att = (log_z + log_beta @ between).exp()                      # A_ij
    return att @ v + (1 - att.sum(-1))[..., None] * v


def test_stickbreaking_equals_the_reference():
    """Random q, k, v with scores from -8 to 8: the scheme's bias in chunks of 5 through attn_sdpa gives the
    reference's outputs, at offset 0 and for the last rows against cached keys."""
    entry = schemes.get("stickbreaking")
    m = entry.build(GPTConfig(**KW))
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 3, 13, 8) * 1.5 for _ in range(3))
    want = reference(q, k, v)
    layer = schemes.Layer(0, False, 0, None)
    rows, state = entry.score_bias(m, None, layer, 0, None, None, q=q, k=k)
    err = (attn_sdpa(q, k, v, score_bias=rows, causal=True, q_chunk=5) - want).abs().max().item()
    assert state is None and err < 1e-5, f"stick-breaking vs sb_ref: max diff {err:.2e}"
    rows, _ = entry.score_bias(m, None, layer, 10, None, None, q=q[..., 10:, :], k=k)
    err = (attn_sdpa(q[..., 10:, :], k, v, score_bias=rows, causal=True) - want[..., 10:, :]).abs().max().item()
    assert err < 1e-5, f"stick-breaking, 3 queries against 10 cached keys + their own vs sb_ref: max diff {err:.2e}"


def test_stickbreaking_chunks_and_cache_equal_one_forward():
    torch.manual_seed(0)
    chunks_and_cache_agree(TinyLM(GPTConfig(**KW)).eval(), "stickbreaking")


@pytest.mark.parametrize("kind", ["sliding", "chunked"])
def test_stickbreaking_under_a_window_breaks_the_stick_of_the_window_alone(kind):
    """A local window of 4: row i is the reference run on the keys its window shows alone (keys first..i, first
    the window's first key), so a hidden key never shrinks the stick; chunks of 5 and 3 queries against cached
    keys give the same rows."""
    entry, w = schemes.get("stickbreaking"), 4
    m = entry.build(GPTConfig(**KW))
    torch.manual_seed(3)
    q, k, v = (torch.randn(2, 3, 13, 8) * 1.5 for _ in range(3))
    want = torch.stack([reference(q[..., f:i + 1, :], k[..., f:i + 1, :], v[..., f:i + 1, :])[..., -1, :]
                        for i in range(13) for f in [max(0, i - w + 1) if kind == "sliding" else i // w * w]],
                       dim=-2)  # (B, H, 13, D)
    layer = schemes.Layer(0, False, w, None, kind)
    rows, _ = entry.score_bias(m, None, layer, 0, None, None, q=q, k=k)
    got = attn_sdpa(q, k, v, score_bias=rows, causal=True, q_chunk=5, window=w, window_kind=kind)
    err = (got - want).abs().max().item()
    assert err < 1e-5, f"stick-breaking, {kind} window {w}, vs the reference on each window's keys: max diff {err:.2e}"
    rows, _ = entry.score_bias(m, None, layer, 10, None, None, q=q[..., 10:, :], k=k)
    got = attn_sdpa(q[..., 10:, :], k, v, score_bias=rows, causal=True, window=w, window_kind=kind)
    err = (got - want[..., 10:, :]).abs().max().item()
    assert err < 1e-5, f"stick-breaking, {kind} window {w}, 3 queries against cached keys: max diff {err:.2e}"
