"""field_relbias.py, the T5, KERPLE and FIRE scheme files: T5's buckets are Hugging Face's and never fall as the
distance grows; each chunk bias equals a plain-Python double loop over (i, j); chunks of 3 and cached decoding equal the
full forward; every parameter learns. The schemes are loaded from their file inside a fixture and taken out
again, so the rest of the session never sees them."""
import math
from pathlib import Path

import pytest
import torch

import schemes
from conftest import scheme_file_loaded
from conftest import cached_logits, chunk_error
from tiny_lm import GPTConfig, TinyLM

pytestmark = pytest.mark.usefixtures("one_thread")

PATH = Path(__file__).resolve().parent.parent / "field" / "field_relbias.py"
NAMES = ("t5", "kerple", "fire")
# train_len 16: FIRE's threshold L = 16, so a 40-token window has queries on both sides of it
KW = {"vocab_size": 20, "n_layer": 2, "n_head": 2, "n_embd": 16, "max_len": 64, "train_len": 16}


@pytest.fixture(scope="module")
def relbias():
    """{name: entry}, registered from field_relbias.py for this module only; ns: the file's namespace."""
    with scheme_file_loaded(PATH, NAMES) as entries:
        yield entries


def ns(entry) -> dict:
    """The loaded file's globals (its pure functions), reached through its build function."""
    return entry.build.__globals__


def py_bucket(rel: int, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128) -> int:
    """T5's bucket of rel = key - query, from the definition, in plain Python."""
    offset = 0
    if bidirectional:
        num_buckets //= 2
        offset, n = (num_buckets if rel > 0 else 0), abs(rel)
    else:
        n = max(-rel, 0)
    exact = num_buckets // 2
    if n < exact:
        return offset + n
    return offset + min(num_buckets - 1, exact + int(math.log(n / exact) / math.log(max_distance / exact)
                                                     * (num_buckets - exact)))


def model(name, seed=0, **over):
    torch.manual_seed(seed)
    return TinyLM(GPTConfig(**{**KW, "pos": name, **over})).eval()


def chunk_err(got, want):
    """(same -inf pattern, max finite diff) of a chunk against its reference."""
    return torch.equal(got.isinf(), want.isinf()), (got.double() - want).nan_to_num(0.0, 0.0, 0.0).abs().max().item()


def from_row(rows, offset, a, b, s, e):
    """The chunk of query rows a..b-1 (positions offset+a ..) on keys s..e-1 read from the function's distance row
    (rows.distance = (r, d0): the bias of query i on key j at r[..., i - j + d0]), as attention reads it."""
    r, d0 = rows.distance
    i = torch.arange(offset + a, offset + b)[:, None]  # (b-a, 1)
    j = torch.arange(s, e)[None, :]                    # (1, e-s)
    return r[..., i - j + d0]                          # (H, b-a, e-s)


# ----------------------------------------------------------------------------- the chunks' one row per distance

@pytest.mark.parametrize("box", [(0, 5, 0, 5), (7, 10, 2, 9), (3, 4, 0, 11), (12, 15, 12, 13)])
def test_toeplitz_is_its_definition_and_contiguous(relbias, box):
    """bias[h, r, c] = v[h, (i0 + r) - (j0 + c) + d0], written row by row: a mask SDPA reads as it is, without
    copying it into row order first."""
    i0, i1, j0, j1 = box
    v, d0 = torch.randn(2, 40), 20
    got = ns(relbias["t5"])["toeplitz"](v, d0, i0, i1, j0, j1)
    want = torch.tensor([[[v[h, i - j + d0].item() for j in range(j0, j1)] for i in range(i0, i1)] for h in range(2)])
    assert torch.equal(got, want), f"max diff {(got - want).abs().max().item():.1e} for queries {i0}..{i1 - 1}, " \
                                   f"keys {j0}..{j1 - 1}"
    assert got.is_contiguous(), f"strides {got.stride()}: not row by row"


# ----------------------------------------------------------------------------- T5's buckets

def test_buckets_are_hugging_faces(relbias):
    """t5_bucket(j - i) equals T5Attention._relative_position_bucket for rel -3000..3000, both directions; the
    other sign, query - key, would put every visible pair in bucket 0 (why the file takes key - query)."""
    t5_attention = pytest.importorskip("transformers.models.t5.modeling_t5").T5Attention
    rel = torch.arange(-3000, 3001)
    for bidirectional in (False, True):
        got = ns(relbias["t5"])["t5_bucket"](rel, bidirectional)
        want = t5_attention._relative_position_bucket(rel, bidirectional=bidirectional, num_buckets=32,
                                                      max_distance=128)
        bad = (got != want).sum().item()
        assert bad == 0, (f"bidirectional={bidirectional}: {bad} buckets differ from HF's, max diff "
                          f"{(got - want).abs().max().item()}")
    flipped = t5_attention._relative_position_bucket(-rel[:3001], bidirectional=False)  # i - j for j <= i
    assert flipped.abs().max().item() == 0, "query - key with bidirectional=False is not all bucket 0"


def test_buckets_never_fall_as_the_distance_grows(relbias):
    """Causal: bucket(-d) for d = 0..5000 never decreases, is d below 16 and 31 from 128 on; bidirectional:
    the same on each side, keys after the query in 16..31."""
    t5_bucket = ns(relbias["t5"])["t5_bucket"]
    d = torch.arange(0, 5001)
    before = t5_bucket(-d, False)
    steps = before.diff()
    assert steps.min().item() >= 0, f"causal: a bucket falls, min step {steps.min().item()}"
    assert torch.equal(before[:16], d[:16]) and (before[128:] == 31).all() and before[127].item() == 31
    for side in (-d, d):
        b = t5_bucket(side, True)
        assert b.diff().min().item() >= 0, f"bidirectional: a bucket falls, min step {b.diff().min().item()}"
    after = t5_bucket(d[1:], True)
    assert after.min().item() == 17 and after.max().item() == 31, (after.min().item(), after.max().item())


# ----------------------------------------------------------------------------- the chunks, against a double loop

@pytest.mark.parametrize("causal", [True, False])
def test_t5_chunks_are_the_table_at_each_bucket(relbias, causal):
    """bias_h(i, j) = table[bucket(j - i), h] (-inf where j > i when causal): queries 40..44 after a cache of
    40 keys, cut into chunks anywhere, against a plain double loop; the same read from its distance row."""
    entry, m = relbias["t5"], model("t5", causal=causal).t5
    with torch.no_grad():
        m.table.weight.copy_(torch.randn(32, 2, generator=torch.Generator().manual_seed(1)))
    table = m.table.weight.detach().double().tolist()
    offset, x = 40, torch.randn(1, 5, KW["n_embd"])
    with torch.no_grad():
        shared = entry.prepare(m, x, offset)
        rows, state = entry.score_bias(m, x, schemes.Layer(0, False, 0, None), offset, shared, None)
    assert state is None
    for a, b, s, e in ((0, 5, 0, 45), (1, 4, 2, 44), (3, 5, 30, 45)):
        want = torch.tensor([[[table[py_bucket(j - i, not causal)][h] if j <= i or not causal else -math.inf
                               for j in range(s, e)] for i in range(offset + a, offset + b)] for h in range(2)],
                            dtype=torch.float64)
        for how, got in (("chunk", rows(a, b, s, e)), ("distance row", from_row(rows, offset, a, b, s, e))):
            same_inf, err = chunk_err(got, want)
            assert same_inf and err < 1e-6, f"t5 {how}, rows {a}..{b - 1} keys {s}..{e - 1}: max diff {err:.2e}"
    nope = entry.score_bias(m, x, schemes.Layer(1, True, 0, None), offset, shared, None)
    assert nope == (None, None), "a NoPE layer gets no bias"


@pytest.mark.parametrize("causal", [True, False])
def test_fire_chunks_are_the_mlp_of_the_normalised_distance(relbias, causal):
    """bias_h(i, j) = f_h(log(|c (i - j)| + 1) / (log(|c max(L, i)| + 1) + 1e-6)), f = proj(relu(fc(u))), computed
    in plain Python with c = 0.3 and L = 5, for queries on both sides of L and queries near 4096."""
    entry, fm = relbias["fire"], model("fire", causal=causal).fire
    fire = fm.layers[1]
    with torch.no_grad():
        fire.c.fill_(0.3)
        fire.L_scale.fill_(-5.0 / fire.L0.item())  # L = |L_scale * L0| = 5: the sign is lost, as the reference's
    c, L, eps = 0.3, 5.0, 1e-6
    w1, b1 = fire.fc.weight.detach().double()[:, 0].tolist(), fire.fc.bias.detach().double().tolist()
    w2, b2 = fire.proj.weight.detach().double().tolist(), fire.proj.bias.detach().double().tolist()

    def f(i, j, h):
        u = math.log(abs(c * (i - j)) + 1) / (math.log(abs(c * max(L, i)) + 1) + eps)
        return sum(w2[h][k] * max(0.0, w1[k] * u + b1[k]) for k in range(len(w1))) + b2[h]

    for offset, T, cuts in ((0, 12, ((0, 12, 0, 12), (2, 9, 1, 10))), (4090, 6, ((0, 6, 0, 4096), (2, 5, 4080, 4095)))):
        x = torch.randn(1, T, KW["n_embd"])
        with torch.no_grad():
            rows, state = entry.score_bias(fm, x, schemes.Layer(1, False, 0, None), offset, None, None)
            assert state is None
            for a, b, s, e in cuts:
                got = rows(a, b, s, e)
                ks = list(range(s, e)) if e - s < 40 else list(range(s, s + 8)) + list(range(e - 8, e))
                want = torch.tensor([[[f(i, j, h) if j <= i or not causal else -math.inf for j in ks]
                                      for i in range(offset + a, offset + b)] for h in range(2)], dtype=torch.float64)
                same_inf, err = chunk_err(got[..., [j - s for j in ks]], want)
                assert same_inf and err < 1e-5, f"fire at {offset}: rows {a}..{b - 1} keys {s}..{e - 1}: max diff {err:.2e}"
    assert entry.score_bias(fm, x, schemes.Layer(0, True, 0, None), 0, None, None) == (None, None)


@pytest.mark.parametrize("causal", [True, False])
def test_kerple_chunks_are_the_log_kernel(relbias, causal):
    """bias_h(i, j) = -r1_h log(1 + r2_h |i - j|) with r1, r2 held at >= 0.01, in plain Python, for queries after
    a cache of 40 keys and near 4096; one kernel for every layer (the same chunk in layers 0 and 1); the same read
    from its distance row."""
    entry, m = relbias["kerple"], model("kerple", causal=causal).kerple
    r1, r2 = [0.7, 0.001], [0.3, 1.4]  # head 1: r1 below the floor, 0.01 is used
    with torch.no_grad():
        m.r1.copy_(torch.tensor(r1))
        m.r2.copy_(torch.tensor(r2))
    for offset, T, cuts in ((40, 5, ((0, 5, 0, 45), (1, 4, 2, 44))), (4090, 6, ((2, 5, 4080, 4096),))):
        x = torch.randn(1, T, KW["n_embd"])
        with torch.no_grad():
            chunks = [entry.score_bias(m, x, schemes.Layer(k, False, 0, None), offset, None, None) for k in (0, 1)]
        for a, b, s, e in cuts:
            want = torch.tensor([[[-max(r1[h], 0.01) * math.log1p(r2[h] * abs(i - j)) if j <= i or not causal
                                   else -math.inf for j in range(s, e)] for i in range(offset + a, offset + b)]
                                 for h in range(2)], dtype=torch.float64)
            for rows, state in chunks:
                assert state is None
                for how, got in (("chunk", rows(a, b, s, e)), ("distance row", from_row(rows, offset, a, b, s, e))):
                    same_inf, err = chunk_err(got, want)
                    assert same_inf and err < 1e-5, \
                        f"kerple {how} at {offset}: rows {a}..{b - 1} keys {s}..{e - 1}: max diff {err:.2e}"


def test_t5_scale_option_is_x_transformers_relative_position_bias(relbias):
    """t5{scale=s}: x-transformers' RelativePositionBias (the anchor's T5, 2.31.10), table at N(0, 1) times s. With
    its table copied in, our causal bias equals its forward(i, j) for queries after a cache; scale 1 stays HF's."""
    xt = pytest.importorskip("x_transformers.x_transformers")
    s = 32 ** 0.5
    torch.manual_seed(0)
    theirs = xt.RelativePositionBias(scale=s, causal=True, num_buckets=32, max_distance=128, heads=2)
    entry = relbias["t5"]
    m = model("t5", pos_options={"scale": s}).t5
    std = TinyLM(GPTConfig(**{**KW, "n_embd": 64, "n_head": 32, "pos": "t5", "pos_options": {"scale": s}})).t5.table.weight.std()
    assert abs(std.item() - 1.0) < 0.1, f"x-transformers' table starts at N(0, 1), got std {std.item():.3f}"
    with torch.no_grad():
        m.table.weight.copy_(theirs.relative_attention_bias.weight)
        offset, x = 150, torch.randn(1, 10, KW["n_embd"])
        rows, _ = entry.score_bias(m, x, schemes.Layer(0, False, 0, None), offset, entry.prepare(m, x, offset), None)
        got, want = rows(0, 10, 0, 160), theirs(10, 160)  # (H, 10, 160) each: queries 150..159, keys 0..159
    keep = ~got.isinf()
    assert torch.equal(keep, torch.ones_like(keep).tril(offset)), "causal: -inf exactly where the key is later"
    err = (got[keep] - want[keep]).abs().max().item()
    assert err < 1e-5, f"t5{{scale={s:.3f}}} against x-transformers' RelativePositionBias: max diff {err:.2e}"


def test_init_and_entries(relbias):
    """T5's table at HF's std n_embd^-0.5; KERPLE's r1 in (0, 2) and r2 in (0, 1), one pair per head for the
    model; FIRE's c = 0.1 and L = train_len in every layer; no decay, each with a bidirectional form."""
    for e in relbias.values():
        assert e.decay == () and not e.causal_only and e.colour is not None, e
    std = TinyLM(GPTConfig(**{**KW, "n_embd": 64, "n_head": 8, "pos": "t5"})).t5.table.weight.std().item()
    assert abs(std - 64 ** -0.5) < 0.04, f"t5 table std {std:.4f}, want {64 ** -0.5:.4f}"
    k = TinyLM(GPTConfig(**{**KW, "n_head": 64, "n_embd": 64, "pos": "kerple"})).kerple
    assert k.r1.shape == (64,) and 0 < k.r1.min() and k.r1.max() < 2 and k.r1.max() > 1, k.r1  # U(0, 2)
    assert 0 < k.r2.min() and k.r2.max() < 1, k.r2                                             # U(0, 1)
    for fire in model("fire", train_len=256).fire.layers:
        assert abs(fire.c.item() - 0.1) < 1e-7 and fire.L.item() == 256.0, (fire.c.item(), fire.L.item())
    quarter = TinyLM(GPTConfig(**{**KW, "train_len": 256, "pos": "fire", "pos_options": {"L_ratio": 0.25}}))
    assert [f.L.item() for f in quarter.fire.layers] == [64.0] * KW["n_layer"], "fire{L_ratio=0.25}: L = 64 at 256"
    with pytest.raises(ValueError, match="L_ratio"):
        TinyLM(GPTConfig(**{**KW, "pos": "fire", "pos_options": {"L_ratio": 0.0}}))


# ----------------------------------------------------------------------------- the model

@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("causal", [True, False])
def test_chunks_of_3_equal_one_chunk(relbias, name, causal):
    """q_chunk = 3 on every block gives the logits of the default chunk, 40 tokens (distances past 16 and L)."""
    m = model(name, causal=causal)
    err = chunk_error(m, torch.randint(0, 20, (2, 40), generator=torch.Generator().manual_seed(2)))
    assert err < 1e-5, f"{name} causal={causal}: chunks of 3 vs one chunk, max logit diff {err:.2e}"


@pytest.mark.parametrize("name", NAMES)
def test_cached_decoding_equals_the_full_forward(relbias, name):
    """A forward over 11 tokens, then one token at a time through the cache, gives the full forward's logits."""
    m = model(name)
    ids = torch.randint(0, 20, (2, 40), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = m(ids).logits
        cached, cache = cached_logits(m, ids, 11)
    err = (cached - full).abs().max().item()
    assert err < 1e-5, f"{name}: cached decoding vs full forward, max logit diff {err:.2e}"
    assert all(kv.state is None for kv in cache), "no cache state: the bias depends on positions only"


@pytest.mark.parametrize("name", NAMES)
def test_the_parameters_get_gradients(relbias, name):
    """The loss reaches T5's table in every head at each bucket a 40-token window uses (distances 0..39), KERPLE's
    r1 and r2 in every head, and
    every FIRE parameter of every layer: c, L (queries before position 16 are normalised by L), fc, and proj's
    weight in every head. Not every hidden unit: nn.Linear's init leaves some ReLUs off for every u in [0, 1].
    proj's bias adds one number to every score of a head's row, which softmax cancels: its gradient is rounding."""
    m = model(name).train()
    ids = torch.randint(0, 20, (2, 41), generator=torch.Generator().manual_seed(4))
    m(ids[:, :-1], targets=ids[:, 1:]).loss.backward()
    for pname, p in m.pos_module.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname
        g = p.grad.abs()
        if name == "t5":  # (buckets, H): every used bucket, every head
            g = g[sorted({py_bucket(-d, False) for d in range(40)})]
        elif name == "kerple":  # r1, r2 (H,): every head (init above the floor at this seed)
            pass
        elif pname.endswith("proj.bias"):  # (H,): a constant over the keys of a row, which softmax cancels
            assert g.max() < 1e-6, f"{name}.{pname}: softmax ignores a per-head constant, but |grad| {g.tolist()}"
            continue
        elif pname.endswith("proj.weight"):  # (H, W): every head
            g = g.reshape(g.shape[0], -1).amax(dim=-1)
        else:  # c, L_scale, fc: somewhere
            g = g.max()
        assert (g > 0).all(), f"{name}.{pname}: no gradient where one is due, |grad| {g.tolist()}"


@pytest.mark.parametrize("causal", [False, True])
def test_fire_pieces_give_the_mlps_values_and_gradients(relbias, causal):
    """FIRE.block evaluates f = proj(relu(fc(u))) as a piecewise-linear function (mlp_pieces): on a block inside
    and one past L its values and the gradients of c, L, fc and proj equal those of the MLP applied to every u
    (fire_distance), with a unit that never switches (w1 = 0) among them. causal: the pieces found row by row
    (pieces_along_rows), compared at every key up to its query."""
    import field_relbias as fr
    fire = model("fire").fire.layers[0]
    with torch.no_grad():
        fire.fc.weight[3] = 0.0  # a unit on (or off) for every u
        fire.fc.bias[3] = 0.4
    for i0, i1, j0, j1 in ((0, 20, 0, 20), (3000, 3010, 100, 3010)):
        got = fire.block(i0, i1, j0, j1, causal=causal)
        i = torch.arange(i0, i1, dtype=torch.float32)[:, None]
        j = torch.arange(j0, j1, dtype=torch.float32)[None, :]
        u = fr.fire_distance(i, j, fire.c.float(), fire.L.float())
        want = fire.proj(torch.relu(fire.fc(u[..., None]))).permute(2, 0, 1)  # the MLP on every pair
        seen = (j <= i) if causal else torch.ones_like(u, dtype=torch.bool)  # (R, S): the pairs that count
        err = (got - want)[:, seen].abs().max().item()
        assert err < 1e-5, f"fire rows {i0}..{i1 - 1} (causal {causal}): pieces vs the MLP, max diff {err:.2e}"
        w = torch.randn_like(want) * seen
        g1 = torch.autograd.grad((got * w).sum(), list(fire.parameters()))
        g2 = torch.autograd.grad((want * w).sum(), list(fire.parameters()))
        for (pname, _), a, b in zip(fire.named_parameters(), g1, g2):
            err = (a - b).abs().max().item() / (1 + b.abs().max().item())
            assert err < 1e-4, f"fire rows {i0}..{i1 - 1}: {pname}'s gradient, pieces vs the MLP, max rel diff {err:.2e}"


def test_fire_pieces_along_rows_are_bucketize_at_every_visible_key(relbias):
    """pieces_along_rows (one search per row and switch point) gives torch.bucketize's piece at every key up to its
    query, on random chunks before and past L, with switch points that never switch (inf) and repeated ones."""
    import field_relbias as fr
    gen = torch.Generator().manual_seed(5)
    for trial in range(100):
        R, S = (int(torch.randint(1, n, (), generator=gen)) for n in (40, 200))
        i0 = int(torch.randint(0, 600, (), generator=gen))
        j0 = max(0, i0 + R - S - int(torch.randint(0, 4, (), generator=gen)))
        t = torch.cat((torch.rand(6, generator=gen), torch.full((2,), 0.5), torch.full((2,), math.inf))).sort().values
        i = torch.arange(i0, i0 + R, dtype=torch.float32)[:, None]
        j = torch.arange(j0, j0 + S, dtype=torch.float32)[None, :]
        u = fr.fire_distance(i, j, torch.rand((), generator=gen), torch.tensor(float(torch.randint(1, 300, (), generator=gen))))
        got, want = fr.pieces_along_rows(u, t, i0, j0), torch.bucketize(u, t)
        seen = j <= i
        bad = (got != want)[seen].sum().item()
        assert bad == 0, f"chunk {trial} (rows {i0}.., keys {j0}.., {R} x {S}): {bad} visible pairs in another piece"
