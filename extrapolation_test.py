"""Train at 256, test at 256 ... 4096: perplexity of every trained variant (tutorial: 观察指标,
破坏实验 4, 交付物).

Reloads the checkpoints written by train_compare.py (no training here) and scores the SAME
validation tokens at every length (perplexity.evaluate): blocks of the longest length, spread
evenly over the whole validation text (all three held-out plays), are cut into non-overlapping
windows of each length L, so the 4096 row and the 256 row average the same characters; only
how much context each character gets (and at which positions) changes. Also: the loss at each
position of the longest windows, raw and minus the same character's loss in the shortest
windows, which shows where a scheme breaks.

Perplexity cannot say whether a model USES a long context: a window of length L starts
cold once per L characters, so longer windows score better even for a model that only
looks a few dozen characters back. long_context_test.py measures that.

Rows:
  * none / learned / sin / rope / alibi: the checkpoints as trained, no scaling.
  * rope + {linear, ntk, yarn, llama3}: the rope checkpoint with a training-free RoPE
    scaling whose factor is set from the evaluation length, s = L / L_train.
  * rope+ntk(4s), rope+ntk(16s): static NTK with a factor 4 and 16 times the extension
    ratio, still training-free (NTK keeps the fast pairs, so a larger factor costs little).
  * rope+dynamic: dynamic NTK with the fixed factor 1 and original length L_train, as it is
    meant to be used: the length itself sets the base. Each window is scored whole, so the
    length is the window's and the row equals rope+ntk. Dynamic differs from static NTK only
    in cached decoding, where each cached key keeps the base of the length it was written
    at; that difference is measured once (--decode-len, --decode-windows) and reported
    under the table.
  * rope_ft_linear / rope_ft_yarn: scaling plus a short fine-tune at a longer length
    (train_compare.py), evaluated with the scaling they were fine-tuned with;
    rope_ft_none / alibi_ft: the same fine-tune without a scaling (the controls).
  * any other checkpoint in --ckpt-dir (e.g. rope_theta10) and --seed-dirs runs.
The learned table is sized for the longest length; positions never seen in training
use rows the optimizer never touched, and such cells are marked (untrained rows). The
`learned (clamped)` row reads the last trained row at every later position instead.

    python extrapolation_test.py                    # after python train_compare.py
    python extrapolation_test.py --preset preview   # after python train_compare.py --preset preview
    python extrapolation_test.py --quick            # after python train_compare.py --quick
    python extrapolation_test.py --redraw           # tables and figures from results/extrapolation.json

A run of some checkpoints merges its rows into the results already there (same lengths only).
Only real runs write results/ (and the tables in README.md and docs/): if a checkpoint is not
the real run of its variant (variants.real_run_mismatch: other sizes or steps, a --quick or
preview run), the output goes to <ckpt-dir>/results, or an explicit --results results is refused.
"""

import argparse
import json
import math
import sys
from pathlib import Path

import torch

from lab import cli
from lab import row_names
from lab import plots
import schemes
from lab import streaming
import tiny_lm
from lab.options import as_lab
from lab import atomic
from lab import corpora
from lab.eval_common import (SCALINGS, add_common_flags, add_seed_dirs_flag, check_common, check_redraw, check_scalings, check_writable,
                         checked_results, code_lines, own_definitions,
                         csv_text, eval_dirs, factor_label, fail, find_checkpoints, int_list, is_repo_results, json_to_redraw,
                         length_setter, load_checked, load_eval_data, merge_rows, merged_provenance, peak_rss_gib,
                         provenance_from, provenance_key, read_json, seed_folders,
                         split_scaling, spread_blocks, train_len_of)
from lab.perplexity import cached_vs_full, evaluate
from lab.docsync.tables import sync_glance, sync_settings, sync_table
from lab.variants import COPY_OF, FINETUNES, PRESETS, VARIANTS, scaled

HERE = Path(__file__).resolve().parent


def core_loc(pos: str) -> int:
    """code_lines of a scheme's pos file (its registry entry's; 0 for NoPE): it describes the code, so tables
    take it at redraw."""
    entry = schemes.get(pos)
    return code_lines(HERE / entry.pos_file, only=own_definitions(entry)) if entry.pos_file else 0


def clamp_learned_rows(model, L_train: int) -> None:
    """The alternative to untrained rows: every position from L_train on reads row L_train - 1."""
    with torch.no_grad():
        w = model.learned.table.weight  # (max_len, C)
        w[L_train:] = w[L_train - 1]


def parse_args(argv=None):
    schemes.load_argv(argv)  # --scheme-file first: its scheme is a name like the others
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    schemes.file_flag(p)
    p.add_argument("--ckpt-dir", default=None, help="checkpoints from train_compare.py (default runs/main; "
                                                    "runs/quick with --quick, runs/preview with --preset preview)")
    p.add_argument("--variants", default=None, help="comma-separated checkpoints to evaluate, or a family "
                                                    "of train_compare.py (copy, current, theta) (default: every "
                                                    "default variant, required, plus any other found)")
    p.add_argument("--lengths", default=None, help="comma-separated evaluation lengths "
                                                   "(default 256,512,1024,2048,4096; 64..512 with --quick)")
    p.add_argument("--tokens", type=int, default=None, help="scored tokens per length, rounded up to a multiple "
                                                            "of the longest length (default 65536; 32768 with --preset preview)")
    p.add_argument("--scalings", default=None,
                   help=f"training-free RoPE scalings to apply to the rope checkpoint, one row each ('' for none; "
                        f"default {','.join(SCALINGS)}; yarn with --preset preview)")
    p.add_argument("--decode-len", type=int, default=None,
                   help="length at which rope+dynamic is also scored token by token through the KV cache "
                        "(default 1024; the longest --lengths with --quick; 0 to skip)")
    p.add_argument("--decode-windows", type=int, default=None,
                   help="windows scored token by token for that comparison (default 2; 1 with --quick)")
    add_seed_dirs_flag(p, "whose rows are added to the table")
    add_common_flags(p)
    return p.parse_args(argv)


def corpus_description(corpus, n_val: int, span: int, n_blocks: int) -> str:
    """What the scored characters are, in words, for the captions."""
    text = (f"the three held-out plays ({', '.join(p.replace('-', ' ').title() for p in corpora.VAL_PLAYS)}; "
            f"{n_val:,} characters)" if corpus is None else f"the validation part of {corpus} ({n_val:,} characters)")
    return f"{span:,} characters of {text}, taken as {n_blocks} blocks spread evenly from its start to its end"


# ----------------------------------------------------------------------------- the run

def settings(args) -> dict:
    """Lengths, scored span, scalings and the cached-decoding check for these arguments."""
    preview = PRESETS["preview"]["eval"] if args.preset == "preview" else {}
    default = "64,128,256,512" if args.quick else "256,512,1024,2048,4096"
    lengths = sorted(set(int_list(default if args.lengths is None else args.lengths, "--lengths", increasing=False)))
    if lengths[0] < 2:
        fail(f"--lengths: every length must be at least 2, got {lengths[0]}")
    if any(lengths[-1] % L for L in lengths):
        fail(f"--lengths: every length must divide the longest ({lengths[-1]}) so that each length scores the same "
             f"characters; got {','.join(map(str, lengths))}")
    tokens = args.tokens if args.tokens is not None else (4096 if args.quick else preview.get("tokens", 65536))
    if tokens < 1:
        fail(f"--tokens must be positive, got {tokens}")
    scalings = check_scalings(args.scalings if args.scalings is not None else preview.get("scalings", ",".join(SCALINGS)))
    decode_len = args.decode_len if args.decode_len is not None else (lengths[-1] if args.quick else 1024)
    decode_windows = args.decode_windows if args.decode_windows is not None else (1 if args.quick else 2)
    if decode_len < 0 or decode_windows < 1:
        fail(f"--decode-len must be >= 0 and --decode-windows >= 1, got {decode_len} and {decode_windows}")
    seed_folders(args)  # a folder that does not exist: one line, before any work
    return {"lengths": lengths, "span": math.ceil(tokens / lengths[-1]) * lengths[-1], "scalings": scalings,
            "decode_len": decode_len, "decode_windows": decode_windows}


# StreamingLLM (lab/streaming.py), training-free, on the models the paper streams (Llama's RoPE, MPT's ALiBi): the row
# "<name> (streaming)" reads through a cache of 4 first tokens + the 252 latest, positions inside the cache; its
# control "<name> (window)" through the 256 latest. A cache the size of the training length, at every length.
STREAMED, STREAMING, WINDOW = ("rope", "alibi"), "streaming", "window"


def make_jobs(args, names, ckpt_dir: Path, scalings) -> list:
    """(row name, checkpoint path, scaling kind, or "clamp", "streaming", "window", or None) for every row."""
    jobs = [(n, ckpt_dir / f"{n}.pt", None) for n in names]
    for n in [n for n in names if scaled(n) and n not in COPY_OF]:  # every scheme that uses RoPE's tables
        at = [j[0] for j in jobs].index(n) + 1
        jobs[at:at] = [(row_names.row_name(n, s), ckpt_dir / f"{n}.pt", s) for s in scalings]
    if args.preset == "preview":  # the preview's table: the five schemes and RoPE+YaRN (the README says so)
        return jobs
    if "learned" in names and not args.variants:
        clamped = row_names.row_name("learned", switch="clamped")
        jobs.insert(names.index("learned") + 1, (clamped, ckpt_dir / "learned.pt", "clamp"))
    for n in [n for n in STREAMED if n in names]:  # after the checkpoint's other rows
        at = max(i for i, j in enumerate(jobs) if j[1] == ckpt_dir / f"{n}.pt") + 1
        jobs[at:at] = [(row_names.row_name(n, switch=w), ckpt_dir / f"{n}.pt", w) for w in (STREAMING, WINDOW)]
    for d, label in seed_folders(args):  # other seeds: runs/seed*/, runs/seed*/NAME/ for a named corpus
        jobs += [(row_names.row_name(n, seed=label), d / f"{n}.pt", None) for n in VARIANTS if (d / f"{n}.pt").exists()]
    return jobs


DECODE_ROW = "rope+dynamic"  # the row whose cached decoding meta["dynamic_cached_decoding"] reports


def score_row(job, data, s, args, make):
    """Evaluate one row: returns (table row, per-position curves, cached-decoding check or None)."""
    row, path, scaling = job
    device, val_ids, vocab, fingerprint, blocks = data
    lengths = s["lengths"]
    model, ck = load_checked(path, device, make, vocab, fingerprint, longest=lengths[-1])
    cfg, L_train = model.cfg, train_len_of(ck)
    switch = scaling in ("clamp", STREAMING, WINDOW)  # an evaluation switch, not a RoPE scaling
    if scaling == "clamp":
        clamp_learned_rows(model, L_train)
    elif scaling in (STREAMING, WINDOW):
        model = as_lab(model)  # StreamingLLM is a bench switch (lab/options.py): the same weights in a LabLM
        model.set_streaming(streaming.N_SINK if scaling == STREAMING else 0, L_train)
    set_length = length_setter(model, None if switch else scaling, L_train)
    losses, per_char, secs = evaluate(model, val_ids, lengths, blocks, args.batch_tokens, row, set_length)
    decode = None
    if row == DECODE_ROW and s["decode_len"]:  # plain RoPE's check only (docs/rope_scaling.md), not xpos+dynamic
        set_length(s["decode_len"])
        decode = {"variant": row, "factor": 1.0, "original_max_len": L_train,
                  **cached_vs_full(model, val_ids, s["decode_len"], s["decode_windows"])}
    kind, factor = "", ""
    if scaling is not None and not switch:
        kind, factor = split_scaling(scaling)[0], factor_label(scaling)  # also a fixed-factor row, yarn@16
    elif scaling is None and cfg.rope_scaling:
        kind, factor = cfg.rope_scaling["rope_type"], f"{cfg.rope_scaling['factor']:g}"
    train_loss = ck["losses"]["train_loss"][-1] if ck["losses"].get("train_loss") else float("nan")
    base = cfg.pos
    out = {"variant": row, "pos": base, "scaling": kind, "scaling_factor": factor, "train_len": L_train,
           "rope_theta": cfg.rope_theta if schemes.get(base).rope_options else None, "train_ppl": math.exp(train_loss),
           **{f"ppl_{L}": math.exp(losses[L]) for L in lengths},
           "untrained_from": L_train if base == "learned" and scaling != "clamp" else None,
           "pos_file_loc": core_loc(base), "acts_on": schemes.get(base).acts_on,
           "params_added": model.num_params(pos_only=True),
           "params_trained_pos": (L_train * cfg.n_embd) if base == "learned" else 0,
           "train_tokens": ck["extra"].get("tokens"), "finetune": ck["extra"].get("variant") in FINETUNES,
           "eval_seconds": round(secs, 1)}
    long, short = per_char[lengths[-1]], per_char[lengths[0]]  # (blocks, L_max) each
    return out, {"loss": long.mean(0).tolist(), "minus_short": (long - short).mean(0).tolist()}, decode


def main(argv=None) -> int:
    args = parse_args(argv)
    check_common(args)
    ckpt_dir, results, make = eval_dirs(args)
    if args.redraw:
        check_redraw([results / "extrapolation.json"], cli.command("extrapolation_test.py", argv))
        check_writable(results, "--results")
        return redraw(results)
    s = settings(args)
    names = find_checkpoints(ckpt_dir, args.variants, make, default="main")
    device, val_ids, vocab, fingerprint = load_eval_data(
        args, min_val_chars=max(s["span"], s["decode_len"] * s["decode_windows"]) + 1)
    try:
        blocks = spread_blocks(val_ids.numel(), s["lengths"][-1], s["span"] // s["lengths"][-1])
    except corpora.CorpusError as e:
        fail(str(e))
    jobs = make_jobs(args, names, ckpt_dir, s["scalings"])
    results = checked_results(args, results, [j[1] for j in jobs], ckpt_dir, make, vocab, fingerprint, s["lengths"][-1])
    old = read_json(results / "extrapolation.json")
    if old and (old["meta"]["lengths"] != s["lengths"] or old["meta"]["scored_tokens_per_length"] != s["span"]):
        fail(f"{results}/extrapolation.json holds rows scored at lengths {old['meta']['lengths']} on "
             f"{old['meta']['scored_tokens_per_length']} characters; use the same --lengths and --tokens to add "
             f"rows to it, or another --results")
    rows, curves, decode = [], {}, None
    for job in cli.progress(jobs, desc="checkpoints"):
        row, curves[job[0]], dec = score_row(job, (device, val_ids, vocab, fingerprint, blocks), s, args, make)
        rows.append(row)
        decode = dec or decode
    meta = {"lengths": s["lengths"], "scored_tokens_per_length": s["span"],
            "scored_text": corpus_description(args.corpus, val_ids.numel(), s["span"], len(blocks)),
            "peak_rss_gib": round(peak_rss_gib(), 3), "checkpoints": str(ckpt_dir), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "dynamic_cached_decoding": decode,
            **({"preset": args.preset} if args.preset else {})}
    if old:  # rows of checkpoints not scored now stay; a decoding check not redone now stays
        rows, curves = merge_rows(old["rows"], rows), {**old["loss_vs_position"], **curves}
        meta["dynamic_cached_decoding"] = decode or old["meta"].get("dynamic_cached_decoding")
        # the memory of the largest run behind the rows: a run of a few rows does not lower the full run's
        meta["peak_rss_gib"] = max(meta["peak_rss_gib"], old["meta"].get("peak_rss_gib") or 0.0)
    meta["provenance"] = merged_provenance((old or {}).get("meta"), {provenance_key(j[0]): provenance_from(j[1])
                                                                    for j in jobs}, rows)
    results.mkdir(parents=True, exist_ok=True)
    atomic.atomic_write_text(results / "extrapolation.json", json.dumps(
        {"meta": meta, "rows": rows, "loss_vs_position": {r["variant"]: curves[r["variant"]] for r in rows}}, indent=1))
    redraw(results)
    scored = {j[0] for j in jobs}
    print(preview_table([r for r in rows if r["variant"] in scored], meta).split("\n\n")[0])  # this run's rows
    print(f"peak resident memory {peak_rss_gib():.2f} GiB; wrote {results}/extrapolation.md (every row, with "
          f"more columns), .csv, .json, ppl_vs_length.png, loss_vs_position.png")
    return 0


# ----------------------------------------------------------------------------- outputs

def redraw(results: Path) -> int:
    """extrapolation.csv, .md and the figures from results/extrapolation.json alone; the tables
    in the README and docs/ follow when results/ is the repository's."""
    data = json_to_redraw(results / "extrapolation.json", "python extrapolation_test.py")
    rows, meta, lengths = data["rows"], data["meta"], data["meta"]["lengths"]
    # the code as it is now, not at scoring; a row whose scheme is not loaded (another --scheme-file's) keeps its count
    rows = [{**r, "pos_file_loc": core_loc(r["pos"]) if r["pos"] in schemes.REGISTRY else r.get("pos_file_loc")}
            for r in rows]
    atomic.atomic_write_text(results / "extrapolation.csv", csv_text(rows))
    table = (preview_table if meta.get("preset") == "preview" else markdown_table)(rows, meta)
    atomic.atomic_write_text(results / "extrapolation.md", table)
    plots.ppl_vs_length(results / "ppl_vs_length.png", rows, lengths)
    plots.ppl_vs_length_all(results / "ppl_vs_length_all.png", rows, lengths)
    plots.loss_vs_position(results / "loss_vs_position.png", rows, data["loss_vs_position"], lengths)
    sync_table("extrapolation", table, results)
    if is_repo_results(results):
        sync_glance(results)
    sync_settings(results)  # docs/settings.md: the findings in every setting (results/ and results/sympy)
    return 0


def preview_table(rows, meta) -> str:
    """The preview's table: perplexity at every length, nothing else (the shape, not the numbers)."""
    lengths = meta["lengths"]
    out = ["| variant | " + " | ".join(f"ppl@{L}" for L in lengths) + " |", "|---|" + "---|" * len(lengths)]
    out += ["| " + " | ".join([r["variant"]] + [f"{r[f'ppl_{L}']:.2f}" for L in lengths]) + " |" for r in rows]
    return "\n".join(out) + (f"\n\nPreview (python train_compare.py --preset preview): small models trained briefly "
                             f"at {rows[0]['train_len']}, perplexity per character on {meta['scored_text']}. "
                             f"The full run's numbers are in results/extrapolation.md.\n")


def markdown_table(rows, meta) -> str:
    """The table of results/extrapolation.md: perplexity at every length, learned cells that use
    untrained rows marked, and the notes that say what was scored."""
    lengths = meta["lengths"]
    # Markdown table: ppl, marking learned cells that use untrained rows.
    L_max = lengths[-1]
    head = ["variant", "acts on", "train ppl"] + [f"ppl@{L}" for L in lengths] + \
           [f"ppl@{L_max} / ppl@{lengths[0]}", "core LoC", "params added"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = []
        for L in lengths:
            v = f"{r[f'ppl_{L}']:.2f}"
            if r["untrained_from"] is not None and L > r["untrained_from"]:
                v += " †"
            cells.append(v)
        params = f"{r['params_added']:,}"
        if r["pos"] == "learned":
            params += f" ({r['params_trained_pos']:,} trained)"
        acts = r["acts_on"] + (f" + {r['scaling']} (factor {r['scaling_factor']})" if r["scaling"] else "") + \
            (" + fine-tune" if r["finetune"] else "")
        out.append("| " + " | ".join([r["variant"], acts, f"{r['train_ppl']:.2f}"] + cells +
                                     [f"{r[f'ppl_{L_max}'] / r[f'ppl_{lengths[0]}']:.2f}",
                                      str(r["pos_file_loc"]), params]) + " |")
    notes = [
        "",
        f"Perplexity per character (exp of mean loss in nats) on the same characters at every length: "
        f"{meta['scored_text']}, each block cut into non-overlapping windows of the length. Training length: "
        f"{rows[0]['train_len']}. `train ppl` is exp of the last logged training loss.",
        "† positions beyond the training length read rows of the learned table that no gradient ever "
        "reached: random vectors with the scale of the trained rows' initialisation. `learned (clamped)` "
        "reads the last trained row at every position past it instead.",
        "rope+X: training-free scaling with factor s = L / training length at each length, or the multiple "
        "of s in the row's name. rope+dynamic uses the fixed factor 1 (the length sets the base), so with "
        "each window scored whole it equals rope+ntk. rope_ft_*: scaling with the factor shown plus a "
        "fine-tune (its extra compute: docs/results.md).",
        *([f"<name> (streaming): StreamingLLM (lab/streaming.py), training-free: every layer reads through a cache "
           f"of {streaming.N_SINK} first tokens + the latest, positions counted inside the cache; <name> (window): "
           f"its control, the latest keys only; both a cache of the training length, so both equal the model's "
           f"own row up to it."] if any(row_names.parse(r["variant"]).switch == STREAMING for r in rows) else []),
        "core LoC: lines of code (no comments, docstrings, blank lines or self-check) of the scheme's plain "
        "form, the part of its pos_*.py file before the first `# ---- ` fence; for RoPE that is plain RoPE, "
        "without its options, scalings and Hugging Face config reading. Counted from the code at redraw.",
        f"Peak resident memory of the largest evaluation run behind these rows: {meta['peak_rss_gib']:.2f} GiB.",
    ]
    decode = meta.get("dynamic_cached_decoding")
    if decode:
        notes.insert(-1, f"Cached decoding, {decode['variant']} (factor 1) at length {decode['length']}, "
                         f"{decode['windows']} window(s): mean loss {decode['loss_full']:.4f} nats/char scored "
                         f"by one full forward, {decode['loss_cached']:.4f} fed one token at a time through the "
                         f"KV cache (difference {decode['difference']:+.4f}); cached keys keep the base of the "
                         f"length at which they were written.")
    return "\n".join(out + notes) + "\n"


if __name__ == "__main__":
    sys.exit(main())
