"""lab/copy_mixture.py, the copy data of train_compare.py's copy family and of the passkey formats, each
against its definition: planted keys really repeat where reported and nowhere else, the text windows
are kept, the curriculum's phases, and each format's control differs from its planted window exactly
at the first copy."""
import re

import pytest
import torch

from lab import copy_mixture as CM
import long_context_test as LC
from lab import training
import tiny_lm
from lab import corpora
from lab.copy_mixture import FORMATS, REPEAT_AT, copy_windows, key_ids_of, plant_format, verse_starts
from lab.training import random_windows

pytestmark = pytest.mark.usefixtures("one_thread")
VOCAB = "\n !',.:;?" + "abcdefghijklmnopqrstuvwxyz" + "0123456789" + "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
KEYS = torch.arange(40, 50)  # key characters for plant_keys: ids the random text below (0..39) never uses
TEXT = 35  # ids below this are neither digits nor uppercase: text made of them holds no key character


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
    with pytest.raises(corpora.CorpusError, match="lacks"):
        key_ids_of("abc 0123 \n")


def test_curriculum_windows_phases():
    """Warm-up: a text prefix, then one segment of distinct letters over and over to the end;
    later: text with 2-3 copies of distinct-letter keys at gaps up to max_gap. Same step, same keys."""
    from lab.copy_mixture import CopyRecipe, curriculum_windows
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


@pytest.mark.parametrize("copies,max_gap", [(2, None), (2, 5), (4, None), (4, 3)])
def test_plant_keys_writes_each_key_where_it_says(copies, max_gap):
    g = torch.Generator().manual_seed(copies * 10 + (max_gap or 0))
    for _ in range(50):
        row = torch.randint(0, 40, (257,))
        planted = CM.plant_keys(row, g, KEYS, key_len=(8, 20), n_keys=2, copies=copies, max_gap=max_gap)
        assert planted, "nothing planted in a 257-token window"
        marked = torch.zeros_like(row, dtype=torch.bool)
        for starts, K in planted:
            assert len(starts) == copies and 8 <= K <= 20, (starts, K)
            assert starts[-1] + K <= row.numel(), f"copy past the window end: {starts}, K={K}"
            first = row[starts[0]:starts[0] + K]
            for a, b in zip(starts, starts[1:]):
                gap = b - a - K
                assert gap >= 0, f"copies overlap: {starts}, K={K}"
                assert max_gap is None or gap <= max_gap, f"gap {gap} > max_gap {max_gap}"
                assert torch.equal(row[b:b + K], first), "a later copy differs from the first"
            for s in starts:
                marked[s:s + K] = True
        assert int((row >= 40).sum()) == int(marked.sum()), "key characters outside the reported copies"


def test_synthetic_windows_hold_only_key_characters():
    ids = torch.randint(0, 40, (3000,))
    x, y = CM.copy_windows(training.random_windows(ids, 64, 8), 8, 64, KEYS, seed=0, key_len=(6, 6), copies=3,
                          synthetic=1.0)(0, torch.Generator())
    assert bool(((x >= 40) & (y >= 40)).all()), "a synthetic window kept some text"
    assert torch.equal(x[:, 1:], y[:, :-1])
