"""What the field's schemes learned, read from their checkpoints: the probes behind docs/field.md's verdicts.

  first_tokens  StreamingLLM (Xiao et al., ICLR 2024) keeps the first 4 tokens because large models park
                attention there. Here: the weight every query puts on keys 0..3, averaged over the queries
                in the training window (4 <= i < 256) and past it (256 <= i < 4096), per layer, for rope and
                alibi on held-out windows of 4096; beside it what uniform attention would give, 4 / (i + 1)
                averaged the same way.
  fire          FIRE's threshold L = |L_scale * L0| and c per layer, for every fire checkpoint: while L stays
                at or above the training length, max(L, i) = L for every query seen in training, so the
                progressive interpolation (the normaliser growing with i) is first met at evaluation.
  kerple        KERPLE's r1 and r2 per head: the clamp at 0.01 sits inside the formula (field_relbias.py),
                so a stored value below it gets no gradient and stays there: counted as stuck.
  fox_gates     FoX's forget gates: the mean -log f per head on the letters of planted keys against the
                other characters of the same windows (keys of distinct capitals, 2-3 copies up to 200
                apart, as the copy curriculum's second phase plants them), for every fox checkpoint.
  cope          CoPE's position table: |e[n]|, the length of the embedding a count n reads, per layer, at
                the counts COPE_COUNTS (0 .. npos - 1). Every count past npos - 1 reads e[npos - 1]; the
                table starts at zero, so a count that training never reached keeps an embedding near zero.

How the weight on the first keys is measured: every attention call of the model runs a second time with a
value that is 1 on keys 0..3 and 0 elsewhere (tiny_lm.attn_sdpa, the path the model runs), so the output is
exactly that weight, with no (T, T) matrix built.

    python experiments/field_probes.py           # every probe whose checkpoints exist: results/field_probes.{json,md}
    python experiments/field_probes.py --quick   # on the --quick checkpoints, into runs/quick/results
    python experiments/field_probes.py --redraw  # field_probes.md from field_probes.json
"""
import contextlib
import json
import math
import sys
from pathlib import Path

import sys as _sys
from pathlib import Path as _Path
_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))  # run as python experiments/NAME.py: the repository's modules

import torch

from lab import cli
from lab import row_names
from lab import options as lab_options
import tiny_lm
from lab import atomic
from lab import corpora
from lab.cli import fail
from lab.copy_mixture import COPY_RECIPE, key_ids_of, plant_keys
from lab.eval_common import (check_common, check_redraw, check_writable, corpus_mismatch, eval_dirs, git_commit,
                         json_to_redraw, load_checked, load_eval_data, merge_rows, provenance_of, read_json,
                         results_for_checkpoints, seed_folders, spread_blocks, train_len_of)
from field_relbias import KERPLE_EPS
from lab.variants import admit, is_copy

N_FIRST, LONG = 4, 4096  # StreamingLLM's 4 kept tokens; the longest length extrapolation_test measures
SECTIONS = ("first_tokens", "fire", "kerple", "fox_gates", "cope")
PROBED = ("rope", "alibi", "fire", "kerple", "fox", "cope")  # the schemes whose checkpoints a probe reads
COPE_COUNTS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 192, 255, 256)  # the counts whose embedding the cope probe reads


# ----------------------------------------------------------------------------- the weight on the first keys

@contextlib.contextmanager
def first_key_weight(n: int, store: list):
    """While open, every attention call of a TinyLM also appends the weight each query puts on keys 0..n-1,
    (B, H, Tq), to store (one entry per layer and forward, in layer order): tiny_lm's attention and the bench's
    (lab/options.py) both call attn_sdpa."""
    real = tiny_lm.attn_sdpa
    assert lab_options.attn_sdpa is real

    def metered(q, k, v, **kw):
        ones = torch.zeros(*k.shape[:-1], 1, dtype=v.dtype, device=v.device)  # (B, H, Tk, 1)
        ones[..., :n, :] = 1
        # the same weights times a value of 1 on keys 0..n-1, 0 elsewhere: their sum per query, (B, H, Tq, 1)
        store.append(real(q, k, ones, **kw)[..., 0].float())
        return real(q, k, v, **kw)
    tiny_lm.attn_sdpa = lab_options.attn_sdpa = metered
    try:
        yield
    finally:
        tiny_lm.attn_sdpa = lab_options.attn_sdpa = real


def uniform_weight(n: int, lo: int, hi: int) -> float:
    """Mean over queries i in lo..hi-1 of n / (i + 1): the weight on keys 0..n-1 if attention were uniform."""
    return sum(min(1.0, n / (i + 1)) for i in range(lo, hi)) / (hi - lo)


@torch.no_grad()
def first_tokens(model, windows: torch.Tensor, train_len: int, n: int = N_FIRST) -> list:
    """windows (W, T) of token ids -> per layer {layer, in_window, past, max_head_past, uniform_*}."""
    store, T = [], windows.shape[1]
    per_layer = None
    with first_key_weight(n, store):
        for w in windows:
            store.clear()
            model(w[None].to(next(model.parameters()).device))
            got = torch.stack([s[0] for s in store])  # (layers, H, T) for this window
            per_layer = got if per_layer is None else per_layer + got
    per_layer = per_layer.cpu() / len(windows)  # (layers, H, T), mean over windows
    rows = []
    for l, m in enumerate(per_layer):
        rows.append({"layer": l, "in_window": m[:, n:train_len].mean().item(), "past": m[:, train_len:].mean().item(),
                     "max_head_past": m[:, train_len:].mean(-1).max().item(),
                     "uniform_in_window": uniform_weight(n, n, train_len), "uniform_past": uniform_weight(n, train_len, T)})
    return rows


# ----------------------------------------------------------------------------- parameters read from the weights

def fire_rows(model, train_len: int) -> list:
    """Per layer: the learned threshold L, L / training length, and c."""
    return [{"layer": l, "L": f.L.item(), "L_per_train_len": f.L.item() / train_len, "c": f.c.abs().item()}
            for l, f in enumerate(model.pos_module.layers)]


def kerple_rows(model) -> list:
    """Per head: stored r1, r2; stuck where a stored value is below the floor (no gradient through the clamp)."""
    k = model.pos_module
    return [{"head": h, "r1": a, "r2": b, "stuck": a < KERPLE_EPS or b < KERPLE_EPS}
            for h, (a, b) in enumerate(zip(k.r1.tolist(), k.r2.tolist()))]


@torch.no_grad()
def cope_rows(model) -> list:
    """Per layer and count n in COPE_COUNTS (those inside the table): |e[n]|, the Euclidean length of column n."""
    emb = model.pos_module.emb  # (L, D, npos)
    return [{"layer": l, "n": n, "norm": emb[l, :, n].norm().item()}
            for l in range(emb.shape[0]) for n in COPE_COUNTS if n < emb.shape[-1]]


@torch.no_grad()
def fox_gate_rows(model, val_ids: torch.Tensor, vocab: str, n_windows: int, train_len: int, seed: int = 0) -> list:
    """Per layer and head: mean -log f on planted key letters and on the other characters of the same windows."""
    g = torch.Generator().manual_seed(seed)
    key_ids = key_ids_of(vocab, "upper")
    starts = torch.randint(0, len(val_ids) - train_len, (n_windows,), generator=g).tolist()
    rows = torch.stack([val_ids[s:s + train_len].clone() for s in starts])  # (W, T)
    is_key = torch.zeros_like(rows, dtype=torch.bool)
    for b in range(n_windows):  # the curriculum's second phase: distinct capitals, 2-3 copies, gaps up to max_gap
        copies = int(torch.randint(COPY_RECIPE.copies[0], COPY_RECIPE.copies[1] + 1, (1,), generator=g))
        k_hi = min(COPY_RECIPE.key_len[1], train_len // copies)
        for st, K in plant_keys(rows[b], g, key_ids, (min(COPY_RECIPE.key_len[0], k_hi), k_hi), COPY_RECIPE.n_keys,
                                copies, COPY_RECIPE.max_gap, distinct=True):
            for s in st:
                is_key[b, s:s + K] = True
    gates, logs = model.pos_module, {}
    real = gates.log_forget
    gates.log_forget = lambda x, index: logs.setdefault(index, real(x, index))  # (B, H, T), the first call per layer
    try:
        model(rows.to(next(model.parameters()).device))
    finally:
        del gates.log_forget
    out = []
    for l in sorted(logs):
        neg = -logs[l].cpu()  # (W, H, T): -log f_t
        for h in range(neg.shape[1]):
            on_key, other = neg[:, h][is_key].mean().item(), neg[:, h][~is_key].mean().item()
            out.append({"layer": l, "head": h, "keys": on_key, "other": other, "keys_over_other": on_key / other})
    return out


# ----------------------------------------------------------------------------- the run

def checkpoints(ckpt_dir: Path, folders) -> list:
    """(row name, path) of every checkpoint a probe reads: ckpt_dir's, then those of the other seeds' folders
    ([(folder, label)], eval_common.seed_folders: runs/seed*/ as extrapolation_test.py reads them)."""
    found = []
    for folder, seed in [(ckpt_dir, ""), *folders]:
        for p in sorted(Path(folder).glob("*.pt")):
            if p.name.endswith(".state.pt") or p.stem.split("{")[0].removesuffix("_copy") not in PROBED:
                continue
            found.append((row_names.row_name(p.stem, seed=seed), p))
    return found


def probe(args) -> None:
    ckpt_dir, results, make = eval_dirs(args)
    device, val_ids, vocab, fingerprint = load_eval_data(args)
    found = checkpoints(ckpt_dir, seed_folders(args))
    if not found:
        fail(f"no rope, alibi, fire, kerple, fox or cope checkpoint in {ckpt_dir}/; run `{make} --variants fire,kerple,fox` "
             f"first")
    admit(sorted({p.stem for _, p in found}))  # names with options or a copy twin's: variants of the registry
    loaded = {p: load_checked(p, device, make, vocab, fingerprint) for _, p in found}  # (model, checkpoint)
    cks = {p: ck for p, (_, ck) in loaded.items()}
    try:
        results, note = results_for_checkpoints(results, bool(args.results), cks, Path(ckpt_dir) / "results",
                                                also=corpus_mismatch(args.corpus, results))
    except ValueError as e:
        fail(str(e))
    if note:
        print(note, file=sys.stderr)
    check_writable(results, "--results")
    new = {s: [] for s in SECTIONS}
    long = min(LONG, len(val_ids) - 1)
    blocks = torch.stack([val_ids[s:s + long] for s in spread_blocks(len(val_ids), long, args.windows)])  # (W, long)
    for row, path in cli.progress(found, desc="probes", unit="ckpt"):
        model, ck = loaded[path]
        model.eval()
        L, pos, variant = train_len_of(ck), model.cfg.pos, path.stem
        tag = {"variant": row}
        if pos in ("rope", "alibi") and variant in ("rope", "alibi"):
            new["first_tokens"] += [{**tag, **r} for r in first_tokens(model, blocks, L)]
        elif pos == "fire":
            new["fire"] += [{**tag, "train_len": L, **r} for r in fire_rows(model, L)]
        elif pos == "kerple":
            new["kerple"] += [{**tag, **r} for r in kerple_rows(model)]
        elif pos == "cope":
            new["cope"] += [{**tag, **r} for r in cope_rows(model)]
        elif pos == "fox":
            new["fox_gates"] += [{**tag, "copy_twin": is_copy(variant), **r}
                                 for r in fox_gate_rows(model, val_ids, vocab, args.fox_windows, L)]
    path = results / "field_probes.json"
    old = read_json(path) if path.exists() else {}
    keep = {"first_tokens": lambda r: (r["variant"], r["layer"]), "fire": lambda r: (r["variant"], r["layer"]),
            "kerple": lambda r: (r["variant"], r["head"]), "fox_gates": lambda r: (r["variant"], r["layer"], r["head"]),
            "cope": lambda r: (r["variant"], r["layer"], r["n"])}
    data = {s: merge_rows(old.get(s, []), new[s], keep[s]) for s in SECTIONS}
    made = {"command": cli.command("experiments/field_probes.py", args.argv), "commit": git_commit()}
    data["provenance"] = {**old.get("provenance", {}), **{row: {**provenance_of(cks[p]), "probe": made} for row, p in found}}
    results.mkdir(parents=True, exist_ok=True)
    atomic.atomic_write_text(path, json.dumps(data, indent=1) + "\n")
    atomic.atomic_write_text(results / "field_probes.md", report(data))
    print(f"wrote {path} and field_probes.md")


def markdown_table(head: list, rows: list) -> str:
    """A Markdown table of these column heads and rows."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])


def report(data: dict) -> str:
    """The five tables of field_probes.md, from the JSON."""
    def pct(x):
        return f"{100 * x:.2f}%"
    parts = ["# Probes of the trained field schemes (`python experiments/field_probes.py`)\n"]
    parts.append(f"## Weight on the first {N_FIRST} keys (StreamingLLM's sinks), windows of {LONG}\n")
    parts.append(markdown_table(["model", "layer", "queries 4..255", "uniform", "queries 256..4095", "uniform",
                                 "largest head, 256..4095"],
                                [[r["variant"], r["layer"], pct(r["in_window"]), pct(r["uniform_in_window"]),
                                  pct(r["past"]), pct(r["uniform_past"]), pct(r["max_head_past"])]
                                 for r in data["first_tokens"]]))
    parts.append("\n## FIRE's learned threshold L and c, per layer\n")
    parts.append(markdown_table(["model", "layer", "L", "L / training length", "c"],
                                [[r["variant"], r["layer"], f"{r['L']:.1f}", f"{r['L_per_train_len']:.3f}", f"{r['c']:.4f}"]
                                 for r in data["fire"]]))
    parts.append(f"\n## KERPLE's r1 and r2, per head (stuck: a stored value below {KERPLE_EPS})\n")
    parts.append(markdown_table(["model", "head", "r1", "r2", "stuck"],
                                [[r["variant"], r["head"], f"{r['r1']:.4f}", f"{r['r2']:.4f}", "yes" if r["stuck"] else "no"]
                                 for r in data["kerple"]]))
    parts.append("\n## FoX's forget gates: mean -log f per head, on key letters and on the other characters\n")
    parts.append(markdown_table(["model", "layer", "head", "keys", "other", "keys / other"],
                                [[r["variant"], r["layer"], r["head"], f"{r['keys']:.4f}", f"{r['other']:.4f}",
                                  f"{r['keys_over_other']:.2f}"] for r in data["fox_gates"]]))
    cope = {}  # (variant, layer) -> {n: |e[n]|}
    for r in data.get("cope", []):
        cope.setdefault((r["variant"], r["layer"]), {})[r["n"]] = r["norm"]
    counts = sorted({n for v in cope.values() for n in v})
    parts.append("\n## CoPE's position table: |e[n]| per layer, the embedding a count n reads (counts past the last read it)\n")
    parts.append(markdown_table(["model", "layer"] + [f"n = {n}" for n in counts],
                                [[v, l] + [f"{row[n]:.3f}" if n in row else "-" for n in counts]
                                 for (v, l), row in cope.items()]))
    return "\n".join(parts) + "\n"


def parse_args(argv=None):
    p = cli.ArgumentParser(description=__doc__, formatter_class=cli.argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", default=None, help=f"the corpus the checkpoints were trained on (default {corpora.DEFAULT_NAME})")
    p.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu) or a torch device name")
    p.add_argument("--results", default=None, help="output folder (default results/; only real runs write there)")
    p.add_argument("--quick", action="store_true", help="the --quick checkpoints (runs/quick)")
    p.add_argument("--windows", type=cli.integer(at_least=1), default=8,
                   help="held-out windows of 4096 for the weight on the first keys (default 8)")
    p.add_argument("--fox-windows", type=cli.integer(at_least=1), default=64,
                   help="windows with planted keys for the FoX gate probe (default 64)")
    p.add_argument("--redraw", action="store_true", help="probe nothing: rewrite field_probes.md from field_probes.json")
    args = p.parse_args(argv)
    args.preset, args.argv = None, argv
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.redraw:
        results = Path(args.results) if args.results else eval_dirs(args)[1]
        check_redraw([results / "field_probes.json"], cli.command("experiments/field_probes.py", argv))
        check_writable(results, "--results")
        data = json_to_redraw(results / "field_probes.json", "python experiments/field_probes.py")
        atomic.atomic_write_text(results / "field_probes.md", report({**{k: [] for k in SECTIONS}, **data}))
        print(f"wrote {results}/field_probes.md")
        return 0
    check_common(args)
    probe(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
