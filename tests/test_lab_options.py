"""lab/options.py against tiny_lm.py: the bench's options at their defaults are the teaching model, number for
number, and the main job's variants are tiny_lm.TinyLM itself."""
import pytest
import torch

from lab import variants
from lab.options import LAB_DEFAULTS, LabConfig, LabLM, as_lab, make_config, make_model
from tiny_lm import GPTConfig, TinyLM

SMALL = dict(vocab_size=20, n_layer=2, n_head=2, n_embd=16, max_len=64)


@pytest.mark.parametrize("pos", ["none", "learned", "sin", "rope", "alibi"])
def test_lab_model_at_its_defaults_is_the_teaching_model(pos):
    """The same seed builds the same weights in both (the same random draws), and the logits are bit-equal."""
    built = []
    for make in (lambda: TinyLM(GPTConfig(pos=pos, **SMALL)), lambda: LabLM(LabConfig(pos=pos, **SMALL))):
        torch.manual_seed(0)
        built.append((make().eval(), torch.get_rng_state()))
    (plain, rng), (lab, rng2) = built
    assert torch.equal(rng, rng2), "the two models drew a different number of random values"
    sd, sd2 = plain.state_dict(), lab.state_dict()
    assert list(sd) == list(sd2), f"state_dict keys differ: {set(sd) ^ set(sd2)}"
    worst = max((sd[k] - sd2[k]).abs().max().item() for k in sd)
    assert worst == 0, f"weights differ by {worst:.2e}"
    ids = torch.randint(0, 20, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        err = (plain(ids).logits - lab(ids).logits).abs().max().item()
        err_as = (as_lab(plain)(ids).logits - plain(ids).logits).abs().max().item()
    assert err == 0 and err_as == 0, f"logits differ: LabLM {err:.2e}, as_lab {err_as:.2e}"


def test_main_job_variants_are_the_teaching_model_and_bench_variants_extend_it():
    for name in ("none", "learned", "sin", "rope", "alibi"):
        cfg = variants.variant_config(name, {"vocab_size": 20})
        assert type(cfg) is GPTConfig and type(make_model(cfg)) is TinyLM, f"{name}: {type(cfg).__name__}"
    for name in ("irope", "gemma_hybrid", "rope_sink"):
        cfg = variants.variant_config(name, {"vocab_size": 20})
        assert type(cfg) is LabConfig and type(make_model(cfg)) is LabLM, name
    assert type(make_config(**SMALL, **LAB_DEFAULTS)) is GPTConfig, "bench fields at their defaults: a GPTConfig"
    assert len([f for f in GPTConfig.__dataclass_fields__]) <= 12


def test_the_teaching_model_refuses_a_bench_field_in_one_line():
    with pytest.raises(TypeError, match="attn_window"):
        GPTConfig(attn_window=8)
    with pytest.raises(ValueError, match="attn_window must be an int"):
        make_config(attn_window=-1)
