"""The evaluation scripts' set-up (extrapolation_test, long_context_test, recipe_ablation,
copy_calibration): their shared flags, where outputs go, finding and checking checkpoints, the
training-free RoPE scalings of the rope+X rows, the validation text and its blocks, and reading
and writing results files (CSV, merged JSON rows).

What is measured lives in lab/perplexity.py and lab/long_context.py, the tables of the README and docs/
in lab/docsync/tables.py; output folders follow variants.run_dirs.
"""
import ast
import csv
import functools
import io
import json
import math
import resource
import sys
import tempfile
import tokenize
from pathlib import Path
from typing import Optional

from tqdm import tqdm

from lab import cli
import pos_rope
from lab import row_names
import schemes
import tiny_lm
from lab import checkpoint_io
from lab import corpora
from lab import devices
import torch
from lab.cli import fail
from lab.checkpoint_io import CheckpointError
from lab.corpora import CorpusError
from lab.variants import (ALL_NAMES, DEFAULT_VARIANTS, FAMILIES, VARIANTS, TrainConfig, admit, from_files, names_of,
                      order_of, real_run_mismatch, run_dirs)

HERE = Path(__file__).resolve().parents[1]  # the repository: lab/ is one folder down


# ----------------------------------------------------------------------------- command line and folders

def add_common_flags(p) -> None:
    """The flags every evaluation script shares."""
    p.add_argument("--batch-tokens", type=cli.integer(at_least=1), default=16384,
                   help="tokens per forward pass (memory knob)")
    p.add_argument("--corpus", default=None,
                   help=f"the corpus the checkpoints were trained on: a name ({', '.join(corpora.CORPORA)}; default "
                        f"{corpora.DEFAULT_NAME}; another name reads runs/main/NAME and writes results/NAME) or a UTF-8 file")
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


def add_seed_dirs_flag(p, what: str) -> None:
    """--seed-dirs: other seeds' checkpoint folders (seed_folders)."""
    p.add_argument("--seed-dirs", default=None, help=f"comma-separated extra checkpoint folders (other seeds) {what} "
                                                     "(default: every runs/seed* folder, runs/seed*/NAME with "
                                                     "--corpus NAME; '' for none)")


def seed_label(folder) -> str:
    """A seed folder's label in row names: its last part named seed* (runs/seed1/sympy -> seed1), else its name."""
    return next((p for p in reversed(Path(folder).parts) if p.startswith("seed")), Path(folder).name)


def seed_folders(args) -> list:
    """[(folder, label)] of other seeds' checkpoints: those of --seed-dirs, or by default every runs/seed*/
    (runs/seed*/NAME for a named corpus; none with --quick, --preset or a corpus file). One line and exit 2 for a
    folder that does not exist."""
    given = getattr(args, "seed_dirs", None)
    missing = [d for d in (given or "").split(",") if d and not Path(d).is_dir()]
    if missing:
        fail(f"--seed-dirs {given}: no folder {', '.join(missing)}; name folders of other seeds' checkpoints, "
             f"or '' for none")
    name = corpora.corpus_name(getattr(args, "corpus", None))
    if given is not None:
        folders = [d for d in given.split(",") if d]
    elif args.quick or args.preset or name is None:
        folders = []
    else:
        pattern = "seed*" if name == corpora.DEFAULT_NAME else f"seed*/{name}"
        folders = sorted(str(p) for p in Path("runs").glob(pattern) if p.is_dir())
    return [(Path(d), seed_label(d)) for d in folders]


def check_common(args) -> None:
    """The flags of add_common_flags checked before any checkpoint is read: one line and exit 2 if
    --quick and --preset are both given, or the corpus or the device is not usable."""
    if args.quick and args.preset:
        fail(f"--quick and --preset {args.preset} both choose the checkpoints; use one of them")
    try:
        corpora.corpus_path(args.corpus)
        devices.pick_device(args.device)
    except (ValueError, CorpusError) as e:
        fail(str(e))


def eval_dirs(args) -> tuple:
    """(checkpoint folder, results folder, the command that makes the checkpoints) for these
    arguments, by variants.run_dirs' rule: smoke runs and previews never write to results/."""
    ckpt_default, results_default = run_dirs(args.quick, args.preset, getattr(args, "corpus", None))
    named = names_of(getattr(args, "variants", None))
    if from_files(named) and not (args.quick or args.preset):  # where train_compare --scheme-file put them
        ckpt_default = Path("runs/custom")
    ckpt_dir = Path(getattr(args, "ckpt_dir", None) or ckpt_default)
    small = args.quick or args.preset == "preview"
    results = Path(args.results) if args.results else (ckpt_dir / "results" if small else results_default)
    make = "python train_compare.py" + (" --quick" if args.quick else f" --preset {args.preset}" if args.preset else "")
    make += f" --corpus {args.corpus}" if getattr(args, "corpus", None) else ""
    make += f" --out {ckpt_dir}" if getattr(args, "ckpt_dir", None) else ""  # the user's folder, as given
    make += "".join(f" --scheme-file {p}" for p in dict.fromkeys(f["path"] for f in schemes.FILES.values()))
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


# results/<folder> that the --preset gpu real runs write, and the autocast each holds (bigger_runs.md)
REAL_GPU_FOLDERS = {"gpu": "bf16", "gpu/amp_off": "off"}


def real_results_setting(results) -> Optional[tuple]:
    """(corpus, preset, amp) of the real runs the folder `results` holds: the repository's results/
    (the default corpus, the CPU recipe, no autocast), results/NAME (a named corpus of corpora.CORPORA),
    results/gpu (the gpu preset under bf16), results/gpu/amp_off (the preset with --amp off) and
    results/gpu/NAME; None for any other folder, which takes any checkpoint."""
    here, top = Path(results).resolve(), (HERE / "results").resolve()
    named = [n for n in corpora.CORPORA if n != corpora.DEFAULT_NAME]
    real = {top: (corpora.DEFAULT_NAME, None, "off"), **{top / n: (n, None, "off") for n in named},
            **{top / f: (corpora.DEFAULT_NAME, "gpu", amp) for f, amp in REAL_GPU_FOLDERS.items()},
            **{top / "gpu" / n: (n, "gpu", REAL_GPU_FOLDERS["gpu"]) for n in named}}
    return real.get(here)


def real_results_corpus(results) -> Optional[str]:
    """The corpus whose real runs the folder `results` holds (real_results_setting): the default for the
    repository's results/ and results/gpu, NAME for results/NAME and results/gpu/NAME; None for any other folder."""
    setting = real_results_setting(results)
    return setting[0] if setting else None


def corpus_mismatch(corpus, results=None) -> list:
    """[] when `corpus` is the corpus whose real runs `results` holds (default: results/, the
    default corpus), else the reason a run on it is not real there."""
    want = real_results_corpus(results if results is not None else HERE / "results") or corpora.DEFAULT_NAME
    if corpora.corpus_name(corpus) == want:
        return []
    return [f"corpus {corpus or corpora.DEFAULT_NAME} (real runs there: corpus {want})"]


def results_for_checkpoints(results: Path, explicit: bool, checkpoints: dict, fallback: Path = None,
                            flag: str = "--results", also: list = ()) -> tuple:
    """(folder to write, note or None) by the rule that only real runs write the repository's
    results/: when results is that folder and a checkpoint ({path: checkpoint dict}, the name its
    file stem) is not a real run of its variant (variants.real_run_mismatch, plus the reasons in
    `also` that hold for every checkpoint, e.g. corpus_mismatch), the output goes to fallback
    (default <its folder>/results) with a one-line note, or, if results was given explicitly,
    ValueError with one line naming the checkpoint and how it differs."""
    setting = real_results_setting(results)
    if setting is None:  # results/, results/<corpus>, results/gpu...: only real runs write there
        return Path(results), None
    _, preset, amp = setting
    shown = Path(results).resolve().relative_to(HERE.resolve()).as_posix() + "/"
    for path, ck in checkpoints.items():
        diff = list(also) + real_run_mismatch(Path(path).stem, ck, preset, amp)
        if not diff:
            continue
        why = f"{path} is not a real run ({'; '.join(diff[:3])}{'; ...' if len(diff) > 3 else ''})"
        if explicit:
            raise ValueError(f"{why}, and {shown} holds only real runs; pass another {flag}, or leave it "
                             f"out to write beside the checkpoints")
        fallback = Path(fallback) if fallback else Path(path).parent / "results"
        return fallback, f"note: {why}: writing to {fallback}/ instead of {shown}"
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
                                                also=corpus_mismatch(getattr(args, "corpus", None), results))
    except ValueError as e:
        fail(str(e))
    if note:
        tqdm.write(note, file=sys.stderr)
    check_writable(results, "--results")
    return results


def load_eval_data(args, min_val_chars: int = 0):
    """(device, validation ids, vocabulary, corpus fingerprint); exits with one line on a bad device or corpus."""
    try:
        device = devices.pick_device(args.device)
        train_text, val_text, vocab = corpora.load_corpus(args.corpus, min_val_chars=min_val_chars)
    except (ValueError, CorpusError) as e:
        fail(str(e))
    return device, corpora.CharTokenizer(vocab).encode(val_text), vocab, corpora.corpus_fingerprint(train_text + val_text)


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
    if variants is not None and not variants.strip(", "):
        fail("--variants is empty; name checkpoints or a family, or leave the flag out for every checkpoint found")
    if variants:
        names = names_of(variants)  # split outside braces, {a=1,b=2} written {a=1}{b=2}
        try:  # a scheme with options, a copy twin or fine-tune of a --scheme-file scheme
            bad = admit(names)
        except ValueError as e:
            fail(f"--variants {variants}: {e}")
        if bad:
            fail(f"unknown variant(s) {','.join(bad)}; known: {','.join(ALL_NAMES)} and the families "
                 f"{','.join(FAMILIES)}{schemes.FILE_POINTER}")
        required = names
    else:
        required = [n for n in DEFAULT_VARIANTS if n in VARIANTS] if default == "main" else []
        try:
            admit(sorted(p.name[:-3] for p in ckpt_dir.glob("*.pt") if not p.name.endswith(".state.pt")))
        except ValueError:
            pass  # a file the grammar cannot admit is not a checkpoint of ours: skipped
        names = [n for n in ALL_NAMES if n in required or (ckpt_dir / f"{n}.pt").exists()]
    missing = [n for n in required if not (ckpt_dir / f"{n}.pt").exists()]
    if missing:
        fail(f"no checkpoint for {','.join(missing)} in {ckpt_dir}/; run `{make}"
             f"{' --variants ' + ','.join(missing) if variants else ''}` first")
    if not names:
        fail(f"no checkpoints in {ckpt_dir}/; run `{make}` first")
    return names


def load_checked(path: Path, device, make: str, vocab: str, fingerprint: str, longest: int = 0):
    """(model, checkpoint dict) of a checkpoint trained on this corpus whose learned table (if
    any) covers `longest` positions; exits with one line if not."""
    try:
        model, ck = checkpoint_io.load_checkpoint(path, device=device, make_with=make)
    except CheckpointError as e:
        fail(str(e))
    if ck["vocab"] != vocab or ck.get("extra", {}).get("corpus", fingerprint) != fingerprint:
        fail(f"{path} was trained on another corpus (vocabulary or text differs); pass the same --corpus "
             f"it was trained with, or retrain with `{make} --force`")
    if model.cfg.pos == "learned" and longest > model.cfg.max_len:
        fail(f"{path}: windows of {longest} characters are beyond its learned table ({model.cfg.max_len} rows); "
             f"use shorter lengths")
    return model, ck


def custom_out(given, name: str) -> str:
    """Where a run with a --scheme-file writes: runs/custom/<name>, or the folder given, never results/ (it
    holds what the repository's own code makes). ValueError (one line) if given is results/."""
    out = given or f"runs/custom/{name}"
    if Path(out).resolve() == Path(run_dirs()[1]).resolve():
        raise ValueError(f"a run with --scheme-file writes runs/custom/{name} (or another folder), not results/")
    return out


def code_lines(path: Path, fence: bool = True, only=None) -> int:
    """Lines holding code in the scheme's plain form: the part of its pos file before the first
    `# ---- ` fence (for RoPE: plain RoPE; its options, scalings and config reading come after),
    not blank, not a comment, not a docstring, not the file's own self-check (`_self_check` and
    the `if __name__ == "__main__":` block). fence=False: the whole file. only: names of top-level
    definitions (a file of several schemes: one scheme's classes and functions, own_definitions):
    only the lines of those and of the top-level definitions they use, at any depth."""
    return _code_lines(path.read_text(encoding="utf-8"), fence, None if only is None else frozenset(only))


@functools.lru_cache(maxsize=None)
def _code_lines(src: str, fence: bool, only) -> int:
    """code_lines of a file's text (cached by text: a redraw asks for each scheme's count many times)."""
    cut = next((i for i, line in enumerate(src.splitlines()) if line.startswith("# ---- ")), None) if fence else None
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
    if only is not None:
        lines &= _used_lines(tree, only)
    core = {n for n in lines - doc_lines if cut is None or n <= cut}  # line numbers are 1-based
    return len(core)


def _used_lines(tree, names) -> set:
    """Line numbers of the top-level definitions (def, class, NAME = ...) called names and of every top-level
    definition they use, followed through the names each one mentions."""
    defs = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        defs[n.id] = node
    todo, seen = [n for n in names if n in defs], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [n.id for n in ast.walk(defs[name]) if isinstance(n, ast.Name) and n.id in defs and n.id not in seen]
    return {i for name in seen for i in range(defs[name].lineno, defs[name].end_lineno + 1)}


def own_definitions(entry) -> Optional[set]:
    """The top-level names in its pos file that a scheme's entry is made of (build and its hooks: a class, or
    a function), when other registered schemes share that file; None when the file is its alone."""
    path = Path(entry.pos_file or "").name
    if sum(Path(e.pos_file or "").name == path for e in schemes.REGISTRY.values()) < 2:
        return None
    parts = [entry.build, *(getattr(entry, h) for h in schemes.HOOKS)]
    names = {f.__qualname__.split(".")[0] for f in parts if f is not None and hasattr(f, "__qualname__")}
    return {n for n in names if n.isidentifier()}  # a lambda's "<lambda>" names nothing


# ----------------------------------------------------------------------------- provenance

PROVENANCE_KEYS = ("config", "train", "seed", "command", "commit", "corpus_sha256")
UNKNOWN = "unknown"


@functools.lru_cache(maxsize=1)
def git_commit() -> str:
    """The commit the code runs from ("<sha>+dirty" with uncommitted changes to tracked files), or "unknown".
    Read once per process: call it when the process starts (train_compare.main does), not when it saves."""
    import subprocess
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=HERE,
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN
    if sha.returncode:
        return UNKNOWN
    return sha.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def training_provenance(argv, corpus_sha256: str, seed: int, script: str = None, device=None, amp=None) -> dict:
    """What a checkpoint records of how it was made, beside its config and train_config: the
    command (`python <script> <argv>`), the commit, the full SHA-256 of the corpus text (train + validation),
    the device it trained on (the same recipe on a GPU rounds differently from the CPU) and the autocast
    of its forward (amp: "off" or "bf16"; absent in checkpoints from before it was kept, which ran "off")."""
    args = sys.argv[1:] if argv is None else list(argv)
    script = script or Path(sys.argv[0]).name
    return {"command": " ".join(["python", script, *args]).strip(), "commit": git_commit(),
            "corpus_sha256": corpus_sha256, "seed": seed, **({"device": str(device)} if device is not None else {}),
            **({"amp": amp} if amp is not None else {})}


def provenance_of(ck: dict) -> dict:
    """A results row's provenance from its checkpoint: config (the full GPTConfig), train (the full
    TrainConfig), seed, command, commit, corpus_sha256. A checkpoint trained before checkpoints
    recorded them has "unknown" for command, commit and corpus_sha256."""
    extra = ck.get("extra") or {}
    made = extra.get("provenance") or {}
    train = extra.get("train_config") or {}
    return {"config": dict(ck.get("config") or {}), "train": dict(train),
            "seed": made.get("seed", train.get("seed", UNKNOWN)),
            **{k: made.get(k, UNKNOWN) for k in ("command", "commit", "corpus_sha256")},
            **{k: made[k] for k in ("device", "amp") if k in made},  # absent: a checkpoint from before it was kept
            **({"corpus": name} if (name := corpus_of_sha(made.get("corpus_sha256"))) not in (None, corpora.DEFAULT_NAME)
               else {})}  # a named corpus other than the default: its name beside its hash


def corpus_of_sha(sha256) -> Optional[str]:
    """The name of the corpus of corpora.CORPORA whose built text has this SHA-256, or None."""
    return next((n for n, e in corpora.CORPORA.items() if e["sha256"] == sha256), None)


def provenance_key(row: str) -> str:
    """The name a row's provenance is kept under in meta.provenance: its checkpoint, and the seed folder
    of another seed ("rope+yarn" -> "rope", "rope [seed1]" -> "rope [seed1]")."""
    r = row_names.parse(row)
    return r.checkpoint + (f" [{r.seed}]" if r.seed else "")


def provenance_from(path) -> dict:
    """provenance_of the checkpoint at path (read again, without building the model)."""
    return provenance_of(torch.load(path, map_location="cpu", weights_only=True))


def merged_provenance(old_meta: dict, new: dict, rows) -> dict:
    """meta.provenance of a results file after a run: the run's own entries over the old ones, kept
    for the checkpoints whose rows the file still holds."""
    keep = {provenance_key(r["variant"]) for r in rows}
    merged = {**((old_meta or {}).get("provenance") or {}), **new}
    return {k: merged[k] for k in sorted(merged, key=order_of) if k in keep}


def train_len_of(ck: dict) -> int:
    """The length a checkpoint was trained at (a fine-tune's own, longer one)."""
    return ck["extra"].get("train_config", {}).get("seq_len", TrainConfig.seq_len)


# ----------------------------------------------------------------------------- training-free RoPE scalings

# row suffix -> (rope_type, k): factor k * L / L_train at length L (at least 1); k None = factor 1
SCALINGS = {"linear": ("linear", 1), "ntk": ("ntk", 1), "ntk(4s)": ("ntk", 4), "ntk(16s)": ("ntk", 16),
            "dynamic": ("dynamic", None), "yarn": ("yarn", 1), "llama3": ("llama3", 1), "longrope": ("longrope", 1)}


def split_scaling(name: str) -> tuple:
    """(rope_type, k, fixed) of a row suffix (row_names.scaling_parts reads it): a name in SCALINGS
    (factor k * L / L_train), or "<name>@F" for the same scaling at the fixed factor F at every
    length ("yarn@16")."""
    base, fixed = row_names.scaling_parts(name)
    if base not in SCALINGS:
        raise ValueError(f"unknown scaling {base!r}")
    fixed = float(fixed) if fixed else None
    if fixed is not None and not (math.isfinite(fixed) and fixed >= 1):  # NaN and inf too
        raise ValueError(f"the factor after @ in {name!r} must be a finite number of at least 1")
    return SCALINGS[base][0], SCALINGS[base][1], fixed


def check_scalings(text: str, flag: str = "--scalings") -> list:
    """A list of scalings given as `flag`; exits with one line on an unknown name or a bad @factor."""
    scalings = [s for s in text.split(",") if s]
    for s in scalings:
        try:
            split_scaling(s)
        except ValueError as e:
            fail(f"{flag} {text}: {e}; known: {','.join(SCALINGS)}, each also as <name>@<factor> for a fixed "
                 f"factor of at least 1")
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
    """A results JSON file, or {} if there is none yet; one line and exit 2 if it is not JSON (rows are
    merged into it: a run must not score for minutes and then fail to read it)."""
    if not Path(path).exists():
        return {}
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        fail(f"{path} is not a JSON results file ({str(e).splitlines()[0]}); move it aside, or write to another "
             f"folder")


def read_results(path: Path) -> dict:
    """read_json, parsed once per version of the file (path, size, mtime) and shared by every caller: read it,
    never modify it (results/extrapolation.json is 23 MB, and one redraw's tables read it a dozen times)."""
    st = Path(path).stat() if Path(path).exists() else None
    return _read_version(Path(path).resolve(), st and (st.st_size, st.st_mtime_ns))


@functools.lru_cache(maxsize=16)
def _read_version(path: Path, version) -> dict:
    return read_json(path)


def json_to_redraw(path: Path, command: str) -> dict:
    """The results JSON a --redraw rebuilds from; exits with one line if it is not there."""
    if not Path(path).exists():
        fail(f"no {path} to redraw from; run `{command}` first")
    return read_json(Path(path))


def check_redraw(paths, command: str) -> None:
    """Before a --redraw draws anything: each of these results files that exists must be a JSON object
    with finite numbers only; one line and exit 2 for a corrupt one or one holding NaN or Infinity (a
    table or figure drawn from it would be wrong without a word). Whether one must exist is the
    redraw's to say (json_to_redraw)."""
    def no_constant(name):
        raise ValueError(f"it holds {name}, not a finite number")
    for path in map(Path, paths):
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"), parse_constant=no_constant)
        except (ValueError, OSError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            fail(f"--redraw: {path} is not a results file to redraw from ({str(e).splitlines()[0]}); "
                 f"run `{command}` to write it again")
        if not isinstance(data, dict):
            fail(f"--redraw: {path} holds a {type(data).__name__}, not a results file's object; run `{command}` "
                 f"to write it again")


def merge_rows(old: list, new: list, key=lambda r: r["variant"]) -> list:
    """Rows of a run of some variants merged into the rows already in a results file: a new row
    replaces the old one with the same key, old rows the run did not touch are kept, and the
    result is in the order of the variant registry (stable for rows of one variant)."""
    fresh = {key(r) for r in new}
    rows = [r for r in old if key(r) not in fresh] + list(new)
    return sorted(rows, key=lambda r: order_of(r["variant"]))


def is_repo_results(results: Path) -> bool:
    """Is this the repository's own results/, the folder only real runs write and the README's and
    docs/' tables are drawn from (lab/docsync/tables.py)?"""
    return Path(results).resolve() == (HERE / "results").resolve()



# the rows of the README's glance table after every registered scheme's (tables.glance_table)
GLANCE_ROWS = ("rope+yarn", "rope_ft_yarn")
