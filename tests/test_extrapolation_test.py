"""extrapolation_test.py: the evaluation span (blocks spread over the text), the clamped learned rows;
on the shared --quick checkpoints (conftest.quick_repo) its outputs parse and agree with each other,
and its answers to bad input are one line."""
import json
import math

import pytest
import torch

import extrapolation_test as ET
import tiny_lm
from lab import checkpoint_io
from lab import corpora
from tiny_models import tiny  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def test_spread_blocks_cover_the_text():
    starts = ET.spread_blocks(10_001, 1000, 4)
    assert starts[0] == 0 and starts[-1] == 9000 and all(b - a >= 1000 for a, b in zip(starts, starts[1:]))
    with pytest.raises(corpora.CorpusError, match="fewer than"):
        ET.spread_blocks(3000, 1000, 3)


def test_clamped_learned_rows():
    model = tiny("learned")
    ET.clamp_learned_rows(model, 64)
    w = model.learned.table.weight
    assert torch.equal(w[64:], w[63].expand_as(w[64:])) and not torch.equal(w[62], w[63])


# ----------------------------------------------------------------------------- the --quick run

def test_extrapolation_outputs_parse(quick_ck, quick_repo):
    res = quick_repo.res
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
    # StreamingLLM and its window (lab/streaming.py) on rope and alibi: a cache of the training length, so the model's
    # own numbers up to it, other ones past it; DroPE's recalibration has no positions, its control keeps RoPE
    L_train = by_name["rope"]["train_len"]
    for base in ("rope", "alibi"):
        for switch in ("streaming", "window"):
            row = by_name[f"{base} ({switch})"]
            assert row[f"ppl_{L_train}"] == pytest.approx(by_name[base][f"ppl_{L_train}"], rel=1e-4), (base, switch)
            assert row[f"ppl_{lengths[-1]}"] != pytest.approx(by_name[base][f"ppl_{lengths[-1]}"], rel=1e-4), row
    assert (by_name["rope_ft_drope"]["pos"], by_name["rope_ft_keep"]["pos"]) == ("none", "rope")
    assert "StreamingLLM" in md, "the streaming rows' note is missing"
    learned_md = next(ln for ln in body if ln.startswith("| learned |"))
    assert "†" in learned_md, "learned cells beyond the training length must be marked as untrained rows"


def test_bad_input_extrapolation(quick_ck, tmp_path, refused):
    msg = refused(ET.main, ["--quick", "--ckpt-dir", str(tmp_path / "empty"), "--results", str(tmp_path)])
    assert "train_compare.py" in msg, "the error must say which command makes the checkpoints"
    msg = refused(ET.main, ["--quick", "--ckpt-dir", str(quick_ck), "--variants", "zzz", "--results", str(tmp_path)])
    assert "zzz" in msg
    assert "--variants is empty" in refused(ET.main, ["--quick", "--ckpt-dir", str(quick_ck), "--variants", ",",
                                                      "--results", str(tmp_path)])
    msg = refused(ET.main, ["--quick", "--ckpt-dir", str(quick_ck), "--lengths", "64,2048", "--results", str(tmp_path)])
    assert "learned table" in msg
    # a corrupt checkpoint: clear error, and nothing already written is damaged
    bad = tmp_path / "ck"
    bad.mkdir()
    for n in ("none", "learned", "sin", "rope", "alibi"):
        (bad / f"{n}.pt").write_bytes((quick_ck / f"{n}.pt").read_bytes())
    (bad / "sin.pt").write_bytes(b"not a checkpoint")
    out = tmp_path / "res"
    out.mkdir()
    (out / "extrapolation.md").write_text("previous results\n")
    msg = refused(ET.main, ["--quick", "--ckpt-dir", str(bad), "--results", str(out)])
    # refused() allows that one line only: no "checkpoints:" line, none and learned were not scored before sin.pt
    assert "sin.pt" in msg and "not a readable checkpoint" in msg
    assert (out / "extrapolation.md").read_text() == "previous results\n"
    # a checkpoint trained on another corpus
    corpus = tmp_path / "other.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 1500)
    msg = refused(ET.main, ["--quick", "--ckpt-dir", str(quick_ck), "--corpus", str(corpus), "--variants", "rope",
                            "--results", str(tmp_path / "x")])
    assert "another corpus" in msg


def test_a_fixed_factor_scaling_row_is_scored_at_its_factor(tmp_path):
    """--scalings yarn@16: the row is scored (it raised KeyError before) and its table row names
    yarn at the fixed factor 16, against the window-factor row's "s"."""
    from types import SimpleNamespace
    torch.manual_seed(0)
    model = tiny("rope")
    vocab = "".join(chr(33 + i) for i in range(model.cfg.vocab_size))
    checkpoint_io.save_checkpoint(tmp_path / "rope.pt", model, vocab, 1, {"train_loss": [1.0], "val_loss": [1.0]},
                            {"train_config": {"seq_len": 32}})
    ids = torch.randint(0, model.cfg.vocab_size, (600,))
    lengths = [32, 128]
    data = ("cpu", ids, vocab, "any", ET.spread_blocks(ids.numel(), lengths[-1], 2))
    s = {"lengths": lengths, "decode_len": 0}
    args = SimpleNamespace(batch_tokens=1024)
    fixed, *_ = ET.score_row(("rope+yarn@16", tmp_path / "rope.pt", "yarn@16"), data, s, args, "make")
    window, *_ = ET.score_row(("rope+yarn", tmp_path / "rope.pt", "yarn"), data, s, args, "make")
    assert (fixed["scaling"], fixed["scaling_factor"]) == ("yarn", "16"), fixed
    assert (window["scaling"], window["scaling_factor"]) == ("yarn", "s"), window
    assert fixed["ppl_32"] != window["ppl_32"], "factor 16 at the training length is not factor 1"


def test_an_unknown_variant_points_to_scheme_file(tmp_path, refused):
    """A name no scheme has: the one line names it and ends by saying how a scheme of one's own comes in."""
    msg = refused(ET.main, ["--quick", "--ckpt-dir", str(tmp_path), "--variants", "no_such_scheme",
                            "--results", str(tmp_path / "res")])
    assert "unknown variant(s) no_such_scheme;" in msg and msg.endswith(
        "a scheme of your own comes in with --scheme-file PATH (docs/your_scheme.md)"), msg
