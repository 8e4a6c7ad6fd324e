"""The field's schemes (docs/field.md): scheme files in field/, written to schemes.py's contract as a reader's would
be. They register themselves when imported; load() imports them, above schemes.py, in the registry's order. Importing
lab (every script does) loads them; importing the model (tiny_lm.py) does not. field/ joins the import path, so after
load() any module may `import field_fox`."""
import importlib
import sys
from pathlib import Path

FIELD_DIR = Path(__file__).resolve().parents[1] / "field"
FIELD_FIRST = ("field_relbias", "field_xpos", "field_fox")  # t5, kerple, fire; xpos; fox: the registry's order


def load() -> None:
    """Import every field/field_*.py once: FIELD_FIRST, then the others by name (a new one needs no line here)."""
    if str(FIELD_DIR) not in sys.path:
        sys.path.append(str(FIELD_DIR))
    for name in (*FIELD_FIRST, *sorted(p.stem for p in FIELD_DIR.glob("field_*.py") if p.stem not in FIELD_FIRST)):
        importlib.import_module(name)
