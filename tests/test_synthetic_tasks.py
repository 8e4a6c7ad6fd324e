"""lab/synthetic_tasks.py's generators held to their tasks' rules, each checked by an independent reading of the
text: every flip-flop read is the last write, every MQAR answer is the value its key was given, a selective copy
gives the letters in order, a reversal the string reversed; lengths, alphabets and seeds as stated."""
import random
from collections import Counter

import pytest

from lab import synthetic_tasks as S

GENERATORS = {"flip_flop": S.flip_flop, "mqar": S.mqar, "selective_copy": S.selective_copy, "reverse": S.reverse}


@pytest.mark.parametrize("task", GENERATORS)
@pytest.mark.parametrize("T", [64, 128, 512])
def test_length_alphabet_answers_and_seed(task, T):
    make = GENERATORS[task]
    a, b, c = make(T, random.Random(3)), make(T, random.Random(3)), make(T, random.Random(4))
    assert a == b, f"{task}: the same seed gave two samples"
    assert a.text != c.text, f"{task}: two seeds gave the same text"
    assert len(a.text) == T, f"{task}: {len(a.text)} characters, asked for {T}"
    assert set(a.text) <= set(S.alphabet(task)), f"{task}: characters outside its alphabet: {set(a.text) - set(S.alphabet(task))}"
    assert a.answers and list(a.answers) == sorted(set(a.answers)) and 0 < a.answers[0] and a.answers[-1] < T, a.answers


def read_flip_flop(text: str) -> list:
    """(index of the bit, the bit it must be) for every read, by scanning the pairs."""
    last, out = None, []
    for k in range(0, len(text), 2):
        op, bit = text[k], text[k + 1]
        if op == "w":
            last = bit
        elif op == "r":
            out.append((k + 1, last))
    return out


@pytest.mark.parametrize("p", [0.8, 0.98, 0.1])
def test_every_flip_flop_read_is_the_last_write(p):
    rng, ops = random.Random(0), Counter()
    for _ in range(200):
        s = S.flip_flop(128, rng, p)
        assert s.text[0] == "w" and s.text[-2] == "r", s.text
        reads = read_flip_flop(s.text)
        assert [i for i, _ in reads] == list(s.answers), "the answers are not the read bits"
        wrong = [(i, s.text[i], want) for i, want in reads if s.text[i] != want]
        assert not wrong, f"reads that are not the last write: {wrong[:3]}"
        ops.update(s.text[2:-2:2])  # the instructions between the first and the last
    share = ops["i"] / sum(ops.values())
    assert abs(share - p) < 0.02, f"FFL({p}): ignores are {share:.3f} of the instructions"
    assert abs(ops["w"] - ops["r"]) / sum(ops.values()) < 0.03, f"writes and reads differ in number: {ops}"


@pytest.mark.parametrize("T", [64, 256, 512])
def test_every_mqar_answer_is_the_value_its_key_was_given(T):
    rng = random.Random(1)
    for _ in range(50):
        s = S.mqar(T, rng)
        n = T // 16
        keys, values = s.text[0:2 * n:2], s.text[1:2 * n:2]
        assert len(set(keys)) == n and len(set(values)) == n, "keys and values must be distinct"
        assert set(keys) <= set(S.MQAR_KEYS) and set(values) <= set(S.MQAR_VALUES)
        given = dict(zip(keys, values))
        assert len(s.answers) == n and all(i >= 2 * n and (i - 2 * n) % 2 == 1 for i in s.answers), s.answers
        got = {s.text[i - 1]: s.text[i] for i in s.answers}
        assert got == given, f"queries and their answers {got}, against the pairs {given}"


def test_mqar_queries_come_near_more_often():
    """The power law of Zoology's gaps: the first half of the query region holds most of the queries."""
    rng, near, far = random.Random(2), 0, 0
    for _ in range(300):
        s = S.mqar(256, rng)
        for i in s.answers:
            near, far = (near + 1, far) if i < 32 + (256 - 32) // 2 else (near, far + 1)
    assert near > 1.2 * far, (near, far)


def test_selective_copy_gives_the_letters_in_order():
    rng = random.Random(5)
    for T in (64, 512):
        s = S.selective_copy(T, rng)
        context, out = s.text.split(S.SEP)
        assert out == "".join(c for c in context if c != S.BLANK) and len(out) == T // 8, s.text
        assert "".join(s.text[i] for i in s.answers) == out


def test_reverse_gives_the_string_reversed():
    s = S.reverse(64, random.Random(6))
    inp, rest = s.text.split(S.SEP)
    assert rest == inp[::-1] + S.BLANK and "".join(s.text[i] for i in s.answers) == inp[::-1], s.text


@pytest.mark.parametrize("call", [lambda: S.flip_flop(7, random.Random()), lambda: S.flip_flop(8, random.Random(), 1.0),
                                  lambda: S.mqar(14, random.Random()), lambda: S.mqar(64, random.Random(), 40),
                                  lambda: S.selective_copy(4, random.Random()), lambda: S.reverse(5, random.Random())])
def test_impossible_sizes_are_refused(call):
    with pytest.raises(ValueError):
        call()
