"""Hugging Face's RoPE settings as written, without transformers installed.

Every config under tests/hf_configs/ (the RoPE fields of published config.json files, typed in;
nothing is downloaded) loads with RotaryEmbedding.from_hf_config, with the head dim, base, rotated
dims and type the model has. Then the pieces one by one: transformers-5 blocks (rope_theta and
partial_rotary_factor inside), the "default" type, HF's filling from max_position_embeddings,
longrope's switch by total length, proportional as p-RoPE, yarn's truncate, DeepSeek's mscale pair.
The same settings against transformers' own code: tests/test_hf_rope.py (skipped without it).
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
from pos_rope import RotaryEmbedding  # noqa: E402

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
    ("gemma-4-e2b.json", "full_attention"): (512, 1000000.0, 512, 0.25, "proportional", "half"),  # global_head_dim
    ("pythia-160m.json", None): (64, 10000.0, 16, 1.0, None, "half"),  # rotary_pct 0.25 of 64
}


def test_every_config_file_is_covered():
    files = {p.name for p in CONFIGS.glob("*.json")}
    want = {f for f, _ in EXPECTED}
    assert files == want, f"configs without an expectation, or missing: {files ^ want}"


@pytest.mark.parametrize("name, layer_type", sorted(EXPECTED, key=str))
def test_config_loads_with_its_head_dim_base_and_type(name, layer_type):
    head_dim, base, rot_dim, rope_p, kind, pairing = EXPECTED[name, layer_type]
    rope = RotaryEmbedding.from_hf_config(load(name), layer_type=layer_type)
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
        RotaryEmbedding.from_hf_config(load(name))
    with pytest.raises(ValueError, match=r"one of \['full_attention', 'sliding_attention'\], not 'global'"):
        RotaryEmbedding.from_hf_config(load(name), layer_type="global")


def test_deepseek_v3_exposes_its_extra_softmax_scale():
    """mscale = mscale_all_dim = 1: yarn's attention factor is 1; the softmax gets (0.1 ln 40 + 1)^2 outside RoPE."""
    rope = RotaryEmbedding.from_hf_config(load("deepseek-v3.json"))
    assert rope.attention_factor == 1.0
    assert rope.extra_softmax_scale == pytest.approx((0.1 * math.log(40) + 1) ** 2, abs=1e-12)
    assert rope.extra_softmax_scale == pytest.approx(1.8738, abs=1e-4)
    plain_yarn = RotaryEmbedding(64, scaling={"rope_type": "yarn", "factor": 40.0, "original_max_len": 4096})
    assert torch.equal(rope.inv_freq, plain_yarn.inv_freq), "the mscale keys change temperatures, not frequencies"
    for name in ("llama-3.1-8b.json", "gpt-oss-20b.json", "phi-3.5-mini-instruct.json"):
        assert RotaryEmbedding.from_hf_config(load(name)).extra_softmax_scale == 1.0, name


def test_deepseek_mscale_ratio_gives_the_attention_factor():
    block = {"type": "yarn", "factor": 40, "mscale": 0.707, "mscale_all_dim": 1.0,
             "original_max_position_embeddings": 4096}
    rope = RotaryEmbedding(64, scaling=block)
    m = lambda k: 0.1 * k * math.log(40) + 1  # noqa: E731
    assert rope.attention_factor == pytest.approx(m(0.707) / m(1.0), abs=1e-12)
    only_one = RotaryEmbedding(64, scaling={**block, "mscale_all_dim": None})  # HF needs both for the ratio
    assert only_one.attention_factor == pytest.approx(m(1.0), abs=1e-12)


def test_phi35_longrope_block():
    """48 factors each (head dim 96); L0 from the top-level original_max_position_embeddings; factor 131072/4096."""
    rope = RotaryEmbedding.from_hf_config(load("phi-3.5-mini-instruct.json"))
    sc = rope.scaling
    assert len(sc["short_factor"]) == len(sc["long_factor"]) == 48
    assert (sc["original_max_len"], sc["factor"]) == (4096, 32.0)
    assert rope.attention_factor == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)), abs=1e-12)
    plain = pos_rope.rope_inv_freq(96, 10000.0)
    short = plain / torch.tensor(sc["short_factor"])
    assert torch.equal(rope.inv_freq, short), "up to 4096 tokens: the short factors"
    rope.cos_sin(1, offset=4096)  # total length 4097: the long set
    assert torch.equal(rope.dyn_inv, plain / torch.tensor(sc["long_factor"]))


def l_block(L0=16, short=None, long=None, **kw):
    n = 8  # head dim 16
    return {"rope_type": "longrope", "factor": 4.0, "original_max_len": L0,
            "short_factor": short or [1.0 + 0.1 * i for i in range(n)],
            "long_factor": long or [1.0 + i for i in range(n)],
            **kw}


def test_longrope_switches_by_total_length_never_by_position():
    rope = RotaryEmbedding(16, scaling=l_block())
    plain = pos_rope.rope_inv_freq(16)
    af = math.sqrt(1 + math.log(4.0) / math.log(16))
    assert rope.attention_factor == pytest.approx(af, abs=1e-12)
    short = pos_rope.precompute_freqs(16, 40, inv_freq=plain / torch.tensor(l_block()["short_factor"]),
                                      attention_factor=af)
    long = pos_rope.precompute_freqs(16, 40, inv_freq=plain / torch.tensor(l_block()["long_factor"]),
                                     attention_factor=af)
    c, s = rope.cos_sin(16)  # total length 16 = L0: short, every row
    assert torch.equal(c, short[0][:16]) and torch.equal(s, short[1][:16])
    c, s = rope.cos_sin(40)  # total length 40 > L0: long, rows 0..15 included
    assert torch.equal(c, long[0]) and torch.equal(s, long[1]), "beyond L0 every position gets the long factors"
    assert maxdiff(c[:16], short[0][:16]) > 1e-3
    c, s = rope.cos_sin(1, offset=39)  # cached decoding at total length 40: row 39 of the long table
    assert torch.equal(c, long[0][39:40])
    c, s = rope.cos_sin(4, offset=10)  # back within L0: short again
    assert torch.equal(c, short[0][10:14])


def test_longrope_long_table_grows_without_rebuilding_per_step():
    """Decoding token by token beyond L0 reuses the long table (its frequencies do not change with length)."""
    rope = RotaryEmbedding(16, scaling=l_block(), init_len=8)
    rope.cos_sin(100)
    table = rope.dyn_cos
    for off in range(17, 100):
        rope.cos_sin(1, offset=off)
    assert rope.dyn_cos is table, "the long table was rebuilt although its frequencies did not change"


@pytest.mark.parametrize("bad, match", [
    (l_block(short=[1.0] * 3), "short_factor and long_factor must have one number per rotated pair each, got 3 and 8"),
    (l_block(short=[1.0] * 3, long=[1.0] * 3), "short_factor has 3 numbers, but the rotated dim 16 has 8 pairs"),
    (l_block(long=[1.0] * 7 + [0.0]), "long_factor must be a list of numbers > 0"),
    ({**l_block(), "factor": None}, "longrope needs factor or attention_factor"),
])
def test_longrope_bad_blocks(bad, match):
    with pytest.raises(ValueError, match=match):
        RotaryEmbedding(16, scaling=bad)


def test_longrope_factor_from_max_position_embeddings():
    """As Phi-3: no factor in the block, HF takes max_position_embeddings / original_max_position_embeddings."""
    block = {k: v for k, v in l_block().items() if k != "factor"}
    a = RotaryEmbedding(16, scaling=block, max_position_embeddings=64)
    b = RotaryEmbedding(16, scaling={**block, "factor": 4.0})
    assert a.attention_factor == b.attention_factor and a.scaling == b.scaling


def test_proportional_is_p_rope_over_the_whole_head():
    """Gemma 4's full-attention block: partial_rotary_factor is the share of pairs that turn (rope_p),
    not GPT-NeoX's share of dims."""
    block = {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}
    a = RotaryEmbedding(64, scaling=block)
    b = RotaryEmbedding(64, 1000000.0, rope_p=0.25)
    assert (a.rot_dim, a.rope_p, a.base) == (64, 0.25, 1000000.0)
    assert torch.equal(a.inv_freq, b.inv_freq)
    assert (a.inv_freq[:8] > 0).all() and (a.inv_freq[8:] == 0).all(), "the fastest 8 of 32 pairs turn"
    x = torch.randn(1, 2, 9, 64)
    assert torch.equal(a(x, x, offset=5)[0], b(x, x, offset=5)[0])
    inv, af = pos_rope.scaled_inv_freq(64, 10000.0, block)  # the frequencies alone, as HF's function gives them
    assert torch.equal(inv, b.inv_freq) and af == 1.0
    scaled = RotaryEmbedding(64, scaling={**block, "factor": 2.0})  # HF divides by a factor too
    assert torch.equal(scaled.inv_freq, b.inv_freq / 2)
    with pytest.raises(ValueError, match="rope_p=0.5 and proportional's partial_rotary_factor=0.25"):
        RotaryEmbedding(64, scaling=block, rope_p=0.5)


def test_transformers5_blocks_carry_the_base_and_partial_rotary_factor():
    x = torch.randn(1, 2, 7, 64)
    default = RotaryEmbedding(64, scaling={"rope_type": "default", "rope_theta": 1000000.0})
    assert default.scaling is None and default.base == 1000000.0
    assert torch.equal(default(x, x)[0], RotaryEmbedding(64, 1000000.0)(x, x)[0])
    neox = RotaryEmbedding(64, scaling={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25})
    assert neox.rot_dim == 16 and torch.equal(neox(x, x)[0], RotaryEmbedding(64, partial_rotary_factor=0.25)(x, x)[0])
    yarn = RotaryEmbedding(64, scaling={"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
                                        "original_max_position_embeddings": 32768})
    ours = RotaryEmbedding(64, 1e6, scaling={"rope_type": "yarn", "factor": 4.0, "original_max_len": 32768})
    assert torch.equal(yarn.inv_freq, ours.inv_freq) and yarn.scaling == ours.scaling
    assert RotaryEmbedding(64, scaling={"rope_theta": 500000.0}).base == 500000.0, "no type: HF's default"


def test_original_length_from_max_position_embeddings():
    bare = {"type": "dynamic", "factor": 2.0}
    a = RotaryEmbedding(32, scaling=bare, max_position_embeddings=64)
    b = RotaryEmbedding(32, scaling={"rope_type": "dynamic", "factor": 2.0, "original_max_len": 64})
    assert a.scaling == b.scaling
    assert torch.equal(a.cos_sin(200)[0], b.cos_sin(200)[0])
    with pytest.raises(ValueError, match=r"original_max_position_embeddings.*max_position_embeddings=\.\.\.") as e:
        RotaryEmbedding(32, scaling=bare)
    assert "\n" not in str(e.value)
    given = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 100}  # the block's L0 wins
    assert RotaryEmbedding(32, scaling=given, max_position_embeddings=64).scaling["original_max_len"] == 100
    no_factor = {"rope_type": "yarn", "original_max_position_embeddings": 4096}  # DeepSeek-style: factor from M / L0
    assert RotaryEmbedding(32, scaling=no_factor, max_position_embeddings=16384).scaling["factor"] == 4.0
    with pytest.raises(ValueError, match="yarn needs a factor"):
        RotaryEmbedding(32, scaling=no_factor)


def test_from_hf_config_dynamic_uses_max_position_embeddings():
    """HF's dynamic NTK measures the length against the model's max_position_embeddings."""
    cfg = {"hidden_size": 128, "num_attention_heads": 4, "max_position_embeddings": 2048, "rope_theta": 10000.0,
           "rope_scaling": {"type": "dynamic", "factor": 2.0}}
    assert RotaryEmbedding.from_hf_config(cfg).scaling["original_max_len"] == 2048
    assert RotaryEmbedding.from_hf_config(cfg, max_position_embeddings=512).scaling["original_max_len"] == 512
    cfg.pop("max_position_embeddings")
    with pytest.raises(ValueError, match="needs original_max_len"):
        RotaryEmbedding.from_hf_config(cfg)


def test_gpt_oss_truncate_false_keeps_the_fractional_ramp():
    rope = RotaryEmbedding.from_hf_config(load("gpt-oss-20b.json"))
    assert rope.scaling["truncate"] is False
    low, high = pos_rope.yarn_correction_range(64, 150000, 4096, 32.0, 1.0, truncate=False)
    assert low != int(low) and high != int(high)
    truncated = RotaryEmbedding(64, 150000, scaling={**load("gpt-oss-20b.json")["rope_scaling"], "truncate": True})
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
        a, b = RotaryEmbedding.from_hf_config(old, lt), RotaryEmbedding.from_hf_config(new, lt)
        assert torch.equal(a.inv_freq, b.inv_freq) and a.scaling == b.scaling, lt


def test_longrope_factors_rule():
    """Our longrope factors: short all 1; long 1 for pairs YaRN keeps, s for pairs it interpolates,
    a linear ramp between."""
    d, base, s, L0 = 32, 10000.0, 16.0, 256
    short, long = pos_rope.longrope_factors(d, base, s, L0)
    assert short == [1.0] * 16 and len(long) == 16
    low, high = pos_rope.yarn_correction_range(d, base, L0)
    assert all(f == 1.0 for f in long[:low + 1]) and all(f == s for f in long[high:])
    assert all(a <= b for a, b in zip(long, long[1:])), "the factors should grow with the wavelength"
    rope = RotaryEmbedding(d, scaling={"rope_type": "longrope", "short_factor": short, "long_factor": long,
                                       "factor": s, "original_max_len": L0})
    assert torch.equal(rope.inv_freq, pos_rope.rope_inv_freq(d)), "short factors 1: plain frequencies up to L0"
    rope.cos_sin(4 * L0)
    ratio = pos_rope.rope_inv_freq(d) / rope.dyn_inv
    assert maxdiff(ratio, torch.tensor(long)) < 1e-4


def test_remaining_hf_names():
    """Every rope_type of Hugging Face's ROPE_INIT_FUNCTIONS, plus default, is known."""
    assert set(pos_rope.HF_ROPE_TYPES) == {"default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional"}
    assert set(pos_rope.HF_ROPE_TYPES) <= set(pos_rope.KNOWN_TYPES)
