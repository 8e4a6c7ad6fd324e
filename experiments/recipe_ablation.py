"""Which choices of the training recipe decide the ranking at the training length?

The main comparison trains every scheme with one recipe. A recipe is many small choices, and
one of them can favour one scheme, or hold every scheme back: an independent implementation
(lucidrains' x-transformers, same size, same batches and schedule: experiments/anchor_xtransformers.py)
is the yardstick. This script trains each scheme under each knob with the same seed and the same
batches (training.train). Knobs:

    baseline      this repository's recipe (train_compare.py defaults)
    old...        whole recipes, every field the recipe change of docs/recipe.md touched set
                  explicitly: "old" is the recipe before it (GPT-2-style init: Linears at 0.02,
                  q/k/v at C^-0.5, residual projections at 0.02/sqrt(2 n_layer); decay on the Linear
                  weights); "+torch_init" keeps PyTorch's nn.Linear init, "+decay_all" decays every
                  parameter but the learned table, "+no_norm_bias" drops the LayerNorm biases,
                  "+no_emb_scale" puts the token table at std 0.02 with no sqrt(C) factor
    gpt2_init     GPT-2's init for every Linear: std 0.02, residual projections 0.02/sqrt(2 n_layer)
    qkv_unit      q/k/v weights at std C^-0.5 (the old recipe's unit-scale logits), the rest PyTorch's
    resid_scaled  residual projections at GPT-2's 0.02/sqrt(2 n_layer), the rest PyTorch's
    no_norm_bias  LayerNorms with a gain and no bias (x-transformers)
    no_emb_scale  token table at std 0.02 and no sqrt(C) factor (GPT-2) instead of C^-0.5 x sqrt(C)
    tied_head     output head tied to the token table (GPT-2) instead of untied
    lr_1e-3       peak learning rate 1e-3 instead of 3e-3
    xt_emb        token table at x-transformers' std sqrt(2/C) (kaiming normal) and no sqrt(C) factor
    xtransformers every choice in which x-transformers' decoder differs from the recipe at once: xt_emb,
                  LayerNorms without a bias, decay on every parameter

Weight decay on every parameter, alone around this recipe, is the row old+torch_init+decay_all
(old+torch_init has baseline's settings), so it has no single knob of its own.

Scores: perplexity on the same validation characters as extrapolation_test.py (65,536 by default,
in blocks spread over the three held-out plays, cut into non-overlapping windows) at the training
length and at 4096. Writes
<results>/recipe_ablation.json (a run of some knobs merges its rows into it), and .csv and .md
drawn from it. Checkpoints go to runs/recipe/<knob>/<scheme>.pt (<scheme>_seed<s>.pt for --seed
s > 0); a run whose checkpoint exists is reused, so an interrupted ablation continues where it
stopped. Rows are kept per knob, scheme and seed: a run of another --seed adds its rows beside
seed 0's, and docs/recipe.md sets a knob's seeds against the recipe's (tables.recipe_seeds_table).

    python experiments/recipe_ablation.py                                  # rope and alibi under every knob (docs/recipe.md: wall time)
    python experiments/recipe_ablation.py --knobs baseline --schemes sin,learned
    python experiments/recipe_ablation.py --knobs no_emb_scale --schemes alibi --seed 1   # a second seed of one row
    python experiments/recipe_ablation.py --quick                          # smoke run, writes under runs/quick/
    python experiments/recipe_ablation.py --redraw                         # .csv and .md from results/recipe_ablation.json
"""
import argparse
import hashlib
import json
import math
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import sys as _sys
from pathlib import Path as _Path
_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))  # run as python experiments/NAME.py: the repository's modules

import torch

from lab import cli
from lab import row_names
import schemes
from lab.docsync import tables
import tiny_lm
from lab import atomic
from lab import checkpoint_io
from lab import corpora
from lab import devices
from lab.eval_common import (UNKNOWN, check_redraw, check_writable, corpus_mismatch, csv_text, fail, git_commit, is_repo_results,
                         json_to_redraw, provenance_of, read_json, spread_blocks)
from lab.perplexity import evaluate
from lab.checkpoint_io import CheckpointError
from lab.corpora import CorpusError
from lab.options import full_config, make_config, make_model
from tiny_lm import GPTConfig
from lab.training import train
from lab.variants import QUICK_MODEL, QUICK_TRAIN, TRAIN_BEFORE_FIELD, TrainConfig, run_dirs

# knob -> (GPTConfig overrides, TrainConfig overrides). "baseline" is train_compare.py's recipe; the
# recipes named old... set every field the recipe change of docs/recipe.md touched, so they mean the same whatever
# the defaults are: "old" is the recipe before it, the others move it towards x-transformers' choices.
OLD_MODEL = {"qkv_init": "unit", "resid_init": "scaled", "linear_init": "gpt2", "norm_bias": True, "emb_scale": True}
TORCH_INIT = {"qkv_init": "torch", "resid_init": "torch", "linear_init": "torch"}
KNOBS = {
    "baseline": ({}, {}),
    "old": (OLD_MODEL, {"decay": "matrices"}),
    "old+torch_init": ({**OLD_MODEL, **TORCH_INIT}, {"decay": "matrices"}),
    "old+decay_all": (OLD_MODEL, {"decay": "all"}),
    "old+torch_init+decay_all": ({**OLD_MODEL, **TORCH_INIT}, {"decay": "all"}),
    "old+torch_init+decay_all+no_norm_bias": ({**OLD_MODEL, **TORCH_INIT, "norm_bias": False}, {"decay": "all"}),
    "old+torch_init+decay_all+no_emb_scale": ({**OLD_MODEL, **TORCH_INIT, "emb_scale": False}, {"decay": "all"}),
    "gpt2_init": ({"qkv_init": "gpt2", "resid_init": "scaled", "linear_init": "gpt2"}, {}),
    "qkv_unit": ({"qkv_init": "unit"}, {}),
    "resid_scaled": ({"resid_init": "scaled"}, {}),
    "no_norm_bias": ({"norm_bias": False}, {}),
    "no_emb_scale": ({"emb_scale": False}, {}),
    "tied_head": ({"tie_weights": True}, {}),
    "lr_1e-3": ({}, {"lr": 1e-3}),
    # x-transformers' own choices (docs/recipe.md's table of differences): its token table alone, then all of
    # them at once (token table, LayerNorms without a bias, decay on every parameter), so that the gap to
    # experiments/anchor_xtransformers.py's models is credited only through the knob that removes it
    "xt_emb": ({"emb_scale": False, "emb_init": "kaiming"}, {}),
    "xtransformers": ({"emb_scale": False, "emb_init": "kaiming", "norm_bias": False}, {"decay": "all"}),
}


def parse_args(argv=None):
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--knobs", default=",".join(KNOBS), help=f"comma-separated knobs (known: {','.join(KNOBS)})")
    p.add_argument("--schemes", default="rope,alibi", help=f"comma-separated schemes (known: {','.join(tiny_lm.SCHEMES)})")
    p.add_argument("--seed", type=cli.SEED, default=0, help="seed for initialisation and batch order, the same for "
                                                            "every model of the run; rows of each seed are kept apart")
    p.add_argument("--lengths", default=None, help="evaluation lengths, the first is the training length's "
                                                   "column (default 256,4096; 64,256 with --quick)")
    p.add_argument("--tokens", type=int, default=None, help="validation characters scored at every length (default "
                                                            "65536; 4096 with --quick)")
    p.add_argument("--corpus", default=None, help="UTF-8 text file (default: the Shakespeare corpus)")
    p.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu), or a torch device name")
    p.add_argument("--out", default=None, help="checkpoint folder (default runs/recipe, runs/quick/recipe with --quick)")
    p.add_argument("--results", default=None,
                   help="where the CSV and markdown go (default results/, or <out>/results with --quick or any "
                        "other lengths or --tokens than the defaults: results/ holds only the real ablation, so "
                        "an explicit --results results is then refused)")
    p.add_argument("--main-dir", default=None, help="train_compare.py's checkpoints: the baseline reuses one whose "
                                                    "model and training settings match (default runs/main, runs/quick "
                                                    "with --quick; '' to retrain)")
    p.add_argument("--threads", type=cli.THREADS, default=0, help="torch CPU threads (0: torch's default); results are "
                                                         "bit-identical only at the same thread count")
    p.add_argument("--quick", action="store_true", help="smoke run: the tiny QUICK_MODEL and QUICK_TRAIN of "
                                                        "train_compare.py, 4,096 tokens scored")
    p.add_argument("--redraw", action="store_true", help="train nothing: rebuild the CSV and markdown in --results "
                                                         "from its recipe_ablation.json")
    return p.parse_args(argv)


def knob_settings(knob: str, scheme: str, args, vocab_size: int) -> tuple:
    """(GPTConfig fields, TrainConfig) of one (knob, scheme) model of this run."""
    model_over, train_over = KNOBS[knob]
    tc = replace(TrainConfig(), **(QUICK_TRAIN if args.quick else {}), seed=args.seed, **train_over)
    pos, options = row_names.scheme_options(scheme)  # t5{scale=5.657}: a scheme with options set
    return {"vocab_size": vocab_size, "pos": pos, **({"pos_options": options} if options else {}),
            **(QUICK_MODEL if args.quick else {}), **model_over}, tc


def known_scheme(name: str) -> bool:
    """A registered scheme, or one with options it has (t5{scale=5.657}); ValueError (one line) for a
    registered scheme given options it does not have, or values it cannot take (NaN, inf, another type)."""
    try:
        pos, options = row_names.scheme_options(name)
    except ValueError:
        return False
    if pos not in tiny_lm.SCHEMES:
        return False
    schemes.options_of(pos, options)
    return True


def checkpoint_path(out: Path, knob: str, scheme: str, seed: int) -> Path:
    """Where one (knob, scheme, seed) model lives: <out>/<knob>/<scheme>.pt, _seed<s> for seed s > 0."""
    return out / knob / f"{scheme}{f'_seed{seed}' if seed else ''}.pt"


def check_reused(knobs, schemes, args, vocab_size: int, out: Path, rerun: str = "python experiments/recipe_ablation.py") -> None:
    """Every checkpoint in --out this run would reuse, loaded and compared with its settings before
    anything is trained: CheckpointError (one line) for an unreadable one or one from other settings."""
    for knob in knobs:
        for scheme in schemes:
            path = checkpoint_path(out, knob, scheme, args.seed)
            if not path.exists():
                continue
            kw, tc = knob_settings(knob, scheme, args, vocab_size)
            ck = checkpoint_io.load_checkpoint(path, make_with=rerun)[1]
            if ck["extra"].get("train_config") != asdict(tc) or ck["config"] != full_config(make_config(**kw)):
                raise CheckpointError(f"{path} was trained with other settings; delete it to retrain")


def run_one(knob, scheme, args, vocab, train_ids, val_ids, out, device, corpus_sha256=UNKNOWN,
            rerun="python experiments/recipe_ablation.py"):
    """Train (or reload) one (knob, scheme) model; returns (model, checkpoint dict)."""
    path = checkpoint_path(out, knob, scheme, args.seed)
    kw, tc = knob_settings(knob, scheme, args, len(vocab))
    main_path = Path(args.main_dir) / f"{scheme}.pt"
    # the baseline is train_compare.py's own run: reuse its checkpoint when every setting matches
    for p in [path] + ([main_path] if knob == "baseline" and args.main_dir and main_path.exists() else []):
        if not p.exists():
            continue
        model, ck = checkpoint_io.load_checkpoint(p, device, make_with=rerun)
        if ck["extra"].get("train_config") == asdict(tc) and ck["config"] == full_config(make_config(**kw)):
            print(f"{knob}/{scheme}: reusing {p}")
            return model, ck
        if p == path:
            raise CheckpointError(f"{path} was trained with other settings; delete it to retrain")
    torch.manual_seed(args.seed)
    model = make_model(make_config(**kw))
    t0 = time.perf_counter()
    hist = train(model, train_ids, val_ids, tc, desc=f"{knob}/{scheme}", device=device)
    extra = {"train_config": asdict(tc), "knob": knob, "wall_s": round(time.perf_counter() - t0, 1),
             "provenance": {"command": command(args), "commit": git_commit(), "corpus_sha256": corpus_sha256,
                            "seed": args.seed, "device": device.type}}
    checkpoint_io.save_checkpoint(path, model.cpu(), vocab, tc.steps, hist, extra)
    return model.to(device), torch.load(path, map_location="cpu", weights_only=True)


def check(args):
    """(knobs, schemes, lengths, tokens) from the arguments; one line on stderr and exit 2 for a bad one."""
    knobs, schemes = args.knobs.split(","), args.schemes.split(",")
    try:
        bad = [k for k in knobs if k not in KNOBS] + [s for s in schemes if not known_scheme(s)]
    except ValueError as e:  # a scheme's options
        fail(f"--schemes {args.schemes}: {e}")
    if bad:
        fail(f"unknown knob or scheme {','.join(bad)}; knobs: {','.join(KNOBS)}; schemes: {','.join(tiny_lm.SCHEMES)}")
    try:
        default = "64,256" if args.quick else "256,4096"
        lengths = [int(x) for x in (default if args.lengths is None else args.lengths).split(",")]
    except ValueError:
        fail(f"--lengths must be comma-separated integers, got {args.lengths!r}")
    tokens = args.tokens if args.tokens is not None else (4096 if args.quick else 65536)  # an explicit one is used
    if tokens < 1:
        fail(f"--tokens must be positive, got {tokens}")
    if min(lengths) < 1 or tokens < max(lengths) or any(max(lengths) % L for L in lengths):
        fail(f"--lengths {','.join(map(str, lengths))}: lengths must be positive and divide the longest, and "
             f"--tokens ({tokens}) must be at least the longest length")
    if args.main_dir and not Path(args.main_dir).is_dir():
        fail(f"--main-dir {args.main_dir} is not a folder; name train_compare.py's checkpoint folder, or '' to "
             f"train the baseline here")
    return knobs, schemes, sorted(lengths), tokens


REAL_RUN = {"model": {}, "train": {}, "lengths": [256, 4096], "tokens": 65536}  # what `python experiments/recipe_ablation.py` runs


def output_folder(args, results: Path, out: Path, lengths: list, tokens: int) -> Path:
    """The folder this run writes, checked before any training: results/ holds only the real
    ablation (REAL_RUN's model, recipe and scoring; the seed may differ), so another run writes
    <out>/results (with a note) or, given --results results explicitly, is refused; a results file
    already there must have been scored at these lengths; both folders must be writable."""
    used = {"model": QUICK_MODEL if args.quick else {}, "train": QUICK_TRAIN if args.quick else {},
            "lengths": lengths, "tokens": tokens}
    diff = [f"{k}={used[k]} (real run: {REAL_RUN[k]})" for k in REAL_RUN if used[k] != REAL_RUN[k]]
    diff += corpus_mismatch(args.corpus)  # results/ holds Shakespeare's ablation only
    if diff and is_repo_results(results):
        if args.results:
            fail(f"this run is not the real ablation ({'; '.join(diff)}), and results/ holds only real runs; pass "
                 f"another --results, or leave it out to write under {out}/results")
        results = out / "results"
        print(f"note: this run is not the real ablation ({'; '.join(diff)}): writing to {results}/ instead of "
              f"results/", file=sys.stderr)
    old = read_json(results / "recipe_ablation.json")
    if old and (old["meta"]["lengths"], old["meta"]["tokens"]) != (lengths, tokens):
        fail(f"{results}/recipe_ablation.json was scored at lengths {old['meta']['lengths']} on "
             f"{old['meta']['tokens']} characters; use the same settings or another --results")
    check_writable(out, "--out")
    check_writable(results, "--results")
    return results


def main(argv=None) -> int:
    args = parse_args(argv)
    rerun = cli.command("experiments/recipe_ablation.py", argv, drop=())  # the user's own command, for the hints
    git_commit()  # the code this process runs, read now: the checkpoints' provenance names it
    runs, results_dir = run_dirs(quick=args.quick)
    out = Path(args.out or (runs / "recipe" if args.quick else "runs/recipe"))
    results = Path(args.results) if args.results else (out / "results" if args.quick else results_dir)
    if args.redraw:
        check_redraw([results / "recipe_ablation.json"], cli.command("experiments/recipe_ablation.py", argv))
        check_writable(results, "--results")
        return redraw(results)
    knobs, schemes, lengths, tokens = check(args)
    if args.main_dir is None:  # not given: train_compare.py's folder of this mode, if it has a run yet
        args.main_dir = str(runs)
    try:
        device = devices.pick_device(args.device)
        train_text, val_text, vocab = corpora.load_corpus(args.corpus, min_val_chars=tokens + 1)
    except (ValueError, CorpusError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    results = output_folder(args, results, out, lengths, tokens)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    tok = corpora.CharTokenizer(vocab)
    train_ids, val_ids = tok.encode(train_text), tok.encode(val_text)
    blocks = spread_blocks(val_ids.numel(), lengths[-1], tokens // lengths[-1])  # extrapolation_test's characters
    try:
        check_reused(knobs, schemes, args, len(vocab), out, rerun)
    except CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = []
    for knob in knobs:
        for scheme in schemes:
            try:
                model, ck = run_one(knob, scheme, args, vocab, train_ids, val_ids, out, device,
                                    hashlib.sha256((train_text + val_text).encode("utf-8")).hexdigest(), rerun)
            except CheckpointError as e:
                print(f"error: {e}", file=sys.stderr)
                return 2
            row = {"knob": knob, "scheme": scheme, "command": command(args), "config": ck["config"],
                   "train_config": ck["extra"]["train_config"]}
            # ppl = exp(mean loss) over the same validation characters at every L
            losses, _, _ = evaluate(model, val_ids, lengths, blocks, 16384, f"{knob}/{scheme}")
            for L in lengths:
                row[f"ppl@{L}"] = round(math.exp(losses[L]), 3)
            row["train_wall_s"] = ck["extra"].get("wall_s")
            row["provenance"] = provenance_of(ck)
            rows.append(row)
            print(f"{knob}/{scheme}: " + ", ".join(f"{k} {v}" for k, v in row.items() if k.startswith("ppl")))
    meta = {"command": command(args), "lengths": lengths, "tokens": tokens}
    save(results, rows, meta, lambda r: stale(r, args, len(vocab)))
    print(f"wrote {results}/recipe_ablation.json, .csv and .md")
    return 0


def command(args) -> str:
    return (f"python experiments/recipe_ablation.py --knobs {args.knobs} --schemes {args.schemes} --seed {args.seed}"
            + (f" --threads {args.threads}" if args.threads else "") + (" --quick" if args.quick else ""))


def stale(row: dict, args, vocab_size: int) -> bool:
    """Whether a row of an earlier run is not what its knob trains now: an unknown knob, or
    settings (recorded with each row) other than knob_settings' - the defaults moved, or the row
    is older than the record."""
    if row["knob"] not in KNOBS or row["scheme"] not in tiny_lm.SCHEMES:
        return True
    seed = (row.get("train_config") or {}).get("seed", args.seed)  # a row of another seed is that seed's run
    kw, tc = knob_settings(row["knob"], row["scheme"], argparse.Namespace(**{**vars(args), "seed": seed}), vocab_size)
    if not isinstance(row.get("config"), dict) or not isinstance(row.get("train_config"), dict):
        return True
    # a field added since the row was made holds the value runs had before it (as checkpoints load)
    cfg = {**full_config(GPTConfig()), **checkpoint_io.BEFORE_FIELD, **row["config"]}
    train = {**asdict(TrainConfig()), **TRAIN_BEFORE_FIELD, **row["train_config"]}
    return cfg != full_config(make_config(**kw)) or train != asdict(tc)


def row_key(row: dict) -> tuple:
    """(knob, scheme, seed): one row of the ablation; a new run's row replaces the old one of its key."""
    return row["knob"], row["scheme"], tables.row_seed(row)


def save(results: Path, rows: list, meta: dict, is_stale=lambda row: False) -> None:
    """Merge these rows into results/recipe_ablation.json (rows of other knobs, schemes and seeds stay,
    unless is_stale(row): then they are dropped, and named; the lengths and scored characters must
    match), then redraw the tables from it."""
    old = read_json(results / "recipe_ablation.json")
    if old:
        if (old["meta"]["lengths"], old["meta"]["tokens"]) != (meta["lengths"], meta["tokens"]):
            fail(f"{results}/recipe_ablation.json was scored at lengths {old['meta']['lengths']} on "
                 f"{old['meta']['tokens']} characters; use the same settings or another --results")
        fresh = {row_key(r) for r in rows}
        kept = [r for r in old["rows"] if row_key(r) not in fresh]
        gone = [r for r in kept if is_stale(r)]
        if gone:
            print(f"dropped {len(gone)} rows trained with other settings than their knob's now: "
                  + ", ".join("{}/{} seed {}".format(*row_key(r)) for r in gone))
        rows = [r for r in kept if r not in gone] + rows
        order = {k: i for i, k in enumerate(KNOBS)}  # knobs in KNOBS' order, unknown ones last; then seeds
        rows.sort(key=lambda r: (order.get(r["knob"], len(KNOBS)), tables.row_seed(r)))
    # the commands that made the rows kept, in order (a row without its own is older: the file's)
    made_by = [r.get("command", (old or {}).get("meta", {}).get("command")) for r in rows]
    meta["command"] = "`; `".join(dict.fromkeys(c for c in made_by if c))
    results.mkdir(parents=True, exist_ok=True)
    atomic.atomic_write_text(results / "recipe_ablation.json", json.dumps({"meta": meta, "rows": rows}, indent=1))
    redraw(results)


def redraw(results: Path) -> int:
    """recipe_ablation.csv and .md from results/recipe_ablation.json alone."""
    data = json_to_redraw(results / "recipe_ablation.json", "python experiments/recipe_ablation.py")
    flat = [{k: v for k, v in r.items() if not isinstance(v, dict)} for r in data["rows"]]  # settings stay in the JSON
    atomic.atomic_write_text(results / "recipe_ablation.csv", csv_text(flat))
    atomic.atomic_write_text(results / "recipe_ablation.md", markdown_table(results, data))
    tables.sync_recipe(results)
    return 0


def markdown_table(results: Path, data: dict) -> str:
    """results/recipe_ablation.md from its JSON (data): the command, what is scored, the table of
    seed 0 (docs/recipe.md's adds the anchor's rows), the knobs of more seeds, each knob's overrides."""
    meta, used = data["meta"], {r["knob"] for r in data["rows"]}
    seeds = tables.recipe_seeds_table(results)
    return "\n".join(["# Recipe ablation", "", f"Command: `{meta['command']}`", "",
                      f"Perplexity per character on the same {meta['tokens']:,} validation characters at every "
                      f"length (non-overlapping windows). In brackets: change against the baseline row. Seed 0.", "",
                      tables.recipe_table(results, anchor=False),
                      *(["Knobs trained at more than one seed, against the recipe at the same seeds:", "", seeds]
                        if seeds else []),
                      "Knobs (overrides of GPTConfig / TrainConfig): "
                      + "; ".join(f"`{k}` {dict(**m, **t) or '(none)'}" for k, (m, t) in KNOBS.items() if k in used),
                      ""])


if __name__ == "__main__":
    sys.exit(main())
