"""The recipe knobs of experiments/recipe_ablation.py do what their names say, and nothing else."""
import json
import math
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from experiments import recipe_ablation
from lab.docsync import tables
import tiny_lm
from lab import checkpoint_io
from lab.checkpoint_io import BEFORE_FIELD
from lab.options import full_config, make_config, make_model
from tiny_lm import TinyLM
from lab.variants import TrainConfig, make_optimizer

ROOT = Path(__file__).resolve().parent.parent
C, L = 64, 3


def model(**kw) -> TinyLM:
    torch.manual_seed(0)
    return make_model(make_config(vocab_size=50, n_layer=L, n_head=4, n_embd=C, pos="none", **kw))


def std_close(t: torch.Tensor, want: float, what: str, rel: float = 0.1) -> None:
    got = t.detach().std().item()
    assert abs(got / want - 1) < rel, f"{what}: std {got:.4f}, want {want:.4f} (within {rel:.0%})"


@pytest.mark.parametrize("qkv_init, want", [("unit", C ** -0.5), ("gpt2", 0.02), ("torch", (3 * C) ** -0.5)])
def test_qkv_init(qkv_init, want):
    m = model(qkv_init=qkv_init)
    for i, blk in enumerate(m.blocks):
        std_close(blk.attn.qkv.weight, want, f"block {i} qkv ({qkv_init})")


@pytest.mark.parametrize("resid_init, want", [("scaled", 0.02 / math.sqrt(2 * L)), ("plain", 0.02), ("torch", None)])
def test_residual_projection_init(resid_init, want):
    m = model(resid_init=resid_init)
    for i, blk in enumerate(m.blocks):  # torch: std 1/sqrt(3 fan_in), fan_in C for attn.out, 4C for mlp.proj
        std_close(blk.attn.out.weight, want or (3 * C) ** -0.5, f"block {i} attn.out ({resid_init})")
        std_close(blk.mlp.proj.weight, want or (12 * C) ** -0.5, f"block {i} mlp.proj ({resid_init})")


@pytest.mark.parametrize("emb_scale", [True, False])
def test_embedding_scale(emb_scale):
    """With emb_scale the first block reads tok_emb(idx) * sqrt(C) (table std C^-0.5), else tok_emb(idx) (std 0.02)."""
    m = model(emb_scale=emb_scale)
    std_close(m.tok_emb.weight, C ** -0.5 if emb_scale else 0.02, "token table")
    seen = {}
    m.blocks[0].register_forward_pre_hook(lambda mod, args: seen.update(x=args[0]))  # returns None: input unchanged
    idx = torch.randint(0, 50, (2, 7), generator=torch.Generator().manual_seed(1))
    m(idx)
    want = m.tok_emb(idx) * (math.sqrt(C) if emb_scale else 1.0)
    err = (seen["x"] - want).abs().max().item()
    assert err < 1e-6, f"emb_scale={emb_scale}: first block input vs tok_emb(idx) scaled, max diff {err:.2e}"


def test_tied_head_shares_the_table():
    m = model(tie_weights=True)
    assert m.head.weight is m.tok_emb.weight, "tie_weights=True must make the head the token table"
    assert model().head.weight is not model().tok_emb.weight


@pytest.mark.parametrize("pos", ["none", "learned"])
@pytest.mark.parametrize("decay", ["matrices", "all"])
def test_weight_decay_groups(decay, pos):
    """"matrices": the Linear weights; "all": every parameter; the learned position table never."""
    torch.manual_seed(0)
    m = make_model(make_config(vocab_size=50, n_layer=L, n_head=4, n_embd=C, pos=pos))
    opt = make_optimizer(m, TrainConfig(decay=decay))
    decayed = {id(p) for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    every = {n for n, p in m.named_parameters()}
    want = {n for n, p in m.named_parameters() if decay == "all" or (p.dim() == 2 and n != "tok_emb.weight")}
    want -= {"learned.table.weight"}
    got = {n for n, p in m.named_parameters() if id(p) in decayed}
    assert got == want, f"decay={decay}, pos={pos}: decayed but should not {sorted(got - want)}, " \
                        f"not decayed but should {sorted(want - got)}"
    assert sum(len(g["params"]) for g in opt.param_groups) == len(every), "a parameter is in no group"


def test_unknown_decay_rule_is_refused():
    with pytest.raises(ValueError, match="decay must be one of matrices, all"):
        make_optimizer(model(), TrainConfig(decay="embeddings"))


def test_torch_init_keeps_pytorchs_linear_init():
    """A Linear set to "torch" keeps nn.Linear's U(+-1/sqrt(fan_in)): std 1/sqrt(3 fan_in), weights and biases."""
    m = model(qkv_init="torch", resid_init="torch", linear_init="torch")
    for i, blk in enumerate(m.blocks):
        for name, lin in (("qkv", blk.attn.qkv), ("out", blk.attn.out), ("fc", blk.mlp.fc), ("proj", blk.mlp.proj)):
            bound = lin.in_features ** -0.5
            std_close(lin.weight, bound / math.sqrt(3), f"block {i} {name}")
            top = lin.weight.abs().max().item()
            assert top <= bound, f"block {i} {name}: |w| up to {top:.4f}, past nn.Linear's bound {bound:.4f}"
            if lin.bias is not None:
                assert lin.bias.abs().max().item() <= bound and lin.bias.std().item() > bound / 4, \
                    f"block {i} {name}: bias not nn.Linear's uniform draw (std {lin.bias.std().item():.4f})"
    std_close(m.head.weight, C ** -0.5 / math.sqrt(3), "head")
    gpt2 = model(linear_init="gpt2", resid_init="scaled")
    assert gpt2.blocks[0].mlp.fc.bias.abs().max().item() == 0, "GPT-2 init: biases start at 0"
    assert model().state_dict().keys() == m.state_dict().keys() and all(
        torch.equal(v, m.state_dict()[k]) for k, v in model().state_dict().items()), "the default is PyTorch's init"


def test_a_checkpoint_from_before_the_recipe_fields_loads_as_it_was_trained(tmp_path):
    """A checkpoint whose config lacks linear_init and norm_bias was built with GPT-2's init and
    LayerNorm biases (BEFORE_FIELD, the old recipe's values): it loads, with those values."""
    assert BEFORE_FIELD.items() <= recipe_ablation.OLD_MODEL.items(), BEFORE_FIELD
    old = model(**{**recipe_ablation.OLD_MODEL, "norm_bias": True})
    checkpoint_io.save_checkpoint(tmp_path / "old.pt", old, "x" * 50, 0, {})
    ck = torch.load(tmp_path / "old.pt", weights_only=True)
    for k in BEFORE_FIELD:
        del ck["config"][k]
    torch.save(ck, tmp_path / "old.pt")
    loaded, ck = checkpoint_io.load_checkpoint(tmp_path / "old.pt")
    assert {k: ck["config"][k] for k in BEFORE_FIELD} == BEFORE_FIELD, ck["config"]
    assert all(torch.equal(v, loaded.state_dict()[k]) for k, v in old.state_dict().items())


@pytest.mark.parametrize("norm_bias", [True, False])
def test_norm_bias(norm_bias):
    m = model(norm_bias=norm_bias)
    norms = [m.ln_f] + [ln for blk in m.blocks for ln in (blk.ln1, blk.ln2)]
    assert all((ln.bias is not None) == norm_bias for ln in norms), f"norm_bias={norm_bias}"
    x = torch.randn(3, C)
    want = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5)
    err = (m.ln_f(x) - want).abs().max().item()  # gain 1 and bias 0 at init: the plain normalisation
    assert err < 1e-5, f"LayerNorm at init vs (x - mean) / std: max diff {err:.2e}"


def test_every_knob_changes_only_its_own_settings():
    """A knob's overrides are what it changes against the baseline (the defaults); the recipes named
    old... set every field the recipe change touched, so they mean the same whatever the defaults are."""
    base_model, base_train = make_config(vocab_size=50), TrainConfig()
    for knob, (model_over, train_over) in recipe_ablation.KNOBS.items():
        cfg, tc = make_config(vocab_size=50, **model_over), TrainConfig(**train_over)
        changed = {k for k, v in full_config(cfg).items() if full_config(base_model)[k] != v}
        changed |= {k for k, v in vars(tc).items() if vars(base_train)[k] != v}
        if knob.startswith("old"):
            assert set(recipe_ablation.OLD_MODEL) | {"decay"} <= set(model_over) | set(train_over), knob
            assert changed <= set(model_over) | set(train_over), f"{knob} changes {changed}"
            continue
        assert changed == set(model_over) | set(train_over), f"{knob} changes {changed}"
        assert (knob == "baseline") == (not changed), f"{knob}: only the baseline changes nothing"


def test_unknown_knob_is_one_line_error(refused):
    assert "warp_speed" in refused(recipe_ablation.main, ["--knobs", "baseline,warp_speed"])


def test_only_the_real_ablation_writes_results(tmp_path, capsys):
    """Other lengths or scored tokens than `python experiments/recipe_ablation.py`'s: <out>/results with a note,
    or refused in one line when --results results is given; checked before anything is trained."""
    repo, out = ROOT / "results", tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        recipe_ablation.main(["--tokens", "4096", "--results", str(repo), "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "tokens=4096 (real run: 65536)" in err[0], err
    args = recipe_ablation.parse_args(["--lengths", "64,256", "--out", str(out)])
    assert recipe_ablation.output_folder(args, repo, out, [64, 256], 65536) == out / "results"
    note = capsys.readouterr().err
    assert note.startswith("note: ") and "lengths=[64, 256] (real run: [256, 4096])" in note, note
    assert recipe_ablation.output_folder(recipe_ablation.parse_args([]), repo, out, [256, 4096], 65536) == repo
    assert not out.exists(), "deciding the folder made it"


def test_a_broken_checkpoint_to_reuse_is_reported_before_anything_is_trained(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "tied_head").mkdir(parents=True)
    (out / "tied_head" / "rope.pt").write_bytes(b"not a checkpoint")
    code = recipe_ablation.main(["--quick", "--knobs", "baseline,tied_head", "--schemes", "rope", "--out", str(out),
                                 "--results", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "tied_head/rope.pt is not a readable checkpoint" in err[0], err
    assert not (out / "baseline").exists(), "the baseline was trained before the broken checkpoint was found"


def test_rows_of_other_settings_are_stale():
    """A row is kept only if its recorded settings are what its knob trains now."""
    args = recipe_ablation.parse_args([])
    kw, tc = recipe_ablation.knob_settings("old", "rope", args, 50)
    row = {"knob": "old", "scheme": "rope", "config": full_config(make_config(**kw)), "train_config": asdict(tc)}
    assert not recipe_ablation.stale(row, args, 50)
    assert recipe_ablation.stale({**row, "knob": "decay_emb"}, args, 50), "a knob that is gone"
    assert recipe_ablation.stale({k: v for k, v in row.items() if k != "config"}, args, 50), "a row without settings"
    other = {**row, "train_config": {**row["train_config"], "decay": "all"}}
    assert recipe_ablation.stale(other, args, 50), "a row trained with another decay rule"
    seed1 = {**row, "train_config": {**row["train_config"], "seed": 1}}
    assert not recipe_ablation.stale(seed1, args, 50), "a row of another seed is that seed's run"


def test_recipe_table_is_computed_from_the_json(tmp_path):
    rows = [{"knob": k, "scheme": s, "ppl@256": v, "ppl@4096": 2 * v}
            for k, s, v in [("baseline", "rope", 5.0), ("baseline", "alibi", 5.25), ("old", "rope", 5.2), ("old", "alibi", 5.5)]]
    meta = {"command": "x", "lengths": [256, 4096], "tokens": 65536}
    (tmp_path / "recipe_ablation.json").write_text(json.dumps({"meta": meta, "rows": rows}))
    (tmp_path / "anchor_xtransformers.json").write_text(json.dumps(
        {"meta": meta, "rows": [{"scheme": "rope", "ppl@256": 4.9, "ppl@4096": 50.0}]}))
    lines = tables.recipe_table(tmp_path).splitlines()
    assert lines[0] == "| knob | rope ppl@256 | rope ppl@4096 | alibi ppl@256 | alibi ppl@4096 | alibi / rope @256 |"
    assert lines[2] == "| baseline | 5.00 | 10.00 | 5.25 | 10.50 | 1.050 |", lines[2]
    assert lines[3] == f"| old | 5.20 (+4.0%) | 10.40 (+4.0%) | 5.50 (+{100 * (5.5 / 5.25 - 1):.1f}%) | 11.00 (+4.8%) | " \
                       f"{5.5 / 5.2:.3f} |", lines[3]
    assert lines[4] == "| x-transformers (experiments/anchor_xtransformers.py) | 4.90 (-2.0%) | 50.00 (+400.0%) |  |  |  |", lines[4]
    assert "x-transformers" not in tables.recipe_table(tmp_path, anchor=False)


def test_rows_are_kept_per_seed_and_set_against_the_recipes_seeds(tmp_path, capsys):
    """A run of seed 1 adds its row beside seed 0's (the same knob and scheme), a rerun of a seed
    replaces only that seed's row; recipe_table shows seed 0 alone, recipe_seeds_table the knob's
    seeds against the recipe's at the same seeds: the ablation's baseline row of a seed, else
    extrapolation.json's run of it."""
    args = recipe_ablation.parse_args([])

    def row(knob, scheme, seed, ppl):
        kw, tc = recipe_ablation.knob_settings(knob, scheme, recipe_ablation.parse_args(["--seed", str(seed)]), 50)
        return {"knob": knob, "scheme": scheme, "config": full_config(make_config(**kw)), "train_config": asdict(tc),
                "ppl@256": ppl, "ppl@4096": 2 * ppl}

    meta = {"command": "x", "lengths": [256, 4096], "tokens": 65536}
    (tmp_path / "extrapolation.json").write_text(json.dumps({"meta": {"lengths": [256, 4096]}, "rows": [
        {"variant": "alibi [seed1]", "ppl_256": 5.0}, {"variant": "alibi [seed2]", "ppl_256": 5.1},
        {"variant": "alibi+yarn [seed2]", "ppl_256": 9.9}]}))
    stale = lambda r: recipe_ablation.stale(r, args, 50)  # noqa: E731
    recipe_ablation.save(tmp_path, [row("baseline", "alibi", 0, 5.2), row("no_emb_scale", "alibi", 0, 4.9)],
                         dict(meta), stale)
    recipe_ablation.save(tmp_path, [row("no_emb_scale", "alibi", 1, 5.05)], dict(meta), stale)
    recipe_ablation.save(tmp_path, [row("no_emb_scale", "alibi", 2, 5.3)], dict(meta), stale)
    recipe_ablation.save(tmp_path, [row("no_emb_scale", "alibi", 2, 5.0)], dict(meta), stale)
    assert "dropped" not in capsys.readouterr().out, "a row of another seed was taken for a stale one"
    rows = json.loads((tmp_path / "recipe_ablation.json").read_text())["rows"]
    assert [(r["knob"], tables.row_seed(r), r["ppl@256"]) for r in rows] == [
        ("baseline", 0, 5.2), ("no_emb_scale", 0, 4.9), ("no_emb_scale", 1, 5.05), ("no_emb_scale", 2, 5.0)], rows
    assert tables.recipe_table(tmp_path).splitlines()[3].startswith("| no_emb_scale | 4.90 (-5.8%) |")
    assert len(tables.recipe_table(tmp_path).splitlines()) == 4, "a row of seed 1 or 2 in the seed-0 table"
    ours, base = (4.9 + 5.05 + 5.0) / 3, (5.2 + 5.0 + 5.1) / 3
    assert tables.recipe_seeds_table(tmp_path).splitlines()[2] == \
        f"| no_emb_scale | alibi | 0, 1, 2 | 4.90 / 5.05 / 5.00 | 5.20 / 5.00 / 5.10 | {ours:.3f} | {base:.3f} | " \
        f"{ours / base:.3f} |"
    assert "at more than one seed" in (tmp_path / "recipe_ablation.md").read_text()
    assert recipe_ablation.checkpoint_path(tmp_path, "k", "alibi", 0).name == "alibi.pt"
    assert recipe_ablation.checkpoint_path(tmp_path, "k", "alibi", 2).name == "alibi_seed2.pt"
