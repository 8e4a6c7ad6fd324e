"""Train at 256, test at 256 ... 4096: perplexity of every trained variant (tutorial: 观察指标,
破坏实验 4, 交付物).

Reloads the checkpoints written by train_compare.py (no training here) and scores the SAME
validation tokens at every length: blocks of the longest length, spread evenly over the
whole validation text (all three held-out plays), are cut into non-overlapping windows of
each length L, so the 4096 row and the 256 row average the same characters; only how much
context each character gets (and at which positions) changes. Also: the loss at each
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


def spread_blocks(n_ids: int, block: int, n_blocks: int) -> list:
    """Starts of n_blocks non-overlapping blocks of block + 1 tokens, spread evenly from the
    beginning to the end of a text of n_ids tokens (so every held-out play is sampled)."""
    if n_blocks * block + 1 > n_ids:
        raise CorpusError(f"validation text has {n_ids} tokens, fewer than {n_blocks} blocks of {block} + 1; "
                          f"use --tokens {block * max(1, (n_ids - 1) // block)} or less, or shorter --lengths")
    last = n_ids - block - 1
    return [round(i * last / max(1, n_blocks - 1)) for i in range(n_blocks)]


@torch.no_grad()
def token_losses(model, seqs: torch.Tensor, batch_size: int, hits: bool = False):
    """Loss (nats) of predicting seqs[:, 1:] from seqs[:, :-1] at every position.
    seqs: (N, T + 1) token ids -> (N, T), in batches of batch_size rows. hits=True also
    returns whether the most likely next token was the right one, (N, T) bool."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    loss, hit = [], []
    for i in range(0, len(seqs), batch_size):
        x, y = seqs[i:i + batch_size, :-1].to(device), seqs[i:i + batch_size, 1:].to(device)  # (n, T)
        logits = model(x).logits                                                          # (n, T, V)
        loss.append(F.cross_entropy(logits.transpose(1, 2).float(), y, reduction="none").cpu())  # (n, T)
        hit.append((logits.argmax(-1) == y).cpu())                                           # (n, T)
    model.train(was_training)
    return (torch.cat(loss), torch.cat(hit)) if hits else torch.cat(loss)


def load_checked(path: Path, device, make: str, vocab: str, fingerprint: str):
    """(model, checkpoint dict) of a checkpoint trained on this corpus; exits with one line if not."""
    try:
        model, ck = tiny_lm.load_checkpoint(path, device=device, make_with=make)
    except CheckpointError as e:
        fail(str(e))
    if ck["vocab"] != vocab or ck.get("extra", {}).get("corpus", fingerprint) != fingerprint:
        fail(f"{path} was trained on another corpus (vocabulary or text differs); pass the same --corpus "
             f"it was trained with, or retrain with `{make} --force`")
    return model, ck


def evaluate(model, val_ids, lengths, blocks, batch_tokens, desc, set_length=None):
    """Score the same characters at every length: each block of max(lengths) characters is cut
    into windows of length L. Returns ({L: mean loss}, per-character losses {L: (blocks, L_max)}
    for the shortest and longest L, seconds). set_length(L), if given, runs before each length
    (the training-free scalings set their factor there); the shortest length's per-character
    losses are then scored again under the longest length's scaling, so that the difference of
    the two compares one model at two window lengths."""
    L_max, losses, per_char, t0 = lengths[-1], {}, {}, time.perf_counter()

    def per_position(L):  # every window of length L in every block, in block order: (windows, L)
        seqs = torch.stack([val_ids[b + j * L:b + (j + 1) * L + 1] for b in blocks for j in range(L_max // L)])
        return token_losses(model, seqs, max(1, batch_tokens // L))

    for L in tqdm(lengths, desc=desc, leave=False, file=sys.stderr):
        if set_length:
            set_length(L)
        per_pos = per_position(L)
        losses[L] = per_pos.mean().item()
        if L in (lengths[0], L_max):
            per_char[L] = per_pos.reshape(len(blocks), -1)  # (blocks, L_max): block order kept
    if set_length and len(lengths) > 1:  # the short-window reference of a scaled row uses the long row's scaling
        per_char[lengths[0]] = per_position(lengths[0]).reshape(len(blocks), -1)
    return losses, per_char, time.perf_counter() - t0


def clamp_learned_rows(model, L_train: int) -> None:
    """The alternative to untrained rows: every position from L_train on reads row L_train - 1."""
    with torch.no_grad():
        w = model.learned.table.weight  # (max_len, C)
        w[L_train:] = w[L_train - 1]


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
                                                     "whose rows are added to the table (default: "
                                                     "every runs/seed* folder; '' for none)")
    add_common_flags(p)
    return p.parse_args(argv)


def add_common_flags(p: argparse.ArgumentParser) -> None:
    """The flags every evaluation script shares (long_context_test.py too)."""
    p.add_argument("--batch-tokens", type=int, default=16384, help="tokens per forward pass (memory knob)")
    p.add_argument("--corpus", default=None, help="the corpus the checkpoints were trained on (default Shakespeare)")
    p.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu) or a torch device name")
    p.add_argument("--results", default=None, help="output folder (default results/, or <ckpt-dir>/results "
                                                   "with --quick)")
    p.add_argument("--quick", action="store_true", help="smoke test on the --quick checkpoints")


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
    if any(lengths[-1] % L for L in lengths):
        fail(f"every length must divide the longest ({lengths[-1]}) so that each length scores the same "
             f"characters; got {','.join(map(str, lengths))}")
    tokens = args.tokens or (4096 if args.quick else 65536)
    if tokens < 1:
        fail(f"--tokens must be positive, got {tokens}")
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
    try:
        blocks = spread_blocks(val_ids.numel(), lengths[-1], span // lengths[-1])
    except CorpusError as e:
        fail(str(e))

    # (row name, checkpoint path, scaling kind or None)
    jobs = [(n, ckpt_dir / f"{n}.pt", None) for n in names]
    if "rope" in names:
        jobs[names.index("rope") + 1:names.index("rope") + 1] = [(f"rope+{s}", ckpt_dir / "rope.pt", s) for s in scalings]
    if "learned" in names and not args.variants:
        jobs.insert(names.index("learned") + 1, ("learned (clamped)", ckpt_dir / "learned.pt", "clamp"))
    seed_dirs = args.seed_dirs.split(",") if args.seed_dirs is not None else \
        ([] if args.quick else sorted(str(p) for p in Path("runs").glob("seed*") if p.is_dir()))
    for d in filter(None, seed_dirs):
        for n in VARIANTS:
            if (Path(d) / f"{n}.pt").exists():
                jobs.append((f"{n} [{Path(d).name}]", Path(d) / f"{n}.pt", None))

    rows, curves, decode = [], {}, None
    for row, path, scaling in tqdm(jobs, desc="checkpoints", file=sys.stderr):
        model, ck = load_checked(path, device, make, vocab, fingerprint)
        cfg, tc = model.cfg, ck["extra"].get("train_config", {})
        L_train = tc.get("seq_len", TrainConfig.seq_len)
        if cfg.pos == "learned" and lengths[-1] > cfg.max_len:
            fail(f"{path}: length {lengths[-1]} is beyond its learned table ({cfg.max_len} rows); "
                 f"use --lengths up to {cfg.max_len}")
        if scaling == "clamp":
            clamp_learned_rows(model, L_train)
        set_length = None if scaling in (None, "clamp") else \
            (lambda L: model.set_rope_scaling(scaling_at(scaling, L, L_train)))  # a fresh factor per length
        losses, per_char, secs = evaluate(model, val_ids, lengths, blocks, args.batch_tokens, row, set_length)
        if scaling == "dynamic" and decode_len:
            model.set_rope_scaling(scaling_at(scaling, decode_len, L_train))
            decode = {"variant": row, "factor": 1.0, "original_max_len": L_train,
                      **cached_vs_full(model, val_ids, decode_len, decode_windows)}
        base = cfg.pos
        if scaling == "clamp":
            kind, factor = "", ""
        elif scaling is not None:
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
            "untrained_from": L_train if base == "learned" and scaling != "clamp" else None,
            "pos_file_loc": code_lines(HERE / POS_FILE[base]) if POS_FILE[base] else 0,
            "acts_on": ACTS_ON[base],
            "params_added": model.num_params(pos_only=True),
            "params_trained_pos": (L_train * cfg.n_embd) if base == "learned" else 0,
            "train_tokens": ck["extra"].get("tokens"), "finetune": ft,
            "eval_seconds": round(secs, 1),
        })
        long, short = per_char[lengths[-1]], per_char[lengths[0]]  # (blocks, L_max) each
        curves[row] = {"loss": long.mean(0).tolist(), "minus_short": (long - short).mean(0).tolist()}
        del model
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2  # KiB on Linux -> GiB
    where = corpus_description(args.corpus, val_ids.numel(), span, len(blocks))
    write_results(results, rows, curves, lengths, span, peak_gb, ckpt_dir, decode, where)
    if results.resolve() == (HERE / "results").resolve():
        update_readme(HERE / "README.md", (results / "extrapolation.md").read_text(encoding="utf-8"))
    print(f"peak resident memory {peak_gb:.2f} GiB; wrote {results}/extrapolation.md, .csv, .json, "
          f"ppl_vs_length.png, loss_vs_position.png")
    return 0


README_START, README_END = "<!-- extrapolation-table:start -->", "<!-- extrapolation-table:end -->"


def update_readme(readme: Path, table_md: str, start: str = README_START, end: str = README_END) -> None:
    """Copy the table into README.md between its two markers, so the README never shows a
    number that this script did not write."""
    if not readme.exists():
        return
    text = readme.read_text(encoding="utf-8")
    a, b = text.find(start), text.find(end)
    if a < 0 or b < a:
        return
    tiny_lm.atomic_write_text(readme, text[:a + len(start)] + "\n" + table_md + text[b:])


def corpus_description(corpus, n_val: int, span: int, n_blocks: int) -> str:
    """What the scored characters are, in words, for the captions."""
    text = (f"the three held-out plays ({', '.join(p.replace('-', ' ').title() for p in tiny_lm.VAL_PLAYS)}; "
            f"{n_val:,} characters)" if corpus is None else f"the validation part of {corpus} ({n_val:,} characters)")
    return f"{span:,} characters of {text}, taken as {n_blocks} blocks spread evenly from its start to its end"


def write_results(results: Path, rows, curves, lengths, span, peak_gb, ckpt_dir, decode=None,
                  where: str = "") -> None:
    results.mkdir(parents=True, exist_ok=True)
    cols = list(rows[0])
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols)
    w.writeheader()
    w.writerows(rows)
    tiny_lm.atomic_write_text(results / "extrapolation.csv", buf.getvalue())
    meta = {"lengths": lengths, "scored_tokens_per_length": span, "scored_text": where, "peak_rss_gib": round(peak_gb, 3),
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
        f"Perplexity per character (exp of mean loss in nats) on the same characters at every length: "
        f"{where}, each block cut into non-overlapping windows of the length. Training length: "
        f"{rows[0]['train_len']}. `train ppl` is exp of the last logged training loss.",
        "† positions beyond the training length read rows of the learned table that no gradient ever "
        "reached: random vectors with the scale of the trained rows' initialisation. `learned (clamped)` "
        "reads the last trained row at every position past it instead.",
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
    seeds = [r for r in rows if "[" in r["variant"]]  # other seeds: thin grey, one legend entry
    for j, r in enumerate(seeds):
        ax.plot(lengths, [r[f"ppl_{L}"] for L in lengths], "-", lw=0.8, color="0.7",
                label="other seeds (table)" if j == 0 else None)
    for i, r in enumerate(r for r in rows if r not in seeds):
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

    # Per position: (a) the raw loss, which mixes position with how hard the text there is;
    # (b) minus the loss of the same character scored in a window of the shortest length,
    # which cancels the text: what sitting at position p of a long window adds or saves.
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5))
    L = lengths[-1]
    bins = torch.unique(torch.logspace(0, math.log10(L), 60).long().clamp(1, L))  # log-spaced bin edges
    xs = [(a + b) / 2 for a, b in zip(bins[:-1].tolist(), bins[1:].tolist())]
    palette = iter(plt.get_cmap("tab20").colors[::2] + plt.get_cmap("tab20").colors[1::2])  # 20 distinct colours
    for r in rows:
        if r["variant"] not in ("none", "learned", "learned (clamped)", "sin", "rope", "alibi", "rope+yarn",
                                "rope_ft_yarn", "irope", "rope_partial25", "rope_p75"):
            continue  # keep the plot readable
        color = next(palette)
        for ax, key in zip(axes, ("loss", "minus_short")):
            c = torch.tensor(curves[r["variant"]][key])
            ys = [c[a - 1:b - 1].mean().item() if b > a else c[a - 1].item()
                  for a, b in zip(bins[:-1].tolist(), bins[1:].tolist())]
            ax.plot(xs, ys, label=r["variant"], color=color)
    for ax in axes:
        ax.axvline(train_len, color="grey", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_xlabel("position in the window (log scale)")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("mean loss (nats/char)")
    axes[0].set_title(f"(a) loss at each position of {L}-long windows")
    axes[0].set_ylim(top=min(axes[0].get_ylim()[1], 5.0))
    axes[1].axhline(0, color="black", lw=0.8)
    axes[1].set_ylabel(f"loss minus the same character's loss in {lengths[0]}-long windows")
    axes[1].set_title(f"(b) the same, text difficulty removed (< 0: the long window helps)")
    axes[1].set_ylim(max(axes[1].get_ylim()[0], -0.5), min(axes[1].get_ylim()[1], 3.0))
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(results / "loss_vs_position.png", dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
