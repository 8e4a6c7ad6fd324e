"""field_selective.py (Leviathan et al. 2024) against a plain loop written from the paper's pseudocode (head 0's
positive scores, never the first key nor the key itself, summed over the queries strictly before, subtracted in
every head), in chunks and through the cache with the votes as state; it turns q and k as RoPE does."""
import math

import pytest
import torch

import schemes
from attn_common import attn_sdpa
from conftest import chunks_and_cache_agree
from tiny_lm import GPTConfig, TinyLM

pytestmark = pytest.mark.usefixtures("one_thread")
KW = {"vocab_size": 20, "n_layer": 2, "n_head": 2, "n_embd": 16, "max_len": 64, "pos": "selective"}


def reference(q, k, v):
    """Softmax attention of q, k, v (B, H, T, D) with F_ij = sum over queries n < i of relu(head 0's score of n on
    j), for 0 < j < n, subtracted: the pseudocode's roll and cumsum as loops."""
    B, H, T, D = q.shape
    logits = (q @ k.transpose(-2, -1) / math.sqrt(D)).tolist()
    out = torch.zeros_like(q)
    for b in range(B):
        for i in range(T):
            F = [sum(max(logits[b][0][n][j], 0.0) for n in range(j + 1, i)) if j > 0 else 0.0 for j in range(i + 1)]
            for h in range(H):
                w = torch.softmax(torch.tensor([logits[b][h][i][j] - F[j] for j in range(i + 1)]), 0)
                out[b, h, i] = w @ v[b, h, :i + 1]
    return out


def test_selective_equals_the_pseudocode_loop():
    """Random q, k, v: the scheme's bias through attn_sdpa in chunks of 5, and 4 queries decoded against cached
    keys with the earlier votes as state, give the loop's outputs; the state is the votes' column sums."""
    entry = schemes.get("selective")
    m = entry.build(GPTConfig(**KW))
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 3, 11, 8) * 1.5 for _ in range(3))
    want = reference(q, k, v)
    layer = schemes.Layer(0, False, 0, None)
    rows, state = entry.score_bias(m, None, layer, 0, None, None, q=q, k=k)
    err = (attn_sdpa(q, k, v, score_bias=rows, causal=True, q_chunk=5) - want).abs().max().item()
    assert err < 1e-5, f"selective vs the pseudocode loop: max diff {err:.2e}"
    _, past = entry.score_bias(m, None, layer, 0, None, None, q=q[..., :7, :], k=k[..., :7, :])
    rows, _ = entry.score_bias(m, None, layer, 7, None, past, q=q[..., 7:, :], k=k)
    err = (attn_sdpa(q[..., 7:, :], k, v, score_bias=rows, causal=True) - want[..., 7:, :]).abs().max().item()
    assert err < 1e-5, f"selective, 4 queries after 7 cached with their votes as state: max diff {err:.2e}"
    z0 = (q[:, 0] @ k[:, 0].transpose(-2, -1) / math.sqrt(8)).clamp(min=0).tril(-1)
    z0[..., 0] = 0
    err = (state - z0.sum(-2)).abs().max().item()
    assert state.shape == (2, 11) and err < 1e-5, f"selective: state vs the votes' column sums, max diff {err:.2e}"


def test_selective_chunks_and_cache_equal_one_forward_and_it_turns_like_rope():
    torch.manual_seed(0)
    chunks_and_cache_agree(TinyLM(GPTConfig(**KW)).eval(), "selective")
    with torch.no_grad():
        torch.manual_seed(0)
        rope = TinyLM(GPTConfig(**{**KW, "pos": "rope"})).eval()
        q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
        layer = schemes.Layer(0, False, 0, rope.rope_of(0))
        got = schemes.get("selective").rotate_qk(None, q, k, 3, layer)
        want = schemes.get("rope").rotate_qk(None, q, k, 3, layer)
        assert all(torch.equal(a, b) for a, b in zip(got, want)), "selective turns q and k as rope does"
