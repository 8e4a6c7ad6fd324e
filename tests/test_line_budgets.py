"""The line budgets the issues set for the longest scripts: a file past its budget is a file to split or trim."""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUDGETS = {"breakage_test.py": 450, "benchmark.py": 400, "examples/kerple_power.py": 60}


@pytest.mark.parametrize("name,budget", BUDGETS.items())
def test_file_within_its_line_budget(name, budget):
    lines = len((ROOT / name).read_text(encoding="utf-8").splitlines())
    assert lines <= budget, f"{name} has {lines} lines, over its budget of {budget}"
