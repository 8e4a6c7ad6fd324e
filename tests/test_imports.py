"""One home for each idea: no entry-point script imports another one, anywhere in its file
(inside functions too), and no library module imports an entry point. What several scripts
need (perplexity, long-context measures, the training loop, the README's tables, row names)
lives in library modules that the scripts import."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = {"train_compare", "extrapolation_test", "long_context_test", "visualize_rope", "experiments.recipe_ablation",
           "experiments.copy_calibration", "experiments.breakage_test", "experiments.benchmark"}


def name_of(path: Path) -> str:
    """The module name a file is imported by: tiny_lm, lab.cli, lab.docsync.tables, experiments.benchmark; the
    field's files by their own names (field/ is put on the import path)."""
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[1:] if rel.parts[0] == "field" else rel.parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def files() -> list:
    """Every module of the repository: the top level, field/, lab/ (with lab/docsync/) and experiments/."""
    return sorted([*ROOT.glob("*.py"), *(ROOT / "field").glob("*.py"), *(ROOT / "lab").rglob("*.py"),
                   *(ROOT / "experiments").glob("*.py")])


def entry_points() -> set:
    """Module names of the files that define main(): the scripts one runs (top level and experiments/)."""
    return {name_of(p) for p in [*ROOT.glob("*.py"), *(ROOT / "experiments").glob("*.py")]
            if any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in ast.parse(p.read_text()).body)}


def imported(path: Path) -> set:
    """Every module the file imports, wherever the import statement is, by its full name: `from lab import cli`
    imports lab.cli (and lab), `import torch.nn` imports torch.nn."""
    known = {name_of(p) for p in files()}
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known}
    return out


def test_the_rule_finds_the_scripts_and_the_imports_inside_functions():
    assert SCRIPTS <= entry_points(), f"scripts without a main(): {sorted(SCRIPTS - entry_points())}"
    assert "lab.plots" in imported(ROOT / "extrapolation_test.py"), "an import inside a function was missed"


def test_no_entry_point_imports_another():
    scripts = entry_points()
    path = {name_of(p): p for p in files()}
    bad = [f"{s} imports {m}" for s in sorted(scripts) for m in sorted(imported(path[s]) & scripts - {s})]
    assert not bad, "move what is shared into a library module: " + "; ".join(bad)


def test_no_library_module_imports_an_entry_point():
    scripts = entry_points()
    libraries = [p for p in files() if name_of(p) not in scripts]
    shared = {"lab.perplexity", "lab.long_context", "lab.training", "lab.docsync.tables", "lab.row_names",
              "lab.eval_common"}
    assert shared <= {name_of(p) for p in libraries}, f"not library modules: {sorted(shared - set(map(name_of, libraries)))}"
    bad = [f"{p.name} imports {m}" for p in libraries for m in sorted(imported(p) & scripts)]
    assert not bad, "a library module must not depend on a script: " + "; ".join(bad)


def graph() -> dict:
    """{module: the repository's modules it imports}, for every one of them."""
    mods = {name_of(p) for p in files()}
    return {name_of(p): imported(p) & mods - {name_of(p)} for p in files()}


def test_no_import_runs_in_a_circle():
    g, circles = graph(), []

    def walk(path):
        for nxt in sorted(g[path[-1]]):
            if nxt == path[0]:
                circles.append(" -> ".join(path + [nxt]))
            elif nxt not in path and nxt > path[0]:  # each circle found once, from its smallest module
                walk(path + [nxt])
    for m in sorted(g):
        walk([m])
    assert not circles, "imports that run in a circle (fill a registry from above instead): " + "; ".join(circles[:5])


def test_the_model_floor_reaches_nothing_above_it():
    """The pos files, attn_common, schemes and tiny_lm never import what draws, tabulates, evaluates or runs."""
    g = graph()
    floor = [p.stem for p in ROOT.glob("pos_*.py")] + [p.stem for p in (ROOT / "field").glob("*.py")] + \
        ["attn_common", "schemes", "tiny_lm"]
    above = {"lab.plots", "lab.docsync.tables", "lab.eval_common", "lab.docsync.findings", "lab"} | entry_points()
    bad = [f"{m} imports {', '.join(sorted(g[m] & above))}" for m in floor if g[m] & above]
    assert not bad, "; ".join(bad)


# The model's floor, bottom up (STYLE.md item 22): each tier imports only tiers below it. The contract (schemes.py)
# knows the built-in pos files, not the field's scheme files; those import the contract; tiny_lm sits above them
# all and imports none of them: lab/field.py does, and so fills the registry from above.
TIERS = (("pos_alibi", "pos_learned", "pos_rope", "pos_sin"), ("attn_common",), ("schemes", "lab.streaming"),
         tuple(sorted(p.stem for p in (ROOT / "field").glob("field_*.py"))), ("tiny_lm",))


def test_the_floor_imports_only_downward():
    g, rank = graph(), {m: i for i, tier in enumerate(TIERS) for m in tier}
    assert set(rank) <= set(g), f"tiers name modules that do not exist: {sorted(set(rank) - set(g))}"
    assert {p.stem for p in (ROOT / "field").glob("*.py")} <= set(rank), "a file in field/ not named field_*.py"
    bad = [f"{m} imports {n}" for m in rank for n in sorted(g[m]) if n in rank and rank[n] >= rank[m]]
    assert not bad, "imports that run up or across the floor: " + "; ".join(bad)


def test_importing_the_model_loads_no_field_file_and_leaves_sys_path():
    """`import tiny_lm` alone registers the five built-in schemes and imports nothing from field/, nor changes
    sys.path; `import lab` then registers the field's schemes."""
    import subprocess
    import sys
    code = ("import sys; before = list(sys.path); import tiny_lm, schemes; "
            "assert sys.path == before, 'sys.path changed'; "
            "assert not [m for m in sys.modules if m.startswith('field_')], [m for m in sys.modules if m.startswith('field_')]; "
            "print(','.join(schemes.REGISTRY)); import lab; print(','.join(schemes.REGISTRY))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-800:]
    model_only, with_lab = out.stdout.split()
    assert model_only == "none,learned,sin,rope,alibi", model_only
    assert {"t5", "kerple", "fire", "xpos", "fox", "cope"} <= set(with_lab.split(",")), with_lab
