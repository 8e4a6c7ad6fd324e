"""lab/variants.py, the registry of what train_compare.py trains: which checkpoints are real runs
(real_run_mismatch on hand-made checkpoint dicts), the folders smoke runs and previews write,
and the hybrid variants' documented layouts and temperature numbers."""
from dataclasses import asdict
from pathlib import Path

import torch

import tiny_lm
from lab import checkpoint_io
from lab import variants
from attn_common import llama4_attn_temperature
from lab.options import full_config, LAB_DEFAULTS, layer_roles, make_config
from lab.variants import TrainConfig, real_run_mismatch

V = 20


# ----------------------------------------------------------------------------- what a real run is

def hand_made(variant, config=None, train=None):
    """A checkpoint dict as train_compare.py saves one: the default model and recipe, with the
    fields given here written over them by hand (vocab_size 65, as for Shakespeare)."""
    return {"config": {**full_config(make_config(vocab_size=65)), **(config or {})},
            "extra": {"variant": variant, "train_config": {**asdict(TrainConfig()), **(train or {})}}}


# rope_ft_yarn's recipe, worked out from the comment above FINETUNES (4x the length, 10% of the
# steps, the same tokens per step, lr 5e-4, 10 warm-up steps, the factor for 16x) on rope's
# real recipe (256 x 16, 1,100 steps, 32 evaluation windows), not by calling variants.
FT_YARN_TRAIN = {"seq_len": 1024, "batch_size": 4, "steps": 110, "lr": 5e-4, "warmup": 10, "min_lr_frac": 1.0,
                 "eval_every": 27, "eval_windows": 8, "seed": 1}
FT_YARN_SCALING = {"rope_type": "yarn", "factor": 16.0, "original_max_len": 256}


def test_real_runs_are_recognised():
    real = {"alibi": hand_made("alibi", {"pos": "alibi"}),
            "gemma_hybrid": hand_made("gemma_hybrid", {"attn_window": 64, "global_every": 4, "global_rope_theta": 1e6,
                                                       "global_rope_p": 0.25}),
            "rope_copy": hand_made("rope_copy", train={"steps": 2400}),
            "rope_ft_yarn": hand_made("rope_ft_yarn", {"rope_scaling": FT_YARN_SCALING}, FT_YARN_TRAIN),
            "rope_ft_none": hand_made("rope_ft_none", train=FT_YARN_TRAIN),
            "alibi_copy_ft": hand_made("alibi_copy_ft", {"pos": "alibi"}, {**FT_YARN_TRAIN, "steps": 240,
                                                                          "eval_every": 60})}
    for name, ck in real.items():
        assert real_run_mismatch(name, ck) == [], f"{name} is a real run, but: {real_run_mismatch(name, ck)}"
    # another seed is a real run too (runs/seed1 holds them), and so is an older checkpoint whose
    # config lacks fields added since (they hold their defaults)
    assert real_run_mismatch("rope", hand_made("rope", train={"seed": 1})) == []
    assert real_run_mismatch("rope_ft_yarn", hand_made("rope_ft_yarn", {"rope_scaling": FT_YARN_SCALING},
                                                       {**FT_YARN_TRAIN, "seed": 2})) == []
    old = hand_made("rope")
    del old["config"]["temperature_floor"]
    assert real_run_mismatch("rope", old) == [], "fields an older checkpoint lacks count as their defaults"
    # ... except the recipe's fields added by the recipe change: a checkpoint without them was trained
    # with their older values (BEFORE_FIELD), which are a real run only while they are the defaults
    for k in [*checkpoint_io.BEFORE_FIELD, *variants.TRAIN_BEFORE_FIELD]:
        (old["extra"]["train_config"] if k in variants.TRAIN_BEFORE_FIELD else old["config"]).pop(k)
    want = [k for k, v in {**checkpoint_io.BEFORE_FIELD, **variants.TRAIN_BEFORE_FIELD}.items()
            if v != (getattr(variants.TrainConfig, k) if k in variants.TRAIN_BEFORE_FIELD else LAB_DEFAULTS[k])]
    got = [d.split("=")[0] for d in real_run_mismatch("rope", old)]
    assert got == want, f"a checkpoint from before the recipe fields: mismatches {got}, want {want}"


def test_runs_that_are_not_real_are_named_by_their_fields():
    quick = hand_made("rope", {"n_layer": 2, "n_head": 2, "n_embd": 32, "max_len": 512},
                      {"seq_len": 64, "batch_size": 8, "steps": 30, "warmup": 5, "eval_every": 10, "eval_windows": 4})
    diff = real_run_mismatch("rope", quick)
    assert [d.split("=")[0] for d in diff] == ["n_layer", "n_head", "n_embd", "max_len", "seq_len", "batch_size",
                                                "steps", "warmup", "eval_every", "eval_windows"], diff
    assert diff[0] == "n_layer=2 (real run: 4)" and "steps=30 (real run: 1100)" in diff, diff
    assert real_run_mismatch("rope_copy", hand_made("rope_copy")) == ["steps=1100 (real run: 2400)"], \
        "the copy family trains for 2,400 steps"
    assert real_run_mismatch("rope", hand_made("rope", train={"steps": 10})) == ["steps=10 (real run: 1100)"]
    eight = hand_made("rope_ft_yarn", {"rope_scaling": {**FT_YARN_SCALING, "factor": 8.0}}, FT_YARN_TRAIN)
    assert real_run_mismatch("rope_ft_yarn", eight) == [f"rope_scaling={ {**FT_YARN_SCALING, 'factor': 8.0}!r} "
                                                        f"(real run: {FT_YARN_SCALING!r})"]
    assert real_run_mismatch("rope_ft_yarn", hand_made("rope_ft_yarn", train=FT_YARN_TRAIN)) == \
        [f"rope_scaling=None (real run: {FT_YARN_SCALING!r})"], "a fine-tune without its scaling"
    assert real_run_mismatch("rope", hand_made("alibi", {"pos": "alibi"})) == ["variant='alibi' (real run: 'rope')"]
    no_record = hand_made("rope")
    del no_record["extra"]["train_config"]
    assert real_run_mismatch("rope", no_record) == ["train_config=None (real run: the recipe's)"]
    assert real_run_mismatch("mystery", hand_made("mystery")) == ["variant 'mystery' is not in the registry"]


def test_run_dirs_keep_smoke_runs_and_previews_out_of_results():
    assert variants.run_dirs() == (Path("runs/main"), Path("results"))
    for kw in ({"quick": True}, {"preset": "preview"}):
        ckpt, results = variants.run_dirs(**kw)
        assert results.parts[0] == "runs" and results.parent == ckpt, (kw, ckpt, results)


# ----------------------------------------------------------------------------- the hybrid variants

def test_irope_temperature_values_in_variants_comment():
    """The numbers lab/variants.py quotes for irope: 1 up to position 62, 1.16 at 255, 1.42 at 4,095."""
    cfg = variants.VARIANTS["irope"]
    f = llama4_attn_temperature(torch.tensor([62, 63, 255, 4095]), cfg["temperature_floor"], 0.1)
    assert f[0] == 1 and f[1] > 1 and round(f[2].item(), 2) == 1.16 and round(f[3].item(), 2) == 1.42, f


def test_hybrid_variants_have_the_documented_layout():
    """irope: layers 1-3 chunked RoPE, layer 4 global NoPE with the temperature; gemma_hybrid: layers 1-3
    sliding RoPE at base 10k, layer 4 global with p-RoPE (a quarter of the pairs turn) at base 1M."""
    model_kw = dict(vocab_size=V, n_layer=4, n_head=4, n_embd=128)
    irope, _, _ = variants.build_variant("irope", model_kw, variants.TrainConfig(), 0, None)
    assert (layer_roles(irope.cfg)[0], layer_roles(irope.cfg)[1]) == ((3,), (0, 1, 2))
    assert [b.attn.window for b in irope.blocks] == [64, 64, 64, 0] and irope.cfg.window_kind == "chunked"
    assert [irope.rope_of(i) is irope.rope for i in range(3)] == [True] * 3 and irope.rope_of(3) is None
    gemma, _, _ = variants.build_variant("gemma_hybrid", model_kw, variants.TrainConfig(), 0, None)
    assert (layer_roles(gemma.cfg)[0], layer_roles(gemma.cfg)[1]) == ((), (0, 1, 2))
    assert [b.attn.window for b in gemma.blocks] == [64, 64, 64, 0] and gemma.cfg.window_kind == "sliding"
    assert gemma.rope_of(0) is gemma.rope and gemma.rope.base == 1e4 and gemma.rope.rope_p == 1.0
    assert gemma.rope_of(3) is gemma.global_rope and gemma.global_rope.base == 1e6
    assert (gemma.global_rope.inv_freq > 0).sum().item() == 4, "head dim 32: 16 pairs, a quarter of them turn"
    old, _, _ = variants.build_variant("irope_global", model_kw, variants.TrainConfig(), 0, None)
    assert (layer_roles(old.cfg)[0], layer_roles(old.cfg)[1]) == ((3,), ())
    quick, _, _ = variants.build_variant("irope", {**model_kw, **variants.QUICK_MODEL}, variants.TrainConfig(), 0, None)
    assert (layer_roles(quick.cfg)[0], layer_roles(quick.cfg)[1]) == ((1,), (0,)), "--quick (2 layers): the last layer global"
    for name in ("irope", "gemma_hybrid", "irope_global"):
        assert name in variants.FAMILIES["current"]
    assert variants.VARIANTS["irope_copy"] == variants.VARIANTS["irope"]


# ----------------------------------------------------------------------------- DroPE and its control

# rope_ft_drope's recipe, worked out from the comment above RECALIBRATIONS: rope's length (256) and batch,
# 10% of its 1,100 steps, the fine-tunes' lr and warm-up; pos none. rope_ft_keep: the same with pos rope.
DROPE_TRAIN = {"seq_len": 256, "batch_size": 16, "steps": 110, "lr": 5e-4, "warmup": 10, "min_lr_frac": 1.0,
               "eval_every": 27, "eval_windows": 32, "seed": 1}


def test_drope_and_its_control_differ_in_the_positions_only():
    for name, pos in (("rope_ft_drope", "none"), ("rope_ft_keep", "rope")):
        cfg, tc = variants.real_run(name, V)
        got = {k: tc[k] for k in DROPE_TRAIN}
        assert got == DROPE_TRAIN, f"{name}: {got}"
        assert cfg["pos"] == pos and cfg["rope_scaling"] is None, (name, cfg["pos"], cfg["rope_scaling"])
    drope, keep = (variants.real_run(n, V)[0] for n in ("rope_ft_drope", "rope_ft_keep"))
    assert {k for k in drope if drope[k] != keep[k]} == {"pos"}
    assert variants.real_run("rope_copy_ft_drope", V)[1]["steps"] == 240  # 10% of the copy family's 2,400
    assert not variants.admit(["alibi_ft_drope", "learned_ft_keep"])
    assert variants.FINETUNES["alibi_ft_drope"]["pos"] == "none" and "pos" not in variants.FINETUNES["learned_ft_keep"]


def test_drope_starts_from_the_parents_weights_without_positions(tmp_path):
    """The model DroPE trains is the parent's weights in a NoPE model: its logits equal a NoPE model loaded
    with those weights by hand, and differ from the parent's own (which turns q and k). A learned parent's
    table is left behind."""
    for parent, pos in (("rope", "rope"), ("learned", "learned")):
        torch.manual_seed(0)
        model = tiny_lm.TinyLM(make_config(vocab_size=V, n_layer=2, n_head=2, n_embd=16, pos=pos, max_len=64))
        tc = TrainConfig(seq_len=32, batch_size=4, steps=20)
        checkpoint_io.save_checkpoint(tmp_path / f"{parent}.pt", model, "x" * V, 20, {}, {"variant": parent,
                                                                                   "train_config": asdict(tc)})
        variants.admit([f"{parent}_ft_drope"])
        dropped, tc_ft, step = variants.build_variant(f"{parent}_ft_drope", {}, tc, 0, tmp_path)
        assert dropped.cfg.pos == "none" and step == 20 and (tc_ft.seq_len, tc_ft.steps) == (32, 2), tc_ft
        by_hand = tiny_lm.TinyLM(make_config(**{**asdict(model.cfg), "pos": "none"}))
        by_hand.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("learned.")})
        idx = torch.randint(0, V, (2, 40))
        with torch.no_grad():
            got, want, parent_out = dropped(idx).logits, by_hand(idx).logits, model(idx).logits
        err = (got - want).abs().max().item()
        assert err == 0, f"{parent}_ft_drope: max diff from the parent's weights in a NoPE model {err:.2e}"
        assert (got - parent_out).abs().max() > 1e-4, "the parent's positions must be gone"


def test_two_options_in_one_brace_name_the_same_variant():
    """fox{gate_bias=1.0,decay_max=64.0} on the command line is the variant fox{gate_bias=1.0}{decay_max=64.0}:
    names_of gives the canonical name, and admit makes that one known, with both options, under no other name."""
    alias, row = "fox{gate_bias=1.0,decay_max=64.0}", "fox{gate_bias=1.0}{decay_max=64.0}"
    assert variants.names_of(f"rope,{alias}") == ["rope", row]
    assert variants.admit([alias]) == [] and variants.admit([row]) == []
    assert variants.VARIANTS[row] == {"pos": "fox", "pos_options": {"gate_bias": 1.0, "decay_max": 64.0}}
    assert alias not in variants.VARIANTS and alias not in variants.ALL_NAMES
