"""The model's logits held to tests/fixtures/logit_fixture.pt, written before tiny_lm.py was split and never
changed since (tests/fixtures/make_logit_fixture.py says how): every model config of results/, every registered
scheme at its defaults and RoPE with YaRN at evaluation, at 12 tokens and at 40 (past the trained length 16).
A refactor of the model that moves a number fails here, with the row and the max difference."""
from pathlib import Path

import pytest
import torch

from lab.options import LAB_DEFAULTS, make_config, make_model
from tiny_lm import TinyLM

pytestmark = pytest.mark.usefixtures("one_thread")
FIXTURE = torch.load(Path(__file__).resolve().parent / "fixtures" / "logit_fixture.pt", weights_only=True)


@pytest.mark.parametrize("row", FIXTURE["rows"], ids=[f"{i}:{r['name']}" for i, r in enumerate(FIXTURE["rows"])])
def test_logits_equal_the_fixture_made_before_the_split(row):
    config = dict(row["config"])
    assert config.pop("mlp_ratio", 4) == 4, "tiny_lm.MLP is 4C wide"
    model = make_model(make_config(**config))
    teaching = not any(k in LAB_DEFAULTS and v != LAB_DEFAULTS[k] for k, v in config.items())
    assert (type(model) is TinyLM) == teaching, f"{row['name']}: built as {type(model).__name__}"
    keys = model.state_dict().keys()
    model.load_state_dict({k: row["own"][k] if k in row["own"] else FIXTURE["base"][k] for k in keys})
    model.eval()
    if row["eval_scaling"]:
        model.set_rope_scaling(row["eval_scaling"])
    with torch.no_grad():
        for T, want in row["logits"].items():
            err = (model(FIXTURE["ids"][:, :int(T)]).logits - want).abs().max().item()
            print(f"{row['name']} T={T}: max logit diff {err:.1e}")
            assert err <= 1e-5, f"{row['name']} {row['config']} at T={T}: logits moved, max diff {err:.2e}"
