"""row_names: the one grammar of result-row names. Every name the results use today parses into the
parts it stands for and is written back unchanged; the names later issues bring (new schemes,
fine-tune recipes, sinks) parse as plain parts; and a malformed name is one ValueError."""
import pytest

from lab import row_names
from lab import variants
from lab.row_names import Row

# every kind of row name in results/, and what it means
NAMES = {
    "rope": Row("rope"),
    "rope+yarn": Row("rope", scaling="yarn"),
    "rope+ntk(4s)": Row("rope", scaling="ntk(4s)"),
    "rope+yarn@16": Row("rope", scaling="yarn", fixed="16"),
    "rope_ft_yarn": Row("rope", finetune="yarn"),
    "rope_ft_none": Row("rope", finetune="none"),
    "alibi_ft": Row("alibi", finetune=""),
    "rope_copy": Row("rope", copy=True),
    "rope_copy+yarn": Row("rope", copy=True, scaling="yarn"),
    "rope_copy_ft_yarn": Row("rope", copy=True, finetune="yarn"),
    "alibi_copy_ft": Row("alibi", copy=True, finetune=""),
    "irope (no temp)": Row("irope", switch="no temp"),
    "irope_copy_notemp (temp on)": Row("irope", copy=True, notemp=True, switch="temp on"),
    "learned (clamped)": Row("learned", switch="clamped"),
    "rope [seed1]": Row("rope", seed="seed1"),
    "rope_theta10": Row("rope_theta10"),
    "rope_partial25": Row("rope_partial25"),
    "irope_global": Row("irope_global"),
    "gemma_hybrid_copy": Row("gemma_hybrid", copy=True),
}
# names later issues bring: an unknown base is a base, a new recipe a recipe
LATER = {
    "t5": Row("t5"), "kerple_copy": Row("kerple", copy=True),
    "fire_copy_ft_yarn": Row("fire", copy=True, finetune="yarn"),
    "xpos+yarn": Row("xpos", scaling="yarn"), "fox_copy (no temp)": Row("fox", copy=True, switch="no temp"),
    "rope_ft_drope": Row("rope", finetune="drope"), "rope_copy_ft_drope": Row("rope", copy=True, finetune="drope"),
    "rope_sink": Row("rope_sink"),
    "rope_sink_copy+ntk(16s)@8": Row("rope_sink", copy=True, scaling="ntk(16s)", fixed="8"),
    "alibi_ft [seed2]": Row("alibi", finetune="", seed="seed2"),
}


@pytest.mark.parametrize("name", list(NAMES) + list(LATER))
def test_names_parse_into_their_parts_and_back(name):
    want = {**NAMES, **LATER}[name]
    got = row_names.parse(name)
    assert got == want, f"{name!r}: parsed {got}, expected {want}"
    assert got.name == name, f"{name!r} is written back as {got.name!r}"


def test_every_registry_name_is_its_own_checkpoint():
    """Each variant's name parses to a checkpoint of that name; a fine-tune's variant is its parent,
    and _copy marks exactly the copy family."""
    for name in variants.ALL_NAMES:
        r = row_names.parse(name)
        assert r.checkpoint == name and r.name == name and not (r.scaling or r.switch or r.seed), (name, r)
        assert r.copy == variants.is_copy(name), f"{name}: _copy says {r.copy}, the registry otherwise"
        if name in variants.FINETUNES:
            assert r.variant == variants.FINETUNES[name]["parent"], (name, r.variant)
        else:
            assert r.finetune is None and r.variant == name, (name, r)


def test_derived_parts():
    r = row_names.parse("rope_copy_ft_yarn+ntk(4s) (clamped) [seed3]")
    assert (r.variant, r.checkpoint, r.scaling_spec) == ("rope_copy", "rope_copy_ft_yarn", "ntk(4s)"), r
    assert r.plain_row == "rope_copy_ft_yarn [seed3]", r.plain_row
    assert (r.kind, r.multiple, r.fixed_factor) == ("ntk", 4, None)
    r = row_names.parse("rope+yarn@16")
    assert (r.kind, r.multiple, r.fixed_factor, r.scaling_spec) == ("yarn", None, 16.0, "yarn@16"), r
    plain, scaled = row_names.parse("rope"), row_names.parse("rope+yarn")
    assert (scaled.multiple, plain.multiple, plain.kind) == (1, None, ""), (scaled, plain)
    assert row_names.parse("irope_copy_notemp").variant == "irope_copy_notemp"


def test_row_name_and_counterparts():
    assert row_names.row_name("rope", "yarn@16") == "rope+yarn@16"
    assert row_names.row_name("rope_copy", "ntk(4s)") == "rope_copy+ntk(4s)"
    assert row_names.row_name("learned", switch="clamped") == "learned (clamped)"
    assert row_names.row_name("irope_copy", switch="no temp") == "irope_copy (no temp)"
    assert row_names.row_name("rope", seed="seed1") == "rope [seed1]"
    texts = ("alibi", "rope+yarn", "rope_ft_yarn", "alibi_ft", "gemma_hybrid")
    assert [row_names.copy_counterpart(n) for n in texts] == \
        ["alibi_copy", "rope_copy+yarn", "rope_copy_ft_yarn", "alibi_copy_ft", "gemma_hybrid_copy"]
    copies = ("rope_copy+yarn", "rope_copy_ft_yarn", "irope_copy_notemp (temp on)", "alibi_copy_ft", "rope_copy [seed1]")
    assert [row_names.text_counterpart(n) for n in copies] == ["rope", "rope_ft_yarn", "irope", "alibi_ft",
                                                               "rope [seed1]"]


@pytest.mark.parametrize("bad", ["", "rope+", "+yarn", "rope+@16", "rope+yarn@x", "rope+yarn@", "rope (clamped",
                                 "rope [seed1", "rope  (clamped)", "rope [seed1] (clamped)", "_copy", "rope yarn"])
def test_malformed_names_are_one_line_errors(bad):
    with pytest.raises(ValueError) as e:
        row_names.parse(bad)
    assert "\n" not in str(e.value) and repr(bad) in str(e.value), str(e.value)


def test_fixed_factor_needs_a_scaling():
    with pytest.raises(ValueError, match="needs a scaling"):
        Row("rope", fixed="16")


def test_copy_counterpart_names():
    assert [row_names.copy_counterpart(n) for n in ("alibi", "rope+yarn", "rope_ft_yarn", "alibi_ft")] == \
        ["alibi_copy", "rope_copy+yarn", "rope_copy_ft_yarn", "alibi_copy_ft"]


def test_options_in_one_brace_are_an_alias_of_the_canonical_row():
    """{a=1,b=2} names the row {a=1}{b=2}: canonical writes it so, scheme_options reads the same options, and
    split_names cuts a --variants list only at commas outside braces."""
    alias, row = "fox{gate_bias=1.0,decay_max=64.0}_copy", "fox{gate_bias=1.0}{decay_max=64.0}_copy"
    assert row_names.canonical(alias) == row and row_names.canonical(row) == row
    assert row_names.scheme_options(row_names.parse(row_names.canonical(alias)).base) == \
        ("fox", {"gate_bias": 1.0, "decay_max": 64.0})
    assert row_names.split_names(f"rope,{alias},,t5{{scale=2.0}}") == ["rope", row, "t5{scale=2.0}"]
