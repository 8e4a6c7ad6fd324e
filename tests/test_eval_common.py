"""eval_common: partial runs merge into results without dropping rows, only real runs write the
repository's results/, and the scaling each training-free row gets at each length (scaling_at)."""
import math
import re
from dataclasses import asdict

import pytest
import torch

from lab import eval_common as EC
import tiny_lm
from lab import corpora
from lab import variants
from lab.options import full_config, make_config


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
    cfg = {**full_config(make_config(vocab_size=65)), **variants.VARIANTS[variant], **config}
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
    # a reason that holds for every checkpoint (another corpus) makes real checkpoints not real
    other = EC.corpus_mismatch(tmp_path / "other.txt")
    assert EC.corpus_mismatch(None) == [] and EC.corpus_mismatch(corpora.DEFAULT_CORPUS) == [], "the default corpus"
    folder, note = EC.results_for_checkpoints(repo, False, real, also=other)
    assert folder == tmp_path / "ck" / "results" and "other.txt" in note, note


def _gpu_checkpoint(variant, amp="bf16", **train):
    """A checkpoint dict of --preset gpu's recipe, written out by hand from docs/bigger_runs.md (6 layers,
    384 wide, 6 heads, a 32,768-row table, trained at 1024: 1,500 steps of 16, lr 1e-3, 100 warm-up steps,
    evaluated every 100 steps on 16 windows), not read from variants.PRESETS."""
    cfg = {**full_config(make_config(vocab_size=65)), **variants.VARIANTS[variant],
           "n_layer": 6, "n_embd": 384, "n_head": 6, "max_len": 32768, "train_len": 1024}
    tc = {**asdict(variants.TrainConfig()), "seq_len": 1024, "batch_size": 16, "steps": 1500, "lr": 1e-3,
          "warmup": 100, "eval_every": 100, "eval_windows": 16, **train}
    return {"config": cfg, "extra": {"variant": variant, "train_config": tc, "provenance": {"amp": amp}}}


def test_the_gpu_folders_take_only_the_gpu_presets_real_runs(tmp_path):
    """results/gpu/ holds --preset gpu under bf16 and results/gpu/amp_off/ the same without autocast: the
    CPU smoke of the preset (docs/bigger_runs.md: 1 layer, length 64, 2 steps), a CPU-recipe checkpoint or
    the other autocast is written beside its checkpoint, and refused for an explicit --results."""
    gpu, amp_off, ck = EC.HERE / "results" / "gpu", EC.HERE / "results" / "gpu" / "amp_off", tmp_path / "ck"
    real = {ck / "rope.pt": _gpu_checkpoint("rope"), ck / "alibi.pt": _gpu_checkpoint("alibi", seed=1)}
    assert EC.results_for_checkpoints(gpu, True, real) == (gpu, None), "the preset's real runs, seed 1 too"
    off = {ck / "rope.pt": _gpu_checkpoint("rope", amp="off")}
    assert EC.results_for_checkpoints(amp_off, True, off) == (amp_off, None)
    smoke = _gpu_checkpoint("rope", seq_len=64, steps=2)
    smoke["config"].update(n_layer=1, n_head=2, n_embd=32, train_len=64)
    for folder, cks, why in ((gpu, {ck / "rope.pt": smoke}, "n_layer=1 (real run: 6)"),
                             (gpu, {ck / "rope.pt": _checkpoint("rope")}, "n_layer=4 (real run: 6)"),
                             (gpu, off, "amp='off' (real run: 'bf16')"),
                             (amp_off, real, "amp='bf16' (real run: 'off')")):
        with pytest.raises(ValueError, match=re.escape(why) + r".*results/gpu/.*holds only real runs"):
            EC.results_for_checkpoints(folder, True, cks)
        got, note = EC.results_for_checkpoints(folder, False, cks)
        assert got == ck / "results" and why in note and "instead of results/gpu/" in note, (got, note)
    # a checkpoint from before amp was recorded ran without autocast: real for results/, not for results/gpu
    assert EC.results_for_checkpoints(EC.HERE / "results", True, {ck / "rope.pt": _checkpoint("rope")})[1] is None
    assert "amp='off' (real run: 'bf16')" in EC.results_for_checkpoints(
        gpu, False, {ck / "rope.pt": {**_gpu_checkpoint("rope"), "extra": {
            k: v for k, v in _gpu_checkpoint("rope")["extra"].items() if k != "provenance"}}})[1]


def test_a_checkpoint_of_another_recipe_is_refused_for_results(tmp_path):
    """A checkpoint whose TrainConfig or init is another recipe's (decay on every parameter; GPT-2's init)
    is not a real run: refused for an explicit results/, written beside it otherwise."""
    repo = EC.HERE / "results"
    decay_all = _checkpoint("alibi")
    decay_all["extra"]["train_config"]["decay"] = "all"
    for ck, why in ((decay_all, "decay='all' (real run: 'matrices')"),
                    (_checkpoint("rope", linear_init="gpt2"), "linear_init='gpt2' (real run: 'torch')")):
        with pytest.raises(ValueError, match=re.escape(why)):
            EC.results_for_checkpoints(repo, True, {tmp_path / f"{ck['extra']['variant']}.pt": ck})
        folder, note = EC.results_for_checkpoints(repo, False, {tmp_path / f"{ck['extra']['variant']}.pt": ck})
        assert folder == tmp_path / "results" and why in note, (folder, note)


def _provenance_entries():
    """(file, what, provenance) of every results row that comes from a checkpoint."""
    res, out = EC.HERE / "results", []
    for name in ("extrapolation", "context_use", "retrieval", "retrieval_formats"):
        data = EC.read_json(res / f"{name}.json")
        made = data["meta"].get("provenance", {})
        out += [(name, r["variant"], made.get(EC.provenance_key(r["variant"]))) for r in data["rows"]]
    logs = EC.read_json(res / "train_log.json")
    out += [("train_log", n, logs.get("provenance", {}).get(n)) for n in logs["logs"]]
    for name in ("recipe_ablation", "anchor_xtransformers", "rope_theta_attention"):
        out += [(name, str(r.get("knob", r.get("variant", r.get("scheme")))), r.get("provenance"))
                for r in EC.read_json(res / f"{name}.json")["rows"]]
    att = EC.read_json(res / "rope_attention.json")
    out.append(("rope_attention", att["checkpoint"], att.get("provenance", {}).get(att["checkpoint"].removesuffix(".pt"))))
    return out


def test_every_results_row_records_how_it_was_made():
    entries = _provenance_entries()
    assert len(entries) > 400, f"only {len(entries)} rows found"
    missing = [(f, w) for f, w, p in entries if not isinstance(p, dict) or not set(EC.PROVENANCE_KEYS) <= set(p)]
    assert not missing, f"{len(missing)} rows without the provenance keys {EC.PROVENANCE_KEYS}: {missing[:5]}"
    bad = [(f, w) for f, w, p in entries if not isinstance(p["config"], dict) or not p["config"]
           or not isinstance(p["train"], dict) or not p["train"].get("steps")]
    assert not bad, f"rows whose config or train is empty: {bad[:5]}"
    for f, w, p in entries:  # a known commit is a hash; a known corpus hash is 64 hex digits
        assert p["commit"] == EC.UNKNOWN or re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", p["commit"]), (f, w, p["commit"])
        assert p["corpus_sha256"] == EC.UNKNOWN or re.fullmatch(r"[0-9a-f]{64}", p["corpus_sha256"]), (f, w)


def test_provenance_of_a_checkpoint_and_of_an_older_one():
    ck = _checkpoint("rope")
    old = EC.provenance_of(ck)
    assert old["config"] == ck["config"] and old["train"] == ck["extra"]["train_config"] and old["seed"] == 0
    assert (old["command"], old["commit"], old["corpus_sha256"]) == (EC.UNKNOWN,) * 3, old
    ck["extra"]["provenance"] = EC.training_provenance(["--variants", "rope"], "ab" * 32, 0)
    new = EC.provenance_of(ck)
    assert new["command"].endswith(" --variants rope") and new["corpus_sha256"] == "ab" * 32, new
    assert new["commit"] == EC.UNKNOWN or re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", new["commit"]), new["commit"]
    assert EC.provenance_key("rope_copy+yarn") == "rope_copy" and EC.provenance_key("rope [seed1]") == "rope [seed1]"


# ----------------------------------------------------------------------------- the scaling of each row

def test_scalings_rows_factors():
    """Training-free rows: factor k * L / L_train (at least 1); rope+dynamic keeps factor 1."""
    from lab.eval_common import scaling_at
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
    from lab.eval_common import scaling_at
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
    from lab.eval_common import factor_label, scaling_at
    assert scaling_at("yarn@16", 300, 256)["factor"] == scaling_at("yarn@16", 4096, 256)["factor"] == 16.0
    assert scaling_at("yarn", 4096, 256)["factor"] == 16.0 and scaling_at("yarn", 512, 256)["factor"] == 2.0
    assert factor_label("yarn@16") == "16" and factor_label("ntk(4s)") == "4s"


def test_a_file_of_two_schemes_counts_each_ones_own_lines(tmp_path):
    """code_lines(only=...) counts a scheme's own definitions and the top-level ones they use, at any depth, not
    the other scheme's: counted here by hand on a file of two schemes. own_definitions names KerpleLog for
    kerple (field_relbias.py holds t5, kerple and fire) and nothing for a scheme alone in its file."""
    src = ('"""Two schemes."""\n'           # 1  docstring
           "import torch\n"                  # 2  (not used by either: not counted)
           "EPS = 0.01\n"                    # 3  used by helper
           "SCALE = 2.0\n"                   # 4  used by B only
           "\n"
           "def helper(x):\n"                # 6
           '    """Doc."""\n'               # 7  docstring
           "    return x + EPS  # note\n"    # 8
           "\n"
           "class A:\n"                      # 10
           "    def bias(self, x):\n"        # 11
           "        return helper(x)\n"      # 12
           "\n"
           "class B:\n"                      # 14
           "    def bias(self, x):\n"        # 15
           "        return x * SCALE\n")     # 16
    path = tmp_path / "two.py"
    path.write_text(src, encoding="utf-8")
    a, b = EC.code_lines(path, only={"A"}), EC.code_lines(path, only={"B"})
    assert (a, b) == (3 + 2 + 1, 3 + 1), f"A: class 3 + helper 2 + EPS 1 = 6, B: class 3 + SCALE 1 = 4; got {a}, {b}"
    assert EC.code_lines(path) == 1 + 1 + 1 + 2 + 3 + 3, "the whole file: import, EPS, SCALE, helper 2, A 3, B 3"
    assert EC.own_definitions(tiny_lm.SCHEMES["kerple"]) == {"KerpleLog"}
    assert EC.own_definitions(tiny_lm.SCHEMES["rope"]) is None and EC.own_definitions(tiny_lm.SCHEMES["fox"]) is None


def test_a_variant_with_two_options_in_one_brace_is_looked_for_under_its_canonical_name(tmp_path, refused):
    """--variants fox{gate_bias=1.0,decay_max=64.0}: the comma inside the braces does not split the list, and
    the checkpoint asked for is fox{gate_bias=1.0}{decay_max=64.0}.pt, the name results and checkpoints use."""
    msg = refused(lambda argv: EC.find_checkpoints(tmp_path, argv[0], "python train_compare.py"),
                  ["rope,fox{gate_bias=1.0,decay_max=64.0}"])
    assert "no checkpoint for rope,fox{gate_bias=1.0}{decay_max=64.0} in" in msg, msg
