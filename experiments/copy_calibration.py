"""Which copy mixtures make a tiny model copy within the main recipe's 1,100 steps, or within
4x that (the *_4x rows, 4,400 steps)? The calibration behind the copy family's curriculum
(copy_mixture.CopyRecipe; docs/long_context.md, "Calibrating the copy mixture").

It trains RoPE (by default) once per mixture (MIXTURES), with the recipe of train_compare.py
(same learning rate, schedule, windows), the keys planted by copy_mixture.plant_window, and
every 100 steps probes:

  own gain   on 32 validation windows planted like the training windows: the loss of
             characters 2..K of the first copy of each key minus that of its later copies
             (nats/char). A model that copies drives later copies toward 0 nats; one that
             does not pays for them what it pays for the first copy (gain 0).
  retrieval  long_context.retrieval(), the passkey of the retrieval table: a 10-letter
             key at 32 and again at 32 + d (d = 32, 128, 200), copy gain over the paired
             control window and greedy exact match, 32 trials each.

Copying an arbitrary string needs an induction circuit: one head writes "the character
before me" into each position, a second head matches that against the current character
and copies what follows (Olsson et al. 2022, "In-context learning and induction heads").
It appears abruptly after a plateau; this script measures whether the plateau ends inside
our budget.

    python experiments/copy_calibration.py                        # every mixture: ~5 min each, ~19 for *_4x (92 min, 2 cores)
    python experiments/copy_calibration.py --mixtures synthetic   # one of them
    python experiments/copy_calibration.py --quick                # smoke run under runs/quick/
    python experiments/copy_calibration.py --redraw               # table and figure from results/copy_calibration.json

Each finished mixture's record and final weights stay in runs/copy_calibration/ (a rerun reuses
them); its row and curves are merged into results/copy_calibration.json, so a run of some
mixtures keeps the rows of the others. The rows committed there were probed with another passkey
(keys from each mixture's own alphabet against an unplanted control key, its table says so);
records of the two probes are never merged, so a new run writes to another --results.
"""
import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import sys as _sys
from pathlib import Path as _Path
_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))  # run as python experiments/NAME.py: the repository's modules

import torch
from tqdm import tqdm

from lab import cli
import tiny_lm
from lab import atomic
from lab import corpora
from lab import devices
from lab import lm_eval
from lab.copy_mixture import COPY_RECIPE, KEY_CHARS, copy_windows, key_ids_of, plant_window, random_row
from lab.eval_common import (check_redraw, check_writable, corpus_mismatch, csv_text, fail, is_repo_results, json_to_redraw, read_json,
                         spread_blocks)
from lab.long_context import retrieval
from lab.docsync.tables import sync_table
from lab.options import full_config, make_config, make_model
from lab.training import random_windows, train
from lab.variants import QUICK_MODEL, QUICK_TRAIN, TrainConfig, run_dirs


@dataclass(frozen=True)
class Mixture:
    """One copy mixture: where keys come from and how they are planted (copy_mixture.plant_window,
    which calls plant_keys)."""
    alphabet: str                 # a name in alphabets()
    key_len: tuple                # (min, max) characters per key
    frac: float = 1.0             # fraction of windows that get keys
    n_keys: int = 1               # keys per window
    copies: int = 2               # copies of each key
    max_gap: int = None           # characters between consecutive copies at most (None: anywhere)
    synthetic: float = 0.0        # fraction of windows that are random characters instead of text
    near_frac: float = 1.0        # with max_gap: the fraction of planted windows that use it (the rest: anywhere)
    steps: int = None             # None: the recipe's (1100); a longer schedule asks "how long until it copies?"
    lr: float = None              # None: the recipe's
    weight_decay: float = None
    what: str = ""


MIXTURES = {
    "digits_long": Mixture("digits", (32, 96), what="rope_copy's mixture: one key of 32-96 digits, twice, every window"),
    "digits_long_4x": Mixture("digits", (32, 96), steps=4400,
                              what="the same for 4,400 steps (4x the recipe; cosine schedule stretched)"),
    "letters_half": Mixture("lower", (8, 12), frac=0.5, what="8-12 lowercase letters, twice, in half the windows"),
    "digits_4keys": Mixture("digits", (8, 16), n_keys=4, what="up to 4 keys of 8-16 digits, twice each"),
    "rare_near": Mixture("rare", (10, 10), max_gap=16,
                         what="10 of the 18 rarest characters, the copy at most 16 characters after the key"),
    "rare_near_4x": Mixture("rare", (10, 10), max_gap=16, steps=4400, what="rare_near for 4,400 steps"),
    "rare_mixed_4x": Mixture("rare", (10, 10), max_gap=16, near_frac=0.5, steps=4400,
                             what="rare_near's keys, but in half the windows the copy goes anywhere; 4,400 steps"),
    "all_4copies": Mixture("all", (16, 16), copies=4, what="16 characters of any kind, 4 copies, every window"),
    "synthetic": Mixture("all", (24, 24), copies=4, synthetic=1.0,
                         what="no text: random characters, a 24-character key written 4 times"),
    "synthetic_lr1e-3": Mixture("all", (24, 24), copies=4, synthetic=1.0, lr=1e-3, weight_decay=0.0,
                                what="the same at lr 1e-3 without weight decay (not the recipe)"),
}
RETRIEVAL_D = (32, 128, 200)
RETRIEVAL_K = 10
# The retrieval probe is long_context.retrieval's passkey: keys of distinct uppercase letters, scored
# against the paired control. Records made before it (no "passkey" field) used keys from the
# mixture's own alphabet against an in-window control key; the two are not merged into one table.
PASSKEY = "distinct uppercase keys, paired control"


def alphabets(train_text: str, vocab: str) -> dict:
    """Key alphabets by name. Digits are nearly absent from Shakespeare, letters everywhere;
    "rare" is the 18 least frequent characters of the training text (digits, $, brackets...)."""
    counts = Counter(train_text)
    rare = "".join(sorted(sorted(vocab, key=lambda c: (counts[c], c))[:18]))
    return {"digits": KEY_CHARS, "lower": "abcdefghijklmnopqrstuvwxyz", "rare": rare,
            "all": vocab.replace("\n", "")}


def probe_windows(val_ids, T: int, mix: Mixture, key_ids, seed: int, n: int = 32):
    """n validation windows of T + 1 tokens, spread over the text, planted like training
    windows (every one gets keys). Returns (seqs (n, T + 1), [(row, starts, K)])."""
    g = torch.Generator().manual_seed(seed + 777)
    seqs = torch.stack([val_ids[s:s + T + 1] for s in spread_blocks(val_ids.numel(), T, n)]).clone()  # (n, T+1)
    keys = []
    for r in range(n):
        if torch.rand(1, generator=g).item() < mix.synthetic:
            seqs[r] = random_row(T + 1, key_ids, g)
        for starts, K in plant_window(seqs[r], g, key_ids, mix.key_len, mix.n_keys, mix.copies, mix.max_gap,
                                      mix.near_frac):
            keys.append((r, starts, K))
    return seqs, keys


def own_gain(model, seqs, keys) -> dict:
    """Loss on characters 2..K of first copies vs later copies, averaged over keys (nats/char)."""
    loss = lm_eval.token_losses(model, seqs, batch_size=16)  # (n, T): loss[r, t] is for predicting seqs[r, t + 1]
    # characters 2..K of a copy starting at s are the targets of positions s .. s + K - 2
    first = torch.stack([loss[r, st[0]:st[0] + K - 1].mean() for r, st, K in keys])
    later = torch.stack([torch.stack([loss[r, s:s + K - 1].mean() for s in st[1:]]).mean() for r, st, K in keys])
    return {"first": first.mean().item(), "later": later.mean().item(), "gain": (first - later).mean().item()}


def calibrate(name: str, mix: Mixture, tc: TrainConfig, mcfg: dict, data, seed: int, device, quick: bool,
              weights: Path) -> dict:
    """Train one model on the mixture with probes; returns the record saved for it. The final
    weights go to `weights` ({"model": state_dict, "config": GPTConfig fields}) for inspection."""
    train_ids, val_ids, key_ids, vocab_size, passkey_ids = data
    torch.manual_seed(tc.seed)
    model = make_model(make_config(vocab_size=vocab_size, **mcfg))
    seqs, keys = probe_windows(val_ids, tc.seq_len, mix, key_ids, seed)
    distances = (24, 48) if quick else RETRIEVAL_D
    K = 6 if quick else RETRIEVAL_K

    def probe(m) -> dict:
        out = {"own": own_gain(m, seqs, keys)}
        for r in retrieval(m, val_ids, distances, K, 4 if quick else 32, passkey_ids, seed, 16384):
            out[f"d{r['distance']}"] = {k: round(r[k], 4) for k in ("gain", "gain_lo", "gain_hi", "exact")}
        return out

    batches = copy_windows(random_windows(train_ids, tc.seq_len, tc.batch_size), tc.batch_size, tc.seq_len,
                           key_ids, tc.seed, frac=mix.frac,
                           key_len=mix.key_len, n_keys=mix.n_keys, copies=mix.copies, max_gap=mix.max_gap,
                           synthetic=mix.synthetic, near_frac=mix.near_frac)
    t0 = time.perf_counter()
    hist = train(model, train_ids, val_ids, tc, desc=name, device=device, batches=batches, probe=probe)
    atomic.atomic_write(weights, lambda tmp: torch.save({"model": model.state_dict(), "config": full_config(model.cfg)}, tmp))
    copyable = sum((len(st) - 1) * (K_ - 1) for _, st, K_ in keys) / seqs[:, 1:].numel()
    return {"mixture": name, "config": asdict(mix), "train": asdict(tc), "model": mcfg, "hist": hist,
            "copyable": copyable, "trials": 4 if quick else 32, "passkey": PASSKEY,
            "seconds": round(time.perf_counter() - t0, 1), "torch": torch.__version__}


def parse_args(argv=None):
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mixtures", default=",".join(MIXTURES), help=f"comma-separated, from: {', '.join(MIXTURES)}")
    p.add_argument("--pos", default="rope", choices=tiny_lm.SCHEMES, help="position scheme of the model (default rope)")
    p.add_argument("--steps", type=int, default=None, help="training steps (default: the recipe's, 1100)")
    p.add_argument("--out", default=None, help="one JSON per finished mixture; a rerun skips those "
                                               "(default runs/copy_calibration, runs/quick/copy_calibration with --quick)")
    p.add_argument("--results", default=None,
                   help="output folder (default results/, runs/quick/results with --quick, <out>/results for any "
                        "run that is not the real one (other --steps or --pos): results/ holds only real runs, "
                        "so an explicit --results results is then refused)")
    p.add_argument("--force", action="store_true", help="retrain mixtures that already have a JSON in --out")
    p.add_argument("--seed", type=cli.SEED, default=0, help="seed of the probe windows and keys")
    p.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu) or a torch device name")
    p.add_argument("--corpus", default=None, help="a UTF-8 text file instead of the default Shakespeare")
    p.add_argument("--quick", action="store_true", help="smoke run: tiny model, 30 steps, under runs/quick/")
    p.add_argument("--redraw", action="store_true", help="train nothing: rebuild the CSV, markdown and figure in "
                                                         "--results from its copy_calibration.json")
    return p.parse_args(argv)


def settings(args):
    """(mixture names, base TrainConfig, model config) for these arguments; exits on bad input."""
    names = [n for n in args.mixtures.split(",") if n]
    bad = [n for n in names if n not in MIXTURES]
    if bad or not names:
        fail(f"--mixtures {args.mixtures}: unknown mixture(s) {','.join(bad) or '(none given)'}; known: "
             f"{','.join(MIXTURES)}")
    base = replace(TrainConfig(), **QUICK_TRAIN) if args.quick else TrainConfig()
    if args.steps is not None:
        if args.steps < 1:
            fail(f"--steps must be positive, got {args.steps}")
        base = replace(base, steps=args.steps, warmup=min(base.warmup, args.steps))
    return names, base, {"pos": args.pos, **(QUICK_MODEL if args.quick else {})}


def mixture_setup(name: str, args, base: TrainConfig):
    """(Mixture, TrainConfig) of one mixture as this run trains it (--quick fits the keys to its windows)."""
    mix = MIXTURES[name]
    if args.quick:  # keys must fit the 64-character quick windows
        k_max = (base.seq_len + 1) // (mix.copies + 1)
        mix = replace(mix, key_len=(min(mix.key_len[0], k_max), min(mix.key_len[1], k_max)),
                      max_gap=None if mix.max_gap is None else min(mix.max_gap, 8))
    over = {"lr": mix.lr, "weight_decay": mix.weight_decay, "steps": None if args.quick or args.steps else mix.steps}
    return mix, replace(base, **{k: v for k, v in over.items() if v is not None})


def reuse(path: Path, mix: Mixture, tc: TrainConfig, mcfg: dict) -> dict:
    """The record saved at path, if it was made with these settings; exits with one line if not."""
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        rec = f"{type(e).__name__}"
    if not isinstance(rec, dict) or not {"mixture", "hist"} <= rec.keys():
        fail(f"{path} is not a record of this script ({rec if isinstance(rec, str) else 'other contents'}); "
             f"delete it, or rerun with --force")
    saved = {**asdict(Mixture("", ())), **rec.get("config", {})}  # a field added since counts as its default
    as_json = lambda d: json.loads(json.dumps(d))  # tuples -> lists, as stored
    if as_json(saved) != as_json(asdict(mix)) or rec.get("train") != asdict(tc) or rec.get("model") != mcfg:
        fail(f"{path} was made with other settings; rerun with --force to redo it, or delete it")
    tqdm.write(f"{rec['mixture']}: reusing {path}", file=sys.stderr)
    return rec


def real_run_changes(args, names, base: TrainConfig, mcfg: dict) -> list:
    """How this run differs from the real one, in which `python experiments/copy_calibration.py` trains each
    mixture: the default rope model, the mixture's own schedule. [] if it is the real run."""
    real = argparse.Namespace(quick=False, steps=None)
    diff = [f"model={mcfg} (real run: {{'pos': 'rope'}})"] if mcfg != {"pos": "rope"} else []
    diff += corpus_mismatch(args.corpus)  # results/ holds Shakespeare's calibration only
    for name in names:
        tc, real_tc = mixture_setup(name, args, base)[1], mixture_setup(name, real, TrainConfig())[1]
        diff += [f"{name} {k}={v} (real run: {getattr(real_tc, k)})" for k, v in asdict(tc).items()
                 if v != getattr(real_tc, k)]
    return diff


def output_folder(args, names, base: TrainConfig, mcfg: dict, results: Path, out: Path) -> Path:
    """The folder this run writes, checked before any training: results/ holds only real runs
    (real_run_changes), so another run writes <out>/results (with a note) or, given --results
    results explicitly, is refused. Both folders must be writable, and a results file already
    there must hold rows of this passkey."""
    diff = real_run_changes(args, names, base, mcfg)
    if diff and is_repo_results(results):
        why = f"not a real run ({'; '.join(diff[:3])}{'; ...' if len(diff) > 3 else ''})"
        if args.results:
            fail(f"{why}, and results/ holds only real runs; pass another --results, or leave it out to write "
                 f"under {out}/results")
        results = out / "results"
        print(f"note: {why}: writing to {results}/ instead of results/", file=sys.stderr)
    old = read_json(results / "copy_calibration.json")
    if old and old.get("passkey") != PASSKEY:
        fail(f"{results}/copy_calibration.json holds rows probed with an earlier passkey; write this run's "
             f"rows elsewhere with --results (it probes with {PASSKEY})")
    check_writable(out, "--out")
    check_writable(results, "--results")
    return results


def main(argv=None) -> int:
    args = parse_args(argv)
    q = args.quick
    names, base, mcfg = settings(args)
    runs_dir, results_dir = run_dirs(quick=q)
    out = Path(args.out or runs_dir / "copy_calibration")
    results = Path(args.results or results_dir)
    if args.redraw:
        check_redraw([results / "copy_calibration.json"], cli.command("experiments/copy_calibration.py", argv))
        check_writable(results, "--results")
        return redraw(results, args.pos, 4 if q else 32)
    try:
        device = devices.pick_device(args.device)
        train_text, val_text, vocab = corpora.load_corpus(args.corpus)
    except (ValueError, corpora.CorpusError) as e:
        fail(str(e))
    results = output_folder(args, names, base, mcfg, results, out)
    tok = corpora.CharTokenizer(vocab)
    train_ids, val_ids = tok.encode(train_text), tok.encode(val_text)
    alpha = alphabets(train_text, vocab)
    longest = max(32 * (base.seq_len + 1), max((24, 48) if q else RETRIEVAL_D) + 32 + RETRIEVAL_K + 2)
    if val_ids.numel() < longest:
        fail(f"the validation text has {val_ids.numel():,} characters; the probes need {longest:,}")
    for name in names:  # every mixture checked, and every record to reuse read, before the first is trained
        missing = [c for c in alpha[MIXTURES[name].alphabet] if c not in vocab]
        if missing:
            fail(f"mixture {name} needs the characters {''.join(missing)!r}, which the corpus lacks; pick other mixtures")
    records = {n: reuse(out / f"{n}.json", *mixture_setup(n, args, base), mcfg) for n in names
               if (out / f"{n}.json").exists() and not args.force}
    out.mkdir(parents=True, exist_ok=True)
    for name in cli.progress([n for n in names if n not in records], desc="mixtures"):
        mix, tc = mixture_setup(name, args, base)
        data = (train_ids, val_ids, tok.encode(alpha[mix.alphabet]), len(vocab),
                key_ids_of(vocab, COPY_RECIPE.alphabet))
        records[name] = calibrate(name, mix, tc, mcfg, data, args.seed, device, q, out / f"{name}.pt")
        atomic.atomic_write_text(out / f"{name}.json", json.dumps(records[name], indent=1))
    save(results, records, args.pos, 4 if q else 32)
    print(f"wrote {results}/copy_calibration.csv, .md, .json, .png")
    return 0


# ----------------------------------------------------------------------------- outputs

def summary(rec: dict) -> dict:
    """One row: the last probe, and the best own gain reached at any probe (a transient counts).
    copyable: the share of training targets that a copy could predict (later copies, characters 2..K)."""
    last, probes = rec["hist"]["probe"][-1], rec["hist"]["probe"]
    ds = [k for k in last if k.startswith("d")]
    row = {"mixture": rec["mixture"], "steps": rec["train"]["steps"], "lr": rec["train"]["lr"],
           "copyable": round(rec["copyable"] * rec["config"]["frac"], 3), "text_val_loss": round(rec["hist"]["val_loss"][-1], 4),
           "first_copy_loss": round(last["own"]["first"], 4), "later_copy_loss": round(last["own"]["later"], 4),
           "own_gain": round(last["own"]["gain"], 4), "best_own_gain": round(max(p["own"]["gain"] for p in probes), 4)}
    for d in ds:
        row[f"gain_{d}"], row[f"exact_{d}"] = last[d]["gain"], last[d]["exact"]
    row["seconds"] = rec["seconds"]
    return row


def save(results: Path, records: dict, pos: str, trials: int) -> None:
    """Merge the mixtures of this run into results/copy_calibration.json (the rows and curves of
    mixtures not run now stay), then redraw the table and figure from it."""
    old = read_json(results / "copy_calibration.json")
    if old and old.get("passkey") != PASSKEY:
        fail(f"{results}/copy_calibration.json holds rows probed with an earlier passkey; write this run's "
             f"rows elsewhere with --results (it probes with {PASSKEY})")
    rows = {r["mixture"]: r for r in old.get("rows", [])}
    curves = dict(old.get("curves", {}))
    for name, rec in records.items():
        rows[name] = summary(rec)
        curves[name] = {"step": rec["hist"]["step"], "probe": rec["hist"]["probe"], "val_loss": rec["hist"]["val_loss"]}
    order = [n for n in MIXTURES if n in rows] + [n for n in rows if n not in MIXTURES]
    results.mkdir(parents=True, exist_ok=True)
    atomic.atomic_write_text(results / "copy_calibration.json", json.dumps(
        {"passkey": PASSKEY, "rows": [rows[n] for n in order], "curves": {n: curves[n] for n in order}}, indent=1))
    redraw(results, pos, trials)


def redraw(results: Path, pos: str, trials: int) -> int:
    """copy_calibration.csv, .md and .png from results/copy_calibration.json alone. The file holds
    no run settings: pos and trials are this command's (--pos, and 32 trials, or 4 with --quick),
    as when the rows were made."""
    from lab import plots
    data = json_to_redraw(results / "copy_calibration.json", "python experiments/copy_calibration.py")
    rows = data["rows"]
    atomic.atomic_write_text(results / "copy_calibration.csv", csv_text(rows))
    table = markdown_table(rows, pos, trials, data.get("passkey"))
    atomic.atomic_write_text(results / "copy_calibration.md", table)
    plots.copy_calibration(results / "copy_calibration.png", data["curves"])
    sync_table("copy_calibration", table, results)
    return 0


def markdown_table(rows, pos: str, trials: int, passkey: str = None) -> str:
    """The table of results/copy_calibration.md, one row per mixture, with its note (passkey:
    the probe's, None for the earlier one)."""
    ds = [k[5:] for k in rows[0] if k.startswith("gain_")]
    lines = ["| mixture | what | copyable targets | text val loss | first copy | later copies | own gain "
             "(best at any step) | " + " | ".join(f"retrieval {d[1:]}: gain / exact" for d in ds) + " |",
             "|---" * (7 + len(ds)) + "|"]
    for r in rows:
        what = MIXTURES[r["mixture"]].what if r["mixture"] in MIXTURES else ""
        lines.append(f"| {r['mixture']} | {what} | {r['copyable']:.0%} | {r['text_val_loss']:.3f} | "
                     f"{r['first_copy_loss']:.2f} | {r['later_copy_loss']:.2f} | {r['own_gain']:+.2f} "
                     f"({r['best_own_gain']:+.2f}) | "
                     + " | ".join(f"{r[f'gain_{d}']:+.2f} / {r[f'exact_{d}']:.0%}" for d in ds) + " |")
    steps = sorted({r["steps"] for r in rows})
    probe = f"with {passkey}" if passkey else "as it was then: keys from the mixture's alphabet against an in-window control key"
    lines.append(f"\nEach row: {'/'.join(map(str, steps))} training steps of a {pos} "
                 f"model with the recipe of train_compare.py (except where *what* says otherwise). Losses in nats/char "
                 f"on characters 2..K of 32 planted validation windows at the last step; own gain = first copy minus "
                 f"later copies; retrieval = long_context_test's passkey "
                 f"{probe}, "
                 f"{trials} trials per distance. Produced by `python experiments/copy_calibration.py`.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
