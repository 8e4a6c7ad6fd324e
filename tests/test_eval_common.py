"""eval_common: partial runs merge into results without dropping rows, only real runs write the
repository's results/, and the scaling each training-free row gets at each length (scaling_at)."""
import math
from dataclasses import asdict

import pytest
import torch

import eval_common as EC
import tiny_lm
import variants
from tiny_lm import GPTConfig


def test_merge_keeps_rows_not_rerun_and_replaces_the_rest():
    old = [{"variant": v, "x": 0} for v in ("none", "rope", "rope+yarn", "alibi", "rope [seed1]")]
    new = [{"variant": "rope", "x": 1}, {"variant": "sin", "x": 1}]
    merged = EC.merge_rows(old, new)
    assert [r["variant"] for r in merged] == ["none", "sin", "rope", "rope+yarn", "alibi", "rope [seed1]"], merged
    assert {r["variant"]: r["x"] for r in merged} == {"none": 0, "sin": 1, "rope": 1, "rope+yarn": 0, "alibi": 0,
                                                      "rope [seed1]": 0}
    # long-format rows (one per distance) are replaced as a whole per variant
    old = [{"variant": "rope", "d": d, "x": 0} for d in (32, 64)] + [{"variant": "alibi", "d": 32, "x": 0}]
    merged = EC.merge_rows(old, [{"variant": "rope", "d": 32, "x": 1}])
    assert [(r["variant"], r["d"], r["x"]) for r in merged] == [("rope", 32, 1), ("alibi", 32, 0)], merged


def _checkpoint(variant, **config):
    """A checkpoint dict of the real recipe for a variant's registry entry, with config changes."""
    cfg = {**asdict(GPTConfig(vocab_size=65)), **variants.VARIANTS[variant], **config}
    return {"config": cfg, "extra": {"variant": variant, "train_config": asdict(variants.TrainConfig())}}


def test_only_real_runs_write_the_repository_results(tmp_path):
    repo = EC.HERE / "results"
    real = {tmp_path / "ck" / "rope.pt": _checkpoint("rope"), tmp_path / "ck" / "alibi.pt": _checkpoint("alibi")}
    assert EC.results_for_checkpoints(repo, False, real) == (repo, None)
    small = {**real, tmp_path / "ck" / "sin.pt": _checkpoint("sin", n_embd=32)}
    folder, note = EC.results_for_checkpoints(repo, False, small)
    assert folder == tmp_path / "ck" / "results", f"not beside the checkpoint: {folder}"
    assert note.startswith(f"note: {tmp_path / 'ck' / 'sin.pt'} is not a real run (n_embd=32 (real run: 128))") \
        and "instead of results/" in note, note
    assert EC.results_for_checkpoints(repo, False, small, fallback=tmp_path / "x")[0] == tmp_path / "x"
    with pytest.raises(ValueError, match=r"sin\.pt is not a real run \(n_embd=32 \(real run: 128\)\).*--out"):
        EC.results_for_checkpoints(repo, True, small, flag="--out")
    # any other folder takes any checkpoint, and says nothing
    assert EC.results_for_checkpoints(tmp_path / "r", True, small) == (tmp_path / "r", None)
    assert EC.results_for_checkpoints(repo / "gpu", False, small) == (repo / "gpu", None), "the gpu preset's folder"
    # a reason that holds for every checkpoint (another corpus) makes real checkpoints not real
    other = EC.corpus_mismatch(tmp_path / "other.txt")
    assert EC.corpus_mismatch(None) == [] and EC.corpus_mismatch(tiny_lm.DEFAULT_CORPUS) == [], "the default corpus"
    folder, note = EC.results_for_checkpoints(repo, False, real, also=other)
    assert folder == tmp_path / "ck" / "results" and "other.txt" in note, note


# ----------------------------------------------------------------------------- the scaling of each row

def test_scalings_rows_factors():
    """Training-free rows: factor k * L / L_train (at least 1); rope+dynamic keeps factor 1."""
    from eval_common import scaling_at
    assert scaling_at("ntk", 1024, 256)["factor"] == 4.0
    assert scaling_at("ntk(4s)", 1024, 256)["factor"] == 16.0
    assert scaling_at("ntk(16s)", 256, 256)["factor"] == 16.0
    assert scaling_at("linear", 128, 256)["factor"] == 1.0
    for L in (128, 256, 4096):
        assert scaling_at("dynamic", L, 256) == {"rope_type": "dynamic", "factor": 1.0, "original_max_len": 256}


def test_longrope_row_is_plain_rope_within_the_training_length_and_yarn_ramped_beyond():
    """rope+longrope: at L <= L_train the factor is 1 and the tables are plain RoPE's; at 16 x L_train
    pair i is divided by 1 + 15 r_i (YaRN's ramp r_i) and cos/sin carry sqrt(1 + ln 16 / ln 256)."""
    import pos_rope
    from eval_common import scaling_at
    plain = pos_rope.RotaryEmbedding(32)
    near = pos_rope.ScaledRotaryEmbedding(32, scaling=scaling_at("longrope", 256, 256, 32, 10000.0))
    for a, b in zip(plain.cos_sin(256), near.cos_sin(256)):
        assert torch.equal(a, b), f"longrope at the training length is not plain RoPE: {(a - b).abs().max():.2e}"
    far = scaling_at("longrope", 4096, 256, 32, 10000.0)
    low, high = pos_rope.yarn_correction_range(32, 10000.0, 256, 32.0, 1.0)
    ramp = pos_rope.yarn_ramp(low, high, 16).double()
    want = 1 + 15 * ramp
    got = torch.tensor(far["long_factor"], dtype=torch.float64)
    assert far["factor"] == 16.0 and torch.allclose(got, want), f"max diff {(got - want).abs().max():.2e}"
    assert far["short_factor"] == [1.0] * 16
    rope = pos_rope.ScaledRotaryEmbedding(32, scaling=far)
    want_af = math.sqrt(1 + math.log(16) / math.log(256))
    assert abs(rope.attention_factor - want_af) < 1e-12, (rope.attention_factor, want_af)


def test_fixed_factor_scaling():
    from eval_common import factor_label, scaling_at
    assert scaling_at("yarn@16", 300, 256)["factor"] == scaling_at("yarn@16", 4096, 256)["factor"] == 16.0
    assert scaling_at("yarn", 4096, 256)["factor"] == 16.0 and scaling_at("yarn", 512, 256)["factor"] == 2.0
    assert factor_label("yarn@16") == "16" and factor_label("ntk(4s)") == "4s"
