"""The names of result rows: one grammar, read here (parse) and written here (Row.name).

A row of a results table names what was evaluated, its parts in this order:

    <base>[_copy][_notemp][_ft[_<recipe>]][+<scaling>[@<factor>]][ (<switch>)][ [<seed>]]

    base      the scheme or base variant: none, rope, alibi, rope_theta10, irope, gemma_hybrid. A name
              this file has never seen (t5, kerple, fire, xpos, fox, rope_sink) is a base like any other
    _copy     trained on the copy curriculum (variants.COPY_OF): rope_copy, gemma_hybrid_copy
    _notemp   trained with Llama 4's attention temperature off: irope_copy_notemp
    _ft       fine-tuned (variants.FINETUNES), then the recipe: at 4x the length yarn, linear, none (the
              control without a scaling; alibi_ft leaves the recipe out); at the same length drope
              (positions dropped, then recalibrated) and keep (its control, positions kept)
    +scaling  a training-free RoPE scaling set at evaluation (eval_common.SCALINGS): rope+yarn;
              ntk(4s) is ntk with 4 times the factor s = L / L_train
    @factor   the same scaling at one fixed factor at every length: rope+yarn@16
    (switch)  an evaluation-time switch of the checkpoint: learned (clamped), irope (no temp),
              irope_copy_notemp (temp on)
    [seed]    the checkpoint of another seed, from the folder of that name: rope [seed1]

Everything before the "+", " (" or " [" is the checkpoint (Row.checkpoint, the file
<checkpoint>.pt). Attention sinks are spelled as a trained variant, a base: rope_sink, rope_sink_copy.

A scheme's options (schemes.Scheme.options) are written into the base, one {option=value} each,
in the order given: kerple{p=2}, kerple{p=2}{bias=log}_copy_ft_none (scheme_options reads them;
values read as true/false, an int, a float, else text). No character a file name cannot hold.
On the command line kerple{p=2,bias=log} is an alias of the same row: canonical() writes it
kerple{p=2}{bias=log}, and split_names() cuts a list of names only at commas outside braces.

    parse("rope_copy_ft_yarn")  -> Row(base="rope", copy=True, finetune="yarn")
    parse("rope+ntk(4s)").multiple == 4;  parse("rope+yarn@16").fixed_factor == 16.0
    row_name("rope", "yarn@16") == "rope+yarn@16";  copy_counterpart("rope+yarn") == "rope_copy+yarn"
"""
import re
from dataclasses import dataclass, replace
from typing import Optional

GRAMMAR = "<base>[_copy][_notemp][_ft[_<recipe>]][+<scaling>[@<factor>]][ (<switch>)][ [<seed>]]"
# the checkpoint, then the optional "+<scaling>[@<factor>]", " (<switch>)" and " [<seed>]"
_ROW = re.compile(r"(?P<checkpoint>[^+ ]+)(?:\+(?P<scaling>[^ ]+))?(?: \((?P<switch>[^()]+)\))?"
                  r"(?: \[(?P<seed>[^\[\]]+)\])?")
_FINETUNE = re.compile(r"(?P<variant>.+?)(?P<ft>_ft(?:_(?P<recipe>.+))?)?")  # the shortest variant that fits
_MULTIPLE = re.compile(r"(?P<kind>.+)\((?P<k>\d+)s\)")  # ntk(4s): kind ntk, 4 times s


@dataclass(frozen=True)
class Row:
    """The parts of a row name (module docstring); Row.name writes them back."""
    base: str                       # rope, alibi, rope_theta10, irope, t5, ...
    copy: bool = False              # _copy: trained on the copy curriculum
    notemp: bool = False            # _notemp: trained with the attention temperature off
    finetune: Optional[str] = None  # None: not a fine-tune; "" for a bare _ft (alibi_ft); else the recipe
    scaling: str = ""               # the training-free scaling after "+", as eval_common.SCALINGS names it
    fixed: str = ""                 # the fixed factor after "@", as written ("16"); "" for none
    switch: str = ""                # clamped, no temp, temp on
    seed: str = ""                  # seed1

    def __post_init__(self):
        if self.fixed and not self.scaling:
            raise ValueError(f"a fixed factor @{self.fixed} needs a scaling to hold fixed")

    @property
    def variant(self) -> str:
        """The trained variant: the checkpoint itself, or the parent a fine-tune continues (rope_copy)."""
        return self.base + ("_copy" if self.copy else "") + ("_notemp" if self.notemp else "")

    @property
    def checkpoint(self) -> str:
        """The checkpoint's name: everything before the scaling, the switch and the seed."""
        if self.finetune is None:
            return self.variant
        return f"{self.variant}_ft" + (f"_{self.finetune}" if self.finetune else "")

    @property
    def plain_row(self) -> str:
        """The checkpoint's own row, as trained: no scaling, no switch, the seed kept (rope_copy [seed1])."""
        return self.checkpoint + (f" [{self.seed}]" if self.seed else "")

    @property
    def scaling_spec(self) -> str:
        """What follows the "+": the scaling and its fixed factor ("yarn@16"), as --scalings spells it."""
        return self.scaling + (f"@{self.fixed}" if self.fixed else "")

    @property
    def name(self) -> str:
        """The row name these parts make: parse(name) gives them back."""
        return self.checkpoint + (f"+{self.scaling_spec}" if self.scaling else "") + \
            (f" ({self.switch})" if self.switch else "") + (f" [{self.seed}]" if self.seed else "")

    @property
    def kind(self) -> str:
        """The scaling without its multiple: ntk for ntk(4s); "" unscaled."""
        m = _MULTIPLE.fullmatch(self.scaling)
        return m["kind"] if m else self.scaling

    @property
    def multiple(self) -> Optional[int]:
        """k of a scaling named <kind>(<k>s): the factor is k times s = L / L_train; 1 when the name
        has no (<k>s), None unscaled or at a fixed factor."""
        if not self.scaling or self.fixed:
            return None
        m = _MULTIPLE.fullmatch(self.scaling)
        return int(m["k"]) if m else 1

    @property
    def fixed_factor(self) -> Optional[float]:
        """The factor after "@" as a number; None when the factor follows the length."""
        return float(self.fixed) if self.fixed else None


_OPTION = re.compile(r"\{(?P<key>[A-Za-z_]\w*)=(?P<value>[^{}]*)\}")


def scheme_options(base: str) -> tuple:
    """(scheme, {option: value}) of a base: "kerple{p=2}{bias=log}" -> ("kerple", {"p": 2, "bias": "log"});
    "rope" -> ("rope", {}). ValueError (one line) when the braces do not read as {option=value}."""
    scheme, brace, rest = base.partition("{")
    options, at = {}, len(scheme)
    for m in _OPTION.finditer(base, at):
        if m.start() != at:
            break
        options[m["key"]], at = _value(m["value"]), m.end()
    if at != len(base) or not scheme:
        raise ValueError(f"{base!r}: options are written <scheme>{{option=value}}{{...}}")
    return scheme, options


def canonical(name: str) -> str:
    """The row name with every {a=1,b=2} written {a=1}{b=2}, the one form results and checkpoints use:
    canonical("fox{gate_bias=1.0,decay_max=64.0}_copy") == "fox{gate_bias=1.0}{decay_max=64.0}_copy"."""
    return re.sub(r"\{([^{}]*)\}", lambda m: "".join(f"{{{part}}}" for part in m[1].split(",")), name)


def split_names(text: str) -> list:
    """The names of a comma-separated list (--variants), cut only at commas outside braces, each in its
    canonical form; empty parts dropped: "rope,fox{gate_bias=1.0,decay_max=64.0}" -> two names."""
    parts = re.split(r",(?![^{}]*\})", text or "")
    return [canonical(p) for p in parts if p]


def _value(text: str):
    """An option's value as written in a name: true/false, an int, a float, else the text."""
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def scaling_parts(spec: str) -> tuple:
    """(scaling, fixed factor as written or "") of what follows a row's "+": "yarn@16" -> ("yarn",
    "16"). Raises ValueError if the factor after "@" is not a number."""
    scaling, at, fixed = spec.partition("@")
    if at:
        try:
            float(fixed)
        except ValueError:
            raise ValueError(f"the factor after @ in {spec!r} is not a number") from None
    return scaling, fixed


def parse(name: str) -> Row:
    """The parts of a row name; ValueError (one line) if it does not follow the grammar."""
    m = _ROW.fullmatch(name)
    if m is None or not m["checkpoint"]:
        raise ValueError(f"{name!r} is not a row name: {GRAMMAR}")
    try:
        scaling, fixed = scaling_parts(m["scaling"]) if m["scaling"] else ("", "")
    except ValueError as e:
        raise ValueError(f"{name!r} is not a row name: {e}") from None
    ft = _FINETUNE.fullmatch(m["checkpoint"])
    variant = ft["variant"]
    notemp = variant.endswith("_notemp")
    variant = variant.removesuffix("_notemp")
    copy = variant.endswith("_copy")
    base = variant.removesuffix("_copy")
    if not base or (m["scaling"] is not None and not scaling):
        raise ValueError(f"{name!r} is not a row name: {GRAMMAR}")
    finetune = None if ft["ft"] is None else (ft["recipe"] or "")
    return Row(base, copy, notemp, finetune, scaling, fixed, m["switch"] or "", m["seed"] or "")


def row_name(checkpoint: str, scaling: str = "", switch: str = "", seed: str = "") -> str:
    """The row of a checkpoint evaluated with a scaling ("yarn", "yarn@16"), an evaluation switch,
    or from another seed's folder: row_name("rope", "yarn") == "rope+yarn"."""
    scaling, fixed = scaling_parts(scaling) if scaling else ("", "")
    row = replace(parse(checkpoint), scaling=scaling, fixed=fixed, switch=switch, seed=seed)
    if parse(row.name) != row:  # e.g. a switch with a bracket in it: the name would read back otherwise
        raise ValueError(f"{row.name!r} would not read back as the row it names")
    return row.name


def copy_counterpart(name: str) -> str:
    """The same row of the copy-trained model: alibi -> alibi_copy, rope+yarn -> rope_copy+yarn,
    rope_ft_yarn -> rope_copy_ft_yarn."""
    return replace(parse(name), copy=True).name


def text_counterpart(name: str) -> str:
    """The plain row of the text-trained model a copy-trained row is the twin of: rope_copy+yarn ->
    rope, rope_copy_ft_yarn -> rope_ft_yarn, rope_copy [seed1] -> rope [seed1]; irope_copy_notemp ->
    irope (the text models were all trained with their temperature)."""
    return replace(parse(name), copy=False, notemp=False).plain_row
