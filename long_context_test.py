"""Does a model USE the long context, or only survive it? Measures that perplexity of
non-overlapping windows cannot give (extrapolation_test.py gives that one). The measures are
lab/long_context.py's; this script runs them on the checkpoints and writes the tables.

1. Context use (fixed targets). The same 256-character target spans, spread over the whole
   validation text, are scored again and again while only the visible context before them
   grows: c = 0, 64, 192, ..., 3840 characters. Loss over the targets only. A model that uses
   long context gets lower loss at c = 3840 than at c = 192; flat means it ignores what is
   further back; rising means the longer window breaks it. "Effective context" is the
   largest c whose loss is below that of every shorter context by more than the 95%
   bootstrap interval of the difference (resampling target spans).

2. Retrieval at distance (a character-level passkey, the idea of the YaRN repository's
   passkey test and of Kazemnejad et al. 2023's copy tasks, on real text). In a validation
   window, a key of K distinct uppercase letters is planted at position 32 and again d
   characters later. Scored: characters 2..K of the repeat (the first cannot be guessed).
   Each window is scored twice, as planted and as its paired control, where the first copy
   is replaced by K other letters and nothing else changes. Copy gain = the repeat's loss in
   the control minus its loss as planted (nats/char); exact match = greedy decoding gives all
   K - 1 characters, a share of windows with a Clopper-Pearson interval; per-character accuracy
   = the share it gets right (bootstrap over windows, as the gain). Uppercase letters
   occur all through the plays (speaker names), so no model meets a character it never saw;
   distinct letters make a one-character lookup inside the key unambiguous.
   Models trained on plain Shakespeare never needed to copy; the copy family
   (`train_compare.py --variants copy`) was trained so that copying pays.

3. Retrieval outside the training format (--only formats; the copy models that copy, FORMAT_ROWS).
   The passkey above is the copy curriculum's own format (distinct uppercase letters, keys of
   8-16). The same measure on formats the family never trained (copy_mixture.FORMATS): 10
   distinct letters (in format, re-measured), 5 distinct letters, 10 letters with one letter
   twice (the character after its second occurrence reported apart: a lookup of what followed
   that letter before gives the wrong one), and 16 characters of verse from elsewhere in the
   validation text. Each with its paired control that differs only in the first copy.

Scaled RoPE rows (rope+X) set the factor from the total window length, as in the main table;
rope+X@16 keeps the factor at 16 whatever the length (context use only). A row
"<name> (no temp)" is a model trained with Llama 4's attention-temperature tuning, evaluated
with it off; "<name> (temp on)" one trained without it (irope_copy_notemp), evaluated with it on.

    python long_context_test.py                 # every checkpoint in runs/main
    python long_context_test.py --quick         # after python train_compare.py --quick
    python long_context_test.py --only formats  # results/retrieval_formats.*, the FORMAT_ROWS found
    python long_context_test.py --only retrieval --variants kerple_copy,t5_copy   # with runs/seed*/'s twins too

Other seeds (--seed-dirs, default every runs/seed*/ as extrapolation_test.py): a copy twin measured here is
measured again from each seed folder that holds it, as the row "<name> [seedN]", on the same keys and windows.
Those rows stay out of the figures and the main tables: retrieval.md lists each seed's exact match and their
range, and a ranking of two rows stands only where the lowest seed of one is above the highest of the other.
    python long_context_test.py --redraw        # tables and figures from results/context_use.json, retrieval.json
                                                # and retrieval_formats.json

A run of some checkpoints merges its rows into the results already there (same settings only).
"""
import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from lab import cli
from lab import row_names
from lab import plots
import schemes
import tiny_lm
from lab import atomic
from lab import corpora
from lab.copy_mixture import COPY_RECIPE, FORMATS, KEY_ALPHABETS, KEY_AT, LONGEST_KEY, REPEAT_AT, key_ids_of
from lab.eval_common import (add_common_flags, add_seed_dirs_flag, check_common, check_redraw, check_scalings,
                         check_writable, checked_results, csv_text, eval_dirs, fail, find_checkpoints, int_list, is_repo_results, length_setter,
                         load_checked, load_eval_data, merge_rows, merged_provenance, peak_rss_gib, provenance_key,
                         provenance_of, read_json, seed_folders, train_len_of)
from lab.long_context import context_use, format_retrieval, retrieval, share_ci, summarize_context
from lab.docsync.tables import sync_glance, sync_settings, sync_table
from lab.variants import FINETUNES, VARIANTS, is_copy, names_of, order_of, scaled

# --copy-trials windows (default 128) wherever a claim rests on a cell: every distance of the copy family, and
# every distance from FAR_FROM on for every model; text models get --trials (32) below it, where none copies.
FAR_FROM = 512
# The rows measured on passkeys outside the training format (--only formats): the copy models that copy.
FORMAT_ROWS = ("rope_copy", "rope_copy+yarn", "alibi_copy", "irope_copy", "gemma_hybrid_copy", "rope_copy_ft_yarn",
               # the field's copy models (docs/field.md): those that copy, and those that do not, to show it
               "t5_copy", "kerple_copy", "fire_copy", "xpos_copy", "rope_sink_copy", "alibi_sink_copy", "rope_copy_ft_drope",
               "fox{decay_max=256.0}_copy")


# ----------------------------------------------------------------------------- command line

def parse_args(argv=None):
    schemes.load_argv(argv)  # --scheme-file first: its scheme is a name like the others
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    schemes.file_flag(p)
    p.add_argument("--ckpt-dir", default=None, help="checkpoints from train_compare.py (default runs/main; "
                                                    "runs/quick with --quick, runs/preview with --preset preview)")
    p.add_argument("--variants", default=None, help="comma-separated checkpoints, or a family of "
                                                    "train_compare.py (copy, current, theta) (default: every one "
                                                    "found)")
    p.add_argument("--only", choices=["context", "retrieval", "formats"], default=None,
                   help="run one of the three measures (formats: the passkey outside the copy family's training "
                        f"format, for {', '.join(FORMAT_ROWS)} only)")
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
    p.add_argument("--key-len", type=int, default=10, help="distinct letters per key K (default 10; at most half "
                                                           "the alphabet, since the control's fresh key shares none)")
    p.add_argument("--key-alphabet", choices=sorted(KEY_ALPHABETS), default=COPY_RECIPE.alphabet,
                   help="the letters keys are drawn from (default %(default)s: the copy family's training keys; "
                        "every text model saw them all in the plays)")
    p.add_argument("--trials", type=int, default=None, help=f"planted windows per distance for the text models "
                                                            f"at d < {FAR_FROM} (default 32; 4 with --quick)")
    p.add_argument("--copy-trials", type=int, default=None,
                   help=f"planted windows per distance for the copy family at every d, and for every model at "
                        f"d >= {FAR_FROM} (default 128: an exact match of 50%% then has an interval of about "
                        f"+-9 points, against +-17 with 32; 8 with --quick)")
    p.add_argument("--format-distances", default=None,
                   help=f"distances d of the passkey formats, increasing, each at least {LONGEST_KEY} (default "
                        f"32,128,200,512,1024; 24,48,96 with --quick)")
    p.add_argument("--format-trials", type=int, default=None,
                   help="windows per format and distance (default 128; 8 with --quick)")
    p.add_argument("--scalings", default="linear,ntk,ntk(4s),ntk(16s),yarn,llama3,longrope",
                   help="training-free scalings applied to rope for context use, one row each, the factor set "
                        "from the whole window; dynamic is left out by default because a whole window equals ntk")
    p.add_argument("--fixed-scalings", default="linear@16,ntk@16,yarn@16,llama3@16,longrope@16",
                   help="more context-use rows of rope, each at one fixed factor at every c (<scaling>@<factor>): "
                        "they separate the use of context from the change of scaling that the rows of "
                        "--scalings make as c grows ('' for none)")
    p.add_argument("--retrieval-scalings", default="linear,ntk,yarn,llama3,longrope",
                   help="training-free scalings applied to rope_copy for retrieval, one row each")
    p.add_argument("--seed", type=cli.SEED, default=0, help="seed for keys, windows and the bootstrap")
    add_seed_dirs_flag(p, "whose copy-trained checkpoints of the measured names get retrieval rows too, "
                          "'<name> [seedN]'")
    add_common_flags(p)
    return p.parse_args(argv)


# ----------------------------------------------------------------------------- the run

def settings(args) -> dict:
    """The measures' settings for these arguments (--quick shrinks them); exits on bad values."""
    q = args.quick
    given = lambda value, default: default if value is None else value  # an explicit 0 or '' is checked, not replaced
    s = {"contexts": int_list(given(args.contexts, "0,16,48,112" if q else "0,64,192,448,960,1984,3840"),
                              "--contexts"),
         "distances": int_list(given(args.distances, "24,48,96" if q else "32,64,128,200,512,1024,2048,3900"),
                               "--distances"),
         "T": given(args.target_len, 32 if q else 256), "spans": given(args.spans, 4 if q else 32),
         "trials": given(args.trials, 4 if q else 32), "copy_trials": given(args.copy_trials, 8 if q else 128),
         "K": args.key_len, "alphabet": KEY_ALPHABETS[args.key_alphabet],
         "short": args.short if args.short is not None else (16 if q else 192),
         "scalings": check_scalings(args.scalings), "fixed_scalings": check_scalings(args.fixed_scalings,
                                                                                    "--fixed-scalings"),
         "retrieval_scalings": check_scalings(args.retrieval_scalings, "--retrieval-scalings"),
         "format_distances": int_list(given(args.format_distances, "24,48,96" if q else "32,128,200,512,1024"),
                                      "--format-distances"),
         "format_trials": given(args.format_trials, 8 if q else 128)}
    if s["short"] not in s["contexts"][:-1]:
        fail(f"--short must be one of the --contexts below the longest, got {s['short']} (contexts {s['contexts']})")
    if min(s["T"], s["spans"], s["trials"], s["copy_trials"]) < 1 or s["K"] < 2:
        fail(f"--target-len, --spans, --trials and --copy-trials must be positive and --key-len at least 2, "
             f"got {s['T']}, {s['spans']}, {s['trials']}, {s['copy_trials']}, {s['K']}")
    if 2 * s["K"] > len(s["alphabet"]):
        fail(f"--key-len {s['K']} needs 2 x {s['K']} distinct letters (the key and the control's fresh key), "
             f"but --key-alphabet {args.key_alphabet} has {len(s['alphabet'])}; use --key-len "
             f"{len(s['alphabet']) // 2} or less")
    if s["format_trials"] < 2 or s["format_distances"][0] < LONGEST_KEY:
        fail(f"--format-trials must be at least 2 and --format-distances at least {LONGEST_KEY} (the longest key), "
             f"got {s['format_trials']} and {s['format_distances'][0]}")
    if s["distances"][0] < s["K"]:
        fail(f"the repeat must start after the key ends: the shortest distance must be at least --key-len "
             f"{s['K']}, got {s['distances'][0]}")
    return s


# Evaluation-time switches of Llama 4's attention-temperature tuning (lab/variants.py, irope): the row
# "<checkpoint> (no temp)" is a checkpoint trained with it, evaluated without; "<checkpoint> (temp on)"
# one trained without it (a variant with a temperature_floor but the tuning off), evaluated with it.
NO_TEMP, TEMP_ON = "no temp", "temp on"


def switch_temperature(model, row: str) -> None:
    """Set the temperature switch a row's name carries (read on every forward, tiny_lm.GPTConfig)."""
    switch = row_names.parse(row).switch
    if switch == NO_TEMP:
        model.cfg.attn_temperature_tuning = False
    elif switch == TEMP_ON:
        model.cfg.attn_temperature_tuning = True


def make_jobs(names, s, only) -> list:
    """(row, checkpoint name, scaling or None, measures) in table order: text models get context
    use and retrieval, the copy family retrieval, and FORMAT_ROWS the passkey formats too; scaled
    rows: rope (context use, factor from the window and fixed), rope_copy (retrieval; +yarn also
    the formats); a model trained with the temperature tuning also gets a row with it switched off,
    one configured for it but trained without a row with it switched on."""
    jobs = []
    for n in names:
        cfg = VARIANTS.get(n, {})
        measures = {"retrieval"} if is_copy(n) else {"context", "retrieval"}
        jobs.append((n, n, None, measures | ({"formats"} if n in FORMAT_ROWS else set())))
        if cfg.get("attn_temperature_tuning"):
            jobs.append((row_names.row_name(n, switch=NO_TEMP), n, None, measures))
        elif cfg.get("temperature_floor"):
            jobs.append((row_names.row_name(n, switch=TEMP_ON), n, None, measures))
        if scaled(n) and not is_copy(n):  # a scheme that uses RoPE's tables: rope, a registered xPos
            jobs += [(row_names.row_name(n, x), n, x, {"context"}) for x in s["scalings"] + s["fixed_scalings"]]
        if scaled(n) and is_copy(n):  # rows of --retrieval-scalings, and those of FORMAT_ROWS whatever that says
            extra = [r.scaling_spec for r in map(row_names.parse, FORMAT_ROWS) if r.checkpoint == n and r.scaling]
            for x in dict.fromkeys(s["retrieval_scalings"] + extra):
                row = row_names.row_name(n, x)
                jobs.append((row, n, x, ({"retrieval"} if x in s["retrieval_scalings"] else set())
                             | ({"formats"} if row in FORMAT_ROWS else set())))
    if only:
        jobs = [(r, n, x, m & {only}) for r, n, x, m in jobs]
    return sorted([j for j in jobs if j[3]], key=lambda j: order_of(j[0]))


def seed_jobs(names, folders, paths: dict) -> list:
    """Retrieval jobs "<name> [label]" for the copy-trained names with a checkpoint in a seed folder
    ([(folder, label)], eval_common.seed_folders); their checkpoint paths go into paths."""
    jobs = []
    for d, label in folders:
        for n in (n for n in names if is_copy(n) and (Path(d) / f"{n}.pt").exists()):
            row = row_names.row_name(n, seed=label)
            jobs.append((row, n, None, {"retrieval"}))
            paths[row] = Path(d) / f"{n}.pt"
    return jobs


def rounded(r: dict) -> dict:
    """A result row with its floats at 4 decimals (the JSON's precision)."""
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}


def measure_row(job, data, s, args, make, out) -> None:
    """Run one row's measures; appends to out["context"], out["per_span"], out["retrieval"],
    out["formats"], and adds each measure's seconds to out["seconds"]."""
    row, name, scaling, measures = job
    device, val_ids, vocab, fingerprint, key_ids, longest = data
    model, ck = load_checked(out["paths"][row], device, make, vocab, fingerprint, longest=longest)
    out["provenance"][provenance_key(row)] = provenance_of(ck)
    switch_temperature(model, row)
    L_train = train_len_of(ck)
    out["train_lens"].add(L_train if name not in FINETUNES else L_train // FINETUNES[name]["seq_len_mult"])
    set_length = length_setter(model, scaling, L_train)
    copy = is_copy(name)
    t = time.perf_counter()
    if "context" in measures:
        per_span = context_use(model, val_ids, s["contexts"], s["T"], s["spans"], args.batch_tokens, set_length)
        out["context"].append(summarize_context(row, per_span, s["contexts"], s["short"], args.seed))
        out["per_span"][row] = [[round(v, 5) for v in r] for r in per_span.tolist()]
        t = lap(out, "context", t)
    if "retrieval" in measures:
        trials = lambda d: s["copy_trials"] if copy or d >= FAR_FROM else s["trials"]  # noqa: E731
        for r in retrieval(model, val_ids, s["distances"], s["K"], trials, key_ids, args.seed, args.batch_tokens,
                           set_length):
            out["retrieval"].append({"variant": row, "family": "copy" if copy else "text", "train_len": L_train,
                                     **rounded(r)})
        t = lap(out, "retrieval", t)
    if "formats" in measures:
        trials = lambda d: s["format_trials"]  # noqa: E731
        for fmt in FORMATS:
            for r in format_retrieval(model, val_ids, vocab, fmt, s["format_distances"], trials, key_ids, args.seed,
                                      args.batch_tokens, set_length):
                out["formats"].append({"variant": row, "family": "copy" if copy else "text", "train_len": L_train,
                                       **rounded(r)})
        lap(out, "formats", t)


def lap(out: dict, measure: str, t0: float) -> float:
    """Add the seconds since t0 to out["seconds"][measure]; returns now."""
    now = time.perf_counter()
    out["seconds"][measure] = out["seconds"].get(measure, 0.0) + now - t0
    return now


def main(argv=None) -> int:
    args = parse_args(argv)
    check_common(args)
    ckpt_dir, results, make = eval_dirs(args)
    if args.redraw:
        check_redraw([results / f"{n}.json" for n in MEASURE_OF], cli.command("long_context_test.py", argv))
        check_writable(results, "--results")
        return redraw(results)
    s = settings(args)  # every flag checked before any checkpoint is read
    folders = seed_folders(args)
    # a copy twin named in --variants whose checkpoint only other seeds' folders hold: their rows alone
    named = names_of(args.variants)
    seed_only = [n for n in named if is_copy(n) and not (ckpt_dir / f"{n}.pt").exists()
                 and any((d / f"{n}.pt").exists() for d, _ in folders)] if args.only in (None, "retrieval") else []
    rest = ",".join(n for n in named if n not in seed_only)
    names = find_checkpoints(ckpt_dir, rest or args.variants, make) if rest or not seed_only else []
    jobs = make_jobs(names, s, args.only)
    paths = {j[0]: ckpt_dir / f"{j[1]}.pt" for j in jobs}
    if args.only in (None, "retrieval"):  # other seeds of the copy twins measured: retrieval at the same keys
        jobs += seed_jobs([*names, *seed_only], folders, paths)
    if not jobs:
        fail(f"nothing to measure: --only {args.only} has no row among {','.join(names)} (formats: "
             f"{', '.join(FORMAT_ROWS)}; context use: the text-trained models)")
    device, val_ids, vocab, fingerprint = load_eval_data(args)
    cs, ds, T, K, fd = s["contexts"], s["distances"], s["T"], s["K"], s["format_distances"]
    if cs[-1] + s["spans"] * T + 1 > val_ids.numel() or KEY_AT + max(ds[-1] + K, fd[-1] + LONGEST_KEY) + 2 > \
            val_ids.numel():
        fail(f"the validation text has {val_ids.numel():,} characters, too few for a context of {cs[-1]} "
             f"plus {T} targets or a distance of {max(ds[-1], fd[-1])}; use smaller --contexts / --distances / "
             f"--format-distances")
    try:
        key_ids = key_ids_of(vocab, args.key_alphabet) if args.only != "context" else None
    except corpora.CorpusError as e:
        fail(f"{e}; or use --only context")
    longest = max(cs[-1] + T, KEY_AT + max(ds[-1] + K, fd[-1] + LONGEST_KEY))
    data = (device, val_ids, vocab, fingerprint, key_ids, longest)
    used = [paths[j[0]] for j in jobs]  # every checkpoint checked before any is scored;
    results = checked_results(args, results, used, ckpt_dir, make, vocab, fingerprint, longest)  # real runs only
    meta = {"contexts": cs, "target_len": T, "spans": s["spans"], "short": s["short"], "distances": ds,
            "key_len": K, "key_alphabet": s["alphabet"], "trials": s["trials"], "copy_trials": s["copy_trials"],
            "far_from": FAR_FROM, "seed": args.seed, "checkpoints": str(ckpt_dir),
            "format_distances": fd, "format_trials": s["format_trials"], "key_at": KEY_AT, "repeat_at": list(REPEAT_AT),
            "formats": {f: FORMATS[f].what for f in FORMATS}}  # the settings; what the run took is added after it
    for name, key in MEASURE_OF.items():  # the results files this run will add rows to: the same settings
        if any(key in j[3] for j in jobs):
            check_same(results, name, meta)
    out = {"paths": paths, "context": [], "per_span": {}, "retrieval": [], "formats": [], "train_lens": set(),
           "seconds": {}, "provenance": {}}
    t0, row_seconds = time.perf_counter(), {}
    for job in cli.progress(jobs, desc="checkpoints"):
        t_row = time.perf_counter()
        measure_row(job, data, s, args, make, out)
        row_seconds[job[0]] = round(time.perf_counter() - t_row, 1)
    meta = {**meta, "seconds": round(time.perf_counter() - t0, 1), "row_seconds": row_seconds,
            "peak_rss_gib": round(peak_rss_gib(), 3), "train_len": min(out["train_lens"]), "torch": torch.__version__}
    written = save(results, meta, out)
    print(headline(out, meta))
    print(f"{meta['seconds']:.0f} s, peak resident memory {meta['peak_rss_gib']:.2f} GiB; wrote "
          + ", ".join(f"{results}/{f}.*" for f in written))
    return 0


# ----------------------------------------------------------------------------- outputs

# The settings two runs must share for their rows to stand in one table.
SAME = {"context_use": ("contexts", "target_len", "spans", "short", "seed"),
        "retrieval": ("distances", "key_len", "key_alphabet", "trials", "copy_trials", "seed"),
        "retrieval_formats": ("format_distances", "format_trials", "formats", "key_alphabet", "key_at", "repeat_at",
                              "seed")}
MEASURE_OF = {"context_use": "context", "retrieval": "retrieval", "retrieval_formats": "formats"}  # file -> out key
FIGURES = ("context_use", "retrieval")  # the files with a figure (plots.<name>)


def check_same(results: Path, name: str, meta: dict) -> None:
    """Exit with one line if results/<name>.json holds rows made with other SAME settings than meta's
    (checked before anything is measured, and again when the rows are merged)."""
    old = read_json(results / f"{name}.json")
    changed = [k for k in SAME[name] if old and old["meta"].get(k) != meta[k]]
    if changed:
        fail(f"{results}/{name}.json was made with other {', '.join(changed)}; use the same settings to add "
             f"rows to it, or another --results")


def save(results: Path, meta: dict, out: dict) -> list:
    """Merge this run's rows into results/context_use.json, retrieval.json and
    retrieval_formats.json (rows of other checkpoints stay; meta["runs"] records each run that
    wrote rows still there), write them, and redraw their tables and figures. Returns the names written."""
    results.mkdir(parents=True, exist_ok=True)
    written = []
    for name, key in MEASURE_OF.items():
        rows, per_span = out[key], (out["per_span"] if key == "context" else None)
        if not rows:
            continue
        check_same(results, name, meta)
        old = read_json(results / f"{name}.json")
        m = dict(meta)
        runs = [run_record(meta, out, key, rows)]
        if old:
            runs = merge_runs(old, rows) + runs
            rows = merge_rows(old["rows"], rows)
            m["row_seconds"] = {**old["meta"].get("row_seconds", {}), **meta["row_seconds"]}
            m["train_len"] = min(old["meta"]["train_len"], meta["train_len"])
            per_span = None if per_span is None else {**old["per_span_loss"], **per_span}
        m["runs"] = runs
        m["provenance"] = merged_provenance((old or {}).get("meta"), out["provenance"], rows)
        data = {"meta": m, "rows": rows}
        if per_span is not None:
            data["per_span_loss"] = {r["variant"]: per_span[r["variant"]] for r in rows}
        atomic.atomic_write_text(results / f"{name}.json", json.dumps(data, indent=1))
        written.append(name)
    redraw(results, written)
    return written


def headline(out: dict, meta: dict) -> str:
    """This run's rows in brief, printed at the end: loss with no context and with the longest, and
    the effective context; exact match at each distance, % of windows. The full tables: results' .md files."""
    lines = []
    if out["context"]:
        cs = meta["contexts"]
        lines += [f"| variant | loss c=0 | loss c={cs[-1]} | effective context |", "|---|---|---|---|"]
        lines += [f"| {r['variant']} | {r['c0']:.3f} | {r[f'c{cs[-1]}']:.3f} | {r['effective_context']} |"
                  for r in out["context"]]
        lines.append("")
    if out["retrieval"]:
        ds, by = meta["distances"], {}
        for r in out["retrieval"]:
            by.setdefault(r["variant"], {})[r["distance"]] = r
        lines += ["| variant | " + " | ".join(f"exact d={d}" for d in ds) + " |", "|---|" + "---|" * len(ds)]
        lines += [f"| {v} | " + " | ".join(f"{100 * at[d]['exact']:.0f}% of {at[d]['trials']}" if d in at else ""
                                           for d in ds) + " |" for v, at in by.items()]
        lines.append("")
    return "\n".join(lines)


def run_record(meta: dict, out: dict, measure: str, rows: list) -> dict:
    """What one run wrote into one results file: its rows, the seconds spent on this measure and
    on the whole run, its peak resident memory, torch version and date."""
    return {"rows": list(dict.fromkeys(r["variant"] for r in rows)),
            "seconds": round(out["seconds"].get(measure, 0.0), 1), "run_seconds": meta["seconds"],
            "peak_rss_gib": meta["peak_rss_gib"], "torch": meta["torch"], "checkpoints": meta["checkpoints"],
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def merge_runs(old: dict, new_rows: list) -> list:
    """The run records of an existing results file, each cut to the rows this run does not replace,
    runs left with none dropped. A file written before runs were recorded gets one record for the
    rows it holds, with the seconds and memory its meta kept (those of its last run)."""
    fresh = {r["variant"] for r in new_rows}
    runs = old["meta"].get("runs")
    if runs is None:
        m = old["meta"]
        runs = [{"rows": list(dict.fromkeys(r["variant"] for r in old["rows"])), "seconds": None,
                 "run_seconds": m.get("seconds"), "peak_rss_gib": m.get("peak_rss_gib"), "torch": m.get("torch"),
                 "checkpoints": m.get("checkpoints"), "date": None,
                 "note": "written before runs were recorded: run_seconds and peak_rss_gib are its last run's"}]
    kept = [dict(r, rows=[v for v in r["rows"] if v not in fresh]) for r in runs]
    return [r for r in kept if r["rows"]]


def redraw(results: Path, which=tuple(MEASURE_OF)) -> int:
    """The CSV, markdown and figure of each measure from its JSON alone; the tables in the README
    and docs/ follow when results/ is the repository's."""
    found = [n for n in which if (results / f"{n}.json").exists()]
    if not found:
        fail(f"no {results}/context_use.json, retrieval.json or retrieval_formats.json to redraw from; run python "
             f"long_context_test.py first")
    tables = {"context_use": context_tables, "retrieval": retrieval_tables, "retrieval_formats": formats_tables}
    for name in found:
        data = read_json(results / f"{name}.json")
        csv_rows, table = tables[name](data["rows"], data["meta"])
        atomic.atomic_write_text(results / f"{name}.csv", csv_text(csv_rows))
        atomic.atomic_write_text(results / f"{name}.md", table)
        if name in FIGURES:
            getattr(plots, name)(results / f"{name}.png", data["rows"], data["meta"])
        sync_table(name, table, results)
    if is_repo_results(results):
        sync_glance(results)
    sync_settings(results)  # docs/settings.md: the findings in every setting (results/ and results/sympy)
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


RETRIEVAL_MEASURES = (("exact", "Exact match, % [95% interval]", 100, "{:.0f}%"),
                      ("per_char", "Per-character accuracy, %", 100, "{:.0f}%"),
                      ("gain", "Copy gain, nats/char [95% interval]", 1, "{:+.2f}"))
WINDOW_SHARES = ("exact", "successor")  # shares of windows: a count, so a Clopper-Pearson interval


def interval(r: dict, m: str) -> tuple:
    """The 95% interval of measure m of result row r: for a share of windows, Clopper-Pearson from
    its count (r[m] x r["trials"]), so a file written with bootstrap intervals prints the same;
    otherwise the bootstrap interval stored with it."""
    return share_ci(r[m], r["trials"]) if m in WINDOW_SHARES else (r[f"{m}_lo"], r[f"{m}_hi"])


def cell(r, m: str, scale: float, fmt: str, with_interval: bool = True) -> str:
    """One table cell: the value of measure m of row r (None: "-"), with its interval in brackets."""
    if r is None:
        return "-"
    text = fmt.format(scale * r[m])
    if with_interval:
        lo, hi = (fmt.format(scale * x).rstrip("%") for x in interval(r, m))
        text += f" [{lo}, {hi}]"
    return text


def windows_note(rows, meta) -> str:
    """How many windows each cell rests on, from the rows themselves (each records its count): the rule,
    and the rows still measured under an older one, by name."""
    far, many = meta.get("far_from", FAR_FROM), meta.get("copy_trials", meta["trials"])
    note = (f"Windows per cell: {many} for the copy family at every d and for every model from d = {far}, "
            f"{meta['trials']} for text models below it")
    fewer = {}
    for r in rows:
        if (r["family"] == "copy" or r["distance"] >= far) and r["trials"] < many:
            fewer.setdefault(r["trials"], []).append(r["variant"])
    for n, names in sorted(fewer.items()):
        note += (f"; rows measured before this rule and not again ({n} windows where the rule now takes {many}): "
                 f"{', '.join(dict.fromkeys(names))}")
    return note


def retrieval_tables(rows, meta):
    """(CSV rows: one per variant, exact match, per-character accuracy and gain per distance;
    markdown: one table per measure) of the retrieval table."""
    ds, by = meta["distances"], {}
    for r in rows:
        v = by.setdefault(r["variant"], {"family": r["family"], "train_len": r["train_len"], "at": {}})
        v["at"][r["distance"]] = r
    wide = [{"variant": n, "family": v["family"], "train_len": v["train_len"],
             **{f"{m}_{d}": v["at"][d][m] for m, *_ in RETRIEVAL_MEASURES for d in ds if d in v["at"]}}
            for n, v in by.items()]
    lines = []
    for m, title, scale, fmt in RETRIEVAL_MEASURES:
        head = ["variant", "trained on"] + [f"d={d}" for d in ds]
        lines += [f"**{title}**", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for n, v in ((n, v) for n, v in by.items() if not row_names.parse(n).seed):  # seeds: their own table
            # intervals for two of the three; all three are in the JSON
            cells = [cell(v["at"].get(d), m, scale, fmt, m != "per_char") for d in ds]
            trained = f"{'copy curriculum' if v['family'] == 'copy' else 'text'}, {v['train_len']}"
            lines.append("| " + " | ".join([n, trained] + cells) + " |")
        lines.append("")
    K, alphabet = meta["key_len"], meta.get("key_alphabet", "")
    lines += [f"A key of {K} distinct letters (from {alphabet!r}) at position {KEY_AT} of a window of validation "
              f"text and again d characters later; scored on characters 2..{K} of the repeat. Exact match: all "
              f"{K - 1} are the model's most likely next character (= greedy decoding). Copy gain: their loss in the "
              f"paired control window (the first copy replaced by {K} other letters, nothing else changed) minus "
              f"their loss in the planted window. {windows_note(rows, meta)}; intervals: exact match "
              f"Clopper-Pearson from its count of windows, "
              f"copy gain bootstrap over windows. 'trained on': the data and the training length."]
    return wide, "\n".join(lines + seeds_table(by, ds)) + "\n"


def seeds_table(by: dict, ds) -> list:
    """Lines of the seeds' table (none without seed rows): per checkpoint trained with more than one seed, every
    seed's exact match at each distance and their range, and the rule a ranking of two rows must pass."""
    seeds = {}
    for n in by:
        r = row_names.parse(n)
        if r.seed:
            seeds.setdefault(replace(r, seed="").name, []).append(n)
    groups = {base: [base] * (base in by) + sorted(rest) for base, rest in seeds.items()}
    if not groups:
        return []
    lines = ["", "**Exact match of each seed, %: seed 0 / the others in order (lowest-highest)**", "",
             "| variant | seeds | " + " | ".join(f"d={d}" for d in ds) + " |", "|---|---|" + "---|" * len(ds)]
    for base, names in groups.items():
        cells = []
        for d in ds:
            got = [100 * by[n]["at"][d]["exact"] for n in names if d in by[n]["at"]]
            cells.append("-" if not got else " / ".join(f"{x:.0f}" for x in got) + f" ({min(got):.0f}-{max(got):.0f})")
        lines.append(f"| {base} | {len(names)} | " + " | ".join(cells) + " |")
    lines += ["", "Each seed is the copy twin trained again with another seed and measured on the same keys and "
                  "windows. A ranking of two rows at a distance stands only where every seed of one lies above every "
                  "seed of the other (the lowest of one above the highest of the other): each seed's interval covers "
                  "its windows, the range across seeds the training runs."]
    return lines


FORMAT_MEASURES = (("per_char", "Per-character accuracy, % [95% interval]", 100, "{:.0f}%"),
                   ("gain", "Copy gain, nats/char [95% interval]", 1, "{:+.2f}"),
                   ("exact", "Exact match, % [95% interval]", 100, "{:.0f}%"))


def formats_tables(rows, meta):
    """(CSV rows: one per variant and format, each measure per distance; markdown: one table per
    measure, then the repeated letter's two kinds of character) of the passkey formats."""
    ds, formats, by = meta["format_distances"], list(meta["formats"]), {}
    for r in sorted(rows, key=lambda r: (order_of(r["variant"]), formats.index(r["format"]))):
        by.setdefault((r["variant"], r["format"]), {"train_len": r["train_len"], "at": {}})["at"][r["distance"]] = r
    measures = [m for m, *_ in FORMAT_MEASURES] + ["successor", "other"]
    wide = [{"variant": n, "format": f, "train_len": v["train_len"],
             **{f"{m}_{d}": v["at"][d].get(m, "") if d in v["at"] else "" for m in measures for d in ds}}
            for (n, f), v in by.items()]
    head = ["variant", "format"] + [f"d={d}" for d in ds]
    lines = []
    for m, title, scale, fmt in FORMAT_MEASURES:
        lines += [f"**{title}**", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join([n, f] + [cell(v["at"].get(d), m, scale, fmt) for d in ds]) + " |"
                  for (n, f), v in by.items()]
        lines.append("")
    a, b = meta["repeat_at"]
    lines += [f"**Repeated letter: the character after the letter's second occurrence, % [95% interval] / the "
              f"other scored characters, %**", "", "| " + " | ".join(["variant"] + head[2:]) + " |",
              "|" + "---|" * (len(head) - 1)]
    lines += ["| " + " | ".join([n] + [f"{cell(v['at'].get(d), 'successor', 100, '{:.0f}%')} / "
                                       f"{cell(v['at'].get(d), 'other', 100, '{:.0f}%', False)}" for d in ds]) + " |"
              for (n, f), v in by.items() if f == "repeated_letter"]
    trials = meta["format_trials"]
    lines += ["", "Formats: " + "; ".join(f"{f}: {what}" for f, what in meta["formats"].items()) + ". "
              f"The first copy at position {meta['key_at']} of a window of validation text, the repeat d characters "
              f"later (every format at a distance in the same windows); the paired control replaces the first copy "
              f"by one of the same format that differs at every place, nothing else changed. Scored: characters "
              f"2..K of the repeat. Repeated letter: the letter at key positions {a} and {b} (0-based); the character "
              f"after its second occurrence (position {b + 1}) cannot be had by looking up what followed that letter "
              f"before (that gives position {a + 1}). {trials} windows per format and distance. Intervals: Clopper-Pearson from the count of windows for exact match and the "
              f"repeated letter's character, bootstrap over windows otherwise."]
    return wide, "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
