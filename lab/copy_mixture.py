"""The copy mixture: random keys planted into training windows, each written more than once,
so that predicting a later copy pays for attention back over the distance (Kazemnejad et al.
2023's synthetic-task idea, on real text). Nothing in Shakespeare pays for that otherwise.

plant_keys writes the copies into one window; plant_window decides, for one window, how
(near or anywhere) and calls it. Both training (copy_windows) and experiments/copy_calibration.py's probe
windows plant through plant_window, so a probe is planted exactly like a training window.

The copy family (`train_compare.py --variants copy`) trains on a curriculum instead
(CopyRecipe, curriculum_windows), found by calibration (docs/long_context.md):
  1. warm-up phase, the first third of the steps: a short text prefix, then one segment of
     distinct key letters repeated back to back to the window's end. Almost every target is
     copyable from 8-24 characters back, which starts the induction circuit (Olsson et al.
     2022) early;
  2. then text windows, each with keys of distinct letters written 2-3 times at gaps up to
     200 characters, so the circuit reaches further while the model keeps modelling text.
Keys are distinct UPPERCASE letters (KEY_ALPHABETS["upper"]): the plays use every one of them
(speaker names, line starts), so the embeddings are trained, but an uppercase letter right after
a lowercase one occurs once in the 4.5M training characters, so a key's first letter after a
word says "a key starts here" (the passkey's "the pass key is"). With lowercase keys, the letter
before the first scored character occurs a dozen times between two copies, and greedy decoding
of that character guesses.

The last section plants the passkey of the evaluation in formats the copy family never trained
(FORMATS, plant_format): long_context_test.py --only formats, scored by long_context.format_retrieval.
"""
from dataclasses import dataclass

import torch

from lab.corpora import CorpusError

# The first copy mixture's keys (copy_windows, experiments/copy_calibration.py) are digits: the plays hold almost
# none (at most 4 of each), so the first copy is the only earlier place a key's characters occur.
KEY_CHARS = "0123456789"
# The copy family's and the passkey's alphabets (distinct letters per key).
KEY_ALPHABETS = {"upper": "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "lower": "abcdefghijklmnopqrstuvwxyz"}


def distinct_key(key_ids: torch.Tensor, K: int, g: torch.Generator) -> torch.Tensor:
    """K different characters of key_ids in random order (no character twice: a one-character
    lookup inside the key is unambiguous)."""
    if K > key_ids.numel():
        raise ValueError(f"a key of {K} distinct characters needs an alphabet of at least {K}, "
                         f"got {key_ids.numel()}")
    return key_ids[torch.randperm(key_ids.numel(), generator=g)[:K]]


def plant_keys(row: torch.Tensor, g: torch.Generator, key_ids: torch.Tensor, key_len=(32, 96), n_keys: int = 1,
               copies: int = 2, max_gap: int = None, distinct: bool = False) -> list:
    """Overwrite row (one window, T + 1 tokens) in place with up to n_keys random keys of
    key_len = (min, max) characters drawn from key_ids, each written `copies` times.
    Two copies with max_gap=None (the copy mixture): the second starts d characters after the
    first, d uniform over what fits. Otherwise consecutive copies are 0..max_gap characters
    apart (max_gap=None: as far as fits). A key that would overlap one already planted is
    redrawn, up to 8 times. distinct: keys of different characters (distinct_key). Returns
    [(starts, K)] of the keys planted."""
    n, planted, tries = row.numel(), [], 0
    taken = torch.zeros(n, dtype=torch.bool)
    while len(planted) < n_keys and tries < 8 * n_keys:
        tries += 1
        K = int(torch.randint(key_len[0], key_len[1] + 1, (1,), generator=g))
        if copies == 2 and max_gap is None:
            d = int(torch.randint(K, n + 1 - K, (1,), generator=g))      # K <= d <= n - K: no overlap
            starts = [int(torch.randint(0, n + 1 - K - d, (1,), generator=g))]  # a + d + K <= n: both fit
            starts.append(starts[0] + d)
        else:
            room = n - copies * K  # characters left for the gaps and the lead-in
            if room < 0:
                raise ValueError(f"{copies} copies of a {K}-character key do not fit in a window of {n}")
            G = room // (copies - 1) if max_gap is None else min(max_gap, room // (copies - 1))
            gaps = torch.randint(0, G + 1, (copies - 1,), generator=g).tolist()
            a = int(torch.randint(0, room - sum(gaps) + 1, (1,), generator=g))
            starts = [a + i * K + sum(gaps[:i]) for i in range(copies)]
        if any(taken[s:s + K].any() for s in starts):
            continue  # would overwrite a key already planted
        key = distinct_key(key_ids, K, g) if distinct else key_ids[torch.randint(0, key_ids.numel(), (K,), generator=g)]
        for s in starts:
            row[s:s + K] = key
            taken[s:s + K] = True
        planted.append((starts, K))
    return planted


def plant_window(row: torch.Tensor, g: torch.Generator, key_ids: torch.Tensor, key_len=(32, 96), n_keys: int = 1,
                 copies: int = 2, max_gap: int = None, near_frac: float = 1.0) -> list:
    """Plant one window: with max_gap, a fraction near_frac of windows keep their copies within
    max_gap of each other and the others place them anywhere (no random draw when near_frac >= 1).
    Returns plant_keys' [(starts, K)]."""
    near = near_frac >= 1 or float(torch.rand(1, generator=g)) < near_frac
    return plant_keys(row, g, key_ids, key_len, n_keys, copies, max_gap if near else None)


def random_row(n: int, key_ids: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """n random key characters: a synthetic window with no text in it."""
    return key_ids[torch.randint(0, key_ids.numel(), (n,), generator=g)]


def copy_windows(windows, B: int, T: int, key_ids: torch.Tensor, seed: int, frac: float = 1.0,
                 key_len=(32, 96), n_keys: int = 1, copies: int = 2, max_gap: int = None,
                 synthetic: float = 0.0, near_frac: float = 1.0):
    """Batches of the copy mixture: the windows that `windows` (training.random_windows)
    draws, and in a fraction `frac` of them keys planted by plant_window (defaults: one key of
    32-96 digits, twice, at a random distance). synthetic > 0 (experiments/copy_calibration.py only): that
    fraction of windows is first replaced by random key characters, so the copies sit in noise.

    The planting draws from its own generator, seeded by (seed, step), so the windows are
    exactly those the main models see and a resumed run plants the same keys."""
    def batch(step: int, gen: torch.Generator):
        x, y = windows(step, gen)                    # (B, T) each
        seq = torch.cat([x, y[:, -1:]], dim=1)       # (B, T + 1): the whole window
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        if synthetic > 0:
            for b in torch.nonzero(torch.rand(B, generator=g) < synthetic).flatten().tolist():
                seq[b] = random_row(T + 1, key_ids, g)
        for b in torch.nonzero(torch.rand(B, generator=g) < frac).flatten().tolist():
            plant_window(seq[b], g, key_ids, key_len, n_keys, copies, max_gap, near_frac)
        return seq[:, :-1], seq[:, 1:]
    return batch


def key_ids_of(vocab: str, alphabet: str = None) -> torch.Tensor:
    """Token ids of the key characters: the digits of the old copy mixture (alphabet None) or
    KEY_ALPHABETS[alphabet]; every one must be in the vocabulary."""
    chars = KEY_CHARS if alphabet is None else KEY_ALPHABETS[alphabet]
    missing = [c for c in chars if c not in vocab]
    if missing:
        raise CorpusError(f"the keys are drawn from {chars!r}, but the corpus lacks {''.join(missing)!r}; "
                          f"use a corpus that contains each of them at least once")
    return torch.tensor([vocab.index(c) for c in chars])


# ----------------------------------------------------------------------------- the copy family's curriculum

@dataclass(frozen=True)
class CopyRecipe:
    """The copy family's mixture (see the module docstring). Lengths in characters."""
    alphabet: str = "upper"
    warm_frac: float = 1 / 3       # share of the steps in the warm-up phase (segments repeated back to back)
    prefix: int = 32               # warm-up: 1..prefix text characters before the segment
    segment_len: tuple = (8, 24)   # warm-up: distinct letters per segment
    key_len: tuple = (8, 16)       # then: distinct letters per key
    copies: tuple = (2, 3)         # then: copies of each key, drawn per window
    max_gap: int = 200             # then: text characters between consecutive copies, at most
    n_keys: int = 2                # then: keys per window


COPY_RECIPE = CopyRecipe()


def segment_row(row: torch.Tensor, g: torch.Generator, key_ids: torch.Tensor, prefix: int, seg_len) -> int:
    """Warm-up window, in place: keep 1..prefix characters of text, then write one segment of
    distinct key characters over and over to the end. Returns the segment's length."""
    n = row.numel()
    p = int(torch.randint(1, prefix + 1, (1,), generator=g))
    S = int(torch.randint(seg_len[0], seg_len[1] + 1, (1,), generator=g))
    seg = distinct_key(key_ids, S, g)
    reps = (n - p + S - 1) // S
    row[p:] = seg.repeat(reps)[:n - p]
    return S


def curriculum_windows(windows, B: int, T: int, key_ids: torch.Tensor, seed: int, steps: int, recipe: CopyRecipe):
    """Batches of the copy family: step < warm_frac * steps, warm-up windows (segment_row);
    later, each text window gets recipe.n_keys keys of distinct letters, 2-3 copies each at gaps
    up to recipe.max_gap (as far as fits in the window when that is less). The planting draws
    from its own generator seeded by (seed, step), so a resumed run plants the same keys."""
    warm = int(round(recipe.warm_frac * steps))

    def batch(step: int, gen: torch.Generator):
        x, y = windows(step, gen)                    # (B, T) each
        seq = torch.cat([x, y[:, -1:]], dim=1)       # (B, T + 1): the whole window
        g = torch.Generator().manual_seed(seed * 1_000_003 + step + 7)
        k_hi = min(recipe.key_len[1], (T + 1) // recipe.copies[1])  # --quick windows are short
        prefix = min(recipe.prefix, T // 4)
        s_hi = min(recipe.segment_len[1], (T + 1 - prefix) // 2, key_ids.numel())  # at least two copies fit
        for b in range(B):
            if step < warm:
                segment_row(seq[b], g, key_ids, prefix, (min(recipe.segment_len[0], s_hi), s_hi))
                continue
            c = int(torch.randint(recipe.copies[0], recipe.copies[1] + 1, (1,), generator=g))
            plant_keys(seq[b], g, key_ids, (min(recipe.key_len[0], k_hi), k_hi), recipe.n_keys, c,
                       recipe.max_gap, distinct=True)
        return seq[:, :-1], seq[:, 1:]
    return batch


# ----------------------------------------------------------------------------- passkeys outside the training format

KEY_AT = 32  # where a passkey's first copy starts in its window (real text before it)
REPEAT_AT = (2, 6)  # the repeated-letter format: the 0-based key positions of the letter written twice


@dataclass(frozen=True)
class KeyFormat:
    """One format of the passkey: what its first copy and repeat are made of."""
    key_len: int
    what: str
    repeat_at: tuple = None  # 0-based key positions holding the same letter (None: all letters distinct)
    verse: bool = False      # a span of validation text instead of letters


# The copy family trained on keys of 8-16 distinct uppercase letters (COPY_RECIPE); only the first is its own.
FORMATS = {
    "in_format": KeyFormat(10, "10 distinct uppercase letters (the copy curriculum's own format)"),
    "short": KeyFormat(5, "5 distinct uppercase letters (the curriculum's keys have 8-16)"),
    "repeated_letter": KeyFormat(10, "10 uppercase letters, the same one at key positions 2 and 6 (0-based), "
                                     "the other 8 distinct", REPEAT_AT),
    "verse": KeyFormat(16, "16 characters of verse from elsewhere in the validation text", verse=True),
}
LONGEST_KEY = max(f.key_len for f in FORMATS.values())


def letter_pair(f: KeyFormat, key_ids: torch.Tensor, g: torch.Generator) -> tuple:
    """(key, fresh), each (K,): a key of format f and the control's first copy, with the same pattern
    (the same positions repeat a letter) and no letter of the key."""
    pattern = []  # pattern[j]: which of the m distinct letters sits at key position j
    for j in range(f.key_len):
        pattern.append(pattern[f.repeat_at[0]] if f.repeat_at and j == f.repeat_at[1] else len(set(pattern)))
    m = len(set(pattern))
    both = distinct_key(key_ids, 2 * m, g)  # 2m different letters: the key's m, then the fresh copy's m
    idx = torch.tensor(pattern)
    return both[:m][idx], both[m:][idx]


def verse_starts(val_ids: torch.Tensor, vocab: str, n: int) -> torch.Tensor:
    """Starts of the n-character spans of verse in val_ids: each starts a word (after a space or a
    newline), stays inside one line (no newline) and is at least half lowercase letters, which
    leaves out speaker names and headings."""
    ids_of = lambda chars: torch.tensor([i for i, c in enumerate(vocab) if c in chars], dtype=torch.long)
    nl = torch.isin(val_ids, ids_of("\n")).long()                                      # (N,)
    lower = torch.isin(val_ids, ids_of([c for c in vocab if c.islower()])).long()       # (N,)
    # counts over the span val_ids[p:p + n] from cumulative sums: c[p + n] - c[p], for p = 0 .. N - n
    c_nl = torch.cat([torch.zeros(1, dtype=torch.long), nl.cumsum(0)])
    c_low = torch.cat([torch.zeros(1, dtype=torch.long), lower.cumsum(0)])
    ok = (c_nl[n:] - c_nl[:-n] == 0) & (2 * (c_low[n:] - c_low[:-n]) >= n)             # (N - n + 1,)
    ok[1:] &= torch.isin(val_ids[:-n], ids_of(" \n"))  # the character before p ends a word
    ok[0] = False
    return torch.nonzero(ok).flatten()


def verse_pair(val_ids: torch.Tensor, starts: torch.Tensor, n: int, window: tuple, g: torch.Generator) -> tuple:
    """(key, fresh), each (n,): two spans of verse from outside window = (a, b), the positions of
    val_ids the planted window was cut from, that differ at every one of their n places."""
    a, b = window
    outside = starts[(starts + n <= a) | (starts >= b)]
    pick = lambda: int(outside[int(torch.randint(0, outside.numel(), (1,), generator=g))])
    key = val_ids[pick():][:n]
    for _ in range(200):
        fresh = val_ids[pick():][:n]
        if bool((fresh != key).all()):
            return key.clone(), fresh.clone()
    raise ValueError(f"found no span of verse that differs from {key.tolist()} at every place")


def plant_format(val_ids: torch.Tensor, fmt: str, d: int, n: int, key_ids: torch.Tensor, seed: int,
                 verse: torch.Tensor = None) -> tuple:
    """n windows of validation text with a key of format fmt (FORMATS) at KEY_AT and again at
    KEY_AT + d, and their paired controls: the first copy replaced by one of the same format that
    differs from it at every place, nothing else changed. Every format draws the same text windows
    at a distance (the starts leave room for the longest key), so formats differ only in what is
    planted. verse: verse_starts(..., K), for the verse format.
    Returns (planted (n, W + 1), control (n, W + 1), repeat_start), W = KEY_AT + d + K."""
    f = FORMATS[fmt]
    K = f.key_len
    if d < LONGEST_KEY:
        raise ValueError(f"the repeat must start after the longest key ends: d >= {LONGEST_KEY}, got {d}")
    W, rep = KEY_AT + d + K, KEY_AT + d
    g = torch.Generator().manual_seed(seed * 7919 + d)
    starts = torch.randint(0, val_ids.numel() - (KEY_AT + d + LONGEST_KEY) - 1, (n,), generator=g).tolist()
    g_key = torch.Generator().manual_seed((seed * 7919 + d) * 31 + 1 + list(FORMATS).index(fmt))
    planted = torch.stack([val_ids[s:s + W + 1] for s in starts]).clone()  # (n, W + 1)
    control = planted.clone()
    for s, p, c in zip(starts, planted, control):
        key, fresh = verse_pair(val_ids, verse, K, (s, s + W + 1), g_key) if f.verse else letter_pair(f, key_ids, g_key)
        p[KEY_AT:KEY_AT + K], p[rep:rep + K] = key, key
        c[KEY_AT:KEY_AT + K], c[rep:rep + K] = fresh, key
    return planted, control, rep
