"""Breakage experiments (破坏实验): take order information away and watch what breaks.

 1. Word order (实验 1 去掉位置编码): `A verb B ?` -> A. The twin `B verb A ?` has the same
    tokens and the other answer, so only order decides. One tiny TinyLM per cell, {causal,
    bidirectional} x {none, rope, learned, sin, alibi} plus a 1-layer causal NoPE, trained by
    training.train() with the loss on the answer only, tested on fresh twins.
 2. Mask x position on the character LM (实验 2 关掉 causal mask, 再去位置编码): {causal, no
    mask} x {rope (or --lm-pos), none}, same model, batches and budget, scored teacher-forced
    and left to right (each character from its past only, as in generation).

docs/breakage.md says what the columns mean and what they show.

    python experiments/breakage_test.py            # the full run: results/breakage.{md,json,png}
    python experiments/breakage_test.py --quick    # seconds, a smoke test: runs/quick/breakage/
"""
import argparse
import json
import random
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import sys as _sys
from pathlib import Path as _Path
_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))  # run as python experiments/NAME.py: the repository's modules

import torch
import torch.nn.functional as F

from lab import cli
from lab import plots
import schemes
import tiny_lm
from lab import atomic
from lab import corpora
from lab import devices
from lab import lm_eval
from lab.options import make_config, make_model
from tiny_lm import TinyLM
from lab.cli import fail
from lab.eval_common import check_redraw, check_writable, corpus_mismatch, custom_out, is_repo_results, json_to_redraw
from lab.training import train
from lab.row_names import canonical, split_names
from lab.variants import TrainConfig, causal_only, run_dirs, scheme_config, schemes_of_flags


NAMES = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory", "oscar",
         "peggy", "rupert", "sybil", "trent")
VERBS = ("hit", "saw", "pushed", "called", "helped", "thanked", "followed", "blamed")
QUERY = "?"
IGNORE = -100  # a target TinyLM's loss skips (F.cross_entropy's default ignore_index)


@dataclass
class BreakConfig:
    out: str = str(run_dirs()[1])     # the output folder: results/
    seed: int = 0
    device: str = "auto"
    threads: int = 1                 # torch CPU threads; 0 = torch's default
    # 1. word order
    wo_names: int = 12
    wo_verbs: int = 6
    wo_heldout_rings: int = 1        # each ring holds out N unordered name pairs, every name in 2 of them
    wo_schemes: tuple = field(default_factory=lambda: tuple(tiny_lm.SCHEMES))  # every registered scheme
    wo_n_layer: int = 2
    wo_n_head: int = 4
    wo_n_embd: int = 32
    wo_steps: int = 1000
    wo_batch: int = 64
    wo_lr: float = 3e-3
    wo_test_pairs: int = 1000        # swapped twins, so 2x this many test sentences
    wo_seeds: int = 3                # seeds seed, seed+1, ...: each its own held-out pairs, init and test set
    # 2. character LM 2x2: the model, and train_compare's recipe (its seed is --seed)
    lm_pos: str = "rope"
    lm_model: dict = field(default_factory=lambda: {"n_layer": 3, "n_head": 4, "n_embd": 96})
    lm_train: TrainConfig = field(default_factory=lambda: TrainConfig(
        seq_len=128, batch_size=16, steps=1000, lr=3e-3, warmup=50, eval_every=100, eval_windows=32))
    lm_train_chars: int = 0          # 0 = the whole training text
    lm_ltr_chars: int = 2048         # validation characters scored left to right
    lm_sample_chars: int = 200
    lm_temperature: float = 0.8
    corpus: str = None
    quick: bool = False


# --quick: seconds, for tests. Not a result.
QUICK = {"out": str(run_dirs(quick=True)[0] / "breakage"), "wo_steps": 40, "wo_test_pairs": 100, "wo_seeds": 1,
         "lm_model": {"n_layer": 1, "n_head": 2, "n_embd": 16},
         "lm_train": TrainConfig(seq_len=32, batch_size=4, steps=12, lr=3e-3, warmup=2, eval_every=6, eval_windows=4),
         "lm_train_chars": 50_000, "lm_ltr_chars": 64, "lm_sample_chars": 40}


def _f(v, nd=3):
    return "-" if v is None else f"{v:.{nd}f}"


def _mean(vals):
    vals = [v for v in vals if v is not None]
    return sum(vals) / len(vals) if vals else None


# ----------------------------------------------------------------------------- 1. word-order task

@dataclass
class WordOrderTask:
    """Vocabulary and the split of name pairs. Token ids: names, then verbs, then "?"."""
    names: tuple
    verbs: tuple
    heldout: frozenset = field(default_factory=frozenset)  # unordered pairs (frozenset of 2 names)

    @property
    def vocab(self) -> tuple:
        return self.names + self.verbs + (QUERY,)

    def encode(self, agent: str, verb: str, patient: str) -> list:
        """`agent verb patient ?` -> 4 token ids; the answer is the agent."""
        stoi = {w: i for i, w in enumerate(self.vocab)}
        return [stoi[agent], stoi[verb], stoi[patient], stoi[QUERY]]

    def decode(self, ids) -> str:
        return " ".join(self.vocab[int(i)] for i in ids)


def make_task(n_names: int = 12, n_verbs: int = 6, heldout_rings: int = 1, seed: int = 0) -> WordOrderTask:
    """Pick names and verbs; ring k holds out the pairs {perm[i], perm[i+k mod n]}, so each name
    loses exactly 2 partners per ring and stays the agent of equally many training sentences."""
    if not 3 <= n_names <= len(NAMES) or not 1 <= n_verbs <= len(VERBS):
        raise ValueError(f"need 3..{len(NAMES)} names and 1..{len(VERBS)} verbs, got {n_names} and {n_verbs}")
    if not 0 <= heldout_rings <= (n_names - 2) // 2:
        raise ValueError(f"with {n_names} names at most {(n_names - 2) // 2} held-out rings leave every name "
                         f"a training partner; got {heldout_rings}")
    names, verbs = NAMES[:n_names], VERBS[:n_verbs]
    perm = list(names)
    random.Random(seed).shuffle(perm)
    held = {frozenset((perm[i], perm[(i + k) % n_names])) for k in range(1, heldout_rings + 1) for i in range(n_names)}
    return WordOrderTask(names, verbs, frozenset(held))


def training_set(task: WordOrderTask):
    """Every training sentence once: x (N, 4) token ids, y (N,) the agent's id.
    Closed under swapping the names, so each name is the answer equally often."""
    x = torch.tensor([task.encode(a, v, b) for a in task.names for b in task.names
                      if a != b and frozenset((a, b)) not in task.heldout for v in task.verbs])  # (N, 4)
    return x, x[:, 0].clone()


def make_twins(task: WordOrderTask, n_pairs: int, seed: int):
    """n_pairs swapped twins from their own seed: rows 2i and 2i+1 are `A v B ?` and `B v A ?`.
    Even pairs i use a held-out name pair (never seen in training in either order) when
    there is one, odd ones a training pair. Returns x (2n, 4), y (2n,), unseen (2n,) bool."""
    rng = random.Random(seed)
    seen = sorted(sorted(p) for p in ({frozenset((a, b)) for a in task.names for b in task.names if a != b}
                                      - task.heldout))
    unseen = sorted(sorted(p) for p in task.heldout)
    rows, ans, flag = [], [], []
    for i in range(n_pairs):
        use_unseen = bool(unseen) and i % 2 == 0
        a, b = rng.choice(unseen if use_unseen else seen)
        if rng.random() < 0.5:
            a, b = b, a
        v = rng.choice(task.verbs)
        for agent, patient in ((a, b), (b, a)):
            rows.append(task.encode(agent, v, patient))
            ans.append(rows[-1][0])
            flag.append(use_unseen)
    return torch.tensor(rows), torch.tensor(ans), torch.tensor(flag)


def answer_batches(x: torch.Tensor, y: torch.Tensor, batch_size: int):
    """Batches for training.train(): batch_size training sentences drawn with replacement.
    The target is IGNORE except at "?", where it is the agent: the loss is the answer's alone."""
    targets = torch.full_like(x, IGNORE)   # (N, 4)
    targets[:, -1] = y

    def batch(step: int, gen: torch.Generator):
        idx = torch.randint(0, x.shape[0], (batch_size,), generator=gen)
        return x[idx], targets[idx]       # (B, 4), (B, 4)
    return batch


def word_order_train_config(cfg: BreakConfig, seed: int) -> TrainConfig:
    """train_compare's recipe on 4-token sentences; train_loss is the mean of the last 10% of steps."""
    return TrainConfig(seq_len=4, batch_size=cfg.wo_batch, steps=cfg.wo_steps, lr=cfg.wo_lr,
                       warmup=max(1, cfg.wo_steps // 20), eval_every=max(1, cfg.wo_steps // 10), seed=seed)


@torch.no_grad()
def evaluate_twins(model: TinyLM, x: torch.Tensor, y: torch.Tensor, unseen: torch.Tensor, task: WordOrderTask,
                   device) -> dict:
    """Accuracy at "?" and how alike the twins' outputs are. acc: is the agent the one of the
    sentence's two names with the larger logit; acc_any_name: the argmax over all names."""
    model.to(device).eval()
    logits = model(x.to(device)).logits[:, -1, :].float().cpu()    # (2n, 4) -> (2n, 4, V) -> "?" (2n, V)
    a, b = x[:, 0], x[:, 2]                                 # the two names of each sentence
    la, lb = logits.gather(1, a[:, None])[:, 0], logits.gather(1, b[:, None])[:, 0]
    # the two-way choice; an exact tie goes to the smaller id, whatever the order
    pred2 = torch.where(la > lb, a, torch.where(lb > la, b, torch.minimum(a, b)))  # (2n,)
    pred_any = logits[:, :len(task.names)].argmax(dim=-1)   # (2n,) over all names: their ids come first
    correct = (pred2 == y).float()
    return {"acc": correct.mean().item(), "n_test": int(y.numel()),
            "acc_seen_pairs": correct[~unseen].mean().item() if (~unseen).any() else None,
            "acc_unseen_pairs": correct[unseen].mean().item() if unseen.any() else None,
            "acc_any_name": (pred_any == y).float().mean().item(), "n_unseen": int(unseen.sum()),
            "twins_same_prediction": (pred2[0::2] == pred2[1::2]).float().mean().item(),
            "twins_max_logit_diff": (logits[0::2] - logits[1::2]).abs().max().item()}


def left_out(cfg: BreakConfig) -> list:
    """One line per cell left out, stated in the report: a scheme with no bidirectional form (causal_only)."""
    return [f"{mask} / {pos}: left out, the scheme is causal only (it has no bidirectional form)"
            for mask, poss in (("bidirectional", cfg.wo_schemes), ("no mask", (cfg.lm_pos,))) for pos in poss
            if causal_only(pos)]


def word_order_cells(cfg: BreakConfig):
    """(label, GPTConfig overrides) for every cell, in report order; pos as named, options included (kerple{p=2})."""
    cells = [(f"{mask} / {pos}", {"pos": pos, "causal": mask == "causal", "n_layer": cfg.wo_n_layer})
             for mask in ("causal", "bidirectional") for pos in cfg.wo_schemes
             if mask == "causal" or not causal_only(pos)]
    if "none" in cfg.wo_schemes and cfg.wo_n_layer > 1:
        cells.append(("causal / none, 1 layer", {"pos": "none", "causal": True, "n_layer": 1}))
    return cells


def run_word_order(cfg: BreakConfig, device) -> dict:
    """Train and test every cell for seeds cfg.seed .. cfg.seed + wo_seeds - 1. Each seed picks
    its own held-out name pairs, initialisation, batch order and test set (seed + 1000003)."""
    runs = []
    for seed in range(cfg.seed, cfg.seed + cfg.wo_seeds):
        task = make_task(cfg.wo_names, cfg.wo_verbs, cfg.wo_heldout_rings, seed)
        x_tr, y_tr = training_set(task)
        test_seed = seed + 1_000_003
        x_te, y_te, unseen = make_twins(task, cfg.wo_test_pairs, test_seed)
        print(f"word order, seed {seed}: {x_tr.shape[0]} training sentences, {len(task.heldout)} held-out name "
              f"pairs; {x_te.shape[0]} test sentences ({int(unseen.sum())} on unseen pairs) from seed {test_seed}")
        rows = []
        for label, over in word_order_cells(cfg):
            t0 = time.perf_counter()
            torch.manual_seed(seed)
            model = make_model(make_config(vocab_size=len(task.vocab), n_head=cfg.wo_n_head, n_embd=cfg.wo_n_embd,
                                     max_len=8, **{**over, **scheme_config(over["pos"])}))
            hist = train(model, None, None, word_order_train_config(cfg, seed), desc=f"seed {seed} {label}",
                         device=device, batches=answer_batches(x_tr, y_tr, cfg.wo_batch))
            ev = evaluate_twins(model, x_te, y_te, unseen, task, device)
            ev.update(cell=label, **over, train_loss=hist["train_loss"][-1], wall_s=round(time.perf_counter() - t0, 1))
            rows.append(ev)
            print(f"  {label:24s} acc {ev['acc']:.3f} (unseen pairs {_f(ev['acc_unseen_pairs'])})  same "
                  f"prediction for twins {ev['twins_same_prediction']:.3f}  {ev['wall_s']:.0f} s")
        runs.append({"seed": seed, "test_seed": test_seed, "heldout_pairs": sorted(sorted(p) for p in task.heldout),
                     "example": task.decode(x_te[0]) + f" -> {task.vocab[int(y_te[0])]}",
                     "twin": task.decode(x_te[1]) + f" -> {task.vocab[int(y_te[1])]}", "cells": rows})
    summary = []  # per cell, over the seeds: the means, the largest twin difference, the summed time
    for per in zip(*(r["cells"] for r in runs)):  # one cell's row from every seed
        mean = {k: _mean([c[k] for c in per]) for k in ("acc", "acc_seen_pairs", "acc_unseen_pairs",
                                                        "acc_any_name", "twins_same_prediction", "train_loss")}
        summary.append({k: per[0][k] for k in ("cell", "pos", "causal", "n_layer", "n_test", "n_unseen")} | mean | {
            "acc_unseen_per_seed": [c["acc_unseen_pairs"] for c in per],
            "twins_max_logit_diff": max(c["twins_max_logit_diff"] for c in per),
            "wall_s": round(sum(c["wall_s"] for c in per), 1)})
    return {"train_config": asdict(word_order_train_config(cfg, cfg.seed)), "names": list(task.names),
            "verbs": list(task.verbs), "n_train_sentences": int(x_tr.shape[0]), "n_heldout_pairs": len(task.heldout),
            "seeds": [r["seed"] for r in runs], "test_seeds": [r["test_seed"] for r in runs],
            "n_test": summary[0]["n_test"], "n_test_on_unseen_pairs": summary[0]["n_unseen"],
            "runs": runs, "cells": summary}


# ----------------------------------------------------------------------------- 2. character LM, mask x position

@torch.no_grad()
def sample_left_to_right(model: TinyLM, prompt: torch.Tensor, n_new: int, ctx: int, temperature: float = 1.0,
                         generator: torch.Generator = None) -> torch.Tensor:
    """Append n_new sampled tokens to prompt (T,): a full forward over the last ctx tokens
    per step, sample from the last position's logits. Works with or without the causal mask
    (for a causal model it equals generate(use_cache=False) with the same generator)."""
    device = next(model.parameters()).device
    model.eval()
    idx = prompt[None].to(device)                                 # (1, T)
    for _ in range(n_new):
        logits = model(idx[:, -ctx:]).logits[:, -1, :].float()          # (1, V)
        nxt = torch.multinomial(F.softmax(logits / temperature, dim=-1), 1, generator=generator)  # (1, 1)
        idx = torch.cat((idx, nxt.to(idx.device)), dim=1)        # (1, T+1)
    return idx[0].cpu()


def run_char_lm(cfg: BreakConfig, device, corpus: tuple) -> dict:
    train_text, val_text, vocab = corpus  # corpora.load_corpus's, loaded by main before any model trains
    if cfg.lm_train_chars:
        train_text = train_text[:cfg.lm_train_chars]
    tok = corpora.CharTokenizer(vocab)
    train_ids, val_ids = tok.encode(train_text), tok.encode(val_text)
    tc = replace(cfg.lm_train, seed=cfg.seed)
    prompt = val_ids[:min(32, val_ids.numel() // 2)]
    print(f"char LM: {len(train_text):,} training / {len(val_text):,} validation characters, vocabulary "
          f"{len(vocab)}; {tc.steps} steps of {tc.batch_size} x {tc.seq_len} per model")
    rows = []
    for causal in (True, False):
        for pos in (p for p in (cfg.lm_pos, "none") if causal or not causal_only(p)):
            label = f"{'causal' if causal else 'no mask'} / {pos}"
            t0 = time.perf_counter()
            torch.manual_seed(cfg.seed)
            model = make_model(make_config(vocab_size=len(vocab), **cfg.lm_model, **scheme_config(pos), causal=causal,
                                     max_len=max(512, tc.seq_len)))
            hist = train(model, train_ids, val_ids, tc, desc=label, device=device)
            ltr = lm_eval.left_to_right_loss(model, val_ids, tc.seq_len, cfg.lm_ltr_chars)
            gen = torch.Generator(device=device).manual_seed(cfg.seed)
            out = sample_left_to_right(model, prompt, cfg.lm_sample_chars, tc.seq_len, cfg.lm_temperature, gen)
            row = {"cell": label, "pos": pos, "causal": causal, "train_loss": hist["train_loss"][-1],
                   "val_loss_teacher_forced": hist["val_loss"][-1], "val_loss_left_to_right": ltr,
                   "history": hist, "prompt": tok.decode(prompt), "sample": tok.decode(out[prompt.numel():]),
                   "wall_s": round(time.perf_counter() - t0, 1)}
            rows.append(row)
            print(f"  {label:20s} train {row['train_loss']:.3f}  val: teacher-forced "
                  f"{row['val_loss_teacher_forced']:.3f}, left to right {ltr:.3f} nats/char  {row['wall_s']:.0f} s")
    return {"train_config": asdict(tc), "model": cfg.lm_model, "n_train_chars": len(train_text),
            "n_val_chars": len(val_text), "vocab_size": len(vocab),
            "corpus": corpora.corpus_fingerprint(train_text + val_text), "cells": rows}


# ----------------------------------------------------------------------------- report

def make_plot(res: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    wo, lm = res["word_order"], res["char_lm"]["cells"]
    a1.axhline(0.5, color="k", ls="--", lw=1, label="chance (order-blind)", gid="ref")  # a reference line
    plots.grouped_bars(a1, wo["cells"], {"seen name pairs": "acc_seen_pairs", "unseen name pairs": "acc_unseen_pairs"},
          "test accuracy: who is the agent?",
          f"1. Word order 'A verb B ?' -> A, mean over seeds {', '.join(map(str, wo['seeds']))}", 1.25,
          loc="upper center", ncol=3)  # above the bars, which reach 1.0
    plots.grouped_bars(a2, lm, {"train": "train_loss", "val, teacher-forced": "val_loss_teacher_forced",
                   "val, left to right": "val_loss_left_to_right"}, "loss (nats/char)",
          "2. Char LM: causal mask x position",
          1.3 * max(c["val_loss_left_to_right"] for c in lm), loc="upper left", ncol=2)  # room for the legend
    fig.tight_layout()
    plots.save(fig, path)  # checks lines and texts, writes atomically


def make_markdown(res: dict) -> str:
    """Tables and settings only; docs/breakage.md says what the columns mean and what they show."""
    wo, lm = res["word_order"], res["char_lm"]
    L = ["# Breakage experiments (破坏实验)\n",
         f"Written by `{res['command']}` in {res['wall_s']:.0f} s on {res['device']} (torch {res['torch']}). "
         "Columns and findings: docs/breakage.md. Numbers: breakage.json.\n",
         *[f"- {line}\n" for line in res.get("left_out", [])],
         "## 1. Word order: `A verb B ?` -> A\n",
         f"Example `{wo['runs'][0]['example']}`, twin `{wo['runs'][0]['twin']}`. Means over seeds "
         f"{', '.join(map(str, wo['seeds']))}.\n",
         "| cell (mask / position) | layers | acc | acc, seen pairs | acc, unseen pairs (per seed) | any name | "
         "twins with the same prediction | max abs logit diff between twins | final train loss | wall s |",
         "|---|---|---|---|---|---|---|---|---|---|"]
    for c in wo["cells"]:
        per = " / ".join(_f(v) for v in c["acc_unseen_per_seed"])
        L.append(f"| {c['cell']} | {c['n_layer']} | {_f(c['acc'])} | {_f(c['acc_seen_pairs'])} | "
                 f"{_f(c['acc_unseen_pairs'])} ({per}) | {_f(c['acc_any_name'])} | {_f(c['twins_same_prediction'])} | "
                 f"{c['twins_max_logit_diff']:.1e} | {_f(c['train_loss'])} | {c['wall_s']:.0f} |")
    L += ["", "## 2. Character LM: causal mask x position (loss in nats/char)\n",
          "| mask / position | train loss | val loss, teacher-forced | val loss, left to right | wall s |",
          "|---|---|---|---|---|"]
    for c in lm["cells"]:
        L.append(f"| {c['cell']} | {_f(c['train_loss'])} | {_f(c['val_loss_teacher_forced'])} | "
                 f"{_f(c['val_loss_left_to_right'])} | {c['wall_s']:.0f} |")
    L.append(f"\nSamples, left to right from the prompt {json.dumps(lm['cells'][0]['prompt'])}:\n")
    for c in lm["cells"]:
        L.append(f"**{c['cell']}**\n\n```\n{c['sample']}\n```\n")
    settings = {"config": res["config"], "word_order": {k: v for k, v in wo.items() if k not in ("runs", "cells")},
                "char_lm": {k: v for k, v in lm.items() if k != "cells"}}
    L += ["## Settings\n", "```\n" + json.dumps(settings, indent=1) + "\n```\n"]
    return "\n".join(L)


# ----------------------------------------------------------------------------- main

def parse_args(argv=None) -> BreakConfig:
    """BreakConfig(), then QUICK with --quick, then every flag that was given; a bad value: one line, exit 2."""
    schemes.load_argv(argv)  # --scheme-file first: its scheme is a name like the others
    d = BreakConfig()
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    schemes.file_flag(p)
    p.add_argument("--out", help="folder for breakage.md, breakage.json, breakage.png "
                                 "(default results/, or runs/quick/breakage/ with --quick)")
    for flag, typ, text in (
            ("seed", cli.SEED, "seed for initialisation, batches and held-out name pairs (test set: seed + 1000003)"),
            ("device", str, "auto (cuda, then mps, then cpu), or a torch device name"),
            ("threads", cli.THREADS, "torch CPU threads (0 = torch's default); the matrices are small"),
            ("wo_names", cli.integer(4, len(NAMES) + 1), f"number of names (4..{len(NAMES)}: one held-out ring)"),
            ("wo_verbs", cli.integer(1, len(VERBS) + 1), f"number of verbs (1..{len(VERBS)})"),
            *((n, cli.integer(1), f"{w} (default {getattr(d, n)}, {QUICK[n]} with --quick)") for n, w in (
                ("wo_steps", "training steps per word-order model"), ("wo_seeds", "word-order seeds, from --seed up"),
                ("wo_test_pairs", "swapped-twin test pairs, 2 sentences each")))):
        p.add_argument("--" + flag.replace("_", "-"), type=typ, help=text)
    p.add_argument("--quick", action="store_true", help="tiny models and a few steps: a smoke test, not a result")
    p.add_argument("--wo-schemes", type=lambda v: tuple(split_names(v)), help="schemes of the word-order task, "
                   f"each causal and bidirectional ({','.join(tiny_lm.SCHEMES)}; options set too: t5{{scale=2.0}})")
    p.add_argument("--lm-steps", type=cli.integer(1), help=f"training steps per char LM (default "
                   f"{d.lm_train.steps}, {QUICK['lm_train'].steps} with --quick)")
    p.add_argument("--lm-pos", type=canonical, help="the scheme of the char-LM 2x2, the other column none (one of "
                   f"{','.join(s for s in tiny_lm.SCHEMES if s != 'none')}, or one with options set)")
    p.add_argument("--corpus", help="UTF-8 text for the char LM (default: data/shakespeare.txt)")
    p.add_argument("--redraw", action="store_true", help="train nothing: redraw breakage.md, .png from --out's JSON")
    a = vars(p.parse_args(argv))
    lm_steps, *_ = a.pop("lm_steps"), a.pop("redraw"), a.pop("scheme_file")  # of lm_train; main reads the rest
    cfg = replace(BreakConfig(**(QUICK if a["quick"] else {})), **{k: v for k, v in a.items() if v is not None})
    cfg = cfg if lm_steps is None else replace(cfg, lm_train=replace(cfg.lm_train, steps=lm_steps))
    if not cfg.wo_schemes or cfg.lm_pos == "none":
        fail("--wo-schemes: no scheme given" if not cfg.wo_schemes else "--lm-pos none: the char-LM 2x2 sets a "
             "scheme beside none; choose another")
    try:  # results/ holds the repository's own schemes only: a --scheme-file's go to runs/custom/breakage
        pos = schemes_of_flags({"--wo-schemes": cfg.wo_schemes, "--lm-pos": (cfg.lm_pos,)})  # options set or not
        mine = any(s in schemes.FILES for s in pos) and not cfg.quick
        cfg = replace(cfg, out=custom_out(a["out"], "breakage")) if mine else cfg
    except ValueError as e:
        fail(str(e))
    if corpus_mismatch(cfg.corpus) and is_repo_results(cfg.out):  # results/ holds the default corpus's runs only
        fail(f"results/ holds the breakage run on the default corpus; pass --out FOLDER for --corpus {cfg.corpus}")
    return cfg


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    cfg = parse_args(argv)
    out = Path(cfg.out)
    if "--redraw" in argv:  # train nothing: the report from breakage.json, checked first
        check_redraw([out / "breakage.json"], cli.command("experiments/breakage_test.py", argv))
        return check_writable(out, "--out") or redraw(out)
    check_writable(out, "--out")  # before any training
    try:  # a bad --device or corpus (a CorpusError is a ValueError): before the first model trains
        device, corpus = devices.pick_device(cfg.device), corpora.load_corpus(cfg.corpus, min_val_chars=2000)
    except ValueError as e:
        fail(str(e))
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    t0 = time.perf_counter()
    for line in left_out(cfg):
        print(line)
    word_order = run_word_order(cfg, device)
    char_lm = run_char_lm(cfg, device, corpus)
    res = {"command": " ".join(["python experiments/breakage_test.py"] + argv), "config": asdict(cfg), "device": str(device),
           "torch": torch.__version__, "wall_s": round(time.perf_counter() - t0, 1), "word_order": word_order,
           "char_lm": char_lm, "left_out": left_out(cfg)}
    atomic.atomic_write_text(out / "breakage.json", json.dumps(res, indent=1))
    redraw(out)
    print(f"wrote {out}/breakage.md, {out}/breakage.json, {out}/breakage.png in {res['wall_s']:.0f} s")
    return 0


def redraw(out: Path) -> int:
    """breakage.md and breakage.png from <out>/breakage.json alone."""
    res = json_to_redraw(out / "breakage.json", "python experiments/breakage_test.py")
    atomic.atomic_write_text(out / "breakage.md", make_markdown(res))
    make_plot(res, out / "breakage.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
