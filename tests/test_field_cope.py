"""field_cope.py (CoPE, Golovneva et al. 2024) against the authors' computation: the attention of
facebookresearch/RAM's ContextPosSelfAttn (projects/cope/src/cope/context_position.py, its defaults), written
out here over whole (T, T) matrices, equals attn_sdpa with the scheme's chunked bias; chunks of 3 and cached
decoding equal one forward of a TinyLM; the tables learn."""
import math

import pytest
import torch

import schemes
from attn_common import attn_sdpa
from conftest import chunks_and_cache_agree
from tiny_lm import GPTConfig, TinyLM

pytestmark = pytest.mark.usefixtures("one_thread")
KW = {"vocab_size": 20, "n_layer": 2, "n_head": 2, "n_embd": 16, "max_len": 64, "train_len": 8, "pos": "cope"}


def reference(q, k, v, emb, npos):
    """The RAM layer's forward for q, k, v (B, H, T, D) and its table emb (D, npos), heads folded as its bmm."""
    D, T = q.shape[-1], q.shape[-2]
    keep = torch.ones(T, T).tril()                                  # 1 where key <= query
    qk = q @ k.transpose(-2, -1)                                    # the gate logits are the attention's
    gates = torch.sigmoid(qk / math.sqrt(D)) * keep
    pos = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=npos - 1)    # counts from the query back
    at_int = q @ emb                                                # q . e[n] for every integer n
    w = pos - pos.floor()
    pos_logits = at_int.gather(-1, pos.ceil().long()) * w + at_int.gather(-1, pos.floor().long()) * (1 - w)
    logits = (qk + pos_logits) / math.sqrt(D) + keep.log()          # divided after the position logit is added
    return torch.softmax(logits, -1) @ v


def model(seed=0):
    torch.manual_seed(seed)
    m = TinyLM(GPTConfig(**KW)).eval()
    with torch.no_grad():
        m.cope.emb.normal_(0.0, 1.0)  # the zero init would hide the table
    return m


def test_cope_equals_the_authors_attention():
    """Random q, k, v with large scores (counts up to the clamp), a random table: the scheme's bias in chunks of 5
    through attn_sdpa gives the reference's outputs, at offset 0 and for the last rows against cached keys."""
    cfg = GPTConfig(**{**KW, "train_len": 6})  # npos 7 < T 12: the clamp is reached
    entry = schemes.get("cope")
    m = entry.build(cfg)
    torch.manual_seed(1)
    with torch.no_grad():
        m.emb.normal_(0.0, 1.0)
    q, k, v = (torch.randn(2, 2, 12, 8) * 2 for _ in range(3))
    want = reference(q, k, v, m.emb[1], m.npos)
    layer = schemes.Layer(1, False, 0, None)
    rows, state = entry.score_bias(m, None, layer, 0, None, None, q=q, k=k)
    got = attn_sdpa(q, k, v, score_bias=rows, causal=True, q_chunk=5)
    err = (got - want).abs().max().item()
    assert state is None and err < 1e-5, f"cope vs the RAM layer: max diff {err:.2e}"
    rows, _ = entry.score_bias(m, None, layer, 9, None, None, q=q[..., 9:, :], k=k)
    err = (attn_sdpa(q[..., 9:, :], k, v, score_bias=rows, causal=True) - want[..., 9:, :]).abs().max().item()
    assert err < 1e-5, f"cope, 3 queries against 9 cached keys + their own vs the RAM layer: max diff {err:.2e}"
    top = torch.sigmoid(q @ k.transpose(-2, -1) / math.sqrt(8)).tril().sum(-1).max().item()
    assert m.npos == 7 and top > 6, f"the largest count {top:.1f} should pass the clamp at npos - 1 = 6"


def test_cope_chunks_and_cache_equal_one_forward():
    chunks_and_cache_agree(model(), "cope")


def test_cope_tables_learn_from_zero():
    """At the zero init the bias is 0 (attention as NoPE's); one backward gives every layer's table a gradient."""
    torch.manual_seed(0)
    m = TinyLM(GPTConfig(**KW))
    assert m.cope.emb.abs().max() == 0
    ids = torch.randint(0, 20, (2, 16))
    m(ids, targets=ids).loss.backward()
    g = m.cope.emb.grad.abs().flatten(1).amax(1)
    assert (g > 0).all(), f"cope: the tables' largest gradient per layer {g.tolist()}"
