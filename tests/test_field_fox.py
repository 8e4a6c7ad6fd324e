"""field_fox.py, the FoX scheme file (Lin et al. 2025, forgetting attention): the bias is the sum of log forget
gates between key and query, computed here in a plain double loop; cached decoding and chunks of 3 equal the
full forward; the gates learn; only the gate weights decay; a bidirectional model is refused. The scheme is
loaded from its file inside a fixture and taken out again, so the rest of the session never sees it."""
import math
from pathlib import Path

import pytest
import torch

import schemes
import tiny_lm  # noqa: F401  (puts field/ on the path)
import field_fox
from conftest import scheme_file_loaded
from lab import variants
from conftest import cached_logits, chunk_error
from tiny_lm import GPTConfig, TinyLM

pytestmark = pytest.mark.usefixtures("one_thread")

PATH = Path(__file__).resolve().parent.parent / "field" / "field_fox.py"
KW = {"vocab_size": 20, "n_layer": 2, "n_head": 2, "n_embd": 16, "max_len": 64}


@pytest.fixture(scope="module")
def fox():
    """The scheme's entry, registered from field_fox.py for this module only."""
    with scheme_file_loaded(PATH, ["fox"]) as entries:
        yield entries["fox"]


def model_with_gates(seed=0, **over):
    """A TinyLM with FoX whose gate weights are large enough that every token's gate differs."""
    torch.manual_seed(seed)
    model = TinyLM(GPTConfig(**{**KW, "pos": "fox", **over})).eval()
    with torch.no_grad():
        torch.nn.init.normal_(model.fox.weight, 0.0, 0.5)
    return model


def loop_bias(weight, bias, x, H, index):
    """bias[b][h][i][j] = sum_{l=j+1..i} log sigmoid(w_h . x_l + b_h) for j <= i, -inf for j > i, plain Python."""
    B, T, C = len(x), len(x[0]), len(x[0][0])
    out = []
    for bi in range(B):
        per_head = []
        for h in range(H):
            row = index * H + h
            logf = [-math.log1p(math.exp(-(sum(weight[row][c] * x[bi][t][c] for c in range(C)) + bias[row])))
                    for t in range(T)]
            per_head.append([[sum(logf[j + 1:i + 1]) if j <= i else -math.inf for j in range(T)] for i in range(T)])
        out.append(per_head)
    return torch.tensor(out, dtype=torch.float64)


def test_bias_is_the_sum_of_log_gates_between_key_and_query(fox):
    """The per-key bias w_j - w_i against a double loop over (i, j): a first call over tokens 0..5, then tokens 6..8
    with the first call's sums as cache state."""
    model = model_with_gates()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 9, KW["n_embd"], generator=g)
    with torch.no_grad():
        model.fox.bias.copy_(torch.tensor([0.5, 3.0, -1.0, 2.0]))
    w, b = model.fox.weight.detach().double().tolist(), model.fox.bias.detach().double().tolist()
    for index in (0, 1):
        want = loop_bias(w, b, x.double().tolist(), KW["n_head"], index)  # (B, H, 9, 9)
        layer = schemes.Layer(index, False, 0, None)
        with torch.no_grad():
            first, past = fox.score_bias(model.fox, x[:, :6], layer, 0, None, None)
            later, keys = fox.score_bias(model.fox, x[:, 6:], layer, 6, None, past)
        assert past.shape == (2, 2, 6) and keys.shape == (2, 2, 9), (past.shape, keys.shape)
        assert first.shape == (2, 2, 1, 6) and later.shape == (2, 2, 1, 9), "a per-key bias (B, H, 1, Tk)"
        rows, later = field_fox.pair_bias(first, 0), field_fox.pair_bias(later, 6)  # w_j - w_i, as attention reads it
        for got, ref in ((rows, want[:, :, :6, :6]), (later, want[:, :, 6:, :])):
            assert torch.equal(got.isinf(), ref.isinf()), f"layer {index}: -inf exactly where j > i"
            err = (got.double() - ref).nan_to_num(0.0, 0.0, 0.0).abs().max().item()
            assert err < 1e-5, f"layer {index}: chunk vs double loop, max diff {err:.2e}"


def test_init_options_and_decay_follow_the_reference(fox):
    """Default gate bias 0 (the reference: f = 1/2 at step 0) and weight std 0.02, kept by TinyLM's init; an
    option value reaches build; the optimizer decays the gate weights, not their biases."""
    assert fox.causal_only and fox.options == {"gate_bias": 0.0, "decay_max": 0.0} and fox.decay == ("weight",)
    torch.manual_seed(0)
    model = TinyLM(GPTConfig(**KW, pos="fox"))
    assert torch.equal(model.fox.bias, torch.zeros(4)), model.fox.bias
    std = model.fox.weight.std().item()
    assert 0.01 < std < 0.03, f"gate weights drawn at std 0.02, got {std:.4f}"
    torch.manual_seed(0)
    assert torch.equal(TinyLM(GPTConfig(**KW, pos="fox", pos_options={"gate_bias": 5.0})).fox.bias,
                       torch.full((4,), 5.0))
    opt = variants.make_optimizer(model, variants.TrainConfig())
    decayed = {id(p) for grp in opt.param_groups if grp["weight_decay"] > 0 for p in grp["params"]}
    assert id(model.fox.weight) in decayed and id(model.fox.bias) not in decayed


def test_spread_gates_start_at_log_spaced_forgetting_times(fox):
    """fox{decay_max=D}: head h of every layer starts with f_h = exp(-1 / tau_h), tau_h = D^(h / (H - 1)), the
    reference's fixed-gate ablation's rule (bias = -log(expm1(1 / tau))), here written from its definition."""
    model = TinyLM(GPTConfig(**{**KW, "n_head": 4}, pos="fox", pos_options={"decay_max": 64.0}))
    f = torch.sigmoid(model.fox.bias.detach().double()).view(KW["n_layer"], 4)  # (L, H)
    want = torch.tensor([math.exp(-1 / 64 ** (h / 3)) for h in range(4)], dtype=torch.float64)
    err = (f - want).abs().max().item()
    assert err < 1e-6, f"f at step 0 against exp(-1/tau), max diff {err:.2e}"
    with pytest.raises(ValueError, match="decay_max"):
        TinyLM(GPTConfig(**KW, pos="fox", pos_options={"decay_max": 0.5}))


def test_cached_decoding_and_chunks_equal_the_full_forward(fox):
    """One token at a time through the cache (the gate sums of the past keys as state) and queries in chunks of 3
    give the full forward's logits."""
    model = model_with_gates()
    ids = torch.randint(0, 20, (2, 30), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = model(ids).logits
        cached, cache = cached_logits(model, ids, 11)
        err = (cached - full).abs().max().item()
        assert err < 1e-5, f"fox: cached decoding vs full forward, max logit diff {err:.2e}"
        assert cache[0].state.shape == (2, KW["n_head"], 30), "the cache keeps the gate sums of every key"
        err = chunk_error(model, ids, full)
        assert err < 1e-5, f"fox: chunks of 3 vs one chunk, max logit diff {err:.2e}"


def test_the_gates_get_a_gradient(fox):
    """The loss reaches every gate's weight and bias."""
    model = model_with_gates().train()
    ids = torch.randint(0, 20, (2, 17), generator=torch.Generator().manual_seed(3))
    model(ids[:, :-1], targets=ids[:, 1:]).loss.backward()
    for name in ("weight", "bias"):
        grad = getattr(model.fox, name).grad
        assert grad is not None and torch.isfinite(grad).all(), name
        per_gate = grad.abs().view(KW["n_layer"] * KW["n_head"], -1).amax(dim=-1)
        assert (per_gate > 0).all(), f"fox.{name}: a gate without gradient, max |grad| per gate {per_gate.tolist()}"


def test_a_bidirectional_model_is_refused(fox):
    with pytest.raises(ValueError, match="causal only") as e:
        GPTConfig(**KW, pos="fox", causal=False)
    assert "\n" not in str(e.value)
