"""The repository's top level is a decision: the Python files there are listed here, so that a new one (or a move)
changes this list in the same commit."""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TUTORIAL = {"pos_learned.py", "pos_sin.py", "pos_rope.py", "pos_alibi.py", "attn_common.py", "tiny_lm.py",
            "train_compare.py", "extrapolation_test.py", "visualize_rope.py"}
BESIDE = {"rope_hf.py",           # RoPE as Hugging Face writes it, held equal to pos_rope.py
          "schemes.py",           # the contract a reader's scheme file imports (docs/your_scheme.md)
          "long_context_test.py"}  # the README's second measure, run by its own command
# What the scripts share is in lab/ (the docs' bookkeeping in lab/docsync/), the less-used entry scripts in
# experiments/.


def test_the_top_level_python_files_are_the_listed_ones():
    have = {p.name for p in ROOT.glob("*.py")}
    new, gone = sorted(have - TUTORIAL - BESIDE), sorted((TUTORIAL | BESIDE) - have)
    assert not new and not gone, (f"top-level .py files not in tests/test_top_level.py: {new}; listed but absent: "
                                  f"{gone}. A file at the top level is a decision: add it to the list, or put it in lab/")
    assert TUTORIAL <= have, f"the tutorial's files must stay at the top level: missing {sorted(TUTORIAL - have)}"
