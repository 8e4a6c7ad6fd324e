"""Speed and memory of the position schemes, measured (after section 4.2 性能对比实验 of a related
article, "从RoPE到ALiBi：手把手带你用PyTorch复现三种主流位置编码"; the tutorial has no benchmark).

Every registered scheme (a --scheme-file's too), batch 1, torch.no_grad, medians of --repeats runs
after --warmup, the schemes interleaved within every repetition so that a slow moment hits them alike:
  * forward time of the whole tiny LM, and its peak memory above the baseline (one fresh process per
    scheme, lengths increasing: CUDA max_memory_allocated, CPU peak resident set ru_maxrss);
  * every hook the scheme has (schemes.py) for one layer at the longest length: time and bytes
    returned (score_bias: what attention reads of it, the largest chunk or the distance row);
  * ratios side by side: training tokens/s over a reference TinyLM(pos="none"), and at the longest
    length forward time and memory, and lm_eval.window_losses' time and memory, over RoPE's.
Writes <results>/benchmark.md, .json and .png (atomically): results/ only for the full run (every scheme, every
default; on a GPU results/gpu/), a partial run runs/benchmark/, a --scheme-file's runs/custom/benchmark/. Unlike that article's
run_benchmark: medians after a warm-up, not one cold call; the peak-memory counter reset per case; CPU memory.

    python experiments/benchmark.py                # the full run, a few minutes on 2 cores: results/
    python experiments/benchmark.py --lengths 4096 --schemes rope,alibi,kerple   # a partial run: runs/benchmark/
"""
import argparse
import json
import multiprocessing
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import sys as _sys
from pathlib import Path as _Path
_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))  # run as python experiments/NAME.py: the repository's modules

import torch

from lab import cli
from lab import plots
import schemes
import tiny_lm
from lab import atomic
from lab import devices
from lab import lm_eval
from lab.options import make_config, make_model
from tiny_lm import TinyLM
from attn_common import rows_per_chunk
from lab.eval_common import check_redraw, check_writable, custom_out, is_repo_results, json_to_redraw
from lab.row_names import split_names
from lab.variants import run_dirs, scheme_config, schemes_of_flags

MiB = 2 ** 20


@dataclass
class BenchConfig:
    lengths: tuple = (512, 1024, 2048, 4096)
    schemes: tuple = tuple(tiny_lm.SCHEMES)  # parse_args: every scheme registered when it runs
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    vocab_size: int = 78  # the Shakespeare corpus's characters
    repeats: int = 5
    warmup: int = 1
    train_len: int = 256  # training window, as in train_compare.py
    train_batch: int = 16
    train_steps: int = 3
    train_repeats: int = 7
    eval_windows: int = 4
    eval_repeats: int = 5
    memory: bool = True
    device: str = "auto"
    threads: int = 0
    seed: int = 0
    results: str = str(run_dirs()[1])  # the output folder: results/


# --quick: a tiny model and short lengths; a flag given on the command line still wins.
QUICK = {"lengths": (32, 64), "n_layer": 2, "n_head": 2, "n_embd": 32, "repeats": 2, "warmup": 1,
         "train_len": 32, "train_batch": 4, "train_steps": 1, "train_repeats": 2, "eval_windows": 2,
         "eval_repeats": 2, "results": str(run_dirs(quick=True)[0] / "benchmark")}


def make_lm(cfg: BenchConfig, scheme: str) -> TinyLM:
    """The benchmark's LM of a scheme, or of a scheme with options set (kerple_power{p=2}: variants.scheme_config)."""
    torch.manual_seed(cfg.seed)
    return make_model(make_config(vocab_size=cfg.vocab_size, n_layer=cfg.n_layer, n_head=cfg.n_head, n_embd=cfg.n_embd,
                            max_len=max(max(cfg.lengths), cfg.train_len), **scheme_config(scheme)))


def random_ids(cfg: BenchConfig, n: int) -> torch.Tensor:
    return torch.randint(0, cfg.vocab_size, (n,), generator=torch.Generator().manual_seed(cfg.seed))


# ----------------------------------------------------------------------------- timing

def interleaved(cases: dict, reps: int, warmup: int, device, bar) -> dict:
    """Run every case once per repetition, in a rotating order, the device queue drained around
    each call; return name -> median seconds of the runs after the warm-up."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    names, times = list(cases), {name: [] for name in cases}
    for r in range(warmup + reps):
        for name in names[r % len(names):] + names[:r % len(names)]:
            sync()
            t0 = time.perf_counter()
            cases[name]()
            sync()
            if r >= warmup:
                times[name].append(time.perf_counter() - t0)
            bar.update()
    return {name: statistics.median(ts) for name, ts in times.items()}


def forward_times(cfg: BenchConfig, device, bar) -> dict:
    """(scheme, T) -> median seconds of one whole-LM forward, batch 1, no_grad."""
    models, out = {s: make_lm(cfg, s).to(device).eval() for s in cfg.schemes}, {}
    for T in cfg.lengths:
        idx = random_ids(replace(cfg, seed=cfg.seed + T), T).view(1, T).to(device)  # (1, T), its own seed per T
        cases = {s: (lambda m=m: m(idx)) for s, m in models.items()}
        with torch.no_grad():
            out.update({(s, T): sec for s, sec in interleaved(cases, cfg.repeats, cfg.warmup, device, bar).items()})
    return out


def _bytes(out) -> int:
    """Bytes of the tensors a hook returned (a tensor, a tuple of them, or None)."""
    return sum(t.numel() * t.element_size() for t in (out if isinstance(out, tuple) else [out]) if torch.is_tensor(t))


def _chunks(bias, q, T: int):
    """What attention reads of a score_bias for T causal queries q: a tensor, a distance row, else the largest chunk."""
    if not callable(bias) or getattr(bias, "distance", None) is not None:
        return bias if not callable(bias) else bias.distance[0]
    n = rows_per_chunk(q, 256, T)  # TinyLM's q_chunk, fewer at long T
    return max((bias(a, min(a + n, T), 0, min(a + n, T)) for a in range(0, T, n)), key=torch.numel)


def hook_costs(cfg: BenchConfig, device, bar) -> dict:
    """(scheme, hook) -> (median seconds of one call, bytes returned): each hook a scheme has, for layer 0 at the
    longest length, and the RoPE tables of a scheme that uses them."""
    T, cases = max(cfg.lengths), {}
    for s in cfg.schemes:
        model = make_lm(cfg, s).to(device).eval()
        e, m, (H, D) = model.scheme, model.pos_module, (cfg.n_head, cfg.n_embd // cfg.n_head)
        x, q = torch.randn(1, T, cfg.n_embd, device=device), torch.randn(1, H, T, D, device=device)
        layer = model.layer_of(0)  # what layer 0's hooks are given: a global layer with positions
        args = (x, layer, 0, None if e.prepare is None else e.prepare(m, x, 0), None)  # x, layer, offset, shared, past
        calls = {"input_rows": lambda e=e, m=m: e.input_rows(m, T, 0),
                 "rotate_qk": lambda e=e, m=m, q=q, ly=layer: e.rotate_qk(m, q, q, 0, ly),
                 "prepare": lambda e=e, m=m, x=x: e.prepare(m, x, 0),
                 "score_bias": lambda e=e, m=m, a=args, q=q: _chunks(e.score_bias(m, *a, q=q, k=q)[0], q, T),
                 "extra_logits": lambda e=e, m=m, a=args, q=q: e.extra_logits(m, *a, q=q, k=q)[0],
                 "RoPE tables": lambda model=model: model.rope.cos_sin(T)}
        cases.update({(s, h): calls[h] for h in [*e.hooks, *(["RoPE tables"] if model.rope is not None else [])]})
    with torch.no_grad():
        made = {case: _bytes(call()) for case, call in cases.items()}
        times = interleaved(cases, cfg.repeats, cfg.warmup, device, bar)
    return {case: (times[case], made[case]) for case in cases}


def scheme_memory(cfg: BenchConfig, scheme: str, device, files=()) -> dict:
    """{"forward T": bytes, "eval": bytes}: peak memory above the baseline, with the --scheme-files loaded. On CPU
    ru_maxrss is this process's high-water mark: run it in a fresh process (peak_memory), lengths increasing."""
    schemes.load_files(files)
    torch.set_num_threads(cfg.threads)
    device, Te = torch.device(device), max(cfg.lengths)
    model, ids = make_lm(cfg, scheme).to(device).eval(), random_ids(cfg, cfg.eval_windows * max(cfg.lengths) + 1)
    runs = {f"forward {T}": lambda T=T: model(ids[:T].view(1, T).to(device)) for T in sorted(cfg.lengths)}
    runs["eval"] = lambda: lm_eval.window_losses(model, ids, Te, cfg.eval_windows)
    cuda, out = device.type == "cuda", {}
    if not cuda:
        import resource
    peak = (lambda: torch.cuda.synchronize(device) or torch.cuda.max_memory_allocated(device)) if cuda else \
        (lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024))
    with torch.no_grad():
        model(ids[:8].view(1, 8).to(device))  # library code paged in on first use is not the case's memory
        base = peak()
        for what, run in runs.items():
            if cuda:  # the counter restarts for every case
                torch.cuda.reset_peak_memory_stats(device)
                base = torch.cuda.memory_allocated(device)
            run()
            out[what] = peak() - base
    return out


def peak_memory(cfg: BenchConfig, device, bar) -> dict:
    """(scheme, "forward T" | "eval") -> bytes, each scheme in a fresh process forked from a server that
    imported torch and this file once (forkserver; a new interpreter would spend a second on torch)."""
    ctx, out, files = multiprocessing.get_context("forkserver"), {}, sorted({f["path"] for f in schemes.FILES.values()})
    # preloaded by the name it is imported as (a preload that fails is skipped without a word, and every child
    # then imports torch again: 8 s more for the --quick run's 13 schemes)
    ctx.set_forkserver_preload(["experiments.benchmark"])
    with ctx.Pool(1, maxtasksperchild=1) as pool:  # a new child for every task; its exception is raised here
        for s in cfg.schemes:
            bar.set_description(f"memory of {s}")
            out.update({(s, what): b for what, b in pool.apply(scheme_memory, (cfg, s, str(device), files)).items()})
            bar.update()
    return out


# ----------------------------------------------------------------------------- the two ratios

def train_throughput(cfg: BenchConfig, device, bar) -> dict:
    """name -> training tokens/s (forward, backward, clip, AdamW step), the reference included."""
    models = {"reference": make_lm(cfg, "none"), **{s: make_lm(cfg, s) for s in cfg.schemes}}
    ids = random_ids(cfg, cfg.train_batch * (cfg.train_len + 1)).view(cfg.train_batch, -1).to(device)
    x, y = ids[:, :-1], ids[:, 1:]  # (B, T) each
    cases = {}
    for name, m in models.items():
        m.to(device).train()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)

        def steps(m=m, opt=opt):
            for _ in range(cfg.train_steps):
                opt.zero_grad(set_to_none=True)
                m(x, y).loss.backward()
                torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
                opt.step()
        cases[name] = steps
    tokens = cfg.train_steps * cfg.train_batch * cfg.train_len
    return {name: tokens / sec for name, sec in interleaved(cases, cfg.train_repeats, 1, device, bar).items()}


def eval_times(cfg: BenchConfig, device, bar) -> dict:
    """Every scheme's window_losses at max(lengths), side by side: median seconds of each."""
    T, n, models = max(cfg.lengths), cfg.eval_windows, {s: make_lm(cfg, s).to(device) for s in cfg.schemes}
    ids = random_ids(cfg, n * T + 1)
    cases = {s: (lambda m=m: lm_eval.window_losses(m, ids, T, n)) for s, m in models.items()}
    return interleaved(cases, cfg.eval_repeats, cfg.warmup, device, bar)


# ----------------------------------------------------------------------------- report

def machine_line(device) -> str:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"{device.type} ({name}); {os.cpu_count()} CPUs ({usable} usable by this process); torch "
            f"{torch.__version__} with {torch.get_num_threads()} intra-op threads; Python {platform.python_version()}; "
            f"{platform.system()} {platform.release()}")


def md_section(cfg, title: str, note: str, cell) -> list:
    """"## title", the note if any, then one row per scheme and one column per length; cell(scheme, T) -> text."""
    lines = ["", f"## {title}", ""] + ([note, ""] if note else [])
    lines += ["| scheme | " + " | ".join(f"T={T}" for T in cfg.lengths) + " |", "|---|" + "---:|" * len(cfg.lengths)]
    return lines + ["| " + " | ".join([s] + [cell(s, T) for T in cfg.lengths]) + " |" for s in cfg.schemes]


def build_report(cfg, machine: str, device_type: str, times, memory, hooks, tok_s, ev, argv) -> str:
    ms = lambda sec: f"{sec * 1e3:,.1f}" if sec >= 0.01 else f"{sec * 1e3:.2f}"
    Te, ref = max(cfg.lengths), tok_s["reference"]
    mem = lambda s, what: f"{memory[(s, what)] / MiB:,.1f}" if memory else "-"
    how = ("not measured (--no-memory, or no peak-memory counter on this device)" if not memory else
           "torch.cuda.max_memory_allocated minus memory_allocated before" if device_type == "cuda" else
           "one subprocess per scheme runs the lengths in increasing order; its peak resident set (ru_maxrss) "
           "after each forward minus the same after the model and an 8-token warm-up forward")
    out = ["# Speed and memory of the position schemes", "",
           f"Machine: {machine}.",
           f"Model: {cfg.n_layer} layers, {cfg.n_head} heads, {cfg.n_embd} dims, vocabulary {cfg.vocab_size}. "
           f"Forward passes at batch 1 under torch.no_grad, median of {cfg.repeats} runs after {cfg.warmup} "
           f"warm-up, the schemes interleaved within every repetition.",
           f"Command: `{' '.join(['python experiments/benchmark.py'] + argv)}`."]
    out += md_section(cfg, "Forward time of the whole tiny LM (ms)", None, lambda s, T: ms(times[(s, T)]))
    out += md_section(cfg, "Peak memory of the whole-LM forward (MiB above the baseline)", f"Measured: {how}.",
                      lambda s, T: mem(s, f"forward {T}"))
    out += ["", f"## The hooks, one layer at T={Te}", "",
            "Each hook a scheme has (schemes.py), called for layer 0: median ms of one call and MiB of what it "
            "returns. score_bias: every chunk of queries attn_sdpa asks of it, built, and the largest chunk's MiB (a "
            "tensor, or a function's distance row: itself). RoPE tables: the cos/sin a scheme that uses them builds.", "",
            "| scheme | hook | ms | MiB |", "|---|---|---:|---:|"]
    out += [f"| {s} | {h} | {ms(sec)} | {b / MiB:,.3f} |" for (s, h), (sec, b) in hooks.items()]
    out += ["", f"## Ratios to RoPE at T={Te}", "",
            f"Forward: time and peak memory of the forward above. Evaluation: lm_eval.window_losses over "
            f"{cfg.eval_windows} windows of {Te}, median of {cfg.eval_repeats}, and its peak memory above the "
            f"baseline (its MiB in the column after). Training: over NoPE's, below.", "",
            "| scheme | forward time | forward memory | evaluation time | evaluation memory | evaluation MiB | "
            "training vs NoPE |", "|---|---:|---:|---:|---:|---:|---:|"]
    ratio = lambda d, s, key: f"{d[(s, key)] / d[('rope', key)]:.2f}" if d and d[("rope", key)] > 0 else "-"
    out += [f"| {s} | {times[(s, Te)] / times[('rope', Te)]:.2f} | {ratio(memory, s, f'forward {Te}')} | {ev[s] / ev['rope']:.2f} "
            f"| {ratio(memory, s, 'eval')} | {mem(s, 'eval')} | {tok_s[s] / ref:.3f} |" for s in cfg.schemes]
    out += ["", "Training throughput ratio vs the SDPA reference (the last column: tokens/s of the scheme / of the "
            f"reference; T={cfg.train_len}, batch {cfg.train_batch}, median of {cfg.train_repeats} x {cfg.train_steps} "
            "steps). Reference: a second TinyLM(pos=\"none\"), whose attention is one F.scaled_dot_product_attention"
            f"(is_causal=True) per layer, {ref:,.0f} tokens/s."]
    return "\n".join(out) + "\n"


def plot(cfg, times, memory, path: Path, device_type: str) -> None:
    plots.benchmark(path, list(cfg.lengths), list(cfg.schemes), times, memory, device_type,
                    f"Position schemes, {cfg.n_layer}x{cfg.n_head}x{cfg.n_embd} tiny LM on {device_type}")


# ----------------------------------------------------------------------------- CLI

def parse_args(argv=None) -> BenchConfig:
    """BenchConfig(), then QUICK with --quick, then every flag that was given; a bad value: one line, exit 2."""
    schemes.load_argv(argv)  # --scheme-file first: its scheme is a name like the others
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    schemes.file_flag(p)
    show = lambda v: ",".join(map(str, v)) if isinstance(v, tuple) else v

    def flag(field: str, text: str, type=int):  # --field-name, None when not given
        quick = f"; with --quick {show(QUICK[field])}" if field in QUICK else ""
        p.add_argument("--" + field.replace("_", "-"), type=type,
                       help=f"{text} (default {show(getattr(BenchConfig, field))}{quick})")
    flag("lengths", "comma-separated sequence lengths", type=int_tuple)
    flag("schemes", "comma-separated schemes, options set or not (t5{scale=2.0})", type=lambda v: tuple(split_names(v)))
    for field, text in (("repeats", "timed forward runs per case (median)"), ("warmup", "untimed runs first"),
                        ("train_steps", "optimizer steps per timed training repetition"),
                        ("train_repeats", "timed repetitions of the training comparison (median)"),
                        ("eval_windows", "windows of the longest length in the evaluation"),
                        ("eval_repeats", "timed repetitions of that evaluation (median)")):
        flag(field, text)
    flag("threads", "torch intra-op threads (0: torch's default)", type=cli.THREADS)
    flag("device", "auto (cuda, then cpu), or a torch device name", type=str)
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurements")
    p.add_argument("--results", "--out", help="folder for benchmark.md and .png (default results/; a partial run "
                                              "runs/benchmark/, --quick runs/quick/benchmark/)")
    p.add_argument("--quick", action="store_true", help="tiny model and lengths: a smoke test, not a result")
    p.add_argument("--redraw", action="store_true", help="measure nothing: rebuild benchmark.md and .png in "
                                                         "--results from its benchmark.json")
    a = p.parse_args(argv)
    given = {f: v for f, v in vars(a).items() if v is not None and f not in ("no_memory", "quick", "redraw", "scheme_file")}
    cfg = replace(BenchConfig(**(QUICK if a.quick else {})), **{"schemes": tuple(tiny_lm.SCHEMES), **given},
                  memory=not a.no_memory)  # every scheme registered now, a --scheme-file's included
    try:
        pos = schemes_of_flags({"--schemes": cfg.schemes})  # one line for a name that is no scheme
        mine = not a.quick and any(s in schemes.FILES for s in pos)  # then runs/custom/benchmark
        cfg = replace(cfg, results=custom_out(a.results, "benchmark")) if mine else cfg
    except ValueError as e:
        cli.fail(str(e))
    real = replace(BenchConfig(), schemes=tuple(tiny_lm.SCHEMES))  # what results/ holds: the full run
    part = [f for f in asdict(real) if f not in ("device", "threads", "results") and getattr(cfg, f) != getattr(real, f)]
    if part and not a.quick and not mine:  # a partial run never replaces results/benchmark.json
        if a.results is not None and is_repo_results(Path(a.results)):
            cli.fail(f"results/ holds the full benchmark; this run sets {', '.join(part)}: drop --results (runs/benchmark/)")
        cfg = replace(cfg, results=a.results or "runs/benchmark")
    if "rope" not in cfg.schemes:
        cli.fail(f"--schemes must include rope (the ratios are to RoPE's); got {','.join(cfg.schemes)}")
    counts = ("repeats", "train_repeats", "train_steps", "eval_windows", "eval_repeats")
    bad = [f"--lengths {','.join(map(str, cfg.lengths))}"] if min(cfg.lengths) < 1 else []
    bad += [f"--{f.replace('_', '-')} {getattr(cfg, f)}" for f in counts if getattr(cfg, f) < 1]
    bad += [f"--warmup {cfg.warmup}"] if cfg.warmup < 0 else []
    if bad:
        cli.fail(f"{', '.join(bad)}: lengths, repeats, steps and windows must be positive, --warmup at least 0")
    return cfg


def int_tuple(text: str) -> tuple:
    """--lengths: comma-separated integers (argparse type)."""
    try:
        return tuple(int(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated integers, got {text!r}") from None


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    cfg = parse_args(argv)
    out = Path(cfg.results)
    if "--redraw" in argv:  # measure nothing: the report and the figure from benchmark.json, checked first
        check_redraw([out / "benchmark.json"], cli.command("experiments/benchmark.py", argv))
        return check_writable(out, "--results") or redraw(out)
    try:
        device = devices.pick_device(cfg.device, mps=False)  # memory is measured on cuda or cpu only
    except ValueError as e:
        cli.fail(str(e))
    out = out / "gpu" if device.type != "cpu" and is_repo_results(out) else out  # results/ holds the CPU's run
    check_writable(out, "--results")  # before minutes of measuring
    torch.set_num_threads(cfg.threads or torch.get_num_threads())
    cfg = replace(cfg, threads=torch.get_num_threads())  # the memory subprocesses use the same number
    do_memory = cfg.memory and device.type in ("cuda", "cpu") and sys.platform != "win32"
    t_start = time.perf_counter()
    print(f"benchmark: {machine_line(device)}", file=sys.stderr)
    with cli.progress(desc="memory", unit="run") as bar:
        memory = peak_memory(cfg, device, bar) if do_memory else {}  # first, while nothing else of ours runs
        bar.set_description("forward")
        times = forward_times(cfg, device, bar)
        bar.set_description("training")
        tok_s = train_throughput(cfg, device, bar)
        bar.set_description("evaluation")
        ev = eval_times(cfg, device, bar)
        bar.set_description("hooks")
        hooks = hook_costs(cfg, device, bar)
    triples = lambda d: [[a, b, v] for (a, b), v in d.items()]  # tuple keys, as JSON can hold them
    data = {"config": asdict(cfg), "machine": machine_line(device), "device_type": device.type, "argv": argv,
            "times": triples(times), "memory": triples(memory), "hooks": triples(hooks), "tok_s": tok_s, "eval": ev,
            "wall_s": round(time.perf_counter() - t_start, 1)}
    atomic.atomic_write_text(out / "benchmark.json", json.dumps(data, indent=1))
    redraw(out)
    print((out / "benchmark.md").read_text(encoding="utf-8") + f"\nwrote {out / 'benchmark.json'}, .md and .png")
    return 0


def redraw(out: Path) -> int:
    """benchmark.md and benchmark.png from <out>/benchmark.json alone."""
    d = json_to_redraw(out / "benchmark.json", "python experiments/benchmark.py")
    cfg = BenchConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in d["config"].items()})
    times, memory, hooks = ({(a, b): v for a, b, v in d[k]} for k in ("times", "memory", "hooks"))
    report = build_report(cfg, d["machine"], d["device_type"], times, memory, hooks, d["tok_s"], d["eval"], d["argv"])
    report += f"\nWall time of this run: {d['wall_s']:.0f} s.\n"
    atomic.atomic_write_text(out / "benchmark.md", report)
    plot(cfg, times, memory, out / "benchmark.png", d["device_type"])
    if is_repo_results(out):  # docs/field.md's cost table and the numbers of docs/benchmark.md's sentences
        from lab.docsync import tables
        tables.sync_glance(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
