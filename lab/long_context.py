"""Does a model USE a long context? The measures long_context_test.py reports, and the
intervals its tables print:

1. context use: the loss on the same target spans as the visible context before them grows
   (context_use), and the effective context it gives (summarize_context);
2. retrieval: a key planted in real text and repeated d characters later, scored against a
   paired control whose first copy is replaced (plant_trials, retrieval, pair_scores);
3. the same passkey in formats the copy family never trained on (format_retrieval), and the
   probe that training.train() runs on the copy family at every evaluation point (passkey_probe).

Intervals: a share of windows (exact match) gets Clopper-Pearson (clopper_pearson, share_ci),
a mean over windows the bootstrap (bootstrap_ci). experiments/copy_calibration.py scores its models with
retrieval too. Per-position loss has one owner, lm_eval.token_losses.
"""
import functools
import math

import torch

from lab import copy_mixture
import tiny_lm
from lab import lm_eval
from lab.copy_mixture import KEY_AT, distinct_key
from lab.eval_common import spread_blocks


# ----------------------------------------------------------------------------- intervals

def bootstrap_ci(x, n: int = 1000, seed: int = 0):
    """95% percentile interval of the mean of x (N,) over resampled rows."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, x.numel(), (n, x.numel()), generator=g)
    means = x[idx].mean(dim=1).sort().values
    return means[int(0.025 * n)].item(), means[int(0.975 * n) - 1].item()


def binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in log space (lgamma) so that large n cannot overflow."""
    # P(X = i) = C(n, i) p^i (1 - p)^(n - i);  log C(n, i) = lgamma(n + 1) - lgamma(i + 1) - lgamma(n - i + 1)
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 1.0 if k >= n else 0.0
    lp, lq, top = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    return min(1.0, sum(math.exp(top - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq)
                        for i in range(0, min(k, n) + 1)))


@functools.lru_cache(maxsize=None, typed=True)  # a redraw asks for one (k, n) many times, 60 steps each
def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple:
    """Clopper-Pearson (exact) interval of a proportion from k successes in n trials, by bisection
    on the binomial CDF (no scipy). 0 of 32 gives (0, 0.1089)."""
    # lower: the p with P(X >= k | p) = a/2 (0 when k = 0); upper: the p with P(X <= k | p) = a/2 (1 when k = n),
    # a = 1 - level. P(X >= k) = 1 - cdf(k - 1) rises with p, cdf(k) falls with p: one root each.
    if not (isinstance(k, int) and isinstance(n, int) and 0 <= k <= n and n > 0 and 0 < level < 1):
        raise ValueError(f"clopper_pearson needs integers 0 <= k <= n, n > 0 and 0 < level < 1, got {k}, {n}, {level}")
    a = (1 - level) / 2

    def root(f):  # f falls from > 0 to < 0 on [0, 1]
        lo, hi = 0.0, 1.0
        for _ in range(60):  # 2^-60: far below the 4 decimals a table prints
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
        return (lo + hi) / 2
    lower = 0.0 if k == 0 else root(lambda p: a - (1 - binom_cdf(k - 1, n, p)))
    upper = 1.0 if k == n else root(lambda p: binom_cdf(k, n, p) - a)
    return lower, upper


def share_ci(share: float, trials: int, level: float = 0.95) -> tuple:
    """Clopper-Pearson interval of a share of windows stored rounded (exact match as 0.8516 of 128):
    the count is recovered as round(share * trials); raises if the share is no count of that many."""
    k = round(share * trials)
    if abs(k - share * trials) > 5e-5 * trials + 1e-9:  # 4 stored decimals cannot be off by more
        raise ValueError(f"{share} of {trials} windows is not a whole number of windows")
    return clopper_pearson(int(k), int(trials), level)


# ----------------------------------------------------------------------------- 1. context use

def context_use(model, val_ids, contexts, T: int, n_spans: int, batch_tokens: int, set_length=None):
    """Loss on the same n_spans target spans of T characters for each visible context c.
    Returns (n_spans, len(contexts)): mean loss over each span's T targets, in nats/char."""
    # evenly spread from the first target with contexts[-1] characters before it to the end
    starts = [contexts[-1] + p for p in spread_blocks(val_ids.numel() - contexts[-1], T, n_spans)]
    cols = []
    for c in contexts:
        if set_length:
            set_length(c + T)
        seqs = torch.stack([val_ids[p - c:p + T + 1] for p in starts])            # (spans, c + T + 1)
        loss = lm_eval.token_losses(model, seqs, max(1, batch_tokens // (c + T)))         # (spans, c + T)
        cols.append(loss[:, c:].mean(dim=1))                                      # targets only: (spans,)
    return torch.stack(cols, dim=1)


def summarize_context(name: str, per_span: torch.Tensor, contexts, short: int, seed: int) -> dict:
    """One CSV row: mean loss per c, the gain from `short` to the longest c with its interval,
    and the effective context."""
    row = {"variant": name, **{f"c{c}": round(per_span[:, k].mean().item(), 4) for k, c in enumerate(contexts)}}
    k_short = contexts.index(short)
    gain = per_span[:, k_short] - per_span[:, -1]  # > 0: the long context helps
    lo, hi = bootstrap_ci(gain, seed=seed)
    effective, means = contexts[0], per_span.mean(dim=0)
    for k in range(1, len(contexts)):
        best = int(means[:k].argmin())  # the best of the shorter contexts: c must beat it, not just its neighbour
        step_lo, _ = bootstrap_ci(per_span[:, best] - per_span[:, k], seed=seed + k)
        if step_lo > 0:
            effective = contexts[k]
    row.update({f"gain_c{short}_to_c{contexts[-1]}": round(gain.mean().item(), 4),
                "gain_lo": round(lo, 4), "gain_hi": round(hi, 4), "effective_context": effective})
    return row


# ----------------------------------------------------------------------------- 2. retrieval

def plant_trials(val_ids, d: int, K: int, n: int, key_ids, seed: int):
    """n windows of real text with a key of K distinct characters at KEY_AT and its repeat at
    KEY_AT + d, and their paired controls: the same windows with the first copy replaced by a
    fresh key (K other characters, none of the key's), so the repeat has nothing to copy from.
    Nothing else differs between a window and its control.
    Returns (planted (n, W + 1), control (n, W + 1), repeat_start), W = KEY_AT + d + K."""
    W = KEY_AT + d + K
    g = torch.Generator().manual_seed(seed * 7919 + d)
    starts = torch.randint(0, val_ids.numel() - W - 1, (n,), generator=g).tolist()
    planted = torch.stack([val_ids[s:s + W + 1] for s in starts]).clone()  # (n, W + 1)
    control, rep = planted.clone(), KEY_AT + d
    for p, c in zip(planted, control):
        both = distinct_key(key_ids, 2 * K, g)  # 2K different characters: the key, then the fresh one
        key, fresh = both[:K], both[K:]
        p[KEY_AT:KEY_AT + K], p[rep:rep + K] = key, key
        c[KEY_AT:KEY_AT + K], c[rep:rep + K] = fresh, key
    return planted, control, rep


def pair_scores(loss, hit, c_loss, c_hit, cols: list, seed: int) -> dict:
    """Copy scores of n planted windows and their controls: loss and hit (n, W) each, as
    lm_eval.token_losses returns them; cols: the columns scored (the targets of key characters
    2..K of the repeat). Exact match: all cols right, a share of windows with its Clopper-Pearson
    interval; per-character accuracy and copy gain (control loss minus planted loss, nats/char):
    means over windows with bootstrap intervals (the letters of one key are not independent)."""
    gain = c_loss[:, cols].mean(1) - loss[:, cols].mean(1)                         # (n,)
    exact, per_char = hit[:, cols].all(1), hit[:, cols].float().mean(1)            # (n,) each
    lo, hi = clopper_pearson(int(exact.sum()), exact.numel())
    row = {"exact": exact.float().mean().item(), "exact_lo": lo, "exact_hi": hi}
    for name, x, k in (("per_char", per_char, 2), ("gain", gain, 3)):
        lo, hi = bootstrap_ci(x, seed=seed + k)
        row.update({name: x.mean().item(), f"{name}_lo": lo, f"{name}_hi": hi})
    row.update({"loss_repeat": loss[:, cols].mean().item(), "loss_control": c_loss[:, cols].mean().item(),
                "per_char_control": c_hit[:, cols].float().mean().item()})
    return row


def retrieval(model, val_ids, distances, K: int, trials, key_ids, seed: int, batch_tokens: int,
              set_length=None) -> list:
    """Per distance d: exact match, per-character accuracy and copy gain of the repeat, each with
    a 95% interval over trials (pair_scores: Clopper-Pearson for exact match, the
    bootstrap for the other two). trials: an int, or a function d -> int.
    Scored: characters 2..K of the repeat (the first cannot be guessed), the targets of positions
    rep .. rep + K - 2. Exact match: the most likely next character is right at all K - 1 of them
    (the same as greedy decoding of the key, since every earlier character then is right too).
    Copy gain: the repeat's loss in the control window minus its loss in the planted one (nats/char)."""
    out = []
    for d in distances:
        n = trials(d) if callable(trials) else trials
        planted, control, rep = plant_trials(val_ids, d, K, n, key_ids, seed)
        if set_length:
            set_length(planted.shape[1] - 1)
        bs = max(1, batch_tokens // planted.shape[1])
        loss, hit = lm_eval.token_losses(model, planted, bs, hits=True)       # (n, W) each
        c_loss, c_hit = lm_eval.token_losses(model, control, bs, hits=True)   # (n, W) each
        cols = list(range(rep, rep + K - 1))  # the targets of characters 2..K of the repeat
        out.append({"distance": d, "trials": n, **pair_scores(loss, hit, c_loss, c_hit, cols, seed + d)})
    return out


# ----------------------------------------------------------------------------- 3. passkey formats; the training probe

def format_retrieval(model, val_ids, vocab: str, fmt: str, distances, trials, key_ids, seed: int,
                     batch_tokens: int, set_length=None) -> list:
    """The passkey in format fmt (copy_mixture.FORMATS) at each distance d: one row of pair_scores
    per d. trials: an int, or a function d -> int. Scored: key characters 2..K of the repeat (the
    first cannot be guessed). The repeated-letter format also reports the character after the
    letter's second occurrence ("successor": a lookup of what followed that letter before would
    give what followed its first occurrence) apart from the other scored characters ("other")."""
    f = copy_mixture.FORMATS[fmt]
    K = f.key_len
    verse = copy_mixture.verse_starts(val_ids, vocab, K) if f.verse else None
    out = []
    for d in distances:
        n = trials(d) if callable(trials) else trials
        planted, control, rep = copy_mixture.plant_format(val_ids, fmt, d, n, key_ids, seed, verse)  # (n, W + 1)
        if set_length:
            set_length(planted.shape[1] - 1)
        bs = max(1, batch_tokens // planted.shape[1])
        loss, hit = lm_eval.token_losses(model, planted, bs, hits=True)       # (n, W) each
        c_loss, c_hit = lm_eval.token_losses(model, control, bs, hits=True)   # (n, W) each
        cols = list(range(rep, rep + K - 1))  # column t predicts window position t + 1: key characters 2..K
        row = {"format": fmt, "distance": d, "trials": n, "scored": len(cols),
               **pair_scores(loss, hit, c_loss, c_hit, cols, seed + d)}
        if f.repeat_at:
            succ = rep + f.repeat_at[1]  # predicts key position repeat_at[1] + 1 from the second occurrence
            right = hit[:, succ]                                                       # (n,)
            other = hit[:, [c for c in cols if c != succ]].float().mean(1)             # (n,)
            s_lo, s_hi = clopper_pearson(int(right.sum()), n)
            o_lo, o_hi = bootstrap_ci(other, seed=seed + d + 4)
            row.update({"successor": right.float().mean().item(), "successor_lo": s_lo, "successor_hi": s_hi,
                        "other": other.mean().item(), "other_lo": o_lo, "other_hi": o_hi})
        out.append(row)
    return out


def passkey_probe(val_ids, key_ids, d_max: int = 200, K: int = 10, trials: int = 32, seed: int = 1):
    """A probe for training.train(): the passkey at d = 32, 128 and d_max (those below
    d_max), with its own seed so the probe's windows are not the reported test's.
    Returns model -> {"d<d>": [per-character accuracy, exact match]}."""
    ds = sorted({d for d in (32, 128) if d < d_max} | {d_max})

    def probe(model):
        rows = retrieval(model, val_ids, ds, K, trials, key_ids, seed, batch_tokens=16384)
        return {f"d{r['distance']}": [round(r["per_char"], 4), round(r["exact"], 4)] for r in rows}
    return probe
