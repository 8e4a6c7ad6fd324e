"""schemes.py: the registry of position schemes and the hooks TinyLM calls them through.

1. The built-in five, their RoPE options and the hybrid layouts give, through the hooks, exactly
   what the model gave before the hooks existed: losses and logits pinned from the tiny_lm of
   commit af2da5a, compared with ==; state_dict keys as the model always named them.
2. Toy schemes for the hooks the five leave unused, each against a definition: a forget gate
   (a bias computed from the layer's input, with state in the KV cache; constant gates are ALiBi),
   attention sinks (extra logits; -inf sinks are no sinks), a scaled rotation with RoPE's options
   (xPos's shape: the layer's RoPE tables reach it, local and global ones).
3. A toy scheme in a module of its own, registered by importing it, trained and scored by
   train_compare.py and extrapolation_test.py with --quick, no other file edited.
"""
import contextlib
import hashlib
import importlib
import json
import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import extrapolation_test
import schemes
import tiny_lm
import train_compare
from lab import variants
from conftest import cached_logits
from schemes import Scheme
from lab.options import layer_roles, make_config, make_model, option

pytestmark = pytest.mark.usefixtures("one_thread")

V = 20
KW = {"vocab_size": V, "n_layer": 4, "n_head": 2, "n_embd": 32, "max_len": 128}


def max_diff(a, b) -> float:
    return (a.double() - b.double()).abs().max().item()


def ids(B, T, seed):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


@contextlib.contextmanager
def registered(entry: Scheme):
    """The scheme is registered inside the block only, so no other test meets it."""
    schemes.register(entry)
    try:
        yield entry
    finally:
        schemes.unregister(entry.name)


# ============================================================================ 1. the five, unchanged

# Computed with the tiny_lm of commit af2da5a, before the hooks, on CPU in float32 with one thread:
# (loss, logits[1, -1, :3], the first 16 hex digits of sha256 over all logits' bytes, and the logits
# [0, -1, :2] after a prefix of 64 and 8 tokens one at a time through the KV cache (causal only)).
# Compared with ==: the hooks must not change a bit. Another CPU or BLAS may round differently; then
# recompute these with that commit on that machine before reading a failure as a change.
OLD_INIT = {"qkv_init": "unit", "resid_init": "scaled", "linear_init": "gpt2"}  # the recipe at af2da5a (docs/recipe.md)
PINNED = {
    'none': (2.991335153579712, [-0.10100764781236649, 0.24888145923614502, -0.0684964656829834], 'e1da383906ce9c62', [0.009274673648178577, -0.21764613687992096]),
    'learned': (3.0049479007720947, [-0.09670320898294449, -0.09577676653862, -0.1906455159187317], '020a481c1a6d6deb', [-0.10903191566467285, 0.03052159585058689]),
    'sin': (2.998626232147217, [-0.04497867077589035, 0.27135762572288513, -0.0907159224152565], 'a310b6dca157f62d', [0.05300920829176903, -0.10472292453050613]),
    'rope': (2.991105556488037, [-0.10182181000709534, 0.250291109085083, -0.06948643922805786], '89cc62fdbb633b75', [0.00852444302290678, -0.22014330327510834]),
    'alibi': (2.9912760257720947, [-0.10051827877759933, 0.24800269305706024, -0.06882017105817795], '464ee78f77933c18', [0.008771686814725399, -0.21764789521694183]),
    'none_bidirectional': (2.9912569522857666, [-0.10108458995819092, 0.24885188043117523, -0.06848619878292084], 'c2fc48e48e9e47c8', None),
    'learned_bidirectional': (3.0050270557403564, [-0.09667427092790604, -0.09572324901819229, -0.19062481820583344], '615ee6cb3d45045d', None),
    'sin_bidirectional': (2.9987213611602783, [-0.04507064074277878, 0.2713507413864136, -0.09071217477321625], '5a8c1a87f9c55dd3', None),
    'rope_bidirectional': (2.9910216331481934, [-0.10187472403049469, 0.2502584159374237, -0.06945320218801498], 'd36041004eedbfcc', None),
    'alibi_bidirectional': (2.991215705871582, [-0.10054019838571548, 0.24796710908412933, -0.06882306188344955], '764b268c1f26bf06', None),
    'irope': (2.99106502532959, [-0.1014169231057167, 0.24891722202301025, -0.06788443773984909], '52d31ebb95debc5b', [0.00927682127803564, -0.21579264104366302]),
    'gemma_hybrid': (2.9911272525787354, [-0.10186627507209778, 0.25024905800819397, -0.06902331858873367], '5fd792754151ac77', [0.00957631878554821, -0.21922655403614044]),
    'rope_partial25': (2.991274118423462, [-0.10147833079099655, 0.2492855042219162, -0.06762377172708511], 'd616863674d1eb36', [0.009638810530304909, -0.21803350746631622]),
    'rope_p75': (2.991105079650879, [-0.10175350308418274, 0.2502448260784149, -0.06942245364189148], 'd5ffa29f28891e9b', [0.008490821346640587, -0.2201225459575653]),
    'rope_yarn': (2.9913434982299805, [-0.1019110456109047, 0.25100111961364746, -0.06822550296783447], 'ff38d513c6682905', [0.011698192916810513, -0.2225162386894226]),
}


def pinned_case(name: str) -> dict:
    """The GPTConfig overrides of a PINNED case: a scheme, a scheme without the causal mask, a variant, RoPE + YaRN."""
    if name == "rope_yarn":
        return {"pos": "rope", "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_len": 32}}
    if name.endswith("_bidirectional"):
        return {"pos": name.removesuffix("_bidirectional"), "causal": False}
    return dict(variants.VARIANTS[name])


@pytest.mark.parametrize("name", PINNED)
def test_hooks_give_the_numbers_of_the_model_before_them(name):
    """Seeded model from a GPTConfig, 2 x 72 tokens (beyond the hybrids' window of 64): the same loss
    and pinned logits as the tiny_lm that branched on the scheme's name, within 1e-6, and its
    cached-decoding logits within 1e-6. The pins were taken on one machine; the kernels another CPU
    picks (AVX2 against AVX-512) move logits by up to 3e-8, so the digest of all logits, which matched
    to the bit there, is kept in PINNED as a record and not compared. 1e-6 is 100 times below what
    scoring the same tokens one position later changes (1e-4 to 3e-4 for none, alibi and rope)."""
    loss_was, row_was, digest_was, step_was = PINNED[name]
    torch.manual_seed(0)
    model = make_model(make_config(**{**KW, **OLD_INIT, **pinned_case(name)}))
    idx = ids(2, 73, seed=1)
    with torch.no_grad():
        logits, loss, _ = model(idx[:, :-1], idx[:, 1:])
        digest = hashlib.sha256(logits.numpy().tobytes()).hexdigest()[:16]
        row_diff = max_diff(logits[1, -1, :3], torch.tensor(row_was))
        assert abs(loss.item() - loss_was) <= 1e-6 and row_diff <= 1e-6, \
            f"{name}: loss {loss.item()!r} (was {loss_was!r}), max logit diff {row_diff:.2e} " \
            f"on the pinned row, logits digest {digest} (was {digest_was}: a record, not compared)"
        if step_was is not None:
            step = cached_logits(model, idx[:, :72], 64)[0][0, -1, :2].tolist()
            diff = max_diff(torch.tensor(step), torch.tensor(step_was))
            assert diff <= 1e-6, f"{name}: cached decoding {step} (was {step_was}), max diff {diff:.2e}"


def test_state_dict_keys_are_the_ones_checkpoints_hold():
    """Every variant's state_dict keys, in order, as the model always named them (load_checkpoint and
    make_optimizer rely on them): the scheme's module under its name (learned.table.weight; RoPE and ALiBi
    hold none), then the blocks, a sink logit per layer where the variant has sinks."""
    block = ["ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias", "attn.qkv.weight", "attn.out.weight",
             "mlp.fc.weight", "mlp.fc.bias", "mlp.proj.weight", "mlp.proj.bias"]
    for name in variants.VARIANTS:
        cfg = variants.variant_config(name, KW)
        entry = schemes.get(cfg.pos)
        own = [] if entry.build is None else [f"{cfg.pos}.{k}" for k in entry.build(cfg).state_dict()]
        keys = block[:4] + ["attn.sink"] * option(cfg, "sinks") + block[4:]
        want = ["tok_emb.weight"] + own + [f"blocks.{i}.{k}" for i in range(KW["n_layer"]) for k in keys] + \
            ["ln_f.weight", "ln_f.bias", "head.weight"]
        got = list(make_model(cfg).state_dict())
        assert got == want, f"{name}: state_dict keys {sorted(set(got) ^ set(want)) or 'in another order'}"
    assert list(make_model(variants.variant_config("learned", KW)).state_dict())[1] == "learned.table.weight"


def test_the_five_entries_say_what_they_do():
    """Which hooks each built-in scheme implements, and what the tables read from its entry."""
    want = {"none": (), "learned": ("input_rows",), "sin": ("input_rows",), "rope": ("rotate_qk",),
            "alibi": ("score_bias",)}
    assert {n: schemes.get(n).hooks for n in want} == want
    assert schemes.names()[:5] == tuple(want), "the five come first, in the order of every table"
    assert [schemes.get(n).input_before_scale for n in ("learned", "sin")] == [True, False]
    assert [n for n in want if schemes.get(n).rope_options] == ["rope"]
    acts = {n: schemes.get(n).acts_on for n in want}
    assert acts == {"none": "nothing (NoPE)", "learned": "input embedding", "sin": "input embedding",
                    "rope": "Q/K rotation", "alibi": "score bias"}, acts
    assert [extrapolation_test.core_loc(n) > 0 for n in want] == [False, True, True, True, True]


def test_unknown_scheme_and_options_answer_from_the_registry():
    """GPTConfig asks the registry: an unknown scheme is one line naming the registered ones; RoPE's options
    and nope_every ask the entry what it does, so a new scheme that takes them passes the same checks."""
    with pytest.raises(ValueError) as e:
        make_config(pos="no_such_scheme")
    assert str(e.value) == \
        f"unknown position scheme 'no_such_scheme'; choose one of {', '.join(schemes.names())}", e.value
    with pytest.raises(ValueError, match=r"scheme name 'rope' is taken: pos_rope.py registered it first; rename yours"):
        schemes.register(Scheme("rope", "again"))
    with pytest.raises(ValueError, match="must be a Python identifier"):
        schemes.register(Scheme("not-a-name", "again"))
    with registered(Scheme("toy_turn", "Q/K rotation", rotate_qk=scaled_rotation, rope_options=True)):
        make_config(**{**KW, "pos": "toy_turn", "partial_rotary_factor": 0.5, "nope_every": 2})
        make_config(**{**KW, **variants.VARIANTS["gemma_hybrid"], "pos": "toy_turn"})
        for bad, msg in (({"pos": "alibi", "rope_p": 0.5}, r"use pos='rope'( or '\w+')* or 'toy_turn'"),
                         ({"pos": "sin", "nope_every": 2}, r"inside attention \(rope, alibi, (\w+, )*toy_turn\)")):
            with pytest.raises(ValueError, match=msg) as e:
                make_config(**{**KW, **bad})
            assert "\n" not in str(e.value)
    assert "toy_turn" not in variants.VARIANTS and "toy_turn_copy" not in variants.ALL_NAMES, "unregistered, gone"


# ============================================================================ 2. toys for the other hooks

TOY_FORGET = Path(__file__).resolve().parent / "schemes" / "toy_forget.py"


@contextlib.contextmanager
def forget_toy():
    """tests/schemes/toy_forget.py, a toy FoX (Lin et al. 2025, "Forgetting Transformer"): per layer and head a
    forget gate f_t = sigmoid(w . x_t + b) from the layer's input, the score bias c_i - c_j with c the cumulative
    sum of log f, and c of every key in the cache. Registered inside the block, unless the session has it
    already (EXTRA_SCHEME_FILE)."""
    mine = "toy_forget" not in schemes.REGISTRY
    if mine:
        schemes.load_files([TOY_FORGET])
    try:
        yield schemes.get("toy_forget")
    finally:
        if mine:
            schemes.unregister("toy_forget")
            schemes.FILES.pop("toy_forget", None)


def test_forget_gate_bias_from_the_input_with_cache_state():
    """Constant gates log f = -m_h are ALiBi's -m_h (i - j): the toy with ALiBi's slopes and an ALiBi model's
    weights gives the ALiBi model's logits. Gates from the input: cached decoding (the sums of past keys
    carried as cache state) equals the full forward, and the gates learn."""
    with forget_toy():
        torch.manual_seed(0)
        alibi = make_model(make_config(**{**KW, "pos": "alibi"})).eval()
        toy = make_model(make_config(**{**KW, "pos": "toy_forget"})).eval()
        assert toy.load_state_dict(alibi.state_dict(), strict=False).unexpected_keys == []
        m = alibi.alibi.slopes  # (H,)
        with torch.no_grad():
            for gate in toy.toy_forget.gates:
                gate.weight.zero_()
                gate.bias.copy_(-torch.log(torch.expm1(m)))  # sigmoid(b) = e^-m, log f = -m
            x = ids(2, 40, seed=2)
            err = max_diff(toy(x).logits, alibi(x).logits)
            assert err < 1e-5, f"constant forget gates vs ALiBi with the same slopes: max logit diff {err:.2e}"
            for gate in toy.toy_forget.gates:
                nn.init.normal_(gate.weight, 0.0, 0.5)
            full = toy(x).logits
            cached, cache = cached_logits(toy, x, 17)
            assert cache[0].state.shape == (2, KW["n_head"], 40), "the cache keeps c of every key"
            err = max_diff(cached, full)
            assert err < 1e-5, f"forget gates: cached decoding vs full forward, max logit diff {err:.2e}"
        toy.train()
        toy(x[:, :-1], x[:, 1:]).loss.backward()
        assert toy.toy_forget.gates[0].weight.grad.abs().sum() > 0, "no gradient reached the forget gates"


class Sinks(nn.Module):
    """Toy attention sinks (gpt-oss): one learned logit per layer and head, in every query's softmax."""

    def __init__(self, cfg):
        super().__init__()
        self.logit = nn.Parameter(torch.zeros(cfg.n_layer, cfg.n_head))

    def extra_logits(self, x, layer, offset, shared, past, q=None, k=None):
        return self.logit[layer.index][:, None, None], None  # (H,) -> (H, 1, 1): the same for every query


def test_sink_logits_join_the_softmax():
    """Sinks of -inf are no sinks: the none model's logits (its weights loaded). Finite sinks move the
    logits, decode through the cache as the full forward does (in a sliding-window layout too), and learn."""
    with registered(Scheme("toy_sinks", "extra logits", build=Sinks, extra_logits=Sinks.extra_logits)):
        for layout in ({}, {"attn_window": 8, "global_every": 2}):
            torch.manual_seed(0)
            none = make_model(make_config(**{**KW, **layout, "pos": "none"})).eval()
            toy = make_model(make_config(**{**KW, **layout, "pos": "toy_sinks"})).eval()
            toy.load_state_dict(none.state_dict(), strict=False)
            x = ids(2, 30, seed=3)
            with torch.no_grad():
                toy.toy_sinks.logit.fill_(float("-inf"))
                err = max_diff(toy(x).logits, none(x).logits)
                assert err < 1e-5, f"{layout}: sinks of -inf vs no sinks, max logit diff {err:.2e}"
                toy.toy_sinks.logit.normal_(0.0, 2.0)
                full = toy(x).logits
                assert max_diff(full, none(x).logits) > 1e-3, f"{layout}: finite sinks changed nothing"
                err = max_diff(cached_logits(toy, x, 11)[0], full)
                assert err < 1e-5, f"{layout}: sinks, cached decoding vs full forward, max logit diff {err:.2e}"
        toy.train()
        toy(x[:, :-1], x[:, 1:]).loss.backward()
        assert (toy.toy_sinks.logit.grad != 0).all(), "every layer's and head's sink should get a gradient"


@pytest.mark.parametrize("sixth", [False, True], ids=["registry", "registry+toy_forget"])
def test_chunked_equals_whole_for_every_registered_scheme(sixth):
    """Every registered scheme, with and without attention sinks (causal; bidirectional too unless causal only):
    the logits with the queries in chunks of 7 equal those with all 40 in one chunk, and cached decoding equals
    the full forward. Run once over the registry as it is and once with a sixth scheme registered."""
    with forget_toy() if sixth else contextlib.nullcontext():
        for name in schemes.names():
            for causal, sinks in ((True, False), (True, True), (False, False)):
                if not causal and schemes.get(name).causal_only:
                    continue
                torch.manual_seed(0)
                model = make_model(make_config(**{**KW, "pos": name, "causal": causal, "sinks": sinks})).eval()
                x, case = ids(2, 40, seed=5), f"{name} causal={causal} sinks={sinks}"
                with torch.no_grad():
                    for blk in model.blocks if sinks else ():
                        blk.attn.sink.normal_(0.0, 2.0)
                    whole = model(x).logits  # q_chunk 256: one chunk
                    for blk in model.blocks:
                        blk.attn.q_chunk = 7
                    err = max_diff(model(x).logits, whole)
                    assert err < 1e-5, f"{case}: chunks of 7 vs one chunk, max logit diff {err:.2e}"
                    if causal:
                        err = max_diff(cached_logits(model, x, 17)[0], whole)
                        assert err < 1e-5, f"{case}: cached decoding vs full forward, max logit diff {err:.2e}"


CALLS = []


def scaled_rotation(m, q, k, offset, layer):
    """xPos's shape: the layer's RoPE rotation, then q times 2 and k divided by 2 (a scale of 2^1 per
    token that cancels in q.k; powers of two, so exactly). Records the Layer it was given."""
    CALLS.append(layer)
    q, k = (q, k) if layer.rope is None else layer.rope(q, k, offset=offset)
    return q * 2.0, k / 2.0


@pytest.mark.parametrize("variant", ["rope", "gemma_hybrid", "irope"])
def test_rotation_with_rope_options_gets_each_layers_tables(variant):
    """A scheme that takes RoPE's options gets, per layer, TinyLM.rope_of's table (local, global, none on a
    NoPE layer) in its Layer; with a scale that cancels in q.k it gives the RoPE model's logits exactly."""
    over = variants.VARIANTS[variant]
    with registered(Scheme("toy_turn", "Q/K rotation", rotate_qk=scaled_rotation, rope_options=True)):
        torch.manual_seed(0)
        rope = make_model(make_config(**{**KW, **over})).eval()
        torch.manual_seed(0)
        toy = make_model(make_config(**{**KW, **over, "pos": "toy_turn"})).eval()
        x = ids(2, 72, seed=4)
        CALLS.clear()
        with torch.no_grad():
            err = max_diff(toy(x).logits, rope(x).logits)
        assert err == 0, f"{variant}: scaled rotation vs RoPE, max logit diff {err:.2e}"
        got = [(c.index, c.nope, c.window, c.rope) for c in CALLS]
        want = [(i, i in layer_roles(toy.cfg)[0], getattr(toy.blocks[i].attn, "window", 0), toy.rope_of(i)) for i in range(KW["n_layer"])]
        assert got == want, f"{variant}: the hook got layers {got}, want {want}"


# ============================================================================ 3. a scheme in its own module

TOY_MODULE = '''"""A toy position scheme, registered on import: ALiBi with a learned slope per head
(KERPLE's linear form)."""
import torch
import torch.nn as nn

import schemes
from attn_common import hide_later_keys


class LearnedSlopes(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.causal = cfg.causal
        self.log_slope = nn.Parameter(torch.linspace(-1.0, -4.0, cfg.n_head))  # (H,)

    def score_bias(self, x, layer, offset, shared, past, q=None, k=None):
        """-m_h |i - j| for query rows a..b-1 (positions offset+a ..) against keys s..e-1, asked per chunk."""
        if layer.nope:
            return None, None
        m = self.log_slope.exp()[:, None, None]  # (H, 1, 1)

        def rows(a, b, s, e):
            i = torch.arange(offset + a, offset + b, device=x.device)[:, None]  # (b-a, 1)
            j = torch.arange(s, e, device=x.device)[None, :]                    # (1, e-s)
            bias = -m * (i - j).abs()                                           # (H, b-a, e-s)
            return hide_later_keys(bias, offset + a, s) if self.causal else bias
        return rows, None


schemes.register(schemes.Scheme("toy_slopes", "score bias, learned slopes", __file__, build=LearnedSlopes,
                                score_bias=LearnedSlopes.score_bias))
'''


def test_a_scheme_in_its_own_module_trains_and_scores(tmp_path, monkeypatch):
    """Importing a module that registers a scheme is all it takes: train_compare.py trains it as a variant of
    its name and extrapolation_test.py scores it, its row reading "acts on" and core LoC from its entry."""
    (tmp_path / "pos_toy_slopes.py").write_text(TOY_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    ck, res = tmp_path / "ck", tmp_path / "res"
    try:
        importlib.import_module("pos_toy_slopes")
        assert variants.VARIANTS["toy_slopes"] == {"pos": "toy_slopes"} and variants.COPY_OF["toy_slopes_copy"] == \
            "toy_slopes", "importing the module should give the scheme its variants"
        rc = train_compare.main(["--quick", "--variants", "toy_slopes", "--steps", "6", "--eval-every", "3",
                                 "--seq-len", "32", "--out", str(ck), "--results", str(res)])
        assert rc == 0 and (ck / "toy_slopes.pt").is_file(), f"train_compare exit {rc}"
        ckpt = torch.load(ck / "toy_slopes.pt", weights_only=True)
        slope = ckpt["model"]["toy_slopes.log_slope"]
        assert not torch.equal(slope, torch.linspace(-1.0, -4.0, 2)), "the slopes did not train"
        rc = extrapolation_test.main(["--quick", "--variants", "toy_slopes", "--ckpt-dir", str(ck), "--results",
                                      str(res), "--lengths", "32,64", "--tokens", "128", "--scalings", ""])
        assert rc == 0, f"extrapolation_test exit {rc}"
        (row,) = json.loads((res / "extrapolation.json").read_text(encoding="utf-8"))["rows"]
        assert (row["variant"], row["pos"], row["acts_on"], row["params_added"]) == \
            ("toy_slopes", "toy_slopes", "score bias, learned slopes", 2), row
        assert row["pos_file_loc"] == extrapolation_test.code_lines(tmp_path / "pos_toy_slopes.py") > 0, row
        assert all(math.isfinite(row[f"ppl_{L}"]) for L in (32, 64)), row
        assert (res / "ppl_vs_length.png").is_file(), "the headline figure should hold the new scheme"
    finally:
        if "toy_slopes" in schemes.REGISTRY:
            schemes.unregister("toy_slopes")
        sys.modules.pop("pos_toy_slopes", None)
    assert "toy_slopes" not in variants.ALL_NAMES
