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
    python long_context_test.py --redraw        # tables and figures from results/context_use.json, retrieval.json

A run of some checkpoints merges its rows into the results already there (same settings only).
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

import tiny_lm
from copy_mixture import key_ids_of
from eval_common import (add_common_flags, check_scalings, csv_text, eval_dirs, fail, find_checkpoints, int_list,
                         is_repo_results, length_setter, load_checked, load_eval_data, merge_rows, peak_rss_gib,
                         read_json, spread_blocks, sync_glance, sync_table, train_len_of)
from variants import FINETUNES, is_copy, order_of

KEY_AT = 32      # where the first copy of the key starts (real text before it)
CONTROL_GAP = 4  # text characters between the control key and the repeat


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
        loss = tiny_lm.token_losses(model, seqs, max(1, batch_tokens // (c + T)))         # (spans, c + T)
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
        loss, hit = tiny_lm.token_losses(model, seqs, max(1, batch_tokens // seqs.shape[1]), hits=True)  # (n, W)
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

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt-dir", default=None, help="checkpoints from train_compare.py (default runs/main; "
                                                    "runs/quick with --quick, runs/preview with --preset preview)")
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


# ----------------------------------------------------------------------------- the run

def settings(args) -> dict:
    """The measures' settings for these arguments (--quick shrinks them); exits on bad values."""
    q = args.quick
    s = {"contexts": int_list(args.contexts or ("0,16,48,112" if q else "0,64,192,448,960,1984,3840"), "--contexts"),
         "distances": int_list(args.distances or ("24,48,96" if q else "32,64,128,200,512,1024,2048,3900"),
                               "--distances"),
         "T": args.target_len or (32 if q else 256), "spans": args.spans or (4 if q else 32),
         "trials": args.trials or (4 if q else 32), "K": args.key_len,
         "short": args.short if args.short is not None else (16 if q else 192),
         "scalings": check_scalings(args.scalings)}
    if s["short"] not in s["contexts"][:-1]:
        fail(f"--short must be one of the --contexts below the longest, got {s['short']} (contexts {s['contexts']})")
    if min(s["T"], s["spans"], s["trials"]) < 1 or s["K"] < 2:
        fail(f"--target-len, --spans and --trials must be positive and --key-len at least 2, "
             f"got {s['T']}, {s['spans']}, {s['trials']}, {s['K']}")
    if s["distances"][0] < 2 * s["K"] + CONTROL_GAP:
        fail(f"the shortest distance must leave room for the control key: at least 2 x key length + "
             f"{CONTROL_GAP} = {2 * s['K'] + CONTROL_GAP}, got {s['distances'][0]}")
    return s


def make_jobs(names, scalings, only) -> list:
    """(row, checkpoint name, scaling or None, measures) in table order: text models get both
    measures, the copy family retrieval only; scaled rows: rope (context use), rope_copy (retrieval)."""
    jobs = []
    for n in names:
        jobs.append((n, n, None, {"retrieval"} if is_copy(n) else {"context", "retrieval"}))
        if n in ("rope", "rope_copy"):
            jobs += [(f"{n}+{s}", n, s, {"retrieval"} if n == "rope_copy" else {"context"}) for s in scalings]
    if only:
        jobs = [(r, n, s, m & {only}) for r, n, s, m in jobs]
    return sorted([j for j in jobs if j[3]], key=lambda j: order_of(j[0]))


def measure_row(job, data, s, args, make, out) -> None:
    """Run one row's measures; appends to out["context"], out["per_span"], out["retrieval"]."""
    row, name, scaling, measures = job
    device, val_ids, vocab, fingerprint, key_ids, longest = data
    model, ck = load_checked(out["ckpt_dir"] / f"{name}.pt", device, make, vocab, fingerprint, longest=longest)
    L_train = train_len_of(ck)
    out["train_lens"].add(L_train if name not in FINETUNES else L_train // FINETUNES[name]["seq_len_mult"])
    set_length = length_setter(model, scaling, L_train)
    if "context" in measures:
        per_span = context_use(model, val_ids, s["contexts"], s["T"], s["spans"], args.batch_tokens, set_length)
        out["context"].append(summarize_context(row, per_span, s["contexts"], s["short"], args.seed))
        out["per_span"][row] = [[round(v, 5) for v in r] for r in per_span.tolist()]
    if "retrieval" in measures:
        for r in retrieval(model, val_ids, s["distances"], s["K"], s["trials"], key_ids, args.seed, args.batch_tokens,
                           set_length):
            out["retrieval"].append({"variant": row, "family": "copy" if is_copy(name) else "text",
                                     "train_len": L_train, **r})


def main(argv=None) -> int:
    args = parse_args(argv)
    ckpt_dir, results, make = eval_dirs(args)
    if args.redraw:
        return redraw(results)
    names = find_checkpoints(ckpt_dir, args.variants, make)
    s = settings(args)
    device, val_ids, vocab, fingerprint = load_eval_data(args)
    cs, ds, T, K = s["contexts"], s["distances"], s["T"], s["K"]
    if cs[-1] + s["spans"] * T + 1 > val_ids.numel() or KEY_AT + ds[-1] + K + 2 > val_ids.numel():
        fail(f"the validation text has {val_ids.numel():,} characters, too few for a context of {cs[-1]} "
             f"plus {T} targets or a distance of {ds[-1]}; use smaller --contexts / --distances")
    try:
        key_ids = key_ids_of(vocab) if args.only != "context" else None
    except tiny_lm.CorpusError as e:
        fail(f"{e}; or use --only context")
    data = (device, val_ids, vocab, fingerprint, key_ids, max(cs[-1] + T, KEY_AT + ds[-1] + K))
    out = {"ckpt_dir": ckpt_dir, "context": [], "per_span": {}, "retrieval": [], "train_lens": set()}
    t0, row_seconds = time.perf_counter(), {}
    for job in tqdm(make_jobs(names, s["scalings"], args.only), desc="checkpoints", file=sys.stderr):
        t_row = time.perf_counter()
        measure_row(job, data, s, args, make, out)
        row_seconds[job[0]] = round(time.perf_counter() - t_row, 1)
    meta = {"contexts": cs, "target_len": T, "spans": s["spans"], "short": s["short"], "distances": ds,
            "key_len": K, "trials": s["trials"], "seed": args.seed, "checkpoints": str(ckpt_dir),
            "seconds": round(time.perf_counter() - t0, 1), "row_seconds": row_seconds,
            "peak_rss_gib": round(peak_rss_gib(), 3), "train_len": min(out["train_lens"]), "torch": torch.__version__}
    written = save(results, meta, out)
    print(f"{meta['seconds']:.0f} s, peak resident memory {meta['peak_rss_gib']:.2f} GiB; wrote "
          + ", ".join(f"{results}/{f}.*" for f in written))
    return 0


# ----------------------------------------------------------------------------- outputs

# The settings two runs must share for their rows to stand in one table.
SAME = {"context_use": ("contexts", "target_len", "spans", "short", "seed"),
        "retrieval": ("distances", "key_len", "trials", "seed")}


def save(results: Path, meta: dict, out: dict) -> list:
    """Merge this run's rows into results/context_use.json and retrieval.json (rows of other
    checkpoints stay), write them, and redraw their tables and figures. Returns the names written."""
    new = {"context_use": (out["context"], out["per_span"]), "retrieval": (out["retrieval"], None)}
    results.mkdir(parents=True, exist_ok=True)
    written = []
    for name, (rows, per_span) in new.items():
        if not rows:
            continue
        old = read_json(results / f"{name}.json")
        m = dict(meta)
        if old:
            changed = [k for k in SAME[name] if old["meta"].get(k) != meta[k]]
            if changed:
                fail(f"{results}/{name}.json was made with other {', '.join(changed)}; use the same settings to add "
                     f"rows to it, or another --results")
            rows = merge_rows(old["rows"], rows)
            m["row_seconds"] = {**old["meta"].get("row_seconds", {}), **meta["row_seconds"]}
            m["train_len"] = min(old["meta"]["train_len"], meta["train_len"])
            per_span = None if per_span is None else {**old["per_span_loss"], **per_span}
        data = {"meta": m, "rows": rows}
        if per_span is not None:
            data["per_span_loss"] = {r["variant"]: per_span[r["variant"]] for r in rows}
        tiny_lm.atomic_write_text(results / f"{name}.json", json.dumps(data, indent=1))
        written.append(name)
    redraw(results, written)
    return written


def redraw(results: Path, which=("context_use", "retrieval")) -> int:
    """The CSV, markdown and figure of each measure from its JSON alone; the tables in the README
    and docs/ follow when results/ is the repository's."""
    import plots
    found = [n for n in which if (results / f"{n}.json").exists()]
    if not found:
        fail(f"no {results}/context_use.json or retrieval.json to redraw from; run python long_context_test.py first")
    for name in found:
        data = read_json(results / f"{name}.json")
        csv_rows, table = (context_tables if name == "context_use" else retrieval_tables)(data["rows"], data["meta"])
        tiny_lm.atomic_write_text(results / f"{name}.csv", csv_text(csv_rows))
        tiny_lm.atomic_write_text(results / f"{name}.md", table)
        getattr(plots, name)(results / f"{name}.png", data["rows"], data["meta"])
        sync_table(name, table, results)
    if is_repo_results(results):
        sync_glance(results)
    return 0


def context_tables(rows, meta):
    """(CSV rows, markdown) of the context-use table."""
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
    return rows, "\n".join(lines) + "\n"


def retrieval_tables(rows, meta):
    """(CSV rows: one per variant, gain and exact match per distance; markdown) of the retrieval table."""
    ds = meta["distances"]
    wide = {}
    for r in rows:
        w = wide.setdefault(r["variant"], {"variant": r["variant"], "family": r["family"]})
        w[f"gain_{r['distance']}"] = round(r["gain"], 4)
    for r in rows:
        wide[r["variant"]][f"exact_{r['distance']}"] = round(r["exact"], 4)
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
              f"{meta['trials']} planted windows per distance d. Windows are {KEY_AT} + d + {meta['key_len']} "
              f"characters long."]
    return list(wide.values()), "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
