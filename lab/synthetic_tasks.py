"""The synthetic tasks on which the field's papers rest their length-generalisation claims, as character strings
(issue 58): each generator returns a Sample, the whole sequence as text and the positions of its answers, the only
characters a model is scored on. Deterministic by seed (random.Random). The training and scoring live elsewhere;
this file only writes the tasks, each from its paper's definition, scaled down where the docstring says so.

  * flip_flop: flip-flop language modelling, Liu et al. 2023, "Exposing Attention Glitches with Flip-Flop
    Language Modeling". Pairs (instruction, bit), instruction w (write), r (read) or i (ignore); the first is a
    write, the last a read, and a read's bit is the bit of the last write. FFL(p): each instruction between is an
    ignore with probability p, else a write or a read with equal chance. Trained on FFL(0.8), tested sparse
    (p = 0.98) and dense (p = 0.1).
  * mqar: multi-query associative recall, Arora et al. 2023 (Zoology; HazyResearch/zoology,
    zoology/data/multiquery_ar.py). n key-value pairs k1 v1 .. kn vn (distinct keys, distinct values, keys and
    values from disjoint alphabets), then every key queried once, at even offsets of the rest drawn without
    replacement from a power law p(g) ~ g^(a - 1), a = 0.01 (near gaps likelier), the other characters random
    over the whole alphabet. The answer is the value after its key. Zoology labels the query position with the
    value and leaves the next input random; a character model predicts the next character, so here the value
    is that next character (each key is queried once, so seeing it answers no later query). Scaled: n = T / 16
    pairs (4 at 64, 32 at 512, within Zoology's 4 to 64 at 64 to 512), 52 keys and 34 values.
  * selective_copy: Golovneva et al. 2024 (CoPE; facebookresearch/RAM, projects/cope), after Gu and Dao's Mamba:
    letters scattered among blanks, then a separator, then the letters in their order. T / 8 letters.
  * reverse: an input string, a separator, the string reversed (Ruoss et al. 2023, randomized positional
    encodings; Kazemnejad et al. 2023, "The Impact of Positional Encoding on Length Generalization").
"""
import random
import string
from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    """text: the whole sequence; answers: the indices i of text whose character is an answer, predicted from
    text[:i]."""
    text: str
    answers: tuple


# ----------------------------------------------------------------------------- flip-flop

FLIP_FLOP = "wri01"  # the alphabet: write, read, ignore, and the two bits


def flip_flop(T: int, rng: random.Random, p_ignore: float = 0.8) -> Sample:
    """FFL(p_ignore) of T characters (T / 2 instruction-bit pairs): the answers are the bits after each r."""
    if T < 4 or T % 2:
        raise ValueError(f"flip_flop: T is an even number of characters, at least 4 (a write and a read); got {T}")
    if not 0 <= p_ignore < 1:
        raise ValueError(f"flip_flop: p_ignore is a probability below 1; got {p_ignore}")
    pairs, text, answers, last = T // 2, [], [], None
    for k in range(pairs):
        if k == 0:
            op = "w"
        elif k == pairs - 1:
            op = "r"
        else:  # ignore with p_ignore, else write or read with equal chance
            u = rng.random()
            op = "i" if u < p_ignore else "w" if u < p_ignore + (1 - p_ignore) / 2 else "r"
        if op == "r":
            bit = last
            answers.append(2 * k + 1)
        else:
            bit = rng.choice("01")
            if op == "w":
                last = bit
        text += [op, bit]
    return Sample("".join(text), tuple(answers))


# ----------------------------------------------------------------------------- multi-query associative recall

MQAR_KEYS = string.ascii_letters                          # 52 keys
MQAR_VALUES = string.digits + "αβγδεζηθικλμνξοπρστυφχψω"  # 34 values, none of them a key
POWER_A = 0.01  # Zoology's power_a


def mqar(T: int, rng: random.Random, n_pairs: int = None) -> Sample:
    """n_pairs (default T / 16) key-value pairs, then each key queried once: the answers are the values after
    the queries."""
    n = T // 16 if n_pairs is None else n_pairs
    if n < 1 or 4 * n > T or T % 2 or n > min(len(MQAR_KEYS), len(MQAR_VALUES)):
        raise ValueError(f"mqar: T (even) must hold n pairs and n queries, 4 n <= T, with n at most "
                         f"{min(len(MQAR_KEYS), len(MQAR_VALUES))}; got T = {T}, n = {n}")
    keys, values = rng.sample(MQAR_KEYS, n), rng.sample(MQAR_VALUES, n)
    context = [c for kv in zip(keys, values) for c in kv]  # k1 v1 k2 v2 ..
    # gaps g = 0 .. space-1 with p ~ (g + 1)^(a - 1), drawn without replacement, as Zoology's np.random.choice
    space = (T - 2 * n) // 2
    weights, gaps = [(g + 1) ** (POWER_A - 1) for g in range(space)], []
    free = list(range(space))
    for _ in range(n):
        g = rng.choices(range(len(free)), weights=[weights[f] for f in free])[0]
        gaps.append(free.pop(g))
    alphabet = MQAR_KEYS + MQAR_VALUES
    rest = [rng.choice(alphabet) for _ in range(T - 2 * n)]  # random characters between the queries
    answers = []
    for key, value, g in zip(keys, values, gaps):
        rest[2 * g], rest[2 * g + 1] = key, value
        answers.append(2 * n + 2 * g + 1)
    return Sample("".join(context + rest), tuple(sorted(answers)))


# ----------------------------------------------------------------------------- selective copy and reverse

LETTERS = string.ascii_lowercase
BLANK, SEP = ".", "|"


def selective_copy(T: int, rng: random.Random) -> Sample:
    """T / 8 letters among blanks, a separator, the letters in order: the answers are the copied letters."""
    k = T // 8
    if k < 1:
        raise ValueError(f"selective_copy: T is at least 8 characters (one letter to copy); got {T}")
    span = T - k - 1
    letters = [rng.choice(LETTERS) for _ in range(k)]
    where = sorted(rng.sample(range(span), k))
    context = [BLANK] * span
    for i, c in zip(where, letters):
        context[i] = c
    return Sample("".join(context) + SEP + "".join(letters), tuple(range(span + 1, T)))


def reverse(T: int, rng: random.Random) -> Sample:
    """A string of T/2 - 1 letters, a separator, the string reversed, an end mark: the answers are the reversed
    letters."""
    n = T // 2 - 1
    if n < 1 or T % 2:
        raise ValueError(f"reverse: T is an even number of characters, at least 4; got {T}")
    s = "".join(rng.choice(LETTERS) for _ in range(n))
    return Sample(s + SEP + s[::-1] + BLANK, tuple(range(n + 1, 2 * n + 1)))


def alphabet(task: str) -> str:
    """Every character a task writes: its model's vocabulary."""
    return {"flip_flop": FLIP_FLOP, "mqar": MQAR_KEYS + MQAR_VALUES, "selective_copy": LETTERS + BLANK + SEP,
            "reverse": LETTERS + BLANK + SEP}[task]
