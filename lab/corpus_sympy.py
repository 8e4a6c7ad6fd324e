"""The second corpus: SymPy's Python source, built offline from the pinned `sympy` package.

Every lesson in this repository was first measured on verse drama (Shakespeare's plays). Source
code is unlike it in every way that matters for positions: long-range repeats (an identifier
defined once and used 300 lines later), indentation that counts, little free word order. The
text comes from the `sympy` wheel pinned in requirements.txt (pure Python, the same bytes on every
machine; torch depends on it, so it is usually installed already). Nothing is downloaded.

The rules, applied in this order to every `*.py` file under the installed package, in path order
(data/README.md states them too):
  1. drop generated code: the ANTLR parsers (any path with an `_antlr/` folder) and
     polys/benchmarks/bench_solvers.py (machine-written systems of equations, 450 KB);
  2. drop vendored copies: sympy/multipledispatch/ (a copy of the multipledispatch package);
  3. cut licence text: a leading paragraph (lines up to a blank line) within a file's first 40
     lines that mentions a licence, copyright or "Permission is hereby granted";
  4. characters: CRLF -> LF, a tab -> 4 spaces, then any character outside printable ASCII
     (space to ~) and newline -> "?"  (the vocabulary is capped at those 96 characters);
  5. drop files that are empty after that, and exact duplicates of an earlier file;
  6. split by whole files: a file is validation when the first 8 hex digits of the SHA-256 of its
     path, read as an integer, are 0 mod 10 (about a tenth, fixed by the path alone).
Each kept file is written as "# file: sympy/<path>\\n<text>\\n\\n", training files first.

The built text's SHA-256 is recorded in corpora.CORPORA; a build that differs (another sympy
version) is refused there, with one line.
"""
import hashlib
import re
from pathlib import Path

PACKAGE = "sympy"
GENERATED = ("polys/benchmarks/bench_solvers.py",)
VENDORED = ("multipledispatch/",)
ALLOWED = set(chr(c) for c in range(32, 127)) | {"\n"}
_LICENCE = re.compile(r"licen[cs]e|copyright|permission is hereby granted", re.IGNORECASE)


def package_dir(package: str = PACKAGE) -> Path:
    """The installed package's folder, found without importing it (importing sympy takes seconds)."""
    import importlib.util
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the `{package}` package is not installed; run `pip install -r requirements.txt`")
    return Path(list(spec.submodule_search_locations)[0])


def package_version(package: str = PACKAGE) -> str:
    import importlib.metadata
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def keep_path(rel: str) -> bool:
    """Rules 1 and 2: is the file at this path (relative to the package, '/'-separated) kept?"""
    return not ("_antlr/" in rel or rel in GENERATED or any(rel.startswith(v) for v in VENDORED))


def cut_licence(text: str) -> str:
    """Rule 3: drop the first paragraph that mentions a licence, if it starts in the first 40 lines."""
    lines = text.split("\n")
    start = 0
    while start < min(len(lines), 40):
        end = start
        while end < len(lines) and lines[end].strip():
            end += 1                                   # [start, end): one paragraph
        if end > start and _LICENCE.search("\n".join(lines[start:end])):
            return "\n".join(lines[:start] + lines[end + 1:])
        start = end + 1
    return text


def clean_chars(text: str) -> str:
    """Rule 4: LF line ends, tabs as 4 spaces, anything outside printable ASCII + newline as '?'."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\t", "    ")
    return "".join(c if c in ALLOWED else "?" for c in text)


def is_validation(rel: str) -> bool:
    """Rule 6: a whole file is held out when its path hashes to 0 mod 10."""
    return int(hashlib.sha256(rel.encode("utf-8")).hexdigest()[:8], 16) % 10 == 0


def documents(root: Path, limit: int = None) -> tuple:
    """([(path, text)] for training, [(path, text)] for validation, {rule: files dropped}) by the
    rules above; `limit` keeps only the first that many files in path order (the tests' slice)."""
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py"))
    if limit is not None:
        files = files[:limit]
    train, val, seen = [], [], set()
    dropped = {"generated or vendored": 0, "empty": 0, "duplicate": 0, "licence cut": 0}
    for rel in files:
        if not keep_path(rel):
            dropped["generated or vendored"] += 1
            continue
        raw = (root / rel).read_text(encoding="utf-8")
        text = cut_licence(raw)
        dropped["licence cut"] += text != raw
        text = clean_chars(text).strip("\n")
        if not text.strip():
            dropped["empty"] += 1
            continue
        digest = hashlib.sha256(text.encode("utf-8")).digest()
        if digest in seen:
            dropped["duplicate"] += 1
            continue
        seen.add(digest)
        (val if is_validation(rel) else train).append((f"{PACKAGE}/{rel}", text))
    return train, val, dropped


def render(docs: list) -> str:
    """The files as one text: a '# file:' line naming each, a blank line after each."""
    return "".join(f"# file: {path}\n{text}\n\n" for path, text in docs)


def build_text(root: Path = None, limit: int = None) -> tuple:
    """(text, meta): the corpus text (training files, then validation files) and its split record."""
    root = Path(root) if root is not None else package_dir()
    train, val, dropped = documents(root, limit)
    train_text, val_text = render(train), render(val)
    meta = {"val_start": len(train_text), "source": f"{PACKAGE} {package_version()}: {PACKAGE}/**/*.py",
            "train_files": len(train), "val_files": len(val), "dropped": dropped,
            "val_rule": "sha256(path)[:8] as an integer is 0 mod 10"}
    return train_text + val_text, meta


if __name__ == "__main__":
    text, meta = build_text()
    print(f"{len(text):,} characters, {len(set(text))} distinct, sha256 {hashlib.sha256(text.encode()).hexdigest()}")
    print(meta)
