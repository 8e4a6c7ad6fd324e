"""The entry scripts' command-line conventions, in one place.

  * A usage error (a bad flag value, a missing file, a folder that cannot be written) is one line on
    stderr, `error: <what was wrong, and what would do>`, and exit code 2, before any training,
    scoring or writing: fail(), and ArgumentParser, whose own errors print no usage block first.
  * Numbers are checked by argparse types that name the flag and the value: finite() refuses NaN and
    inf wherever a float is meant; THREADS and SEED are the flags several scripts share.
  * Progress is a tqdm bar on a terminal, and a plain line every EVERY_S seconds (and one at the end)
    anywhere else, so a log file holds lines, not hundreds of redrawn bars: progress().

    p = cli.ArgumentParser(description=__doc__)
    p.add_argument("--lr", type=cli.finite(above=0))     # --lr nan: "error: argument --lr: ..." exit 2
    for step in cli.progress(range(steps), desc="rope", unit="step"): ...
"""
import argparse
import math
import re
import shlex
import sys
import time

from tqdm import tqdm

USAGE_ERROR = 2  # the exit code of every usage error, as argparse's own


def fail(msg: str):
    """One line on stderr, `error: msg` (on its own line even under a progress bar), then exit 2."""
    tqdm.write(f"error: {msg}", file=sys.stderr)
    sys.exit(USAGE_ERROR)


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, except that a bad command line gets one line and exit 2, without the usage
    block argparse prints before it (--help still prints everything), and that a value starting with a
    minus sign is a value (--lr -inf, --lengths -64,128), so that its check, not argparse, answers it."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self._negative_number_matcher = re.compile(r"^-(\d|\.\d|inf|nan)", re.IGNORECASE)  # argparse's: -N and -.N only

    def error(self, message):
        fail(f"{message} (see --help)")


def command(script: str, argv=None, drop=("--redraw",)) -> str:
    """`python <script> <the user's flags>` (argv, default sys.argv[1:]) without the flags in drop: the
    command a hint suggests repeats the flags the user gave (--quick --out ...), so following it does
    not start another run than theirs."""
    argv = [a for a in (sys.argv[1:] if argv is None else argv) if a not in drop]
    return f"python {script} {shlex.join(argv)}".rstrip()


# ----------------------------------------------------------------------------- argparse types

def integer(at_least: int = None, below: int = None, what: str = None):
    """An argparse type: an int, at least `at_least` and below `below` where given; `what` says what
    would do in the error ("0 (torch's default) or a number of threads")."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if (at_least is not None and value < at_least) or (below is not None and value >= below):
            want = what or (f"an integer from {at_least} to {below - 1}" if at_least is not None and below is not None
                             else f"an integer of at least {at_least}" if at_least is not None
                             else f"an integer below {below}")
            raise argparse.ArgumentTypeError(f"must be {want}, got {value}")
        return value
    parse.__name__ = "integer"
    return parse


def finite(above: float = None, at_least: float = None):
    """An argparse type: a float that is a finite number (no NaN, no inf), greater than `above` and at
    least `at_least` where given."""
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        if above is not None and not value > above:
            raise argparse.ArgumentTypeError(f"must be greater than {above:g}, got {text}")
        if at_least is not None and not value >= at_least:
            raise argparse.ArgumentTypeError(f"must be at least {at_least:g}, got {text}")
        return value
    parse.__name__ = "finite"
    return parse


THREADS = integer(at_least=0, what="0 (torch's default) or a positive number of threads")  # --threads
SEED = integer(at_least=0, below=2 ** 32)  # --seed: what every generator here takes, seed + 1000003 included


# ----------------------------------------------------------------------------- progress

EVERY_S = 30.0  # seconds between two progress lines when stderr is not a terminal


def progress(iterable=None, desc: str = "", total: int = None, unit: str = "it", leave: bool = True,
             disable: bool = False, initial: int = 0, file=None, **bar_kw):
    """A tqdm bar when `file` (default stderr) is a terminal; else Lines, the same calls as plain lines.
    Takes what tqdm takes (iterable, desc, total, unit, leave, disable, initial); the rest goes to tqdm."""
    file = sys.stderr if file is None else file
    if getattr(file, "isatty", lambda: False)():
        return tqdm(iterable, desc=desc, total=total, unit=unit, leave=leave, disable=disable, initial=initial,
                    file=file, dynamic_ncols=True, **bar_kw)
    return Lines(iterable, desc, total, unit, leave, disable, initial, file)


class Lines:
    """A progress bar's calls (iterate, update, set_description, set_postfix, close, with) written as
    `desc: n/total unit, s seconds, postfix`: at most one line per EVERY_S seconds, and one when it
    closes (if leave)."""

    def __init__(self, iterable=None, desc="", total=None, unit="it", leave=True, disable=False, initial=0,
                 file=None):
        self.iterable, self.desc, self.unit, self.leave, self.disable = iterable, desc, unit, leave, disable
        self.total = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)
        self.n, self.postfix, self.file, self.closed = initial, "", file or sys.stderr, False
        self.t0 = self.last = time.monotonic()

    def __iter__(self):
        try:
            for item in self.iterable:
                yield item
                self.update()
        finally:
            self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def update(self, n: int = 1) -> None:
        self.n += n
        if time.monotonic() - self.last >= EVERY_S:
            self.line()

    def set_description(self, desc: str) -> None:
        self.desc = desc

    def set_postfix(self, **kw) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in kw.items())

    def line(self) -> None:
        self.last = time.monotonic()
        if self.disable:
            return
        count = f"{self.n}/{self.total}" if self.total is not None else f"{self.n}"
        print(f"{self.desc}: {count} {self.unit}, {self.last - self.t0:.0f} s" + (f", {self.postfix}" if self.postfix
                                                                                   else ""), file=self.file, flush=True)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.leave:
                self.line()
