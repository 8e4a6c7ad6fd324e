"""What the evaluation scripts share (extrapolation_test, long_context_test, recipe_ablation,
copy_calibration): where outputs go, finding and checking checkpoints, the training-free RoPE
scalings, the validation blocks, the intervals the tables print (bootstrap; Clopper-Pearson for
a share of windows), the passkey's scores in and outside the copy family's training format
(pair_scores, format_retrieval), and the results files (CSV, merged JSON rows, tables kept in
sync in the README and docs/).

Per-position loss has one owner, tiny_lm.token_losses; output folders follow variants.run_dirs.
"""
import csv
import io
import json
import math
import resource
import sys
import tempfile
from pathlib import Path

import torch
from tqdm import tqdm

import copy_mixture
import pos_rope
import schemes
import tiny_lm
from tiny_lm import CheckpointError, CorpusError
from variants import (ALL_NAMES, COPY_OF, DEFAULT_VARIANTS, FAMILIES, VARIANTS, TrainConfig, order_of,
                      real_run_mismatch, run_dirs)

HERE = Path(__file__).resolve().parent


def fail(msg: str, code: int = 2):
    """One line on stderr (on its own line even under a progress bar), then exit."""
    tqdm.write(f"error: {msg}", file=sys.stderr)
    sys.exit(code)


# ----------------------------------------------------------------------------- command line and folders

def add_common_flags(p) -> None:
    """The flags every evaluation script shares."""
    p.add_argument("--batch-tokens", type=int, default=16384, help="tokens per forward pass (memory knob)")
    p.add_argument("--corpus", default=None, help="the corpus the checkpoints were trained on (default Shakespeare)")
    p.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu) or a torch device name")
    p.add_argument("--results", default=None,
                   help="output folder (default results/; <ckpt-dir>/results with --quick or --preset preview, "
                        "and whenever a checkpoint is not a real run: results/ holds only real runs, so an "
                        "explicit --results results with such a checkpoint is refused)")
    p.add_argument("--quick", action="store_true", help="smoke test on the --quick checkpoints (runs/quick)")
    p.add_argument("--preset", choices=["preview"], default=None,
                   help="preview: the checkpoints of train_compare.py --preset preview, output under runs/preview")
    p.add_argument("--redraw", action="store_true",
                   help="evaluate nothing: rebuild this script's tables and figures in --results from its JSON files")


def eval_dirs(args) -> tuple:
    """(checkpoint folder, results folder, the command that makes the checkpoints) for these
    arguments, by variants.run_dirs' rule: smoke runs and previews never write to results/."""
    ckpt_default, results_default = run_dirs(args.quick, args.preset)
    ckpt_dir = Path(getattr(args, "ckpt_dir", None) or ckpt_default)
    small = args.quick or args.preset == "preview"
    results = Path(args.results) if args.results else (ckpt_dir / "results" if small else results_default)
    make = "python train_compare.py" + (" --quick" if args.quick else f" --preset {args.preset}" if args.preset else "")
    return ckpt_dir, results, make


def check_writable(folder: Path, flag: str) -> None:
    """Exit with one line unless files can be written in folder (or in the folder it would be
    made in): checked before any work, so that no run ends in a traceback at its first write."""
    folder = Path(folder)
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        fail(f"{flag} {folder}: {probe} is not a folder; pass a folder you can write to")
    try:
        with tempfile.NamedTemporaryFile(dir=probe, prefix=".write-test"):
            pass
    except OSError as e:
        fail(f"{flag} {folder}: cannot write in {probe} ({e.strerror or e}); pass a folder you can write to")


def corpus_mismatch(corpus) -> list:
    """[] for the default corpus (real runs train on it), else the reason a run on `corpus` is not real."""
    if corpus is None or Path(corpus).resolve() == tiny_lm.DEFAULT_CORPUS.resolve():
        return []
    return [f"corpus {corpus} (real run: the default, {tiny_lm.DEFAULT_CORPUS.name})"]


def results_for_checkpoints(results: Path, explicit: bool, checkpoints: dict, fallback: Path = None,
                            flag: str = "--results", also: list = ()) -> tuple:
    """(folder to write, note or None) by the rule that only real runs write the repository's
    results/: when results is that folder and a checkpoint ({path: checkpoint dict}, the name its
    file stem) is not a real run of its variant (variants.real_run_mismatch, plus the reasons in
    `also` that hold for every checkpoint, e.g. corpus_mismatch), the output goes to fallback
    (default <its folder>/results) with a one-line note, or, if results was given explicitly,
    ValueError with one line naming the checkpoint and how it differs."""
    if not is_repo_results(results):
        return Path(results), None
    for path, ck in checkpoints.items():
        diff = list(also) + real_run_mismatch(Path(path).stem, ck)
        if not diff:
            continue
        why = f"{path} is not a real run ({'; '.join(diff[:3])}{'; ...' if len(diff) > 3 else ''})"
        if explicit:
            raise ValueError(f"{why}, and results/ holds only real runs; pass another {flag}, or leave it "
                             f"out to write beside the checkpoints")
        fallback = Path(fallback) if fallback else Path(path).parent / "results"
        return fallback, f"note: {why}: writing to {fallback}/ instead of results/"
    return Path(results), None


def checked_results(args, results: Path, paths, ckpt_dir: Path, make: str, vocab: str, fingerprint: str,
                    longest: int = 0) -> Path:
    """Before anything is scored: load and check every checkpoint the run will use (load_checked:
    one line and exit on the first bad one), choose the results folder by
    results_for_checkpoints (default <ckpt_dir>/results), and check that it can be written."""
    cks = {}
    for p in dict.fromkeys(map(Path, paths)):
        ck = load_checked(p, "cpu", make, vocab, fingerprint, longest)[1]
        cks[p] = {"config": ck["config"], "extra": ck.get("extra", {})}  # not the weights: one model in memory at a time
    try:
        results, note = results_for_checkpoints(results, bool(args.results), cks, Path(ckpt_dir) / "results",
                                                also=corpus_mismatch(getattr(args, "corpus", None)))
    except ValueError as e:
        fail(str(e))
    if note:
        tqdm.write(note, file=sys.stderr)
    check_writable(results, "--results")
    return results


def load_eval_data(args, min_val_chars: int = 0):
    """(device, validation ids, vocabulary, corpus fingerprint); exits with one line on a bad device or corpus."""
    try:
        device = tiny_lm.pick_device(args.device)
        train_text, val_text, vocab = tiny_lm.load_corpus(args.corpus, min_val_chars=min_val_chars)
    except (ValueError, CorpusError) as e:
        fail(str(e))
    return device, tiny_lm.CharTokenizer(vocab).encode(val_text), vocab, tiny_lm.corpus_fingerprint(train_text + val_text)


def int_list(text: str, flag: str, increasing: bool = True) -> list:
    """Comma-separated integers, non-negative and strictly increasing; exits with one line if not."""
    try:
        vals = [int(x) for x in text.split(",")]
    except ValueError:
        fail(f"{flag} must be comma-separated integers, got {text!r}")
    if increasing and (any(b <= a for a, b in zip(vals, vals[1:])) or vals[0] < 0):
        fail(f"{flag} must be non-negative and strictly increasing, got {text}")
    return vals


# ----------------------------------------------------------------------------- checkpoints

def find_checkpoints(ckpt_dir: Path, variants: str, make: str, default: str = "found") -> list:
    """Variant names to evaluate: those of --variants (each must have a checkpoint), or else
    every one found in ckpt_dir; default="main" also requires the main job's base schemes. A family
    name of variants.FAMILIES (copy, current, theta) stands for its list."""
    if variants:
        names = [m for n in variants.split(",") for m in FAMILIES.get(n, [n])]
        bad = [n for n in names if n not in ALL_NAMES]
        if bad:
            fail(f"unknown variant(s) {','.join(bad)}; known: {','.join(ALL_NAMES)} and the families "
                 f"{','.join(FAMILIES)}")
        required = names
    else:
        required = [n for n in DEFAULT_VARIANTS if n in VARIANTS] if default == "main" else []
        names = [n for n in ALL_NAMES if n in required or (ckpt_dir / f"{n}.pt").exists()]
    missing = [n for n in required if not (ckpt_dir / f"{n}.pt").exists()]
    if missing:
        fail(f"no checkpoint for {','.join(missing)} in {ckpt_dir}/; run `{make}"
             f"{' --variants ' + ','.join(missing) if variants else ''}` first", code=1)
    if not names:
        fail(f"no checkpoints in {ckpt_dir}/; run `{make}` first")
    return names


def load_checked(path: Path, device, make: str, vocab: str, fingerprint: str, longest: int = 0):
    """(model, checkpoint dict) of a checkpoint trained on this corpus whose learned table (if
    any) covers `longest` positions; exits with one line if not."""
    try:
        model, ck = tiny_lm.load_checkpoint(path, device=device, make_with=make)
    except CheckpointError as e:
        fail(str(e))
    if ck["vocab"] != vocab or ck.get("extra", {}).get("corpus", fingerprint) != fingerprint:
        fail(f"{path} was trained on another corpus (vocabulary or text differs); pass the same --corpus "
             f"it was trained with, or retrain with `{make} --force`")
    if model.cfg.pos == "learned" and longest > model.cfg.max_len:
        fail(f"{path}: windows of {longest} characters are beyond its learned table ({model.cfg.max_len} rows); "
             f"use shorter lengths")
    return model, ck


def train_len_of(ck: dict) -> int:
    """The length a checkpoint was trained at (a fine-tune's own, longer one)."""
    return ck["extra"].get("train_config", {}).get("seq_len", TrainConfig.seq_len)


# ----------------------------------------------------------------------------- training-free RoPE scalings

# row suffix -> (rope_type, k): factor k * L / L_train at length L (at least 1); k None = factor 1
SCALINGS = {"linear": ("linear", 1), "ntk": ("ntk", 1), "ntk(4s)": ("ntk", 4), "ntk(16s)": ("ntk", 16),
            "dynamic": ("dynamic", None), "yarn": ("yarn", 1), "llama3": ("llama3", 1), "longrope": ("longrope", 1)}


def split_scaling(name: str) -> tuple:
    """(rope_type, k, fixed) of a row suffix: a name in SCALINGS (factor k * L / L_train), or
    "<name>@F" for the same scaling at the fixed factor F at every length ("yarn@16")."""
    base, at, fixed = name.partition("@")
    if base not in SCALINGS:
        raise ValueError(f"unknown scaling {base!r}")
    try:
        fixed = float(fixed) if at else None
    except ValueError:
        raise ValueError(f"the factor after @ in {name!r} is not a number")
    if fixed is not None and fixed < 1:
        raise ValueError(f"the factor after @ in {name!r} must be at least 1")
    return SCALINGS[base][0], SCALINGS[base][1], fixed


def check_scalings(text: str) -> list:
    """A --scalings list; exits with one line on an unknown name or a bad @factor."""
    scalings = [s for s in text.split(",") if s]
    for s in scalings:
        try:
            split_scaling(s)
        except ValueError as e:
            fail(f"{e}; known: {','.join(SCALINGS)}, each also as <name>@<factor> for a fixed factor")
    return scalings


def scaling_at(name: str, L: int, L_train: int, rot_dim: int = None, base: float = 10000.0) -> dict:
    """The scaling dict of training-free row rope+<name> at evaluation length L. longrope needs
    per-pair factors: ours come from pos_rope.longrope_factors (YaRN's wavelength rule), for the
    model's rotated dims rot_dim and base."""
    kind, k, fixed = split_scaling(name)
    factor = fixed if fixed is not None else (1.0 if k is None else max(1.0, k * L / L_train))
    out = {"rope_type": kind, "factor": factor, "original_max_len": L_train}
    if kind == "longrope":
        out["short_factor"], out["long_factor"] = pos_rope.longrope_factors(rot_dim, base, factor, L_train)
    return out


def length_setter(model, scaling: str, L_train: int):
    """None for an unscaled row; else set_length(L), which gives the model the scaling's factor for
    windows of L characters (the factor follows the whole window's length, or is fixed)."""
    if scaling is None:
        return None
    return lambda L: model.set_rope_scaling(scaling_at(scaling, L, L_train, model.rope.rot_dim, model.cfg.rope_theta))


def factor_label(name: str) -> str:
    """How the factor of row rope+<name> follows the length: "s", "4s", ..., "1", or a fixed "16"."""
    _, k, fixed = split_scaling(name)
    if fixed is not None:
        return f"{fixed:g}"
    return "1" if k is None else ("s" if k == 1 else f"{k}s")


# ----------------------------------------------------------------------------- validation text

def spread_blocks(n_ids: int, block: int, n_blocks: int) -> list:
    """Starts of n_blocks non-overlapping blocks of block + 1 tokens, spread evenly from the
    beginning to the end of a text of n_ids tokens (so every held-out play is sampled)."""
    if n_blocks * block + 1 > n_ids:
        raise CorpusError(f"validation text has {n_ids} tokens, fewer than {n_blocks} blocks of {block} + 1; "
                          f"use --tokens {block * max(1, (n_ids - 1) // block)} or less, or shorter --lengths")
    last = n_ids - block - 1
    return [round(i * last / max(1, n_blocks - 1)) for i in range(n_blocks)]


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


def peak_rss_gib() -> float:
    """Peak resident memory of this process so far (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2


# ----------------------------------------------------------------------------- results files

def csv_text(rows) -> str:
    """rows (dicts) as CSV text, the columns those of the first row: every script's CSV writer."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


LOG_KEYS = ("step", "train_loss", "val_loss", "tokens_per_s")


def read_logs(results: Path) -> dict:
    """The training log, {variant: {step, train_loss, val_loss, tokens_per_s}}, from
    results/train_log.json; {} if there is none yet."""
    return read_json(Path(results) / "train_log.json").get("logs", {})


def read_json(path: Path) -> dict:
    """A results JSON file, or {} if there is none yet."""
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def json_to_redraw(path: Path, command: str) -> dict:
    """The results JSON a --redraw rebuilds from; exits with one line if it is not there."""
    if not Path(path).exists():
        fail(f"no {path} to redraw from; run `{command}` first")
    return read_json(Path(path))


def merge_rows(old: list, new: list, key=lambda r: r["variant"]) -> list:
    """Rows of a run of some variants merged into the rows already in a results file: a new row
    replaces the old one with the same key, old rows the run did not touch are kept, and the
    result is in the order of the variant registry (stable for rows of one variant)."""
    fresh = {key(r) for r in new}
    rows = [r for r in old if key(r) not in fresh] + list(new)
    return sorted(rows, key=lambda r: order_of(r["variant"]))


def is_repo_results(results: Path) -> bool:
    return Path(results).resolve() == (HERE / "results").resolve()


def sync_table(name: str, table_md: str, results: Path) -> None:
    """Copy a table into the page (README.md or docs/*.md) that holds its markers
    <!-- name-table:start --> ... <!-- name-table:end -->, so no page shows a number a script
    did not write. Only for the repository's own results/ (never for smoke runs or previews)."""
    if not is_repo_results(results):
        return
    start, end = f"<!-- {name}-table:start -->", f"<!-- {name}-table:end -->"
    for page in [HERE / "README.md"] + sorted((HERE / "docs").glob("*.md")):
        text = page.read_text(encoding="utf-8") if page.exists() else ""
        a, b = text.find(start), text.find(end)
        if a >= 0 and b > a:
            tiny_lm.atomic_write_text(page, text[:a + len(start)] + "\n" + table_md.strip() + "\n" + text[b:])


# ----------------------------------------------------------------------------- the README's glance table

GLANCE_ROWS = ("rope+yarn", "rope_ft_yarn")  # the rows after every registered scheme's


def glance_table(results: Path) -> str:
    """The README's small table, computed from results/*.json by the rules stated under it.
    The first six columns are the text-trained model's: breaks = ppl@4096 / ppl@256 > 1.2; uses
    context beyond 200 characters = effective context >= 448; passkey = exact match >= 50% at every
    d <= 200. The last two are its copy-trained twin's (<scheme>_copy, a separate model trained on
    the copy curriculum), named in its own column: the same passkey at d <= 200 (the curriculum's
    own format and distances) and at d = 512 (beyond the training window); "not measured" where a
    row has no such measurement."""
    ex = read_json(results / "extrapolation.json")
    ctx = {r["variant"]: r for r in read_json(results / "context_use.json").get("rows", [])}
    ret = {}
    for r in read_json(results / "retrieval.json").get("rows", []):
        ret.setdefault(r["variant"], {})[r["distance"]] = r["exact"]
    rows = {r["variant"]: r for r in ex.get("rows", [])}
    lines = ["| text-trained model | ppl@256 | ppl@4096 | breaks past 256? | uses context beyond 200 chars? | "
             "passkey at d <= 200? | copy-trained twin | twin's passkey, d <= 200 / d = 512 |",
             "|---|---|---|---|---|---|---|---|"]
    for name in (n for n in (*schemes.names(), *GLANCE_ROWS) if n in rows):
        r = rows[name]
        breaks = "yes" if r["ppl_4096"] / r["ppl_256"] > 1.2 else "no"
        c = ctx.get(name)
        uses = "not measured" if c is None else ("yes" if c["effective_context"] >= 448 else "no") + \
            f" ({c['effective_context']})"
        copy = copy_counterpart(name)
        own, twin = _passkey(ret.get(name, {})), ret.get(copy, {})
        own = "not measured" if own is None else f"{_yes(own)} ({100 * own:.0f}%)"
        near = _passkey(twin)
        if near is None or 512 not in twin:
            copy, retr = copy if copy in ret else "-", "not measured"
        else:
            retr = f"{_yes(near)} / {_yes(twin[512])} ({100 * near:.0f}% / {100 * twin[512]:.0f}%)"
        lines.append(f"| {name} | {r['ppl_256']:.2f} | {r['ppl_4096']:.2f} | {breaks} | {uses} | {own} | {copy} | "
                     f"{retr} |")
    return "\n".join(lines) + "\n"


def _passkey(at: dict):
    """The worst exact match at d <= 200 of one row's {distance: exact}, or None if none was measured."""
    near = [e for d, e in at.items() if d <= 200]
    return min(near) if near else None


def _yes(exact: float) -> str:
    return "yes" if exact >= 0.5 else "no"


def copy_counterpart(name: str) -> str:
    """The copy-trained model of a row: alibi -> alibi_copy, rope+yarn -> rope_copy+yarn,
    rope_ft_yarn -> rope_copy_ft_yarn."""
    base, plus, scaling = name.partition("+")
    scheme, ft, rest = base.partition("_ft")
    return f"{scheme}_copy{ft}{rest}{plus}{scaling}"


def copy_family_table(results: Path) -> str:
    """The copy family at a glance, from retrieval.json and extrapolation.json ("" without copy
    rows): for each copy-trained row, its text perplexity beside its text-trained counterpart's,
    and the passkey inside the training window (the worst cell at d <= 200) and beyond it."""
    ex = read_json(results / "extrapolation.json").get("rows", [])
    ppl = {r["variant"]: r.get(f"ppl_{r['train_len']}") for r in ex if "train_len" in r}
    by = {}
    for r in read_json(results / "retrieval.json").get("rows", []):
        if r["family"] == "copy":
            by.setdefault(r["variant"], {})[r["distance"]] = r
    if not by:
        return ""
    ds = sorted({d for at in by.values() for d in at})
    within, beyond = [d for d in ds if d <= 200], [d for d in ds if d > 200]
    lines = ["| model | text ppl | its text-trained counterpart | exact match, worst at d <= 200 | per-character "
             "accuracy, worst at d <= 200 | " + " | ".join(f"exact d={d}" for d in beyond) + " |",
             "|" + "---|" * (5 + len(beyond))]
    for name, at in by.items():
        model = name.split("+")[0].split(" (")[0]  # a scaled or switched row: its checkpoint's ppl
        twin = COPY_OF.get(model) or model.replace("_copy", "")  # irope_copy_notemp: irope
        cells = [name, f"{ppl[model]:.2f}" if ppl.get(model) else "-",
                 f"{twin} {ppl[twin]:.2f}" if ppl.get(twin) else "-"]
        for key in ("exact", "per_char"):
            d = min((d for d in within if d in at), key=lambda d: at[d][key], default=None)
            cells.append("-" if d is None else f"{100 * at[d][key]:.0f}% (d={d})")
        cells += [f"{100 * at[d]['exact']:.0f}%" if d in at else "-" for d in beyond]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "text ppl: perplexity per character on held-out text at the model's training length "
              "(results/extrapolation.csv; '-': not measured); a scaled or switched row shows its checkpoint's. "
              "The family's bar: at least 90% per character and 50% exact match at every d <= 200 "
              "(results/retrieval.csv)."]
    return "\n".join(lines) + "\n"


def sync_glance(results: Path) -> None:
    """Recompute the glance table and the copy family's table and write them into their pages
    (repository results only)."""
    if (Path(results) / "extrapolation.json").exists():
        sync_table("glance", glance_table(Path(results)), results)
    family = copy_family_table(Path(results))
    if family:
        sync_table("copy_family", family, results)


# ----------------------------------------------------------------------------- passkey scores

def pair_scores(loss, hit, c_loss, c_hit, cols: list, seed: int) -> dict:
    """Copy scores of n planted windows and their controls: loss and hit (n, W) each, as
    tiny_lm.token_losses returns them; cols: the columns scored (the targets of key characters
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
        loss, hit = tiny_lm.token_losses(model, planted, bs, hits=True)       # (n, W) each
        c_loss, c_hit = tiny_lm.token_losses(model, control, bs, hits=True)   # (n, W) each
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
