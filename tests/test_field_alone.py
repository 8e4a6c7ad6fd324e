"""Each field scheme file (every field/field_*.py), copied alone into an empty folder (field_xpos.py with pos_rope.py
beside it, which it says it needs), imports with torch and the standard library only and passes its own self-check; nothing of
the repository is on the path there. In the repository, field_xpos.py runs in place with the repository on PYTHONPATH."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NEEDS = {"field_xpos.py": ("pos_rope.py",)}  # what a file says it needs beside torch
ALONE = {p.name: NEEDS.get(p.name, ()) for p in sorted((ROOT / "field").glob("field_*.py"))}


@pytest.mark.parametrize("name", ALONE)
def test_a_field_file_runs_alone(name, tmp_path):
    for f in (name, *ALONE[name]):
        shutil.copy2(ROOT / ("field" if f.startswith("field_") else "") / f, tmp_path / f)
    # -E -s: no PYTHONPATH, no user site; the script's folder (tmp_path) is the only one of ours on sys.path
    run = subprocess.run([sys.executable, "-E", "-s", name], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, f"{name} alone: exit {run.returncode}\n{run.stderr[-1500:]}"
    oks = [line for line in run.stdout.splitlines() if line.startswith("ok  ")]
    assert len(oks) >= 3, f"{name} alone printed too few self-check lines:\n{run.stdout}"
    assert not (tmp_path / "schemes.py").exists() and "schemes" not in run.stdout


def test_field_xpos_runs_in_place():
    """As its docstring says: PYTHONPATH=. python field/field_xpos.py, from the repository."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-s", str(Path("field") / "field_xpos.py")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.count("ok  ") >= 3, f"exit {run.returncode}\n{run.stderr[-1500:]}"
