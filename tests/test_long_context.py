"""long_context_test.py, the copy mixture of train_compare.py and the evaluation span of
extrapolation_test.py, each against an independent computation on tiny random models."""
import pytest
import torch
import torch.nn.functional as F

import extrapolation_test as ET
import long_context_test as LC
import tiny_lm
from copy_mixture import copy_windows, key_ids_of
from train_compare import random_windows

pytestmark = pytest.mark.usefixtures("one_thread")
VOCAB = "\n !',.:;?" + "abcdefghijklmnopqrstuvwxyz" + "0123456789"
TEXT = 35  # ids below this are not digits: text made of them holds no key character


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
    got = LC.context_use(model, ids, contexts, T, n, batch_tokens=64)  # (spans, contexts)
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
    LC.context_use(model, ids, [0, 16, 48], 32, 2, 256, set_length=seen.append)
    assert seen == [32, 48, 80], f"set_length got {seen}, want context + targets"


def test_plant_trials_layout():
    ids = torch.randint(0, TEXT, (3000,))
    key_ids = key_ids_of(VOCAB)
    for d in (24, 100, 1000):
        seqs, rep, ctl = LC.plant_trials(ids, d, 10, 6, key_ids, seed=3)
        assert seqs.shape == (6, LC.KEY_AT + d + 10 + 1) and rep == LC.KEY_AT + d
        assert ctl == rep - LC.CONTROL_GAP - 10 and ctl >= LC.KEY_AT + 10, "control overlaps the first key"
        first, again, control = seqs[:, LC.KEY_AT:LC.KEY_AT + 10], seqs[:, rep:rep + 10], seqs[:, ctl:ctl + 10]
        assert torch.equal(first, again), "the repeat is not the key"
        assert bool(torch.isin(first, key_ids).all() and torch.isin(control, key_ids).all())
        assert not torch.equal(first, control)
        planted = torch.zeros(seqs.shape[1], dtype=torch.bool)
        for a in (LC.KEY_AT, rep, ctl):
            planted[a:a + 10] = True
        assert bool((seqs[:, ~planted] < TEXT).all()), "text outside the keys was changed"
    again_seqs, _, _ = LC.plant_trials(ids, 100, 10, 6, key_ids, seed=3)
    assert torch.equal(again_seqs, LC.plant_trials(ids, 100, 10, 6, key_ids, seed=3)[0]), "not reproducible"


def test_retrieval_numbers_match_a_direct_computation():
    torch.manual_seed(2)
    model, ids, key_ids = tiny("rope"), torch.randint(0, len(VOCAB), (2000,)), key_ids_of(VOCAB)
    out = LC.retrieval(model, ids, [30, 90], 8, 5, key_ids, seed=0, batch_tokens=128)
    for r in out:
        seqs, rep, ctl = LC.plant_trials(ids, r["distance"], 8, 5, key_ids, seed=0)
        rep_l, ctl_l, exact = [], [], []
        for s in seqs:
            loss = direct_loss(model, s)
            with torch.no_grad():
                pred = model(s[None, :-1]).logits[0].argmax(-1)
            rep_l.append(loss[rep:rep + 7].mean())
            ctl_l.append(loss[ctl:ctl + 7].mean())
            exact.append(float(torch.equal(pred[rep:rep + 7], s[rep + 1:rep + 8])))
        gain = (torch.stack(ctl_l) - torch.stack(rep_l)).mean().item()
        assert abs(r["gain"] - gain) < 1e-5, f"gain {r['gain']} vs {gain} at d={r['distance']}"
        assert r["exact"] == pytest.approx(sum(exact) / 5)
        assert r["gain_lo"] <= r["gain"] <= r["gain_hi"]


def test_effective_context_and_bootstrap():
    g = torch.Generator().manual_seed(0)
    noise = 0.01 * torch.randn(40, 5, generator=g)
    curve = torch.tensor([2.0, 1.7, 1.5, 1.5, 1.5])  # helps up to the third context, then flat
    row = LC.summarize_context("x", curve + noise, [0, 10, 20, 40, 80], short=20, seed=0)
    assert row["effective_context"] == 20, row
    broken = torch.tensor([1.6, 1.62, 3.0, 3.8, 3.7]) + noise  # worse than c=0 everywhere, then a dip at 80
    assert LC.summarize_context("y", broken, [0, 10, 20, 40, 80], short=20, seed=0)["effective_context"] == 0
    assert row["gain_lo"] <= row["gain_c20_to_c80"] <= row["gain_hi"] and abs(row["gain_c20_to_c80"]) < 0.01
    lo, hi = LC.bootstrap_ci(torch.full((10,), 3.0))
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
    losses, per_char, _ = ET.evaluate(model, ids, [32, 128], blocks, 256, "t")
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
