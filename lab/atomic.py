"""Files written atomically: an interrupted write never leaves a broken file, a finished one is never half-replaced.
Every table, JSON, figure's data, corpus and checkpoint of the repository is written through atomic_write."""
import os
import stat
import tempfile
from pathlib import Path


def new_file_mode(path) -> int:
    """The mode open(path, "w") would leave: an existing file's own, else 0o666 minus the umask."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        umask = os.umask(0o022)  # the only way to read it is to set it; put it back at once
        os.umask(umask)
        return 0o666 & ~umask


def atomic_write(path, write) -> None:
    """write(tmp_path) into a temporary file in path's folder, then os.replace it onto path:
    an interrupted write never leaves a broken file, and a finished one is never half-replaced.
    The file gets the mode a plain open() would give it (mkstemp's own is 0600)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, new_file_mode(path))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def atomic_write_text(path, text: str) -> None:
    """atomic_write for a UTF-8 text file (results tables, JSON, the corpus)."""
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
