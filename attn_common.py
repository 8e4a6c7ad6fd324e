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
                 model runs during training and evaluation, queries in chunks when there is a
                 bias; the bias may be a function of the chunk, so it is never built whole. With
                 causal=True the bias carries the causal mask (-inf on hidden keys).

Where this differs from the tutorial's `attn`: it adds `causal=` (the tutorial's
RoPEAttention calls attn without any mask, so its "LM" could read future tokens),
`return_weights=`, and the fast path.

`python attn_common.py` runs the tutorial's opening demo (不加位置时 attention 是什么样的):
without positions, "我打你" and "你打我" give the same outputs, only permuted.
"""
import contextlib
import ctypes
import functools
import math

import torch
import torch.nn.functional as F


# ----------------------------------------------------------------------------- the tutorial's attn, written out

# softmax(Q K^T / sqrt(d) + bias, masked) V; the masks it uses (the causal rule, windows) follow it, then the fused
# form the model runs (attn_sdpa), held to it in tests/test_attn_common.py.
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


# ----------------------------------------------------------------------------- masks: the causal rule, windows

def visible_keys(i0: int, rows: int, j0: int, cols: int, device=None) -> torch.Tensor:
    """The causal rule, its one owner in the model's files: boolean (rows, cols), True where key j may be seen by
    query i, j <= i, for queries at positions i0 .. i0+rows-1 and keys at j0 .. j0+cols-1. Every mask below
    (causal_mask, window_mask, hide_later_keys) is this rule on a block, narrowed or written as -inf."""
    i = torch.arange(i0, i0 + rows, device=device)[:, None]  # (rows, 1)
    j = torch.arange(j0, j0 + cols, device=device)[None, :]  # (1, cols)
    return j <= i                                            # (rows, cols)


def causal_mask(q_len: int, k_len: int, device=None) -> torch.Tensor:
    """Boolean (Tq, Tk), True where key j <= query position k_len - q_len + i (bottom-right, as in cached decoding)."""
    return visible_keys(k_len - q_len, q_len, 0, k_len, device)  # (Tq, Tk)


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
    near = (j > i - window) if kind == "sliding" else (j // window == i // window)  # (Tq, Tk)
    return causal_mask(q_len, k_len, device) & near                 # (Tq, Tk)


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


# The softmax weights of far keys under a decaying bias (ALiBi, KERPLE, FoX) fall below 1e-38, into subnormal floats,
# which x86 CPUs compute through a slow path: at 4096 that made ALiBi's fused kernel 1.5 times RoPE's. Flushing
# them to zero changes no weight above 1e-38 and no logit. torch.set_flush_denormal has no getter, so the user's
# setting is read by a probe (a subnormal times one is zero only when flushing) and put back after the call.
def flushes_denormals() -> bool:
    """Is this thread flushing subnormal floats to zero (torch.set_flush_denormal(True))?"""
    return torch.tensor([1e-39], dtype=torch.float32).mul(1.0).item() == 0.0


# torch.set_flush_denormal switches the calling thread only, and torch's intra-op threads (an OpenMP pool) keep the
# setting they were started with. A pool started before the first flushed call (by any large op before the model's
# attention, as in a model's forward) computed its share of the kernel unflushed: FoX's at 4096 took 1.7 of RoPE's
# forward, 1.1 with every thread flushing (2 cores, side by side). So the switch goes to each thread of the pool:
# OpenMP's own entry point GOMP_parallel runs it once in every thread of the calling thread's team. Found in the
# libgomp that torch loaded (Linux builds); elsewhere only the calling thread switches, as before.
_TEAM_BODY = ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # what GOMP_parallel runs in each thread: fn(data)


@functools.lru_cache(maxsize=None)
def _gomp_parallel():
    """libgomp's GOMP_parallel(fn, data, num_threads, flags) from the copy this process loaded, or None."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libgomp" in line and "/" in line}
    except OSError:
        return None
    for path in sorted(paths, key=lambda p: "torch" not in p):  # torch's own copy first
        try:
            run = ctypes.CDLL(path).GOMP_parallel
        except (OSError, AttributeError):
            continue
        run.argtypes, run.restype = [_TEAM_BODY, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint], None
        return run
    return None


def set_flush_denormal_everywhere(on: bool) -> bool:
    """torch.set_flush_denormal(on) in this thread and in every thread of torch's intra-op pool; returns
    whether this CPU has the switch (torch.set_flush_denormal's answer)."""
    if not torch.set_flush_denormal(on):
        return False
    run = _gomp_parallel()
    if run is not None and torch.get_num_threads() > 1:
        body = _TEAM_BODY(lambda _: torch.set_flush_denormal(on))  # kept alive until the team has run it
        run(body, None, torch.get_num_threads(), 0)
    return True


@contextlib.contextmanager
def denormals_flushed(device: torch.device):
    """On the CPU: subnormal floats flushed to zero inside the block in every intra-op thread, the caller's
    setting restored after."""
    if device.type != "cpu" or flushes_denormals() or not set_flush_denormal_everywhere(True):
        yield  # not the CPU, already flushing, or a CPU without the switch
        return
    try:
        yield
    finally:
        set_flush_denormal_everywhere(False)


def attn_sdpa(q, k, v, score_bias=None, causal=False, q_chunk=256, window=0, window_kind="sliding",
              extra_logits=None):
    """attn() through torch's fused F.scaled_dot_product_attention, subnormal weights flushed on the CPU
    (denormals_flushed): the path the model runs. The arguments are _attn_sdpa's."""
    with denormals_flushed(q.device):
        return _attn_sdpa(q, k, v, score_bias, causal, q_chunk, window, window_kind, extra_logits)


def _attn_sdpa(q, k, v, score_bias=None, causal=False, q_chunk=256, window=0, window_kind="sliding",
               extra_logits=None):
    """attn() through torch's fused F.scaled_dot_product_attention: the path the model runs.

    score_bias: a tensor broadcastable to (B, H, Tq, Tk), or a function bias(a, b, s, e) giving the
    bias of query rows a..b-1 against keys s..e-1, broadcastable to (B, H, b-a, e-s). A function is
    asked one chunk of rows at a time, so no (H, Tq, Tk) tensor is ever built (schemes.py's
    score_bias hook returns one). A per-key bias w, (B?, H, 1, Tk), stands for the bias w_j - w_i of
    query i on key j (ALiBi's key form: m_h j - m_h i = -m_h (i - j)). Its row term -w_i does not change
    a softmax over the keys alone, so causal, in float32 and without extra logits, w_j becomes one more
    dimension of q and k (_sdpa_key_bias) and the fused causal kernel runs as without a bias. A function
    whose bias depends on i - j alone may say so: bias.distance = (r, d0), r (B?, H, L) with the bias of
    query i on key j at r[..., i - j + d0] for every distance of the call; its masks are then views of r
    (_sdpa_distance_bias), and the function is asked for chunks only with a window or extra logits.

    Who hides the future keys when causal=True:
      * no score_bias, or a per-key one: the kernel, with is_causal=True (a bottom-right boolean
        mask when Tq < Tk), or the boolean mask joined to the bias chunk by chunk;
      * any other score_bias: the bias itself, which must hold -inf at every hidden key (SDPA takes a
        float mask or is_causal, not both), as pos_alibi builds it; hide_later_keys writes it. A
        bias that is visibly unmasked raises ValueError. With a window, the window mask does it.

    Without a bias, extra logits or a window: one kernel call. Otherwise the queries go in chunks of
    q_chunk rows (on the CPU fewer, where a float mask would not fit the cache: rows_per_chunk), each
    against only the keys it can see: rows a..b-1 sit at positions past + a .. past + b - 1
    (past = Tk - Tq), so with a causal mask keys up to past + b - 1, and with window=w > 0 from
    first_visible_key of row a. A long context then costs O(Tq Tk / 2) causal, O(Tq (q_chunk
    + w)) windowed, and memory for one chunk's (B?, H, q_chunk, keys) mask. extra_logits (attention
    sinks) join each chunk's mask as n more columns over keys of zeros.
    """
    if window and not causal:
        raise ValueError("a local window narrows the causal mask; it needs causal=True")
    Tq, Tk = q.shape[-2], k.shape[-2]
    by_distance = getattr(score_bias, "distance", None) if callable(score_bias) else None
    if by_distance is not None and not window and extra_logits is None:
        return _sdpa_distance_bias(q, k, v, *by_distance, causal, q_chunk)
    per_key = torch.is_tensor(score_bias) and score_bias.dim() >= 2 and score_bias.shape[-2] == 1
    if per_key and causal and not window and extra_logits is None and q.dtype == torch.float32:
        return _sdpa_key_bias(q, k, v, score_bias)
    if score_bias is None and extra_logits is None and not window:
        if not causal or Tq == 1:  # one query at the last position sees every key
            return F.scaled_dot_product_attention(q, k, v)
        if Tq == Tk:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        keep = causal_mask(Tq, Tk, device=q.device)[None, None]  # (1, 1, Tq, Tk), cached decoding
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    past, outs = Tk - Tq, []
    step = q_chunk if score_bias is None and extra_logits is None else \
        rows_per_chunk(q, q_chunk, min(Tk, q_chunk + window) if window else Tk)  # a float mask: fit the cache
    for a in range(0, Tq, step):
        b = min(a + step, Tq)
        s = first_visible_key(past + a, window, window_kind) if window else 0
        e = past + b if causal else Tk  # keys s..e-1 serve rows a..b-1
        mask = _chunk_mask(q, score_bias, extra_logits, causal, window, window_kind, past, a, b, s, e)
        ks, vs = k[..., s:e, :], v[..., s:e, :]  # (B, H, e-s, D)
        if extra_logits is not None:  # n keys of zeros whose scores are 0 plus their logit from the mask
            n = extra_logits.shape[-1]
            ks = torch.cat((ks, ks.new_zeros(*ks.shape[:-2], n, ks.shape[-1])), dim=-2)  # (B, H, e-s+n, D)
            vs = torch.cat((vs, vs.new_zeros(*vs.shape[:-2], n, vs.shape[-1])), dim=-2)
        # (B, H, b-a, D) attending to (B, H, e-s [+ n], D) with a (B?, H, b-a, e-s [+ n]) mask -> (B, H, b-a, D)
        outs.append(F.scaled_dot_product_attention(q[..., a:b, :], ks, vs, attn_mask=mask))
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-2)


# On the CPU a chunk's float mask is written by the bias function and read once by the kernel. At 4096 keys a chunk
# of 256 rows is 16 MiB (4 heads): it goes out to memory and comes back. A chunk that stays in the cache between
# the two costs a few more kernel calls and no memory traffic: FIRE's whole forward took 2.6 of RoPE's time at 64
# rows against 3.3 at 256, CoPE's 5.2 against 9.2, selective attention's (which repeats work per chunk) 2.5 at both
# (2 cores, side by side). At 16 rows the calls cost more than they save.
# A GPU keeps q_chunk: there each call is a launch, and smaller chunks were not measured.
MASK_BYTES, MIN_ROWS = 4 * 2 ** 20, 32


def rows_per_chunk(q, q_chunk: int, keys: int) -> int:
    """Rows per chunk of queries q (B, H, Tq, D) whose float mask spans at most `keys` keys: q_chunk, or on the
    CPU fewer (down to MIN_ROWS) so that one (H, rows, keys) mask stays within MASK_BYTES (the batch aside)."""
    if q.device.type != "cpu":
        return q_chunk
    per_row = q.shape[-3] * max(keys, 1) * q.element_size()  # H * keys floats
    return min(q_chunk, max(MIN_ROWS, MASK_BYTES // per_row))


def _chunk_mask(q, score_bias, extra_logits, causal, window, window_kind, past, a, b, s, e):
    """The mask of query rows a..b-1 against keys s..e-1: boolean (1, 1, b-a, e-s) when there is only the
    causal or window mask, else float (B?, H, b-a, e-s [+ n]) with -inf at the hidden keys."""
    keep = None  # rows a..b-1 are the last b-a of e keys, bottom-right as in causal_mask
    per_key = torch.is_tensor(score_bias) and score_bias.shape[-2] == 1  # the same for every query: no mask in it
    if window:
        keep = window_mask(b - a, e, window, window_kind, device=q.device)[:, s:]  # (b-a, e-s)
    elif causal and (score_bias is None or per_key):
        keep = causal_mask(b - a, e, device=q.device)[:, s:]
    if score_bias is None and extra_logits is None:
        return None if keep is None else keep[None, None]
    if score_bias is None:
        mask = q.new_zeros(b - a, e - s)
    elif callable(score_bias):
        mask = score_bias(a, b, s, e).to(q.dtype)
    else:
        mask = score_bias.to(q.dtype)
        mask = mask[(None,) * (4 - mask.dim())]  # (H, Tq, Tk) -> (1, H, Tq, Tk)
        if per_key:  # w_j - w_i, rows at key positions past+a ..: (B?, H, 1, e-s) - (B?, H, b-a, 1) -> (B?, H, b-a, e-s)
            mask = mask[..., s:e] - mask[..., 0, past + a:past + b][..., :, None]
        else:
            mask = (mask if mask.shape[-2] == 1 else mask[..., a:b, :])[..., s:e]
    mask = mask[(None,) * (4 - mask.dim())]  # 4-D: on CPU a 3-D float mask takes SDPA's slower path
    if keep is not None:
        mask = mask.masked_fill(~keep, float("-inf"))
    elif causal and b - a > 1:  # the bias hides the future: the first hidden key of each row must be -inf
        rows = mask.expand(*mask.shape[:-2], b - a, e - s)
        if not torch.isneginf(torch.diagonal(rows, offset=past + a + 1 - s, dim1=-2, dim2=-1)).all():
            raise ValueError("causal attn_sdpa with a score_bias needs -inf at the hidden keys inside the bias "
                             "(attn_common.hide_later_keys, or pos_alibi.alibi_bias(..., causal=True)); this "
                             "bias has a finite value there")
    if extra_logits is None:
        return mask
    extra = extra_logits.to(q.dtype)
    extra = extra if extra.shape[-2] == 1 else extra[..., a:b, :]  # (B?, H, b-a, n)
    mask, extra = _beside(mask, extra)
    return torch.cat((mask, extra), dim=-1)  # (B?, H, b-a, e-s + n)


# A per-key bias w_j (ALiBi's key form m_h j) is a dot product with a constant: with
#     q'_i = [q_i sqrt((D + 1) / D), sqrt(D + 1)],   k'_j = [k_j, w_j],
# q'_i . k'_j / sqrt(D + 1) = q_i . k_j / sqrt(D) + w_j, so SDPA's own scale and causal kernel give the
# biased softmax with no bias tensor at all. float32 only: |w_j| grows with the length (ALiBi: m_h j), and
# a bf16 k would round it (j is exact in bf16 only up to 256). v gets a column of zeros too, dropped after:
# torch's CPU kernel takes its fast path only when v is as wide as q and k.
def _sdpa_key_bias(q, k, v, key_bias):
    """attn_sdpa(causal=True) with a per-key bias broadcastable to (B, H, 1, Tk), through one more head dim."""
    D, Tq, Tk = q.shape[-1], q.shape[-2], k.shape[-2]
    c = math.sqrt(D + 1)
    w = key_bias.to(q.dtype)[(None,) * (4 - key_bias.dim())].transpose(-1, -2)  # (B?, H, 1, Tk) -> (B?, H, Tk, 1)
    qa = torch.cat((q * (c / math.sqrt(D)), q.new_full((*q.shape[:-1], 1), c)), dim=-1)  # (B, H, Tq, D + 1)
    ka = torch.cat((k, w.expand(*k.shape[:-1], 1)), dim=-1)                               # (B, H, Tk, D + 1)
    va = torch.cat((v, v.new_zeros(*v.shape[:-1], 1)), dim=-1)                            # (B, H, Tk, D + 1)
    if Tq == Tk:
        out = F.scaled_dot_product_attention(qa, ka, va, is_causal=True)
    else:  # cached decoding: the new queries are the last Tq positions
        out = F.scaled_dot_product_attention(qa, ka, va, attn_mask=causal_mask(Tq, Tk, device=q.device)[None, None])
    return out[..., :D]  # (B, H, Tq, D + 1) -> (B, H, Tq, D)


# A bias of the distance alone, bias(i, j) = r[i - j + d0] (T5's buckets, KERPLE's kernel), is constant along
# each diagonal: a Toeplitz matrix. Numbered in reverse, query row p holding position i = Tk - 1 - p, and with
# u = r reversed, u[m] = r[L - 1 - m], the mask of row p on key j is
#     r[d0 + Tk - 1 - p - j] = u[(L - d0 - Tk) + p + j],
# +1 along the rows and +1 along the keys: a view of u (as_strided, strides (1, 1)), so attention reads every
# chunk's mask straight from the L numbers of r and none is written. (In query order the rows would step by -1,
# which a view cannot.) Each query is computed as before, only in another row of the kernel: the same numbers.
def _sdpa_distance_bias(q, k, v, r, d0: int, causal: bool, q_chunk: int):
    """attn_sdpa with the bias r[..., i - j + d0] of query i on key j, r (B?, H, L): queries in reverse order,
    each chunk's (B?, H, rows, keys) mask a view of r reversed. Causal: r holds -inf at every d < 0."""
    Tq, Tk, L = q.shape[-2], k.shape[-2], r.shape[-1]
    low = 1 - min(q_chunk, Tq) if causal else 1 - Tq  # the lowest distance a chunk's mask holds
    if not (isinstance(d0, int) and d0 + low >= 0 and d0 + Tk <= L):
        raise ValueError(f"a distance bias (r of length {L}, distance 0 at {d0!r}) must hold every distance "
                         f"{low} .. {Tk - 1} of this call: 0 <= d0 + {low} and d0 + {Tk} <= L")
    if causal and Tq > 1 and not torch.isneginf(r[..., d0 + low:d0]).all():
        raise ValueError("causal attn_sdpa with a distance bias needs -inf at every distance d < 0 (a later key) "
                         "in it; this one has a finite value there")
    u = r.to(q.dtype).flip(-1).contiguous()          # (B?, H, L), u[..., m] = r[..., L - 1 - m]
    u = u[(None,) * (3 - u.dim())]                   # (H, L) -> (1, H, L)
    qr, outs = q.flip(-2), []                        # (B, H, Tq, D), row p = the query at position Tk - 1 - p
    for a in range(0, Tq, q_chunk):
        b = min(a + q_chunk, Tq)
        e = Tk - a if causal else Tk                 # rows a..b-1 (positions Tk-1-a down to Tk-b) see keys 0..e-1
        mask = u.as_strided((u.shape[0], u.shape[1], b - a, e), (u.stride(0), u.stride(1), 1, 1),
                            u.storage_offset() + L - d0 - Tk + a)  # (B?, H, b-a, e): mask[.., p, j] = u[.. + p + j]
        # (B, H, b-a, D) attending to (B, H, e, D) with a (B?, H, b-a, e) mask -> (B, H, b-a, D)
        outs.append(F.scaled_dot_product_attention(qr[..., a:b, :], k[..., :e, :], v[..., :e, :], attn_mask=mask))
    return torch.cat(outs, dim=-2).flip(-2)          # (B, H, Tq, D) in query order again


# A causal score bias holds -inf at every key after its query. Within a chunk of queries i0..i0+R-1 against
# keys j0..j0+C-1, those are the keys j > i: only the columns from i0 + 1 on, so only they are touched.
def hide_later_keys(bias, i0: int, j0: int):
    """bias (..., R, C) for queries at positions i0.. and keys at j0..: -inf where j > i, written in place
    (bias must be a tensor of your own, not a view of one you keep); returns bias."""
    R, C = bias.shape[-2:]
    c0 = max(0, i0 + 1 - j0)  # the first column that some row must not see
    if c0 < C:  # (..., R, C - c0) filled where visible_keys says no
        bias[..., c0:].masked_fill_(~visible_keys(i0, R, j0 + c0, C - c0, bias.device), float("-inf"))
    return bias


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
