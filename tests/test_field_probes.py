"""experiments/field_probes.py: the weight on the first keys equals the explicit softmax weights summed over those keys
(RoPE, and ALiBi with a sink logit); KERPLE's stuck flag and FIRE's L are read from the stored values; the FoX
gate probe returns -log sigmoid(b) for a gate that ignores its input."""
import math

import pytest
import torch
import torch.nn.functional as F

from experiments import field_probes
from attn_common import attn
from tiny_models import VOCAB, tiny

pytestmark = pytest.mark.usefixtures("one_thread")


def explicit_first_weight(model, ids, n):
    """Per layer: the explicit softmax weights (attn_common.attn, sinks as a zero-valued extra column) of the
    layer's own q and k, summed over keys 0..n-1, (B, H, T)."""
    inputs = {}
    hooks = [b.attn.register_forward_pre_hook(lambda mod, args, l=l: inputs.__setitem__(l, args[0]))
             for l, b in enumerate(model.blocks)]
    with torch.no_grad():
        model(ids)
        for h in hooks:
            h.remove()
        out = []
        for l, b in enumerate(model.blocks):
            q, k, v = b.attn.split_heads(inputs[l])  # 3 x (B, H, T, D)
            bias = None
            if model.rope is not None:
                q, k = model.rope(q, k)
            else:  # ALiBi: -m_h (i - j), future keys hidden
                T = ids.shape[1]
                i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
                slopes = torch.tensor([2 ** (-8 * (h + 1) / q.shape[1]) for h in range(q.shape[1])])
                bias = (-slopes[:, None, None] * (i - j)).masked_fill(j > i, float("-inf"))  # (H, T, T)
            scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (B, H, T, D) @ (B, H, D, T) -> (B, H, T, T)
            scores = scores + (bias if bias is not None else 0)
            scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
            if getattr(b.attn, "sink", None) is not None:  # one more column of logit s_h whose value is 0
                sink = b.attn.sink.view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
                w = F.softmax(torch.cat((scores, sink), -1), -1)[..., :-1]
            else:
                w = F.softmax(scores, -1)
            out.append(w[..., :n].sum(-1))  # (B, H, T)
    return out


@pytest.mark.parametrize("pos,kw", [("rope", {}), ("alibi", {"sinks": True})])
def test_first_key_weight_is_the_softmax_weight_on_those_keys(pos, kw):
    torch.manual_seed(0)
    model = tiny(pos, **kw)
    if kw.get("sinks"):
        with torch.no_grad():
            for b in model.blocks:
                b.attn.sink.copy_(torch.tensor([1.5, -0.5]))
    ids = torch.randint(0, len(VOCAB), (2, 40), generator=torch.Generator().manual_seed(1))
    store = []
    with torch.no_grad(), field_probes.first_key_weight(4, store):
        model(ids)
    want = explicit_first_weight(model, ids, 4)
    assert len(store) == len(want) == 2
    for l, (got, ref) in enumerate(zip(store, want)):
        err = (got - ref).abs().max().item()
        assert err < 1e-5, f"{pos} layer {l}: weight on keys 0..3, max diff {err:.2e}"
    # the model runs as without the probe once it is closed
    assert field_probes.tiny_lm.attn_sdpa.__name__ == "attn_sdpa"


def test_first_tokens_rows_average_the_right_queries():
    torch.manual_seed(0)
    model = tiny("rope")
    ids = torch.randint(0, len(VOCAB), (3, 48), generator=torch.Generator().manual_seed(2))
    rows = field_probes.first_tokens(model, ids, train_len=16, n=4)
    want = torch.stack(explicit_first_weight(model, ids, 4)).mean(1)  # (layers, H, T), mean over windows
    for r in rows:
        m = want[r["layer"]]
        for key, ref in (("in_window", m[:, 4:16].mean()), ("past", m[:, 16:].mean()),
                         ("max_head_past", m[:, 16:].mean(-1).max())):
            assert abs(r[key] - ref.item()) < 1e-5, (r["layer"], key, r[key], ref.item())
    assert abs(rows[0]["uniform_past"] - sum(4 / (i + 1) for i in range(16, 48)) / 32) < 1e-12


def test_kerple_stuck_and_fire_threshold_are_read_from_the_stored_values():
    model = tiny("kerple")
    with torch.no_grad():
        model.kerple.r1.copy_(torch.tensor([0.004, 1.2]))
        model.kerple.r2.copy_(torch.tensor([0.5, 0.02]))
    rows = field_probes.kerple_rows(model)
    assert [r["stuck"] for r in rows] == [True, False], rows
    fire = tiny("fire", train_len=16)
    with torch.no_grad():
        fire.fire.layers[1].L_scale.fill_(-0.75)  # L = |L_scale * L0|
    got = [r["L"] for r in field_probes.fire_rows(fire, 16)]
    assert got == [16.0, 12.0], got


def test_fox_gate_probe_of_an_input_blind_gate_is_its_bias():
    model = tiny("fox")
    with torch.no_grad():
        model.fox.weight.zero_()
        model.fox.bias.copy_(torch.tensor([0.0, 2.0, -1.0, 4.0]))  # rows l*H + h
    val = torch.randint(0, 35, (2000,), generator=torch.Generator().manual_seed(3))
    rows = field_probes.fox_gate_rows(model, val, VOCAB, n_windows=4, train_len=64)
    for r in rows:
        want = -F.logsigmoid(torch.tensor([0.0, 2.0, -1.0, 4.0])[r["layer"] * 2 + r["head"]]).item()
        assert abs(r["keys"] - want) < 1e-6 and abs(r["other"] - want) < 1e-6, (r, want)


def test_cope_probe_reads_the_length_of_each_counts_embedding():
    """|e[n]| per layer at the probed counts inside the table, against the norm computed here; a count past the
    table (npos - 1 = 16 at train_len 16) is left out."""
    model = tiny("cope", train_len=16)
    with torch.no_grad():
        model.cope.emb.copy_(torch.randn_like(model.cope.emb))
    rows = field_probes.cope_rows(model)
    emb = model.cope.emb.detach()  # a parameter: its values, not a graph
    assert {r["n"] for r in rows} == {n for n in field_probes.COPE_COUNTS if n <= 16}, rows
    err = max(abs(r["norm"] - math.sqrt(sum(float(x) ** 2 for x in emb[r["layer"], :, r["n"]]))) for r in rows)
    assert err < 1e-5 and len(rows) == emb.shape[0] * 6, f"|e[n]| against the sum of squares: max diff {err:.2e}"
