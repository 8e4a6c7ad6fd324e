"""Shared pytest setup: import the repo's modules from the repository root, seed every test, and the
default corpus's validation text (val_text), read by several test files."""
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# torch 2.13's CPU torch.cos / torch.sin on float32 are now and then (about 1 process in 8 here) off by
# up to 1.5e-4 on the first call a process makes, for a 256 x 16 table; every later call is exact. Make
# that first call here, so that no test's numbers depend on whether it happens to run first.
torch.cos(torch.zeros(8))
torch.sin(torch.zeros(8))


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same global RNG state, so results never depend on test order."""
    torch.manual_seed(0)
    yield


@pytest.fixture
def one_thread():
    """Run a test on one intra-op thread, then restore the setting.

    The tensors in the unit tests are tiny; on a small shared machine, two threads fighting
    over two busy cores made a 60-step training loop 30x slower than one thread.
    Opt in with `pytestmark = pytest.mark.usefixtures("one_thread")`.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def val_text():
    """(validation ids, vocabulary) of the default corpus."""
    import tiny_lm
    _, val, vocab = tiny_lm.load_corpus(None)
    return tiny_lm.CharTokenizer(vocab).encode(val), vocab
