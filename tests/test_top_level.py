"""The repository's top level is a decision: the Python files there are listed here, so that a new one (or a move)
changes this list in the same commit. Issue 57 will move the shared machinery into a folder beside the tutorial's
files; this list shrinks with it."""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TUTORIAL = {"pos_learned.py", "pos_sin.py", "pos_rope.py", "pos_alibi.py", "attn_common.py", "tiny_lm.py",
            "train_compare.py", "extrapolation_test.py", "visualize_rope.py"}
BESIDE = {"rope_hf.py", "schemes.py",
          # entry scripts the README or docs/ name
          "benchmark.py", "breakage_test.py", "long_context_test.py", "field_probes.py", "copy_calibration.py",
          "recipe_ablation.py", "anchor_xtransformers.py",
          # shared machinery and the docs' bookkeeping, still here until issue 57 moves them
          "cli.py", "copy_mixture.py", "corpus_sympy.py", "eval_common.py", "findings.py", "long_context.py",
          "perplexity.py", "plots.py", "prose_numbers.py", "row_names.py", "streaming.py", "tables.py",
          "train_state.py", "training.py", "variants.py"}


def test_the_top_level_python_files_are_the_listed_ones():
    have = {p.name for p in ROOT.glob("*.py")}
    new, gone = sorted(have - TUTORIAL - BESIDE), sorted((TUTORIAL | BESIDE) - have)
    assert not new and not gone, (f"top-level .py files not in tests/test_top_level.py: {new}; listed but absent: "
                                  f"{gone}. A file at the top level is a decision: add it to the list, or put it in lab/")
    assert TUTORIAL <= have, f"the tutorial's files must stay at the top level: missing {sorted(TUTORIAL - have)}"
