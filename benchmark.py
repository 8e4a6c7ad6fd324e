"""Speed and memory of the five position schemes, measured (after section 4.2
性能对比实验 of a related article, "从RoPE到ALiBi：手把手带你用PyTorch复现三种主流位置编码"; the
tutorial has no benchmark).

Per scheme and length T, batch 1, torch.no_grad, median of --repeats runs after --warmup,
the schemes interleaved within every repetition so that a slow moment hits them all alike:
  * forward time of the whole tiny LM;
  * peak memory of the whole-LM forward (one plain subprocess per scheme, lengths increasing:
    CUDA max_memory_allocated, CPU peak resident set ru_maxrss, above the baseline), beside the
    bytes the scheme builds for T positions (ALiBi's bias H x T x T, RoPE's cos/sin 2 x T x D/2).
Two ratios, measured side by side in this process: training tokens/s of each scheme over a
reference TinyLM(pos="none") (one F.scaled_dot_product_attention(is_causal=True) per layer);
ALiBi over RoPE time of tiny_lm.window_losses at the longest length. That the fast ALiBi
path keeps the formula's numbers is tests/test_pos_alibi.py's job, not this script's. Writes
<results>/benchmark.md and benchmark.png (atomically) and prints the tables.

Where this differs from that article's run_benchmark: medians after a warm-up instead of one
cold call, the peak-memory counter reset for every case, and memory measured on CPU too.

    python benchmark.py                # the full run, a few minutes on 2 cores: results/
    python benchmark.py --quick        # tiny sizes in seconds, a smoke test: runs/quick/benchmark/
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from tqdm import tqdm

import tiny_lm
from tiny_lm import GPTConfig, TinyLM
from eval_common import check_writable, json_to_redraw
from variants import run_dirs

MiB = 2 ** 20


@dataclass
class BenchConfig:
    lengths: tuple = (512, 1024, 2048, 4096)
    schemes: tuple = tuple(tiny_lm.SCHEMES)  # every scheme registered by import time
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
    torch.manual_seed(cfg.seed)
    return TinyLM(GPTConfig(vocab_size=cfg.vocab_size, n_layer=cfg.n_layer, n_head=cfg.n_head,
                            n_embd=cfg.n_embd, pos=scheme, max_len=max(max(cfg.lengths), cfg.train_len)))


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
    models = {s: make_lm(cfg, s).to(device).eval() for s in cfg.schemes}
    out = {}
    for T in cfg.lengths:
        idx = random_ids(replace(cfg, seed=cfg.seed + T), T).view(1, T).to(device)  # (1, T), its own seed per T
        cases = {s: (lambda m=m: m(idx)) for s, m in models.items()}
        with torch.no_grad():
            out.update({(s, T): sec for s, sec in interleaved(cases, cfg.repeats, cfg.warmup, device, bar).items()})
    return out


# ----------------------------------------------------------------------------- memory

def encoding_bytes(model: TinyLM, scheme: str, T: int) -> int:
    """Bytes of the table or bias the scheme builds for T positions, from the tensors themselves: what its
    input_rows and prepare hooks return, and the cos/sin tables of a scheme that takes RoPE's options."""
    entry, module, x = model.scheme, model.pos_module, torch.zeros(1, T, model.cfg.n_embd)
    with torch.no_grad():
        built = [] if entry.input_rows is None else [entry.input_rows(module, T, 0)]
        built += [] if entry.prepare is None else [entry.prepare(module, x, 0)]
        built += [] if model.rope is None else list(model.rope.cos_sin(T))
    return sum(t.numel() * t.element_size() for t in built)


def scheme_memory(cfg: BenchConfig, scheme: str, device) -> dict:
    """{"forward T": bytes, "eval": bytes (rope, alibi)}: peak memory above the baseline. On CPU
    ru_maxrss is this process's high-water mark: run it in a fresh process, lengths increasing."""
    device = torch.device(device)
    model = make_lm(cfg, scheme).to(device).eval()
    Te = max(cfg.lengths)
    ids = random_ids(cfg, cfg.eval_windows * Te + 1)
    runs = {f"forward {T}": lambda T=T: model(ids[:T].view(1, T).to(device)) for T in sorted(cfg.lengths)}
    if scheme in ("rope", "alibi"):
        runs["eval"] = lambda: tiny_lm.window_losses(model, ids, Te, cfg.eval_windows)
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
    """(scheme, "forward T" | "eval") -> bytes, each scheme in a fresh plain subprocess."""
    code = ("import sys, json, benchmark as b; c = b.BenchConfig(**json.loads(sys.argv[1])); b.torch.set_num_threads"
            "(c.threads); print(json.dumps(b.scheme_memory(c, sys.argv[2], sys.argv[3])))")
    out = {}
    for s in cfg.schemes:
        r = subprocess.run([sys.executable, "-c", code, json.dumps(asdict(cfg)), s, str(device)],
                           cwd=Path(__file__).resolve().parent, capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"memory subprocess for {s} failed:\n{r.stderr[-2000:]}")
        out.update({(s, what): b for what, b in json.loads(r.stdout.splitlines()[-1]).items()})
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
                loss = m(x, y).loss
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
                opt.step()
        cases[name] = steps
    tokens = cfg.train_steps * cfg.train_batch * cfg.train_len
    return {name: tokens / sec for name, sec in interleaved(cases, cfg.train_repeats, 1, device, bar).items()}


def eval_times(cfg: BenchConfig, device, bar) -> dict:
    """ALiBi and RoPE window_losses at max(lengths), side by side: median seconds of each."""
    T, n = max(cfg.lengths), cfg.eval_windows
    ids = random_ids(cfg, n * T + 1)
    models = {s: make_lm(cfg, s).to(device) for s in ("rope", "alibi")}
    cases = {s: (lambda m=m: tiny_lm.window_losses(m, ids, T, n)) for s, m in models.items()}
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


def build_report(cfg, machine: str, device_type: str, times, memory, built, tok_s, ev, argv) -> str:
    ms = lambda sec: f"{sec * 1e3:,.1f}" if sec >= 0.01 else f"{sec * 1e3:.2f}"
    Te, ref = max(cfg.lengths), tok_s["reference"]

    def mem_cell(s, T):
        measured = f"{memory[(s, f'forward {T}')] / MiB:,.1f}" if memory else "-"
        return f"{measured} ({built[(s, T)] / MiB:,.2f})"

    how = ("not measured (--no-memory, or no peak-memory counter on this device)" if not memory else
           "torch.cuda.max_memory_allocated minus memory_allocated before" if device_type == "cuda" else
           "one subprocess per scheme runs the lengths in increasing order; its peak resident set (ru_maxrss) "
           "after each forward minus the same after the model and an 8-token warm-up forward")
    out = ["# Speed and memory of the position schemes", "",
           f"Machine: {machine}.",
           f"Model: {cfg.n_layer} layers, {cfg.n_head} heads, {cfg.n_embd} dims, vocabulary {cfg.vocab_size}. "
           f"Forward passes at batch 1 under torch.no_grad, median of {cfg.repeats} runs after {cfg.warmup} "
           f"warm-up, the schemes interleaved within every repetition.",
           f"Command: `{' '.join(['python benchmark.py'] + argv)}`."]
    out += md_section(cfg, "Forward time of the whole tiny LM (ms)", None, lambda s, T: ms(times[(s, T)]))
    out += md_section(
        cfg, "Peak memory of the whole-LM forward (MiB above the baseline; in brackets, MiB the encoding builds)",
        f"Measured: {how}. Built: the float32 table or bias the scheme makes for T positions, from the "
        "tensors themselves: learned and sin T x C, rope cos and sin 2 x T x D/2, alibi H x T x T.", mem_cell)
    out += ["", "## Ratios", "",
            "Training throughput ratio vs the SDPA reference (tokens/s of the scheme / of the reference; "
            f"T={cfg.train_len}, batch {cfg.train_batch}, median of {cfg.train_repeats} x {cfg.train_steps} steps): "
            + ", ".join(f"{s} {tok_s[s] / ref:.3f}" for s in cfg.schemes)
            + ". Reference: a second TinyLM(pos=\"none\"), whose attention is one "
              f"F.scaled_dot_product_attention(is_causal=True) per layer, {ref:,.0f} tokens/s.",
            "",
            f"ALiBi / RoPE evaluation time ratio at T={Te} (tiny_lm.window_losses, {cfg.eval_windows} windows, "
            f"median of {cfg.eval_repeats}): {ev['alibi'] / ev['rope']:.3f} "
            f"(alibi {ev['alibi']:.3f} s, rope {ev['rope']:.3f} s)."]
    if memory and ("alibi", "eval") in memory:
        out += ["", f"Peak memory of that evaluation ({cfg.eval_windows} windows of {Te}, above the baseline): "
                + ", ".join(f"{s} {memory[(s, 'eval')] / MiB:,.1f} MiB" for s in ("rope", "alibi")) + "."]
    return "\n".join(out) + "\n"


def plot(cfg, times, memory, path: Path, device_type: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import plots

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.5))
    L = list(cfg.lengths)
    for s in cfg.schemes:  # each scheme in its colour of the shared rule (plots.style)
        ax_t.plot(L, [times[(s, T)] * 1e3 for T in L], label=s, **plots.style(s))
        if memory:
            ax_m.plot(L, [memory[(s, f"forward {T}")] / MiB for T in L], label=s, **plots.style(s))
    ax_t.set(title="Forward time of the whole LM, batch 1", ylabel="milliseconds (median)", yscale="log")
    ax_m.set(title="Peak memory of that forward" if memory else "Peak memory: not measured",
             ylabel="MiB above the baseline (" + ("max_memory_allocated)" if device_type == "cuda" else "ru_maxrss)"))
    for ax in (ax_t, ax_m):
        ax.set_xscale("log", base=2)
        ax.set_xticks(L, [str(T) for T in L])
        ax.set_xlabel("sequence length T")
        ax.grid(alpha=0.3, which="both")
        if ax.has_data():
            ax.legend(fontsize=8)
    fig.suptitle(f"Position schemes, {cfg.n_layer}x{cfg.n_head}x{cfg.n_embd} tiny LM on {device_type}")
    fig.tight_layout()
    plots.check_distinct(fig)
    tiny_lm.atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120))
    plt.close(fig)


# ----------------------------------------------------------------------------- CLI

def parse_args(argv=None) -> BenchConfig:
    """BenchConfig(), then QUICK with --quick, then every flag that was given; bad values exit via p.error."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    show = lambda v: ",".join(map(str, v)) if isinstance(v, tuple) else v

    def flag(field: str, text: str, type=int):  # --field-name, None when not given
        quick = f"; with --quick {show(QUICK[field])}" if field in QUICK else ""
        p.add_argument("--" + field.replace("_", "-"), type=type,
                       help=f"{text} (default {show(getattr(BenchConfig, field))}{quick})")
    flag("lengths", "comma-separated sequence lengths", type=lambda v: tuple(int(t) for t in v.split(",")))
    flag("schemes", "comma-separated position schemes", type=lambda v: tuple(v.split(",")))
    flag("repeats", "timed forward runs per case (median)")
    flag("warmup", "untimed runs before the timed ones")
    flag("train_steps", "optimizer steps per timed training repetition")
    flag("train_repeats", "timed repetitions of the training comparison (median)")
    flag("eval_windows", "windows of the longest length in the ALiBi / RoPE evaluation")
    flag("eval_repeats", "timed repetitions of that evaluation (median)")
    flag("device", "auto (cuda, then cpu), or a torch device name", type=str)
    flag("threads", "torch intra-op threads (0: torch's default)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurements")
    p.add_argument("--results", "--out", help="folder for benchmark.md and .png (default results/, "
                                              "or runs/quick/benchmark/ with --quick)")
    p.add_argument("--quick", action="store_true", help="tiny model and lengths: a smoke test, not a result")
    p.add_argument("--redraw", action="store_true", help="measure nothing: rebuild benchmark.md and .png in "
                                                         "--results from its benchmark.json")
    a = p.parse_args(argv)
    given = {f: v for f, v in vars(a).items() if v is not None and f not in ("no_memory", "quick", "redraw")}
    cfg = replace(BenchConfig(**(QUICK if a.quick else {})), **given, memory=not a.no_memory)
    if not set(cfg.schemes) <= set(tiny_lm.SCHEMES) or not {"rope", "alibi"} <= set(cfg.schemes):
        p.error(f"--schemes must be among {','.join(tiny_lm.SCHEMES)} and include rope and alibi "
                f"(for the evaluation ratio); got {','.join(cfg.schemes)}")
    if min(cfg.lengths + (cfg.repeats, cfg.train_repeats, cfg.train_steps, cfg.eval_windows, cfg.eval_repeats)) < 1 \
            or cfg.warmup < 0:
        p.error("lengths, repeats, steps and windows must be positive, --warmup >= 0")
    return cfg


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    cfg = parse_args(argv)
    check_writable(Path(cfg.results), "--results")  # before minutes of measuring
    if "--redraw" in argv:  # measure nothing: the report and the figure from benchmark.json
        return redraw(Path(cfg.results))
    out = Path(cfg.results)
    try:
        device = tiny_lm.pick_device(cfg.device, mps=False)  # memory is measured on cuda or cpu only
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    cfg = replace(cfg, threads=torch.get_num_threads())  # the memory subprocesses use the same number
    do_memory = cfg.memory and device.type in ("cuda", "cpu") and sys.platform != "win32"
    t_start = time.perf_counter()
    print(f"benchmark: {machine_line(device)}", file=sys.stderr)
    with tqdm(desc="memory", unit="run", dynamic_ncols=True, file=sys.stderr) as bar:
        memory = peak_memory(cfg, device, bar) if do_memory else {}  # first, while nothing else of ours runs
        bar.set_description("forward")
        times = forward_times(cfg, device, bar)
        bar.set_description("training")
        tok_s = train_throughput(cfg, device, bar)
        bar.set_description("evaluation")
        ev = eval_times(cfg, device, bar)
    built = {(s, T): encoding_bytes(make_lm(cfg, s), s, T) for s in cfg.schemes for T in cfg.lengths}
    triples = lambda d: [[a, b, v] for (a, b), v in d.items()]  # tuple keys, as JSON can hold them
    data = {"config": asdict(cfg), "machine": machine_line(device), "device_type": device.type, "argv": argv,
            "times": triples(times), "memory": triples(memory), "built": triples(built), "tok_s": tok_s, "eval": ev,
            "wall_s": round(time.perf_counter() - t_start, 1)}
    tiny_lm.atomic_write_text(out / "benchmark.json", json.dumps(data, indent=1))
    redraw(out)
    print((out / "benchmark.md").read_text(encoding="utf-8"))
    print(f"wrote {out / 'benchmark.json'}, .md and .png")
    return 0


def redraw(out: Path) -> int:
    """benchmark.md and benchmark.png from <out>/benchmark.json alone."""
    d = json_to_redraw(out / "benchmark.json", "python benchmark.py")
    cfg = BenchConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in d["config"].items()})
    times, memory, built = ({(a, b): v for a, b, v in d[k]} for k in ("times", "memory", "built"))
    report = build_report(cfg, d["machine"], d["device_type"], times, memory, built, d["tok_s"], d["eval"], d["argv"])
    report += f"\nWall time of this run: {d['wall_s']:.0f} s.\n"
    tiny_lm.atomic_write_text(out / "benchmark.md", report)
    plot(cfg, times, memory, out / "benchmark.png", d["device_type"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
