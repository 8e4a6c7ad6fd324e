"""Training and scoring a TinyLM on the synthetic tasks of lab/synthetic_tasks.py (issue 58), for
experiments/synthetic_test.py. One recipe per task (RECIPES), shared by every scheme; one model per scheme, task
and seed, trained at the task's length L with the loss on the answers only, then scored at L, 2L, 4L and 8L.

    batches(task, ...)  -> batch(step, generator) -> (x, y): training.train's batches, y = -100 off the answers
    score(model, split, T, ...) -> (right, answers, sequences): greedy accuracy on the answers of fixed test
                           sequences, the same for every model (their generator is seeded by split and length)

Accuracy is a share of answers, with its exact Clopper-Pearson interval (long_context.clopper_pearson). The
answers of one sequence are not independent draws, so each cell also holds at least MIN_SEQUENCES sequences;
MIN_ANSWERS answers give an interval of at most +-3.1 points at 50%, so a 10-point difference is resolved.
"""
import random
from dataclasses import asdict, dataclass

import torch

from lab import synthetic_tasks as S
from lab.variants import TrainConfig

IGNORE = -100  # a target cross_entropy skips: the loss and the score are on the answers only


@dataclass(frozen=True)
class Recipe:
    """How one task is trained: at length L, AdamW (lab/variants.make_optimizer) with warm-up and a cosine to
    zero, every scheme alike. Found by calibration on RoPE (docs/synthetic.md)."""
    L: int = 64
    steps: int = 1500
    batch_size: int = 32
    lr: float = 3e-3
    warmup: int = 100

    def train_config(self, seed: int) -> TrainConfig:
        return TrainConfig(seq_len=self.L, batch_size=self.batch_size, steps=self.steps, lr=self.lr,
                           min_lr_frac=0.0, warmup=self.warmup, eval_every=max(1, self.steps // 10), seed=seed)


# MQAR needs a lower rate and a larger batch to reach 100% at L (3e-3, batch 32: 50% after 5,000 steps).
RECIPES = {"flip_flop": Recipe(), "mqar": Recipe(steps=4000, batch_size=64, lr=1e-3),
           "selective_copy": Recipe(), "reverse": Recipe()}
TASKS = tuple(RECIPES)
MULTIPLES = (1, 2, 4, 8)  # test lengths, in training lengths

# What each task is scored on: (task, split, generator options). Flip-flop trains on FFL(0.8) and is also
# scored on its sparse (p = 0.98) and dense (p = 0.1) splits at every length.
SPLITS = {"flip_flop": ("flip_flop", {}), "flip_flop_sparse": ("flip_flop", {"p_ignore": 0.98}),
          "flip_flop_dense": ("flip_flop", {"p_ignore": 0.1}), "mqar": ("mqar", {}),
          "selective_copy": ("selective_copy", {}), "reverse": ("reverse", {})}
MIN_ANSWERS = 1000
MIN_SEQUENCES = 100

MAKERS = {"flip_flop": S.flip_flop, "mqar": S.mqar, "selective_copy": S.selective_copy, "reverse": S.reverse}


def encode(samples, vocab: str) -> tuple:
    """Samples of one length as (x, y), each (N, T): x the characters' ids, y the id of each answer at the
    position before it (the position that predicts it), IGNORE elsewhere."""
    stoi = {c: i for i, c in enumerate(vocab)}
    ids = torch.tensor([[stoi[c] for c in s.text] for s in samples])  # (N, T)
    y = torch.full_like(ids, IGNORE)
    for b, s in enumerate(samples):
        at = torch.tensor(s.answers)
        y[b, at - 1] = ids[b, at]  # position i - 1 predicts character i
    return ids, y


def batches(task: str, L: int, batch_size: int):
    """training.train's batches for one task: batch_size fresh sequences of L characters a step, drawn by a
    random.Random seeded from train()'s generator (so from the TrainConfig's seed alone)."""
    make, vocab = MAKERS[task], S.alphabet(task)

    def batch(step: int, gen: torch.Generator):
        rng = random.Random(int(torch.randint(0, 2 ** 62, (1,), generator=gen)))
        return encode([make(L, rng) for _ in range(batch_size)], vocab)
    return batch


def test_set(split: str, T: int, min_answers: int = MIN_ANSWERS, min_sequences: int = MIN_SEQUENCES) -> tuple:
    """The test sequences of one split at length T, as (x, y): the same for every model and every run (their
    generator is seeded by the split and T), as many as give min_answers answers and min_sequences sequences."""
    task, kw = SPLITS[split]
    rng, samples, answers = random.Random(f"synthetic/{split}/{T}"), [], 0
    while answers < min_answers or len(samples) < min_sequences:
        samples.append(MAKERS[task](T, rng, **kw))
        answers += len(samples[-1].answers)
    return encode(samples, S.alphabet(task))


@torch.no_grad()
def score(model, split: str, T: int, batch_tokens: int = 16384, device="cpu", min_answers: int = MIN_ANSWERS,
          min_sequences: int = MIN_SEQUENCES) -> dict:
    """Greedy accuracy of model on the answers of test_set(split, T): {"right", "answers", "sequences"}."""
    x, y = test_set(split, T, min_answers, min_sequences)
    model.eval()
    right, per = 0, max(1, batch_tokens // T)
    for a in range(0, x.shape[0], per):
        xb, yb = x[a:a + per].to(device), y[a:a + per].to(device)
        pred = model(xb).logits.argmax(-1)                          # (b, T, V) -> (b, T)
        right += int(((pred == yb) & (yb != IGNORE)).sum())
    return {"right": right, "answers": int((y != IGNORE).sum()), "sequences": int(x.shape[0])}


def recipe_of(task: str, quick: dict = None) -> dict:
    """The recipe of a task as a dict (a results row's provenance), with --quick's changes."""
    return {**asdict(RECIPES[task]), **(quick or {})}
