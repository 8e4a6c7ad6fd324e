"""FoX, forgetting attention: a score bias from a learned forget gate, as a scheme file (scheme "fox").

Paper: Lin, Nikishin, He and Courville, ICLR 2025, "Forgetting Transformer: Softmax Attention with a
Forget Gate". Every head of every layer has a scalar forget gate, read from the layer's input x_t
(B, T, C; TinyLM passes the normalised input of the block), and the scores get the log of the gates
between key and query:

    f_t = sigmoid(w^T x_t + b)                          (one w (C,), b per head and layer)
    bias_ij = sum_{l=j+1..i} log f_l = c_i - c_j,       c_i = sum_{l<=i} log f_l   (-inf where j > i)

bias_ij <= 0 and falls as the gates between j and i close: ALiBi's -m (i - j) with a slope each token
chooses (constant gates log f = -m give ALiBi's bias). As ALiBi's, it is a number per key less a number per
query, c_i, which a softmax over the keys ignores: the hook returns w_j = -c_j, one number per key, and
attention runs its fused causal kernel with it (attn_common.attn_sdpa's per-key form), no (T, T) bias. There is no other position signal: the paper's
main FoX model has no RoPE. Causal only (c_i - c_j sums the gates after j up to i).

Conventions:
  * Gates, their log and the cumulative sums in float32 whatever the model's dtype, autocast off (the
    reference takes the gate's Linear in bf16 under autocast, its log sigmoid in float32).
  * Cached decoding: the cache state of a layer is c of every key so far, (B, H, Tk); the next call's
    sums continue from its last entry. offset is the position of the first new token.
  * A NoPE layer (nope_every) has no gate there: plain causal attention.
  * Init (option gate_bias): w ~ N(0, 0.02^2), b = gate_bias = 0, so f = 1/2 and log f = -ln 2 per token
    at step 0: attention starts close to the last few tokens. This is the reference's: zhixuan-lin/
    forgetting-transformer, src/forgetting_transformer/model/forgetting_transformer/
    modeling_forgetting_transformer.py (ForgettingAttentionLayer, fgate_type "full": nn.Linear(hidden,
    heads, bias=True), weight N(0, initializer_range = 0.02), bias 0). x-transformers' data-dependent
    ALiBi (lucidrains/x-transformers, x_transformers/x_transformers.py, DataDependentAlibi) sets the bias
    to 5.0 (f = 0.9933, -log f = 0.0067 per token: a look-back of about 150 tokens at step 0) over
    PyTorch's default weight: fox{gate_bias=5.0}. Option decay_max (after the fence, ours): the heads start
    at forgetting times spread from 1 to decay_max tokens, as ALiBi spreads its slopes: fox{decay_max=256.0}.
  * Weight decay: the gate weights, not the biases, as the reference's group_parameters
    (src/forgetting_transformer/utils.py: Linear weights decay, biases not, bias_weight_decay=False).
  * The gates of all layers are one (n_layer * H, C) matrix, rows l*H .. l*H+H-1 for layer l, so the
    optimizer sees one 2-D weight to decay.

Not here: the paper's "Pro" block (output gate, QK-norm, key/value shift) and its pruning kernel.
Here: registered by schemes.py (`--variants fox`). Copied alone it needs torch only (the registration at
the bottom runs inside this repository); `python field/field_fox.py` runs the self-check.
"""
import math
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

try:  # inside the repository the scheme registers itself (--scheme-file); a copy alone works without it
    import schemes
except ImportError:
    schemes = None

GATE_BIAS, INIT_STD = 0.0, 0.02  # the reference's: bias 0 (f = 1/2), weight std initializer_range


def gate_sums(log_f: torch.Tensor, past: torch.Tensor = None):
    """log f (B, H, T) of the new tokens, past c (B, H, Tpast) or None -> (c of the new tokens (B, H, T),
    c of every key (B, H, Tpast + T))."""
    # c_t = c_{t-1} + log f_t: the running sum, continued from the last cached key
    c = log_f.cumsum(dim=-1)  # (B, H, T)
    if past is None:
        return c, c
    c = c + past[..., -1:]    # (B, H, T) + (B, H, 1)
    return c, torch.cat((past, c), dim=-1)  # (B, H, Tpast + T)


class ForgetGates(nn.Module):
    """The forget gates of every layer and head; score_bias is the hook."""

    def __init__(self, n_layer: int, n_head: int, n_embd: int, gate_bias=GATE_BIAS, init_std: float = INIT_STD):
        super().__init__()
        self.n_head = n_head
        self.weight = nn.Parameter(torch.randn(n_layer * n_head, n_embd) * init_std)  # (L H, C)
        # gate_bias: one number, or one per head (H,) that every layer starts from
        self.bias = nn.Parameter(torch.zeros(n_layer, n_head).add(torch.as_tensor(gate_bias)).flatten())  # (L H,)

    def log_forget(self, x: torch.Tensor, index: int) -> torch.Tensor:
        """log f_t of layer `index`'s heads for its input x (B, T, C): (B, H, T), float32."""
        rows = slice(index * self.n_head, (index + 1) * self.n_head)
        w, b = self.weight[rows].float(), self.bias[rows].float()  # (H, C), (H,)
        # log f_t = log sigmoid(w^T x_t + b)
        with torch.autocast(x.device.type, enabled=False):  # float32 inside a bf16 autocast region too
            logit = x.float() @ w.T + b                     # (B, T, C) @ (C, H) -> (B, T, H)
            return F.logsigmoid(logit).transpose(1, 2)      # (B, T, H) -> (B, H, T)

    def score_bias(self, x, layer, offset: int, shared, past, q=None, k=None):
        """Per layer: c of the new tokens, continuing past. Returns (the per-key bias -c of every key,
        (B, H, 1, offset + T), float32; c of every key for the cache)."""
        if layer.nope:
            return None, None
        if (0 if past is None else past.shape[-1]) != offset:
            raise ValueError(f"fox: the cache holds gate sums of {0 if past is None else past.shape[-1]} keys, "
                             f"but the new tokens start at position {offset}")
        c, keys = gate_sums(self.log_forget(x, layer.index), past)  # (B, H, T), (B, H, offset + T)
        # bias_ij = c_i - c_j = w_j - w_i with w = -c: one number per key, attention's per-key form (the -inf
        # after the query comes with it), which it folds into q and k and runs the fused causal kernel on
        return -keys[..., None, :], keys  # (B, H, 1, offset + T)


class Layer(NamedTuple):
    """What score_bias reads of the repository's schemes.Layer (a copy alone has none)."""
    index: int
    nope: bool


# ---- extension: gates spread over heads, ours -------------------------------------------------

# Not the reference's: its full gate starts every head at one bias. After ALiBi, whose slopes spread over the
# heads, head h of every layer starts with its own forgetting time tau_h (-log f = 1 / tau_h), log-spaced from
# 1 to decay_max, as the reference's fixed-gate ablations place theirs (fgate_type "bias_only" / "fixed":
# decay_time_min .. decay_time_max, bias = -log(expm1(1 / tau))): at step 0 one head looks a token back and
# another across the window. fox{decay_max=256.0}; 0, the default, starts every head at gate_bias.
def spread_gate_bias(n_head: int, decay_max: float) -> torch.Tensor:
    """(H,) biases b_h with -log sigmoid(b_h) = 1 / tau_h, tau_h log-spaced over [1, decay_max]."""
    if not decay_max >= 1:
        raise ValueError(f"fox: decay_max is the longest forgetting time in tokens, 0 (off) or at least 1; "
                         f"got {decay_max}")
    tau = torch.logspace(0.0, math.log10(decay_max), n_head, dtype=torch.float64)  # (H,)
    # sigmoid(b) = exp(-1/tau)  <=>  b = -log(exp(1/tau) - 1)
    return (-torch.log(torch.expm1(1.0 / tau))).float()


def _build(cfg) -> ForgetGates:
    o = cfg.pos_options
    bias = spread_gate_bias(cfg.n_head, o["decay_max"]) if o["decay_max"] else o["gate_bias"]
    return ForgetGates(cfg.n_layer, cfg.n_head, cfg.n_embd, bias)


def pair_bias(w: torch.Tensor, i0: int) -> torch.Tensor:
    """The per-key bias w (B, H, 1, Tk) written out for the queries at positions i0 .. Tk - 1: w_j - w_i, -inf where
    j > i, (B, H, Tk - i0, Tk). What attention computes with it; for reading and checking only."""
    Tk = w.shape[-1]
    bias = w - w[..., 0, i0:, None]  # (B, H, 1, Tk) - (B, H, Tk - i0, 1) -> (B, H, Tk - i0, Tk)
    i = torch.arange(i0, Tk)[:, None]
    return bias.masked_fill(torch.arange(Tk)[None, :] > i, float("-inf"))


def _self_check() -> None:
    x = torch.zeros(1, 5, 8)
    gates = ForgetGates(1, 2, 8, gate_bias=math.log(3))  # w^T x = 0: f = sigmoid(ln 3) = 3/4 everywhere
    layer = Layer(0, False)
    w, c = gates.score_bias(x, layer, 0, None, None)
    got = pair_bias(w, 0)  # (1, 2, 5, 5)
    assert abs(got[0, 0, 2, 0].item() - 2 * math.log(0.75)) < 1e-6 and got[0, 1, 3, 3].item() == 0
    assert torch.isneginf(got[0, 0, 1, 2]) and abs(c[0, 0, 4].item() - 5 * math.log(0.75)) < 1e-5
    print(f"ok  f = 3/4: bias[i=2, j=0] = {got[0, 0, 2, 0].item():.6f} = 2 ln(3/4), bias[i, i] = 0, "
          f"-inf at j > i, c_4 = 5 ln(3/4)")
    torch.manual_seed(0)
    gates, x = ForgetGates(1, 2, 8, init_std=1.0), torch.randn(2, 7, 8)
    full = pair_bias(gates.score_bias(x, layer, 0, None, None)[0], 0)
    _, past = gates.score_bias(x[:, :4], layer, 0, None, None)
    w, keys = gates.score_bias(x[:, 4:], layer, 4, None, past)
    part = pair_bias(w, 4)
    err = (part - full[:, :, 4:]).nan_to_num(0.0, 0.0, 0.0).abs().max().item()
    assert err < 1e-5 and torch.equal(part.isinf(), full[:, :, 4:].isinf()) and keys.shape == (2, 2, 7), err
    print(f"ok  tokens 4..6 with the sums of keys 0..3 as cache state equal rows 4..6 of one call "
          f"(max diff {err:.1e})")
    f = torch.sigmoid(torch.tensor(GATE_BIAS)).item()
    assert f == 0.5
    print(f"ok  default gate_bias {GATE_BIAS}: f = {f} at step 0, bias -ln 2 = {math.log(f):.4f} per token")
    b = spread_gate_bias(4, 256.0)
    got = (-F.logsigmoid(b)).reciprocal()  # tau_h = 1 / -log f_h
    err = (got - torch.tensor([1.0, 256 ** (1 / 3), 256 ** (2 / 3), 256.0])).abs().max().item()
    assert err < 1e-3 * 256, (got, err)
    print(f"ok  decay_max 256 over 4 heads: forgetting times {', '.join(f'{t:.1f}' for t in got.tolist())} tokens")


# Registered by schemes.py's last line (importing this file); run as a script, that import has done it.
if schemes is not None and __name__ != "__main__":
    schemes.register(schemes.Scheme("fox", "score bias from the input (forget gate)", __file__, build=_build,
                                    score_bias=ForgetGates.score_bias, causal_only=True, decay=("weight",),
                                    options={"gate_bias": GATE_BIAS, "decay_max": 0.0},
                                    colour="#808000"))  # olive: apart from xPos's green

if __name__ == "__main__":
    import argparse  # --help prints this docstring; any argument is refused before the work starts
    argparse.ArgumentParser(description=__doc__ + "\nRun alone, it runs the self-check.",
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    _self_check()
