"""Hugging Face's RoPE settings as written (rope_hf.py), without transformers installed.

Every config under tests/hf_configs/ (the RoPE fields of published config.json files, typed in;
nothing is downloaded) loads with rope_hf.from_hf_config, with the head dim, base, rotated
dims and type the model has. Then the pieces one by one: rope_scaling blocks pasted as they stand
(HF's names), transformers-5 blocks (rope_theta and partial_rotary_factor inside), the "default"
type, HF's filling from max_position_embeddings, proportional as p-RoPE, yarn's truncate,
DeepSeek's mscale pair. The same settings against transformers' own code: tests/test_rope_hf_transformers.py
(skipped without it); pos_rope's own scaling dicts: tests/test_pos_rope_scaling.py.
"""
import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pos_rope  # noqa: E402
import rope_hf  # noqa: E402
from pos_rope import ScaledRotaryEmbedding  # noqa: E402
from rope_hf import from_hf_block, from_hf_config  # noqa: E402

CONFIGS = Path(__file__).parent / "hf_configs"


def load(name):
    return json.loads((CONFIGS / name).read_text())


def maxdiff(a, b):
    return (a.double() - b.double()).abs().max().item()


# file, layer_type -> (head_dim, base, rot_dim, rope_p, rope_type (None = plain), pairing)
EXPECTED = {
    ("llama-3.1-8b.json", None): (128, 500000.0, 128, 1.0, "llama3", "half"),
    ("llama-4-scout-17b-16e.json", None): (128, 500000.0, 128, 1.0, "llama3", "adjacent"),  # low = high = 1
    ("qwen2.5-7b-instruct-yarn.json", None): (128, 1000000.0, 128, 1.0, "yarn", "half"),
    ("phi-3.5-mini-instruct.json", None): (96, 10000.0, 96, 1.0, "longrope", "half"),
    ("gpt-oss-20b.json", None): (64, 150000.0, 64, 1.0, "yarn", "half"),
    ("deepseek-v3.json", None): (64, 10000.0, 64, 1.0, "yarn", "adjacent"),  # qk_rope_head_dim; interleaved
    ("gemma-3-4b-it.json", "sliding_attention"): (256, 10000.0, 256, 1.0, None, "half"),
    ("gemma-3-4b-it.json", "full_attention"): (256, 1000000.0, 256, 1.0, "linear", "half"),
    ("gemma-4-e2b.json", "sliding_attention"): (256, 10000.0, 256, 1.0, None, "half"),
    ("gemma-4-e2b.json", "full_attention"): (512, 1000000.0, 512, 0.25, None, "half"),  # proportional: p-RoPE
    ("pythia-160m.json", None): (64, 10000.0, 16, 1.0, None, "half"),  # rotary_pct 0.25 of 64
}


def test_every_config_file_is_covered():
    files = {p.name for p in CONFIGS.glob("*.json")}
    want = {f for f, _ in EXPECTED}
    assert files == want, f"configs without an expectation, or missing: {files ^ want}"


@pytest.mark.parametrize("name, layer_type", sorted(EXPECTED, key=str))
def test_config_loads_with_its_head_dim_base_and_type(name, layer_type):
    head_dim, base, rot_dim, rope_p, kind, pairing = EXPECTED[name, layer_type]
    rope = from_hf_config(load(name), layer_type=layer_type)
    kind_got = rope.scaling and rope.scaling["rope_type"]
    got = (rope.head_dim, rope.base, rope.rot_dim, rope.rope_p, kind_got, rope.pairing)
    assert got == (head_dim, base, rot_dim, rope_p, kind, pairing), f"{name} [{layer_type}]: {got}"
    q = torch.randn(1, 2, 5, head_dim)
    out = rope(q, q, offset=3)[0]
    assert out.shape == q.shape and torch.isfinite(out).all()
    if rot_dim < head_dim:
        assert torch.equal(out[..., rot_dim:], q[..., rot_dim:]), "dims past the rotated ones must pass through"


@pytest.mark.parametrize("name", ["gemma-3-4b-it.json", "gemma-4-e2b.json"])
def test_per_layer_type_configs_need_a_layer_type(name):
    with pytest.raises(ValueError, match=r"give layer_type= one of \['full_attention', 'sliding_attention'\]$"):
        from_hf_config(load(name))
    with pytest.raises(ValueError, match=r"one of \['full_attention', 'sliding_attention'\], not 'global'"):
        from_hf_config(load(name), layer_type="global")


def test_deepseek_v3_exposes_its_extra_softmax_scale():
    """mscale = mscale_all_dim = 1: yarn's attention factor is 1; the softmax gets (0.1 ln 40 + 1)^2 outside RoPE."""
    rope = from_hf_config(load("deepseek-v3.json"))
    assert rope.attention_factor == 1.0
    scale = rope_hf.extra_softmax_scale(load("deepseek-v3.json"))
    assert scale == pytest.approx((0.1 * math.log(40) + 1) ** 2, abs=1e-12)
    assert scale == pytest.approx(1.8738, abs=1e-4)
    plain_yarn = ScaledRotaryEmbedding(64, scaling={"rope_type": "yarn", "factor": 40.0, "original_max_len": 4096})
    assert torch.equal(rope.inv_freq, plain_yarn.inv_freq), "the mscale keys change temperatures, not frequencies"
    for name in ("llama-3.1-8b.json", "gpt-oss-20b.json", "phi-3.5-mini-instruct.json"):
        assert rope_hf.extra_softmax_scale(load(name)) == 1.0, name


def test_deepseek_mscale_ratio_gives_the_attention_factor():
    block = {"type": "yarn", "factor": 40, "mscale": 0.707, "mscale_all_dim": 1.0,
             "original_max_position_embeddings": 4096}
    rope = from_hf_block(64, block)
    m = lambda k: 0.1 * k * math.log(40) + 1  # noqa: E731
    assert rope.attention_factor == pytest.approx(m(0.707) / m(1.0), abs=1e-12)
    only_one = from_hf_block(64, {**block, "mscale_all_dim": None})  # HF needs both for the ratio
    assert only_one.attention_factor == pytest.approx(m(1.0), abs=1e-12)


def test_phi35_longrope_block():
    """48 factors each (head dim 96); L0 from the top-level original_max_position_embeddings; factor 131072/4096."""
    rope = from_hf_config(load("phi-3.5-mini-instruct.json"))
    sc = rope.scaling
    assert len(sc["short_factor"]) == len(sc["long_factor"]) == 48
    assert (sc["original_max_len"], sc["factor"]) == (4096, 32.0)
    assert rope.attention_factor == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)), abs=1e-12)
    plain = pos_rope.rope_inv_freq(96, 10000.0)
    short = plain / torch.tensor(sc["short_factor"])
    assert torch.equal(rope.inv_freq, short), "up to 4096 tokens: the short factors"
    rope.cos_sin(1, offset=4096)  # total length 4097: the long set
    assert torch.equal(rope.inv_freq, plain / torch.tensor(sc["long_factor"]))


def test_longrope_factor_from_max_position_embeddings():
    """As Phi-3: no factor in the block, HF takes max_position_embeddings / original_max_position_embeddings."""
    block = {"rope_type": "longrope", "original_max_position_embeddings": 16,
             "short_factor": [1.0 + 0.1 * i for i in range(8)], "long_factor": [1.0 + i for i in range(8)]}
    a = from_hf_block(16, block, max_position_embeddings=64)
    b = from_hf_block(16, {**block, "factor": 4.0})
    assert a.attention_factor == b.attention_factor and a.scaling == b.scaling


def test_proportional_is_p_rope_over_the_whole_head():
    """Gemma 4's full-attention block: partial_rotary_factor is the share of pairs that turn (rope_p),
    not GPT-NeoX's share of dims."""
    block = {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}
    a = from_hf_block(64, block)
    b = ScaledRotaryEmbedding(64, 1000000.0, rope_p=0.25)
    assert (a.rot_dim, a.rope_p, a.base) == (64, 0.25, 1000000.0)
    assert torch.equal(a.inv_freq, b.inv_freq)
    assert (a.inv_freq[:8] > 0).all() and (a.inv_freq[8:] == 0).all(), "the fastest 8 of 32 pairs turn"
    x = torch.randn(1, 2, 9, 64)
    assert torch.equal(a(x, x, offset=5)[0], b(x, x, offset=5)[0])
    inv, af = pos_rope.scaled_inv_freq(64, **rope_hf.rope_settings(block))  # the frequencies alone, as HF's function
    assert torch.equal(inv, b.inv_freq) and af == 1.0
    scaled = from_hf_block(64, {**block, "factor": 2.0})  # HF divides by a factor too
    assert torch.equal(scaled.inv_freq, b.inv_freq / 2)
    with pytest.raises(ValueError, match="rope_p=0.5 and proportional's partial_rotary_factor=0.25"):
        from_hf_block(64, block, rope_p=0.5)


def test_transformers5_blocks_carry_the_base_and_partial_rotary_factor():
    x = torch.randn(1, 2, 7, 64)
    default = from_hf_block(64, {"rope_type": "default", "rope_theta": 1000000.0})
    assert default.scaling is None and default.base == 1000000.0
    assert torch.equal(default(x, x)[0], ScaledRotaryEmbedding(64, 1000000.0)(x, x)[0])
    neox = from_hf_block(64, {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25})
    assert neox.rot_dim == 16
    assert torch.equal(neox(x, x)[0], ScaledRotaryEmbedding(64, partial_rotary_factor=0.25)(x, x)[0])
    yarn = from_hf_block(64, {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
                              "original_max_position_embeddings": 32768})
    ours = ScaledRotaryEmbedding(64, 1e6, scaling={"rope_type": "yarn", "factor": 4.0, "original_max_len": 32768})
    assert torch.equal(yarn.inv_freq, ours.inv_freq) and yarn.scaling == ours.scaling
    assert from_hf_block(64, {"rope_theta": 500000.0}).base == 500000.0, "no type: HF's default"


def test_original_length_from_max_position_embeddings():
    bare = {"type": "dynamic", "factor": 2.0}
    a = from_hf_block(32, bare, max_position_embeddings=64)
    b = ScaledRotaryEmbedding(32, scaling={"rope_type": "dynamic", "factor": 2.0, "original_max_len": 64})
    assert a.scaling == b.scaling
    assert torch.equal(a.cos_sin(200)[0], b.cos_sin(200)[0])
    with pytest.raises(ValueError, match=r"original_max_position_embeddings.*max_position_embeddings=\.\.\.") as e:
        from_hf_block(32, bare)
    assert "\n" not in str(e.value)
    given = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 100}  # the block's L0 wins
    assert from_hf_block(32, given, max_position_embeddings=64).scaling["original_max_len"] == 100
    no_factor = {"rope_type": "yarn", "original_max_position_embeddings": 4096}  # DeepSeek-style: factor from M / L0
    assert from_hf_block(32, no_factor, max_position_embeddings=16384).scaling["factor"] == 4.0
    with pytest.raises(ValueError, match="yarn needs a factor"):
        from_hf_block(32, no_factor)


def test_from_hf_config_dynamic_uses_max_position_embeddings():
    """HF's dynamic NTK measures the length against the model's max_position_embeddings."""
    cfg = {"hidden_size": 128, "num_attention_heads": 4, "max_position_embeddings": 2048, "rope_theta": 10000.0,
           "rope_scaling": {"type": "dynamic", "factor": 2.0}}
    assert from_hf_config(cfg).scaling["original_max_len"] == 2048
    assert from_hf_config(cfg, max_position_embeddings=512).scaling["original_max_len"] == 512
    cfg.pop("max_position_embeddings")
    with pytest.raises(ValueError, match="needs original_max_len"):
        from_hf_config(cfg)


def test_gpt_oss_truncate_false_keeps_the_fractional_ramp():
    rope = from_hf_config(load("gpt-oss-20b.json"))
    assert rope.scaling["truncate"] is False
    low, high = pos_rope.yarn_correction_range(64, 150000, 4096, 32.0, 1.0, truncate=False)
    assert low != int(low) and high != int(high)
    truncated = from_hf_block(64, {**load("gpt-oss-20b.json")["rope_scaling"], "truncate": True}, base=150000)
    assert maxdiff(rope.inv_freq, truncated.inv_freq) > 1e-6, "truncate false should move the ramp"


def test_gemma3_older_keys_and_transformers5_blocks_agree():
    old = load("gemma-3-4b-it.json")
    t = old["text_config"]
    new = {"text_config": {"head_dim": 256, "hidden_size": 2560, "num_attention_heads": 8,
                           "max_position_embeddings": 131072,
                           "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                               "full_attention": {"rope_type": "linear", "factor": 8.0,
                                                                  "rope_theta": t["rope_theta"]}}}}
    for lt in ("sliding_attention", "full_attention"):
        a, b = from_hf_config(old, lt), from_hf_config(new, lt)
        assert torch.equal(a.inv_freq, b.inv_freq) and a.scaling == b.scaling, lt


def test_remaining_hf_names():
    """Every rope_type of Hugging Face's ROPE_INIT_FUNCTIONS, plus default, is known."""
    assert set(rope_hf.HF_ROPE_TYPES) == {"default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional"}
    assert set(rope_hf.HF_ROPE_TYPES) <= set(rope_hf.KNOWN_TYPES)


# ---------------------------------------------------------------------------- Hugging Face rope_scaling blocks
# Written out as they stand in the models' config.json, next to the same setting in our own keys.
HF_BLOCKS = {
    "llama3.1": ({"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192, "rope_type": "llama3"},
                 {"rope_type": "llama3", "factor": 8.0, "original_max_len": 8192}),
    "qwen-yarn": ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
                  {"rope_type": "yarn", "factor": 4.0, "original_max_len": 32768}),
    "qwen2.5-yarn-legacy": ({"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"},
                            {"rope_type": "yarn", "factor": 4.0, "original_max_len": 32768}),
    "linear-legacy": ({"type": "linear", "factor": 2.0}, {"rope_type": "linear", "factor": 2.0}),
    "dynamic": ({"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 4096},
                {"rope_type": "dynamic", "factor": 2.0, "original_max_len": 4096}),
    "yarn-betas": ({"rope_type": "yarn", "factor": 32.0, "beta_fast": 32, "beta_slow": 1, "attention_factor": 1.2,
                    "original_max_position_embeddings": 4096},
                   {"rope_type": "yarn", "factor": 32.0, "attention_factor": 1.2, "original_max_len": 4096}),
}


@pytest.mark.parametrize("name", sorted(HF_BLOCKS))
def test_hugging_face_blocks_as_they_stand(name):
    """A pasted block gives the same frequencies, attention factor and tables as our own spelling."""
    hf, ours = HF_BLOCKS[name]
    pasted = dict(hf)
    for d, base in ((128, 500000.0), (64, 1000000.0)):
        a, b = from_hf_block(d, pasted, base=base), ScaledRotaryEmbedding(d, base, scaling=ours)
        diff = maxdiff(a.inv_freq, b.inv_freq)
        assert torch.equal(a.inv_freq, b.inv_freq), f"{name}, d={d}: inv_freq max diff {diff:.2e}"
        assert a.attention_factor == b.attention_factor and a.scaling == b.scaling, (a.scaling, b.scaling)
        L = 2 * (b.scaling["original_max_len"] or 50)  # dynamic: a length beyond L0
        assert torch.equal(a.cos_sin(3, L)[0], b.cos_sin(3, L)[0]), f"{name}, d={d}: cos tables differ"
        moved = maxdiff(a.cos_sin(3, L)[0], ScaledRotaryEmbedding(d, base).cos_sin(3, L)[0])
        assert moved > 1e-3, f"{name}: the block changed nothing at length {L}"
    assert pasted == hf, "reading a block must not change the caller's dict"


def test_llama31_block_gives_meta_numbers():
    """Llama 3.1 8B (head dim 128, base 500000): the fastest pair is kept, the slowest divided by 8."""
    rope = from_hf_block(128, HF_BLOCKS["llama3.1"][0], base=500000.0)
    plain = pos_rope.rope_inv_freq(128, 500000.0)
    assert rope.inv_freq[0] == plain[0] and rope.inv_freq[-1] == plain[-1] / 8
    assert rope.attention_factor == 1.0


def test_yarn_attention_factor_in_a_block():
    """HF's attention_factor replaces 0.1 ln(s) + 1 (the same key in pos_rope's dicts: test_pos_rope_scaling)."""
    for af in (1.0, 0.7, 1.5):
        rope = from_hf_block(16, {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 64,
                                  "attention_factor": af})
        c, s = rope.cos_sin(50, 10)
        norm = (c.double() ** 2 + s.double() ** 2).sqrt()
        assert maxdiff(norm, torch.full_like(norm, af)) < 1e-6, f"attention_factor {af}: |(cos, sin)| is not {af}"
    default = from_hf_block(16, {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 64})
    assert default.attention_factor == pytest.approx(0.1 * math.log(16) + 1)


@pytest.mark.parametrize("block, kw, match", [
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "mrope_section": [16, 24, 24]},
     {}, r"does not take \['mrope_section'\] \(mrope_section: multimodal RoPE"),  # Qwen2-VL
    ({"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5},
     {"partial_rotary_factor": 0.25}, "partial_rotary_factor=0.25 and the block's partial_rotary_factor=0.5"),
    ({"rope_type": "default", "rope_theta": 1000000.0}, {"base": 500000.0}, "base=500000.0 and rope_theta=1000000.0"),
    ({"rope_type": "longrope", "factor": 2.0, "original_max_len": 64, "long_factor": [1.0], "short_factor": [1.0]},
     {}, "short_factor has 1 numbers, but the rotated dim 64 has 32 pairs"),
])
def test_hugging_face_keys_we_cannot_honour_are_refused(block, kw, match):
    """What remains refused: keys this module cannot honour, and one setting given two values.
    (DeepSeek's mscale pair, gpt-oss's truncate, longrope and partial_rotary_factor in a block are
    accepted now: the tests above.)"""
    with pytest.raises(ValueError, match=match) as e:
        from_hf_block(64, block, **kw)
    assert "\n" not in str(e.value)


def test_same_value_under_both_names_is_accepted():
    both = {"rope_type": "yarn", "type": "yarn", "factor": 4.0, "original_max_len": 64,
            "original_max_position_embeddings": 64}
    assert rope_hf.rope_settings(both) == rope_hf.rope_settings({"rope_type": "yarn", "factor": 4.0,
                                                                "original_max_len": 64})


@pytest.mark.parametrize("bad, match", [  # HF's spellings (pos_rope's own dicts: test_pos_rope_scaling's list)
    ({"factor": 2.0}, r"rope_type 'default' does not take \['factor'\]"),  # no type: HF's plain RoPE
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256, "original_max_len": 128},
     "original_max_position_embeddings=256 and original_max_len=128, two names of one setting"),
    ({"type": "yarn", "rope_type": "linear", "factor": 4.0}, "type='yarn' and rope_type='linear'"),
    ({"type": "dynamic", "factor": 2.0}, r"needs original_max_len \(HF: original_max_position_embeddings\)"),
    ({"rope_type": "axial", "factor": 2.0}, "unknown rope_type 'axial'"),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "attention_factor": 0.0},
     "attention_factor must be"),
])
def test_bad_hf_blocks_raise(bad, match):
    with pytest.raises(ValueError, match=match) as e:
        from_hf_block(16, bad)
    assert "\n" not in str(e.value), f"the message should be one line: {str(e.value)!r}"
