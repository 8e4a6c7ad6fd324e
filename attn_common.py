"""The shared scaled dot-product attention, attn(), used by every position scheme.

Paper: Vaswani et al. 2017, "Attention Is All You Need", eq. (1), plus the additive score
bias that ALiBi needs (Press et al. 2022):

    attn(Q, K, V) = softmax( Q K^T / sqrt(d) + bias, masked ) V

Shapes: q (B, H, Tq, D), k and v (B, H, Tk, D); bias broadcastable to (B, H, Tq, Tk).
Masks are boolean with True = "may attend" (the tutorial's `mask == 0 -> -inf`).
A causal mask is aligned bottom-right: query i sits at absolute position Tk - Tq + i, so
the same code serves a full forward (Tq = Tk) and a cached decoding step (Tq < Tk).

Local attention (window_mask, `window=` in both functions) narrows the causal mask to the
last w keys (sliding: Mistral, Gemma, Command R7B) or to the query's own chunk of w positions
(chunked: Llama 4's RoPE layers). It keeps the bottom-right alignment, so a KV cache longer
than the window gives the same numbers as the full forward. Llama 4's attention temperature
for its global NoPE layers is the pure function llama4_attn_temperature.

Extra logits (`extra_logits=` in both functions; attention sinks, e.g. gpt-oss's one learned logit
per head): n more columns join each query's softmax and are dropped after it, as keys whose
values are 0, so the weights of the real keys sum to less than 1:

    attn = softmax([ Q K^T / sqrt(d) + bias, masked | E ])[:, :Tk] V,     E: (B, H, Tq, n)

Two implementations, same numbers (tests/test_attn_common.py proves it):
  * attn():      the formula written out, with every option (a boolean mask, the causal mask
                 applied on top of any bias, the attention weights for plots);
  * attn_sdpa(): torch.nn.functional.scaled_dot_product_attention, the fused kernel the
                 model runs during training and evaluation. With a bias and causal=True it
                 expects the bias to carry the causal mask already (-inf on hidden keys).

Where this differs from the tutorial's `attn`: it adds `causal=` (the tutorial's
RoPEAttention calls attn without any mask, so its "LM" could read future tokens),
`return_weights=`, and the fast path.

`python attn_common.py` runs the tutorial's opening demo (不加位置时 attention 是什么样的):
without positions, "我打你" and "你打我" give the same outputs, only permuted.
"""
import math

import torch
import torch.nn.functional as F


def causal_mask(q_len: int, k_len: int, device=None) -> torch.Tensor:
    """Boolean (Tq, Tk), True where key j <= query position k_len - q_len + i."""
    i = torch.arange(k_len - q_len, k_len, device=device)[:, None]  # (Tq, 1)
    j = torch.arange(k_len, device=device)[None, :]                 # (1, Tk)
    return j <= i                                                   # (Tq, Tk)


WINDOW_KINDS = ("sliding", "chunked")


def window_mask(q_len: int, k_len: int, window: int, kind: str = "sliding", device=None) -> torch.Tensor:
    """Boolean (Tq, Tk): the causal mask narrowed to a local window of w = window positions.
    Query row r sits at absolute position i = k_len - q_len + r (bottom-right, as causal_mask)."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"a local window is an int >= 1 (positions), got {window!r}")
    if kind not in WINDOW_KINDS:
        raise ValueError(f"unknown window kind {kind!r}; use one of {', '.join(WINDOW_KINDS)}")
    i = torch.arange(k_len - q_len, k_len, device=device)[:, None]  # (Tq, 1)
    j = torch.arange(k_len, device=device)[None, :]                 # (1, Tk)
    # sliding:  i - w < j <= i            (the w most recent keys, the query included)
    # chunked:  j // w == i // w, j <= i  (keys of the query's own chunk of w positions, up to it)
    if kind == "sliding":
        return (j <= i) & (j > i - window)                          # (Tq, Tk)
    return (j <= i) & (j // window == i // window)                  # (Tq, Tk)


def first_visible_key(i: int, window: int, kind: str = "sliding") -> int:
    """The earliest key the query at absolute position i sees under window_mask (never after i)."""
    return max(0, i - window + 1) if kind == "sliding" else (i // window) * window


# Llama 4's attention-temperature tuning (Hugging Face modeling_llama4.py, Llama4TextAttention;
# after Nakanishi 2025, "Scalable-Softmax Is Superior for Attention"), on the NoPE layers only:
#     q_i <- q_i * (log(floor((i + 1) / floor_scale) + 1) * attn_scale + 1),   i the absolute position
# It is 1 while i + 1 < floor_scale and steps up each time i + 1 reaches a multiple of floor_scale:
# the logits sharpen slowly with the number of keys, so attention over a long context stays peaked.
def llama4_attn_temperature(positions: torch.Tensor, floor_scale: int, attn_scale: float) -> torch.Tensor:
    """The factor on each query, float32, shape of positions (e.g. (T,) for positions offset .. offset+T-1)."""
    steps = torch.floor((positions.float() + 1.0) / floor_scale)  # (T,)
    return torch.log1p(steps) * attn_scale + 1.0                   # (T,)


def attn(q, k, v, mask=None, score_bias=None, causal=False, return_weights=False, window=0, window_kind="sliding",
         extra_logits=None):
    """The explicit formula. q (B, H, Tq, D), k/v (B, H, Tk, D) -> (B, H, Tq, D) [, weights (B, H, Tq, Tk)].
    window=w > 0 (needs causal=True): window_mask of that kind instead of the causal mask.
    extra_logits, broadcastable to (B, H, Tq, n): n columns in the softmax, dropped after it."""
    d = q.shape[-1]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(d)  # (B, H, Tq, D) @ (B, H, D, Tk) -> (B, H, Tq, Tk)
    if score_bias is not None:
        scores = scores + score_bias                   # ALiBi: + (H, Tq, Tk) or (B, H, Tq, Tk)
    if window and not causal:
        raise ValueError("a local window narrows the causal mask; it needs causal=True")
    if causal:
        keep = causal_mask(q.shape[-2], k.shape[-2], device=q.device) if not window else \
            window_mask(q.shape[-2], k.shape[-2], window, window_kind, device=q.device)
        mask = keep if mask is None else (mask.bool() & keep)
    if mask is not None:
        scores = scores.masked_fill(~mask.bool(), float("-inf"))
    if extra_logits is not None:  # [scores | E]: (B, H, Tq, Tk) beside (B, H, Tq, n) -> (B, H, Tq, Tk + n)
        Tk = scores.shape[-1]
        scores, extra = _beside(scores, extra_logits.to(scores.dtype))
        weights = F.softmax(torch.cat((scores, extra), dim=-1), dim=-1)[..., :Tk]  # (B, H, Tq, Tk), rows sum < 1
        out = weights @ v                              # (B, H, Tq, Tk) @ (B, H, Tk, D) -> (B, H, Tq, D)
        return (out, weights) if return_weights else out
    weights = F.softmax(scores, dim=-1)                # (B, H, Tq, Tk), rows sum to 1
    out = weights @ v                                  # (B, H, Tq, Tk) @ (B, H, Tk, D) -> (B, H, Tq, D)
    return (out, weights) if return_weights else out


def _beside(scores, extra):
    """scores (.., Tq, Tk) and extra logits broadcastable to (.., Tq, n), expanded to one leading shape."""
    extra = extra[(None,) * (scores.dim() - extra.dim())]
    lead = torch.broadcast_shapes(scores.shape[:-1], extra.shape[:-1])
    return scores.expand(*lead, scores.shape[-1]), extra.expand(*lead, extra.shape[-1])


def attn_sdpa(q, k, v, score_bias=None, causal=False, q_chunk=256, window=0, window_kind="sliding",
              extra_logits=None):
    """attn() through torch's fused F.scaled_dot_product_attention: the path the model runs.

    Who hides the future keys when causal=True:
      * no score_bias: the kernel, with is_causal=True (a bottom-right boolean mask when Tq < Tk);
      * a score_bias: the bias itself, which must hold -inf at every hidden key, as
        pos_alibi.alibi_bias(causal=True) builds it (SDPA takes a float mask or is_causal, not
        both). A bias that is visibly unmasked raises ValueError.
    The bias goes in 4-D, because on CPU a 3-D float mask sends SDPA to its slower unfused path.
    Causal with a bias, the queries go in chunks of q_chunk rows: rows a..b-1 see keys up to
    position Tk - Tq + b - 1 only, so later keys are never computed; each chunk's bias is a view.
    window=w > 0 (needs causal=True): local attention, in _windowed_sdpa.
    extra_logits (attention sinks): in _sdpa_with_extra, one call with the whole mask.
    """
    if extra_logits is not None:
        return _sdpa_with_extra(q, k, v, score_bias, causal, window, window_kind, extra_logits)
    if window:
        return _windowed_sdpa(q, k, v, score_bias, causal, q_chunk, window, window_kind)
    Tq, Tk = q.shape[-2], k.shape[-2]
    if score_bias is None:
        if not causal or Tq == 1:  # one query at the last position sees every key
            return F.scaled_dot_product_attention(q, k, v)
        if Tq == Tk:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        keep = causal_mask(Tq, Tk, device=q.device)[None, None]  # (1, 1, Tq, Tk), cached decoding
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    bias = score_bias.to(q.dtype)  # a view when the dtype already matches
    bias = bias[(None,) * (q.dim() - bias.dim())]  # (H, Tq, Tk) -> (1, H, Tq, Tk)
    if not causal:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    past = Tk - Tq  # query row r sits at absolute position past + r
    if Tq > 1:  # the first hidden key of row r is past + r + 1: it must already be -inf
        first_hidden = torch.diagonal(bias.expand(*bias.shape[:-2], Tq, Tk), offset=past + 1, dim1=-2, dim2=-1)
        if not torch.isneginf(first_hidden).all():
            raise ValueError("causal attn_sdpa with a score_bias needs -inf at the hidden keys inside the bias "
                             "(e.g. pos_alibi.alibi_bias(..., causal=True)); this bias has a finite value there")
    outs = []
    for a in range(0, Tq, q_chunk):
        b = min(a + q_chunk, Tq)
        e = past + b  # keys 0..e-1 are visible to some row of a..b-1
        rows = bias if bias.shape[-2] == 1 else bias[..., a:b, :]
        # (B, H, b-a, D) attending to (B, H, e, D) with a (B?, H, b-a, e) float mask -> (B, H, b-a, D)
        outs.append(F.scaled_dot_product_attention(q[..., a:b, :], k[..., :e, :], v[..., :e, :],
                                                   attn_mask=rows[..., :e]))
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-2)


def _windowed_sdpa(q, k, v, score_bias, causal, q_chunk, window, window_kind):
    """attn_sdpa with window_mask: queries in chunks of q_chunk rows, each against only the keys its
    rows can see, from first_visible_key of its first row to its last row, so the matmuls of a
    long context cost O(Tq (q_chunk + w)), not O(Tq Tk). The window mask also hides the future, so a bias
    need not carry the causal mask here (it may: -inf stays -inf)."""
    if not causal:
        raise ValueError("a local window narrows the causal mask; it needs causal=True")
    Tq, Tk = q.shape[-2], k.shape[-2]
    past = Tk - Tq  # query row r sits at absolute position past + r
    keep = window_mask(Tq, Tk, window, window_kind, device=q.device)  # (Tq, Tk)
    bias = None if score_bias is None else score_bias.to(q.dtype)
    if bias is not None:
        bias = bias[(None,) * (q.dim() - bias.dim())]  # (H, Tq, Tk) -> (1, H, Tq, Tk)
    outs = []
    for a in range(0, Tq, q_chunk):
        b = min(a + q_chunk, Tq)
        s, e = first_visible_key(past + a, window, window_kind), past + b  # keys s..e-1 serve rows a..b-1
        mask = keep[a:b, s:e][None, None]  # (1, 1, b-a, e-s) boolean
        if bias is not None:
            rows = bias if bias.shape[-2] == 1 else bias[..., a:b, :]
            mask = rows[..., s:e].masked_fill(~mask, float("-inf"))  # (B?, H, b-a, e-s) float
        # (B, H, b-a, D) attending to (B, H, e-s, D) -> (B, H, b-a, D)
        outs.append(F.scaled_dot_product_attention(q[..., a:b, :], k[..., s:e, :], v[..., s:e, :], attn_mask=mask))
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-2)


def _sdpa_with_extra(q, k, v, score_bias, causal, window, window_kind, extra_logits):
    """attn_sdpa with extra logits: n keys of zeros after the real ones, whose scores are then 0 plus
    their logit from the float mask, and whose values are zeros. One (B?, H, Tq, Tk + n) mask, with the
    causal or window mask in it: memory O(Tq Tk), no query chunks."""
    if window and not causal:
        raise ValueError("a local window narrows the causal mask; it needs causal=True")
    Tq, Tk, n = q.shape[-2], k.shape[-2], extra_logits.shape[-1]
    mask = q.new_zeros(Tq, Tk) if score_bias is None else score_bias.to(q.dtype)
    mask = mask[(None,) * (q.dim() - mask.dim())]  # (Tq, Tk) or (H, Tq, Tk) -> 4-D
    if causal:
        keep = window_mask(Tq, Tk, window, window_kind, device=q.device) if window else \
            causal_mask(Tq, Tk, device=q.device)  # (Tq, Tk)
        mask = mask.masked_fill(~keep, float("-inf"))
    mask, extra = _beside(mask, extra_logits.to(q.dtype))
    zeros = q.new_zeros(*k.shape[:-2], n, k.shape[-1])  # (B, H, n, D)
    # (B, H, Tq, D) attending to (B, H, Tk + n, D) with a (B?, H, Tq, Tk + n) float mask -> (B, H, Tq, D)
    return F.scaled_dot_product_attention(q, torch.cat((k, zeros), dim=-2), torch.cat((v, zeros), dim=-2),
                                          attn_mask=torch.cat((mask, extra), dim=-1))


def _demo() -> None:
    """我打你 vs 你打我: without positions, attention is a set operation."""
    import pos_alibi
    import pos_learned
    import pos_rope
    import pos_sin

    torch.manual_seed(0)
    H, D = 2, 8
    C = H * D
    vocab = {"我": 0, "打": 1, "你": 2}
    emb = torch.randn(3, C)
    Wq, Wk, Wv = (torch.randn(C, C) / math.sqrt(C) for _ in range(3))
    learned = pos_learned.LearnedPositionalEmbedding(3, C, init_std=1.0)
    sin = pos_sin.SinusoidalPositionalEncoding(C)
    rope = pos_rope.RotaryEmbedding(D)
    alibi = pos_alibi.ALiBi(H)
    alibi_sym = pos_alibi.ALiBi(H, symmetric=True)

    def run(sentence, scheme):
        x = emb[[vocab[c] for c in sentence]]                          # (T, C)
        if scheme == "learned":
            x = x + learned(3)
        elif scheme == "sin":
            x = x + sin(3)
        heads = lambda W: (x @ W).view(3, H, D).transpose(0, 1)[None]  # (T, C) -> (1, H, T, D)
        q, k, v = heads(Wq), heads(Wk), heads(Wv)
        if scheme == "rope":
            q, k = rope(q, k)
        bias = {"alibi": alibi, "alibi-sym": alibi_sym}.get(scheme)
        bias = bias(3, 3) if bias is not None else None
        return attn(q, k, v, score_bias=bias)[0].transpose(0, 1).reshape(3, C)  # (1, H, T, D) -> (T, C)

    print("Output row of each character, 我打你 vs 你打我 (no causal mask, one attention layer):")
    print(f"{'scheme':8s} {'max |out(我) - out(我)| across the two sentences':>48s}   same set of rows?")
    with torch.no_grad():
        for scheme in ("none", "learned", "sin", "rope", "alibi", "alibi-sym"):
            a, b = run("我打你", scheme), run("你打我", scheme)
            # 你打我 is 我打你 with positions 0 and 2 swapped: permute b's rows back.
            diff = (a - b[[2, 1, 0]]).abs().max().item()
            verdict = "yes: the two sentences look identical" if diff < 1e-5 else "no: word order is visible"
            print(f"{scheme:8s} {diff:48.2e}   {verdict}")
    print("alibi uses the decoder form -m(i-j); alibi-sym uses -m|i-j|. Reversing a sentence keeps every\n"
          "|i-j|, so symmetric ALiBi cannot tell 我打你 from 你打我: it is blind to reversal, not to order.")


if __name__ == "__main__":
    import argparse  # --help prints this docstring; any argument is refused before the work starts
    argparse.ArgumentParser(description=__doc__ + "\nRun alone, it runs the 我打你 demo.",
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    _demo()
