"""eval_common: partial runs merge into results without dropping rows, the glance table applies
its stated rules, tables are synced only into the repository's own pages, the folders rule, and
only real runs write the repository's results/."""
import json
from dataclasses import asdict
from pathlib import Path

import pytest

import eval_common as EC
import row_names
import tables
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


def _write(tmp_path, ppl, effective, exact):
    """exact: {variant: (worst exact match at d <= 200, exact match at d = 512)}."""
    rows = [{"variant": n, "ppl_256": p[0], "ppl_4096": p[1]} for n, p in ppl.items()]
    (tmp_path / "extrapolation.json").write_text(json.dumps({"meta": {}, "rows": rows}))
    (tmp_path / "context_use.json").write_text(json.dumps(
        {"meta": {}, "rows": [{"variant": n, "effective_context": c} for n, c in effective.items()]}))
    ret = [{"variant": n, "distance": d, "exact": e} for n, (near, far) in exact.items()
           for d, e in ((32, 1.0), (200, near), (512, far), (1024, 1.0))]
    (tmp_path / "retrieval.json").write_text(json.dumps({"meta": {}, "rows": ret}))


def test_glance_table_applies_the_stated_rules(tmp_path):
    _write(tmp_path, {"rope": (5.0, 6.0), "alibi": (5.0, 6.01), "rope+yarn": (5.0, 9.0), "rope_ft_yarn": (5.0, 5.0)},
           {"rope": 448, "alibi": 192}, {"alibi_copy": (0.5, 0.5), "rope_copy": (0.49, 0.0),
                                          "rope_copy_ft_yarn": (0.9, 0.49), "rope": (0.0, 0.0)})
    lines = {l.split(" | ")[0][2:]: l for l in tables.glance_table(tmp_path).splitlines()[2:]}
    assert list(lines) == ["rope", "alibi", "rope+yarn", "rope_ft_yarn"], lines
    # breaks: ratio 6.0 / 5.0 = 1.2 is not > 1.2; 6.01 / 5.0 is. passkey: the worst d <= 200 (and d = 512), >= 50%;
    # the text model's own passkey and its copy-trained twin's each in their own columns, the twin named
    assert "| 6.00 | no | yes (448) | no (0%) | rope_copy | no / no (49% / 0%) |" in lines["rope"], lines["rope"]
    assert "| 6.01 | yes | no (192) | not measured | alibi_copy | yes / yes (50% / 50%) |" in lines["alibi"], \
        lines["alibi"]
    assert lines["rope+yarn"].endswith("| yes | not measured | not measured | - | not measured |"), lines["rope+yarn"]
    assert lines["rope_ft_yarn"].endswith("| rope_copy_ft_yarn | yes / no (90% / 49%) |"), lines["rope_ft_yarn"]


def test_copy_counterpart_names():
    assert [row_names.copy_counterpart(n) for n in ("alibi", "rope+yarn", "rope_ft_yarn", "alibi_ft")] == \
        ["alibi_copy", "rope_copy+yarn", "rope_copy_ft_yarn", "alibi_copy_ft"]


def test_sync_table_writes_only_for_the_repository_results(tmp_path):
    page = EC.HERE / "README.md"
    before = page.read_text(encoding="utf-8")
    tables.sync_table("glance", "| a changed table |", tmp_path)  # not the repository's results/: no write
    assert page.read_text(encoding="utf-8") == before


def test_run_dirs_keep_smoke_runs_and_previews_out_of_results():
    assert variants.run_dirs() == (Path("runs/main"), Path("results"))
    for kw in ({"quick": True}, {"preset": "preview"}):
        ckpt, results = variants.run_dirs(**kw)
        assert results.parts[0] == "runs" and results.parent == ckpt, (kw, ckpt, results)


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
