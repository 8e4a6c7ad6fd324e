"""Every command the README and docs/ give resolves: the script it names exists, and the script's own parser
accepts the flags written after it. Parsing stops there (parse_args is spied on and raises once it has parsed), so
nothing trains or scores; a flag that a script renamed or dropped fails here with the page and the line."""
import argparse
import ast
import importlib
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND = re.compile(r"python ([\w/]+\.py)([^`\n&|;]*)")  # up to the end of a code span, a line or a chain
SHELL = {"$F": "--scheme-file examples/kerple_power.py"}  # docs/your_scheme.md's F="..."


class Parsed(BaseException):
    """The command line was parsed (BaseException: no `except Exception` in a script hides it)."""


def joined(text: str) -> str:
    """The page with every inline code span on one line (a span may wrap, a fenced block's lines stay apart):
    newlines inside `...` outside fences become spaces, so offsets and line numbers are the page's."""
    parts = re.split(r"(```.*?```)", text, flags=re.S)  # odd parts: fenced blocks
    return "".join(part if i % 2 else re.sub(r"`[^`]+`", lambda m: m.group(0).replace("\n", " "), part)
                   for i, part in enumerate(parts))


def commands() -> list:
    """(page:line, script, argv) for every `python SCRIPT.py ...` on the pages."""
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in COMMAND.finditer(joined(text)):
            rest = m.group(2).rstrip().removesuffix("\\")
            for var, value in SHELL.items():
                rest = rest.replace(var, value)
            where = f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}"
            out.append((where, m.group(1), shlex.split(rest, comments=True)))
    return out


def has_main(path: Path) -> bool:
    return any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in ast.parse(path.read_text()).body)


def test_the_pages_give_commands():
    found = {script for _, script, _ in commands()}
    assert {"train_compare.py", "extrapolation_test.py", "long_context_test.py", "visualize_rope.py",
            "experiments/benchmark.py"} <= found, f"the command pattern finds too little: {sorted(found)}"


def test_every_command_names_a_script_that_exists():
    missing = [f"{where}: python {script}" for where, script, _ in commands() if not (ROOT / script).is_file()]
    assert not missing, "commands whose script is not there:\n" + "\n".join(missing)


def test_every_command_line_is_accepted_by_its_script(monkeypatch):
    scripts = {script for _, script, _ in commands() if (ROOT / script).is_file() and has_main(ROOT / script)}
    # imported before the spy: a script may parse its own defaults at import (visualize_rope's DEFAULTS)
    mains = {s: importlib.import_module(s.removesuffix(".py").replace("/", ".")).main for s in scripts}
    parse = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        parse(self, args, namespace)
        raise Parsed
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    problems, checked = [], 0
    for where, script, argv in commands():
        if script not in mains:
            continue  # a self-check run without flags (pos_rope.py, attn_common.py); existence is checked above
        try:
            mains[script](list(argv))
            problems.append(f"{where}: python {script} {shlex.join(argv)} returned before parsing its flags")
        except Parsed:
            checked += 1
        except SystemExit as e:
            problems.append(f"{where}: python {script} {shlex.join(argv)} is refused by its parser (exit {e.code})")
    assert not problems, "\n".join(problems)
    assert checked >= 60, f"only {checked} commands were parsed"
