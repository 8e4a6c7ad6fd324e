"""Shared pytest setup: import the repo's modules from the repository root, seed every test, and the
runs several test files read (session fixtures, built once): the --quick chain in a copy of the
checkout (quick_repo) and the default corpus's validation text (val_text)."""
import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from lab import corpora  # noqa: E402  (importing lab registers the field's schemes, lab/field.py, for every test)

# torch 2.13's CPU torch.cos / torch.sin on float32 are now and then (about 1 process in 8 here) off by
# up to 1.5e-4 on the first call a process makes, for a 256 x 16 table; every later call is exact. Make
# that first call here, so that no test's numbers depend on whether it happens to run first.
torch.cos(torch.zeros(8))
torch.sin(torch.zeros(8))

# EXTRA_SCHEME_FILE=tests/schemes/toy_forget.py python -m pytest ...: the suite with a sixth scheme registered
# before collection, so every test that runs over the registry runs over it too (tests/README.md).
if os.environ.get("EXTRA_SCHEME_FILE"):
    import schemes
    schemes.load_files(os.environ["EXTRA_SCHEME_FILE"].split(os.pathsep))

ENV = dict(os.environ, OMP_NUM_THREADS="1", MPLBACKEND="Agg")  # the subprocesses: tiny tensors, one thread
if os.environ.get("PYTEST_XDIST_WORKER"):  # pytest -n 2: one core per worker
    torch.set_num_threads(1)

# Tests that share an expensive fixture run on one pytest-xdist worker (--dist loadgroup), so that it is
# built once: {fixture: group}.
GROUPS = {"quick_repo": "quick_repo", "runs": "train_compare_runs", "ran_alone": "field_alone"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The xdist groups (slow too: -m "not slow" leaves out the shared runs), and the long tests first
    (the groups, then the other slow ones): with -n 2 a long test started last would leave the other
    worker idle."""
    for item in items:
        for fixture, group in GROUPS.items():
            if fixture in item.fixturenames:
                item.add_marker(pytest.mark.xdist_group(group))
                item.add_marker(pytest.mark.slow)
    rank = {g: i for i, g in enumerate(GROUPS.values())}

    def order(item):
        group = item.get_closest_marker("xdist_group")
        if group and group.args[0] in rank:  # a group of GROUPS: first
            return rank[group.args[0]]
        return len(rank) + (item.get_closest_marker("slow") is None)  # a group a test file names: as its tests
    items.sort(key=order)


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
    _, val, vocab = corpora.load_corpus(None)
    return corpora.CharTokenizer(vocab).encode(val), vocab


@pytest.fixture
def unrasterised(monkeypatch):
    """Call it to stop writing figures from then on: each figure a script draws is closed unwritten instead of
    rasterised into a PNG (the slow half of a figure). For the reruns of a test whose checks are about something
    else (a finished run skipped, rows merged); the figures themselves are checked in test_plots.py and
    test_plot_style.py, and written by test_smoke_outputs.py's redraw."""
    def off():
        from lab import plot_style, plots
        def close(fig, path, colours=False):
            plot_style._plt().close(fig)
        monkeypatch.setattr(plots, "save", close)
        monkeypatch.setattr(plot_style, "save", close)
    return off


@pytest.fixture
def refused(capsys):
    """refused(main, argv, code=2): a script's main(argv), run in this process, must exit with `code`
    (returned or raised as SystemExit) and write exactly one line on stderr, starting `error:` (a
    progress bar there would mean that work had started; an exception other than SystemExit fails the
    test with its traceback). Returns that line."""
    def check(main, argv, code=2) -> str:
        capsys.readouterr()
        try:
            got = main(argv)
        except SystemExit as e:
            got = e.code
        err = capsys.readouterr().err
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert got == code and len(lines) == 1 and lines[0].startswith("error: "), \
            f"{' '.join(map(str, argv))}: exit {got} (want {code}), stderr: {err[-800:]}"
        return lines[0]
    return check


# ----------------------------------------------------------------------------- a copy of the checkout

WATCHED = ["results", "README.md", "docs"]


def tree_hashes(root: Path, paths=WATCHED) -> dict:
    """{relative path: sha256} of every file under each of paths (files or folders) in root."""
    out = {}
    for p in paths:
        p = root / p
        for f in ([p] if p.is_file() else sorted(p.rglob("*")) if p.is_dir() else []):
            if f.is_file():
                out[str(f.relative_to(root))] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def cached_logits(model, x, prefix: int):
    """Logits of x (B, T): one forward over the first `prefix` tokens, then one token at a time through the cache."""
    out = model(x[:, :prefix])
    pieces, cache = [out.logits], out.cache
    for t in range(prefix, x.shape[1]):
        out = model(x[:, t:t + 1], cache=cache)
        pieces.append(out.logits)
        cache = out.cache
    return torch.cat(pieces, dim=1), cache


def chunk_error(model, ids, full=None) -> float:
    """Max |logit difference| of a forward in chunks of 3 queries (q_chunk = 3 on every block, left so) against
    full, the logits of the model's own chunks (computed here when not given)."""
    with torch.no_grad():
        full = model(ids).logits if full is None else full
        for blk in model.blocks:
            blk.attn.q_chunk = 3
        return (model(ids).logits - full).abs().max().item()


def chunks_and_cache_agree(model, name: str) -> torch.Tensor:
    """Its logits on random ids in chunks of 3 queries and through the cache, 9 tokens then one at a time, both
    against one full forward; returns the ids."""
    ids = torch.randint(0, 20, (2, 24), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = model(ids).logits
        err = chunk_error(model, ids, full)
        assert err < 1e-5, f"{name}: chunks of 3 vs one chunk, max logit diff {err:.2e}"
        err = (cached_logits(model, ids, 9)[0] - full).abs().max().item()
        assert err < 1e-5, f"{name}: cached decoding vs full forward, max logit diff {err:.2e}"
    return ids


@contextlib.contextmanager
def scheme_file_loaded(path, names):
    """{name: entry} of the schemes a --scheme-file registers, registered inside the block only (their
    variants and file record go with them); those a session registered already (EXTRA_SCHEME_FILE) stay."""
    import schemes
    mine = not any(n in schemes.REGISTRY for n in names)
    try:
        if mine:
            assert schemes.load_files([path]) == list(names), f"{path} should register {names}"
        yield {n: schemes.get(n) for n in names}
    finally:
        for n in names if mine else ():
            if n in schemes.REGISTRY:
                schemes.unregister(n)
            schemes.FILES.pop(n, None)


BUILT_CORPUS = ("data/shakespeare.txt", "data/shakespeare.split.json")  # ignored by git, built on first use


def repo_files(repo: Path) -> dict:
    """{path: sha256} of every file of a checkout but runs/, __pycache__ and the built corpus (a clean clone
    builds it on its first run): what no command may change."""
    return {str(f.relative_to(repo)): hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(repo.rglob("*"))
            if f.is_file() and f.relative_to(repo).parts[0] != "runs" and "__pycache__" not in f.parts
            and f.relative_to(repo).as_posix() not in BUILT_CORPUS}


def copy_checkout(dst: Path) -> None:
    """The tracked files as they are in the working tree, plus the built corpus if present."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to list the tracked files")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():  # a tracked file someone is deleting right now is simply left out
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)
    for rel in BUILT_CORPUS:  # saves the build
        if (ROOT / rel).is_file():
            shutil.copy2(ROOT / rel, dst / rel)


# One interpreter runs the commands one after another as __main__ in the copy (torch is imported
# once), each given as "script|arg|arg". Its working directory and sys.path[0] are the copy, so every
# module's HERE is the copy's, as for a user who runs the scripts there. After each command it prints
# "@@@ <exit code> <digest of results/, README.md and docs/>", then the command's stdout and stderr
# between markers. "@copy|src|dst" copies a folder instead (a snapshot between two commands), "@digest"
# only prints the digest; a command marked "!" that fails skips the rest of its phase (the steps after
# it need its outputs).
DRIVER = """
import contextlib, hashlib, io, pathlib, runpy, shutil, sys
sys.path.insert(0, "")
seen = {}  # (path, size, mtime_ns) -> the file's own digest: a file not touched since is not read again
def digest():
    h = hashlib.sha256()
    for top in ("results", "README.md", "docs"):
        p = pathlib.Path(top)
        for f in ([p] if p.is_file() else sorted(p.rglob("*")) if p.is_dir() else []):
            if f.is_file():
                st = f.stat()
                k = (str(f), st.st_size, st.st_mtime_ns)
                if k not in seen:
                    seen[k] = hashlib.sha256(f.read_bytes()).digest()
                h.update(str(f).encode() + b"\\0" + seen[k])
    return h.hexdigest()[:16]
skip = None
for cmd in sys.argv[1:]:
    phase, cmd = cmd.split(":", 1)
    if phase == skip:
        print(f"@@@ skipped {digest()}"); print("@@out"); print(""); print("@@err"); print(""); continue
    stop, cmd = cmd.startswith("!"), cmd.lstrip("!")
    script, *args = cmd.split("|")
    out, err, code = io.StringIO(), io.StringIO(), None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            if script == "@copy":
                shutil.copytree(*args)
            elif script == "@digest":
                pass
            elif script == "@low-dpi":  # every later PNG drawn whole, checked, and written at DPI (args): cheap pixels
                import matplotlib.figure
                def savefig(self, *a, _save=matplotlib.figure.Figure.savefig, _dpi=int(args[0]), **kw):
                    return _save(self, *a, **{**kw, "dpi": _dpi})
                matplotlib.figure.Figure.savefig = savefig
            else:
                sys.argv = [script, *args]
                runpy.run_path(script, run_name="__main__")
        except SystemExit as e:
            code = e.code
        except BaseException:
            import traceback; traceback.print_exc(); code = "exception"
    code = 0 if code is None else code
    if code and stop:
        skip = phase
    print(f"@@@ {code} {digest()}"); print("@@out"); print(out.getvalue()); print("@@err"); print(err.getvalue())
"""


@dataclass
class Ran:
    """What one command did: exit code (as text), stdout, stderr, and the digest of the watched files after it."""
    cmd: str
    code: str
    out: str
    err: str
    digest: str


def run_in_one(repo: Path, phases: dict, timeout=300) -> list:
    """Run {phase: [command, ...]} with DRIVER in repo, the phases in order: a list of Ran, one per command."""
    cmds = [f"{phase}:{'|'.join(c)}" for phase, cs in phases.items() for c in cs]
    r = subprocess.run([sys.executable, "-c", DRIVER, *cmds], cwd=repo, env=ENV, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stderr[-2000:]
    # [code, digest, stdout, stderr] for each command
    parts = re.split(r"^@@@ (\S+) (\S+)\n@@out\n(.*?)\n@@err\n", r.stdout, flags=re.M | re.S)[1:]
    assert len(parts) == 4 * len(cmds), r.stdout[-2000:]
    return [Ran(c.split(":", 1)[1].lstrip("!").replace("|", " "), parts[i], parts[i + 2], parts[i + 3], parts[i + 1])
            for c, i in zip(cmds, range(0, len(parts), 4))]


# ----------------------------------------------------------------------------- the --quick chain

# Each script's smoke mode, with the smallest sizes it accepts where it has such flags; none of
# those flags chooses an output path. train -> extrapolation -> long context -> figures depend on each
# other ("!": the rest of the chain needs them). A piece of the copy family joins the --quick
# checkpoints: the curriculum, a hybrid with the temperature, a fine-tune.
SHRUNK_PREVIEW = ["--preset", "preview", "--steps", "3", "--seq-len", "32", "--batch-size", "4", "--n-layer", "1",
                  "--n-embd", "16", "--n-head", "2"]
CHAIN = [["!train_compare.py", "--quick"],
         ["!train_compare.py", "--quick", "--variants", "rope_copy,irope_copy,rope_copy_ft_yarn,rope_ft_drope,rope_ft_keep"],
         ["extrapolation_test.py", "--quick"],
         ["long_context_test.py", "--quick"],
         ["visualize_rope.py", "--quick"],
         # the preview's code path, shrunk: its presets, folders and table, not its sizes
         ["!train_compare.py", *SHRUNK_PREVIEW],
         ["extrapolation_test.py", "--preset", "preview", "--lengths", "32,64", "--tokens", "256"],
         ["train_compare.py", *SHRUNK_PREVIEW, "--variants", "rope", "--out", "runs/preview_rope"]]
INDEPENDENT = [["experiments/benchmark.py", "--quick", "--lengths", "16,40", "--repeats", "1"],  # read by test_benchmark.py
               ["experiments/breakage_test.py", "--quick", "--wo-steps", "5", "--lm-steps", "4"],  # read by test_breakage_test.py
               ["experiments/recipe_ablation.py", "--quick", "--knobs", "baseline", "--schemes", "rope"],
               ["experiments/synthetic_test.py", "--quick", "--variants", "rope", "--tasks", "mqar"]]  # test_synthetic.py runs more
# The commands in NOT_REAL choose no mode at all: the checkpoints they read are not real runs, and
# that alone must keep them out of results/ (each says where it writes instead). The last one scores
# a preview-shaped rope at the lengths and tokens of results/extrapolation.json, as a new user would:
# it would merge its rows into results/ and rewrite the README's tables. Before them, the chain's
# outputs in runs/quick/results are copied aside (they write there too): QuickRepo.res.
QUICK_EVAL = ["--lengths", "64,128,256,512", "--tokens", "4096", "--scalings", "yarn", "--decode-len", "0"]
NOT_REAL_LC = ["long_context_test.py", "--ckpt-dir", "runs/quick", "--contexts", "0,16,48,112", "--target-len", "32",
               "--spans", "4", "--short", "16", "--distances", "24,48,96", "--trials", "4", "--copy-trials", "8",
               "--scalings", "yarn", "--fixed-scalings", "", "--retrieval-scalings", "", "--variants", "rope,alibi"]
NOT_REAL = [["extrapolation_test.py", "--ckpt-dir", "runs/quick", *QUICK_EVAL],
            NOT_REAL_LC,
            ["visualize_rope.py", "--only", "5", "--ckpt", "runs/quick/rope.pt"],
            ["train_compare.py", "--steps", "2", "--variants", "rope"],  # the real model, 2 steps: runs/main
            ["extrapolation_test.py", "--ckpt-dir", "runs/preview_rope", "--variants", "rope", "--scalings", "yarn",
             "--decode-len", "0"],
            # figure options other than the defaults: the README's figures in results/ must stay as they are
            ["visualize_rope.py", "--only", "1,2", "--head-dim", "64", "--theta", "500"],
            ["visualize_rope.py", "--only", "4", "--factor", "4", "--train-len", "1024"]]
# --results results (--out results for the figures) named explicitly with checkpoints that are not
# real runs: each must be refused.
REFUSED = [["extrapolation_test.py", "--ckpt-dir", "runs/quick", *QUICK_EVAL, "--results", "results"],
           [*NOT_REAL_LC, "--results", "results"],
           ["visualize_rope.py", "--only", "5", "--ckpt", "runs/quick/rope.pt", "--out", "results"],
           ["train_compare.py", "--quick", "--results", "results"],
           ["train_compare.py", "--steps", "2", "--variants", "rope", "--results", "results"],
           ["visualize_rope.py", "--only", "4", "--factor", "4", "--out", "results"]]


# Schemes from outside the repository (tests/schemes/toy_forget.py and toy_qk.py, copied beside the copy of the
# checkout) through every measure with --scheme-file, into runs/plugin: read by tests/test_scheme_file.py. Last,
# so that the schemes they register in the one interpreter meet no other command.
def plugin_commands(scheme_files) -> list:
    f, out, v = [a for p in scheme_files for a in ("--scheme-file", str(p))], "runs/plugin", ",".join(PLUGINS)
    return [["!train_compare.py", "--quick", *f, "--variants", v, "--out", out, "--results", f"{out}/results"],
            ["extrapolation_test.py", "--quick", *f, "--ckpt-dir", out, "--variants", v, "--results",
             f"{out}/results", "--scalings", ""],
            ["long_context_test.py", "--quick", *f, "--ckpt-dir", out, "--variants", v, "--results",
             f"{out}/results"],
            ["experiments/benchmark.py", "--quick", *f, "--lengths", "16,40", "--repeats", "1", "--schemes", f"rope,{v}",
             "--results", f"{out}/benchmark"],
            ["experiments/breakage_test.py", "--quick", *f, "--wo-steps", "5", "--lm-steps", "4", "--wo-schemes", f"none,{v}",
             "--lm-pos", "toy_qk", "--out", f"{out}/breakage"],
            ["experiments/synthetic_test.py", "--quick", *f, "--variants", v, "--tasks", "reverse", "--out",
             f"{out}/synthetic"]]


PLUGINS = ("toy_forget", "toy_qk")  # tests/schemes/<name>.py, each registering the scheme of that name


@dataclass
class QuickRepo:
    repo: Path     # the copy of the checkout the chain ran in
    ck: Path       # its runs/quick: the --quick checkpoints (the chain's and the copy family's piece)
    res: Path      # runs/quick/results as the chain left it, before NOT_REAL wrote there too
    before: dict   # tree_hashes of results/, README.md and docs/ before anything ran
    start: str     # the digest of results/, README.md and docs/ before anything ran
    ran: dict      # {"chain" | "independent" | "not_real" | "refused" | "plugin": [Ran, ...]}
    secs: float
    files: dict    # repo_files of the copy before anything ran


@pytest.fixture(scope="session")
def quick_repo(tmp_path_factory) -> QuickRepo:
    """A copy of the repository in which CHAIN, INDEPENDENT, NOT_REAL and then REFUSED ran, in one
    interpreter. The tests that need --quick checkpoints or outputs read them here (tests that
    write must write elsewhere: --out/--results in their own tmp_path)."""
    top = tmp_path_factory.mktemp("quick")
    repo = top / "repo"
    copy_checkout(repo)
    before, files = tree_hashes(repo), repo_files(repo)
    t0 = time.perf_counter()
    snapshot = [["@copy", "runs/quick/results", str(top / "quick_results")]]
    for name in PLUGINS:  # outside the checkout
        shutil.copy2(ROOT / "tests" / "schemes" / f"{name}.py", top / f"{name}.py")
    plugin = plugin_commands([top / f"{name}.py" for name in PLUGINS])
    # the figures of the smoke runs are drawn and checked whole and written at 50 dpi (what they show: test_plots.py)
    phases = {"start": [["@digest"], ["@low-dpi", "50"]], "chain": CHAIN, "independent": INDEPENDENT, "snapshot": snapshot,
              "not_real": NOT_REAL, "refused": REFUSED, "plugin": plugin}
    ran = run_in_one(repo, phases)
    it = iter(ran)
    by_phase = {p: [next(it) for _ in cs] for p, cs in phases.items()}
    start = by_phase.pop("start")[0].digest
    return QuickRepo(repo, repo / "runs/quick", top / "quick_results", before, start, by_phase,
                     time.perf_counter() - t0, files)


@pytest.fixture
def quick_ck(quick_repo):
    """The --quick checkpoints (runs/quick of the copy), once the chain that trains them succeeded."""
    failed = [f"{r.cmd} exited {r.code}: {r.err[-800:]}" for r in quick_repo.ran["chain"] if r.code != "0"]
    if failed:
        pytest.fail("the --quick chain failed (test_smoke_outputs.py reports it too):\n" + "\n".join(failed))
    return quick_repo.ck
