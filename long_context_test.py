"""Does a model USE the long context, or only survive it? Two measures that perplexity of
non-overlapping windows cannot give (extrapolation_test.py gives that one).

1. Context use (fixed targets). The same 256-character target spans, spread over the whole
   validation text, are scored again and again while only the visible context before them
   grows: c = 0, 64, 192, ..., 3840 characters. Loss over the targets only. A model that uses
   long context gets lower loss at c = 3840 than at c = 192; flat means it ignores what is
   further back; rising means the longer window breaks it. "Effective context" is the
   largest c whose loss is below that of every shorter context by more than the 95%
   bootstrap interval of the difference (resampling target spans).

2. Retrieval at distance (a character-level passkey, the idea of the YaRN repository's
   passkey test and of Kazemnejad et al. 2023's copy tasks, on real text). In a validation
   window, a random key of K digits is planted at position 32 and again d
   characters later. Score characters 2..K of the repeat (the first is unguessable) against
   an unplanted control: another random key of the same length written 4 characters before
   the repeat, at nearly the same position, seen once only. Copy gain = control loss minus
   repeat loss (nats/char); exact match = greedy decoding reproduces characters 2..K.
   Models trained on plain Shakespeare never needed to copy; the copy family
   (`train_compare.py --variants copy`) was trained so that copying pays.

Scaled RoPE rows (rope+X) set the factor from the total window length, as in the main table.

    python long_context_test.py                 # every checkpoint in runs/main
    python long_context_test.py --quick         # after python train_compare.py --quick
"""
import argparse
import csv
import io
import json
import resource
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

import tiny_lm
from extrapolation_test import (SCALINGS, add_common_flags, fail, load_checked, scaling_at, spread_blocks,
                                token_losses, update_readme)
from train_compare import FINETUNES, VARIANTS, TrainConfig, is_copy, key_ids_of

KEY_AT = 32      # where the first copy of the key starts (real text before it)
CONTROL_GAP = 4  # text characters between the control key and the repeat


def order_of(name: str) -> int:
    base = name.split("+")[0]
    known = list(VARIANTS) + list(FINETUNES)
    return known.index(base) if base in known else len(known)


def bootstrap_ci(x: torch.Tensor, n: int = 1000, seed: int = 0):
    """95% percentile interval of the mean of x (N,) over resampled rows."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, x.numel(), (n, x.numel()), generator=g)
    means = x[idx].mean(dim=1).sort().values
    return means[int(0.025 * n)].item(), means[int(0.975 * n) - 1].item()


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
        loss = token_losses(model, seqs, max(1, batch_tokens // (c + T)))         # (spans, c + T)
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
    """n windows of real text with a key at KEY_AT, its repeat at KEY_AT + d and a control key
    just before the repeat. Returns (seqs (n, W + 1), repeat_start, control_start)."""
    W = KEY_AT + d + K
    g = torch.Generator().manual_seed(seed * 7919 + d)
    starts = torch.randint(0, val_ids.numel() - W - 1, (n,), generator=g).tolist()
    seqs = torch.stack([val_ids[s:s + W + 1] for s in starts]).clone()  # (n, W + 1)
    rep, ctl = KEY_AT + d, KEY_AT + d - CONTROL_GAP - K
    for row in seqs:
        key, control = (key_ids[torch.randint(0, key_ids.numel(), (K,), generator=g)] for _ in range(2))
        row[KEY_AT:KEY_AT + K] = key
        row[ctl:ctl + K] = control
        row[rep:rep + K] = key
    return seqs, rep, ctl


def retrieval(model, val_ids, distances, K: int, trials: int, key_ids, seed: int, batch_tokens: int,
              set_length=None) -> list:
    """Per distance: copy gain and exact-match rate of the repeat against the control."""
    out = []
    for d in distances:
        seqs, rep, ctl = plant_trials(val_ids, d, K, trials, key_ids, seed)
        if set_length:
            set_length(seqs.shape[1] - 1)
        loss, hit = token_losses(model, seqs, max(1, batch_tokens // seqs.shape[1]), hits=True)  # (n, W)
        # characters 2..K of a key starting at s are targets of positions s .. s + K - 2
        rep_loss, ctl_loss = loss[:, rep:rep + K - 1].mean(1), loss[:, ctl:ctl + K - 1].mean(1)  # (n,)
        gain = ctl_loss - rep_loss
        lo, hi = bootstrap_ci(gain, seed=seed + d)
        exact = hit[:, rep:rep + K - 1].all(1).float()
        e_lo, e_hi = bootstrap_ci(exact, seed=seed + d + 1)
        out.append({"distance": d, "gain": gain.mean().item(), "gain_lo": lo, "gain_hi": hi,
                    "loss_repeat": rep_loss.mean().item(), "loss_control": ctl_loss.mean().item(),
                    "exact": exact.mean().item(), "exact_lo": e_lo, "exact_hi": e_hi,
                    "exact_control": hit[:, ctl:ctl + K - 1].all(1).float().mean().item()})
    return out


# ----------------------------------------------------------------------------- command line

def int_list(text: str, flag: str) -> list:
    try:
        vals = [int(x) for x in text.split(",")]
    except ValueError:
        fail(f"{flag} must be comma-separated integers, got {text!r}")
    if any(b <= a for a, b in zip(vals, vals[1:])) or vals[0] < 0:
        fail(f"{flag} must be non-negative and strictly increasing, got {text}")
    return vals


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt-dir", default=None, help="checkpoints from train_compare.py (default runs/main, "
                                                    "or runs/quick with --quick)")
    p.add_argument("--variants", default=None, help="comma-separated checkpoints (default: every one found)")
    p.add_argument("--only", choices=["context", "retrieval"], default=None, help="run one of the two measures")
    p.add_argument("--contexts", default=None, help="visible contexts c before the targets, increasing "
                                                    "(default 0,64,192,448,960,1984,3840; 0,16,48,112 with --quick)")
    p.add_argument("--target-len", type=int, default=None, help="characters per target span (default 256; 32 "
                                                                "with --quick)")
    p.add_argument("--spans", type=int, default=None, help="target spans, spread over the validation text "
                                                           "(default 32; 4 with --quick)")
    p.add_argument("--short", type=int, default=None, help="one of --contexts: the gain of the longest context is "
                                                           "measured from it (default 192; 16 with --quick)")
    p.add_argument("--distances", default=None, help="distances d between the key and its repeat, increasing "
                                                     "(default 32,64,128,200,512,1024,2048,3900; 24,48,96 with "
                                                     "--quick)")
    p.add_argument("--key-len", type=int, default=10, help="letters per key K (default 10)")
    p.add_argument("--trials", type=int, default=None, help="planted windows per distance (default 32; 4 with "
                                                            "--quick)")
    p.add_argument("--scalings", default="linear,ntk,ntk(4s),ntk(16s),yarn,llama3",
                   help="training-free scalings applied to rope (context use) and rope_copy (retrieval), one "
                        "row each; dynamic is left out by default because a whole window equals ntk")
    p.add_argument("--seed", type=int, default=0, help="seed for keys, windows and the bootstrap")
    add_common_flags(p)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    q = args.quick
    ckpt_dir = Path(args.ckpt_dir or ("runs/quick" if q else "runs/main"))
    results = Path(args.results) if args.results else (ckpt_dir / "results" if q else Path("results"))
    make = "python train_compare.py" + (" --quick" if q else "")
    contexts = int_list(args.contexts or ("0,16,48,112" if q else "0,64,192,448,960,1984,3840"), "--contexts")
    distances = int_list(args.distances or ("24,48,96" if q else "32,64,128,200,512,1024,2048,3900"), "--distances")
    T, n_spans, trials = args.target_len or (32 if q else 256), args.spans or (4 if q else 32), args.trials or (4 if q else 32)
    K, short = args.key_len, args.short if args.short is not None else (16 if q else 192)
    if short not in contexts[:-1]:
        fail(f"--short must be one of the --contexts below the longest, got {short} (contexts {contexts})")
    if min(T, n_spans, trials) < 1 or K < 2:
        fail(f"--target-len, --spans and --trials must be positive and --key-len at least 2, "
             f"got {T}, {n_spans}, {trials}, {K}")
    if distances[0] < 2 * K + CONTROL_GAP:
        fail(f"the shortest distance must leave room for the control key: at least 2 x key length + "
             f"{CONTROL_GAP} = {2 * K + CONTROL_GAP}, got {distances[0]}")
    scalings = [s for s in args.scalings.split(",") if s]
    if set(scalings) - set(SCALINGS):
        fail(f"unknown scaling(s) {','.join(sorted(set(scalings) - set(SCALINGS)))}; known: {','.join(SCALINGS)}")
    known = list(VARIANTS) + list(FINETUNES)
    if args.variants:
        names = args.variants.split(",")
        bad = [n for n in names if n not in known]
        if bad:
            fail(f"unknown variant(s) {','.join(bad)}; known: {','.join(known)}")
        missing = [n for n in names if not (ckpt_dir / f"{n}.pt").exists()]
        if missing:
            fail(f"no checkpoint for {','.join(missing)} in {ckpt_dir}/; run `{make} --variants {','.join(missing)}`")
    else:
        names = [n for n in known if (ckpt_dir / f"{n}.pt").exists()]
        if not names:
            fail(f"no checkpoints in {ckpt_dir}/; run `{make}` first")
    try:
        device = tiny_lm.pick_device(args.device)
        train_text, val_text, vocab = tiny_lm.load_corpus(args.corpus)
    except (ValueError, tiny_lm.CorpusError) as e:
        fail(str(e))
    val_ids = tiny_lm.CharTokenizer(vocab).encode(val_text)
    fingerprint = tiny_lm.corpus_fingerprint(train_text + val_text)
    longest = max(contexts[-1] + T, KEY_AT + distances[-1] + K)
    if contexts[-1] + n_spans * T + 1 > val_ids.numel() or KEY_AT + distances[-1] + K + 2 > val_ids.numel():
        fail(f"the validation text has {val_ids.numel():,} characters, too few for a context of {contexts[-1]} "
             f"plus {T} targets or a distance of {distances[-1]}; use smaller --contexts / --distances")
    try:
        key_ids = key_ids_of(vocab) if args.only != "context" else None
    except tiny_lm.CorpusError as e:
        fail(f"{e}; or use --only context")

    # (row, checkpoint, scaling or None, measures)
    jobs = []
    for n in names:
        measures = {"retrieval"} if is_copy(n) else {"context", "retrieval"}
        jobs.append((n, n, None, measures))
        if n in ("rope", "rope_copy"):
            jobs += [(f"{n}+{s}", n, s, {"retrieval"} if n == "rope_copy" else {"context"}) for s in scalings]
    if args.only:
        jobs = [(r, n, s, m & {args.only}) for r, n, s, m in jobs]
    jobs = sorted([j for j in jobs if j[3]], key=lambda j: order_of(j[0]))

    ctx_rows, ret_rows, train_lens, t0, row_seconds, per_span_all = [], [], set(), time.perf_counter(), {}, {}
    for row, name, scaling, measures in tqdm(jobs, desc="checkpoints", file=sys.stderr):
        t_row = time.perf_counter()
        model, ck = load_checked(ckpt_dir / f"{name}.pt", device, make, vocab, fingerprint)
        L_train = ck["extra"].get("train_config", {}).get("seq_len", TrainConfig.seq_len)
        if model.cfg.pos == "learned" and longest > model.cfg.max_len:
            fail(f"{name}: windows up to {longest} characters are beyond its learned table ({model.cfg.max_len} "
                 f"rows); use smaller --contexts / --distances")
        train_lens.add(L_train if name not in FINETUNES else L_train // FINETUNES[name]["seq_len_mult"])
        set_length = None if scaling is None else (lambda L: model.set_rope_scaling(scaling_at(scaling, L, L_train)))
        family = "copy" if is_copy(name) else "text"
        if "context" in measures:
            per_span = context_use(model, val_ids, contexts, T, n_spans, args.batch_tokens, set_length)
            ctx_rows.append(summarize_context(row, per_span, contexts, short, args.seed))
            per_span_all[row] = [[round(v, 5) for v in r] for r in per_span.tolist()]
        if "retrieval" in measures:
            for r in retrieval(model, val_ids, distances, K, trials, key_ids, args.seed, args.batch_tokens,
                               set_length):
                ret_rows.append({"variant": row, "family": family, "train_len": L_train, **r})
        row_seconds[row] = round(time.perf_counter() - t_row, 1)
        del model
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2
    meta = {"contexts": contexts, "target_len": T, "spans": n_spans, "short": short, "distances": distances,
            "key_len": K, "trials": trials, "seed": args.seed, "checkpoints": str(ckpt_dir),
            "seconds": round(time.perf_counter() - t0, 1), "row_seconds": row_seconds, "peak_rss_gib": round(peak_gb, 3),
            "train_len": min(train_lens), "torch": torch.__version__}
    results.mkdir(parents=True, exist_ok=True)
    if ctx_rows:
        write_context(results, ctx_rows, meta, per_span_all)
    if ret_rows:
        write_retrieval(results, ret_rows, meta)
    here = Path(__file__).resolve().parent
    if results.resolve() == (here / "results").resolve():  # the README shows exactly these tables
        for f, rows in (("context_use", ctx_rows), ("retrieval", ret_rows)):
            if rows:
                update_readme(here / "README.md", (results / f"{f}.md").read_text(encoding="utf-8"),
                              f"<!-- {f}-table:start -->", f"<!-- {f}-table:end -->")
    print(f"{meta['seconds']:.0f} s, peak resident memory {peak_gb:.2f} GiB; wrote "
          + ", ".join(f"{results}/{f}" for f, rows in (("context_use.*", ctx_rows), ("retrieval.*", ret_rows)) if rows))
    return 0


# ----------------------------------------------------------------------------- outputs

def csv_text(rows) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def write_context(results: Path, rows, meta, per_span: dict) -> None:
    tiny_lm.atomic_write_text(results / "context_use.csv", csv_text(rows))
    tiny_lm.atomic_write_text(results / "context_use.json", json.dumps(
        {"meta": meta, "rows": rows, "per_span_loss": per_span}, indent=1))
    cs, short = meta["contexts"], meta["short"]
    head = ["variant"] + [f"c={c}" for c in cs] + [f"gain c={short} -> {cs[-1]} [95% CI]", "effective context"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        gain = f"{r[f'gain_c{short}_to_c{cs[-1]}']:+.3f} [{r['gain_lo']:+.3f}, {r['gain_hi']:+.3f}]"
        lines.append("| " + " | ".join([r["variant"]] + [f"{r[f'c{c}']:.3f}" for c in cs] +
                                       [gain, str(r["effective_context"])]) + " |")
    lines += ["", f"Loss in nats/char on the same {meta['spans']} target spans of {meta['target_len']} characters, "
              f"spread over the validation text, with c characters of context visible before them. gain > 0: "
              f"the context beyond {short} characters lowers the loss. Effective context: the largest c whose loss is "
              f"below that of every shorter context by more than the 95% bootstrap interval of the difference "
              f"(resampling spans)."]
    tiny_lm.atomic_write_text(results / "context_use.md", "\n".join(lines) + "\n")
    plot_context(results, rows, meta)


def write_retrieval(results: Path, rows, meta) -> None:
    ds = meta["distances"]
    wide = {}
    for r in rows:
        w = wide.setdefault(r["variant"], {"variant": r["variant"], "family": r["family"]})
        w[f"gain_{r['distance']}"] = round(r["gain"], 4)
    for r in rows:
        wide[r["variant"]][f"exact_{r['distance']}"] = round(r["exact"], 4)
    tiny_lm.atomic_write_text(results / "retrieval.csv", csv_text(list(wide.values())))
    tiny_lm.atomic_write_text(results / "retrieval.json", json.dumps({"meta": meta, "rows": rows}, indent=1))
    head = ["variant", "trained on"] + [f"d={d}" for d in ds]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    by = {}
    for r in rows:
        by.setdefault(r["variant"], []).append(r)
    for name, rs in by.items():
        cells = [f"{r['gain']:+.2f} [{r['gain_lo']:+.2f}, {r['gain_hi']:+.2f}] / {100 * r['exact']:.0f}%" for r in rs]
        lines.append("| " + " | ".join([name, "copy mixture" if rs[0]["family"] == "copy" else "text"] + cells) + " |")
    lines += ["", f"Each cell: copy gain in nats/char over characters 2..{meta['key_len']} of a repeated random key "
              f"(control-key loss minus repeat loss) [95% bootstrap interval] / greedy exact match of those characters; "
              f"{meta['trials']} planted windows per distance d. Windows are {32} + d + {meta['key_len']} characters long."]
    tiny_lm.atomic_write_text(results / "retrieval.md", "\n".join(lines) + "\n")
    plot_retrieval(results, by, meta)


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_context(results: Path, rows, meta) -> None:
    plt = _plt()
    cs = meta["contexts"]
    fig, ax = plt.subplots(figsize=(10, 6))
    colors = plt.get_cmap("tab20").colors
    for i, r in enumerate(rows):
        style = "--" if "+" in r["variant"] else ("-." if r["variant"] in FINETUNES else "-")
        ax.plot(cs, [r[f"c{c}"] for c in cs], style, marker="o", ms=3, color=colors[i % 20], label=r["variant"])
    if meta["train_len"]:
        ax.axvline(meta["train_len"], color="grey", ls=":", lw=1, label=f"context = training length")
    ax.set_xscale("symlog", linthresh=max(1, cs[1] if len(cs) > 1 else 1))
    ax.set_xlim(-0.1 * max(1, cs[1] if len(cs) > 1 else 1), cs[-1] * 1.15)
    ax.set_xticks(cs, [str(c) for c in cs])
    ax.set_xlabel("visible context before the targets (characters)")
    ax.set_ylabel(f"loss on the same {meta['target_len']}-character targets (nats/char)")
    ax.set_title("Context use: the same targets, more and more context")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    lo = min(min(r[f"c{c}"] for c in cs) for r in rows)
    ax.set_ylim(lo - 0.05, min(ax.get_ylim()[1], lo + 1.2))  # curves that leave the top are broken
    fig.tight_layout()
    fig.savefig(results / "context_use.png", dpi=120)
    plt.close(fig)


def plot_retrieval(results: Path, by: dict, meta) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(15, 5.5))
    colors = plt.get_cmap("tab20").colors
    for i, (name, rs) in enumerate(by.items()):
        ds = [r["distance"] for r in rs]
        style = "-" if rs[0]["family"] == "copy" else ":"
        for ax, key in zip(axes, ("gain", "exact")):
            ax.plot(ds, [r[key] for r in rs], style, marker="o", ms=3, color=colors[i % 20], label=name)
    for ax in axes:
        if meta["train_len"]:
            ax.axvline(meta["train_len"], color="grey", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_xlabel("distance d between the key and its repeat (characters)")
        ax.grid(alpha=0.3, which="both")
    axes[0].axhline(0, color="black", lw=0.8)
    axes[0].set_ylabel("copy gain (nats/char): control loss - repeat loss")
    axes[0].set_title("Retrieval at distance: does the repeat get cheaper?")
    axes[1].set_ylim(-0.05, 1.05)  # the full scale: a model that copies reaches 1
    axes[1].set_ylabel("greedy exact match of characters 2..K")
    axes[1].set_title("... and is it reproduced exactly? (solid: copy family, dotted: text-trained)")
    axes[1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(results / "retrieval.png", dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
