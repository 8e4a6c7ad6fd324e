"""pos_rope and rope_hf against Hugging Face's own code, where transformers is installed (skipped
without it: requirements-test.txt installs it).

1. The functions: inverse frequencies and attention factor of every rope_type in transformers'
   ROPE_INIT_FUNCTIONS (and "default"), each with and without partial rotary, to 1e-6, from the
   same settings block given to both. Lengths on both sides of the switch for dynamic and longrope.
2. The configs: each file under tests/hf_configs/ read by transformers' config class and model
   rotary module, against rope_hf.from_hf_config of the same dict; DeepSeek-V3's extra
   softmax scale (rope_hf.extra_softmax_scale) against transformers' DeepSeek attention.
Written against transformers 5.x (rope_parameters; the functions read partial_rotary_factor from it).
"""
import importlib
import json
import os
import sys
import warnings
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pos_rope  # noqa: E402
import rope_hf  # noqa: E402

# transformers' model code is imported inside the helpers, not here: it takes seconds, and every pytest worker
# imports this file to collect it. The tests share one worker (xdist group "hf"), which pays it once.
pytestmark = pytest.mark.xdist_group("hf")

TOL = 1e-6
D, BASE, M, L0 = 64, 500000.0, 1024, 256  # head dim, rope_theta, max_position_embeddings, original length
transformers.logging.set_verbosity_error()


def hf_config(block, head_dim=D, max_pos=M):
    from transformers import LlamaConfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim,
                           max_position_embeddings=max_pos, rope_parameters=dict(block))


def hf_init(block, seq_len=None):
    """HF's (inv_freq, attention_factor) for a block; "default" through GPT-NeoX's, which honours partial rotary."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding
    cfg = hf_config(block)
    if block.get("rope_type", "default") == "default":
        inv, af = GPTNeoXRotaryEmbedding.compute_default_rope_parameters(cfg)
    else:
        inv, af = ROPE_INIT_FUNCTIONS[block["rope_type"]](cfg, "cpu", seq_len=seq_len)
    return inv, float(af)


SHORT = [1.0 + 0.05 * i for i in range(D // 2)]
LONG = [1.0 + 1.5 * i for i in range(D // 2)]
# name -> (block without rope_theta / partial_rotary_factor, total lengths to compare at; None = at init)
CASES = {
    "default": ({"rope_type": "default"}, [None]),
    "linear": ({"rope_type": "linear", "factor": 4.0}, [None]),
    "dynamic": ({"rope_type": "dynamic", "factor": 2.0}, [None, M // 2, M, M + 1, 3 * M]),
    "yarn": ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": L0}, [None]),
    "yarn-truncate-false": ({"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": L0,
                             "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}, [None]),
    "yarn-attention-factor": ({"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": L0,
                               "attention_factor": 1.25}, [None]),
    "yarn-deepseek-mscale": ({"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": L0,
                              "mscale": 0.707, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1}, [None]),
    "yarn-factor-from-max-len": ({"rope_type": "yarn", "factor": None, "original_max_position_embeddings": L0},
                                 [None]),
    "longrope": ({"rope_type": "longrope", "factor": 8.0, "original_max_position_embeddings": L0,
                  "short_factor": SHORT, "long_factor": LONG}, [None, L0, L0 + 1, 4 * L0]),
    "longrope-factor-from-max-len": ({"rope_type": "longrope", "original_max_position_embeddings": L0,
                                      "short_factor": SHORT, "long_factor": LONG}, [None, L0 + 1]),
    "longrope-attention-factor": ({"rope_type": "longrope", "factor": 8.0, "attention_factor": 1.1,
                                   "original_max_position_embeddings": L0, "short_factor": SHORT,
                                   "long_factor": LONG}, [None, L0 + 1]),
    "llama3": ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": L0}, [None]),
    "llama3-equal-factors": ({"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 1.0,
                              "original_max_position_embeddings": L0}, [None]),  # Llama 4 Scout's form
    "proportional": ({"rope_type": "proportional"}, [None]),
    "proportional-factor": ({"rope_type": "proportional", "factor": 2.0}, [None]),
}
# partial_rotary_factor: GPT-NeoX's share of dims for every type but proportional, where it is the
# share of pairs that turn (p-RoPE's p). longrope's lists shrink with the rotated dim.
PARTIALS = {"proportional": (None, 1.0, 0.5, 0.25), "proportional-factor": (None, 0.25)}


def block_for(name, partial):
    block, _ = CASES[name]
    block = {**block, "rope_theta": BASE}
    if partial is not None:
        block["partial_rotary_factor"] = partial
        if block["rope_type"] == "longrope":
            n = int(D * partial) // 2
            block["short_factor"], block["long_factor"] = block["short_factor"][:n], block["long_factor"][:n]
    return block


PARAMS = [(name, partial, L) for name, (_, lengths) in CASES.items()
          for partial in PARTIALS.get(name, (None, 0.5)) for L in lengths]


@pytest.mark.parametrize("name, partial, seq_len", PARAMS)
def test_inverse_frequencies_and_attention_factor_match_hugging_face(name, partial, seq_len):
    block = block_for(name, partial)
    want_inv, want_af = hf_init(block, seq_len)
    inv, af = pos_rope.scaled_inv_freq(D, seq_len=seq_len, **rope_hf.rope_settings(block, max_position_embeddings=M))
    assert inv.shape == want_inv.shape, f"{name}, partial {partial}: {tuple(inv.shape)} vs HF {tuple(want_inv.shape)}"
    diff = (inv.double() - want_inv.double()).abs().max().item()
    assert diff < TOL, f"{name}, partial {partial}, length {seq_len}: inv_freq max diff {diff:.2e} vs HF"
    assert abs(af - want_af) < TOL, f"{name}, partial {partial}: attention factor {af} vs HF {want_af}"


@pytest.mark.parametrize("name, partial, seq_len", PARAMS)
def test_the_module_uses_the_same_frequencies(name, partial, seq_len):
    """The module built from the block: its table frequencies at that total length are HF's."""
    block = block_for(name, partial)
    want_inv, want_af = hf_init(block, seq_len)
    rope = rope_hf.from_hf_block(D, block, max_position_embeddings=M)
    if seq_len is not None:
        rope.cos_sin(1, offset=seq_len - 1)  # a decoding step at total length seq_len
    inv = rope.inv_freq  # the frequencies of its tables now
    diff = (inv.double() - want_inv.double()).abs().max().item()
    assert diff < TOL, f"{name}, partial {partial}, length {seq_len}: module inv_freq max diff {diff:.2e} vs HF"
    assert abs(rope.attention_factor - want_af) < TOL


CONFIGS = Path(__file__).parent / "hf_configs"
ROTARY = {"llama": ("llama", "LlamaRotaryEmbedding"), "qwen2": ("qwen2", "Qwen2RotaryEmbedding"),
          "phi3": ("phi3", "Phi3RotaryEmbedding"), "gpt_oss": ("gpt_oss", "GptOssRotaryEmbedding"),
          "deepseek_v3": ("deepseek_v3", "DeepseekV3RotaryEmbedding"),
          "gemma3_text": ("gemma3", "Gemma3RotaryEmbedding"), "gemma4_text": ("gemma4", "Gemma4TextRotaryEmbedding"),
          "gpt_neox": ("gpt_neox", "GPTNeoXRotaryEmbedding"), "llama4_text": ("llama4", "Llama4TextRotaryEmbedding")}


def hf_rotary(raw):
    """transformers' config object and rotary module for a config.json dict."""
    from transformers import AutoConfig
    kw = {k: v for k, v in raw.items() if not k.startswith("_") and k != "model_type"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = AutoConfig.for_model(raw["model_type"], **kw)
    text = cfg.get_text_config()
    module, cls = ROTARY[text.model_type]
    rotary = getattr(importlib.import_module(f"transformers.models.{module}.modeling_{module}"), cls)
    return text, rotary(text)


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.json")), ids=lambda p: p.stem)
def test_config_files_read_as_hugging_face_reads_them(path):
    raw = json.loads(path.read_text())
    cfg, rot = hf_rotary(raw)
    nested = hasattr(rot, "rope_type") and isinstance(rot.rope_type, dict) or cfg.model_type == "gemma3_text"
    for layer_type in sorted(set(cfg.layer_types)) if nested else [None]:
        prefix = "" if layer_type is None else f"{layer_type}_"
        want_inv, want_af = getattr(rot, f"{prefix}inv_freq"), getattr(rot, f"{prefix}attention_scaling")
        rope = rope_hf.from_hf_config(raw, layer_type=layer_type)
        assert rope.inv_freq.shape == want_inv.shape, f"{path.name} [{layer_type}]"
        diff = (rope.inv_freq.double() - want_inv.double()).abs().max().item()
        assert diff < TOL, f"{path.name} [{layer_type}]: inv_freq max diff {diff:.2e} vs transformers"
        assert abs(rope.attention_factor - want_af) < TOL, f"{path.name} [{layer_type}]"


def test_phi35_long_set_as_hugging_face_switches():
    raw = json.loads((CONFIGS / "phi-3.5-mini-instruct.json").read_text())
    _, rot = hf_rotary(raw)
    rope = rope_hf.from_hf_config(raw)
    short = rope.inv_freq
    for pos, long in ((4095, False), (4096, True), (9000, True), (100, False)):  # total length pos + 1
        rot(torch.zeros(1), torch.tensor([[pos]]))  # HF switches its inv_freq on max(position_ids) + 1
        rope.cos_sin(1, offset=pos)  # ours too, on the total length offset + T
        assert (rope.inv_freq.double() - rot.inv_freq.double()).abs().max().item() < TOL, f"total length {pos + 1}"
        assert torch.equal(rope.inv_freq, short) != long, f"total length {pos + 1}: long set {long} expected"


def test_deepseek_v3_extra_softmax_scale_matches_its_attention():
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import yarn_apply_mscale
    raw = json.loads((CONFIGS / "deepseek-v3.json").read_text())
    cfg, _ = hf_rotary(raw)
    want = yarn_apply_mscale(cfg.rope_parameters, 1.0)  # the multiplier on qk_head_dim ** -0.5
    assert abs(rope_hf.extra_softmax_scale(raw) - want) < TOL
