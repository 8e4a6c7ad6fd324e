"""experiments/anchor_xtransformers.py: the independent model is the size and scheme docs/recipe.md says,
and a --quick run trains, scores, writes and reuses. Skipped without x-transformers."""
import importlib.util
import json

import pytest
import torch

from pos_alibi import alibi_slopes
from pos_rope import rope_inv_freq

# x-transformers is imported by the fixture, not here: it takes seconds, and every pytest worker imports this file
# to collect it. The tests share one worker (xdist group "xt"), which pays it once.
pytestmark = [pytest.mark.skipif(importlib.util.find_spec("x_transformers") is None,
                                 reason="x-transformers is not installed (requirements-test.txt)"),
              pytest.mark.xdist_group("xt")]


@pytest.fixture(scope="module")
def anchor():
    """anchor_xtransformers, imported on first use."""
    from experiments import anchor_xtransformers
    return anchor_xtransformers


def test_the_anchor_has_tinylm_size_and_no_absolute_table(anchor):
    for scheme in ("rope", "rope_half", "alibi"):
        m = anchor.XTransformersLM(anchor.AnchorConfig(scheme=scheme), vocab_size=80, seq_len=256)
        names = [n for n, _ in m.named_parameters()]
        assert not [n for n in names if "pos_emb" in n], f"{scheme}: an absolute position table is trained: {names[:3]}"
        q = [p for n, p in m.named_parameters() if n.endswith("to_q.weight")]
        assert len(q) == 4 and all(p.shape == (128, 128) for p in q), f"{scheme}: q projections {[p.shape for p in q]}"
        assert m.net.token_emb.emb.weight.shape == (80, 128)
        out = m(torch.randint(0, 80, (2, 300)))  # longer than seq_len: nothing limits the length
        assert out.logits.shape == (2, 300, 80) and out.loss is None, out.logits.shape


def test_the_field_anchors_are_the_settings_docs_field_compares(anchor):
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


def test_the_anchor_rotates_the_whole_head_at_ropes_frequencies(anchor):
    """rope: rotary_emb_dim = dim_head, theta_i = 10000^(-2i/32) over all 32 dims, as TinyLM's RoPE;
    rope_half (x-transformers' default): 16 of the 32 dims, pos_rope's rule at d = 16."""
    for scheme, d in (("rope", 32), ("rope_half", 16)):
        m = anchor.XTransformersLM(anchor.AnchorConfig(scheme=scheme), vocab_size=80, seq_len=256)
        got = m.net.attn_layers.rotary_pos_emb.inv_freq
        diff = (got - rope_inv_freq(d)).abs().max().item() if got.shape == (d // 2,) else float("inf")
        assert diff < 1e-7, f"{scheme}: inv_freq {got.tolist()}, max diff {diff:.2e} to rope_inv_freq({d})"


def test_the_anchors_alibi_slopes_are_pos_alibis(anchor):
    m = anchor.XTransformersLM(anchor.AnchorConfig(scheme="alibi"), vocab_size=80, seq_len=256)
    got = m.net.attn_layers.rel_pos.slopes.flatten()
    diff = (got - alibi_slopes(4)).abs().max().item()
    assert diff < 1e-7, f"slopes {got.tolist()} vs pos_alibi {alibi_slopes(4).tolist()}, max diff {diff:.2e}"


def test_the_loss_is_cross_entropy_of_the_logits(anchor):
    torch.manual_seed(0)
    m = anchor.XTransformersLM(anchor.AnchorConfig(n_layer=1, n_embd=32, scheme="alibi"), vocab_size=20, seq_len=16)
    x, y = torch.randint(0, 20, (2, 16)), torch.randint(0, 20, (2, 16))
    out = m(x, y)
    logp = torch.log_softmax(out.logits, -1)
    want = -logp.gather(-1, y.unsqueeze(-1)).mean()
    assert abs(out.loss.item() - want.item()) < 1e-5, f"loss {out.loss.item()} vs {want.item()}"


def test_quick_run_writes_rows_and_reuses_its_checkpoints(anchor, tmp_path, monkeypatch, capsys):
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


def test_bad_input_is_one_line_before_any_work(anchor, refused, tmp_path):
    assert "warp" in refused(anchor.main, ["--schemes", "rope,warp"])
    assert "never writes results/" in refused(anchor.main, ["--quick", "--results", "results"])


def test_tinylm_with_x_transformers_t5_weights_gives_its_logits(anchor):
    """The whole forward against the anchor's: TinyLM(pos t5{scale=sqrt(32)}) with the weights of x-transformers'
    T5 model copied in (its LayerNorm gains are stored minus 1 and have no bias; our token table is multiplied
    by sqrt(C) in forward) gives the same logits. So the anchor's T5 gap (docs/field.md) is not the forward."""
    import math
    from tiny_lm import GPTConfig, TinyLM
    torch.manual_seed(0)
    theirs = anchor.XTransformersLM(anchor.AnchorConfig(n_layer=2, scheme="t5"), vocab_size=78, seq_len=256).eval()
    ours = TinyLM(GPTConfig(pos="t5", vocab_size=78, n_layer=2, pos_options={"scale": math.sqrt(32)})).eval()
    w = dict(theirs.named_parameters())
    layer = "net.attn_layers.layers"
    with torch.no_grad():
        ours.tok_emb.weight.copy_(w["net.token_emb.emb.weight"] / math.sqrt(128))
        ours.t5.table.weight.copy_(w["net.attn_layers.rel_pos.relative_attention_bias.weight"])
        for i, b in enumerate(ours.blocks):
            a, f = 2 * i, 2 * i + 1  # x-transformers: attention and feed-forward are layers of their own
            for ln, k in ((b.ln1, a), (b.ln2, f)):
                ln.weight.copy_(w[f"{layer}.{k}.0.0.gamma"] + 1)
                ln.bias.zero_()
            b.attn.qkv.weight.copy_(torch.cat([w[f"{layer}.{a}.1.to_{x}.weight"] for x in "qkv"]))  # (3C, C)
            b.attn.out.weight.copy_(w[f"{layer}.{a}.1.to_out.weight"])
            b.mlp.fc.weight.copy_(w[f"{layer}.{f}.1.ff.0.0.weight"])
            b.mlp.fc.bias.copy_(w[f"{layer}.{f}.1.ff.0.0.bias"])
            b.mlp.proj.weight.copy_(w[f"{layer}.{f}.1.ff.2.weight"])
            b.mlp.proj.bias.copy_(w[f"{layer}.{f}.1.ff.2.bias"])
        ours.ln_f.weight.copy_(w["net.attn_layers.final_norm.gamma"] + 1)
        ours.ln_f.bias.zero_()
        ours.head.weight.copy_(w["net.to_logits.weight"])
        ids = torch.randint(0, 78, (2, 300))  # past 128: the far bucket; past 256: the training length
        err = (ours(ids).logits - theirs(ids).logits).abs().max().item()
    assert err < 1e-4, f"TinyLM t5{{scale=5.657}} against x-transformers' T5 with the same weights: max diff {err:.2e}"
