"""long_context_test.py, the copy mixture of train_compare.py and the evaluation span of
extrapolation_test.py, each against an independent computation on tiny random models; the
exact-match intervals, the passkey formats and the temperature rows of issue 26."""
import json
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import extrapolation_test as ET
import long_context
import long_context_test as LC
import perplexity
import tiny_lm
from copy_mixture import FORMATS, REPEAT_AT, copy_windows, key_ids_of, plant_format, verse_starts
from long_context import clopper_pearson, format_retrieval, share_ci
from training import random_windows

pytestmark = pytest.mark.usefixtures("one_thread")
VOCAB = "\n !',.:;?" + "abcdefghijklmnopqrstuvwxyz" + "0123456789" + "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
TEXT = 35  # ids below this are neither digits nor uppercase: text made of them holds no key character


def tiny(pos="rope", **kw):
    return tiny_lm.TinyLM(tiny_lm.GPTConfig(vocab_size=len(VOCAB), n_layer=2, n_head=2, n_embd=16, pos=pos,
                                            max_len=512, **kw)).eval()


def direct_loss(model, seq):
    """Per-position loss of one sequence (T + 1,) -> (T,), by a plain forward."""
    with torch.no_grad():
        logits = model(seq[None, :-1]).logits[0]
    return F.cross_entropy(logits, seq[1:], reduction="none")


def test_context_use_scores_the_same_targets_with_more_context():
    torch.manual_seed(1)
    model, ids = tiny("alibi"), torch.randint(0, len(VOCAB), (700,))
    contexts, T, n = [0, 8, 24, 56], 16, 5
    got = long_context.context_use(model, ids, contexts, T, n, batch_tokens=64)  # (spans, contexts)
    first, last = contexts[-1], ids.numel() - T - 1
    starts = [round(first + i * (last - first) / (n - 1)) for i in range(n)]
    assert starts[0] == 56 and starts[-1] == last and len(set(starts)) == n
    want = torch.tensor([[direct_loss(model, ids[p - c:p + T + 1])[c:].mean().item() for c in contexts]
                         for p in starts])
    diff = (got - want).abs().max().item()
    assert diff < 1e-5, f"context_use differs from a direct forward by {diff:.2e}"
    # with no context the first target is predicted from the target's own first character only
    assert not torch.allclose(got[:, 0], got[:, -1]), "more context changed nothing: the windows are wrong"


def test_scaled_rope_gets_the_factor_of_the_whole_window():
    model, ids, seen = tiny("rope"), torch.randint(0, len(VOCAB), (400,)), []
    long_context.context_use(model, ids, [0, 16, 48], 32, 2, 256, set_length=seen.append)
    assert seen == [32, 48, 80], f"set_length got {seen}, want context + targets"


def test_plant_trials_control_differs_only_in_the_first_copy():
    ids = torch.randint(0, TEXT, (3000,))
    key_ids = key_ids_of(VOCAB, "upper")
    for d in (10, 24, 100, 1000):
        planted, control, rep = long_context.plant_trials(ids, d, 10, 6, key_ids, seed=3)
        assert planted.shape == control.shape == (6, LC.KEY_AT + d + 10 + 1) and rep == LC.KEY_AT + d
        first, again = planted[:, LC.KEY_AT:LC.KEY_AT + 10], planted[:, rep:rep + 10]
        assert torch.equal(first, again), "the repeat is not the key"
        assert torch.equal(control[:, rep:rep + 10], again), "the control's repeat is not the same key"
        fresh = control[:, LC.KEY_AT:LC.KEY_AT + 10]
        assert bool(torch.isin(first, key_ids).all() and torch.isin(fresh, key_ids).all())
        for k, f in zip(first, fresh):
            assert k.unique().numel() == 10, f"a key repeats a letter: {k.tolist()}"
            assert not bool(torch.isin(f, k).any()), "the fresh key shares a letter with the key"
        differs = torch.nonzero((planted != control).any(0)).flatten()
        assert differs.tolist() == list(range(LC.KEY_AT, LC.KEY_AT + 10)), \
            f"control and planted windows differ at {differs.tolist()}, want only the first copy"
        keys = torch.zeros(planted.shape[1], dtype=torch.bool)
        keys[LC.KEY_AT:LC.KEY_AT + 10], keys[rep:rep + 10] = True, True
        assert bool((planted[:, ~keys] < TEXT).all()), "text outside the keys was changed"
    again = long_context.plant_trials(ids, 100, 10, 6, key_ids, seed=3)
    assert torch.equal(again[0], long_context.plant_trials(ids, 100, 10, 6, key_ids, seed=3)[0]), "not reproducible"


def test_retrieval_numbers_match_a_direct_computation():
    torch.manual_seed(2)
    model, ids, key_ids = tiny("rope"), torch.randint(0, len(VOCAB), (2000,)), key_ids_of(VOCAB, "upper")
    out = long_context.retrieval(model, ids, [10, 30, 90], 8, lambda d: 5 if d < 50 else 3, key_ids, seed=0, batch_tokens=128)
    assert [r["trials"] for r in out] == [5, 5, 3], "trials per distance not taken from the function"
    for r in out:
        planted, control, rep = long_context.plant_trials(ids, r["distance"], 8, r["trials"], key_ids, seed=0)
        gain, exact, per_char = [], [], []
        for p, c in zip(planted, control):
            with torch.no_grad():
                pred = model(p[None, :-1]).logits[0].argmax(-1)
            gain.append(direct_loss(model, c)[rep:rep + 7].mean() - direct_loss(model, p)[rep:rep + 7].mean())
            right = pred[rep:rep + 7] == p[rep + 1:rep + 8]  # characters 2..8 of the repeat
            exact.append(float(right.all()))
            per_char.append(right.float().mean().item())
        g = torch.stack(gain).mean().item()
        assert abs(r["gain"] - g) < 1e-5, f"gain {r['gain']} vs {g} at d={r['distance']}"
        assert r["exact"] == pytest.approx(sum(exact) / len(exact))
        assert r["per_char"] == pytest.approx(sum(per_char) / len(per_char), abs=1e-6)
        for m in ("gain", "exact", "per_char"):
            assert r[f"{m}_lo"] <= r[m] + 1e-9 and r[m] <= r[f"{m}_hi"] + 1e-9, (m, r)


def test_retrieval_of_a_model_that_copies():
    """A hand-built 'model' that predicts, at each position, the character that followed the
    previous occurrence of the current character scores exact match 1 as planted and a gain > 0."""
    class Copier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, x):
            B, T = x.shape
            logits = torch.zeros(B, T, len(VOCAB))
            for b in range(B):
                last = {}
                for t in range(T):
                    c = int(x[b, t])
                    if t > 0:
                        last[int(x[b, t - 1])] = c
                    logits[b, t, last.get(c, 0)] = 5.0
            return tiny_lm.LMOutput(logits, None, None)

    ids, key_ids = torch.randint(0, TEXT, (800,)), key_ids_of(VOCAB, "upper")
    out = long_context.retrieval(Copier(), ids, [20, 60], 6, 4, key_ids, seed=0, batch_tokens=256)
    for r in out:
        assert r["exact"] == 1.0 and r["per_char"] == 1.0, r
        assert r["per_char_control"] < 0.5 and r["gain"] > 1.0, r


def test_effective_context_and_bootstrap():
    g = torch.Generator().manual_seed(0)
    noise = 0.01 * torch.randn(40, 5, generator=g)
    curve = torch.tensor([2.0, 1.7, 1.5, 1.5, 1.5])  # helps up to the third context, then flat
    row = long_context.summarize_context("x", curve + noise, [0, 10, 20, 40, 80], short=20, seed=0)
    assert row["effective_context"] == 20, row
    broken = torch.tensor([1.6, 1.62, 3.0, 3.8, 3.7]) + noise  # worse than c=0 everywhere, then a dip at 80
    assert long_context.summarize_context("y", broken, [0, 10, 20, 40, 80], short=20, seed=0)["effective_context"] == 0
    assert row["gain_lo"] <= row["gain_c20_to_c80"] <= row["gain_hi"] and abs(row["gain_c20_to_c80"]) < 0.01
    lo, hi = long_context.bootstrap_ci(torch.full((10,), 3.0))
    assert lo == hi == 3.0


def test_copy_windows_keep_the_text_windows_and_plant_pairs():
    ids = torch.randint(0, TEXT, (5000,))
    key_ids, T, B = key_ids_of(VOCAB), 64, 32
    plain = random_windows(ids, T, B)
    copy = copy_windows(random_windows(ids, T, B), B, T, key_ids, seed=0, frac=0.5, key_len=(8, 12), n_keys=1)
    planted_rows = 0
    for step in range(3):
        x0, y0 = plain(step, torch.Generator().manual_seed(step))
        x1, y1 = copy(step, torch.Generator().manual_seed(step))
        assert torch.equal(x1[:, 1:], y1[:, :-1]), "targets are not the next tokens"
        w0, w1 = torch.cat([x0, y0[:, -1:]], 1), torch.cat([x1, y1[:, -1:]], 1)  # (B, T + 1)
        for a, b in zip(w0, w1):
            changed = torch.nonzero(a != b).flatten()
            if changed.numel() == 0:
                continue
            planted_rows += 1
            letters = b[b >= TEXT]  # the keys are the only letters in these windows
            k = letters.numel() // 2
            assert 8 <= k <= 12 and torch.equal(letters[:k], letters[k:]), f"not one key twice: {letters}"
            pos = torch.nonzero(b >= TEXT).flatten()
            d = (pos[k] - pos[0]).item()
            assert k <= d <= T + 1 - k, f"distance {d} for key length {k}"
        x2, _ = copy(step, torch.Generator().manual_seed(step))
        assert torch.equal(x1, x2), "the same step must plant the same keys (resume)"
    assert 0.3 < planted_rows / (3 * B) < 0.7, f"{planted_rows} of {3 * B} windows planted, want about half"
    defaults = copy_windows(random_windows(ids, 256, B), B, 256, key_ids, seed=0)
    x, y = defaults(0, torch.Generator().manual_seed(0))
    w = torch.cat([x, y[:, -1:]], 1)
    n_digits = (w >= TEXT).sum(1)
    assert bool((n_digits > 0).all()), "with the default fraction every window holds a key"
    assert bool((n_digits % 2 == 0).all()) and n_digits.max() <= 2 * 96, f"one key of at most 96, twice: {n_digits}"


def test_key_ids_need_every_letter():
    with pytest.raises(tiny_lm.CorpusError, match="lacks"):
        key_ids_of("abc 0123 \n")


def test_spread_blocks_cover_the_text():
    starts = ET.spread_blocks(10_001, 1000, 4)
    assert starts[0] == 0 and starts[-1] == 9000 and all(b - a >= 1000 for a, b in zip(starts, starts[1:]))
    with pytest.raises(tiny_lm.CorpusError, match="fewer than"):
        ET.spread_blocks(3000, 1000, 3)


def test_evaluate_scores_the_same_characters_at_every_length():
    torch.manual_seed(3)
    model, ids = tiny("alibi"), torch.randint(0, len(VOCAB), (3000,))
    blocks = ET.spread_blocks(ids.numel(), 128, 3)
    losses, per_char, _ = perplexity.evaluate(model, ids, [32, 128], blocks, 256, "t")
    for i, b in enumerate(blocks):
        want_long = direct_loss(model, ids[b:b + 129])
        want_short = torch.cat([direct_loss(model, ids[b + j:b + j + 33]) for j in range(0, 128, 32)])
        d = max((per_char[128][i] - want_long).abs().max().item(), (per_char[32][i] - want_short).abs().max().item())
        assert d < 1e-5, f"block {i}: max diff {d:.2e}"
    assert losses[32] == pytest.approx(per_char[32].mean().item(), rel=1e-6)


def test_clamped_learned_rows():
    model = tiny("learned")
    ET.clamp_learned_rows(model, 64)
    w = model.learned.table.weight
    assert torch.equal(w[64:], w[63].expand_as(w[64:])) and not torch.equal(w[62], w[63])


def test_curriculum_windows_phases():
    """Warm-up: a text prefix, then one segment of distinct letters over and over to the end;
    later: text with 2-3 copies of distinct-letter keys at gaps up to max_gap. Same step, same keys."""
    from copy_mixture import CopyRecipe, curriculum_windows
    ids = torch.randint(0, TEXT, (6000,))
    key_ids, T, B = key_ids_of(VOCAB, "upper"), 256, 16
    recipe = CopyRecipe()
    batch = curriculum_windows(random_windows(ids, T, B), B, T, key_ids, seed=0, steps=30, recipe=recipe)
    for step in (0, 9):  # warm-up: the first third of 30 steps
        x, y = batch(step, torch.Generator().manual_seed(step))
        assert torch.equal(x[:, 1:], y[:, :-1]), "targets are not the next tokens"
        for w in torch.cat([x, y[:, -1:]], 1):
            p = int(torch.nonzero(w >= TEXT).flatten()[0])
            assert 1 <= p <= recipe.prefix and bool((w[:p] < TEXT).all()), "the prefix is not text"
            seg = w[p:]
            S = int(torch.nonzero(seg[1:] == seg[0]).flatten()[0]) + 1  # period of the repeated segment
            assert recipe.segment_len[0] <= S <= recipe.segment_len[1] and seg[:S].unique().numel() == S
            assert torch.equal(seg[S:], seg[:seg.numel() - S]), "the segment is not repeated back to back"
    for step in (10, 29):
        x, y = batch(step, torch.Generator().manual_seed(step))
        w = torch.cat([x, y[:, -1:]], 1)
        n_key = (w >= TEXT).sum(1)
        assert bool((n_key > 0).all()), "a later window without a key"
        assert bool((n_key <= recipe.n_keys * recipe.copies[1] * recipe.key_len[1]).all())
        assert bool((n_key >= recipe.copies[0] * min(recipe.key_len)).all()), "fewer than two copies of a key"
        again = batch(step, torch.Generator().manual_seed(step))[0]
        assert torch.equal(x, again), "the same step must plant the same keys (resume)"


def test_make_jobs_rows():
    s = {"scalings": ["yarn"], "fixed_scalings": ["yarn@16"], "retrieval_scalings": ["linear"]}
    jobs = {row: (name, scaling, m) for row, name, scaling, m in LC.make_jobs(["rope", "rope_copy", "irope_copy"], s, None)}
    assert jobs["rope+yarn@16"] == ("rope", "yarn@16", {"context"})
    assert jobs["rope_copy+linear"] == ("rope_copy", "linear", {"retrieval"})
    assert jobs["irope_copy (no temp)"] == ("irope_copy", None, {"retrieval"}), "irope's temperature-off row"
    assert "rope (no temp)" not in jobs


def test_fixed_factor_scaling():
    from eval_common import factor_label, scaling_at
    assert scaling_at("yarn@16", 300, 256)["factor"] == scaling_at("yarn@16", 4096, 256)["factor"] == 16.0
    assert scaling_at("yarn", 4096, 256)["factor"] == 16.0 and scaling_at("yarn", 512, 256)["factor"] == 2.0
    assert factor_label("yarn@16") == "16" and factor_label("ntk(4s)") == "4s"


# ----------------------------------------------------------------------------- exact-match intervals (issue 26)

def binom_tail_brute(k: int, n: int, p: float, upper: bool) -> float:
    """P(X <= k) (upper=False) or P(X >= k) (upper=True) for X ~ Binomial(n, p), by plain summation
    with integer binomial coefficients: independent of eval_common's lgamma sum."""
    idx = range(k, n + 1) if upper else range(0, k + 1)
    return float(sum(math.comb(n, i) * (p ** i) * ((1 - p) ** (n - i)) for i in idx))


def test_clopper_pearson_against_known_values_and_its_definition():
    lo, hi = clopper_pearson(0, 32)
    assert lo == 0.0 and abs(hi - 0.10888) < 1e-5, f"0 of 32: ({lo}, {hi}), want (0, 0.10888)"
    assert abs(hi - (1 - 0.025 ** (1 / 32))) < 1e-10, "k = 0 has the closed form 1 - (a/2)^(1/n)"
    known = {(5, 10): (0.187086, 0.812914), (1, 10): (0.0025286, 0.445016), (9, 10): (0.554984, 0.997471),
             (32, 32): (0.891119, 1.0)}  # R: binom.test(k, n)$conf.int
    for (k, n), want in known.items():
        got = clopper_pearson(k, n)
        diff = max(abs(a - b) for a, b in zip(got, want))
        assert diff < 2e-6, f"{k}/{n}: {got} vs {want} (diff {diff:.1e})"
    for k, n in ((0, 7), (3, 7), (7, 7), (1, 128), (64, 128), (109, 128), (127, 128)):
        lo, hi = clopper_pearson(k, n)
        if k > 0:  # at the lower bound P(X >= k) = 2.5%
            tail = binom_tail_brute(k, n, lo, upper=True)
            assert abs(tail - 0.025) < 1e-7, f"{k}/{n}: P(X >= k | {lo:.6f}) = {tail:.8f}, want 0.025"
        if k < n:  # at the upper bound P(X <= k) = 2.5%
            tail = binom_tail_brute(k, n, hi, upper=False)
            assert abs(tail - 0.025) < 1e-7, f"{k}/{n}: P(X <= k | {hi:.6f}) = {tail:.8f}, want 0.025"
        mirror = clopper_pearson(n - k, n)
        assert abs(lo - (1 - mirror[1])) < 1e-12 and abs(hi - (1 - mirror[0])) < 1e-12, f"{k}/{n} vs {n - k}/{n}"
    with pytest.raises(ValueError):
        clopper_pearson(5, 4)
    assert share_ci(0.8516, 128) == clopper_pearson(109, 128)
    with pytest.raises(ValueError, match="whole number"):
        share_ci(0.5, 7)


def test_tables_take_exact_match_intervals_from_the_count():
    """retrieval_tables prints Clopper-Pearson from exact x trials, whatever exact_lo/hi the JSON holds."""
    def row(v, d, exact, trials):
        return {"variant": v, "family": "copy", "train_len": 256, "distance": d, "trials": trials, "exact": exact,
                "exact_lo": 0.5, "exact_hi": 0.5, "per_char": 0.9, "per_char_lo": 0.8, "per_char_hi": 1.0,
                "gain": 3.0, "gain_lo": 2.9, "gain_hi": 3.1}
    rows = [row("rope_copy", 32, 0.0, 32), row("rope_copy", 64, 0.8516, 128)]
    _, md = LC.retrieval_tables(rows, {"distances": [32, 64], "key_len": 10, "trials": 32, "copy_trials": 128,
                                       "copy_trials_upto": 512})
    lo, hi = clopper_pearson(109, 128)
    want = f"| rope_copy | copy curriculum, 256 | 0% [0, 11] | 85% [{100 * lo:.0f}, {100 * hi:.0f}] |"
    assert want in md, f"want {want!r} in\n{md}"
    assert "Clopper-Pearson" in md


# ----------------------------------------------------------------------------- the passkey formats

@pytest.fixture(scope="session")
def val_text():
    """(validation ids, vocabulary) of the default corpus."""
    _, val, vocab = tiny_lm.load_corpus(None)
    return tiny_lm.CharTokenizer(vocab).encode(val), vocab


def copies_at(planted, control, K):
    """Columns where any planted window differs from its control, and whether every window differs
    at every one of the first copy's K places."""
    differs = torch.nonzero((planted != control).any(0)).flatten().tolist()
    everywhere = bool((planted[:, LC.KEY_AT:LC.KEY_AT + K] != control[:, LC.KEY_AT:LC.KEY_AT + K]).all())
    return differs, everywhere


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_format_controls_differ_exactly_at_the_first_copy(fmt, val_text):
    ids, vocab = val_text
    key_ids, K = key_ids_of(vocab, "upper"), FORMATS[fmt].key_len
    verse = verse_starts(ids, vocab, K) if FORMATS[fmt].verse else None
    for d in (16, 128, 1024):
        planted, control, rep = plant_format(ids, fmt, d, 12, key_ids, seed=5, verse=verse)
        assert planted.shape == (12, LC.KEY_AT + d + K + 1) and rep == LC.KEY_AT + d
        differs, everywhere = copies_at(planted, control, K)
        assert differs == list(range(LC.KEY_AT, LC.KEY_AT + K)) and everywhere, \
            f"{fmt}, d={d}: control differs at {differs}, want every window at exactly {LC.KEY_AT}..{LC.KEY_AT + K - 1}"
        assert torch.equal(planted[:, LC.KEY_AT:LC.KEY_AT + K], planted[:, rep:rep + K]), "the repeat is not the key"
        assert torch.equal(control[:, rep:rep + K], planted[:, rep:rep + K]), "the control's repeat changed"
        same, _, _ = plant_format(ids, "in_format", d, 12, key_ids, seed=5)
        assert torch.equal(same[:, :LC.KEY_AT], planted[:, :LC.KEY_AT]), "formats do not share their text windows"
    with pytest.raises(ValueError, match="longest key"):
        plant_format(ids, fmt, 15, 2, key_ids, seed=0, verse=verse)


def test_repeated_letter_key_has_one_letter_twice(val_text):
    ids, vocab = val_text
    key_ids = key_ids_of(vocab, "upper")
    planted, control, _ = plant_format(ids, "repeated_letter", 64, 40, key_ids, seed=1)
    a, b = REPEAT_AT
    assert (a, b) == (2, 6)
    for key, fresh in zip(planted[:, LC.KEY_AT:LC.KEY_AT + 10], control[:, LC.KEY_AT:LC.KEY_AT + 10]):
        for k in (key, fresh):
            assert bool(torch.isin(k, key_ids).all()) and k.unique().numel() == 9, f"not 9 letters: {k.tolist()}"
            pairs = [(i, j) for i in range(10) for j in range(i + 1, 10) if k[i] == k[j]]
            assert pairs == [(a, b)], f"letters repeat at {pairs}, want only {(a, b)}: {k.tolist()}"
        assert not bool(torch.isin(fresh, key).any()), "the control's first copy shares a letter with the key"


def test_verse_spans_are_validation_text_from_elsewhere(val_text):
    ids, vocab = val_text
    K = FORMATS["verse"].key_len
    planted, control, rep = plant_format(ids, "verse", 200, 10, key_ids_of(vocab, "upper"), seed=2,
                                         verse=verse_starts(ids, vocab, K))
    text = "".join(vocab[i] for i in ids.tolist())
    for p, c in zip(planted, control):
        window = "".join(vocab[i] for i in p[:LC.KEY_AT].tolist())
        start = text.find(window)
        assert start >= 0, "the window is not validation text"
        for span in (p[LC.KEY_AT:LC.KEY_AT + K], c[LC.KEY_AT:LC.KEY_AT + K]):
            s = "".join(vocab[i] for i in span.tolist())
            at = [m.start() for m in re.finditer(re.escape(s), text)]
            assert at, f"{s!r} is not validation text"
            assert any(m + K <= start or m >= start + p.numel() for m in at), f"{s!r} comes from its own window"
            assert "\n" not in s and sum(ch.islower() for ch in s) * 2 >= K and text[at[0] - 1] in " \n", s
        assert bool((p[LC.KEY_AT:LC.KEY_AT + K] != c[LC.KEY_AT:LC.KEY_AT + K]).all()), "control span too alike"


class PositionCopier(torch.nn.Module):
    """Predicts, at position t, the character at t + 1 - d: copies by position from d back."""
    def __init__(self, d: int, V: int):
        super().__init__()
        self.d, self.V, self.w = d, V, torch.nn.Parameter(torch.zeros(1))

    def forward(self, x):
        B, T = x.shape
        logits = torch.zeros(B, T, self.V)
        logits[:, self.d - 1:].scatter_(2, x[:, :T - self.d + 1, None], 5.0)  # column t: x[t + 1 - d], t >= d - 1
        return tiny_lm.LMOutput(logits, None, None)


class SuccessorCopier(torch.nn.Module):
    """Predicts the character that followed the previous occurrence of the current one."""
    def __init__(self, V: int):
        super().__init__()
        self.V, self.w = V, torch.nn.Parameter(torch.zeros(1))

    def forward(self, x):
        B, T = x.shape
        logits = torch.zeros(B, T, self.V)
        for b in range(B):
            last = {}
            for t in range(T):
                if t > 0:
                    last[int(x[b, t - 1])] = int(x[b, t])
                logits[b, t, last.get(int(x[b, t]), 0)] = 5.0
        return tiny_lm.LMOutput(logits, None, None)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_position_copier_gets_every_format(fmt, val_text):
    ids, vocab = val_text
    d = 40
    rows = format_retrieval(PositionCopier(d, len(vocab)), ids, vocab, fmt, [d], 6, key_ids_of(vocab, "upper"),
                            seed=0, batch_tokens=512)
    r = rows[0]
    assert r["exact"] == 1.0 and r["per_char"] == 1.0 and r["exact_lo"] > 0.5, r
    # right as planted and wrong in the control at every scored place: the loss differs by the logit, 5
    assert r["per_char_control"] == 0.0 and abs(r["gain"] - 5.0) < 1e-4, r
    if fmt == "repeated_letter":
        assert r["successor"] == 1.0 and r["other"] == 1.0, r


def test_a_successor_copier_misses_the_repeated_letter(val_text):
    ids, vocab = val_text
    key_ids = key_ids_of(vocab, "upper")
    text_ids = torch.tensor([i for i in ids.tolist() if vocab[i].islower() or vocab[i] in " \n"])[:20000]
    r = format_retrieval(SuccessorCopier(len(vocab)), text_ids, vocab, "repeated_letter", [24], 5, key_ids, seed=0,
                         batch_tokens=256)[0]
    # at the second occurrence the letter last came before key position 3, so it predicts that: wrong;
    # at the letter's first place in the repeat it last came before key position 7: wrong too; the other 7 right
    assert r["successor"] == 0.0, r
    assert abs(r["other"] - 7 / 8) < 1e-6 and abs(r["per_char"] - 7 / 9) < 1e-6 and r["exact"] == 0.0, r
    assert format_retrieval(SuccessorCopier(len(vocab)), text_ids, vocab, "in_format", [24], 5, key_ids, seed=0,
                            batch_tokens=256)[0]["exact"] == 1.0, "in format a successor lookup copies"


def test_format_retrieval_matches_a_direct_computation(val_text):
    ids, vocab = val_text
    torch.manual_seed(4)
    key_ids = key_ids_of(vocab, "upper")
    model = tiny_lm.TinyLM(tiny_lm.GPTConfig(vocab_size=len(vocab), n_layer=1, n_head=2, n_embd=16, pos="rope",
                                             max_len=256)).eval()
    r = format_retrieval(model, ids, vocab, "repeated_letter", [20], 7, key_ids, seed=3, batch_tokens=300)[0]
    planted, control, rep = plant_format(ids, "repeated_letter", 20, 7, key_ids, seed=3)
    with torch.no_grad():
        pred = model(planted[:, :-1]).logits.argmax(-1)                       # (7, W)
    right = pred[:, rep:rep + 9] == planted[:, rep + 1:rep + 10]              # key characters 2..10
    assert r["per_char"] == pytest.approx(right.float().mean().item(), abs=1e-6)
    assert r["successor"] == pytest.approx(right[:, REPEAT_AT[1]].float().mean().item(), abs=1e-6)
    others = [j for j in range(9) if j != REPEAT_AT[1]]
    assert r["other"] == pytest.approx(right[:, others].float().mean().item(), abs=1e-6)
    assert (r["exact_lo"], r["exact_hi"]) == clopper_pearson(int(right.all(1).sum()), 7)


# ----------------------------------------------------------------------------- the temperature's fair control

def test_irope_copy_notemp_differs_only_in_the_temperature():
    import dataclasses
    import variants as V
    kw = dict(vocab_size=len(VOCAB), n_layer=4, n_head=2, n_embd=16, max_len=512)
    a, b = (V.build_variant(n, kw, V.TrainConfig(), 0, None)[0] for n in ("irope_copy", "irope_copy_notemp"))
    ca, cb = dataclasses.asdict(a.cfg), dataclasses.asdict(b.cfg)
    assert [k for k in ca if ca[k] != cb[k]] == ["attn_temperature_tuning"] and ca["attn_temperature_tuning"], (ca, cb)
    assert V.is_copy("irope_copy_notemp") and "irope_copy_notemp" in V.FAMILIES["copy"]
    assert V.COPY_OF["irope_copy_notemp"] == "irope", "trained on the copy curriculum for COPY_STEPS like irope_copy"
    s = {"scalings": [], "fixed_scalings": [], "retrieval_scalings": []}
    rows = [j[0] for j in LC.make_jobs(["irope_copy_notemp", "irope_copy", "irope_global"], s, "retrieval")]
    assert rows == ["irope_global", "irope_copy", "irope_copy (no temp)", "irope_copy_notemp",
                    "irope_copy_notemp (temp on)"], rows


def test_temp_on_row_switches_the_factor_on():
    """The "(temp on)" row's model equals the plain one below the floor (factor exactly 1 before
    position floor - 1) and differs beyond it; "(no temp)" switches it back off."""
    import copy as copy_module
    import variants as V
    kw = dict(vocab_size=len(VOCAB), n_layer=2, n_head=2, n_embd=16, max_len=512)
    plain = V.build_variant("irope_copy_notemp", kw, V.TrainConfig(), 0, None)[0].eval()
    on = copy_module.deepcopy(plain)
    LC.switch_temperature(on, "irope_copy_notemp (temp on)")
    assert on.cfg.attn_temperature_tuning and not plain.cfg.attn_temperature_tuning
    floor = plain.cfg.temperature_floor
    x = torch.randint(0, len(VOCAB), (2, 3 * floor))
    with torch.no_grad():
        a, b = plain(x).logits, on(x).logits                                      # (2, 3 floor, V) each
    below = (a[:, :floor - 1] - b[:, :floor - 1]).abs().max().item()
    beyond = (a[:, floor:] - b[:, floor:]).abs().amax(dim=(0, 2))                 # (2 floor,)
    assert below == 0.0, f"below the floor the factor is 1, but the logits differ by {below:.2e}"
    assert bool((beyond > 1e-6).all()), f"beyond the floor the factor changed nothing somewhere: {beyond.min():.2e}"
    LC.switch_temperature(on, "irope_copy (no temp)")
    assert not on.cfg.attn_temperature_tuning


def test_copy_family_table_names_the_text_twin_of_the_new_rows(tmp_path):
    """copy_family_table reads irope_copy_notemp and its "(temp on)" row: the checkpoint's own ppl,
    and irope as the text-trained counterpart (there is no irope_notemp)."""
    from tables import copy_family_table
    ex = [{"variant": n, "train_len": 256, "ppl_256": p} for n, p in
          (("irope", 5.12), ("irope_copy", 5.55), ("irope_copy_notemp", 5.61))]
    (tmp_path / "extrapolation.json").write_text(json.dumps({"meta": {}, "rows": ex}))
    rows = [{"variant": v, "family": "copy", "distance": d, "exact": 0.5, "per_char": 0.9}
            for v in ("irope_copy", "irope_copy (no temp)", "irope_copy_notemp", "irope_copy_notemp (temp on)")
            for d in (32, 512)]
    (tmp_path / "retrieval.json").write_text(json.dumps({"meta": {}, "rows": rows}))
    lines = {ln.split(" | ")[0][2:]: ln for ln in copy_family_table(tmp_path).splitlines()[2:] if ln.startswith("| ")}
    assert lines["irope_copy_notemp"].startswith("| irope_copy_notemp | 5.61 | irope 5.12 |"), lines
    assert lines["irope_copy_notemp (temp on)"].startswith("| irope_copy_notemp (temp on) | 5.61 | irope 5.12 |")
    assert lines["irope_copy (no temp)"].startswith("| irope_copy (no temp) | 5.55 | irope 5.12 |"), lines


# ----------------------------------------------------------------------------- the formats' results files

@pytest.fixture(scope="session")
def quick_ckpts(tmp_path_factory, val_text):
    """Random --quick-sized rope_copy and alibi_copy checkpoints on the default corpus: what
    long_context_test.main loads (no training: the files, merges and tables are under test)."""
    from dataclasses import asdict
    import variants as V
    _, vocab = val_text
    train, val, _ = tiny_lm.load_corpus(None)
    d = tmp_path_factory.mktemp("formats_ck")
    for name in ("rope_copy", "alibi_copy"):
        model = V.build_variant(name, {"vocab_size": len(vocab), **V.QUICK_MODEL}, V.TrainConfig(), 0, None)[0]
        extra = {"train_config": asdict(V.TrainConfig(**V.QUICK_TRAIN)), "variant": name, "data": "copy",
                 "corpus": tiny_lm.corpus_fingerprint(train + val)}
        tiny_lm.save_checkpoint(d / f"{name}.pt", model, vocab, 0, {}, extra)
    return d


def test_quick_formats_run_writes_merges_and_redraws(quick_ckpts, tmp_path):
    res = tmp_path / "res"
    run = lambda *a: LC.main(["--quick", "--ckpt-dir", str(quick_ckpts), "--results", str(res), "--only", "formats",
                              *a])
    assert run("--variants", "rope_copy") == 0
    files = [res / f"retrieval_formats.{e}" for e in ("json", "csv", "md")]
    assert all(f.is_file() for f in files) and not (res / "retrieval.json").exists(), sorted(res.iterdir())
    data = json.loads(files[0].read_text())
    n_d = len(data["meta"]["format_distances"])
    assert len(data["rows"]) == 2 * len(FORMATS) * n_d, "rope_copy and rope_copy+yarn, each format and distance"
    assert [r["rows"] for r in data["meta"]["runs"]] == [["rope_copy", "rope_copy+yarn"]]
    md = files[2].read_text()
    assert md.count("| rope_copy+yarn | verse |") == 3 and "| rope_copy |" in md, md
    # a file written before runs were recorded: its rows get one record from its meta
    del data["meta"]["runs"]
    files[0].write_text(json.dumps(data))
    assert run("--variants", "alibi_copy") == 0
    runs = json.loads(files[0].read_text())["meta"]["runs"]
    assert [r["rows"] for r in runs] == [["rope_copy", "rope_copy+yarn"], ["alibi_copy"]] and "note" in runs[0], runs
    assert run("--variants", "rope_copy") == 0  # replaces the old record's rows: that record goes
    runs = json.loads(files[0].read_text())["meta"]["runs"]
    assert [r["rows"] for r in runs] == [["alibi_copy"], ["rope_copy", "rope_copy+yarn"]], runs
    assert all(r["seconds"] >= 0 and r["peak_rss_gib"] > 0 and r["date"] for r in runs), runs
    before = [f.read_text() for f in files]
    with pytest.raises(SystemExit) as e:
        run("--variants", "alibi_copy", "--format-trials", "4")
    assert e.value.code == 2 and [f.read_text() for f in files] == before, "other settings must not merge"
    files[1].unlink()
    files[2].unlink()
    assert LC.main(["--redraw", "--results", str(res)]) == 0
    assert [f.read_text() for f in files] == before, "--redraw does not give back the same tables"


def test_committed_retrieval_json_without_runs_redraws_and_merges():
    """results/retrieval.json predates meta["runs"]: its tables still build (exact match's interval
    from its count), and a partial run merged into it keeps one record for the rows it had."""
    path = Path(__file__).resolve().parent.parent / "results" / "retrieval.json"
    old = json.loads(path.read_text())
    if "runs" in old["meta"]:
        pytest.skip("results/retrieval.json was regenerated with run records")
    wide, md = LC.retrieval_tables(old["rows"], old["meta"])
    assert len(wide) == len({r["variant"] for r in old["rows"]}) and "Clopper-Pearson" in md
    runs = LC.merge_runs(old, [{"variant": "rope_copy"}])
    assert len(runs) == 1 and runs[0]["run_seconds"] == old["meta"]["seconds"] and "note" in runs[0], runs
    assert "rope_copy" not in runs[0]["rows"] and "alibi_copy" in runs[0]["rows"], runs[0]["rows"]


def test_bad_format_settings_exit_2_before_any_work(quick_ckpts, tmp_path, capsys):
    base = ["--quick", "--ckpt-dir", str(quick_ckpts), "--results", str(tmp_path / "r"), "--variants", "rope_copy"]
    for extra, words in ((["--only", "formats", "--format-distances", "8,20"], "at least 16"),
                         (["--only", "formats", "--format-trials", "1"], "--format-trials must be at least 2"),
                         (["--only", "context"], "nothing to measure")):
        with pytest.raises(SystemExit) as e:
            LC.main(base + extra)
        err = capsys.readouterr().err.strip()
        assert e.value.code == 2 and words in err and "\n" not in err, (extra, err)
    assert not (tmp_path / "r").exists(), "a refused run wrote results"
