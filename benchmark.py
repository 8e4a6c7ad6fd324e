"""Speed and memory of the five position schemes, measured (tutorial 4.2 性能对比实验).

For each scheme (none, learned, sin, rope, alibi) and each length T, at batch 1 under
torch.no_grad, median of --repeats runs after --warmup, every repetition going through all
schemes in turn so that a slow moment of the machine hits them all alike:
  * the forward time of the whole tiny LM and of one attention layer (the scheme's
    per-layer position work, then tiny_lm.Attention);
  * the encoding alone (build the table or bias, apply it) against the attention itself;
  * the peak memory of the whole-LM forward. On CUDA: torch.cuda.max_memory_allocated
    above what was allocated before. On CPU every case runs in a fresh subprocess (from a
    clean multiprocessing "forkserver", or "spawn") that reports its peak resident set,
    resource.getrusage's ru_maxrss, minus the same number just before the forward.
Then two ratios, each measured side by side in this process:
  * training tokens/s of each scheme over a reference model with the same blocks and no
    position encoding, whose attention is one F.scaled_dot_product_attention(is_causal=True);
  * ALiBi over RoPE evaluation time: tiny_lm.window_losses on --eval-windows windows of the
    longest length, the call the length-extrapolation tests make.
Writes <out>/benchmark.md and <out>/benchmark.png (each to a temporary file, then renamed)
and prints the tables.

Where this differs from the tutorial's run_benchmark: it times several runs after a
warm-up instead of one cold call, resets the peak-memory counter for every case (the
tutorial never resets it before the first length), and measures memory on CPU too,
where CUDA events and max_memory_allocated do not exist.

    python benchmark.py                         # the full run, a few minutes on 2 cores
    python benchmark.py --quick --out /tmp/b    # tiny sizes in seconds: a smoke test, not a result
"""
import argparse
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm import tqdm

import tiny_lm
from attn_common import attn, attn_sdpa, causal_mask
from pos_alibi import alibi_bias
from pos_rope import apply_rope, precompute_freqs
from pos_sin import sinusoidal_pe
from tiny_lm import GPTConfig, TinyLM

MiB = 2 ** 20


@dataclass
class BenchConfig:
    lengths: tuple = (512, 1024, 2048, 4096)
    schemes: tuple = tiny_lm.SCHEMES
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    vocab_size: int = 78          # the Shakespeare corpus's characters
    repeats: int = 5              # timed forward runs per case; the median is reported
    warmup: int = 1               # untimed runs first (allocator, kernel choice, table growth)
    train_len: int = 256          # training window, as in train_compare.py
    train_batch: int = 16
    train_steps: int = 3          # optimizer steps per timed repetition
    train_repeats: int = 7
    eval_windows: int = 4         # windows of max(lengths) for the ALiBi / RoPE evaluation ratio
    eval_repeats: int = 5
    mem_procs: int = 2            # memory subprocesses at a time (peak RSS is per process)
    memory: bool = True
    device: str = "auto"
    threads: int = 0              # torch intra-op threads; 0 keeps torch's default
    seed: int = 0


QUICK = {"lengths": (32, 64), "n_layer": 2, "n_head": 2, "n_embd": 32, "repeats": 2, "warmup": 1,
         "train_len": 32, "train_batch": 4, "train_steps": 1, "train_repeats": 2, "eval_windows": 2,
         "eval_repeats": 2}


# ----------------------------------------------------------------------------- models

def make_lm(cfg: BenchConfig, scheme: str) -> TinyLM:
    torch.manual_seed(cfg.seed)
    return TinyLM(GPTConfig(vocab_size=cfg.vocab_size, n_layer=cfg.n_layer, n_head=cfg.n_head,
                            n_embd=cfg.n_embd, pos=scheme, max_len=max(max(cfg.lengths), cfg.train_len)))


class RefBlock(nn.Module):
    """tiny_lm.Block with the attention written as one F.scaled_dot_product_attention(is_causal=True)."""

    def __init__(self, C: int, H: int, mlp_ratio: int = 4):
        super().__init__()
        self.H = H
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C, bias=False)
        self.out = nn.Linear(C, C, bias=False)
        self.mlp = nn.Sequential(nn.Linear(C, mlp_ratio * C), nn.GELU(), nn.Linear(mlp_ratio * C, C))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)  # (B, T, 3C) -> 3 x (B, T, C)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
        x = x + self.out(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln2(x))


class RefLM(nn.Module):
    """The throughput reference: TinyLM's layout (tied head), no position encoding at all."""

    def __init__(self, cfg: BenchConfig):
        super().__init__()
        torch.manual_seed(cfg.seed)
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.blocks = nn.ModuleList(RefBlock(cfg.n_embd, cfg.n_head) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight

    def forward(self, idx, targets):
        x = self.tok_emb(idx)  # (B, T, C)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))  # (B, T, V)
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())


# ----------------------------------------------------------------------------- timing helpers

def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device) -> float:
    """Seconds for one call of fn, with the device queue drained before and after."""
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def interleaved(cases: dict, reps: int, warmup: int, device, bar) -> dict:
    """Run every case once per repetition, in a rotating order; return name -> median seconds."""
    names, times = list(cases), {name: [] for name in cases}
    for r in range(warmup + reps):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t = timed(cases[name], device)
            if r >= warmup:
                times[name].append(t)
            bar.update()
    return {name: statistics.median(ts) for name, ts in times.items()}


def max_rss_bytes() -> int:
    """This process's peak resident set so far (ru_maxrss: KiB on Linux, bytes on macOS)."""
    import resource
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024


# ----------------------------------------------------------------------------- measurements

def tinylm_alibi_bias(model: TinyLM, T: int) -> torch.Tensor:
    """The bias a causal TinyLM builds once per forward: (1, H, T, T), -m (i - j), -inf on hidden keys."""
    bias = model.alibi(T, T)[None]
    return bias.masked_fill_(~causal_mask(T, T, device=bias.device), float("-inf"))


def forward_times(cfg: BenchConfig, device, bar) -> dict:
    """(scheme, T) -> {"lm", "layer", "encoding", "attention"} median seconds, batch 1, no_grad."""
    models = {s: make_lm(cfg, s).to(device).eval() for s in cfg.schemes}
    H, C = cfg.n_head, cfg.n_embd
    D = C // H
    out = {}
    for T in cfg.lengths:
        gen = torch.Generator().manual_seed(cfg.seed + T)
        idx = torch.randint(0, cfg.vocab_size, (1, T), generator=gen).to(device)  # (1, T)
        x = torch.randn(1, T, C, generator=gen).to(device)                          # (1, T, C)
        q, k, v = (torch.randn(1, H, T, D, generator=gen).to(device) for _ in range(3))  # (1, H, T, D)
        cases = {}
        for s, m in models.items():
            layer = m.blocks[0].attn
            bias = tinylm_alibi_bias(m, T) if s == "alibi" else None  # (1, H, T, T), for "attention" only
            cases[(s, "lm")] = lambda m=m: m(idx)
            cases[(s, "layer")] = {
                "none": lambda layer=layer: layer(x),
                "learned": lambda layer=layer, m=m: layer(x + m.learned(T)),
                "sin": lambda layer=layer, m=m: layer(x + m.sin(T)),
                "rope": lambda layer=layer, m=m: layer(x, rope=m.rope),
                "alibi": lambda layer=layer, m=m: layer(x, bias=tinylm_alibi_bias(m, T)),
            }[s]
            cases[(s, "attention")] = lambda bias=bias: attn_sdpa(q, k, v, score_bias=bias, causal=True,
                                                                  bias_is_masked=True)
            encoding = {  # build the table or bias for T positions and apply it
                "learned": lambda m=m: x + m.learned(T),
                "sin": lambda: x + sinusoidal_pe(T, C, device=device),
                "rope": lambda: [apply_rope(t, *precompute_freqs(D, T, device=device)) for t in (q, k)],
                "alibi": lambda m=m: tinylm_alibi_bias(m, T),  # added inside the kernel
            }.get(s)
            if encoding is not None:
                cases[(s, "encoding")] = encoding
        with torch.no_grad():
            medians = interleaved(cases, cfg.repeats, cfg.warmup, device, bar)
        for (s, what), sec in medians.items():
            out.setdefault((s, T), {})[what] = sec
    return out


def _peak_rss_child(job: dict) -> dict:
    """Runs in a fresh interpreter: build the model, then one forward; its extra peak RSS in bytes."""
    cfg = BenchConfig(**job["cfg"])
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    model = make_lm(cfg, job["scheme"]).eval()
    T, n = job["T"], job["batch"]
    ids = torch.randint(0, cfg.vocab_size, (n * T + 1,), generator=torch.Generator().manual_seed(cfg.seed))
    with torch.no_grad():  # warm-up at 8 tokens: library code paged in on first use is not the case's memory
        model(ids[:8].view(1, 8))
    before = max_rss_bytes()
    with torch.no_grad():
        if job["kind"] == "eval":
            tiny_lm.window_losses(model, ids, T, n)
        else:
            model(ids[: n * T].view(n, T))
    after = max_rss_bytes()
    return {**job, "extra": after - before, "baseline": before}


def memory_cpu(cfg: BenchConfig, jobs: list, bar) -> dict:
    """One fresh subprocess per job (maxtasksperchild=1): (kind, scheme, T) -> its result dict.

    "forkserver" where the platform has it: a clean server process (started like "spawn", it
    imports this module and torch, and runs nothing) forks one child per job, which saves
    the ~1 s torch import per case. Each child still measures only itself. Else "spawn".
    """
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload([_peak_rss_child.__module__])  # "__main__" when run as a script
    else:
        ctx = mp.get_context("spawn")
    out = {}
    with ctx.Pool(processes=max(1, min(cfg.mem_procs, len(jobs))), maxtasksperchild=1) as pool:
        for r in pool.imap_unordered(_peak_rss_child, [dict(j, cfg=asdict(cfg)) for j in jobs]):
            out[(r["kind"], r["scheme"], r["T"])] = r
            bar.update()
    return out


def memory_cuda(cfg: BenchConfig, jobs: list, device, bar) -> dict:
    out = {}
    for j in jobs:
        model = make_lm(cfg, j["scheme"]).to(device).eval()
        T, n = j["T"], j["batch"]
        ids = torch.randint(0, cfg.vocab_size, (n * T + 1,), generator=torch.Generator().manual_seed(cfg.seed))
        x = ids[: n * T].view(n, T).to(device)
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        with torch.no_grad():
            if j["kind"] == "eval":
                tiny_lm.window_losses(model, ids, T, n)
            else:
                model(x)
        torch.cuda.synchronize(device)
        out[(j["kind"], j["scheme"], T)] = {**j, "extra": torch.cuda.max_memory_allocated(device) - before,
                                           "baseline": before}
        del model, x
        torch.cuda.empty_cache()
        bar.update()
    return out


def train_throughput(cfg: BenchConfig, device, bar) -> dict:
    """name -> training tokens/s (forward, backward, clip, AdamW step), reference included."""
    models = {"reference": RefLM(cfg), **{s: make_lm(cfg, s) for s in cfg.schemes}}
    gen = torch.Generator().manual_seed(cfg.seed)
    ids = torch.randint(0, cfg.vocab_size, (cfg.train_batch, cfg.train_len + 1), generator=gen).to(device)
    x, y = ids[:, :-1], ids[:, 1:]  # (B, T) each
    cases = {}
    for name, m in models.items():
        m.to(device).train()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)

        def steps(m=m, opt=opt):
            for _ in range(cfg.train_steps):
                loss = m(x, y)[1]  # (logits, loss[, cache])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
                opt.step()
        cases[name] = steps
    medians = interleaved(cases, cfg.train_repeats, 1, device, bar)
    tokens = cfg.train_steps * cfg.train_batch * cfg.train_len
    return {name: tokens / sec for name, sec in medians.items()}


def eval_ratio(cfg: BenchConfig, device, bar) -> dict:
    """ALiBi and RoPE window_losses at max(lengths), side by side: median seconds of each."""
    T, n = max(cfg.lengths), cfg.eval_windows
    ids = torch.randint(0, cfg.vocab_size, (n * T + 1,), generator=torch.Generator().manual_seed(cfg.seed))
    models = {s: make_lm(cfg, s).to(device) for s in ("rope", "alibi")}
    cases = {s: (lambda m=m: tiny_lm.window_losses(m, ids, T, n)) for s, m in models.items()}
    return interleaved(cases, cfg.eval_repeats, cfg.warmup, device, bar)


def alibi_agreement(cfg: BenchConfig, device) -> float:
    """max |attn_sdpa - attn| for one causal ALiBi layer at max(lengths): the fast path keeps the numbers."""
    T, H, D = max(cfg.lengths), cfg.n_head, cfg.n_embd // cfg.n_head
    gen = torch.Generator().manual_seed(cfg.seed)
    q, k, v = (torch.randn(1, H, T, D, generator=gen).to(device) for _ in range(3))
    bias = alibi_bias(H, T, device=device)  # (H, T, T), -m (i - j)
    masked = bias.masked_fill(~causal_mask(T, T, device=device), float("-inf"))[None]  # as TinyLM passes it
    with torch.no_grad():
        return (attn_sdpa(q, k, v, score_bias=masked, causal=True, bias_is_masked=True)
                - attn(q, k, v, score_bias=bias, causal=True)).abs().max().item()


# ----------------------------------------------------------------------------- report

def machine_line(device) -> str:
    if device.type == "cuda":
        where = f"cuda ({torch.cuda.get_device_name(device)})"
    else:
        where = f"{device.type} ({platform.processor() or platform.machine()})"
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"{where}; {os.cpu_count()} CPUs ({usable} usable by this process); torch {torch.__version__} "
            f"with {torch.get_num_threads()} intra-op threads; Python {platform.python_version()}; "
            f"{platform.system()} {platform.release()}")


def md_table(header: list, rows: list) -> list:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(header))) + "|"]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def build_report(cfg, device, times, memory, tok_s, ev, agree, mem_note, argv) -> str:
    L = cfg.lengths
    ms = lambda sec: f"{sec * 1e3:,.1f}" if sec >= 0.01 else f"{sec * 1e3:.2f}"
    out = ["# Speed and memory of the position schemes", "",
           f"Machine: {machine_line(device)}.",
           f"Model: {cfg.n_layer} layers, {cfg.n_head} heads, {cfg.n_embd} dims, vocabulary {cfg.vocab_size}. "
           f"Forward passes at batch 1 under torch.no_grad, median of {cfg.repeats} runs after {cfg.warmup} "
           f"warm-up, the schemes interleaved within every repetition.",
           f"Command: `{' '.join(['python benchmark.py'] + argv)}`.", ""]
    out += ["## Forward time of the whole tiny LM (ms)", ""]
    out += md_table(["scheme"] + [f"T={T}" for T in L], [[s] + [ms(times[(s, T)]["lm"]) for T in L]
                                                         for s in cfg.schemes])
    out += ["", "## Forward time of one attention layer (ms)", "",
            "The scheme's per-layer position work (input table add for learned/sin, q/k rotation for rope, "
            "masked bias build for alibi), then tiny_lm.Attention: qkv projection, attention, output projection.", ""]
    out += md_table(["scheme"] + [f"T={T}" for T in L], [[s] + [ms(times[(s, T)]["layer"]) for T in L]
                                                         for s in cfg.schemes])
    out += ["", "## The encoding alone against the attention (ms, encoding / attention)", "",
            "Encoding: learned = look up T rows and add them; sin = build the sinusoidal table and add it; "
            "rope = build cos/sin and rotate q and k; alibi = build the (1, H, T, T) bias -m(i-j) with -inf "
            "on the hidden keys, as TinyLM.forward does once per forward (the kernel adds it to the scores, so "
            "that part is in the attention column). Attention: attn_sdpa on "
            "(1, H, T, D) q, k, v, causal, with the ALiBi bias for alibi.", ""]
    rows = []
    for s in cfg.schemes:
        row = [s]
        for T in L:
            t = times[(s, T)]
            enc = t.get("encoding")
            row.append(f"- / {ms(t['attention'])}" if enc is None else
                       f"{ms(enc)} / {ms(t['attention'])} ({100 * enc / (enc + t['attention']):.0f}%)")
        rows.append(row)
    out += md_table(["scheme"] + [f"T={T}" for T in L], rows)
    out += ["", "## Peak memory of the whole-LM forward (MiB above the baseline)", "", mem_note, ""]
    if memory:
        out += md_table(["scheme"] + [f"T={T}" for T in L],
                        [[s] + [f"{memory[('forward', s, T)]['extra'] / MiB:,.1f}" for T in L] for s in cfg.schemes])
    else:
        out += ["Not measured (--no-memory, or no honest peak-memory counter on this device)."]
    Te = max(L)
    ref = tok_s["reference"]
    out += ["", "## Ratios", "",
            "Training throughput ratio vs the SDPA reference (tokens/s of the scheme / of the reference; "
            f"T={cfg.train_len}, batch {cfg.train_batch}, median of {cfg.train_repeats} x {cfg.train_steps} steps): "
            + ", ".join(f"{s} {tok_s[s] / ref:.3f}" for s in cfg.schemes)
            + f". Reference: the same blocks without any position encoding, attention = "
              f"F.scaled_dot_product_attention(is_causal=True), {ref:,.0f} tokens/s.",
            "",
            f"ALiBi / RoPE evaluation time ratio at T={Te} (tiny_lm.window_losses, {cfg.eval_windows} windows, "
            f"median of {cfg.eval_repeats}): {ev['alibi'] / ev['rope']:.3f} "
            f"(alibi {ev['alibi']:.3f} s, rope {ev['rope']:.3f} s).",
            "",
            f"ALiBi fast path (attn_sdpa, query chunks) vs the explicit attn() with -m(i-j) and the causal mask, "
            f"one layer at T={Te}: max |diff| {agree:.1e}."]
    if memory and ("eval", "alibi", Te) in memory:
        out += ["", f"Peak memory of that evaluation ({cfg.eval_windows} windows of {Te}, above the baseline): "
                + ", ".join(f"{s} {memory[('eval', s, Te)]['extra'] / MiB:,.1f} MiB" for s in ("rope", "alibi"))
                + "."]
    return "\n".join(out) + "\n"



def plot(cfg, times, memory, path: Path, device) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.5))
    L = list(cfg.lengths)
    for s in cfg.schemes:
        line, = ax_t.plot(L, [times[(s, T)]["lm"] * 1e3 for T in L], marker="o", label=f"{s} (whole LM)")
        ax_t.plot(L, [times[(s, T)]["layer"] * 1e3 for T in L], ls=":", marker=".", color=line.get_color())
        if memory:
            mib = [memory[("forward", s, T)]["extra"] / MiB for T in L]
            ax_m.plot(L, [m if m > 0 else float("nan") for m in mib], marker="o",  # 0 has no place on a log axis
                      color=line.get_color(), label=s)
    ax_t.set_title("Forward time, batch 1 (dotted: one attention layer)")
    ax_t.set_ylabel("milliseconds (median)")
    where = "max_memory_allocated" if device.type == "cuda" else "ru_maxrss, fresh subprocess"
    ax_m.set_title("Peak memory of the whole-LM forward, batch 1" if memory else "Peak memory: not measured")
    ax_m.set_ylabel(f"MiB above the baseline ({where})")
    mem_positive = memory and any(memory[("forward", s, T)]["extra"] > 0 for s in cfg.schemes for T in L)
    for ax in (ax_t, ax_m):
        ax.set_xscale("log", base=2)
        if ax is ax_t or mem_positive:  # a log axis needs a value > 0 (tiny --quick cases may have none)
            ax.set_yscale("log")
        ax.set_xticks(L, [str(T) for T in L])
        ax.set_xlabel("sequence length T")
        ax.grid(alpha=0.3, which="both")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle(f"Position schemes, {cfg.n_layer}x{cfg.n_head}x{cfg.n_embd} tiny LM on {device.type}")
    fig.tight_layout()
    tiny_lm.atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120))
    plt.close(fig)


# ----------------------------------------------------------------------------- CLI

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    d = BenchConfig()
    p.add_argument("--lengths", default=",".join(map(str, d.lengths)), help="comma-separated sequence lengths")
    p.add_argument("--schemes", default=",".join(d.schemes), help="comma-separated position schemes")
    p.add_argument("--device", default=d.device, help="auto (cuda, then cpu), or a torch device name")
    p.add_argument("--threads", type=int, default=d.threads, help="torch intra-op threads (0: torch's default)")
    p.add_argument("--repeats", type=int, default=d.repeats, help="timed forward runs per case (median)")
    p.add_argument("--warmup", type=int, default=d.warmup, help="untimed runs before the timed ones")
    p.add_argument("--train-repeats", type=int, default=d.train_repeats,
                   help="timed repetitions of the training-throughput comparison (median)")
    p.add_argument("--train-steps", type=int, default=d.train_steps, help="optimizer steps per timed repetition")
    p.add_argument("--eval-windows", type=int, default=d.eval_windows,
                   help="windows of the longest length in the ALiBi / RoPE evaluation ratio")
    p.add_argument("--eval-repeats", type=int, default=d.eval_repeats,
                   help="timed repetitions of the ALiBi / RoPE evaluation (median)")
    p.add_argument("--mem-procs", type=int, default=d.mem_procs,
                   help="CPU memory subprocesses at a time (each case still gets a fresh one)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurements")
    p.add_argument("--out", default="results", help="folder for benchmark.md and benchmark.png")
    p.add_argument("--quick", action="store_true", help="tiny model and lengths: a smoke test, not a result")
    return p.parse_args(argv)


def config_from_args(args) -> BenchConfig:
    cfg = BenchConfig()
    if args.quick:
        cfg = replace(cfg, **QUICK)
    else:
        cfg = replace(cfg, lengths=tuple(int(t) for t in args.lengths.split(",")), repeats=args.repeats,
                      warmup=args.warmup, train_repeats=args.train_repeats, train_steps=args.train_steps,
                      eval_windows=args.eval_windows, eval_repeats=args.eval_repeats)
    return replace(cfg, schemes=tuple(args.schemes.split(",")), device=args.device, threads=args.threads,
                   mem_procs=args.mem_procs, memory=not args.no_memory)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    try:
        cfg = config_from_args(args)
    except ValueError as e:
        print(f"error: --lengths must be comma-separated integers ({e})", file=sys.stderr)
        return 2
    unknown = [s for s in cfg.schemes if s not in tiny_lm.SCHEMES]
    if unknown or not {"rope", "alibi"} <= set(cfg.schemes):
        print(f"error: --schemes must be among {','.join(tiny_lm.SCHEMES)} and include rope and alibi "
              f"(for the evaluation ratio); got {','.join(cfg.schemes)}", file=sys.stderr)
        return 2
    if min(cfg.lengths) < 1 or min(cfg.repeats, cfg.train_repeats, cfg.train_steps, cfg.eval_windows,
                                   cfg.eval_repeats, cfg.mem_procs) < 1 or cfg.warmup < 0:
        print("error: lengths, repeats, steps, windows and --mem-procs must be positive", file=sys.stderr)
        return 2
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    cfg = replace(cfg, threads=torch.get_num_threads())  # subprocesses use the same number
    try:
        device = tiny_lm.pick_device(cfg.device, mps=False)  # memory is measured on cuda or cpu only
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    Te = max(cfg.lengths)
    jobs = [{"kind": "forward", "scheme": s, "T": T, "batch": 1} for s in cfg.schemes for T in cfg.lengths]
    jobs += [{"kind": "eval", "scheme": s, "T": Te, "batch": cfg.eval_windows} for s in ("rope", "alibi")]
    do_memory = cfg.memory and (device.type == "cuda" or (device.type == "cpu" and sys.platform != "win32"))
    n_fwd = sum(4 if s != "none" else 3 for s in cfg.schemes) * len(cfg.lengths) * (cfg.warmup + cfg.repeats)
    total = (n_fwd + (len(cfg.schemes) + 1) * (1 + cfg.train_repeats) + 2 * (cfg.warmup + cfg.eval_repeats)
             + (len(jobs) if do_memory else 0))
    t_start = time.perf_counter()
    print(f"benchmark: {machine_line(device)}", file=sys.stderr)
    with tqdm(total=total, desc="benchmark", unit="run", dynamic_ncols=True, file=sys.stderr) as bar:
        memory, mem_note = {}, ""
        if do_memory:  # first, while nothing else of ours is running
            bar.set_description("memory")
            if device.type == "cuda":
                memory = memory_cuda(cfg, jobs, device, bar)
                mem_note = "torch.cuda.max_memory_allocated during the forward minus memory_allocated before it."
            else:
                memory = memory_cpu(cfg, jobs, bar)
                base = statistics.median(r["baseline"] for r in memory.values()) / MiB
                mem_note = (f"Each case in a fresh subprocess: peak resident set (ru_maxrss) after the forward "
                            f"minus the same before it, i.e. after the interpreter, torch, the model and one "
                            f"8-token warm-up forward (median {base:,.0f} MiB).")
        bar.set_description("forward")
        times = forward_times(cfg, device, bar)
        bar.set_description("training")
        tok_s = train_throughput(cfg, device, bar)
        bar.set_description("evaluation")
        ev = eval_ratio(cfg, device, bar)
    agree = alibi_agreement(cfg, device)
    report = build_report(cfg, device, times, memory, tok_s, ev, agree, mem_note, argv)
    report += f"\nWall time of this run: {time.perf_counter() - t_start:.0f} s.\n"
    tiny_lm.atomic_write_text(out / "benchmark.md", report)
    plot(cfg, times, memory, out / "benchmark.png", device)
    print(report)
    print(f"wrote {out / 'benchmark.md'} and {out / 'benchmark.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
