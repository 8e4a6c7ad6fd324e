"""The line budget of the docs' example scheme file, which a reader copies whole. The scripts have none: a long
one is split by idea, never squeezed to a count (issue 57)."""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUDGETS = {"examples/kerple_power.py": 60}


@pytest.mark.parametrize("name,budget", BUDGETS.items())
def test_file_within_its_line_budget(name, budget):
    lines = len((ROOT / name).read_text(encoding="utf-8").splitlines())
    assert lines <= budget, f"{name} has {lines} lines, over its budget of {budget}"
