"""An independent anchor: lucidrains' x-transformers decoder at TinyLM's size, trained on our
batches and scored on our evaluation characters, so that docs/recipe.md can show how far our own
recipe is from a library a reader might use instead. Optional: x-transformers is a test-and-anchor
requirement (requirements-test.txt), never needed by the main job.

The model (x-transformers 2.31, its defaults except the size and the position scheme):

    TransformerWrapper(num_tokens=V, max_seq_len=T, use_abs_pos_emb=False,
                       attn_layers=Decoder(dim=128, depth=4, heads=4, attn_dim_head=32,
                                           rotary_pos_emb=True, rotary_emb_dim=32  # rope: the whole head
                                           or rotary_pos_emb=True   # rope_half: its default, half the head
                                           or alibi_pos_bias=True)) # alibi

- use_abs_pos_emb=False: without it the wrapper adds a learned absolute table beside ALiBi (its
  default switches the table off for rotary and relative biases only), and ALiBi would not be alone.
- rotary_emb_dim = dim_head for rope: like TinyLM's RoPE it turns every pair of each head (adjacent
  pairs, base 10000). Its default, half of each head, is the row rope_half.
- Where its defaults still differ from TinyLM's recipe (docs/recipe.md lists each, and
  experiments/recipe_ablation.py's knobs xt_emb and xtransformers try them): the token table at kaiming-normal
  std sqrt(2/C) with no sqrt(C) factor; LayerNorms with a gain and no bias; weight decay on every
  parameter. Alike: PyTorch's nn.Linear init, Linears of attention and head without a bias, GELU,
  pre-norm with a final norm, the same ALiBi slopes as pos_alibi.
- Training: training.train(), the loop every TinyLM is trained with: the same windows (seed 0),
  schedule, learning rate, AdamW betas and clipping, with weight decay 0.1 on every parameter
  (TrainConfig(decay="all"), what AdamW(model.parameters()) does).
- Scoring: perplexity.evaluate() on experiments/recipe_ablation.py's characters (65,536 validation characters
  in blocks spread over the held-out plays) at 256 and 4096.

Writes <results>/anchor_xtransformers.json (a run of some schemes or seeds merges its rows, one per
scheme and seed); docs/recipe.md's tables (tables.recipe_table, tables.seeds_vs_anchor) show them
beside experiments/recipe_ablation.py's rows and beside our own seeds. Checkpoints (state_dicts) go to
runs/anchor/<scheme>.pt (<scheme>_seed<s>.pt for seed s > 0); one that exists is reused, so an
interrupted run continues model by model.

    python experiments/anchor_xtransformers.py                   # rope and alibi, about 4 min each on 2 CPU cores
    python experiments/anchor_xtransformers.py --schemes rope_half   # x-transformers' default RoPE, half of each head
    python experiments/anchor_xtransformers.py --schemes t5,xpos,fox   # the field's schemes (docs/field.md)
    python experiments/anchor_xtransformers.py --seed 1 && python experiments/anchor_xtransformers.py --seed 2   # two more seeds
    python experiments/anchor_xtransformers.py --quick           # smoke run: 2 layers of 32, 30 steps, under runs/quick/
"""
import argparse
import hashlib
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import NamedTuple, Optional

import sys as _sys
from pathlib import Path as _Path
_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))  # run as python experiments/NAME.py: the repository's modules

import torch
import torch.nn as nn
import torch.nn.functional as F

from lab import cli
from lab.docsync import tables
import tiny_lm
from lab import atomic
from lab import corpora
from lab import devices
from lab.eval_common import (check_redraw, check_writable, corpus_mismatch, fail, is_repo_results, read_json, spread_blocks,
                         training_provenance)
from lab.perplexity import evaluate
from lab.corpora import CorpusError
from lab.training import train
from lab.variants import QUICK_MODEL, QUICK_TRAIN, TrainConfig

# Decoder's switches per scheme, given the head dim d. rope turns the whole head, as TinyLM's RoPE does;
# rope_half is x-transformers' default (rotary_emb_dim = d // 2), kept to show what that default costs.
# The field's schemes (docs/field.md sets them beside field_relbias.py, field_xpos.py and field_fox.py), each at
# x-transformers' defaults: t5, its RelativePositionBias (32 causal buckets, max distance 128, as ours; one table
# per model as T5); xpos, RotaryEmbedding(use_xpos=True) on the whole head, scale base 512 as ours but centred at
# the middle of each input (ours: a fixed centre, 128); fox, its DataDependentAlibi (the forget gate's bias
# starts at 5.0, ours at the FoX reference's 0; a (B, H, T, T) bias built whole).
SCHEMES = {"rope": lambda d: {"rotary_pos_emb": True, "rotary_emb_dim": d},
           "rope_half": lambda d: {"rotary_pos_emb": True},
           "alibi": lambda d: {"alibi_pos_bias": True},
           "t5": lambda d: {"rel_pos_bias": True},
           "xpos": lambda d: {"rotary_xpos": True, "rotary_emb_dim": d},
           "fox": lambda d: {"attn_data_dependent_alibi": True}}


@dataclass
class AnchorConfig:
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    scheme: str = "rope"


class Out(NamedTuple):
    """What training.train() and perplexity.evaluate() read of a model's forward."""
    logits: torch.Tensor
    loss: Optional[torch.Tensor]


class XTransformersLM(nn.Module):
    """x-transformers' decoder behind TinyLM's forward(idx, targets) -> (logits, loss)."""

    pos_module = None  # no position parameters to keep out of weight decay (variants.make_optimizer)

    def __init__(self, cfg: AnchorConfig, vocab_size: int, seq_len: int):
        super().__init__()
        from x_transformers import Decoder, TransformerWrapper  # optional: only this script needs it
        self.cfg = cfg
        self.net = TransformerWrapper(
            num_tokens=vocab_size, max_seq_len=seq_len, use_abs_pos_emb=False,
            attn_layers=Decoder(dim=cfg.n_embd, depth=cfg.n_layer, heads=cfg.n_head,
                                attn_dim_head=cfg.n_embd // cfg.n_head, **SCHEMES[cfg.scheme](cfg.n_embd // cfg.n_head)))

    def forward(self, idx, targets=None) -> Out:
        logits = self.net(idx)  # (B, T) -> (B, T, V)
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
        return Out(logits, loss)


def parse_args(argv=None):
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--schemes", default="rope,alibi", help=f"comma-separated: {','.join(SCHEMES)}")
    p.add_argument("--seed", type=cli.SEED, default=0, help="seed of the initialisation and the batch order")
    p.add_argument("--corpus", default=None, help="UTF-8 text file (default: the Shakespeare corpus)")
    p.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu), or a torch device name")
    p.add_argument("--threads", type=cli.THREADS, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--out", default=None, help="checkpoint folder (default runs/anchor; runs/quick/anchor with --quick)")
    p.add_argument("--results", default=None, help="where anchor_xtransformers.json goes (default results/; "
                                                   "<out>/results with --quick, and --quick never writes results/)")
    p.add_argument("--quick", action="store_true", help="smoke run: QUICK_MODEL's size and QUICK_TRAIN's 30 steps, "
                                                        "4,096 characters scored at 64 and 256")
    p.add_argument("--redraw", action="store_true", help="train nothing: write docs/recipe.md's tables again "
                                                         "from --results' anchor_xtransformers.json")
    return p.parse_args(argv)


def settings(args) -> tuple:
    """(model sizes, TrainConfig, lengths, characters scored) of this run."""
    tc = replace(TrainConfig(), **(QUICK_TRAIN if args.quick else {}), seed=args.seed, decay="all")
    sizes = {k: QUICK_MODEL[k] for k in ("n_layer", "n_head", "n_embd")} if args.quick else {}
    return sizes, tc, ([64, 256] if args.quick else [256, 4096]), (4096 if args.quick else 65536)


def run_one(scheme, sizes, tc, vocab, train_ids, val_ids, out: Path, device):
    """Train (or reload) one anchor model; returns (model, training seconds)."""
    cfg = AnchorConfig(**sizes, scheme=scheme)
    path = out / (f"{scheme}.pt" if tc.seed == 0 else f"{scheme}_seed{tc.seed}.pt")
    torch.manual_seed(tc.seed)
    model = XTransformersLM(cfg, len(vocab), tc.seq_len)
    if path.exists():
        ck = torch.load(path, map_location="cpu", weights_only=True)
        if ck.get("config") != asdict(cfg) or ck.get("train_config") != asdict(tc) or ck.get("vocab") != vocab:
            fail(f"{path} was trained with other settings; delete it to retrain")
        model.load_state_dict(ck["model"])
        print(f"{scheme}: reusing {path}")
        return model.to(device), ck["wall_s"]
    t0 = time.perf_counter()
    hist = train(model, train_ids, val_ids, tc, desc=f"x-transformers/{scheme}", device=device)
    wall = round(time.perf_counter() - t0, 1)
    ck = {"config": asdict(cfg), "train_config": asdict(tc), "vocab": vocab, "losses": hist, "wall_s": wall,
          "model": {k: v.detach().cpu() for k, v in model.state_dict().items()}}
    atomic.atomic_write(path, lambda tmp: torch.save(ck, tmp))
    return model, wall


def provenance(scheme: str, sizes: dict, tc: TrainConfig, vocab: str, text: str, made_by: dict) -> dict:
    """A row's provenance (the keys eval_common.provenance_of gives TinyLM rows): the model's settings
    with the Decoder switches of its scheme, the TrainConfig, and the run's command, commit and corpus."""
    cfg = asdict(AnchorConfig(**sizes, scheme=scheme))
    cfg["decoder"] = SCHEMES[scheme](cfg["n_embd"] // cfg["n_head"])
    cfg["vocab_size"] = len(vocab)
    return {"config": cfg, "train": asdict(tc), "seed": tc.seed, "command": made_by["command"],
            "commit": made_by["commit"], "corpus_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}


def main(argv=None) -> int:
    args = parse_args(argv)
    made_by = training_provenance(argv, "", args.seed, "experiments/anchor_xtransformers.py")  # the command and the commit this process starts from
    schemes = args.schemes.split(",")
    if not schemes or any(s not in SCHEMES for s in schemes):
        fail(f"unknown scheme in --schemes {args.schemes!r}; choose from {','.join(SCHEMES)}")
    if args.redraw:
        results = Path(args.results or "results")
        if not (results / "anchor_xtransformers.json").exists():
            fail(f"no {results}/anchor_xtransformers.json to redraw from; run `python experiments/anchor_xtransformers.py` first")
        check_redraw([results / "anchor_xtransformers.json"], cli.command("experiments/anchor_xtransformers.py", argv))
        tables.sync_recipe(results)  # only the repository's results/ have a page to write
        print(f"redrew docs/recipe.md's tables from {results}/anchor_xtransformers.json")
        return 0
    try:
        import x_transformers  # noqa: F401
    except ImportError:
        fail("x-transformers is not installed; run `pip install -r requirements-test.txt` first")
    if args.quick and args.results and Path(args.results).resolve() == Path("results").resolve():
        fail("a --quick run never writes results/; leave --results out to write under runs/quick/anchor/results")
    if corpus_mismatch(args.corpus) and args.results and is_repo_results(args.results):
        fail(f"results/ holds the anchor on the default corpus only; leave --results out to write under "
             f"runs/anchor/results, or pass another folder")
    out = Path(args.out or ("runs/quick/anchor" if args.quick else "runs/anchor"))
    results = Path(args.results or (out / "results" if args.quick or corpus_mismatch(args.corpus) else "results"))
    sizes, tc, lengths, tokens = settings(args)
    old = read_json(results / "anchor_xtransformers.json")
    if old and (old["meta"]["lengths"], old["meta"]["tokens"]) != (lengths, tokens):
        fail(f"{results}/anchor_xtransformers.json was scored at lengths {old['meta']['lengths']}; use another --results")
    check_writable(out, "--out")
    check_writable(results, "--results")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    try:
        device = devices.pick_device(args.device)
        train_text, val_text, vocab = corpora.load_corpus(args.corpus, min_val_chars=tokens + 1)
    except (ValueError, CorpusError) as e:
        fail(str(e))
    tok = corpora.CharTokenizer(vocab)
    train_ids, val_ids = tok.encode(train_text), tok.encode(val_text)
    blocks = spread_blocks(val_ids.numel(), lengths[-1], tokens // lengths[-1])  # experiments/recipe_ablation.py's characters
    rows = []
    for scheme in schemes:
        model, wall = run_one(scheme, sizes, tc, vocab, train_ids, val_ids, out, device)
        # ppl = exp(mean loss) over the same validation characters at every L
        losses, _, _ = evaluate(model, val_ids, lengths, blocks, 16384, f"x-transformers/{scheme}")
        rows.append({"model": "x-transformers", "scheme": scheme, "seed": tc.seed, **{f"ppl@{L}": round(math.exp(losses[L]), 3)
                                                                     for L in lengths}, "train_wall_s": wall,
                     "provenance": provenance(scheme, sizes, tc, vocab, train_text + val_text, made_by)})
        print(f"x-transformers/{scheme}: " + ", ".join(f"ppl@{L} {rows[-1][f'ppl@{L}']}" for L in lengths))
    from importlib.metadata import version  # the version scored, for the record
    meta = {"command": "python experiments/anchor_xtransformers.py" + (" --quick" if args.quick else "")
            + (f" --schemes {args.schemes}" if args.schemes != "rope,alibi" else "") + " --seed <s>",
            "x_transformers": version("x-transformers"), "lengths": lengths, "tokens": tokens,
            "train_config": {k: v for k, v in asdict(tc).items() if k != "seed"}}  # the seed is each row's
    fresh = {(r["scheme"], r["seed"]) for r in rows}
    rows = [r for r in (old or {}).get("rows", []) if (r["scheme"], r["seed"]) not in fresh] + rows
    rows.sort(key=lambda r: (r["seed"], list(SCHEMES).index(r["scheme"])))
    atomic.atomic_write_text(results / "anchor_xtransformers.json", json.dumps({"meta": meta, "rows": rows}, indent=1))
    tables.sync_recipe(results)  # docs/recipe.md's table shows these rows beside the ablation's
    print(f"wrote {results}/anchor_xtransformers.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
