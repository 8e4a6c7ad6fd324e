"""Three learned score biases, as a scheme file: T5's bucketed relative bias ("t5"), KERPLE's log kernel
("kerple") and FIRE ("fire").

T5: Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
Transformer" (JMLR). One learned scalar per (bucket, head), one table for every layer (T5 computes
the bias in its first layer and passes it on). The bucket of a relative position rel = j - i (key
minus query) is Hugging Face's T5Attention._relative_position_bucket (transformers, models/t5/
modeling_t5.py), written out below: 32 buckets, max distance 128; causal (decoder): bidirectional=False;
causal=False: T5's encoder form, bidirectional=True (16 buckets for keys before the query, 16 for keys
after it: direction-aware, not |i - j|). Init: N(0, n_embd^-0.5), as HF's T5PreTrainedModel._init_weights
(nn.Embedding's default N(0, 1) would put logits of size 1 on the scores at step 0).

    bias_h(i, j) = scale * table[bucket(j - i), h]          (causal: -inf where j > i)

Option scale (t5{scale=5.657}): 1, the default, is HF's form above; any other value is x-transformers'
RelativePositionBias form, a table started at N(0, 1) and multiplied by scale (theirs: sqrt(head dim),
5.657 here). With Adam that bias starts about 64 times larger and moves `scale` times faster per step.

KERPLE (log form): Chi, Fan, Ramadge and Rudnicky, NeurIPS 2022, "KERPLE: Kernelized Relative Positional
Embedding for Length Extrapolation". Two positive numbers per head, one pair for every layer:

    bias_h(i, j) = -r1_h * log(1 + r2_h * (i - j))          (causal: -inf where j > i; else |i - j|)

Checked against the authors' chijames/KERPLE, megatron/mpu/layers.py, ParallelKerpleLog: r1 ~ U(0, 2),
r2 ~ U(0, 1), both held at >= 0.01, one module shared across layers, no weight decay (as there). They clamp
the stored values after each step; here the clamp sits inside the formula: the same bias, with no
gradient while a stored value is below 0.01. Its colour is named (the spare colours stay with the
schemes that had them before it was registered here).

FIRE: Li et al., ICLR 2024, "Functional Interpolation for Relative Positions Improves Long Context
Transformers". A small MLP f (1 -> 32, ReLU, 32 -> H) of the distance, log-compressed and divided by
the compressed query position, so a longer context is interpolated into the range seen in training:

    bias_h(i, j) = f_h( psi(i - j) / (psi(max(L, i)) + eps) ),     psi(x) = log(|c x| + 1)

Checked against mcleish7/arithmetic, cramming/architectures/embeddings.py, class FIRE (McLeish et al.
2024's open FIRE; cramming/architectures/attention.py builds one per attention layer). As there:
  * c starts at 0.1 and L = |L_scale * L0| with L0 fixed and L_scale learned from 1.0: c and L are
    kept positive by the absolute values inside the formula (a negative c acts as |c|); eps = 1e-6.
  * one FIRE (MLP, c, L) per layer, not shared as T5's table is; nn.Linear's default init; no weight
    decay (the file names none, so the repository's default stands).
  * i and j are absolute positions from 0; causal=False gives psi(|i - j|) with the same normaliser.
Differences: L0 = cfg.train_len (the reference starts L at 512; here the threshold starts at the
length the model is trained at, 256 by default, so the normaliser is fixed inside the training window
and grows with i only past it, as the reference's 512 at its configured sequence length of 512; option
L_ratio starts L at that fraction of it instead, fire{L_ratio=0.25}: then training meets the
interpolation at every query past L); log1p for log(. + 1); no random-position training (its max_length).

All three: no cache state (the bias depends on positions only); a NoPE layer (nope_every) gets none. T5's and
KERPLE's biases depend on i - j alone: their chunk function carries one number per distance (rows.distance), and
attention reads every chunk's mask from it, writing none (attn_common.attn_sdpa); the chunks themselves serve a
window or extra logits. FIRE's bias is asked one chunk of queries at a time: no (H, T, T) tensor at 4096.
Here: registered by schemes.py (`--variants t5,kerple,fire`).
Copied alone it needs torch only (the registration at the bottom runs inside this repository);
`python field/field_relbias.py` checks.
"""
import math

import torch
import torch.nn as nn

try:  # inside the repository the schemes register themselves (--scheme-file); a copy alone works without it
    import schemes
except ImportError:
    schemes = None

NUM_BUCKETS, MAX_DISTANCE = 32, 128  # T5's
FIRE_WIDTH, FIRE_C, FIRE_EPS = 32, 0.1, 1e-6  # the reference's mlp_width, init_c, eps
L_PER_TRAIN_LEN = 1.0  # L starts at the training length (the reference's init_L is 512, its sequence length); option L_ratio
KERPLE_EPS = 1e-2  # the reference's floor for r1 and r2


def hide_later(bias: torch.Tensor, i0: int, j0: int) -> torch.Tensor:
    """bias (..., R, S) of queries at positions i0.. on keys at j0..: -inf where the key is later, j > i, written
    in place (bias must be a new tensor of yours) and only in the columns from the first later key on; returns bias."""
    c0 = max(0, i0 + 1 - j0)  # no key before column c0 is later than any query (a copy of the whole chunk cost
    if c0 < bias.shape[-1]:   # FIRE a third of its hook's time at 4096)
        i = torch.arange(i0, i0 + bias.shape[-2], device=bias.device)[:, None]          # (R, 1)
        j = torch.arange(j0 + c0, j0 + bias.shape[-1], device=bias.device)[None, :]     # (1, S - c0)
        bias[..., c0:].masked_fill_(j > i, float("-inf"))
    return bias


# A bias of the distance alone, d = i - j, is one row of numbers v_d (T5's, KERPLE's): a chunk's (R, C) bias is
# a Toeplitz matrix of them. It is cut out of v as a view (unfold: windows of C consecutive distances, one per
# query) and copied once, so a chunk costs one write per pair instead of the kernel's arithmetic on every pair.
def toeplitz(v: torch.Tensor, d0: int, i0: int, i1: int, j0: int, j1: int) -> torch.Tensor:
    """v (H, L): the bias of distance d = i - j at v[:, d + d0] -> that of queries i0..i1-1 on keys j0..j1-1,
    (H, i1-i0, j1-j0), a new contiguous tensor: bias[h, r, c] = v[h, (i0 + r) - (j0 + c) + d0]."""
    R, C = i1 - i0, j1 - j0
    # A view has positive strides, so it can hold w[lo + p + c] but not v[k + r - c]. With w the row reversed,
    # w[m] = v[L - 1 - m], bias[h, r, c] = w[h, top - r + c], top = L - 1 - (i0 - j0 + d0): row r is row
    # p = R - 1 - r of the view, and index_select writes the rows in order, row by row. (A flip of the view
    # would keep its column-major layout, and SDPA would copy the mask once more to read it.)
    w = v.flip(-1).contiguous()                                      # (H, L), rows in memory order (T5's is v.T)
    lo = v.shape[-1] - 1 - (i0 - j0 + d0) - (R - 1)
    win = w[:, lo:lo + R + C - 1].unfold(-1, C, 1)                   # (H, R, C) view: win[h, p, c] = w[h, lo + p + c]
    return win.index_select(-2, torch.arange(R - 1, -1, -1, device=v.device))  # (H, R, C), rows reversed


# ----------------------------------------------------------------------------- T5

def t5_bucket(rel: torch.Tensor, bidirectional: bool, num_buckets: int = NUM_BUCKETS,
              max_distance: int = MAX_DISTANCE) -> torch.Tensor:
    """rel = key position - query position (int tensor) -> its bucket, in [0, num_buckets), same shape.
    The sign matters: with query - key and bidirectional=False every pair j <= i lands in bucket 0."""
    bucket = torch.zeros_like(rel)
    if bidirectional:  # half the buckets for keys after the query (rel > 0), half for the rest
        num_buckets //= 2
        bucket = bucket + (rel > 0).long() * num_buckets
        n = rel.abs()
    else:  # causal: only keys at or before the query, n = i - j >= 0 (a later key counts as 0)
        n = (-rel).clamp(min=0)
    # n < n_exact: bucket n;  else n_exact + floor( log(n / n_exact) / log(max_distance / n_exact) * (nb - n_exact) ),
    # at most nb - 1;  n_exact = nb / 2.  Float32 in HF's order, so the floor falls where HF's does.
    exact = num_buckets // 2
    large = exact + (torch.log(n.clamp(min=exact).float() / exact) / math.log(max_distance / exact)
                     * (num_buckets - exact)).long()
    return bucket + torch.where(n < exact, n, large.clamp(max=num_buckets - 1))


class T5RelativeBias(nn.Module):
    """One (buckets, H) table for every layer; prepare looks it up once per forward, per relative position."""

    def __init__(self, n_head: int, n_embd: int, causal: bool = True, scale: float = 1.0):
        super().__init__()
        self.causal, self.scale = causal, scale
        self.table = nn.Embedding(NUM_BUCKETS, n_head)
        # HF's init (factor 1) for scale 1; x-transformers' N(0, 1) under its multiplier otherwise
        nn.init.normal_(self.table.weight, 0.0, n_embd ** -0.5 if scale == 1.0 else 1.0)

    def prepare(self, x, offset: int) -> torch.Tensor:
        """The bias of every distance d = i - j = -(Tk-1) .. Tk-1 of this forward, at d + Tk - 1: (H, 2 Tk - 1);
        causal: -inf at d < 0 (a later key)."""
        Tk = offset + x.shape[1]
        rel = torch.arange(Tk - 1, -Tk, -1, device=x.device)              # rel = j - i = -d, (2Tk-1,)
        bias = self.table(t5_bucket(rel, not self.causal)).T              # (2Tk-1, H) -> (H, 2Tk-1)
        bias = bias if self.scale == 1.0 else self.scale * bias
        return bias.masked_fill(rel > 0, float("-inf")) if self.causal else bias

    def score_bias(self, x, layer, offset: int, shared, past, q=None, k=None):
        """Per chunk: query rows a..b-1 (positions offset+a ..) against keys s..e-1, cut from shared."""
        if layer.nope:
            return None, None
        Tk = offset + x.shape[1]

        def rows(a, b, s, e):  # (H, b-a, e-s)
            return toeplitz(shared, Tk - 1, offset + a, offset + b, s, e).to(x.dtype)
        rows.distance = (shared, Tk - 1)  # it is a bias of i - j alone: attention reads it from shared as it is
        return rows, None


# ----------------------------------------------------------------------------- KERPLE

def kerple_log_bias(i: torch.Tensor, j: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor) -> torch.Tensor:
    """Query positions i (R, 1), key positions j (1, S), r1 and r2 (H,) -> the bias (H, R, S), no mask."""
    r1, r2 = (r.clamp(min=KERPLE_EPS)[:, None, None] for r in (r1, r2))  # (H, 1, 1): held at >= 0.01
    # bias_h(i, j) = -r1_h * log(1 + r2_h * |i - j|)   (|i - j| = i - j for every key a causal query sees)
    return -r1 * torch.log1p(r2 * (i - j).abs())                        # (H, 1, 1) * (R, S) -> (H, R, S)


class KerpleLog(nn.Module):
    """One (r1, r2) per head for every layer (the reference shares them); drawn U(0, 2) and U(0, 1)."""

    def __init__(self, n_head: int, causal: bool = True):
        super().__init__()
        self.causal = causal
        self.r1 = nn.Parameter(torch.rand(n_head) * 2)  # (H,), U(0, 2)
        self.r2 = nn.Parameter(torch.rand(n_head))      # (H,), U(0, 1)

    def score_bias(self, x, layer, offset: int, shared, past, q=None, k=None):
        """Per chunk: query rows a..b-1 (positions offset+a ..) against keys s..e-1."""
        if layer.nope:
            return None, None

        Tk = offset + x.shape[1]
        d = torch.arange(1 - Tk, Tk, device=x.device, dtype=torch.float32)  # every distance i - j, (2Tk-1,)
        v = kerple_log_bias(d[None, :], torch.zeros(1, 1, device=x.device), self.r1.float(), self.r2.float())[:, 0]
        v = v.masked_fill(d < 0, float("-inf")) if self.causal else v        # (H, 2Tk-1), at d + Tk - 1

        def rows(a, b, s, e):  # (H, b-a, e-s)
            return toeplitz(v, Tk - 1, offset + a, offset + b, s, e).to(x.dtype)
        rows.distance = (v, Tk - 1)  # it is a bias of i - j alone: attention reads it from v as it is
        return rows, None


# ----------------------------------------------------------------------------- FIRE

def fire_distance(i: torch.Tensor, j: torch.Tensor, c: torch.Tensor, L: torch.Tensor,
                  eps: float = FIRE_EPS) -> torch.Tensor:
    """Query positions i (R, 1), key positions j (1, S), float -> the MLP's input (R, S)."""
    # u = psi(i - j) / (psi(max(L, i)) + eps),   psi(x) = log(|c x| + 1)
    num = torch.log1p((c * (i - j)).abs())                    # (R, S)
    den = torch.log1p((c * torch.maximum(i, L)).abs()) + eps  # (R, 1)
    return num / den                                           # (R, S)


# f(u) = proj(relu(fc(u))) takes one number, so it is piecewise linear in u: unit m switches at t_m = -b1_m / w1_m,
# and between two switches the active units are fixed, f_h(u) = A_h u + B_h with A_h = sum_active w2_hm w1_m and
# B_h = sum_active w2_hm b1_m + b2_h. Evaluated per (query, key) pair that is a search among W sorted numbers and
# one multiply-add per head, where the MLP is W multiply-adds into W hidden values and H W back. Differentiable in
# every weight (which units are active carries no gradient, as relu's own switch does not).
def mlp_pieces(fc: nn.Linear, proj: nn.Linear) -> tuple:
    """-> (t (W,) sorted switch points, inf for a unit that never switches; A, B (H, W + 1): slope and intercept
    of piece k, the u with t[k-1] < u <= t[k])."""
    w1, b1, w2 = fc.weight[:, 0], fc.bias, proj.weight       # (W,), (W,), (H, W)
    with torch.no_grad():
        t = torch.where(w1 != 0, -b1 / w1, torch.full_like(b1, math.inf)).sort().values  # (W,)
        finite = t.masked_fill(t.isinf(), 0.0)
        mid = torch.cat((finite[:1] - 1, (finite[:-1] + finite[1:]) / 2, finite[-1:] + 1))  # a u inside each piece
        mid = torch.where(torch.cat((t.isinf()[:1], t.isinf())), finite.max() + 1, mid)     # pieces past inf: unused
        on = (mid[:, None] * w1 + b1 > 0).to(w1.dtype)           # (W+1, W): which units each piece has on
    A = (w2 * w1) @ on.T                                         # (H, W) @ (W, W+1) -> (H, W+1)
    B = (w2 * b1) @ on.T + proj.bias[:, None]                    # (H, W+1)
    return t, A, B


# The piece of every pair is k = #{m : t_m < u}, torch.bucketize's answer. For a causal row that is a count along the
# row: u falls as the key comes nearer the query (j up to i), so the keys with u > t_m are the columns before the
# first one with u <= t_m, found by one binary search per row and switch point (searchsorted, R W of them), where
# bucketize searches once per pair (R S). k is then W less the switch points whose first column is at or before j: a
# histogram of those columns, summed along the row. The same comparisons, so the same k; a quarter of the time of
# bucketize at 4096 keys (2 cores).
def pieces_along_rows(u: torch.Tensor, t: torch.Tensor, i0: int, j0: int) -> torch.Tensor:
    """u (R, S) of queries at positions i0.. on keys at j0.., falling along each row up to the query's own key; t (W,)
    sorted -> bucketize(u, t) (R, S) at every key up to the query (later keys: some piece, as they will be hidden)."""
    R, S = u.shape
    rising = (-u).contiguous()                                  # (R, S), rising along each row up to its query
    later = torch.arange(j0, j0 + S, device=u.device) > torch.arange(i0, i0 + R, device=u.device)[:, None]
    rising.masked_fill_(later, math.inf)                        # (R, S), and after it: sorted rows
    first = torch.searchsorted(rising, (-t).expand(R, -1).contiguous())  # (R, W): first column with u <= t_m
    ones = torch.ones(first.shape, dtype=torch.int32, device=u.device)  # int32 pieces: index_select reads half the bytes
    counts = torch.zeros(R, S + 1, dtype=torch.int32, device=u.device).scatter_add_(1, first, ones)
    return t.shape[0] - counts.cumsum(-1, dtype=torch.int32)[:, :S]  # (R, S): #{m : first_m > j} = #{m : t_m < u}


class FIRE(nn.Module):
    """One layer's FIRE: the MLP f, c and the threshold L = |L_scale * L0|."""

    def __init__(self, n_head: int, L0: float, width: int = FIRE_WIDTH):
        super().__init__()
        self.fc, self.proj = nn.Linear(1, width), nn.Linear(width, n_head)
        self.c = nn.Parameter(torch.tensor(FIRE_C))
        self.L_scale = nn.Parameter(torch.tensor(1.0))  # learned multiplier of the fixed L0, as the reference
        self.register_buffer("L0", torch.tensor(float(L0)), persistent=False)  # rebuilt from cfg.train_len

    @property
    def L(self) -> torch.Tensor:
        return (self.L_scale * self.L0).abs()

    def block(self, i0: int, i1: int, j0: int, j1: int, pieces: tuple = None, causal: bool = False) -> torch.Tensor:
        """The bias of queries i0..i1-1 on keys j0..j1-1, float32 (H, i1-i0, j1-j0), no mask: f at u, u from
        fire_distance, cheaper (mlp_pieces, toeplitz); the same numbers to float rounding. pieces: mlp_pieces of
        this layer's MLP when the caller has them (once per layer, not per chunk). causal: the keys after a query
        will be hidden, so their values are any finite numbers (the pieces are then found row by row)."""
        c, L = self.c.float(), self.L.float()
        i = torch.arange(i0, i1, device=self.c.device, dtype=torch.float32)[:, None]  # (R, 1)
        # the numerator psi(i - j) depends on i - j alone: R + S - 1 distances, cut into (R, S)
        d = torch.arange(i0 - j1 + 1, i1 - j0, device=self.c.device, dtype=torch.float32)  # (R+S-1,)
        num = toeplitz(torch.log1p((c * d).abs())[None], j1 - 1 - i0, i0, i1, j0, j1)[0]  # (R, S)
        u = num / (torch.log1p((c * torch.maximum(i, L)).abs()) + FIRE_EPS)  # fire_distance's u, (R, S)
        t, A, B = pieces or mlp_pieces(self.fc, self.proj)  # breakpoints (W,), slopes and intercepts (H, W + 1)
        ut = u.to(t.dtype)
        k = (pieces_along_rows(ut, t, i0, j0) if causal else torch.bucketize(ut.contiguous(), t, out_int32=True)).view(-1)  # (R * S,)

        def pick(table):  # (H, W+1) -> (H, R, S); index_select writes the rows in order (A[:, k] takes 3x as long)
            return table.index_select(1, k).view(-1, *u.shape)
        return torch.addcmul(pick(B), pick(A), u.to(A.dtype))  # f_h(u) = B_h[k] + A_h[k] u in one pass, (H, R, S)


class FireLayers(nn.Module):
    """A FIRE for every layer (the reference builds one per attention layer)."""

    def __init__(self, n_layer: int, n_head: int, train_len: int, causal: bool = True, L_ratio: float = L_PER_TRAIN_LEN):
        super().__init__()
        if not L_ratio > 0:
            raise ValueError(f"fire: L_ratio is L's start over the training length, a positive number; got {L_ratio}")
        self.causal = causal
        self.layers = nn.ModuleList(FIRE(n_head, L_ratio * train_len) for _ in range(n_layer))

    def score_bias(self, x, layer, offset: int, shared, past, q=None, k=None):
        """Per chunk: query rows a..b-1 (positions offset+a ..) against keys s..e-1."""
        if layer.nope:
            return None, None
        fire = self.layers[layer.index]
        pieces = mlp_pieces(fire.fc, fire.proj)  # once per layer: 68 us, a tenth of RoPE's forward at 4096 per chunk

        def rows(a, b, s, e):
            bias = fire.block(offset + a, offset + b, s, e, pieces, self.causal)  # (H, b-a, e-s)
            return (hide_later(bias, offset + a, s) if self.causal else bias).to(x.dtype)
        return rows, None


def _self_check() -> None:
    got = t5_bucket(torch.tensor([0, -1, -15, -16, -32, -127, -1000, 5]), bidirectional=False).tolist()
    assert got == [0, 1, 15, 16, 21, 31, 31, 0], got  # n = 32: 16 + floor(log 2 / log 8 * 16) = 16 + 5
    print(f"ok  t5 causal buckets of rel 0, -1, -15, -16, -32, -127, -1000, +5: {got}")
    got = t5_bucket(torch.tensor([1, -1, -8, -16, 16, 1000]), bidirectional=True).tolist()
    assert got == [17, 1, 8, 10, 26, 31], got  # 16 per side: n = 16 -> 8 + floor(log 2 / log 16 * 8) = 10
    print(f"ok  t5 bidirectional buckets of rel +1, -1, -8, -16, +16, +1000: {got}")
    got = kerple_log_bias(torch.tensor([[5.0]]), torch.tensor([[2.0]]), torch.tensor([1.5, 0.0]), torch.tensor([0.5, 0.5]))
    want = [-1.5 * math.log(2.5), -0.01 * math.log(2.5)]  # r1 = 0 is held at 0.01
    assert max(abs(g - w) for g, w in zip(got.flatten().tolist(), want)) < 1e-6, (got, want)
    print(f"ok  kerple bias at i - j = 3, r2 = 0.5: r1 = 1.5 -> -1.5 ln 2.5 = {want[0]:.5f}; r1 = 0 -> held at 0.01")
    u = fire_distance(torch.tensor([[10.0]]), torch.tensor([[0.0]]), torch.tensor(0.1), torch.tensor(64.0))
    want = math.log(2.0) / (math.log(7.4) + FIRE_EPS)  # psi(10) / psi(max(64, 10)), c = 0.1
    assert abs(u.item() - want) < 1e-6, (u.item(), want)
    print(f"ok  fire u(i=10, j=0; c=0.1, L=64) = ln 2 / ln 7.4 = {u.item():.6f}")
    torch.manual_seed(0)
    fire = FIRE(2, 4.0)
    whole = fire.block(0, 9, 0, 9)
    err = (fire.block(5, 8, 2, 7) - whole[:, 5:8, 2:7]).abs().max().item()
    assert err < 1e-6, err
    print(f"ok  fire block (queries 5..7, keys 2..6) is that block of the whole 9 x 9 bias (max diff {err:.1e})")
    first = FireLayers(2, 2, train_len=256).layers[0]
    assert first.L.item() == 256.0 and abs(first.c.item() - FIRE_C) < 1e-7, (first.L.item(), first.c.item())
    print(f"ok  fire init at train_len 256: c = {first.c.item():.4g}, L = {L_PER_TRAIN_LEN} * 256 = {first.L.item():g}")


# Registered by schemes.py's last line (importing this file); run as a script, that import has done it.
if schemes is not None and __name__ != "__main__":
    schemes.register(schemes.Scheme("t5", "score bias (learned buckets)", __file__,
                                    build=lambda cfg: T5RelativeBias(cfg.n_head, cfg.n_embd, cfg.causal,
                                                                     **cfg.pos_options),
                                    prepare=T5RelativeBias.prepare, score_bias=T5RelativeBias.score_bias,
                                    options={"scale": 1.0}))
    schemes.register(schemes.Scheme("kerple", "score bias (learned log kernel)", __file__,
                                    build=lambda cfg: KerpleLog(cfg.n_head, cfg.causal),
                                    score_bias=KerpleLog.score_bias, colour="#a55194"))
    schemes.register(schemes.Scheme("fire", "score bias (learned MLP of distance)", __file__,
                                    build=lambda cfg: FireLayers(cfg.n_layer, cfg.n_head, cfg.train_len, cfg.causal,
                                                                 **cfg.pos_options),
                                    score_bias=FireLayers.score_bias, options={"L_ratio": L_PER_TRAIN_LEN}))

if __name__ == "__main__":
    import argparse  # --help prints this docstring; any argument is refused before the work starts
    argparse.ArgumentParser(description=__doc__ + "\nRun alone, it runs the self-check.",
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    _self_check()
