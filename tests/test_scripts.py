"""End-to-end smoke test of the main job: train_compare.py --quick, then extrapolation_test.py
on its checkpoints, in a temporary folder; plus the scripts' answers to bad input."""
import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def run(*args, cwd=ROOT):
    env = dict(os.environ, OMP_NUM_THREADS="1")  # tiny tensors: one thread is faster on a busy machine
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("quick")
    r = run("train_compare.py", "--quick", "--out", str(d / "ck"), "--results", str(d / "train"))
    assert r.returncode == 0, r.stderr[-2000:]
    # a piece of the copy family: the curriculum, a hybrid with the temperature, a fine-tune
    rc = run("train_compare.py", "--quick", "--variants", "rope_copy,irope_copy,rope_copy_ft_yarn", "--out",
             str(d / "ck"), "--results", str(d / "train"))
    assert rc.returncode == 0, rc.stderr[-2000:]
    r2 = run("extrapolation_test.py", "--quick", "--ckpt-dir", str(d / "ck"), "--results", str(d / "res"))
    assert r2.returncode == 0, r2.stderr[-2000:]
    r3 = run("long_context_test.py", "--quick", "--ckpt-dir", str(d / "ck"), "--results", str(d / "res"))
    assert r3.returncode == 0, r3.stderr[-2000:]
    return d, r, r2


def test_train_compare_writes_checkpoints_and_logs(quick_run):
    d, r, _ = quick_run
    names = ["none", "learned", "sin", "rope", "alibi", "rope_ft_linear", "rope_ft_yarn", "rope_ft_none", "alibi_ft"]
    for n in names:
        assert (d / "ck" / f"{n}.pt").is_file(), f"no checkpoint for {n}"
    rows = list(csv.DictReader(open(d / "train" / "train_log.csv")))
    assert {row["variant"] for row in rows} == set(names) | {"rope_copy", "irope_copy", "rope_copy_ft_yarn"}
    assert all(math.isfinite(float(row["val_loss"])) for row in rows)
    assert (d / "train" / "train_curves.png").stat().st_size > 10_000


def test_extrapolation_outputs_parse(quick_run):
    d, _, _ = quick_run
    res = d / "res"
    for f in ("extrapolation.md", "extrapolation.csv", "extrapolation.json", "ppl_vs_length.png",
              "loss_vs_position.png"):
        assert (res / f).is_file(), f"missing {f}"
    data = json.loads((res / "extrapolation.json").read_text())
    lengths = data["meta"]["lengths"]
    assert lengths == [64, 128, 256, 512]
    table = [ln for ln in (res / "extrapolation.md").read_text().splitlines() if ln.startswith("| ")]
    header, body = table[0], table[1:]
    assert len(body) == len(data["rows"]), f"{len(body)} table rows vs {len(data['rows'])} json rows"
    ppl_cols = [i for i, h in enumerate(header.strip("| ").split(" | ")) if h.startswith("ppl@") and "/" not in h]
    assert len(ppl_cols) == len(lengths)
    for line, row in zip(body, data["rows"]):
        cells = line.strip("| ").split(" | ")
        assert cells[0] == row["variant"]
        for i, L in zip(ppl_cols, lengths):
            shown = float(cells[i].rstrip(" †"))
            assert shown == pytest.approx(row[f"ppl_{L}"], abs=0.006), f"{row['variant']} at {L}"
            assert 1.0 < row[f"ppl_{L}"] < 200, row
    variants = [r["variant"] for r in data["rows"]]
    for v in ("none", "learned", "learned (clamped)", "sin", "rope", "alibi", "rope+yarn", "rope+linear",
              "rope_ft_yarn", "rope+ntk", "rope+ntk(4s)", "rope+ntk(16s)", "rope+dynamic", "rope_ft_none", "alibi_ft"):
        assert v in variants
    by_name = {r["variant"]: r for r in data["rows"]}
    assert by_name["rope+dynamic"]["scaling_factor"] == "1" and by_name["rope+ntk(4s)"]["scaling_factor"] == "4s"
    # dynamic NTK with factor 1 on whole windows is static NTK with s = L / L_train
    for L in lengths:
        dyn, ntk = by_name["rope+dynamic"][f"ppl_{L}"], by_name["rope+ntk"][f"ppl_{L}"]
        assert dyn == pytest.approx(ntk, rel=1e-5), f"rope+dynamic {dyn} vs rope+ntk {ntk} at {L}"
    # the one place dynamic differs: token-by-token decoding through the KV cache, measured once
    dec = data["meta"]["dynamic_cached_decoding"]
    assert dec["length"] == lengths[-1] and dec["windows"] == 1 and dec["factor"] == 1.0, dec
    assert math.isfinite(dec["loss_full"]) and math.isfinite(dec["loss_cached"]), dec
    assert dec["difference"] == pytest.approx(dec["loss_cached"] - dec["loss_full"], abs=1e-12)
    md = (res / "extrapolation.md").read_text()
    assert f"{dec['loss_full']:.4f}" in md and f"{dec['loss_cached']:.4f}" in md, "the decoding line is missing"
    # every length scores the same number of tokens, so the numbers are comparable
    assert data["meta"]["scored_tokens_per_length"] % lengths[-1] == 0
    curve = data["loss_vs_position"]["rope"]
    assert len(curve["loss"]) == len(curve["minus_short"]) == lengths[-1]
    # within the shortest length a long window and a short one see the same context: no difference
    assert max(abs(v) for v in curve["minus_short"][:lengths[0]]) < 1e-4, "positions < shortest length differ"
    assert "Julius Caesar" in (res / "extrapolation.md").read_text(), "the caption must name the scored plays"
    learned_md = next(ln for ln in body if ln.startswith("| learned |"))
    assert "†" in learned_md, "learned cells beyond the training length must be marked as untrained rows"


def test_rerun_skips_finished_variants(quick_run):
    d, _, _ = quick_run
    p = d / "ck" / "rope.pt"
    before = p.stat().st_mtime_ns
    r = run("train_compare.py", "--quick", "--variants", "rope", "--out", str(d / "ck"), "--results", str(d / "t2"))
    assert r.returncode == 0, r.stderr[-1000:]
    assert "exists, skipping" in r.stdout
    assert p.stat().st_mtime_ns == before, "a finished checkpoint was rewritten without --force"
    assert "other settings" not in r.stdout, r.stdout
    # the same checkpoint under another recipe: still skipped, but the user is told what differs
    r = run("train_compare.py", "--quick", "--variants", "rope", "--steps", "7", "--lr", "0.01",
            "--out", str(d / "ck"), "--results", str(d / "t2"))
    assert r.returncode == 0, r.stderr[-1000:]
    assert "trained with other settings (lr, steps)" in r.stdout, r.stdout
    assert p.stat().st_mtime_ns == before


def one_line_error(r, code):
    assert r.returncode == code, f"exit {r.returncode}, stderr: {r.stderr[-500:]}"
    assert "Traceback" not in r.stderr, r.stderr[-1000:]
    err = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(err) == 1, r.stderr
    return err[0]


def test_bad_input_train_compare(tmp_path):
    msg = one_line_error(run("train_compare.py", "--quick", "--variants", "rope,bogus", "--out", str(tmp_path)), 2)
    assert "bogus" in msg and "known" in msg
    msg = one_line_error(run("train_compare.py", "--quick", "--corpus", str(tmp_path / "nope.txt"),
                             "--out", str(tmp_path)), 2)
    assert "does not exist" in msg
    (tmp_path / "tiny.txt").write_text("abc")
    msg = one_line_error(run("train_compare.py", "--quick", "--corpus", str(tmp_path / "tiny.txt"),
                             "--out", str(tmp_path)), 2)
    assert "too small" in msg


def test_long_context_outputs(quick_run):
    d, _, _ = quick_run
    res = d / "res"
    ctx = list(csv.DictReader(open(res / "context_use.csv")))
    names = [r["variant"] for r in ctx]
    for v in ("none", "learned", "sin", "rope", "alibi", "rope+yarn", "rope_ft_yarn", "rope_ft_none", "alibi_ft"):
        assert v in names, f"{v} missing from context_use.csv"
    meta = json.loads((res / "context_use.json").read_text())["meta"]
    for r in ctx:
        for c in meta["contexts"]:
            assert 0 < float(r[f"c{c}"]) < 10, r
        assert int(r["effective_context"]) in meta["contexts"]
    ret = list(csv.DictReader(open(res / "retrieval.csv")))
    assert {r["variant"] for r in ret} >= {"none", "rope", "alibi", "rope_ft_yarn", "alibi_ft"}
    dists = json.loads((res / "retrieval.json").read_text())["meta"]["distances"]
    for r in ret:
        for dd in dists:
            assert -10 < float(r[f"gain_{dd}"]) < 10 and 0 <= float(r[f"exact_{dd}"]) <= 1, r
    for f in ("context_use.png", "retrieval.png", "context_use.md", "retrieval.md"):
        assert (res / f).stat().st_size > 200, f
    assert {"rope+yarn@16", "rope+linear@16"} <= set(names), "the fixed-factor rows of context use"
    assert {"rope_copy", "rope_copy+yarn", "irope_copy", "irope_copy (no temp)", "rope_copy_ft_yarn"} <= \
        {r["variant"] for r in ret}, "the copy family's rows"
    rmeta = json.loads((res / "retrieval.json").read_text())["meta"]
    assert rmeta["key_alphabet"] == "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    for r in ret:
        for dd in dists:
            assert 0 <= float(r[f"per_char_{dd}"]) <= 1, r
    rows = json.loads((res / "retrieval.json").read_text())["rows"]
    want = {("copy", True): rmeta["copy_trials"], ("copy", False): rmeta["trials"], ("text", True): rmeta["trials"],
            ("text", False): rmeta["trials"]}
    for r in rows:
        assert r["trials"] == want[(r["family"], r["distance"] <= rmeta["copy_trials_upto"])], r
    ck = torch.load(d / "ck" / "rope_copy.pt", weights_only=True)
    assert ck["losses"]["probe"] and all(0 <= v <= 1 for p in ck["losses"]["probe"] for pe in p.values() for v in pe), \
        "the copy family's passkey probe is missing from its training history"


def test_bad_input_long_context(quick_run, tmp_path):
    d, _, _ = quick_run
    base = ("long_context_test.py", "--quick", "--ckpt-dir", str(d / "ck"), "--results", str(tmp_path / "r"))
    msg = one_line_error(run(*base, "--contexts", "0,48,16"), 2)
    assert "increasing" in msg
    msg = one_line_error(run(*base, "--variants", "rope,zzz"), 2)
    assert "zzz" in msg and "known" in msg
    msg = one_line_error(run(*base, "--distances", "24,900000"), 2)
    assert "validation text" in msg
    msg = one_line_error(run(*base, "--contexts", "0,16,48,1000", "--variants", "learned"), 2)
    assert "learned table" in msg
    corpus = tmp_path / "other.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog 0123456789 ABCDEFGHIJKLMNOPQRSTUVWXYZ. " * 1500)
    msg = one_line_error(run(*base, "--corpus", str(corpus), "--variants", "rope"), 2)
    assert "another corpus" in msg
    corpus.write_text("the quick brown fox jumps over the lazy dog 0123456789. " * 1500)
    msg = one_line_error(run(*base, "--corpus", str(corpus), "--variants", "rope", "--only", "retrieval"), 2)
    assert "corpus lacks" in msg and "ABC" in msg, "a corpus without the key letters is named as such"
    assert not (tmp_path / "r").exists(), "a failed run wrote results"


def test_bad_input_extrapolation(quick_run, tmp_path):
    d, _, _ = quick_run
    r = run("extrapolation_test.py", "--quick", "--ckpt-dir", str(tmp_path / "empty"), "--results", str(tmp_path))
    msg = one_line_error(r, 1)
    assert "train_compare.py" in msg, "the error must say which command makes the checkpoints"
    msg = one_line_error(run("extrapolation_test.py", "--quick", "--ckpt-dir", str(d / "ck"), "--variants", "zzz",
                             "--results", str(tmp_path)), 2)
    assert "zzz" in msg
    msg = one_line_error(run("extrapolation_test.py", "--quick", "--ckpt-dir", str(d / "ck"),
                             "--lengths", "64,2048", "--results", str(tmp_path)), 2)
    assert "learned table" in msg
    # a corrupt checkpoint: clear error, and nothing already written is damaged
    bad = tmp_path / "ck"
    bad.mkdir()
    for n in ("none", "learned", "sin", "rope", "alibi"):
        (bad / f"{n}.pt").write_bytes((d / "ck" / f"{n}.pt").read_bytes())
    (bad / "sin.pt").write_bytes(b"not a checkpoint")
    out = tmp_path / "res"
    out.mkdir()
    (out / "extrapolation.md").write_text("previous results\n")
    r = run("extrapolation_test.py", "--quick", "--ckpt-dir", str(bad), "--results", str(out))
    msg = one_line_error(r, 2)
    assert "sin.pt" in msg and "not a readable checkpoint" in msg
    assert "checkpoints:" not in r.stderr, f"none and learned were scored before sin.pt was found broken: {r.stderr}"
    assert (out / "extrapolation.md").read_text() == "previous results\n"
    # a checkpoint trained on another corpus
    corpus = tmp_path / "other.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 1500)
    msg = one_line_error(run("extrapolation_test.py", "--quick", "--ckpt-dir", str(d / "ck"), "--corpus", str(corpus),
                             "--variants", "rope", "--results", str(tmp_path / "x")), 2)
    assert "another corpus" in msg


def refused(main, argv, capsys) -> str:
    """Run a script's main(argv) in this process: it must stop with exit code 2 and exactly one
    line on stderr, `error: ...` (a progress bar there would mean that work had started)."""
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), \
        f"{' '.join(map(str, argv))}: exit {code}, stderr: {err[-800:]}"
    return lines[0]


def test_output_folders_that_cannot_be_written_are_refused_first(quick_run, tmp_path, capsys):
    import benchmark
    import breakage_test
    import extrapolation_test
    import long_context_test
    import train_compare
    import visualize_rope
    d, _, _ = quick_run
    (tmp_path / "file.txt").write_text("a file, not a folder")
    bad = [str(tmp_path / "file.txt" / "out")] + (["/proc/nope"] if Path("/proc/self").is_dir() else [])
    for folder in bad:
        for main, argv in ((extrapolation_test.main, ["--quick", "--ckpt-dir", str(d / "ck"), "--results", folder]),
                           (long_context_test.main, ["--quick", "--ckpt-dir", str(d / "ck"), "--results", folder]),
                           (visualize_rope.main, ["--only", "1", "--out", folder]),
                           (train_compare.main, ["--quick", "--out", str(tmp_path / "ck"), "--results", folder]),
                           (train_compare.main, ["--quick", "--out", folder]),
                           (benchmark.main, ["--quick", "--results", folder]),
                           (breakage_test.main, ["--quick", "--out", folder])):
            msg = refused(main, argv, capsys)
            assert folder in msg and ("not a folder" in msg or "cannot write" in msg), msg
    assert not (tmp_path / "ck").exists(), "train_compare.py trained before it found that --results is unwritable"


def test_explicit_zero_or_empty_is_checked_not_replaced_by_the_default(quick_run, tmp_path, capsys):
    import extrapolation_test
    import long_context_test
    import recipe_ablation
    import visualize_rope
    d, _, _ = quick_run
    res = ["--results", str(tmp_path / "r")]
    assert "--tokens must be positive, got 0" in refused(extrapolation_test.main,
                                                         ["--preset", "preview", "--tokens", "0", *res], capsys)
    assert "--lengths" in refused(extrapolation_test.main, ["--quick", "--lengths", "", *res], capsys)
    for flag in ("--spans", "--trials", "--copy-trials", "--target-len"):
        msg = refused(long_context_test.main, ["--quick", "--ckpt-dir", str(d / "ck"), flag, "0", *res], capsys)
        assert "must be positive" in msg and "0" in msg.split("got ")[1].split(", "), f"{flag} 0: {msg}"
    assert "--contexts" in refused(long_context_test.main, ["--quick", "--ckpt-dir", str(d / "ck"), "--contexts", "",
                                                            *res], capsys)
    assert "--lengths" in refused(recipe_ablation.main, ["--quick", "--lengths", "", *res], capsys)
    for flag in ("--long-len", "--length", "--windows"):
        assert f"{flag} 0" in refused(visualize_rope.main, ["--only", "1", flag, "0", "--out", str(tmp_path)], capsys)
    assert not (tmp_path / "r").exists(), "a refused run wrote results"


def test_visualize_rope_figures_asked_for_must_be_made(quick_run, tmp_path, capsys):
    import visualize_rope
    d, _, _ = quick_run
    out = ["--out", str(tmp_path / "fig")]
    assert "--only" in refused(visualize_rope.main, ["--only", "9", *out], capsys)
    assert "--only" in refused(visualize_rope.main, ["--only", "1,x", *out], capsys)
    msg = refused(visualize_rope.main, ["--only", "5", "--ckpt", str(tmp_path / "missing.pt"), *out], capsys)
    assert "figure 5" in msg and "missing.pt" in msg, msg
    msg = refused(visualize_rope.main, ["--only", "1,6", "--ckpt-dir", str(d / "ck"), *out], capsys)
    assert "figure 6" in msg and "rope_theta10.pt" in msg, msg
    msg = refused(visualize_rope.main, ["--only", "5", "--ckpt", str(d / "ck" / "alibi.pt"), *out], capsys)
    assert "not a RoPE model" in msg, msg
    assert not (tmp_path / "fig").exists(), "figure 1 was drawn before figure 6's checkpoints were found missing"
    # the default (every figure, default folders): a missing checkpoint skips its figure, with a note
    assert visualize_rope.main(["--only", "5", "--ckpt", str(d / "ck" / "rope.pt"), *out]) == 0
    assert (tmp_path / "fig" / "rope_attention.png").is_file()
