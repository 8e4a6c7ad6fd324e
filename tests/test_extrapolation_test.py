"""extrapolation_test.py: the evaluation span (blocks spread over the text), the clamped learned rows;
on the shared --quick checkpoints (conftest.quick_repo) its outputs parse and agree with each other,
and its answers to bad input are one line."""

import pytest
import torch

import extrapolation_test as ET
import tiny_lm

pytestmark = pytest.mark.usefixtures("one_thread")
VOCAB = "\n !',.:;?" + "abcdefghijklmnopqrstuvwxyz" + "0123456789" + "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
TEXT = 35  # ids below this are neither digits nor uppercase: text made of them holds no key character


def tiny(pos="rope", **kw):
    return tiny_lm.TinyLM(tiny_lm.GPTConfig(vocab_size=len(VOCAB), n_layer=2, n_head=2, n_embd=16, pos=pos,
                                            max_len=512, **kw)).eval()


def test_spread_blocks_cover_the_text():
    starts = ET.spread_blocks(10_001, 1000, 4)
    assert starts[0] == 0 and starts[-1] == 9000 and all(b - a >= 1000 for a, b in zip(starts, starts[1:]))
    with pytest.raises(tiny_lm.CorpusError, match="fewer than"):
        ET.spread_blocks(3000, 1000, 3)


def test_clamped_learned_rows():
    model = tiny("learned")
    ET.clamp_learned_rows(model, 64)
    w = model.learned.table.weight
    assert torch.equal(w[64:], w[63].expand_as(w[64:])) and not torch.equal(w[62], w[63])

