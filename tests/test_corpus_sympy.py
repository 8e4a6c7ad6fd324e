"""The second corpus: corpus_sympy's rules on a package made here and on a slice of the pinned sympy,
and tiny_lm's named corpora (names, the recorded SHA-256, the folders their runs write). The full
build (25M characters) is not run here."""
import hashlib
import json
from pathlib import Path

import pytest

from lab import corpus_sympy as CS
from lab import eval_common as EC
import tiny_lm
from lab import corpora
from lab import variants
from lab.corpora import CorpusError


def _write(root: Path, rel: str, text: str):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8"))


def test_each_rule_on_a_package_made_here(tmp_path):
    """Generated, vendored, empty and duplicate files dropped; a licence paragraph cut; characters
    mapped; validation by the hash of the path; one '# file:' line per kept file."""
    root = tmp_path / "pkg"
    body = "def f(x):\n\treturn x  # \u03b8\r\n"
    _write(root, "core/a.py", body)
    _write(root, "core/copy_of_a.py", body)                       # a duplicate of a.py after cleaning
    _write(root, "parsing/_antlr/parser.py", "x = 1\n")            # generated
    _write(root, CS.GENERATED[0], "y = 2\n")                       # generated
    _write(root, "multipledispatch/core.py", "z = 3\n")            # vendored
    _write(root, "empty/__init__.py", "\n\n")
    _write(root, "lic.py", "'''Doc.'''\n\n# Copyright (c) someone\n# MIT licence text\n\nimport os\n")
    train, val, dropped = CS.documents(root)
    kept = dict(train + val)
    assert sorted(kept) == ["sympy/core/a.py", "sympy/lic.py"], sorted(kept)
    assert dropped == {"generated or vendored": 3, "empty": 1, "duplicate": 1, "licence cut": 1}, dropped
    assert kept["sympy/core/a.py"] == "def f(x):\n    return x  # ?", repr(kept["sympy/core/a.py"])
    assert kept["sympy/lic.py"] == "'''Doc.'''\n\nimport os", repr(kept["sympy/lic.py"])
    for path, _ in train + val:   # the split rule, computed here from the path
        held_out = int(hashlib.sha256(path[len("sympy/"):].encode()).hexdigest()[:8], 16) % 10 == 0
        assert held_out == (path in dict(val)), path
    text, meta = CS.build_text(root)
    assert text.count("# file: ") == 2 and text[meta["val_start"]:] == CS.render(val), meta
    assert {"val_start", "source", "train_files", "val_files", "dropped"} <= set(meta)


def test_a_slice_of_the_pinned_package_keeps_the_rules():
    """The first 120 files of the installed sympy: only printable ASCII and newline, no two files
    alike, no generated or vendored path, validation exactly the files whose path hashes to 0 mod 10,
    and a second build byte-identical."""
    root = CS.package_dir()
    train, val, dropped = CS.documents(root, limit=120)
    assert len(train) > 50 and dropped["empty"] > 0, (len(train), dropped)
    texts = [t for _, t in train + val]
    bad = sorted({c for t in texts for c in t} - CS.ALLOWED)
    assert not bad, f"characters outside the cap: {bad[:10]}"
    assert len(set(texts)) == len(texts), "a duplicate file was kept"
    for path, _ in train + val:
        rel = path[len("sympy/"):]
        assert "_antlr/" not in rel and not rel.startswith("multipledispatch/"), path
        held_out = int(hashlib.sha256(rel.encode()).hexdigest()[:8], 16) % 10 == 0
        assert held_out == (path in dict(val)), path
    assert CS.build_text(root, limit=40) == CS.build_text(root, limit=40), "two builds differ"


def test_corpus_names_paths_and_the_recorded_hash(tmp_path, monkeypatch):
    """A name resolves to data/<file>, built on first use; a build or a file whose SHA-256 is not the
    recorded one is refused with one line; a folder or an unknown name says what to pass."""
    assert set(corpora.CORPORA) >= {"shakespeare", "sympy"} and corpora.DEFAULT_NAME == "shakespeare"
    assert corpora.corpus_name(None) == "shakespeare" and corpora.corpus_name("sympy") == "sympy"
    assert corpora.corpus_name(corpora.DATA_DIR / "sympy.txt") == "sympy"
    assert corpora.corpus_name(tmp_path / "x.txt") is None
    with pytest.raises(CorpusError, match="is a folder"):
        corpora.load_corpus(tmp_path)
    with pytest.raises(CorpusError, match="neither a file nor a corpus name.*shakespeare, sympy"):
        corpora.load_corpus("sympi")

    text = "# file: sympy/a.py\nx = 1\n\n" * 100
    fake = {"file": "tiny.txt", "package": "tiny==1", "what": "test", "sha256": hashlib.sha256(text.encode()).hexdigest()}
    monkeypatch.setattr(corpora, "DATA_DIR", tmp_path)
    monkeypatch.setitem(corpora.CORPORA, "tiny", fake)
    monkeypatch.setattr(corpora, "named_corpus_text", lambda name: (text, {"val_start": 2000}))
    train, val, vocab = corpora.load_corpus("tiny")        # built on first use, split by its record
    assert train + val == text and len(train) == 2000 and vocab == "".join(sorted(set(text)))
    assert json.loads((tmp_path / "tiny.split.json").read_text())["sha256"] == fake["sha256"]
    (tmp_path / "tiny.txt").write_text(text + "edited")
    with pytest.raises(CorpusError, match="not the recorded build of corpus tiny.*delete it"):
        corpora.load_corpus("tiny")
    (tmp_path / "tiny.txt").unlink()
    monkeypatch.setitem(corpora.CORPORA, "tiny", {**fake, "sha256": "0" * 64})
    with pytest.raises(CorpusError, match=r"install the pinned tiny==1"):
        corpora.load_corpus("tiny")
    assert not (tmp_path / "tiny.txt").exists(), "a refused build was written"


def test_a_named_corpus_has_its_own_folders_and_real_results():
    """runs/main/NAME and results/NAME for a real run, runs/<mode>/NAME/results for the others; only a
    run on that corpus is real for results/NAME, and only the default corpus for results/."""
    assert variants.run_dirs(corpus="sympy") == (Path("runs/main/sympy"), Path("results/sympy"))
    assert variants.run_dirs(corpus="shakespeare") == variants.run_dirs() == (Path("runs/main"), Path("results"))
    assert variants.run_dirs(quick=True, corpus="sympy") == (Path("runs/quick/sympy"), Path("runs/quick/sympy/results"))
    assert variants.run_dirs(preset="gpu", corpus="sympy") == (Path("runs/gpu/sympy"), Path("results/gpu/sympy"))
    repo = EC.HERE / "results"
    assert EC.real_results_corpus(repo) == "shakespeare" and EC.real_results_corpus(repo / "sympy") == "sympy"
    assert EC.real_results_corpus(repo / "gpu") == "shakespeare" and EC.real_results_corpus(repo / "gpu/sympy") == \
        "sympy", "the gpu preset's folders hold real runs of their corpus too"
    assert EC.real_results_corpus("runs/quick/results") is None
    assert EC.corpus_mismatch("sympy", repo / "sympy") == [] and EC.corpus_mismatch(None, repo) == []
    assert EC.corpus_mismatch("sympy", repo) == ["corpus sympy (real runs there: corpus shakespeare)"]
    assert EC.corpus_mismatch(None, repo / "sympy") == ["corpus shakespeare (real runs there: corpus sympy)"]
    sha = corpora.CORPORA["sympy"]["sha256"]
    made = {"config": {}, "extra": {"provenance": {"corpus_sha256": sha}}}
    assert EC.provenance_of(made)["corpus"] == "sympy", "a row of the second corpus names it"
    made["extra"]["provenance"]["corpus_sha256"] = corpora.CORPORA["shakespeare"]["sha256"]
    assert "corpus" not in EC.provenance_of(made), "the default corpus's rows stay as they were"
