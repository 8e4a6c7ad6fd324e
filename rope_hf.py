"""Hugging Face's RoPE settings read into pos_rope's modules: a whole config.json (a dict), or one block.

transformers keeps a model's RoPE in a block, rope_scaling (transformers 4) or rope_parameters
(transformers 5), beside max_position_embeddings, rope_theta and model-specific keys. This file
reads them as transformers 5 does (configuration_utils' standardize_rope_params, the model
configs' convert_rope_params_to_dict, modeling_rope_utils' _compute_*_parameters) and hands
pos_rope.ScaledRotaryEmbedding explicit arguments:
  * rope_settings(block): base, partial_rotary_factor, rope_p and the scaling in pos_rope's keys,
    from HF's names ("type", "original_max_position_embeddings"), its "default" and "proportional"
    types, DeepSeek's mscale pair, and what HF fills from the model's max_position_embeddings;
  * from_hf_block(head_dim, block) and from_hf_config(config, layer_type): the module;
  * extra_softmax_scale(config): DeepSeek's factor on the attention logits, outside RoPE.
The module pairs dims as HF's code does for the model: "half" (rotate_half), or "adjacent" for
DeepSeek's and Llama 4's interleaved layout (the same dot products either way).
Imports pos_rope and nothing else of this repository.
"""
import math

from pos_rope import NEEDS_ORIGINAL_LEN, SCALING_TYPES, ScaledRotaryEmbedding

HF_ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional")  # all of HF's
KNOWN_TYPES = HF_ROPE_TYPES + tuple(t for t in SCALING_TYPES if t not in HF_ROPE_TYPES)  # + pos_rope's "ntk"
HF_NAMES = {"type": "rope_type", "original_max_position_embeddings": "original_max_len"}  # HF's name -> pos_rope's
BLOCK_KEYS = ("rope_theta", "partial_rotary_factor")  # module settings a transformers-5 block carries
REFUSED = {  # keys of real configs that pos_rope cannot honour
    "mrope_section": "multimodal RoPE (Qwen2-VL and later) splits the pairs among time, height and width "
                     "positions; this module turns every pair by one position per token"}
INTERLEAVED = ("deepseek_v2", "deepseek_v3", "llama4_text")  # model types whose HF code pairs 2i with 2i+1


def rope_settings(block: dict, base: float = 10000.0, partial_rotary_factor: float = 1.0, rope_p: float = 1.0,
                  max_position_embeddings: int = None) -> dict:
    """ScaledRotaryEmbedding's base, partial_rotary_factor, rope_p and scaling (pos_rope's keys; None for
    plain RoPE) from one Hugging Face block; the scaling is checked when the module is built.

    The block's rope_theta and partial_rotary_factor replace the arguments left at their defaults (two
    different values of one setting are an error); in a "proportional" block (Gemma 4) partial_rotary_factor
    is the share of pairs that turn, p-RoPE's rope_p, and a factor is linear scaling. max_position_embeddings,
    the model's, fills what HF fills from it: a missing original_max_position_embeddings, and yarn's or
    longrope's missing factor (max_position_embeddings / original_max_position_embeddings)."""
    if not isinstance(block, dict):
        raise ValueError(f"a Hugging Face RoPE block is a dict like {{'rope_type': 'yarn', 'factor': 4.0, "
                         f"'original_max_position_embeddings': 32768}}, got {type(block).__name__}")
    sc = _our_names(block)
    kind = sc.setdefault("rope_type", "default")  # as HF: a block without a type is plain RoPE
    if kind not in KNOWN_TYPES:
        raise ValueError(f"unknown rope_type {kind!r}; use one of {', '.join(KNOWN_TYPES)} "
                         f"(Hugging Face's names, and pos_rope's static 'ntk')")
    refused = [k for k in sc if k in REFUSED]
    if refused:
        raise ValueError(f"rope_type {kind!r} does not take {refused} ({refused[0]}: {REFUSED[refused[0]]})")
    theta, share = sc.pop("rope_theta", None), sc.pop("partial_rotary_factor", None)
    if theta is not None:
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 1:
            raise ValueError(f"rope_theta (the base) must be a number > 1, got {theta!r}")
        base = _one_value("base", base, 10000.0, "rope_theta", theta)
    if kind == "proportional":  # HF's p-RoPE: the fastest share of the pairs turn, the exponent over the whole head
        share = 1.0 if share is None else share
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
            raise ValueError(f"proportional's partial_rotary_factor (the share of pairs that turn, p-RoPE's p) "
                             f"must be a number in [0, 1], got {share!r}")
        rope_p = _one_value("rope_p", rope_p, 1.0, "proportional's partial_rotary_factor", share)
    elif share is not None:
        partial_rotary_factor = _one_value("partial_rotary_factor", partial_rotary_factor, 1.0,
                                           "the block's partial_rotary_factor", share)
    if max_position_embeddings is not None:
        _fill_from_max_len(sc, max_position_embeddings)
    if kind == "yarn":
        _deepseek_attention_factor(sc)
    if kind in ("default", "proportional"):  # plain RoPE, or p-RoPE with linear scaling by an optional factor
        allowed = {"rope_type", "original_max_len"} | ({"factor"} if kind == "proportional" else set())
        extra = sorted(set(sc) - allowed)
        if extra:
            raise ValueError(f"rope_type {kind!r} does not take {extra}; it takes {sorted(allowed | set(BLOCK_KEYS))}")
        sc = {"rope_type": "linear", "factor": sc["factor"]} if "factor" in sc else None
    elif sc.get("original_max_len") is None and kind in NEEDS_ORIGINAL_LEN:
        raise ValueError(f"rope_type {kind!r} needs original_max_len (HF: original_max_position_embeddings), the "
                         f"sequence length the model was trained at; Hugging Face takes the model's "
                         f"max_position_embeddings when the block has none: give max_position_embeddings=...")
    elif kind == "yarn" and sc.get("factor") is None:
        raise ValueError("yarn needs a factor; Hugging Face sets a missing one to max_position_embeddings / "
                         "original_max_position_embeddings: give max_position_embeddings=...")
    return {"base": base, "partial_rotary_factor": partial_rotary_factor, "rope_p": rope_p, "scaling": sc}


def _our_names(block: dict) -> dict:
    """A copy of the block with HF's names of settings replaced by pos_rope's; one setting under two names
    must have one value."""
    sc = dict(block)
    for hf, ours in HF_NAMES.items():
        if hf in sc:
            if ours in sc and sc[ours] != sc[hf]:
                raise ValueError(f"RoPE scaling has {hf}={sc[hf]!r} and {ours}={sc[ours]!r}, two names of one "
                                 f"setting; keep one")
            sc[ours] = sc.pop(hf)
    return sc


def _one_value(arg: str, given, default, key: str, value):
    """The block's value of a setting that is also an argument; refuses two different ones."""
    if given != default and given != value:
        raise ValueError(f"{arg}={given!r} and {key}={value!r} set one thing twice; keep one")
    return value


def _fill_from_max_len(sc: dict, max_position_embeddings: int) -> None:
    """In place, what Hugging Face fills from the model's max_position_embeddings M."""
    # HF (standardize_rope_params, _compute_yarn/_longrope_parameters): L0 = M when the block has none;
    # yarn's and longrope's factor = M / L0 when the block has none (Phi-3.5's longrope block has none).
    kind, L0 = sc["rope_type"], sc.get("original_max_len")
    if kind in NEEDS_ORIGINAL_LEN and L0 is None:
        sc["original_max_len"] = L0 = max_position_embeddings
    if kind in ("yarn", "longrope") and sc.get("factor") is None and isinstance(L0, int) and L0 > 0:
        s = max_position_embeddings / L0
        sc["factor"] = max(s, 1.0) if kind == "longrope" else s  # longrope: s <= 1 means attention factor 1, as HF


def yarn_get_mscale(factor: float, mscale: float = 1.0) -> float:
    """0.1 mscale ln(s) + 1, and 1 for s <= 1 (HF's get_mscale, DeepSeek's yarn_get_mscale)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _deepseek_attention_factor(sc: dict) -> None:
    """In place, a yarn block's HF-only keys: null betas (defaults), DeepSeek's mscale pair (the attention factor)."""
    for k in ("beta_fast", "beta_slow"):  # HF: a null beta is the default one
        if k in sc and sc[k] is None:
            del sc[k]
    mscale, mscale_all_dim = sc.pop("mscale", None), sc.pop("mscale_all_dim", None)
    for k, v in (("mscale", mscale), ("mscale_all_dim", mscale_all_dim)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0):
            raise ValueError(f"yarn's {k} must be a number >= 0 or absent, got {v!r}")
    s = sc.get("factor")
    # DeepSeek-V2/V3 give YaRN's factor as a ratio, as HF does when the block has no attention_factor:
    #   mscale(s, mscale) / mscale(s, mscale_all_dim)   (1 for DeepSeek-V3's mscale = mscale_all_dim = 1)
    if sc.get("attention_factor") is None and mscale and mscale_all_dim and isinstance(s, (int, float)) and s >= 1:
        sc["attention_factor"] = yarn_get_mscale(float(s), mscale) / yarn_get_mscale(float(s), mscale_all_dim)


def deepseek_softmax_scale(factor: float, mscale_all_dim: float) -> float:
    """The extra factor DeepSeek's attention puts on its logits outside RoPE: mscale(s, mscale_all_dim)^2."""
    # HF's modeling_deepseek_v3.py (yarn_apply_mscale), like DeepSeek's own code: softmax scale =
    # qk_head_dim^-0.5 * m^2, m = 0.1 mscale_all_dim ln(s) + 1 (DeepSeek-V3: s = 40, so m^2 = 1.874).
    m = yarn_get_mscale(factor, mscale_all_dim)
    return m * m


def from_hf_block(head_dim: int, block: dict, base: float = 10000.0, partial_rotary_factor: float = 1.0,
                  rope_p: float = 1.0, max_position_embeddings: int = None, pairing: str = "adjacent",
                  init_len: int = 256) -> ScaledRotaryEmbedding:
    """A ScaledRotaryEmbedding from one Hugging Face block (rope_settings); pairing as the module's default."""
    settings = rope_settings(block, base, partial_rotary_factor, rope_p, max_position_embeddings)
    return ScaledRotaryEmbedding(head_dim, pairing=pairing, init_len=init_len, **settings)


# ---- a whole config.json ------------------------------------------------------------------
# The block is rope_scaling (transformers 4) or rope_parameters (5), inside text_config for multimodal
# models; rope_theta and partial_rotary_factor from the top level fill the block; Gemma's
# per-layer-type blocks need a layer_type.

def config_settings(config: dict, layer_type: str = None, max_position_embeddings: int = None) -> dict:
    """(head_dim, block, max_position_embeddings, pairing) of (one layer type of) a config.json dict."""
    if not isinstance(config, dict):
        raise ValueError(f"from_hf_config takes a config.json as a dict (json.load), got {type(config).__name__}")
    cfg = config.get("text_config") or config  # multimodal configs nest the language model's settings
    model_type = cfg.get("model_type", config.get("model_type"))
    M = max_position_embeddings if max_position_embeddings is not None else cfg.get("max_position_embeddings")
    theta, share = cfg.get("rope_theta"), cfg.get("partial_rotary_factor")
    if model_type == "gpt_neox":  # GPTNeoXConfig's own names and defaults (Pythia: rotary_pct 0.25)
        theta = cfg.get("rotary_emb_base", 10000.0) if theta is None else theta
        share = cfg.get("rotary_pct", 0.25) if share is None else share
    blocks = _hf_blocks(cfg, theta)
    nested = bool(blocks) and all(isinstance(v, dict) or v is None for v in blocks.values())
    if nested:  # {"sliding_attention": {...}, "full_attention": {...}}: one block per layer type
        if layer_type not in blocks:
            raise ValueError(f"this config has one RoPE block per layer type; give layer_type= one of "
                             f"{sorted(blocks)}" + ("" if layer_type is None else f", not {layer_type!r}"))
        if blocks[layer_type] is None:
            raise ValueError(f"layer type {layer_type!r} has no RoPE in this config (its block is null)")
    block = dict(blocks[layer_type] if nested else blocks)
    block.setdefault("rope_theta", 10000.0 if theta is None else theta)  # HF's default_theta
    if share is not None:
        block.setdefault("partial_rotary_factor", share)
    kind = block.setdefault("rope_type", block.pop("type", "default"))
    if model_type == "phi3" and kind in ("su", "yarn"):  # Phi3Config's own renaming
        block["rope_type"] = kind = "longrope"
    if kind in ("llama3", "yarn", "longrope") and not nested and "original_max_position_embeddings" in cfg:
        # Phi-3 keeps the training length at the top level; HF lets it win over the block's
        block["original_max_position_embeddings"] = cfg["original_max_position_embeddings"]
    if kind == "dynamic" and M is not None:  # HF's dynamic NTK measures lengths against max_position_embeddings
        block.pop("original_max_len", None)
        block["original_max_position_embeddings"] = M
    head_dim = cfg.get("qk_rope_head_dim") or cfg.get("head_dim")  # DeepSeek's MLA: only the rope part turns
    if layer_type == "full_attention" and cfg.get("global_head_dim"):  # Gemma 4's wider global heads
        head_dim = cfg["global_head_dim"]
    if not head_dim:
        if not cfg.get("hidden_size") or not cfg.get("num_attention_heads"):
            raise ValueError("from_hf_config needs head_dim, or hidden_size and num_attention_heads, in the config")
        head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    interleaved = cfg.get("rope_interleave", model_type in INTERLEAVED)
    return {"head_dim": head_dim, "block": block, "max_position_embeddings": M,
            "pairing": "adjacent" if interleaved else "half"}


def _hf_blocks(cfg: dict, theta):
    """The config's RoPE block, or its blocks by layer type (Gemma 3's older keys turned into them)."""
    block = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}  # HF: rope_scaling wins when both
    if "rope_local_base_freq" not in cfg:
        return block
    # Gemma 3 (Gemma3TextConfig.convert_rope_params_to_dict): sliding layers plain RoPE at rope_local_base_freq,
    # full layers rope_scaling (Gemma 3 4B and up: linear, factor 8) at rope_theta (default 1e6)
    nested = dict(cfg.get("rope_parameters") or {})
    if not (nested and all(isinstance(v, dict) or v is None for v in nested.values())):
        nested = {}
    full = dict(nested.get("full_attention") or {"rope_type": "default"})
    sliding = dict(nested.get("sliding_attention") or {"rope_type": "default"})
    full.update(cfg.get("rope_scaling") or {})
    full.setdefault("rope_theta", 1000000.0 if theta is None else theta)
    sliding.setdefault("rope_theta", cfg["rope_local_base_freq"])
    return {"sliding_attention": sliding, "full_attention": full}


def from_hf_config(config: dict, layer_type: str = None, max_position_embeddings: int = None,
                   pairing: str = None, init_len: int = 256) -> ScaledRotaryEmbedding:
    """A ScaledRotaryEmbedding for (one layer type of) a Hugging Face model, from its whole config.json dict.

    Head dim: head_dim (DeepSeek: qk_rope_head_dim; Gemma 4's full_attention: global_head_dim), else
    hidden_size // num_attention_heads; base, partial_rotary_factor and the scaling from the block.
    layer_type picks one of per-layer-type blocks (Gemma 3, Gemma 4): needed there, ignored elsewhere.
    max_position_embeddings replaces the config's (what HF fills L0 and a missing factor from).
    pairing defaults to HF's layout for the model ("half"; DeepSeek and Llama 4 "adjacent").
    DeepSeek's extra softmax scale: extra_softmax_scale(config); apply it in your attention."""
    kw = config_settings(config, layer_type, max_position_embeddings)
    return from_hf_block(kw["head_dim"], kw["block"], max_position_embeddings=kw["max_position_embeddings"],
                         pairing=pairing or kw["pairing"], init_len=init_len)


def extra_softmax_scale(config: dict, layer_type: str = None, max_position_embeddings: int = None) -> float:
    """Multiply your attention's softmax scale (1/sqrt(d_qk)) by this: 1.0 but for a yarn block with
    mscale_all_dim (DeepSeek-V2/V3), whose attention scales its logits by mscale^2 outside RoPE, which
    the rotary module cannot do for you (it turns q and k; it does not see the softmax)."""
    kw = config_settings(config, layer_type, max_position_embeddings)
    block = _our_names(kw["block"])
    if block.get("rope_type") != "yarn" or not block.get("mscale_all_dim"):
        return 1.0
    factor = rope_settings(block, max_position_embeddings=kw["max_position_embeddings"])["scaling"]["factor"]
    return deepseek_softmax_scale(float(factor), block["mscale_all_dim"])


def _self_check() -> None:
    import torch
    llama31 = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 131072,
               "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                        "high_freq_factor": 4.0,
                                                        "original_max_position_embeddings": 8192}}
    rope = from_hf_config(llama31)
    plain = ScaledRotaryEmbedding(128, 500000.0)
    assert (rope.head_dim, rope.base, rope.pairing, rope.scaling["original_max_len"]) == (128, 500000.0, "half", 8192)
    assert rope.inv_freq[0] == plain.inv_freq[0] and rope.inv_freq[-1] == plain.inv_freq[-1] / 8
    print("ok  Llama 3.1's config: head dim 128, base 500000, the fastest pair kept, the slowest divided by 8")
    q = torch.randn(1, 2, 5, 128)
    assert rope(q, q, offset=60000)[0].shape == q.shape
    deepseek = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_attention_heads": 128, "qk_rope_head_dim": 64,
                "max_position_embeddings": 163840, "rope_theta": 10000,
                "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                                 "original_max_position_embeddings": 4096, "type": "yarn"}}
    rope, scale = from_hf_config(deepseek), extra_softmax_scale(deepseek)
    assert (rope.rot_dim, rope.pairing, rope.attention_factor) == (64, "adjacent", 1.0)
    assert abs(scale - (0.1 * math.log(40) + 1) ** 2) < 1e-12 and extra_softmax_scale(llama31) == 1.0
    print(f"ok  DeepSeek-V3's config: rope head dim 64, interleaved pairs, attention factor 1, softmax x {scale:.4f}")
    gemma4_full = {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}
    rope = from_hf_block(512, gemma4_full)
    assert (rope.rope_p, rope.scaling, int((rope.inv_freq > 0).sum())) == (0.25, None, 64)
    print("ok  Gemma 4's proportional block is p-RoPE: 64 of 256 pairs turn")


if __name__ == "__main__":
    import argparse  # --help prints this docstring; any argument is refused before the work starts
    argparse.ArgumentParser(description=__doc__ + "\nRun alone, it runs the self-check.",
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    _self_check()
