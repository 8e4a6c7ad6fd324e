"""Selective attention on RoPE: earlier tokens mask later keys through one head's scores (scheme "selective").

Paper: Leviathan, Kalman and Matias 2024, "Selective Attention Improves Transformer". Head 0's score of
query k on key j, when positive, says "token k no longer needs j"; every later query then sees j
penalised by the sum of those votes, in every head of the layer:

    z0_kj = q0_k . k0_j / sqrt(D)                              (head 0, after RoPE)
    S_kj  = max(z0_kj, 0)  for 0 < j < k,  else 0              (never the first key, never itself)
    F_ij  = sum_{k < i} S_kj                                   (only queries strictly before i vote)
    logit_ij = q_i . k_j / sqrt(D) - F_ij                      (every head; -inf where j > i)

Selection is not a position encoding: it sits on RoPE here, so `selective` and `rope` differ in the
selection only. The paper gives the algorithm as pseudocode and no code; tests/test_field_selective.py
holds this file to a plain loop written from it. Its memory savings (pruning keys whose F is large at
inference) are not part of it: every key stays, penalised.

Conventions: causal only. F needs the votes of every earlier query, so the hook sums the column sums of
S once per call, in chunks of 256 queries (keeping one (B, Tk) prefix per chunk, never a (T, Tk)
tensor), and a chunk of rows adds the votes of the rows before it inside its own chunk. Cached decoding:
the state is F's column sums over every query so far, (B, Tk). In float32. A NoPE layer (nope_every) has
neither RoPE nor selection there. Uses the layer's RoPE tables, so RoPE's options and scalings apply.
Here: registered by lab/field.py (importing lab loads field/) (`--variants selective`); `python field/field_selective.py`
runs the self-check. Copied alone it needs torch and a RoPE module with the repository's call,
rope(q, k, offset=) (pos_rope.py).
"""
import math

import torch
import torch.nn as nn

try:  # inside the repository the scheme registers itself; a copy alone works without it
    import schemes
except ImportError:
    schemes = None

CHUNK = 256  # queries per step of the hook's column sums


def votes(z0: torch.Tensor, i0: int, j0: int) -> torch.Tensor:
    """Head 0's scores (B, R, C) of queries at positions i0.. against keys j0.. -> S (B, R, C)."""
    i = torch.arange(i0, i0 + z0.shape[-2], device=z0.device)[:, None]  # (R, 1) query positions
    j = torch.arange(j0, j0 + z0.shape[-1], device=z0.device)[None, :]  # (1, C) key positions
    # S_kj = relu(z0_kj) for 0 < j < k: not the first key, not itself, not a later key. The paper exempts
    # <BOS>; our windows have none, so the exemption falls on key 0, whatever character it is.
    return z0.clamp(min=0.0).masked_fill((j >= i) | (j == 0), 0.0)


class Selective(nn.Module):
    """No parameters: head 0 of each layer votes; rotate_qk and score_bias are the hooks."""

    def rotate_qk(self, q, k, offset: int, layer):
        """RoPE's rotation with the layer's tables; a NoPE layer has none."""
        return (q, k) if layer.rope is None else layer.rope(q, k, offset=offset)

    def score_bias(self, x, layer, offset: int, shared, past, q=None, k=None):
        """Per call: the column sums of S over the queries before each chunk of CHUNK. Per chunk: -F of
        queries q[a:b] against keys k[s:e], (B, 1, b-a, e-s) for every head. State: column sums, (B, Tk)."""
        if layer.nope:
            return None, None
        B, _, T, D = q.shape
        Tk, scale = k.shape[-2], 1.0 / math.sqrt(D)
        if (0 if past is None else past.shape[-1]) != offset:
            raise ValueError(f"selective: the cache holds votes on {0 if past is None else past.shape[-1]} keys, "
                             f"but the new tokens start at position {offset}")
        q0, k0 = q[:, 0].float(), k[:, 0].float()  # head 0: (B, T, D), (B, Tk, D)

        def z0(a, b, s, e):  # (B, b-a, D) @ (B, D, e-s) -> (B, b-a, e-s)
            return q0[:, a:b] @ k0[:, s:e].transpose(-2, -1) * scale

        done = q0.new_zeros(B, Tk)  # column sums of S over the queries before this call, widened to Tk keys
        if past is not None:
            done[:, :offset] = past
        prefix = [done]  # prefix[n]: column sums over every query before row n * CHUNK of this call
        for a in range(0, T, CHUNK):
            b = min(a + CHUNK, T)
            col = votes(z0(a, b, 0, offset + b), offset + a, 0).sum(-2)  # (B, offset + b): later keys get no vote
            prefix.append(prefix[-1] + nn.functional.pad(col, (0, Tk - col.shape[-1])))  # widened to (B, Tk)

        def rows(a, b, s, e):
            n = a // CHUNK
            base = prefix[n][:, s:e]                                           # (B, e-s), queries before n CHUNK
            if n * CHUNK < a:                                                  # and this chunk's rows before a
                base = base + votes(z0(n * CHUNK, a, s, e), offset + n * CHUNK, s).sum(-2)
            S = votes(z0(a, b, s, e), offset + a, s)                           # (B, b-a, e-s)
            F = base[:, None, :] + S.cumsum(-2) - S                            # F_ij: the votes of rows k < i
            i = torch.arange(offset + a, offset + b, device=q.device)[:, None]
            j = torch.arange(s, e, device=q.device)[None, :]
            return (-F).masked_fill(j > i, float("-inf"))[:, None]             # (B, 1, b-a, e-s): every head
        return rows, prefix[-1]


def _build(cfg) -> Selective:
    return Selective()


def _self_check() -> None:
    # one query row at a time, with the state, equals one call: the votes carry over
    class L:  # what score_bias reads of a layer
        nope, rope = False, None
    torch.manual_seed(0)
    q, k = torch.randn(1, 2, 7, 4), torch.randn(1, 2, 7, 4)
    full, _ = Selective().score_bias(None, L, 0, None, None, q=q, k=k)
    full = full(0, 7, 0, 7)
    past, parts = None, []
    for t in range(7):
        rows, past = Selective().score_bias(None, L, t, None, past, q=q[:, :, t:t + 1], k=k[:, :, :t + 1])
        parts.append(nn.functional.pad(rows(0, 1, 0, t + 1), (0, 6 - t), value=float("-inf")))
    part = torch.cat(parts, dim=-2)
    assert torch.equal(part.isinf(), full.isinf()) and torch.allclose(part.nan_to_num(0, 0, 0), full.nan_to_num(0, 0, 0))
    print("ok  seven tokens decoded one by one, votes as cache state, give one call's bias")
    assert (full[..., 0] == 0).all() and (torch.diagonal(full, dim1=-2, dim2=-1) == 0).all()
    print("ok  the first key and each query's own key are never penalised")
    q, k = torch.zeros(1, 1, 5, 2), torch.zeros(1, 1, 5, 2)
    q[0, 0, 1:] = torch.tensor([2.0, 0.0])  # queries 1.. score 2 * 1 / sqrt(2) on key 1
    k[0, 0, 1] = torch.tensor([1.0, 0.0])
    rows, _ = Selective().score_bias(None, L, 0, None, None, q=q, k=k)
    got, s = rows(0, 5, 0, 5)[0, 0, :, 1], math.sqrt(2)
    assert torch.allclose(got, torch.tensor([float("-inf"), 0.0, 0.0, -s, -2 * s])), got
    print("ok  key 1, scored sqrt 2 by queries 1..4: query 1's own vote does not count, so queries 3 and 4 "
          "see -sqrt 2 and -2 sqrt 2")


if schemes is not None and __name__ != "__main__":
    schemes.register(schemes.Scheme("selective", "Q/K rotation + score bias from q and k (selection)", __file__,
                                    build=_build, rotate_qk=Selective.rotate_qk, score_bias=Selective.score_bias,
                                    rope_options=True, causal_only=True, colour="#20b2aa"))  # apart from sin's green

if __name__ == "__main__":
    import argparse  # --help prints this docstring; any argument is refused before the work starts
    argparse.ArgumentParser(description=__doc__ + "\nRun alone, it runs the self-check.",
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    _self_check()
