"""RoPE in pictures: rotation, relative positions, long-term decay, wavelengths vs YaRN, what each
scaling does to each pair (here and at Llama 3's scale), attention of a trained model beyond its
training length, and the theta ablation.

    python visualize_rope.py --only 1,2,3,4          # figures that need no checkpoint
    python visualize_rope.py --only 5,6              # needs runs/main/rope*.pt (train_compare.py)
    python visualize_rope.py --quick                 # smoke run: runs/quick checkpoints, writes runs/quick/results
    python visualize_rope.py --out /tmp/fig --ckpt runs/quick/rope.pt --ckpt-dir runs/quick

Figures (PNG in --out: results/, or runs/quick/results with --quick, or <checkpoint folder>/results
when a checkpoint of figure 5 or 6 is not a real run; a figure asked for by --only, or figure 5
with a --ckpt, whose checkpoint is missing is an error, else it is skipped): 1 rope_rotation,
2 rope_relative, 3 rope_decay, 4 rope_wavelengths and rope_pairs (+ rope_pairs.md: pairs kept,
blended, interpolated per scaling), 5 rope_attention, 6 rope_theta_attention (+ a markdown
table). The math is pos_rope.py's; attention weights are recomputed from each layer's input with
attn_common.attn, because the model itself runs the fused kernel, which does not return them.
"""
import argparse
import functools
import json
import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

from lab import cli  # noqa: E402
import pos_rope  # noqa: E402
import schemes  # noqa: E402
import tiny_lm  # noqa: E402
from lab import atomic
from lab import checkpoint_io
from lab import corpora
from attn_common import attn  # noqa: E402
from lab.eval_common import (check_redraw, check_writable, fail, is_repo_results, provenance_of,  # noqa: E402
                         results_for_checkpoints)
from tiny_lm import GPTConfig  # noqa: E402
from lab.variants import TrainConfig, run_dirs  # noqa: E402

THETA_VARIANTS = ("rope_theta10", "rope", "rope_theta1e6")  # checkpoint names from train_compare.py


def save(fig, out: Path, name: str, tight: bool = True) -> None:
    """Write the PNG through plots.save: no two lines of one axes alike, no text outside the figure or on another's."""
    from lab import plots
    out.mkdir(parents=True, exist_ok=True)
    if tight:  # figures with a colorbar spanning several axes set their layout themselves
        fig.tight_layout()
    plots.save(fig, out / name)
    print(f"wrote {out / name}")


# ----------------------------------------------------------------------------- figures 1-4: no model

def fig_rotation(out, d, theta, n_pos):
    """Pair i turns a 2-D vector by theta_i per token: clock hands at different speeds."""
    inv = pos_rope.rope_inv_freq(d, theta).double()
    pairs = [0, d // 8, d // 4, d // 2 - 1]
    fig, axes = plt.subplots(1, len(pairs), figsize=(4 * len(pairs), 4.6))
    cmap = plt.get_cmap("viridis")
    for ax, i in zip(axes, pairs):
        th = inv[i].item()
        ax.add_patch(plt.Circle((0, 0), 1, fill=False, color="0.8"))
        for m in range(n_pos + 1):  # the vector (1, 0) at position m points at angle m theta_i
            ax.annotate("", xy=(math.cos(m * th), math.sin(m * th)), xytext=(0, 0),
                        arrowprops=dict(arrowstyle="-|>", color=cmap(m / n_pos), lw=1.2))
        last = -1.0
        for m in (0, 1, 2, n_pos):  # label a few positions, skipping labels that would overlap
            if m * th - last > 0.25:
                ax.text(1.17 * math.cos(m * th), 1.17 * math.sin(m * th), f"m={m}", fontsize=8,
                        ha="center", va="center")
                last = m * th
        ax.set_xlim(-1.35, 1.35), ax.set_ylim(-1.35, 1.35), ax.set_aspect("equal")
        ax.set_xlabel(f"dim {2 * i}"), ax.set_ylabel(f"dim {2 * i + 1}")
        ax.set_title(f"pair i={i}: θ_i = {th:.2g} rad/token\none turn every {2 * math.pi / th:,.0f} tokens",
                     fontsize=10)
    fig.subplots_adjust(left=0.04, right=0.9, top=0.8, bottom=0.12, wspace=0.3)
    cax = fig.add_axes([0.92, 0.15, 0.012, 0.6])
    fig.colorbar(plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, n_pos)), cax=cax, label="position m")
    fig.suptitle(f"RoPE turns the vector (1, 0) of each dimension pair by m·θ_i, positions 0..{n_pos} "
                 f"(d={d}, base {theta:g}): fast and slow clock hands")
    save(fig, out, "rope_rotation.png", tight=False)


def fig_relative(out, d, theta, radius, query_positions=(0, 1000), seed=0):
    """q_m . k_n against m - n for fixed q, k: the curve is the same wherever the query sits."""
    from lab import plots
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(1, 1, 1, d, generator=g).double(), torch.randn(1, 1, 1, d, generator=g).double()
    delta = torch.arange(-radius, radius + 1)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    curves = []
    for m, style in zip(query_positions, ("-", "--")):
        cq, sq = pos_rope.precompute_freqs(d, 1, theta, offset=m)
        ck, sk = pos_rope.precompute_freqs(d, 2 * radius + 1, theta, offset=m - radius)  # n = m-R .. m+R
        qm = pos_rope.apply_rope(q, cq.double(), sq.double())             # (1, 1, 1, d)
        kn = pos_rope.apply_rope(k.expand(1, 1, 2 * radius + 1, d), ck.double(), sk.double())
        score = (kn @ qm.transpose(-1, -2)).flatten().flip(0)              # index by delta = m - n
        curves.append(score)
        ax.plot(delta, score, style, color=plots.style("rope")["color"] if style == "-" else "k",  # RoPE, then
                lw=2 if style == "-" else 1.2, label=f"query at m = {m}, key at n = m - Δ")  # a trace over it
    diff = (curves[0] - curves[1]).abs().max().item()
    ax.axvline(0, color="0.7", lw=0.8, gid="ref")
    ax.set_xlabel("relative position Δ = m - n")
    ax.set_ylabel("q_m · k_n (rotated)")
    ax.set_title(f"q·k depends only on m - n: curves for m = {query_positions[0]} and {query_positions[1]} "
                 f"overlap (max diff {diff:.1e})\n(random q, k, d={d}; n < 0 is fine for the formula)", fontsize=10)
    ax.legend()
    ax.grid(alpha=0.3)
    save(fig, out, "rope_relative.png")


def fig_decay(out, dims, theta, max_dist=100_000, seed=0):
    """Long-term decay (RoFormer section 3.4.3) for q = k: all ones, and random vectors averaged."""
    g = torch.Generator().manual_seed(seed)
    near = torch.arange(0, 513).double()
    far = torch.arange(1, max_dist + 1).double()
    edges = torch.unique(torch.logspace(0, math.log10(max_dist), 61).long()).tolist()  # log bins [a, b)
    centers = [math.sqrt(a * (b - 1)) for a, b in zip(edges, edges[1:])]

    def bin_mean(y):  # y[Δ - 1] for Δ = 1 .. max_dist -> its mean over each log bin of distances
        return torch.stack([y[a - 1:b - 1].mean() for a, b in zip(edges, edges[1:])])

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    for d in dims:
        inv = pos_rope.rope_inv_freq(d, theta).double()
        # q = k = ones: q_m . k_n = sum_i 2 cos((m-n) theta_i), divided by |q|^2 = d
        line, = ax1.plot(near, torch.cos(near[:, None] * inv).mean(1), lw=1, label=f"d={d}")
        # random q = k: q_m . q_n = sum_i r_i cos(Δ theta_i), r_i = |pair i|^2; mean |.| / |q|^2
        r = torch.randn(64, d // 2, 2, generator=g).double().pow(2).sum(-1)    # (S, d/2)
        r = r / r.sum(1, keepdim=True)
        env = (r @ torch.cos(inv[:, None] * far)).abs().mean(0)                # (S, d/2) @ (d/2, nΔ) -> (nΔ,)
        ax2.plot(centers, bin_mean(env), color=line.get_color(), lw=2,
                 label=f"d={d}: mean |q·k| / |q|², random q = k")
        # RoFormer's bound: (1/(d/2)) sum_j |S_j|, S_j = sum_{i<j} e^{iΔθ_i}; divided by its value at Δ = 0
        bound = torch.exp(1j * far[:, None] * inv).cumsum(1).abs().mean(1) / ((d // 2 + 1) / 2)
        ax2.plot(centers, bin_mean(bound), "--", color=line.get_color(), lw=1.2,
                 label=f"d={d}: RoFormer bound (scaled to 1 at Δ = 0)")
    ax1.set_title("q = k = all ones: q_m·k_n / |q|² = mean over pairs of cos(Δθ_i)", fontsize=10)
    ax1.set_xlabel("relative distance Δ = m - n"), ax1.set_ylabel("q_m·k_n / |q|²")
    ax2.set_xscale("log")
    ax2.set_title("Envelope, averaged over log-spaced distance bins: it decays with distance;\n"
                  "more pairs (larger d) average out to a lower floor", fontsize=10)
    ax2.set_xlabel("relative distance Δ (log)"), ax2.set_ylabel("relative size (1 at Δ = 0)")
    ax2.set_ylim(0, 1.05)
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3), ax.legend(fontsize=8)
    fig.suptitle(f"RoPE long-term decay (base {theta:g})")
    save(fig, out, "rope_decay.png")


def fig_wavelengths(out, d, theta, train_len, factor):
    """Wavelength 2π/θ_i per pair, against the training length, and what YaRN does to each pair."""
    from lab import plots
    inv = pos_rope.rope_inv_freq(d, theta)
    yarn = {"rope_type": "yarn", "factor": float(factor), "original_max_len": train_len}
    inv_y, _ = pos_rope.scaled_inv_freq(d, theta, yarn)
    low, high = pos_rope.yarn_correction_range(d, theta, train_len)
    i = torch.arange(d // 2)
    fig, ax = plt.subplots(figsize=(9, 5))
    spans = [(-0.5, low + 0.5, "tab:green", f"YaRN keeps (extrapolates): i ≤ {low}"),
             (low + 0.5, high - 0.5, "tab:orange", "YaRN blends"),
             (high - 0.5, d / 2 - 0.5, "tab:blue", f"YaRN interpolates (θ/{factor:g}): i ≥ {high}")]
    for a, b, c, label in spans:
        if b > a:
            ax.axvspan(a, b, color=c, alpha=0.12, label=label)
    ax.semilogy(i, 2 * math.pi / inv, ms=4, label="plain RoPE: 2π/θ_i", **plots.style("rope"))
    ax.semilogy(i, 2 * math.pi / inv_y, ms=3, label=f"YaRN s={factor:g}", **plots.style("rope+yarn"))
    ax.axhline(train_len, color="0.3", lw=1.5, label=f"training length {train_len}", gid="ref")
    ax.axhline(factor * train_len, color="0.3", ls=":", lw=1.5, label=f"target length {factor * train_len:g}",
               gid="ref")
    ax.set_xlabel("dimension pair i"), ax.set_ylabel("wavelength in tokens (log)")
    beta = pos_rope.SCALING_DEFAULTS["yarn"]
    ax.set_title(f"Each pair's wavelength vs the training length (d={d}, base {theta:g}); YaRN ramp from "
                 f"{beta['beta_fast']:g} to {beta['beta_slow']:g} turns in {train_len} tokens", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper left")
    save(fig, out, "rope_wavelengths.png")


# Figure 4b: the per-pair question for every scaling, here and at the scale Llama 3's own scaling was
# made for (Llama 3.1's config.json: head dim, original_max_position_embeddings, rope_theta).
LLAMA_SCALE = ("Llama 3", 128, 8192, 500000.0)  # (name, head dim d, training length L0, base)
PAIR_METHODS = {"linear": "linear (PI)", "ntk": "NTK-aware", "yarn": "YaRN", "llama3": "Llama 3"}


def pair_ratios(d, base, train_len, factor):
    """{rope_type: (θ'_i / θ_i per pair, shape (d/2,), logit multiplier)} from pos_rope's own scalings."""
    inv = pos_rope.rope_inv_freq(d, base)
    out = {}
    for kind in PAIR_METHODS:
        sc = {"rope_type": kind, "factor": float(factor), "original_max_len": train_len}
        scaled, att = pos_rope.scaled_inv_freq(d, base, sc)
        out[kind] = (scaled / inv, att ** 2)  # att multiplies cos and sin, so q and k each: q·k by att²
    return out


def classify_pairs(ratio, factor):
    """(kept, blended, interpolated) pair indices: ratio > 0.99, ratio < 1.01/s, in between."""
    kept = ratio > 0.99
    interp = ~kept & (ratio < 1.01 / factor)
    return tuple(torch.nonzero(m).flatten().tolist() for m in (kept, ~kept & ~interp, interp))


def fig_pairs(out, scales, factor):
    """θ'_i / θ_i per pair for linear, NTK, YaRN and Llama 3 at each scale: a PNG and a markdown table."""
    from lab import plots
    s = float(factor)
    fig, axes = plt.subplots(1, len(scales), figsize=(6.5 * len(scales), 4.8), squeeze=False)
    lines = [f"Which RoPE pairs each scaling keeps, blends or interpolates at factor s = {s:g}, per pair i the ratio "
             "θ'_i / θ_i: kept if > 0.99, interpolated (θ_i / s) if < 1.01/s, blended in between. The logit "
             "multiplier is what q·k is multiplied by (YaRN multiplies cos and sin, so q and k each, by "
             "0.1 ln s + 1). Computed by visualize_rope.py from pos_rope.py's functions.", "",
             "| scale | method | kept | blended | interpolated | logit multiplier |", "|---|---|---|---|---|---|"]

    def cell(idx):  # "6 (i=1-6)", "1 (i=0)", or every index if they are not one run
        run = idx == list(range(idx[0], idx[-1] + 1)) if idx else False
        i = f"{idx[0]}-{idx[-1]}" if run and len(idx) > 1 else ", ".join(map(str, idx))
        return f"{len(idx)} (i={i})" if idx else "0"

    for ax, (name, d, L0, base) in zip(axes[0], scales):
        label = f"{name} (d={d}, L0={L0}, base {base:g})"
        for (kind, (ratio, logit)), marker in zip(pair_ratios(d, base, L0, s).items(), "os^D"):
            st = plots.style(f"rope+{kind}")  # the shared rule's colour and dash; markers tell overlaps apart
            ax.plot(range(d // 2), ratio, marker=marker, color=st["color"], ls=st["ls"], ms=4, lw=1.2,
                    label=PAIR_METHODS[kind] + (f" (logits x {logit:.2f})" if logit != 1 else ""))
            lines.append(f"| {label} | {PAIR_METHODS[kind]} | "
                         + " | ".join(cell(idx) for idx in classify_pairs(ratio, s)) + f" | {logit:.3f} |")
        ax.set_yscale("log"), ax.set_ylim(0.8 / s, 1.25)
        ax.set_yticks([1 / s, 1], ["1/s\n(interpolated)", "1\n(kept)"]), ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("dimension pair i (fast → slow)"), ax.set_ylabel("θ'_i / θ_i (log)")
        ax.set_title(label, fontsize=10), ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8, loc="upper right", bbox_to_anchor=(1, 0.9))
    fig.suptitle(f"What each scaling does to each pair's frequency at factor s = {s:g}")
    save(fig, out, "rope_pairs.png")
    atomic.atomic_write_text(out / "rope_pairs.md", "\n".join(lines) + "\n")
    print(f"wrote {out / 'rope_pairs.md'}")


# ----------------------------------------------------------------------------- figures 5-6: trained models

@torch.no_grad()
def attention_maps(model, ids, layers, head=None):
    """{layer: weights (B, H, T, T)} for token ids (B, T); head=int keeps that head only (H = 1)."""
    inputs = {}
    hooks = [model.blocks[l].attn.register_forward_pre_hook(lambda mod, args, l=l: inputs.__setitem__(l, args[0]))
             for l in layers]
    try:
        model(ids)  # only to capture each layer's input x = LN1(residual)
    finally:
        for h in hooks:
            h.remove()
    maps = {}
    for l in layers:  # the layer's own projection + RoPE, then the explicit formula
        a = model.blocks[l].attn
        q, k, v = a.split_heads(inputs[l])  # (B, T, C) -> 3 x (B, H, T, D)
        q, k = model.rope(q, k)
        if head is not None:
            q, k, v = q[:, head:head + 1], k[:, head:head + 1], v[:, head:head + 1]
        maps[l] = attn(q, k, v, causal=a.causal, return_weights=True)[1]  # (B, H, T, T)
    return maps


@functools.lru_cache(maxsize=None)
def val_ids_for(vocab: str) -> torch.Tensor:
    """The default corpus's validation text as ids of this vocabulary, (N,)."""
    _, val_text, _ = corpora.load_corpus()
    return corpora.CharTokenizer(vocab).encode(val_text)


def load(path, make="python train_compare.py"):
    """(model in eval mode, its training length, validation ids, checkpoint dict) for a RoPE checkpoint."""
    model, ck = checkpoint_io.load_checkpoint(path, make_with=f"{make} --variants {path.stem}")
    if model.rope is None:
        raise checkpoint_io.CheckpointError(f"{path} is not a RoPE model (pos={model.cfg.pos!r})")
    train_len = ck.get("extra", {}).get("train_config", {}).get("seq_len", TrainConfig.seq_len)
    return model.eval(), train_len, val_ids_for(ck["vocab"]), ck


def fig_attention(out, ckpt, head, factor, long_len=None, show=256, make="python train_compare.py"):
    """One head of the last layer at the training length and at factor x that, plain and YaRN.
    The maps (block means of at most show x show) go to rope_attention.json, the figure is drawn from it."""
    model, L0, val_ids, ck = load(ckpt, make)
    long_len = long_len if long_len is not None else int(factor * L0)
    last = len(model.blocks) - 1
    yarn = {"rope_type": "yarn", "factor": float(factor), "original_max_len": L0}
    panels = []
    for scaling in (None, yarn):
        model.set_rope_scaling(scaling)
        for T in (L0, long_len):
            w = attention_maps(model, val_ids[:T][None], [last], head)[last][0, 0]  # (T, T)
            pool = max(1, T // show)
            w = F.avg_pool2d(w[None, None], pool)[0, 0] if pool > 1 else w  # (T/pool, T/pool) block means
            panels.append({"yarn": scaling is not None, "length": T, "pool": pool,
                           "weights": [[float(f"{v:.3g}") for v in r] for r in w.tolist()]})
    model.set_rope_scaling(None)
    data = {"checkpoint": ckpt.name, "head": head, "layer": last, "train_len": L0, "factor": factor, "panels": panels,
            "provenance": {Path(ckpt).stem: provenance_of(ck)}}
    atomic.atomic_write_text(out / "rope_attention.json", json.dumps(data))
    draw_attention(out, data)


def draw_attention(out, data):
    """Figure 5 from the data fig_attention stores (rope_attention.json)."""
    fig, axes = plt.subplots(2, 2, figsize=(10, 9.5))
    for ax, p in zip(axes.flat, data["panels"]):
        T, w = p["length"], torch.tensor(p["weights"])
        w = w.masked_fill(w <= 0, float("nan")).numpy()  # the causal zeros stay blank on a log scale
        # (an array, not a tensor: matplotlib's np.array(x, copy=False) warns on a tensor under NumPy 2)
        im = ax.imshow(w, norm=LogNorm(1e-5, 1), cmap="magma", extent=(0, T, T, 0))
        name = f"YaRN s={data['factor']:g} (original {data['train_len']})" if p["yarn"] else "plain RoPE"
        pooled = f"\n{p['pool']}x{p['pool']} block means" if p["pool"] > 1 else ""
        ax.set_title(f"{name}, length {T}{pooled}", fontsize=10)
        ax.set_xlabel("key position j"), ax.set_ylabel("query position i")
    fig.suptitle(f"{data['checkpoint']}: attention of the last layer, head {data['head']}; "
                 f"trained at length {data['train_len']}")
    fig.subplots_adjust(left=0.08, right=0.86, top=0.9, bottom=0.06, hspace=0.3, wspace=0.3)
    fig.colorbar(im, cax=fig.add_axes([0.89, 0.25, 0.015, 0.5]), label="attention weight (log scale)")
    save(fig, out, "rope_attention.png", tight=False)


def theta_ablation(out, ckpt_dir, n_windows, length=None, make="python train_compare.py"):
    """Mean attention distance sum_j w_ij (i - j) per layer/head, for base 10, 1e4, 1e6: measured
    here, stored in rope_theta_attention.json, drawn from it."""
    rows = []
    for p in [ckpt_dir / f"{n}.pt" for n in THETA_VARIANTS]:  # main() checked them (figure_checkpoints)
        model, L0, val_ids, ck = load(p, make)
        T = length if length is not None else L0
        windows = val_ids[: n_windows * T].view(n_windows, T)  # (N, T), consecutive windows
        maps = attention_maps(model, windows, range(len(model.blocks)))
        dist = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).clamp(min=0).float()  # (T, T): i - j
        per_head = [(maps[l] * dist).sum(-1).mean(dim=(0, 2)).tolist() for l in maps]  # per layer, (H,) each
        rows.append({"variant": p.stem, "theta": model.cfg.rope_theta, "distance": per_head,
                     "provenance": provenance_of(ck)})
    data = {"windows": n_windows, "length": T, "rows": sorted(rows, key=lambda r: r["theta"])}
    atomic.atomic_write_text(out / "rope_theta_attention.json", json.dumps(data, indent=1))
    draw_theta(out, data)


def draw_theta(out, data):
    """Figure 6 and its table from the data theta_ablation stores (rope_theta_attention.json)."""
    from lab import plots
    rows, T, n_windows = data["rows"], data["length"], data["windows"]
    n_layer, n_head = len(rows[0]["distance"]), len(rows[0]["distance"][0])
    labels = [f"L{l}H{h}" for l in range(n_layer) for h in range(n_head)]
    uniform = (T - 1) / 4  # causal uniform attention: query i averages i/2 over i = 0 .. T-1
    fig, ax = plt.subplots(figsize=(max(8, 0.6 * len(labels) * len(rows) / 2), 4.8))
    width = 0.8 / len(rows)
    for k, r in enumerate(rows):
        x = torch.arange(len(labels)) + (k - (len(rows) - 1) / 2) * width
        ax.bar(x, [v for layer in r["distance"] for v in layer], width, label=f"θ = {r['theta']:,.0f}",
               color=plots.style(r["variant"])["color"])
    ax.axhline(uniform, color="0.4", ls="--", lw=1, label=f"uniform causal attention ({uniform:.0f})", gid="ref")
    ax.set_xticks(range(len(labels)), labels)
    ax.set_xlabel("layer / head"), ax.set_ylabel("mean attention distance (tokens)")
    ax.set_title(f"Mean attention distance Σ_j w_ij (i - j) per head, {n_windows} validation windows of {T}",
                 fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0)), ax.grid(alpha=0.3, axis="y")
    save(fig, out, "rope_theta_attention.png")
    lines = [f"Mean attention distance (tokens), sum_j w_ij (i - j) averaged over queries and {n_windows} "
             f"validation windows of length {T}; uniform causal attention gives {uniform:.1f}.", "",
             "| layer | head | " + " | ".join(f"theta {r['theta']:,.0f}" for r in rows) + " |",
             "|---|---|" + "---|" * len(rows)]
    for l in range(n_layer):
        for h in range(n_head):
            lines.append(f"| {l} | {h} | " + " | ".join(f"{r['distance'][l][h]:.1f}" for r in rows) + " |")
    atomic.atomic_write_text(out / "rope_theta_attention.md", "\n".join(lines) + "\n")
    print(f"wrote {out / 'rope_theta_attention.md'}")


def parse_args(argv=None):
    schemes.load_argv(argv)  # --scheme-file first: a checkpoint of its scheme then loads like any other
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    schemes.file_flag(p)
    p.add_argument("--only", default=None, help="comma-separated figure numbers to make (default: all; a figure "
                                                "asked for here whose checkpoint is missing is an error, not skipped)")
    p.add_argument("--out", default=None,
                   help="folder for the PNGs and the markdown table (default results/, or runs/quick/results with "
                        "--quick; <checkpoint folder>/results when a checkpoint of figure 5 or 6 is not a real "
                        "run, since results/ holds only real runs, and runs/custom/results when a figure option "
                        "is not its default, since results/ holds the README's figures: an explicit --out results "
                        "is then refused)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: checkpoints from runs/quick (train_compare.py --quick), output under "
                        "runs/quick/results; figures whose checkpoints are missing are skipped")
    p.add_argument("--head-dim", type=int, default=GPTConfig.n_embd // GPTConfig.n_head,
                   help="head dim d for figures 1, 2 and 4 (default: the tiny LM's; rope_pairs also shows "
                        "{}'s d={}, L0={}, base {:g})".format(*LLAMA_SCALE))
    p.add_argument("--theta", type=cli.finite(), default=10000.0, help="RoPE base for figures 1-4")
    p.add_argument("--positions", type=int, default=32, help="figure 1: positions 0..N drawn per pair")
    p.add_argument("--radius", type=int, default=128, help="figure 2: relative positions -R..R")
    p.add_argument("--train-len", type=int, default=TrainConfig.seq_len,
                   help="figure 4: training length (default: train_compare.py's; figures 5 and 6 read it "
                        "from the checkpoint)")
    p.add_argument("--factor", type=cli.finite(), default=16.0, help="scaling factor s: YaRN's in figures 4 and 5, "
                   "every scaling's in rope_pairs (figure 4)")
    p.add_argument("--ckpt", default=None, help="figure 5: RoPE checkpoint (default runs/main/rope.pt, "
                                                "or runs/quick/rope.pt with --quick; given, it must exist)")
    p.add_argument("--head", type=int, default=0, help="figure 5: which head of the last layer")
    p.add_argument("--long-len", type=int, default=None,
                   help="figure 5: the long length (default: factor x training length)")
    p.add_argument("--ckpt-dir", default=None, help=f"figure 6: folder with {', '.join(THETA_VARIANTS)} .pt "
                                                    "(default runs/main, or runs/quick with --quick)")
    p.add_argument("--windows", type=int, default=4, help="figure 6: validation windows averaged")
    p.add_argument("--length", type=int, default=None, help="figure 6: window length (default: training length)")
    p.add_argument("--redraw", action="store_true",
                   help="load no checkpoint: figures 1-4 as always, 5 and 6 from the rope_attention.json and "
                        "rope_theta_attention.json already in --out")
    return p.parse_args(argv)


# Options that change what a figure shows; set to anything but their defaults, the figures go to CUSTOM.
# (Which checkpoints figures 5 and 6 read, --ckpt and --ckpt-dir, is settled by results_for_checkpoints.)
FIGURE_OPTIONS = ("--head-dim", "--theta", "--positions", "--radius", "--train-len", "--factor", "--head",
                  "--long-len", "--windows", "--length")
DEFAULTS = {f: parse_args([]).__dict__[f.lstrip("-").replace("-", "_")] for f in FIGURE_OPTIONS}
CUSTOM = Path("runs/custom/results")


def check_args(args) -> set:
    """The figure numbers of --only; exits with one line on a bad value of any flag."""
    try:
        only = {int(x) for x in (args.only if args.only is not None else "1,2,3,4,5,6").split(",") if x.strip()}
    except ValueError:
        fail(f"--only takes figure numbers 1-6 separated by commas, got {args.only!r}")
    if not only or not only <= set(range(1, 7)):
        fail(f"--only takes figure numbers 1-6 separated by commas, got {args.only!r}")
    positive = {"--positions": args.positions, "--radius": args.radius, "--train-len": args.train_len,
                "--windows": args.windows, "--long-len": args.long_len, "--length": args.length}
    bad = [f"{k} {v}" for k, v in positive.items() if v is not None and v < 1]
    if bad:
        fail(f"{', '.join(bad)}: must be positive")
    if args.head_dim < 2 or args.head_dim % 2 or not args.theta > 0 or not args.factor >= 1 or args.head < 0:
        fail(f"--head-dim must be even and positive, --theta positive, --factor at least 1 and --head non-negative; "
             f"got {args.head_dim}, {args.theta:g}, {args.factor:g}, {args.head}")
    return only


def figure_checkpoints(n: int, args, ckpt: Path, ckpt_dir: Path, make: str) -> dict:
    """{path: checkpoint dict} of what figure n (5 or 6) reads, each loaded and checked; raises
    CheckpointError or CorpusError with a one-line reason when one is missing or unusable."""
    paths = [ckpt] if n == 5 else [ckpt_dir / f"{v}.pt" for v in THETA_VARIANTS]
    missing = [p for p in paths if not p.is_file()]
    if missing:
        which = "rope" if n == 5 else ",".join(p.stem for p in missing)
        raise checkpoint_io.CheckpointError(f"no checkpoint at {', '.join(map(str, missing))}; train it with `{make} "
                                      f"--variants {which}`" + (" or pass another --ckpt" if n == 5 else ""))
    cks = {}
    for p in paths:
        model, L0, val_ids, cks[p] = load(p, make)
        if n == 5 and args.head >= model.cfg.n_head:
            raise checkpoint_io.CheckpointError(f"{p} has {model.cfg.n_head} heads; --head must be below that")
        T = args.length or L0
        if n == 6 and val_ids.numel() < args.windows * T:
            raise corpora.CorpusError(f"validation text ({val_ids.numel()} tokens) is shorter than "
                                      f"{args.windows} windows of {T}; use fewer --windows or a smaller --length")
    return cks


def main(argv=None) -> int:
    args = parse_args(argv)
    only = check_args(args)
    runs, results = run_dirs(quick=args.quick)
    out = Path(args.out or results)
    ckpt, ckpt_dir = Path(args.ckpt or runs / "rope.pt"), Path(args.ckpt_dir or runs)
    make = "python train_compare.py" + (" --quick" if args.quick else "")
    # a figure asked for by --only, or by naming its checkpoints, must be made: a missing checkpoint is an error
    asked = {5: args.only is not None or args.ckpt is not None, 6: args.only is not None or args.ckpt_dir is not None}
    cks, skipped = {}, []
    for n in sorted(only & {5, 6} if not args.redraw else ()):  # every checkpoint checked before any figure
        try:
            cks.update(figure_checkpoints(n, args, ckpt, ckpt_dir, make))
        except (checkpoint_io.CheckpointError, corpora.CorpusError) as e:
            if asked[n]:
                fail(f"figure {n}: {e}")
            skipped.append(f"skip figure {n}: {e}")
            only.discard(n)
    try:
        out, note = results_for_checkpoints(out, args.out is not None, cks, flag="--out")
    except ValueError as e:
        fail(str(e))
    changed = [f for f in FIGURE_OPTIONS if getattr(args, f.lstrip("-").replace("-", "_")) != DEFAULTS[f]]
    if changed and is_repo_results(out):  # results/ shows the default figures the README's captions describe
        if args.out is not None:
            fail(f"{', '.join(changed)} draw other figures than the README's, and results/ holds only those; "
                 f"leave --out out to write under {CUSTOM}/, or pass another --out")
        out, note = CUSTOM, f"note: {', '.join(changed)} set: writing to {CUSTOM}/ instead of results/"
    if note:
        print(note, file=sys.stderr)
    if args.redraw:
        check_redraw([out / "rope_attention.json", out / "rope_theta_attention.json"],
                     cli.command("visualize_rope.py", argv))
    check_writable(out, "--out")
    for line in skipped:  # said once nothing is refused
        print(line)
    torch.manual_seed(0)
    if 1 in only:
        fig_rotation(out, args.head_dim, args.theta, args.positions)
    if 2 in only:
        fig_relative(out, args.head_dim, args.theta, args.radius)
    if 3 in only:
        fig_decay(out, (args.head_dim, 128), args.theta)
    if 4 in only:
        fig_wavelengths(out, args.head_dim, args.theta, args.train_len, args.factor)
        fig_pairs(out, [("this repo", args.head_dim, args.train_len, args.theta), LLAMA_SCALE], args.factor)
    if args.redraw:
        redraw(out, only)
    if 5 in only and not args.redraw:
        fig_attention(out, ckpt, args.head, args.factor, args.long_len, make=make)
    if 6 in only and not args.redraw:
        theta_ablation(out, ckpt_dir, args.windows, args.length, make=make)
    return 0


def redraw(out: Path, only) -> None:
    """Figures 5 and 6 from the JSON files they stored in out (figures 1-4 need no data at all)."""
    for n, name, draw in ((5, "rope_attention.json", draw_attention), (6, "rope_theta_attention.json", draw_theta)):
        if n in only and (out / name).is_file():
            draw(out, json.loads((out / name).read_text(encoding="utf-8")))


if __name__ == "__main__":
    sys.exit(main())
