"""What several test files build their small models and texts from: one vocabulary with every key
character, a tiny TinyLM, and a per-position loss by one plain forward (the reference that the
measures' batched scoring is checked against)."""
from lab.options import make_config, make_model
import torch
import torch.nn.functional as F

import tiny_lm

VOCAB = "\n !',.:;?" + "abcdefghijklmnopqrstuvwxyz" + "0123456789" + "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
TEXT = 35  # ids below this are neither digits nor uppercase: text made of them holds no key character


def tiny(pos="rope", **kw):
    return make_model(make_config(vocab_size=len(VOCAB), n_layer=2, n_head=2, n_embd=16, pos=pos,
                                            max_len=512, **kw)).eval()


def direct_loss(model, seq):
    """Per-position loss of one sequence (T + 1,) -> (T,), by a plain forward."""
    with torch.no_grad():
        logits = model(seq[None, :-1]).logits[0]
    return F.cross_entropy(logits, seq[1:], reduction="none")
