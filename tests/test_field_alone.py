"""Each field scheme file (every field/field_*.py), copied alone into an empty folder (field_xpos.py with pos_rope.py
beside it, which it says it needs), imports with torch and the standard library only and passes its own self-check; nothing of
the repository is on the path there. In the repository, field_xpos.py runs in place with the repository on PYTHONPATH."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NEEDS = {"field_xpos.py": ("pos_rope.py",)}  # what a file says it needs beside torch
ALONE = {p.name: NEEDS.get(p.name, ()) for p in sorted((ROOT / "field").glob("field_*.py"))}


# One interpreter runs every file, each from a folder of its own that holds only it (and what it says it needs):
# torch is imported once, not once a file. After a file, the modules of its folder leave sys.modules, so the next
# file cannot lean on them; its own imports are what it finds in its folder, torch and the standard library.
DRIVER = """
import contextlib, io, json, pathlib, runpy, sys, traceback
out, folders = {}, sys.argv[1:]
for folder in folders:
    name, buf, code = pathlib.Path(folder).name, io.StringIO(), 0
    sys.path.insert(0, folder)
    sys.argv = [f"{folder}/{name}"]
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            runpy.run_path(f"{folder}/{name}", run_name="__main__")
        except SystemExit as e:
            code = e.code or 0
        except BaseException:
            traceback.print_exc()
            code = 1
    sys.path.remove(folder)
    for m in [m for m, mod in sys.modules.items() if str(getattr(mod, "__file__", "") or "").startswith(folder)]:
        del sys.modules[m]
    out[name] = {"code": code, "out": buf.getvalue(), "schemes": "schemes" in sys.modules}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def ran_alone(tmp_path_factory) -> dict:
    """{file name: {"code", "out", "schemes"}}: each field file run as __main__ from a folder of its own."""
    folders = []
    for name, needs in ALONE.items():
        folder = tmp_path_factory.mktemp("alone") / name  # the folder is named after the file it holds
        folder.mkdir()
        for f in (name, *needs):
            shutil.copy2(ROOT / ("field" if f.startswith("field_") else "") / f, folder / f)
        folders.append(str(folder))
    # -E -s: no PYTHONPATH, no user site; the folders are the only ones of ours on sys.path
    run = subprocess.run([sys.executable, "-E", "-s", "-c", DRIVER, *folders], cwd=folders[0], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-1500:]
    return json.loads(run.stdout.splitlines()[-1])


@pytest.mark.parametrize("name", ALONE)
def test_a_field_file_runs_alone(name, ran_alone):
    r = ran_alone[name]
    assert r["code"] == 0, f"{name} alone: exit {r['code']}\n{r['out'][-1500:]}"
    oks = [line for line in r["out"].splitlines() if line.startswith("ok  ")]
    assert len(oks) >= 3, f"{name} alone printed too few self-check lines:\n{r['out']}"
    assert not r["schemes"] and "schemes" not in r["out"], f"{name} alone imported or printed schemes"


def test_field_xpos_runs_in_place():
    """As its docstring says: PYTHONPATH=. python field/field_xpos.py, from the repository."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-s", str(Path("field") / "field_xpos.py")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.count("ok  ") >= 3, f"exit {run.returncode}\n{run.stderr[-1500:]}"
