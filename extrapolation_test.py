"""Train at 256, test at 256 ... 4096: perplexity of every trained variant (tutorial: 观察指标,
破坏实验 4, 交付物).

Reloads the checkpoints written by train_compare.py (no training here) and scores the SAME
validation tokens at every length: one span of the held-out plays is cut into
non-overlapping windows of each length L, so the 4096 row and the 256 row average the
same characters; only how much context each character gets (and at which positions)
changes. Also: the loss at each position of the longest windows, averaged over windows,
which shows where a scheme breaks.

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
    (train_compare.py), evaluated with the scaling they were fine-tuned with.
  * any other checkpoint in --ckpt-dir (e.g. rope_theta10) and --seed-dirs runs.
The learned table is sized for the longest length; positions never seen in training
use rows the optimizer never touched, and such cells are marked (untrained rows).

    python extrapolation_test.py                    # after python train_compare.py
    python extrapolation_test.py --quick            # after python train_compare.py --quick
"""
import argparse
import ast
import csv
import io
import json
import math
import resource
import sys
import time
import tokenize
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

import tiny_lm
from tiny_lm import CheckpointError, CorpusError
from train_compare import DEFAULT_VARIANTS, FINETUNES, VARIANTS, TrainConfig

# row suffix -> (rope_type, k): factor k * L / L_train at length L (at least 1); k None = factor 1
SCALINGS = {"linear": ("linear", 1), "ntk": ("ntk", 1), "ntk(4s)": ("ntk", 4), "ntk(16s)": ("ntk", 16),
            "dynamic": ("dynamic", None), "yarn": ("yarn", 1), "llama3": ("llama3", 1)}
POS_FILE = {"none": None, "learned": "pos_learned.py", "sin": "pos_sin.py", "rope": "pos_rope.py",
            "alibi": "pos_alibi.py"}
ACTS_ON = {"none": "nothing (NoPE)", "learned": "input embedding", "sin": "input embedding",
           "rope": "Q/K rotation", "alibi": "score bias"}
HERE = Path(__file__).resolve().parent


def code_lines(path: Path) -> int:
    """Lines holding code in a file: not blank, not a comment, not a docstring, not the
    file's own self-check (`_self_check` and the `if __name__ == "__main__":` block)."""
    src = path.read_text(encoding="utf-8")
    tree = ast.parse(src)
    doc_lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(node) is not None:
            d = node.body[0]
            doc_lines.update(range(d.lineno, d.end_lineno + 1))
    for node in tree.body:
        if (isinstance(node, ast.FunctionDef) and node.name == "_self_check") or \
                (isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)):
            doc_lines.update(range(node.lineno, node.end_lineno + 1))
    lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                            tokenize.DEDENT, tokenize.ENDMARKER):
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines - doc_lines)


def fail(msg: str, code: int = 2):
    tqdm.write(f"error: {msg}", file=sys.stderr)  # on its own line even under a progress bar
    sys.exit(code)


def evaluate(model, val_ids, lengths, span, batch_tokens, desc):
    """{L: mean loss}, per-position loss at max(lengths), seconds. Windows cut from val_ids[:span+1]."""
    losses, curve, t0 = {}, None, time.perf_counter()
    for L in tqdm(lengths, desc=desc, leave=False, file=sys.stderr):
        per_pos = tiny_lm.window_losses(model, val_ids, L, span // L, batch_size=max(1, batch_tokens // L))
        losses[L] = per_pos.mean().item()
        if L == max(lengths):
            curve = per_pos.mean(dim=0)  # (L,) average over windows
    return losses, curve, time.perf_counter() - t0


def scaling_at(name: str, L: int, L_train: int) -> dict:
    """The scaling dict of training-free row rope+<name> at evaluation length L."""
    kind, k = SCALINGS[name]
    factor = 1.0 if k is None else max(1.0, k * L / L_train)
    return {"rope_type": kind, "factor": factor, "original_max_len": L_train}


def factor_label(name: str) -> str:
    """How the factor of row rope+<name> follows the length: "s", "4s", ... or "1"."""
    k = SCALINGS[name][1]
    return "1" if k is None else ("s" if k == 1 else f"{k}s")


@torch.no_grad()
def cached_vs_full(model, val_ids, L: int, n_windows: int) -> dict:
    """Mean loss of the first n_windows windows of length L scored by one full forward and
    by feeding one token at a time through the KV cache (what generate() does)."""
    full = tiny_lm.window_losses(model, val_ids, L, n_windows).mean().item()
    device = next(model.parameters()).device
    ids = val_ids[:n_windows * L + 1]
    x = torch.stack([ids[w * L:(w + 1) * L] for w in range(n_windows)]).to(device)          # (N, L)
    y = torch.stack([ids[w * L + 1:(w + 1) * L + 1] for w in range(n_windows)]).to(device)  # (N, L)
    model.eval()
    cache, total = None, 0.0
    for t in range(L):
        out = model(x[:, t:t + 1], cache=cache)  # logits (N, 1, V); cache grows by one position
        cache = out.cache
        total += F.cross_entropy(out.logits[:, 0].float(), y[:, t], reduction="sum").item()
    cached = total / (n_windows * L)
    return {"length": L, "windows": n_windows, "loss_full": full, "loss_cached": cached,
            "difference": cached - full}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt-dir", default=None, help="checkpoints from train_compare.py (default runs/main, "
                                                    "or runs/quick with --quick)")
    p.add_argument("--variants", default=None, help="comma-separated checkpoints to evaluate (default: every "
                                                    "default variant, required, plus any other found)")
    p.add_argument("--lengths", default=None, help="comma-separated evaluation lengths "
                                                   "(default 256,512,1024,2048,4096; 64..512 with --quick)")
    p.add_argument("--tokens", type=int, default=None, help="scored tokens per length, rounded up to a multiple "
                                                            "of the longest length (default 65536)")
    p.add_argument("--scalings", default=",".join(SCALINGS),
                   help="training-free RoPE scalings to apply to the rope checkpoint, one row each ('' for none)")
    p.add_argument("--decode-len", type=int, default=None,
                   help="length at which rope+dynamic is also scored token by token through the KV cache "
                        "(default 1024; the longest --lengths with --quick; 0 to skip)")
    p.add_argument("--decode-windows", type=int, default=None,
                   help="windows scored token by token for that comparison (default 2; 1 with --quick)")
    p.add_argument("--seed-dirs", default=None, help="comma-separated extra checkpoint folders (other seeds) "
                                                     "whose rope/alibi rows are added to the table (default: "
                                                     "every runs/seed* folder; '' for none)")
    p.add_argument("--batch-tokens", type=int, default=16384, help="tokens per forward pass (memory knob)")
    p.add_argument("--corpus", default=None, help="the corpus the checkpoints were trained on (default Shakespeare)")
    p.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu) or a torch device name")
    p.add_argument("--results", default=None, help="output folder (default results/, or <ckpt-dir>/results "
                                                   "with --quick)")
    p.add_argument("--quick", action="store_true", help="smoke test on the --quick checkpoints")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    ckpt_dir = Path(args.ckpt_dir or ("runs/quick" if args.quick else "runs/main"))
    results = Path(args.results) if args.results else (ckpt_dir / "results" if args.quick else Path("results"))
    make = "python train_compare.py" + (" --quick" if args.quick else "")
    try:
        lengths = sorted({int(x) for x in (args.lengths or ("64,128,256,512" if args.quick else
                                                              "256,512,1024,2048,4096")).split(",")})
    except ValueError:
        fail(f"--lengths must be comma-separated integers, got {args.lengths!r}")
    if lengths[0] < 2:
        fail(f"every length must be at least 2, got {lengths[0]}")
    tokens = args.tokens or (4096 if args.quick else 65536)
    span = math.ceil(tokens / lengths[-1]) * lengths[-1]
    known = set(VARIANTS) | set(FINETUNES)
    if args.variants:
        names = args.variants.split(",")
        bad = [n for n in names if n not in known]
        if bad:
            fail(f"unknown variant(s) {','.join(bad)}; known: {','.join(sorted(known))}")
        required = names
    else:
        required = [n for n in DEFAULT_VARIANTS if n in VARIANTS]  # base schemes must exist
        names = [n for n in list(VARIANTS) + list(FINETUNES) if n in required or (ckpt_dir / f"{n}.pt").exists()]
    missing = [n for n in required if not (ckpt_dir / f"{n}.pt").exists()]
    if missing:
        print(f"error: no checkpoint for {','.join(missing)} in {ckpt_dir}/; run `{make}` first", file=sys.stderr)
        return 1
    scalings = [s for s in args.scalings.split(",") if s]
    if set(scalings) - set(SCALINGS):
        fail(f"unknown scaling(s) {','.join(sorted(set(scalings) - set(SCALINGS)))}; known: {','.join(SCALINGS)}")
    decode_len = args.decode_len if args.decode_len is not None else (lengths[-1] if args.quick else 1024)
    decode_windows = args.decode_windows if args.decode_windows is not None else (1 if args.quick else 2)
    if decode_len < 0 or decode_windows < 1:
        fail(f"--decode-len must be >= 0 and --decode-windows >= 1, got {decode_len} and {decode_windows}")
    try:
        device = tiny_lm.pick_device(args.device)
    except ValueError as e:
        fail(str(e))
    try:
        train_text, val_text, vocab = tiny_lm.load_corpus(
            args.corpus, min_val_chars=max(span, decode_len * decode_windows) + 1)
    except CorpusError as e:
        fail(str(e))
    val_ids = tiny_lm.CharTokenizer(vocab).encode(val_text)
    fingerprint = tiny_lm.corpus_fingerprint(train_text + val_text)

    # (row name, checkpoint path, scaling kind or None)
    jobs = [(n, ckpt_dir / f"{n}.pt", None) for n in names]
    if "rope" in names:
        jobs[names.index("rope") + 1:names.index("rope") + 1] = [(f"rope+{s}", ckpt_dir / "rope.pt", s) for s in scalings]
    seed_dirs = args.seed_dirs.split(",") if args.seed_dirs is not None else \
        ([] if args.quick else sorted(str(p) for p in Path("runs").glob("seed*") if p.is_dir()))
    for d in filter(None, seed_dirs):
        for n in ("rope", "alibi"):
            if (Path(d) / f"{n}.pt").exists():
                jobs.append((f"{n} [{Path(d).name}]", Path(d) / f"{n}.pt", None))

    rows, curves, decode = [], {}, None
    for row, path, scaling in tqdm(jobs, desc="checkpoints", file=sys.stderr):
        try:
            model, ck = tiny_lm.load_checkpoint(path, device=device, make_with=make)
        except CheckpointError as e:
            fail(str(e))
        if ck["vocab"] != vocab or ck.get("extra", {}).get("corpus", fingerprint) != fingerprint:
            fail(f"{path} was trained on another corpus (vocabulary or text differs); pass the same --corpus "
                 f"it was trained with, or retrain with `{make} --force`")
        cfg, tc = model.cfg, ck["extra"].get("train_config", {})
        L_train = tc.get("seq_len", TrainConfig.seq_len)
        if cfg.pos == "learned" and lengths[-1] > cfg.max_len:
            fail(f"{path}: length {lengths[-1]} is beyond its learned table ({cfg.max_len} rows); "
                 f"use --lengths up to {cfg.max_len}")
        if scaling is None:
            losses, curve, secs = evaluate(model, val_ids, lengths, span, args.batch_tokens, row)
        else:  # training-free: a fresh scaling for each length
            losses, curve, secs = {}, None, 0.0
            for L in lengths:
                model.set_rope_scaling(scaling_at(scaling, L, L_train))
                l1, c1, s1 = evaluate(model, val_ids, [L], span, args.batch_tokens, f"{row} L={L}")
                losses[L], secs = l1[L], secs + s1
                curve = c1 if L == lengths[-1] else curve
            if scaling == "dynamic" and decode_len:
                model.set_rope_scaling(scaling_at(scaling, decode_len, L_train))
                decode = {"variant": row, "factor": 1.0, "original_max_len": L_train,
                          **cached_vs_full(model, val_ids, decode_len, decode_windows)}
        base = cfg.pos
        if scaling is not None:
            kind, factor = SCALINGS[scaling][0], factor_label(scaling)
        elif cfg.rope_scaling:
            kind, factor = cfg.rope_scaling["rope_type"], f"{cfg.rope_scaling['factor']:g}"
        else:
            kind, factor = "", ""
        train_loss = ck["losses"]["train_loss"][-1] if ck["losses"].get("train_loss") else float("nan")
        ft = ck["extra"].get("variant") in FINETUNES
        rows.append({
            "variant": row, "pos": base, "scaling": kind, "scaling_factor": factor,
            "train_len": L_train, "rope_theta": cfg.rope_theta if base == "rope" else None,
            "train_ppl": math.exp(train_loss),
            **{f"ppl_{L}": math.exp(losses[L]) for L in lengths},
            "untrained_from": L_train if base == "learned" else None,
            "pos_file_loc": code_lines(HERE / POS_FILE[base]) if POS_FILE[base] else 0,
            "acts_on": ACTS_ON[base],
            "params_added": model.num_params(pos_only=True),
            "params_trained_pos": (L_train * cfg.n_embd) if base == "learned" else 0,
            "train_tokens": ck["extra"].get("tokens"), "finetune": ft,
            "eval_seconds": round(secs, 1),
        })
        curves[row] = curve.tolist()
        del model
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2  # KiB on Linux -> GiB
    write_results(results, rows, curves, lengths, span, peak_gb, ckpt_dir, decode)
    if results.resolve() == (HERE / "results").resolve():
        update_readme(HERE / "README.md", (results / "extrapolation.md").read_text(encoding="utf-8"))
    print(f"peak resident memory {peak_gb:.2f} GiB; wrote {results}/extrapolation.md, .csv, .json, "
          f"ppl_vs_length.png, loss_vs_position.png")
    return 0


README_START, README_END = "<!-- extrapolation-table:start -->", "<!-- extrapolation-table:end -->"


def update_readme(readme: Path, table_md: str) -> None:
    """Copy the table into README.md between its two markers, so the README never shows a
    number that this script did not write."""
    if not readme.exists():
        return
    text = readme.read_text(encoding="utf-8")
    a, b = text.find(README_START), text.find(README_END)
    if a < 0 or b < a:
        return
    tiny_lm.atomic_write_text(readme, text[:a + len(README_START)] + "\n" + table_md + text[b:])


def write_results(results: Path, rows, curves, lengths, span, peak_gb, ckpt_dir, decode=None) -> None:
    results.mkdir(parents=True, exist_ok=True)
    cols = list(rows[0])
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols)
    w.writeheader()
    w.writerows(rows)
    tiny_lm.atomic_write_text(results / "extrapolation.csv", buf.getvalue())
    meta = {"lengths": lengths, "scored_tokens_per_length": span, "peak_rss_gib": round(peak_gb, 3),
            "checkpoints": str(ckpt_dir), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "dynamic_cached_decoding": decode}
    tiny_lm.atomic_write_text(results / "extrapolation.json", json.dumps({"meta": meta, "rows": rows,
                                                        "loss_vs_position": curves}, indent=1))
    # Markdown table: ppl, marking learned cells that use untrained rows.
    L_max = lengths[-1]
    head = ["variant", "acts on", "train ppl"] + [f"ppl@{L}" for L in lengths] + \
           [f"ppl@{L_max} / ppl@{lengths[0]}", "pos-file LoC", "params added"]
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
        f"Perplexity per character (exp of mean loss in nats) on the same {span:,} validation characters "
        f"at every length (held-out plays), cut into non-overlapping windows. Training length: "
        f"{rows[0]['train_len']}. `train ppl` is exp of the last logged training loss.",
        "† positions beyond the training length read rows of the learned table that no gradient ever "
        "reached (their random initial values).",
        "rope+X: training-free scaling with factor s = L / training length at each length, or the multiple "
        "of s in the row's name. rope+dynamic uses the fixed factor 1 (the length sets the base), so with "
        "each window scored whole it equals rope+ntk. rope_ft_*: scaling with the factor shown plus a "
        "fine-tune (see extra compute in README).",
        "pos-file LoC: lines of code (no comments, docstrings or blank lines) of the pos_*.py file, "
        "scaling included for RoPE.",
        f"Peak resident memory of this evaluation: {peak_gb:.2f} GiB.",
    ]
    if decode:
        notes.insert(-1, f"Cached decoding, {decode['variant']} (factor 1) at length {decode['length']}, "
                         f"{decode['windows']} window(s): mean loss {decode['loss_full']:.4f} nats/char scored "
                         f"by one full forward, {decode['loss_cached']:.4f} fed one token at a time through the "
                         f"KV cache (difference {decode['difference']:+.4f}); cached keys keep the base of the "
                         f"length at which they were written.")
    tiny_lm.atomic_write_text(results / "extrapolation.md", "\n".join(out + notes) + "\n")
    plot(results, rows, curves, lengths)


def plot(results: Path, rows, curves, lengths) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train_len = rows[0]["train_len"]
    fig, ax = plt.subplots(figsize=(9.5, 6))
    colors = plt.get_cmap("tab20").colors
    for i, r in enumerate(rows):
        style = "-" if "+" not in r["variant"] and not r["finetune"] else ("--" if not r["finetune"] else "-.")
        ax.plot(lengths, [r[f"ppl_{L}"] for L in lengths], style, marker="o", ms=4, label=r["variant"],
                color=colors[(2 * i) % 20 + (2 * i) // 20 % 2])
    ax.axvline(train_len, color="grey", ls=":", lw=1, label=f"training length {train_len}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(lengths, [str(L) for L in lengths])
    ax.set_xlabel("evaluation length (characters per window)")
    ax.set_ylabel("perplexity per character (log scale)")
    ax.set_title(f"Trained at {train_len}, evaluated longer: perplexity vs length")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(results / "ppl_vs_length.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8.5, 5.5))
    L = lengths[-1]
    bins = torch.unique(torch.logspace(0, math.log10(L), 60).long().clamp(1, L))  # log-spaced bin edges
    for r in rows:
        if r["finetune"] or ("+" in r["variant"] and r["scaling"] not in ("yarn",)):
            continue  # keep the plot readable: base schemes, rope+yarn
        c = torch.tensor(curves[r["variant"]])
        xs = [(a + b) / 2 for a, b in zip(bins[:-1].tolist(), bins[1:].tolist())]
        ys = [c[a - 1:b - 1].mean().item() if b > a else c[a - 1].item()
              for a, b in zip(bins[:-1].tolist(), bins[1:].tolist())]
        ax.plot(xs, ys, label=r["variant"])
    ax.axvline(train_len, color="grey", ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("position in the window (log scale)")
    ax.set_ylabel("mean loss (nats/char), averaged over windows")
    ax.set_title(f"Where each scheme breaks: loss at each position of {L}-long windows")
    ax.set_ylim(top=min(ax.get_ylim()[1], 5.0))
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(results / "loss_vs_position.png", dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
