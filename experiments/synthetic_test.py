"""The synthetic tasks (a fourth measure, issue 58): does a scheme flip-flop, recall, copy or reverse past the
length it was trained at? Each scheme trains one TinyLM (the CPU size) per task and seed at the task's length L,
with the loss on the answers only (lab/synthetic.py's recipes, shared by every scheme), and is scored on fixed test
sequences at L, 2L, 4L and 8L. rope+yarn is the rope model with YaRN at evaluation, factor = length / L.

  * flip-flop (Liu et al. 2023): trained on FFL(0.8), scored on FFL(0.8), sparse (0.98) and dense (0.1);
  * MQAR (Arora et al. 2023, Zoology): L / 16 key-value pairs, every key queried once;
  * selective copy (Golovneva et al. 2024, CoPE): L / 8 letters among blanks, copied after a separator;
  * reverse (Ruoss et al. 2023; Kazemnejad et al. 2023): a string, a separator, the string reversed.

Accuracy is the share of answers right (greedy), with its exact Clopper-Pearson interval. A model below
IN_DISTRIBUTION at L did not learn the task: its longer lengths are "not testable". docs/synthetic.md defines the
tasks, states the recipes and tables the papers' claims against ours (lab/synthetic_claims.py's tested rules).

    python experiments/synthetic_test.py           # every scheme on every task, seeds 0-2 for the core five:
                                                   # results/synthetic.{json,csv,md,png}, synthetic_all.png
    python experiments/synthetic_test.py --quick   # seconds, a smoke test: runs/quick/synthetic/
    python experiments/synthetic_test.py --variants rope,alibi --tasks mqar   # some of it, rows merged
    python experiments/synthetic_test.py --redraw  # tables and figures from synthetic.json

A run is resumable: each model is saved under --ckpt-dir when trained, and its rows are merged into
synthetic.json at once; a model whose rows are there (same recipe) is not trained again.
"""
import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

import sys as _sys
from pathlib import Path as _Path
_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))  # run as python experiments/NAME.py: the repository's modules

import torch

from lab import cli
from lab import synthetic as SY
from lab import synthetic_claims as claims
from lab import synthetic_tasks as S
import schemes
import tiny_lm
from lab import atomic
from lab import devices
from lab.checkpoint_io import full_config, save_checkpoint
from lab.cli import fail
from lab.docsync.tables import sync_settings, sync_table
from lab.eval_common import (check_redraw, check_writable, csv_text, custom_out, git_commit, int_list,
                             is_repo_results, json_to_redraw, read_json, scaling_at)
from lab.long_context import clopper_pearson
from lab.row_names import split_names
from lab.training import train
from lab.variants import QUICK_MODEL, run_dirs, scheme_config

SCRIPT = "experiments/synthetic_test.py"
CORE = ("none", "learned", "sin", "rope", "alibi")  # three seeds each: the rankings rest on them
YARN = "rope+yarn"  # scored from the rope model, not trained
IN_DISTRIBUTION = 0.95  # accuracy at L below this: the model did not learn the task (item 2 of issue 58)
# --quick: a tiny model, a few steps, few test answers. Not a result.
QUICK = {"model": {k: v for k, v in QUICK_MODEL.items() if k != "max_len"},
         "recipe": {"L": 16, "steps": 20, "batch_size": 8, "warmup": 2}, "min_answers": 40, "min_sequences": 4}


# ----------------------------------------------------------------------------- command line

def parse_args(argv=None):
    schemes.load_argv(argv)  # --scheme-file first: its scheme is a name like the others
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    schemes.file_flag(p)
    p.add_argument("--tasks", default=",".join(SY.TASKS), help="comma-separated tasks (default: all, "
                                                              "%(default)s)")
    p.add_argument("--variants", default=None, help="comma-separated schemes, options set too (t5{scale=2.0}) "
                   f"(default: every registered scheme, and {YARN} with rope; rope,alibi with --quick)")
    p.add_argument("--seeds", default="0", help="seeds of every scheme (default %(default)s)")
    p.add_argument("--core-seeds", default=None, help=f"seeds of the core five, {','.join(CORE)} (default 0,1,2; "
                                                      "--seeds with --quick)")
    p.add_argument("--out", default=None, help="folder for synthetic.{json,csv,md,png} (default results/; "
                                               "runs/quick/synthetic with --quick, runs/custom/synthetic with a "
                                               "--scheme-file)")
    p.add_argument("--ckpt-dir", default=None, help="where each model is saved (default runs/synthetic; "
                                                    "<--out>/ckpt with --quick or a --scheme-file)")
    p.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu) or a torch device name")
    p.add_argument("--batch-tokens", type=cli.integer(at_least=1), default=16384, help="tokens per scoring pass")
    p.add_argument("--quick", action="store_true", help="a tiny model and a few steps: a smoke test, not a result")
    p.add_argument("--redraw", action="store_true", help="train nothing: rebuild the tables and figures in --out "
                                                         "from its synthetic.json")
    args = p.parse_args(argv)
    bad = [t for t in split_names(args.tasks) if t not in SY.TASKS]
    if bad or not split_names(args.tasks):
        fail(f"--tasks {args.tasks}: choose from {', '.join(SY.TASKS)}")
    args.tasks = split_names(args.tasks)
    named = split_names(args.variants) if args.variants is not None else (
        ["rope", "alibi"] if args.quick else list(schemes.names()))
    try:
        args.schemes = [n for n in named if n != YARN]
        for n in args.schemes:
            scheme_config(n)
    except ValueError as e:
        fail(f"--variants: {e}")
    if not args.schemes:
        fail(f"--variants {args.variants}: no scheme to train ({YARN} is scored from rope; name rope)")
    args.seeds = int_list(args.seeds, "--seeds", increasing=False)
    args.core_seeds = (int_list(args.core_seeds, "--core-seeds", increasing=False) if args.core_seeds
                       else args.seeds if args.quick else [0, 1, 2])
    mine = any(scheme_config(n)["pos"] in schemes.FILES for n in args.schemes)
    quick_out = run_dirs(quick=True)[0] / "synthetic"
    if args.quick and args.out and is_repo_results(Path(args.out)):
        fail("--quick writes a smoke test, never results/ (it holds real runs only); pass another --out")
    try:
        out = custom_out(args.out, "synthetic") if mine and not args.quick else args.out
    except ValueError as e:
        fail(str(e))
    args.out = Path(out or (quick_out if args.quick else run_dirs()[1]))
    # a smoke test's or a --scheme-file's models beside its tables; the real run's in runs/synthetic
    args.ckpt_dir = Path(args.ckpt_dir or (args.out / "ckpt" if args.quick or mine else "runs/synthetic"))
    return args


# ----------------------------------------------------------------------------- the run

def plan(args) -> list:
    """The models to train, [(scheme, task, seed)]: seed 0 of every scheme first (the core five, then the field's
    schemes the claims name, then the rest of the field), then the core five's other seeds."""
    jobs = []
    for seed in dict.fromkeys([*args.seeds, *args.core_seeds]):
        for name in args.schemes:
            if seed in (args.core_seeds if name in CORE else args.seeds):
                jobs += [(name, task, seed) for task in args.tasks]
    def first(name):  # the core five, then the field's schemes that the papers' claims name, then the others
        return 0 if name in CORE else 1 if name in claims.NAMED else 2
    return sorted(jobs, key=lambda j: (j[2] != 0, j[2], first(j[0])))  # stable: the given order within


def setting(args) -> dict:
    """What a row's numbers depend on beyond its scheme, task and seed: rows made otherwise are not merged."""
    q = QUICK if args.quick else {}
    return {"model": q.get("model", {}), "min_answers": q.get("min_answers", SY.MIN_ANSWERS),
            "min_sequences": q.get("min_sequences", SY.MIN_SEQUENCES), "quick": bool(args.quick)}


def recipe_for(task: str, args) -> dict:
    """The task's recipe as a dict, with --quick's changes: what a model is trained with and its rows record."""
    return SY.recipe_of(task, QUICK["recipe"] if args.quick else None)


def make_model(name: str, task: str, recipe: dict, seed: int, args) -> tiny_lm.TinyLM:
    torch.manual_seed(seed)
    cfg = tiny_lm.GPTConfig(vocab_size=len(S.alphabet(task)), train_len=recipe["L"], **scheme_config(name),
                            **setting(args)["model"])
    return tiny_lm.TinyLM(cfg)


def score_rows(model, name: str, task: str, seed: int, recipe: dict, args, device) -> list:
    """The rows of one trained model: every split of its task at every length; rope's also as rope+yarn."""
    st, L, rows = setting(args), recipe["L"], []
    rows_of = [(name, None)] + ([(YARN, "yarn")] if name == "rope" else [])
    for row, scaling in rows_of:
        for split, (of, _) in SY.SPLITS.items():
            if of != task:
                continue
            for k in SY.MULTIPLES:
                T = k * L
                if scaling:
                    model.set_rope_scaling(scaling_at(scaling, T, L, model.rope.rot_dim, model.cfg.rope_theta))
                got = SY.score(model, split, T, args.batch_tokens, device, st["min_answers"], st["min_sequences"])
                lo, hi = clopper_pearson(got["right"], got["answers"])
                rows.append({"variant": row, "task": task, "split": split, "seed": seed, "L": L, "length": T,
                             "multiple": k, **got, "accuracy": round(got["right"] / got["answers"], 4),
                             "ci_low": round(lo, 4), "ci_high": round(hi, 4)})
            if scaling:
                model.set_rope_scaling(None)
    return rows


def key(r: dict) -> tuple:
    return r["variant"], r["split"], r["seed"], r["length"]


def job_key(name: str, task: str, seed: int) -> str:
    return f"{name}/{task}/seed{seed}"


def done(res: dict, name: str, task: str, seed: int, recipe: dict) -> bool:
    made = res.get("provenance", {}).get(job_key(name, task, seed))
    return bool(made) and made["recipe"] == recipe and made["setting"] == res.get("setting")


def run_job(name: str, task: str, seed: int, args, device) -> tuple:
    """Train (or reload) one model and score it: (rows, provenance)."""
    recipe = recipe_for(task, args)
    model = make_model(name, task, recipe, seed, args)
    path = args.ckpt_dir / task / f"{name}_seed{seed}.pt"
    t0 = time.perf_counter()
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True) if path.exists() else None
    except Exception as e:  # a file cut off by a kill, or not a checkpoint: train again, and say so
        print(f"{path} is not a checkpoint to reuse ({str(e).splitlines()[0][:120]}); training it again")
        ck = None
    if ck and ck.get("extra", {}).get("recipe") == recipe and ck.get("config") == full_config(model.cfg):
        model.load_state_dict(ck["model"])
        train_s, loss = ck["extra"]["train_s"], ck["losses"]["train_loss"][-1]
    else:
        tc = SY.Recipe(**recipe).train_config(seed)
        hist = train(model, None, None, tc, desc=f"{name} on {task}, seed {seed}", device=device,
                     batches=SY.batches(task, recipe["L"], recipe["batch_size"]))
        train_s, loss = round(time.perf_counter() - t0, 1), hist["train_loss"][-1]
        model.cpu()
        save_checkpoint(path, model, S.alphabet(task), tc.steps, hist, {"recipe": recipe, "train_s": train_s})
    model.to(device)
    rows = score_rows(model, name, task, seed, recipe, args, device)
    made = {"recipe": recipe, "setting": setting(args), "config": asdict(model.cfg), "seed": seed,
            "command": cli.command(SCRIPT), "commit": git_commit(), "device": str(device), "torch": torch.__version__,
            "train_s": train_s, "final_train_loss": round(loss, 4), "checkpoint": str(path)}
    pos = model.cfg.pos
    if pos in schemes.FILES:  # a reader's scheme: which file, and its hash
        made["scheme_file"] = dict(schemes.FILES[pos])
    return rows, made


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    path = args.out / "synthetic.json"
    if args.redraw:
        check_redraw([path], cli.command(SCRIPT, argv))
        check_writable(args.out, "--out")
        return redraw(args.out)
    check_writable(args.out, "--out")
    check_writable(args.ckpt_dir, "--ckpt-dir")
    check_redraw([path], cli.command(SCRIPT, argv))  # a corrupt results file: before any training
    try:
        device = devices.pick_device(args.device)
    except ValueError as e:
        fail(str(e))
    git_commit()  # read once, when the run starts
    res = read_json(path)
    if res and res.get("setting") != setting(args):
        fail(f"{path} holds rows made with {res.get('setting')}, not {setting(args)}; pass another --out")
    res = {"setting": setting(args), "rows": res.get("rows", []), "provenance": res.get("provenance", {})}
    jobs = plan(args)
    t0 = time.perf_counter()
    for i, (name, task, seed) in enumerate(jobs, 1):
        recipe = recipe_for(task, args)
        if done(res, name, task, seed, recipe):
            print(f"[{i}/{len(jobs)}] {name} on {task}, seed {seed}: in {path} already")
            continue
        print(f"[{i}/{len(jobs)}] {name} on {task}, seed {seed} ({time.perf_counter() - t0:.0f} s so far)", flush=True)
        rows, made = run_job(name, task, seed, args, device)
        fresh = {key(r) for r in rows}
        res["rows"] = [r for r in res["rows"] if key(r) not in fresh] + rows
        res["provenance"][job_key(name, task, seed)] = made
        if name == "rope":
            res["provenance"][job_key(YARN, task, seed)] = {**made, "scaling": "yarn, factor = length / L"}
        atomic.atomic_write_text(path, json.dumps(res, indent=1))  # after every model: a run stopped keeps them
    redraw(args.out)
    print(f"wrote {args.out}/synthetic.{{json,csv,md,png}} and synthetic_all.png in {time.perf_counter() - t0:.0f} s")
    return 0


# ----------------------------------------------------------------------------- tables and figures

ORDER = (*CORE, YARN)


def row_order(name: str) -> tuple:
    names = schemes.names()
    return (ORDER.index(name) if name in ORDER else len(ORDER) + (names.index(name) if name in names else len(names)),
            name)


def cells(rows: list) -> dict:
    """{(variant, split): {multiple: [row of each seed]}}."""
    out = {}
    for r in sorted(rows, key=lambda r: r["seed"]):
        out.setdefault((r["variant"], r["split"]), {}).setdefault(r["multiple"], []).append(r)
    return out


def cell_text(rs: list, testable: bool) -> str:
    """One seed: accuracy [interval]; several: their mean and range. A '*' marks a length past L of a model
    that did not learn the task."""
    if len(rs) == 1:
        r = rs[0]
        text = f"{r['accuracy']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
    else:
        accs = [r["accuracy"] for r in rs]
        text = f"{sum(accs) / len(accs):.3f} ({min(accs):.3f}-{max(accs):.3f}, {len(accs)} seeds)"
    return text if testable else text + "*"


def markdown(res: dict) -> str:
    got, lines = cells(res["rows"]), []
    L = {r["task"]: r["L"] for r in res["rows"]}
    lines += [f"# Synthetic tasks: accuracy on the answers at L, 2L, 4L and 8L", "",
              f"Written by `python {SCRIPT}` ({'--quick: a smoke test, not a result' if res['setting']['quick'] else 'real run'}). "
              f"One seed: accuracy [95% Clopper-Pearson interval] over at least {res['setting']['min_answers']} answers "
              f"and {res['setting']['min_sequences']} sequences a cell; several seeds: mean (lowest-highest). "
              f"* = past L of a model below {IN_DISTRIBUTION:.0%} at L: not testable.", ""]
    for split in SY.SPLITS:
        names = sorted({v for v, s in got if s == split}, key=row_order)
        if not names:
            continue
        task = SY.SPLITS[split][0]
        lines += [f"## {split} (L = {L[task]})", "",
                  "| variant | " + " | ".join(f"{k}L = {k * L[task]}" for k in SY.MULTIPLES) + " |",
                  "|---|" + "---|" * len(SY.MULTIPLES)]
        for v in names:
            c = got[(v, split)]
            testable = claims.learned(res["rows"], v, task)
            lines.append(f"| {v} | " + " | ".join(cell_text(c[k], k == 1 or testable) if k in c else "-"
                                                 for k in SY.MULTIPLES) + " |")
        lines.append("")
    lines += ["## Claims", "", claims.claims_table(res["rows"]), ""]
    return "\n".join(lines)


def csv_rows(res: dict) -> list:
    return sorted(res["rows"], key=lambda r: (list(SY.SPLITS).index(r["split"]), row_order(r["variant"]), r["seed"],
                                              r["length"]))


MAIN_LINES = ("none", "learned", "sin", "rope", "alibi", YARN, "t5", "cope")  # at most 8 lines a panel


def figure(res: dict, path: Path, splits, names=None) -> None:
    """A panel per split: mean accuracy over the seeds against the test length, shaded from the lowest seed's
    interval bound to the highest's. names: the rows drawn (default every row); a model that did not learn its task
    is drawn thin and dotted."""
    from lab import plot_style, plots
    plt = plot_style._plt()
    got = cells(res["rows"])
    ncol = 2 if len(splits) == 4 else min(3, len(splits))
    nrow = -(-len(splits) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.9 * ncol + 1.8, 3.3 * nrow), squeeze=False)
    for ax in axes.flat[len(splits):]:
        ax.set_visible(False)
    for ax, split in zip(axes.flat, splits):
        task = SY.SPLITS[split][0]
        L = next(r["L"] for r in res["rows"] if r["split"] == split)
        xs = [k * L for k in SY.MULTIPLES]
        for v in sorted({v for v, s in got if s == split and (names is None or v in names)}, key=row_order):
            c = got[(v, split)]
            ks = [k for k in SY.MULTIPLES if k in c]
            mean = [sum(r["accuracy"] for r in c[k]) / len(c[k]) for k in ks]
            lo = [min(r["ci_low"] for r in c[k]) for k in ks]
            hi = [max(r["ci_high"] for r in c[k]) for k in ks]
            st = plot_style.style(v)
            ok = claims.learned(res["rows"], v, task)
            ax.fill_between([k * L for k in ks], lo, hi, color=st["color"], alpha=0.12, lw=0)  # the seeds' intervals
            ax.plot([k * L for k in ks], mean, label=v if ok else f"_{v}", lw=1.6 if ok else 0.8,
                    ls=st["ls"] if ok else ":", marker=st["marker"], ms=4, color=st["color"])
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs)
        ax.set_xticklabels([str(x) for x in xs])
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("test length (characters)")
        ax.set_title(f"{split.replace('_', ' ')} (trained at {xs[0]})", fontsize=10)
        ax.axvline(xs[0], color="0.6", lw=0.8, ls="--", gid="ref")
    for row in axes:
        row[0].set_ylabel("accuracy on the answers")
    # one legend for every panel: each row once, drawn as where it learned its task (a learned row has a label)
    handles = {}
    for ax in axes.flat:
        for line in ax.get_lines():
            name = line.get_label().lstrip("_")
            if name in {r["variant"] for r in res["rows"]} and (name not in handles or not line.get_label().startswith("_")):
                handles[name] = line
    names_in = sorted(handles, key=row_order)
    axes[0][-1].legend([handles[n] for n in names_in], names_in, fontsize=7, loc="upper left",
                       bbox_to_anchor=(1.02, 1.0), title="shaded: the seeds' 95% intervals\n"
                       "thin dotted: below 95% at L,\nthe task not learned", title_fontsize=7)
    fig.tight_layout()
    plots.save(fig, path)


def recipe_table(res: dict, planned: list | None = None) -> str:
    """The recipe of each task as its models were trained (their provenance), with the models and their training
    time: what docs/synthetic.md states. planned: the full command's jobs [(scheme, task, seed)], to say how many
    of them are in (results/ only; a partial run is not a measured total)."""
    made = [m for k, m in res["provenance"].items() if not k.startswith(YARN + "/")]
    lines = ["| task | L | test lengths | steps | batch | lr | warm-up | models | training, total |",
             "|---|---|---|---|---|---|---|---|---|"]
    for task in SY.TASKS:
        ms = [m for m in made if m["checkpoint"].replace("\\", "/").split("/")[-2] == task]
        if not ms:
            continue
        r = ms[0]["recipe"]
        lines.append(f"| {task} | {r['L']} | {', '.join(str(k * r['L']) for k in SY.MULTIPLES[1:])} | {r['steps']} | "
                     f"{r['batch_size']} | {r['lr']:g} | {r['warmup']} | {len(ms)} | "
                     f"{sum(m['train_s'] for m in ms) / 60:.0f} min |")
    devices_ = sorted({m["device"] for m in made})
    cfg = made[0]["config"]
    hours = sum(m["train_s"] for m in made) / 3600
    if planned is None:
        trained = f"{len(made)} models trained"
    else:
        have = sum(f"{n}/{t}/seed{s}" in res["provenance"] for n, t, s in planned)  # not done(): any recipe counts
        trained = (f"all {len(planned)} models of the full command trained" if have == len(planned) else
                   f"{have} of the full command's {len(planned)} models trained so far")
    lines += ["", f"Model: TinyLM, {cfg['n_layer']} layers, {cfg['n_head']} heads, width {cfg['n_embd']}; "
                  f"{trained} on {', '.join(devices_)} in {hours:.1f} h of training in all (scoring not counted)."]
    spread = seed_time_spread(res)
    if spread:
        median, (ratio, name, task) = spread
        lines[-1] += (f" The same scheme, task and recipe took a median {median:.1f}x as long in its slowest seed as"
                      f" in its fastest (at most {ratio:.1f}x, {name} on {task}): the machines' speed and the work"
                      f" that shared their cores, not the model.")
    return "\n".join(lines)


def seed_time_spread(res: dict) -> tuple | None:
    """How far the training times of one (scheme, task) lie apart over its seeds, which train the same recipe at the
    same size: (the median over (scheme, task) of slowest / fastest, (the largest such ratio, its scheme, its
    task)); None when no scheme has two seeds on a task. It measures the machines, not the models."""
    times = {}
    for k, m in res["provenance"].items():
        name, task, _ = k.split("/")
        if name != YARN and m["train_s"] > 0:  # rope+yarn: rope's model scored again, not trained
            times.setdefault((name, task), []).append(m["train_s"])
    ratios = sorted((max(t) / min(t), name, task) for (name, task), t in times.items() if len(t) > 1)
    if not ratios:
        return None
    return statistics.median(r for r, _, _ in ratios), ratios[-1]


def redraw(out: Path) -> int:
    """synthetic.md, .csv, .png and synthetic_all.png from <out>/synthetic.json alone; the claims table into
    docs/synthetic.md when out is results/."""
    res = json_to_redraw(out / "synthetic.json", f"python {SCRIPT}")
    if not res.get("rows"):
        fail(f"{out}/synthetic.json holds no rows; run `python {SCRIPT}` first")
    atomic.atomic_write_text(out / "synthetic.md", markdown(res))
    atomic.atomic_write_text(out / "synthetic.csv", csv_text(csv_rows(res)))
    tasks = [s for s in ("flip_flop", "mqar", "selective_copy", "reverse") if any(r["split"] == s for r in res["rows"])]
    ours = set(schemes.names()) - set(schemes.FILES)
    own = {r["variant"] for r in res["rows"]} - ours - {YARN}  # a reader's schemes (--scheme-file): drawn too
    figure(res, out / "synthetic.png", tasks, (*MAIN_LINES, *sorted(own)))
    figure(res, out / "synthetic_all.png", [s for s in SY.SPLITS if any(r["split"] == s for r in res["rows"])])
    sync_table("synthetic_claims", claims.claims_table(res["rows"]), out)
    sync_table("synthetic_generalise", claims.generalise_table(res["rows"]), out)
    full = ([j for j in plan(parse_args([])) if scheme_config(j[0])["pos"] not in schemes.FILES]
            if is_repo_results(out) else None)  # what `python experiments/synthetic_test.py` trains (no reader's file)
    sync_table("synthetic_recipe", recipe_table(res, full), out)
    sync_settings(out)  # docs/settings.md's finding 8 (lab/docsync/findings.py)
    if is_repo_results(out):  # the numbers inside sentences: README's lesson 8, docs/results.md's finding 8
        from lab.docsync import prose_numbers
        prose_numbers.sync(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
