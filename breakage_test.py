"""Breakage experiments (破坏实验): take order information away and watch what breaks.

One command writes every result to --out (default results/): breakage.md (tables),
breakage.json (the same numbers) and breakage.png (the plot).

 1. Word order, "who did what to whom" (tutorial: 我打你 = 你打我; 实验 1 去掉位置编码).
    Sentences `A verb B ?` with two distinct names; the answer is the agent A. Swapping
    the names keeps the multiset of tokens and flips the answer, so only order decides.
    A tiny TinyLM is trained with the LM loss on the answer token only (the logits at the
    "?"), for {causal, bidirectional} x {none, rope, learned, sin, alibi}, plus a 1-layer
    causal NoPE model. Test: fresh sentences from a separate seed, in swapped twins, half
    of them on name pairs never seen in training (in either order).
    Why bidirectional NoPE must sit at chance: without positions and without a mask every
    layer is permutation-equivariant, f(x[perm]) = f(x)[perm], and "B hit A ?" is "A hit B ?"
    with positions 0 and 2 swapped; the "?" stays at position 3, so its logits are the same
    for both twins and at most one of the two answers can be right. A causal mask breaks
    the symmetry: position 0 sees only itself, position 2 sees three tokens, so from the
    second layer on the last position can tell them apart (Kazemnejad et al. 2023, "The
    Impact of Positional Encoding on Length Generalization in Transformers"). With one
    layer it cannot: its only attention reads the bare token embeddings, a set again.
 2. Mask / position 2x2 on the character LM (实验 2 关掉 causal mask, 再去位置编码):
    {causal, no mask} x {rope (or --lm-pos), none}, same model, batches and budget.
    Teacher-forced validation loss is computed the same way for all four, so the mask-off
    models "see the answer" there. The honest number for a mask-off model is the
    left-to-right loss: feed only the past, read the last position's logits - exactly what
    generation does. tiny_lm.generate() refuses causal=False models, so the sampling loop
    here is our own (full forward each step, last position's logits).
 3. RoPE theta extremes (实验 3): visualize_rope.py writes results/rope_theta_attention.md;
    the report links it.
 4. Train at 256, run at 4096 without scaling (实验 4): extrapolation_test.py writes
    results/extrapolation.json; if it exists, the report gives the first length at which
    RoPE's loss exceeds its loss at the training length by 10 %.

    python breakage_test.py                 # the full run, writes results/breakage.{md,json,png}
    python breakage_test.py --quick --out /tmp/brk   # seconds, a smoke test, not a result
"""
import argparse
import json
import math
import os
import random
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

import tiny_lm
from pos_alibi import alibi_slopes
from tiny_lm import CorpusError, GPTConfig, TinyLM
from train_compare import TrainConfig, lr_at, make_optimizer, train


NAMES = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory", "oscar",
         "peggy", "rupert", "sybil", "trent")
VERBS = ("hit", "saw", "pushed", "called", "helped", "thanked", "followed", "blamed")
QUERY = "?"


@dataclass
class BreakConfig:
    out: str = "results"
    seed: int = 0
    device: str = "auto"
    threads: int = 1                 # torch CPU threads for the character LMs; 0 = torch's default
    # 1. word order
    wo_names: int = 12
    wo_verbs: int = 6
    wo_heldout_rings: int = 1        # each ring holds out N unordered name pairs, every name in 2 of them
    wo_schemes: tuple = ("none", "rope", "learned", "sin", "alibi")
    wo_n_layer: int = 2
    wo_n_head: int = 4
    wo_n_embd: int = 32
    wo_steps: int = 1000
    wo_batch: int = 64
    wo_lr: float = 3e-3
    wo_test_pairs: int = 1000        # swapped twins, so 2x this many test sentences
    wo_seeds: int = 3                # seeds seed, seed+1, ...: each its own held-out pairs, init and test set
    # 2. character LM 2x2
    lm_pos: str = "rope"
    lm_n_layer: int = 3
    lm_n_head: int = 4
    lm_n_embd: int = 96
    lm_seq_len: int = 128
    lm_batch: int = 16
    lm_steps: int = 1000
    lm_lr: float = 3e-3
    lm_warmup: int = 50
    lm_eval_every: int = 100
    lm_eval_windows: int = 32
    lm_train_chars: int = 0          # 0 = the whole training text
    lm_ltr_chars: int = 2048         # validation characters scored left to right
    lm_sample_chars: int = 200
    lm_temperature: float = 0.8
    corpus: str = None
    # 3./4. other scripts' results
    theta_md: str = "results/rope_theta_attention.md"       # relative paths: to the working directory
    extrapolation_json: str = "results/extrapolation.json"
    quick: bool = False


# --quick: seconds, for tests. Not a result.
QUICK = {"wo_steps": 40, "wo_test_pairs": 100, "wo_seeds": 1, "lm_n_layer": 1, "lm_n_head": 2, "lm_n_embd": 16,
         "lm_seq_len": 32, "lm_batch": 4, "lm_steps": 12, "lm_warmup": 2, "lm_eval_every": 6, "lm_eval_windows": 4,
         "lm_train_chars": 50_000, "lm_ltr_chars": 64, "lm_sample_chars": 40}


# ----------------------------------------------------------------------------- helpers


def _f(v, nd=3):
    return "-" if v is None else f"{v:.{nd}f}"


@contextmanager
def _threads(n: int):
    """Temporarily use n torch CPU threads (0 = leave as is)."""
    old = torch.get_num_threads()
    if n > 0:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


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

    def name_ids(self) -> torch.Tensor:
        return torch.arange(len(self.names))


def make_task(n_names: int = 12, n_verbs: int = 6, heldout_rings: int = 1, seed: int = 0) -> WordOrderTask:
    """Pick names and verbs; hold out `heldout_rings` rings of name pairs.

    Ring k holds out {perm[i], perm[i+k]} for every i (indices mod n_names), so each name
    loses exactly 2 partners per ring and stays the agent of equally many training sentences.
    """
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
    rows, ans = [], []
    for a in task.names:
        for b in task.names:
            if a == b or frozenset((a, b)) in task.heldout:
                continue
            for v in task.verbs:
                rows.append(task.encode(a, v, b))
                ans.append(rows[-1][0])
    return torch.tensor(rows), torch.tensor(ans)


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


def train_word_order(model: TinyLM, x: torch.Tensor, y: torch.Tensor, cfg: BreakConfig, seed: int,
                     desc: str, device) -> float:
    """LM loss on the answer token only: cross-entropy of the logits at "?" against the agent.
    Returns the mean training loss of the last 10% of steps."""
    tc = TrainConfig(steps=cfg.wo_steps, lr=cfg.wo_lr, warmup=max(1, cfg.wo_steps // 20), seed=seed)
    opt = make_optimizer(model, tc)
    gen = torch.Generator().manual_seed(seed + 777)
    model.to(device).train()
    x, y = x.to(device), y.to(device)
    tail, tail_n = 0.0, 0
    bar = tqdm(range(tc.steps), desc=desc, unit="step", dynamic_ncols=True, file=sys.stderr, leave=False)
    for step in bar:
        idx = torch.randint(0, x.shape[0], (cfg.wo_batch,), generator=gen).to(device)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, tc)
        logits = model(x[idx]).logits[:, -1, :]  # (B, 4) -> (B, 4, V) -> the "?" position (B, V)
        loss = F.cross_entropy(logits, y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        opt.step()
        if step >= tc.steps - max(1, tc.steps // 10):
            tail, tail_n = tail + loss.item(), tail_n + 1
        if (step + 1) % 100 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    return tail / tail_n


@torch.no_grad()
def evaluate_twins(model: TinyLM, x: torch.Tensor, y: torch.Tensor, unseen: torch.Tensor, task: WordOrderTask,
                   device) -> dict:
    """Accuracy at the "?" and how alike the two twins' outputs are.

    acc: which of the two names in the sentence is the agent (the larger of their two
    logits); chance is exactly 0.5 for an order-blind model, since twins then pick the same
    name. acc_any_name: argmax over every name (an order-blind model can also fall below 0.5
    by naming someone who is not in the sentence)."""
    model.to(device).eval()
    logits = model(x.to(device)).logits[:, -1, :].float().cpu()    # (2n, 4) -> (2n, 4, V) -> "?" (2n, V)
    a, b = x[:, 0], x[:, 2]                                 # the two names of each sentence
    la, lb = logits.gather(1, a[:, None])[:, 0], logits.gather(1, b[:, None])[:, 0]
    # the two-way choice; an exact tie goes to the smaller id, whatever the order
    pred2 = torch.where(la > lb, a, torch.where(lb > la, b, torch.minimum(a, b)))  # (2n,)
    names = task.name_ids()
    pred_any = names[logits[:, names].argmax(dim=-1)]       # (2n,) argmax over all names
    correct = (pred2 == y).float()
    return {"acc": correct.mean().item(), "n_test": int(y.numel()),
            "acc_seen_pairs": correct[~unseen].mean().item() if (~unseen).any() else None,
            "acc_unseen_pairs": correct[unseen].mean().item() if unseen.any() else None,
            "acc_any_name": (pred_any == y).float().mean().item(),
            "n_unseen": int(unseen.sum()),
            # twin i is rows 2i, 2i+1
            "twins_same_prediction": (pred2[0::2] == pred2[1::2]).float().mean().item(),
            "twins_max_logit_diff": (logits[0::2] - logits[1::2]).abs().max().item()}


def word_order_cells(cfg: BreakConfig):
    """(label, GPTConfig overrides) for every cell, in report order."""
    cells = []
    for causal in (True, False):
        for pos in cfg.wo_schemes:
            cells.append((f"{'causal' if causal else 'bidirectional'} / {pos}",
                          {"pos": pos, "causal": causal, "n_layer": cfg.wo_n_layer}))
    if "none" in cfg.wo_schemes and cfg.wo_n_layer > 1:
        cells.append(("causal / none, 1 layer", {"pos": "none", "causal": True, "n_layer": 1}))
    return cells


def run_word_order(cfg: BreakConfig, device) -> dict:
    """Train and test every cell for seeds cfg.seed .. cfg.seed + wo_seeds - 1. Each seed picks
    its own held-out name pairs, initialisation, batch order and test set (seed + 1000003)."""
    runs = []
    # Tiny tensors: extra threads only add overhead, so one thread on CPU.
    with _threads(1 if device.type == "cpu" else 0):
        for seed in range(cfg.seed, cfg.seed + cfg.wo_seeds):
            task = make_task(cfg.wo_names, cfg.wo_verbs, cfg.wo_heldout_rings, seed)
            x_tr, y_tr = training_set(task)
            test_seed = seed + 1_000_003
            x_te, y_te, unseen = make_twins(task, cfg.wo_test_pairs, test_seed)
            print(f"word order, seed {seed}: {len(task.names)} names, {len(task.verbs)} verbs, {x_tr.shape[0]} "
                  f"training sentences, {len(task.heldout)} held-out name pairs; test {x_te.shape[0]} sentences "
                  f"({int(unseen.sum())} on unseen pairs) from seed {test_seed}")
            rows = []
            for label, over in word_order_cells(cfg):
                t0 = time.perf_counter()
                torch.manual_seed(seed)
                model = TinyLM(GPTConfig(vocab_size=len(task.vocab), n_head=cfg.wo_n_head, n_embd=cfg.wo_n_embd,
                                         max_len=8, **over))
                train_loss = train_word_order(model, x_tr, y_tr, cfg, seed, f"seed {seed} {label}", device)
                ev = evaluate_twins(model, x_te, y_te, unseen, task, device)
                ev.update(cell=label, pos=over["pos"], causal=over["causal"], n_layer=over["n_layer"],
                          train_loss=train_loss, wall_s=round(time.perf_counter() - t0, 1))
                rows.append(ev)
                print(f"  {label:24s} acc {ev['acc']:.3f} (unseen pairs {_f(ev['acc_unseen_pairs'])})  twins with "
                      f"the same prediction {ev['twins_same_prediction']:.3f}  max |logit diff| "
                      f"{ev['twins_max_logit_diff']:.1e}  {ev['wall_s']:.0f} s")
            runs.append({"seed": seed, "test_seed": test_seed, "heldout_pairs": sorted(sorted(p) for p in task.heldout),
                         "example": task.decode(x_te[0]) + f" -> {task.vocab[int(y_te[0])]}",
                         "twin": task.decode(x_te[1]) + f" -> {task.vocab[int(y_te[1])]}", "cells": rows})
    summary = []
    for i, (label, over) in enumerate(word_order_cells(cfg)):
        per = [r["cells"][i] for r in runs]

        def mean(k):
            vals = [c[k] for c in per if c[k] is not None]
            return sum(vals) / len(vals) if vals else None
        summary.append({"cell": label, "pos": over["pos"], "causal": over["causal"], "n_layer": over["n_layer"],
                        "n_test": per[0]["n_test"], "n_unseen": per[0]["n_unseen"],
                        **{k: mean(k) for k in ("acc", "acc_seen_pairs", "acc_unseen_pairs", "acc_any_name",
                                                "twins_same_prediction", "train_loss")},
                        "acc_unseen_per_seed": [c["acc_unseen_pairs"] for c in per],
                        "twins_max_logit_diff": max(c["twins_max_logit_diff"] for c in per),
                        "wall_s": round(sum(c["wall_s"] for c in per), 1)})
    return {"names": list(task.names), "verbs": list(task.verbs), "n_train_sentences": int(x_tr.shape[0]),
            "n_heldout_pairs": len(task.heldout), "seeds": [r["seed"] for r in runs], "runs": runs, "cells": summary}


# ----------------------------------------------------------------------------- 2. character LM, mask x position

@torch.no_grad()
def left_to_right_loss(model: TinyLM, ids: torch.Tensor, ctx: int, n_chars: int, batch_size: int = 64) -> float:
    """Honest per-character loss (nats): character p is predicted from ids[p-ctx:p] only, by
    the logits at the last position - what left-to-right generation sees. Scores ids[ctx:ctx+n_chars]."""
    if ids.numel() < ctx + n_chars:
        raise CorpusError(f"left-to-right scoring needs {ctx + n_chars} validation characters, "
                          f"the text has {ids.numel()}")
    device = next(model.parameters()).device
    model.eval()
    total = 0.0
    for s in range(ctx, ctx + n_chars, batch_size):
        ps = range(s, min(s + batch_size, ctx + n_chars))
        x = torch.stack([ids[p - ctx:p] for p in ps]).to(device)   # (b, ctx): only the past
        y = torch.tensor([int(ids[p]) for p in ps], device=device)  # (b,)
        logits = model(x).logits[:, -1, :].float()                        # (b, ctx, V) -> last position (b, V)
        total += F.cross_entropy(logits, y, reduction="sum").item()
    return total / n_chars


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
        if temperature == 0:
            nxt = logits.argmax(dim=-1, keepdim=True)
        else:
            nxt = torch.multinomial(F.softmax(logits / temperature, dim=-1), 1, generator=generator)
        idx = torch.cat((idx, nxt.to(idx.device)), dim=1)        # (1, T+1)
    return idx[0].cpu()


def run_char_lm(cfg: BreakConfig, device) -> dict:
    train_text, val_text, vocab = tiny_lm.load_corpus(cfg.corpus, min_val_chars=2000)
    if cfg.lm_train_chars:
        train_text = train_text[:cfg.lm_train_chars]
    tok = tiny_lm.CharTokenizer(vocab)
    train_ids, val_ids = tok.encode(train_text), tok.encode(val_text)
    tc = TrainConfig(seq_len=cfg.lm_seq_len, batch_size=cfg.lm_batch, steps=cfg.lm_steps, lr=cfg.lm_lr,
                     warmup=cfg.lm_warmup, eval_every=cfg.lm_eval_every, eval_windows=cfg.lm_eval_windows,
                     seed=cfg.seed)
    prompt = val_ids[:min(32, val_ids.numel() // 2)]
    print(f"char LM: {len(train_text):,} training / {len(val_text):,} validation characters, vocabulary "
          f"{len(vocab)}; {tc.steps} steps of {tc.batch_size} x {tc.seq_len} per model")
    rows = []
    for causal in (True, False):
        for pos in (cfg.lm_pos, "none"):
            label = f"{'causal' if causal else 'no mask'} / {pos}"
            t0 = time.perf_counter()
            torch.manual_seed(cfg.seed)
            model = TinyLM(GPTConfig(vocab_size=len(vocab), n_layer=cfg.lm_n_layer, n_head=cfg.lm_n_head,
                                     n_embd=cfg.lm_n_embd, pos=pos, causal=causal, max_len=max(512, tc.seq_len)))
            hist = train(model, train_ids, val_ids, tc, desc=label, device=device)
            ltr = left_to_right_loss(model, val_ids, tc.seq_len, cfg.lm_ltr_chars)
            gen = torch.Generator(device=device).manual_seed(cfg.seed)
            out = sample_left_to_right(model, prompt, cfg.lm_sample_chars, tc.seq_len, cfg.lm_temperature, gen)
            row = {"cell": label, "pos": pos, "causal": causal, "train_loss": hist["train_loss"][-1],
                   "val_loss_teacher_forced": hist["val_loss"][-1], "val_loss_left_to_right": ltr,
                   "history": hist, "prompt": tok.decode(prompt), "sample": tok.decode(out[prompt.numel():]),
                   "wall_s": round(time.perf_counter() - t0, 1)}
            rows.append(row)
            print(f"  {label:20s} train {row['train_loss']:.3f}  val (teacher-forced) "
                  f"{row['val_loss_teacher_forced']:.3f}  val (left to right) {ltr:.3f} nats/char  "
                  f"{row['wall_s']:.0f} s")
    return {"train_config": asdict(tc), "model": {"n_layer": cfg.lm_n_layer, "n_head": cfg.lm_n_head,
                                                  "n_embd": cfg.lm_n_embd},
            "n_train_chars": len(train_text), "n_val_chars": len(val_text), "vocab_size": len(vocab),
            "corpus": tiny_lm.corpus_fingerprint(train_text + val_text), "cells": rows}


# ----------------------------------------------------------------------------- 4. from extrapolation.json

def _rope_from_json(data: dict):
    """Plain RoPE in extrapolation_test.py's JSON: {"meta": {"lengths": [...]}, "rows":
    [{"variant": "rope", "train_len": 256, "ppl_256": ..., ...}, ...], "loss_vs_position":
    {"rope": [...]}}. Returns ({length: loss in nats}, per-position losses or None, train_len);
    KeyError, TypeError or StopIteration if the file has another shape."""
    row = next(r for r in data["rows"] if r["variant"] == "rope")  # exactly "rope", not "rope+yarn"
    series = {int(L): math.log(row[f"ppl_{L}"]) for L in data["meta"]["lengths"] if row.get(f"ppl_{L}")}
    return series, data.get("loss_vs_position", {}).get("rope"), int(row["train_len"])


def extrapolation_summary(path, rise: float = 0.10, bin_size: int = 64) -> dict:
    """Where RoPE's loss first exceeds its value at the training length by `rise` (10 %), from
    extrapolation_test.py's JSON: (a) by evaluation length, the mean loss over windows of
    length L against the mean at L = train_len; (b) by position, if the file has RoPE's
    loss-vs-position curve: bins of bin_size positions against the last bin before train_len."""
    path = Path(path)
    if not path.is_file():
        return {"status": "missing", "path": str(path),
                "message": f"{path} is missing; run extrapolation_test.py first, then this script again"}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return {"status": "unreadable", "path": str(path), "message": f"{path} is not readable JSON ({e})"}
    try:
        s, curve, train_len = _rope_from_json(data)
    except (KeyError, TypeError, ValueError, StopIteration, AttributeError):
        return {"status": "unrecognised", "path": str(path),
                "message": f"{path} has no plain-RoPE row in extrapolation_test.py's layout; rerun that script"}
    if not s and not curve:
        return {"status": "unrecognised", "path": str(path), "message": f"{path} has no RoPE losses; rerun "
                "extrapolation_test.py"}
    out = {"status": "ok", "path": str(path), "train_len": train_len, "rise": rise, "messages": []}
    if s:
        lengths = sorted(s)
        ref_len = train_len if train_len in s else lengths[0]
        first = next((L for L in lengths if L > ref_len and s[L] > s[ref_len] * (1 + rise)), None)
        out.update(reference_length=ref_len, reference_loss=s[ref_len], first_length_over=first,
                   max_length_tested=lengths[-1], loss_by_length={str(L): s[L] for L in lengths})
        out["messages"].append(
            f"by evaluation length: RoPE's mean loss first exceeds {1 + rise:.2f} x its length-{ref_len} value "
            f"({s[ref_len]:.3f} nats) at length {first} ({s[first]:.3f})" if first else
            f"by evaluation length: RoPE's mean loss stays within {1 + rise:.2f} x its length-{ref_len} value "
            f"({s[ref_len]:.3f} nats) up to length {lengths[-1]}")
    if curve and len(curve) >= train_len and train_len >= bin_size:
        bins = [(p, sum(curve[p:p + bin_size]) / len(curve[p:p + bin_size])) for p in range(0, len(curve), bin_size)]
        ref = sum(curve[train_len - bin_size:train_len]) / bin_size
        first = next(((p, v) for p, v in bins if p >= train_len and v > ref * (1 + rise)), None)
        out.update(position_bin=bin_size, position_reference_loss=ref,
                   first_position_over=first[0] if first else None, positions_scored=len(curve))
        out["messages"].append(
            f"by position (mean over {bin_size}-position bins of the {len(curve)}-long windows): the loss first "
            f"exceeds {1 + rise:.2f} x the bin just before position {train_len} ({ref:.3f} nats) in the bin "
            f"starting at position {first[0]} ({first[1]:.3f})" if first else
            f"by position: the loss stays within {1 + rise:.2f} x its value just before position {train_len} "
            f"({ref:.3f} nats) up to position {len(curve)}")
    out["message"] = "; ".join(out["messages"])
    return out


# ----------------------------------------------------------------------------- report

def make_plot(res: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    wo = res["word_order"]["cells"]
    xs = range(len(wo))
    w = 0.38
    a1.bar([x - w / 2 for x in xs], [c["acc_seen_pairs"] or 0 for c in wo], w, label="seen name pairs")
    a1.bar([x + w / 2 for x in xs], [c["acc_unseen_pairs"] or 0 for c in wo], w, label="unseen name pairs")
    for x, c in zip(xs, wo):  # one dot per seed
        a1.plot([x + w / 2] * len(c["acc_unseen_per_seed"]), [v or 0 for v in c["acc_unseen_per_seed"]], "k.", ms=3)
    a1.axhline(0.5, color="k", ls="--", lw=1, label="chance (order-blind)")
    a1.set_xticks(list(xs))
    a1.set_xticklabels([c["cell"].replace("bidirectional", "bidir.").replace(" / ", "\n").replace(", ", "\n")
                        for c in wo], fontsize=8)
    a1.set_ylim(0, 1.05)
    a1.set_ylabel("test accuracy: who is the agent?")
    seeds = res["word_order"]["seeds"]
    a1.set_title(f"1. Word order 'A verb B ?' -> A: {wo[0]['n_test']} test sentences per seed, "
                 f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))} (dots: each seed)", fontsize=10)
    a1.legend(fontsize=8, loc="lower right")

    lm = res["char_lm"]["cells"]
    xs = range(len(lm))
    w = 0.27
    for i, (key, name) in enumerate((("train_loss", "train"), ("val_loss_teacher_forced", "val, teacher-forced"),
                                     ("val_loss_left_to_right", "val, left to right (honest)"))):
        a2.bar([x + (i - 1) * w for x in xs], [c[key] for c in lm], w, label=name)
    a2.set_xticks(list(xs))
    a2.set_xticklabels([c["cell"].replace(" / ", "\n") for c in lm], fontsize=8)
    a2.set_ylabel("loss (nats/char)")
    a2.set_ylim(0, 1.3 * max(c[k] for c in lm for k in ("train_loss", "val_loss_teacher_forced",
                                                         "val_loss_left_to_right")))
    a2.set_title("2. Char LM: causal mask x position", fontsize=10)
    a2.legend(fontsize=8, loc="upper left", ncol=2)
    fig.tight_layout()
    tiny_lm.atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)


def make_markdown(res: dict, out: Path) -> str:
    cfg, wo, lm, ex = res["config"], res["word_order"], res["char_lm"], res["extrapolation"]
    L = []
    L.append("# Breakage experiments (破坏实验)\n")
    L.append(f"Written by `{res['command']}` in {res['wall_s']:.0f} s on {res['device']} "
             f"(torch {res['torch']}), seed {cfg['seed']}. Numbers: breakage.json; plot: breakage.png."
             + (" **--quick run: a smoke test, not a result.**" if cfg["quick"] else "") + "\n")
    L.append("## 1. Word order: who did what to whom\n")
    r0 = wo["runs"][0]
    n_sent = len(wo["names"]) * (len(wo["names"]) - 1) * len(wo["verbs"])
    L.append(f"Task: `{r0['example']}`, its twin `{r0['twin']}`: same tokens, other answer. {len(wo['names'])} "
             f"names, {len(wo['verbs'])} verbs, {wo['n_train_sentences']} training sentences (every sentence of "
             f"the training name pairs); {wo['n_heldout_pairs']} name pairs never appear in training, in either "
             f"order. Model: TinyLM, {cfg['wo_n_layer']} layers unless noted, {cfg['wo_n_head']} heads, width "
             f"{cfg['wo_n_embd']}; LM loss on the answer token only (the logits at `?`), {cfg['wo_steps']} steps "
             f"of {cfg['wo_batch']}, lr {cfg['wo_lr']}. Seeds {', '.join(map(str, wo['seeds']))}: each seed "
             f"draws its own held-out pairs, initialisation and batches, and a test set of "
             f"{wo['cells'][0]['n_test']} fresh sentences in swapped twins from seed + 1000003 "
             f"({wo['cells'][0]['n_unseen']} of them on the unseen pairs). Numbers are means over the seeds.\n")
    L.append("**acc** = is the agent the one of the sentence's two names with the larger logit at `?`. Chance "
             "is exactly 0.5: a model blind to order scores both twins the same, so it names the same person "
             "for both and exactly one of the two is right. **any name** = argmax over all names (a blind "
             "model can fall below 0.5 by naming someone absent). Seen-pair test sentences also occur in "
             f"training (the task has only {n_sent} sentences); the unseen-pair column is the generalisation "
             "test.\n")
    L.append("| cell (mask / position) | layers | acc | acc, seen pairs | acc, unseen pairs (per seed) | any name | "
             "twins with the same prediction | max abs logit diff between twins | final train loss | wall s |")
    L.append("|---|---|---|---|---|---|---|---|---|---|")
    for c in wo["cells"]:
        per = " / ".join(_f(v) for v in c["acc_unseen_per_seed"])
        L.append(f"| {c['cell']} | {c['n_layer']} | {_f(c['acc'])} | {_f(c['acc_seen_pairs'])} | "
                 f"{_f(c['acc_unseen_pairs'])} ({per}) | {_f(c['acc_any_name'])} | {_f(c['twins_same_prediction'])} | "
                 f"{c['twins_max_logit_diff']:.1e} | {_f(c['train_loss'])} | {c['wall_s']:.0f} |")
    L.append("")
    for c in wo["cells"]:
        if c["pos"] == "none" and not c["causal"]:
            L.append(f"- **Bidirectional NoPE**: {c['twins_same_prediction'] * 100:.1f} % of test twins get the same "
                     f"prediction and their logits at `?` differ by at most {c['twins_max_logit_diff']:.1e} (float "
                     f"rounding): without positions or mask every layer is permutation-equivariant, and `B v A ?` "
                     f"is `A v B ?` with positions 0 and 2 swapped, so the `?` position receives the same input. "
                     f"Accuracy {_f(c['acc'])}"
                     + (", exactly chance, as the argument says." if abs(c["acc"] - 0.5) < 1e-9 else "."))
        if c["pos"] == "none" and c["causal"]:
            L.append(f"- **Causal NoPE, {c['n_layer']} layer{'s' if c['n_layer'] > 1 else ''}**: accuracy "
                     f"{_f(c['acc'])} (unseen pairs {_f(c['acc_unseen_pairs'])}), twins with the same prediction "
                     f"{c['twins_same_prediction'] * 100:.1f} %."
                     + (" One layer cannot use the mask's order signal: its only attention reads the bare token "
                        "embeddings, a set, so it is as blind as the bidirectional model." if c["n_layer"] == 1 else
                        " The mask leaks order: position 0 sees one token, position 2 sees three, and a second "
                        "layer can read the difference (Kazemnejad et al. 2023)."))
        if c["pos"] == "alibi" and not c["causal"]:
            m = ", ".join(f"1/{round(1 / x):d}" for x in alibi_slopes(cfg["wo_n_head"]).tolist())
            L.append(f"- **Bidirectional ALiBi** uses the symmetric bias `-m|i-j|` (slopes {m}): from `?` the agent "
                     f"is 3 positions away and the patient 1, so order is visible, but only as a score difference "
                     f"of 2m between the two names. Accuracy {_f(c['acc'])} (unseen pairs "
                     f"{_f(c['acc_unseen_pairs'])}).")
    L.append("")
    L.append("## 2. Character LM: causal mask x position encoding\n")
    tc = lm["train_config"]
    L.append(f"Same model (TinyLM {lm['model']['n_layer']} layers, {lm['model']['n_head']} heads, width "
             f"{lm['model']['n_embd']}), same seed {tc['seed']}, same batches: {tc['steps']} steps of "
             f"{tc['batch_size']} x {tc['seq_len']} characters, lr {tc['lr']}, on {lm['n_train_chars']:,} "
             f"training characters (Shakespeare unless --corpus; fingerprint {lm['corpus']}). "
             f"**train** = mean training loss over the last {tc['eval_every']} steps; **val, teacher-forced** = "
             f"`tiny_lm.window_losses` over {tc['eval_windows']} validation windows of {tc['seq_len']}, every "
             f"position - for the no-mask models this *sees the answer* (position t attends to t+1); **val, left "
             f"to right** = each of {cfg['lm_ltr_chars']} validation characters predicted from the "
             f"{tc['seq_len']} characters before it only, reading the last position's logits: the honest, "
             f"generation-time loss. Loss in nats per character (uniform guess: ln {lm['vocab_size']} = "
             f"{math.log(lm['vocab_size']):.2f}).\n")
    L.append("| mask / position | train loss | val loss, teacher-forced | val loss, left to right | wall s |")
    L.append("|---|---|---|---|---|")
    for c in lm["cells"]:
        L.append(f"| {c['cell']} | {_f(c['train_loss'])} | {_f(c['val_loss_teacher_forced'])} | "
                 f"{_f(c['val_loss_left_to_right'])} | {c['wall_s']:.0f} |")
    L.append("")
    by = {(c["causal"], c["pos"] == "none"): c for c in lm["cells"]}
    cc, cn, nc, nn_ = by[True, False], by[True, True], by[False, False], by[False, True]
    pos = cc["pos"]
    d_ltr = nc["val_loss_left_to_right"] - cc["val_loss_left_to_right"]
    L.append(f"- **No mask, {pos}**: training loss {_f(nc['train_loss'])} against {_f(cc['train_loss'])} with the "
             f"mask" + (" - it reads the next character" if nc["train_loss"] < cc["train_loss"] - 0.3 else
                        " (no collapse in this budget)")
             + f". Left to right, with only the past, it scores {_f(nc['val_loss_left_to_right'])} nats/char, "
             f"{d_ltr:+.2f} against the causal model: in training only the last position of each window "
             f"(1 in {tc['seq_len']}) ever had to predict without the answer in view.")
    d_nn = nn_["val_loss_teacher_forced"] - nn_["val_loss_left_to_right"]
    L.append(f"- **No mask, no positions**: teacher-forced {_f(nn_['val_loss_teacher_forced'])}, left to right "
             f"{_f(nn_['val_loss_left_to_right'])} ({d_nn:+.2f}): every position sees the same bag of characters "
             f"plus its own token, so the next character is in view but cannot be located"
             + (" - it barely helps" if abs(d_nn) < 0.1 else "")
             + f". A bag-of-characters model: "
             f"{nn_['val_loss_left_to_right'] - cc['val_loss_left_to_right']:+.2f} nats/char against causal {pos}.")
    d_cn = cn["val_loss_teacher_forced"] - cc["val_loss_teacher_forced"]
    L.append(f"- **Causal, no positions**: validation {_f(cn['val_loss_teacher_forced'])} against "
             f"{_f(cc['val_loss_teacher_forced'])} with {pos} ({d_cn:+.3f})"
             + (": for a causal LM the mask alone carries most of the order." if d_cn < 0.1 else ".") + "\n")
    L.append(f"Samples, {cfg['lm_sample_chars']} characters at temperature {cfg['lm_temperature']}, left to right "
             f"with a full forward per character (our own loop; `generate()` refuses mask-off models), prompt "
             f"{json.dumps(lm['cells'][0]['prompt'])}:\n")
    for c in lm["cells"]:
        L.append(f"**{c['cell']}**\n\n```\n{c['sample']}\n```\n")
    L.append("## 3. RoPE theta extremes\n")
    theta = Path(cfg["theta_md"])
    rel = os.path.relpath(theta.resolve(), out.resolve())
    L.append(f"See [{theta.name}]({rel}) (written by `visualize_rope.py`)"
             + ("" if theta.exists() else " - not written yet") + ".\n")
    L.append("## 4. Train at 256, run at 4096 without scaling\n")
    if ex["status"] == "ok":
        L.append(f"From `{ex['path']}` (extrapolation_test.py; RoPE trained at {ex['train_len']}, no scaling):\n")
        L.extend(f"- {m}." for m in ex["messages"])
        L.append("")
        if ex.get("loss_by_length"):
            L.append("| length | " + " | ".join(ex["loss_by_length"]) + " |")
            L.append("|---|" + "---|" * len(ex["loss_by_length"]))
            L.append("| RoPE loss (nats/char) | " + " | ".join(f"{v:.3f}" for v in ex["loss_by_length"].values())
                     + " |\n")
    else:
        L.append(f"{ex['message']}.\n")
    L.append("## Settings\n")
    L.append("```\n" + json.dumps({k: v for k, v in cfg.items()}, indent=1) + "\n```\n")
    return "\n".join(L)


# ----------------------------------------------------------------------------- main

def parse_args(argv=None) -> BreakConfig:
    d = BreakConfig()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=d.out, help="folder for breakage.md, breakage.json, breakage.png")
    p.add_argument("--seed", type=int, default=d.seed,
                   help="seed for initialisation, batches and the held-out name pairs "
                        "(the word-order test set uses seed + 1000003)")
    p.add_argument("--device", default=d.device, help="auto (cuda, then mps, then cpu), or a torch device name")
    p.add_argument("--threads", type=int, default=d.threads,
                   help="torch CPU threads for the character LMs (0 = torch's default). Default 1: on a busy "
                        "2-core machine a second thread made a step up to 10x slower; the word-order models "
                        "always use one")
    p.add_argument("--quick", action="store_true", help="tiny models and a few steps: a smoke test, not a result")
    p.add_argument("--wo-schemes", default=",".join(d.wo_schemes),
                   help=f"position schemes for the word-order task, each trained causal and bidirectional "
                        f"(known: {','.join(tiny_lm.SCHEMES)})")
    p.add_argument("--wo-steps", type=int, default=None,
                   help=f"training steps per word-order model (default {d.wo_steps}, {QUICK['wo_steps']} with --quick)")
    p.add_argument("--wo-test-pairs", type=int, default=None,
                   help=f"swapped-twin test pairs, 2 sentences each (default {d.wo_test_pairs}, "
                        f"{QUICK['wo_test_pairs']} with --quick)")
    p.add_argument("--wo-seeds", type=int, default=None,
                   help=f"word-order seeds, from --seed up (default {d.wo_seeds}, {QUICK['wo_seeds']} with --quick)")
    p.add_argument("--wo-names", type=int, default=d.wo_names, help=f"number of names (3..{len(NAMES)})")
    p.add_argument("--wo-verbs", type=int, default=d.wo_verbs, help=f"number of verbs (1..{len(VERBS)})")
    p.add_argument("--lm-pos", default=d.lm_pos, choices=[s for s in tiny_lm.SCHEMES if s != "none"],
                   help="the position scheme of the char-LM 2x2 (the other column is none)")
    p.add_argument("--lm-steps", type=int, default=None,
                   help=f"training steps per char LM (default {d.lm_steps}, {QUICK['lm_steps']} with --quick)")
    p.add_argument("--corpus", default=None, help="UTF-8 text for the char LM (default: data/shakespeare.txt)")
    p.add_argument("--extrapolation", default=d.extrapolation_json,
                   help="extrapolation_test.py's JSON, read if present (experiment 4)")
    a = p.parse_args(argv)
    cfg = BreakConfig(out=a.out, seed=a.seed, device=a.device, threads=a.threads, quick=a.quick,
                      wo_schemes=tuple(s for s in a.wo_schemes.split(",") if s), wo_names=a.wo_names,
                      wo_verbs=a.wo_verbs, lm_pos=a.lm_pos, corpus=a.corpus, extrapolation_json=a.extrapolation)
    if a.quick:
        cfg = replace(cfg, **QUICK)
    for name in ("wo_steps", "wo_test_pairs", "wo_seeds", "lm_steps"):
        if getattr(a, name) is not None:
            cfg = replace(cfg, **{name: getattr(a, name)})
    return cfg


def main(argv=None) -> int:
    cfg = parse_args(argv)
    bad = [s for s in cfg.wo_schemes if s not in tiny_lm.SCHEMES]
    if bad or not cfg.wo_schemes:
        print(f"error: unknown word-order scheme(s) {','.join(bad) or '(none given)'}; "
              f"known: {','.join(tiny_lm.SCHEMES)}", file=sys.stderr)
        return 2
    if min(cfg.wo_steps, cfg.wo_test_pairs, cfg.wo_seeds, cfg.lm_steps) < 1 or cfg.threads < 0:
        print("error: --wo-steps, --wo-test-pairs, --wo-seeds and --lm-steps must be positive, --threads >= 0",
              file=sys.stderr)
        return 2
    try:
        device = tiny_lm.pick_device(cfg.device)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(cfg.out)
    t0 = time.perf_counter()
    try:
        word_order = run_word_order(cfg, device)
        with _threads(cfg.threads):
            char_lm = run_char_lm(cfg, device)
    except (CorpusError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    extrap = extrapolation_summary(cfg.extrapolation_json)
    print(f"extrapolation: {extrap['message']}")
    res = {"command": "python " + " ".join([Path(sys.argv[0]).name] + (sys.argv[1:] if argv is None else list(argv))),
           "config": asdict(cfg), "device": str(device), "torch": torch.__version__,
           "wall_s": round(time.perf_counter() - t0, 1), "word_order": word_order, "char_lm": char_lm,
           "theta_extremes": {"see": cfg.theta_md, "exists": Path(cfg.theta_md).exists()}, "extrapolation": extrap}
    tiny_lm.atomic_write_text(out / "breakage.json", json.dumps(res, indent=1))
    tiny_lm.atomic_write_text(out / "breakage.md", make_markdown(res, out))
    make_plot(res, out / "breakage.png")
    print(f"wrote {out}/breakage.md, {out}/breakage.json, {out}/breakage.png in {res['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
