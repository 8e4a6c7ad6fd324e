"""anchor_xtransformers.py: the independent model is the size and scheme docs/recipe.md says,
and a --quick run trains, scores, writes and reuses. Skipped without x-transformers."""
import json

import pytest
import torch

pytest.importorskip("x_transformers")

import anchor_xtransformers as anchor  # noqa: E402
from pos_alibi import alibi_slopes  # noqa: E402
from pos_rope import rope_inv_freq  # noqa: E402


def test_the_anchor_has_tinylm_size_and_no_absolute_table():
    for scheme in ("rope", "rope_half", "alibi"):
        m = anchor.XTransformersLM(anchor.AnchorConfig(scheme=scheme), vocab_size=80, seq_len=256)
        names = [n for n, _ in m.named_parameters()]
        assert not [n for n in names if "pos_emb" in n], f"{scheme}: an absolute position table is trained: {names[:3]}"
        q = [p for n, p in m.named_parameters() if n.endswith("to_q.weight")]
        assert len(q) == 4 and all(p.shape == (128, 128) for p in q), f"{scheme}: q projections {[p.shape for p in q]}"
        assert m.net.token_emb.emb.weight.shape == (80, 128)
        out = m(torch.randint(0, 80, (2, 300)))  # longer than seq_len: nothing limits the length
        assert out.logits.shape == (2, 300, 80) and out.loss is None, out.logits.shape


def test_the_field_anchors_are_the_settings_docs_field_compares():
    """t5: 32 causal buckets, max distance 128, one table (as field_relbias.py); xpos: the whole head, scale
    base 512, zeta_i = (2i/d + 0.4)/1.4 (as field_xpos.py); fox: a forget gate per head, its bias at 5.0
    (x-transformers' start; field_fox.py's is 0). Each is causal: a later token changes no earlier logit."""
    t5 = anchor.XTransformersLM(anchor.AnchorConfig(scheme="t5"), vocab_size=80, seq_len=256).net.attn_layers.rel_pos
    assert (t5.num_buckets, t5.max_distance, t5.causal) == (32, 128, True), vars(t5).keys()
    rot = anchor.XTransformersLM(anchor.AnchorConfig(scheme="xpos"), vocab_size=80, seq_len=256).net.attn_layers
    zeta = (torch.arange(0, 32, 2) / 32 + 0.4) / 1.4
    err = (rot.rotary_pos_emb.scale - zeta).abs().max().item()
    assert rot.rotary_pos_emb.scale_base == 512 and err < 1e-6, f"xpos scale: max diff {err:.2e}"
    fox = anchor.XTransformersLM(anchor.AnchorConfig(scheme="fox"), vocab_size=80, seq_len=256)
    gates = [m for n, m in fox.named_modules() if type(m).__name__ == "DataDependentAlibi"]
    assert len(gates) == 4 and all(float(g.to_forget_gates[0].bias.detach().mean()) == 5.0 for g in gates), len(gates)
    for scheme in ("t5", "xpos", "fox"):
        torch.manual_seed(0)
        m = anchor.XTransformersLM(anchor.AnchorConfig(n_layer=2, n_head=2, n_embd=32, scheme=scheme), 20, 64)
        idx = torch.randint(0, 20, (1, 90))
        later = idx.clone()
        later[0, 60] = (later[0, 60] + 1) % 20
        with torch.no_grad():
            diff = (m(idx).logits - m(later).logits)[:, :60].abs().max().item()
        assert diff == 0, f"{scheme}: a later token moved an earlier logit by {diff:.2e}"


def test_the_anchor_rotates_the_whole_head_at_ropes_frequencies():
    """rope: rotary_emb_dim = dim_head, theta_i = 10000^(-2i/32) over all 32 dims, as TinyLM's RoPE;
    rope_half (x-transformers' default): 16 of the 32 dims, pos_rope's rule at d = 16."""
    for scheme, d in (("rope", 32), ("rope_half", 16)):
        m = anchor.XTransformersLM(anchor.AnchorConfig(scheme=scheme), vocab_size=80, seq_len=256)
        got = m.net.attn_layers.rotary_pos_emb.inv_freq
        diff = (got - rope_inv_freq(d)).abs().max().item() if got.shape == (d // 2,) else float("inf")
        assert diff < 1e-7, f"{scheme}: inv_freq {got.tolist()}, max diff {diff:.2e} to rope_inv_freq({d})"


def test_the_anchors_alibi_slopes_are_pos_alibis():
    m = anchor.XTransformersLM(anchor.AnchorConfig(scheme="alibi"), vocab_size=80, seq_len=256)
    got = m.net.attn_layers.rel_pos.slopes.flatten()
    diff = (got - alibi_slopes(4)).abs().max().item()
    assert diff < 1e-7, f"slopes {got.tolist()} vs pos_alibi {alibi_slopes(4).tolist()}, max diff {diff:.2e}"


def test_the_loss_is_cross_entropy_of_the_logits():
    torch.manual_seed(0)
    m = anchor.XTransformersLM(anchor.AnchorConfig(n_layer=1, n_embd=32, scheme="alibi"), vocab_size=20, seq_len=16)
    x, y = torch.randint(0, 20, (2, 16)), torch.randint(0, 20, (2, 16))
    out = m(x, y)
    logp = torch.log_softmax(out.logits, -1)
    want = -logp.gather(-1, y.unsqueeze(-1)).mean()
    assert abs(out.loss.item() - want.item()) < 1e-5, f"loss {out.loss.item()} vs {want.item()}"


def test_quick_run_writes_rows_and_reuses_its_checkpoints(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # runs/quick/anchor here; the corpus is found beside tiny_lm.py
    argv = ["--quick", "--threads", "1"]
    assert anchor.main(argv) == 0
    path = tmp_path / "runs/quick/anchor/results/anchor_xtransformers.json"
    first = json.loads(path.read_text())
    assert [r["scheme"] for r in first["rows"]] == ["rope", "alibi"], first["rows"]
    assert all(1 < r["ppl@64"] < 100 and 1 < r["ppl@256"] < 100 for r in first["rows"]), first["rows"]
    assert not (tmp_path / "results").exists(), "a --quick run wrote results/"
    capsys.readouterr()
    assert anchor.main(argv + ["--schemes", "alibi"]) == 0
    assert "alibi: reusing" in capsys.readouterr().out
    again = json.loads(path.read_text())
    numbers = lambda rows: [{k: v for k, v in r.items() if k != "provenance"} for r in rows]  # noqa: E731
    assert numbers(again["rows"]) == numbers(first["rows"]), "a rerun from the checkpoints changed a number"
    made = again["rows"][1]["provenance"]
    assert made["command"].endswith("--schemes alibi") and made["config"]["decoder"] == {"alibi_pos_bias": True}, made


def test_bad_input_is_one_line_before_any_work(refused, tmp_path):
    assert "warp" in refused(anchor.main, ["--schemes", "rope,warp"])
    assert "never writes results/" in refused(anchor.main, ["--quick", "--results", "results"])
