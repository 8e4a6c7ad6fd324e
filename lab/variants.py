"""What is trained: the variant registry, the training recipe, the presets, and where each
kind of run writes.

A variant is a name for one GPTConfig change against the tiny LM of tiny_lm.py (the position
scheme, a RoPE base, a RoPE option), or a fine-tune recipe that continues a parent checkpoint
at 4x its length (or at its own length: DroPE and its control, RECALIBRATIONS). Every script that trains or evaluates checkpoints reads the names from here.

Output folders follow one rule (run_dirs): a real run writes checkpoints to runs/main and
tables and figures to results/; a smoke run (--quick) or a preview (--preset preview) writes
both under its own runs/<mode>/, so results/ only ever holds real runs. Whether a checkpoint is
a real run is decided from the checkpoint itself (real_run_mismatch), not from the flags: the
scripts write the output of any other one beside it (eval_common.results_for_checkpoints).
"""
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import torch

from lab import row_names
import schemes
import tiny_lm
from lab import checkpoint_io
from lab import corpora
from tiny_lm import GPTConfig, TinyLM
from lab.options import full_config, make_config, make_model

# name -> GPTConfig overrides (base variants) or a fine-tune recipe (parent + scaling).
# Every registered scheme (schemes.py) is the base variant of its own name, every other field at its default.
VARIANTS = {name: {"pos": name} for name in schemes.names()}
VARIANTS.update({
    "rope_theta10": {"pos": "rope", "rope_theta": 10.0},
    "rope_theta1e6": {"pos": "rope", "rope_theta": 1e6},
    # What 2024-2026 models ship (docs/current_models.md):
    "rope_partial25": {"pos": "rope", "partial_rotary_factor": 0.25},  # GPT-NeoX / Pythia: rotate 1/4 of each head
    "rope_p75": {"pos": "rope", "rope_p": 0.75},                        # p-RoPE: drop the lowest 25% of frequencies
    # Every 4th layer without positions, every layer global: SmolLM3's layout (no_rope_layer_interval=4,
    # no sliding window). No rows in results/: the rows named irope there are the hybrid irope below.
    "irope_global": {"pos": "rope", "nope_every": 4},
    # Hybrid layouts after shipped models (lab/options.py: layer_roles), scaled to 4 layers and a training length of 256.
    # The local window is 64 = 1/4 of the training length: a line of verse (~40 characters) fits
    # in it, and the local RoPE layers never meet a distance beyond 63 at any context length, so
    # only the global layer can carry what lies further back.
    #   irope, Llama 4 Scout's layout: RoPE layers attend within chunks (Llama 4: 8,192 tokens, 1/32 of
    #   the 256K it was trained at; here 64), every 4th layer global without positions, its queries
    #   scaled by Llama 4's temperature tuning, trained with it on (model.cfg.attn_temperature_tuning
    #   may be switched off at evaluation). What Scout has and this lacks: an L2 norm on q and k after
    #   RoPE on its RoPE layers (use_qk_norm; Hugging Face notes the 128E model has none) and a llama3
    #   scaling on its RoPE layers. floor_scale is tied to the chunk as in Llama 4 (8,192 = 8,192) and
    #   attn_scale kept at 0.1: the factor is 1 up to position 62, 1.16 at position 255 and 1.42 at 4,095.
    "irope": {"pos": "rope", "nope_every": 4, "attn_window": 64, "window_kind": "chunked", "global_every": 4,
              "attn_temperature_tuning": True, "temperature_floor": 64},
    #   gemma_hybrid, Gemma 4's layout: sliding-window RoPE layers at base 10k, and a global layer
    #   with p-RoPE (a quarter of the pairs turn, the fastest ones) at base 1M; 3 local to 1 global
    #   (Gemma 4 E2B, tests/hf_configs/gemma-4-e2b.json: 4 to 1, every 5th layer global). Gemma 4
    #   rather than Gemma 3 (base 1M alone): with three quarters of each global head free of
    #   positions it is the closer contrast to irope's NoPE global layer, and it needs only options
    #   we already have (rope_p, rope_theta).
    "gemma_hybrid": {"pos": "rope", "attn_window": 64, "window_kind": "sliding", "global_every": 4,
                     "global_rope_theta": 1e6, "global_rope_p": 0.25},
    #   hybrid_rope, the control of both: gemma_hybrid's local layers under a global layer with plain RoPE
    #   (base 10k, every pair turning). It differs from gemma_hybrid only in the global layer's RoPE, so
    #   what the hybrids fetch beyond the window is credited to the layout only if this fetches it too.
    "hybrid_rope": {"pos": "rope", "attn_window": 64, "window_kind": "sliding", "global_every": 4},
    # Attention sinks (gpt-oss), a model option every scheme takes: one learned logit per head and layer.
    "rope_sink": {"pos": "rope", "sinks": True},
    "alibi_sink": {"pos": "alibi", "sinks": True},
})
# The copy family: the same models trained on the copy curriculum (copy_mixture.curriculum_windows,
# COPY_RECIPE) for COPY_STEPS steps instead of TrainConfig.steps, so that copying pays during
# training (docs/long_context.md). A separate command: train_compare.py --variants copy.
COPY_OF = {f"{s}_copy": s for s in (*schemes.names(), "irope")}  # every scheme, and irope
# The fair control of Llama 4's temperature: irope_copy trained with the tuning off (irope_copy was
# trained with it on, so its "(no temp)" row switches off a factor the weights were trained with).
COPY_OF["irope_copy_notemp"] = "irope"
COPY_OF["gemma_hybrid_copy"] = "gemma_hybrid"
COPY_OF.update({"rope_sink_copy": "rope_sink", "alibi_sink_copy": "alibi_sink"})
COPY_OF["hybrid_rope_copy"] = "hybrid_rope"
VARIANTS.update({name: VARIANTS[s] for name, s in COPY_OF.items()})
VARIANTS["irope_copy_notemp"] = {**VARIANTS["irope"], "attn_temperature_tuning": False}
COPY_STEPS = 2400  # same lr, warm-up and cosine shape as the main recipe, stretched over 2,400 steps


# Fine-tunes continue a parent checkpoint at 4x its length for 10% of its steps (same tokens
# per step), with the scaling factor set for the 16x target (4096 from 256), as the PI and
# YaRN papers extend real models: scale first, then a short fine-tune. The *_ft_none and
# alibi*_ft rows are the compute-matched controls: the same continuation without a scaling.
def _ft(parent: str, kind: str = None) -> dict:
    return {"parent": parent, "rope_scaling": {"rope_type": kind, "factor": 16.0} if kind else None,
            "seq_len_mult": 4, "steps_frac": 0.1, "lr": 5e-4, "warmup": 10}


FINETUNES = {"rope_ft_linear": _ft("rope", "linear"), "rope_ft_yarn": _ft("rope", "yarn"),
             "rope_ft_none": _ft("rope"), "alibi_ft": _ft("alibi"),
             "rope_copy_ft_yarn": _ft("rope_copy", "yarn"), "rope_copy_ft_none": _ft("rope_copy"),
             "alibi_copy_ft": _ft("alibi_copy")}


# Recalibrations continue a parent at its own length, with the same step budget as the fine-tunes above
# (10% of its steps, the same tokens per step). DroPE (Gelberg et al., ICLR 2026, "Extending the Context of
# Pretrained LLMs by Dropping Their Positional Embeddings"): the positions are removed after training (pos
# becomes none: RoPE has no weights, so every weight carries over) and the model recalibrates at its
# training length; long windows are then read without any scaling. That is the method as the paper states
# it (remove, then recalibrate at the original length); whatever else the authors' training code
# (SakanaAI/DroPE, custom_models/drope.py, not read here) changes while recalibrating is not here.
# *_ft_keep is its compute-matched control: the same steps at the same length with the positions kept,
# so that DroPE differs from it in one thing.
RECALIBRATIONS = {"drope": {"pos": "none"}, "keep": {}}


def _recal(parent: str, recipe: str) -> dict:
    return {**_ft(parent), "seq_len_mult": 1, **RECALIBRATIONS[recipe]}


FINETUNES.update({f"{p}_ft_{recipe}": _recal(p, recipe) for p in ("rope", "rope_copy") for recipe in RECALIBRATIONS})
# DroPE at the parent's whole step budget, so that its quality inside the window can come back before its
# reading at 4096 means anything (110 steps left rope_ft_drope at 2.5 times its parent's ppl at 256). The
# schedule is the authors' recalibration config for Llama 2 7B (SakanaAI/DroPE, cfgs/run_cfg/llama2_7b_drope.yaml:
# lr 1e-4, a third of Llama 2's 3e-4 peak; 100 warm-up steps of 5,000; cosine decay, to 0 as Hugging Face's
# "cosine"), scaled to ours: a third of the parent's 3e-3, 2% warm-up, cosine to 0. _full_keep is the same with
# RoPE kept; _full_yarn the YaRN fine-tune (4x the length, factor 16) with the same steps, tokens and schedule:
# DroPE's comparison at equal compute, counted in training tokens.
FULL_BUDGET = {"steps_frac": 1.0, "lr": 1e-3, "warmup": 22, "min_lr_frac": 0.0}
FINETUNES.update({"rope_ft_drope_full": {**_recal("rope", "drope"), **FULL_BUDGET},
                  "rope_ft_keep_full": {**_recal("rope", "keep"), **FULL_BUDGET},
                  "rope_ft_yarn_full": {**_ft("rope", "yarn"), **FULL_BUDGET}})
ALL_NAMES = list(VARIANTS) + list(FINETUNES)


def _follow_registry() -> None:
    """A scheme registered after this import (a module imported later, a test's toy) gets its two
    variants, <name> and <name>_copy, at the end of ALL_NAMES; one taken out again loses them."""
    for name in schemes.names():
        for v in (name, f"{name}_copy"):
            if v not in VARIANTS:
                VARIANTS[v] = {"pos": name}
                ALL_NAMES.append(v)
        COPY_OF.setdefault(f"{name}_copy", name)
    for v in [v for v, over in VARIANTS.items() if over.get("pos") not in schemes.REGISTRY]:
        del VARIANTS[v]
        ALL_NAMES.remove(v)
        COPY_OF.pop(v, None)


schemes.on_change(_follow_registry)


def admit(names) -> list:
    """Make known the names built from registered schemes by the row-name grammar (lab/row_names.py) that no
    table lists: a scheme with options, kerple{p=2} (GPTConfig.pos_options), its copy twin kerple{p=2}_copy,
    and a fine-tune of any known variant, <variant>_ft_none (or _ft), _ft_drope and _ft_keep for every scheme,
    _ft_<scaling> for a scheme that uses RoPE's tables. Returns the names that stay unknown; a name that breaks a scheme's
    options or asks a scaling of a scheme without RoPE's tables raises ValueError with one line."""
    unknown = []
    for given in names:
        name = row_names.canonical(given)  # {a=1,b=2} admits the row {a=1}{b=2}; callers read names by names_of
        if name in ALL_NAMES:
            continue
        try:
            r = row_names.parse(name)
            scheme, options = row_names.scheme_options(r.base)
        except ValueError:
            unknown.append(given)
            continue
        if r.scaling or r.switch or r.seed or r.notemp or scheme not in schemes.REGISTRY:
            unknown.append(given)
            continue
        schemes.options_of(scheme, options)  # raises on an unknown option or a wrong type
        for v in (r.base, f"{r.base}_copy"):
            if v not in VARIANTS:
                VARIANTS[v] = {"pos": scheme, **({"pos_options": options} if options else {})}
                ALL_NAMES.append(v)
        COPY_OF.setdefault(f"{r.base}_copy", r.base)
        if r.finetune in RECALIBRATIONS and name not in FINETUNES:  # kerple_ft_drope, fox_ft_keep
            FINETUNES[name] = _recal(r.variant, r.finetune)
            ALL_NAMES.append(name)
        elif r.finetune is not None and name not in FINETUNES:
            kind = None if r.finetune in ("", "none") else r.finetune
            if kind is not None and not schemes.get(scheme).rope_options:
                raise ValueError(f"{name}: a fine-tune with the scaling {kind} needs a scheme that uses RoPE's "
                                 f"tables; {scheme!r} does not (use {r.variant}_ft_none)")
            FINETUNES[name] = _ft(r.variant, kind)
            ALL_NAMES.append(name)
    return unknown


def scheme_config(name: str) -> dict:
    """The GPTConfig fields of a scheme, or of a scheme with its options set, kerple{p=2} ({a=1,b=2} read as
    {a=1}{b=2}): {"pos": scheme} and, with options, "pos_options". How experiments/benchmark.py and experiments/breakage_test.py read
    a scheme name, through admit as every script reads variants; a name that is neither raises ValueError
    (one line)."""
    name = row_names.canonical(name)
    if not admit([name]) and row_names.parse(name).base == name and "pos" in VARIANTS.get(name, {}) and \
            set(VARIANTS[name]) <= {"pos", "pos_options"}:
        return dict(VARIANTS[name])
    raise ValueError(f"{name!r} is not a position scheme or a scheme with options set (kerple{{p=2}}); schemes: "
                     f"{', '.join(schemes.names())}{schemes.FILE_POINTER}")


def schemes_of_flags(flags: dict) -> list:
    """The schemes of the names given to each flag, {"--lm-pos": ("t5{scale=2.0}",)} -> ["t5"] (scheme_config);
    a name that is no scheme raises ValueError, one line naming its flag."""
    out = []
    for flag, names in flags.items():
        try:
            out += [scheme_config(n)["pos"] for n in names]
        except ValueError as e:
            raise ValueError(f"{flag}: {e}") from None
    return out


def causal_only(name: str) -> bool:
    """Has the scheme of this name (options set or not: t5{scale=2.0}) no bidirectional form?"""
    return schemes.get(scheme_config(name)["pos"]).causal_only


def scheme_file_of(name: str) -> dict:
    """{"scheme_file": {path, sha256}} when the variant's scheme came from a --scheme-file (a checkpoint's extra
    records it; such a run is never a real run of ours), else {}."""
    base = FINETUNES[name]["parent"] if name in FINETUNES else name
    pos = VARIANTS.get(base, {}).get("pos")
    return {"scheme_file": dict(schemes.FILES[pos])} if pos in schemes.FILES else {}


def from_files(names) -> bool:
    """Does any of these variant or family names train a scheme that came from a --scheme-file? Such a run
    writes runs/custom (train_compare, the evaluation scripts), never runs/main or results/."""
    return any(scheme_file_of(m) for n in names for m in FAMILIES.get(n, [n]) if m in ALL_NAMES)


def scaled(name: str) -> bool:
    """Does the training-free RoPE scaling apply to this checkpoint's rows? Yes for the plain variant of a scheme
    that uses RoPE's tables (rope; a registered xPos), and its copy twin; not for the variants built on it."""
    base = COPY_OF.get(name, name)
    return base in schemes.REGISTRY and schemes.get(base).rope_options and VARIANTS.get(base) == {"pos": base}

DEFAULT_VARIANTS = ["none", "learned", "sin", "rope", "alibi", "rope_ft_linear", "rope_ft_yarn",
                    "rope_ft_none", "alibi_ft"]
# --variants accepts these names for the extra commands of the README.
FAMILIES = {
    "theta": ["rope_theta10", "rope_theta1e6"],
    "copy": ["rope_copy", "alibi_copy", "none_copy", "learned_copy", "sin_copy", "irope_copy", "irope_copy_notemp",
             "gemma_hybrid_copy", "hybrid_rope_copy", "rope_copy_ft_yarn", "rope_copy_ft_none", "alibi_copy_ft"],
    "current": ["rope_partial25", "rope_p75", "irope_global", "irope", "gemma_hybrid"],
    # The field's comparison set (docs/field.md): its schemes (every field/field_*.py: schemes.field()), attention
    # sinks, DroPE and its control; text models first, then the copy models, then FoX's copy model with
    # x-transformers' gate bias (the control of fox_copy's init).
    "field": [*schemes.field(), "rope_sink", "alibi_sink", "rope_ft_drope", "rope_ft_keep",
              *(f"{s}_copy" for s in schemes.field()), "rope_sink_copy", "alibi_sink_copy",
              "rope_copy_ft_drope", "rope_copy_ft_keep", "fox{gate_bias=5.0}_copy"],
}


def names_of(text: str) -> list:
    """The variants a --variants list names: split at commas outside braces, each in its canonical form
    (row_names.canonical: fox{gate_bias=1.0,decay_max=64.0} is fox{gate_bias=1.0}{decay_max=64.0}), a family
    name replaced by its list."""
    return [m for n in row_names.split_names(text) for m in FAMILIES.get(n, [n])]


def is_copy(name: str) -> bool:
    """Does this variant (or the parent it continues) train on the copy mixture?"""
    return name in COPY_OF or FINETUNES.get(name, {}).get("parent") in COPY_OF


def order_of(row: str) -> tuple:
    """Sort key of a table row ("rope+yarn", "learned (clamped)", "rope [seed1]"): other seeds'
    rows last, then the place of the row's checkpoint in ALL_NAMES (unknown names after the known),
    then the plain row before its scaled or switched rows (row_names reads the name)."""
    r = row_names.parse(row)
    where = ALL_NAMES.index(r.checkpoint) if r.checkpoint in ALL_NAMES else len(ALL_NAMES)
    return (r.seed, where, bool(r.scaling or r.switch))


# ----------------------------------------------------------------------------- the recipe

# The recipe (docs/recipe.md): PyTorch's own init for every Linear (lab.options.LabConfig's init fields);
# weight decay 0.1 on the Linear weights only (decay="matrices").
@dataclass
class TrainConfig:
    seq_len: int = 256
    batch_size: int = 16
    steps: int = 1100
    lr: float = 3e-3
    min_lr_frac: float = 0.1
    warmup: int = 50
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 100
    eval_windows: int = 32      # seq_len-token windows from the validation text for the curve
    seed: int = 0
    decay: str = "matrices"     # weight decay on: "matrices" (Linear weights) or "all" (every parameter but the position scheme's)


# What a run made before a TrainConfig field existed had: a checkpoint without the field counts as this.
TRAIN_BEFORE_FIELD = {"decay": "matrices"}
DECAY_RULES = ("matrices", "all")


def lr_at(step: int, tc: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to min_lr_frac * lr."""
    if step < tc.warmup:
        return tc.lr * (step + 1) / tc.warmup
    progress = (step - tc.warmup) / max(1, tc.steps - tc.warmup)
    return tc.lr * (tc.min_lr_frac + (1 - tc.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * progress)))


def make_optimizer(model: TinyLM, tc: TrainConfig, fused: bool = False) -> torch.optim.Optimizer:
    """AdamW, one learning rate for all, weight decay tc.weight_decay on the parameters tc.decay names:
    "matrices", the Linear weights only (GPT-2, nanoGPT without its embedding decay); "all", every
    parameter (Linear weights and biases, LayerNorms, the token table), as `AdamW(model.parameters())`
    does. Under either rule the position scheme's own parameters (the learned table) get none unless its
    registry entry names them in Scheme.decay, so
    rows a batch never touches stay exactly at their initial values - the "untrained rows" of the
    learned table are then truly untrained.

    No extra learning rate for the embeddings: TinyLM multiplies them by sqrt(C), so an Adam
    step on a table already moves the residual stream sqrt(C) times further than on a Linear
    (docs/recipe.md says what a larger one did). fused=True: PyTorch's
    one-kernel AdamW (the same update, faster on CUDA)."""
    if tc.decay not in DECAY_RULES:
        raise ValueError(f"decay must be one of {', '.join(DECAY_RULES)}; got {tc.decay!r}")
    # the scheme's own parameters decay only where its entry names them (schemes.Scheme.decay)
    named = {} if model.pos_module is None else dict(model.pos_module.named_parameters())
    own = {id(p) for n, p in named.items() if n not in model.scheme.decay}
    decay = [p for n, p in model.named_parameters() if id(p) not in own
             and (tc.decay == "all" or (p.dim() == 2 and not n.startswith("tok_emb.")))]
    ids = {id(p) for p in decay}
    rest = [p for p in model.parameters() if id(p) not in ids]  # the scheme's; with "matrices" also embeddings, norms, biases
    return torch.optim.AdamW([{"params": decay, "weight_decay": tc.weight_decay},
                              {"params": rest, "weight_decay": 0.0}], lr=tc.lr, betas=(0.9, 0.99),
                             **({"fused": True} if fused else {}))


QUICK_MODEL = {"n_layer": 2, "n_head": 2, "n_embd": 32, "max_len": 512}
QUICK_TRAIN = {"seq_len": 64, "batch_size": 8, "steps": 30, "warmup": 5, "eval_every": 10, "eval_windows": 4}

# preview: the shape of the main result in a few minutes on 2 cores (the README's "Try it").
# gpu: sized for one modern GPU in roughly 10-20 minutes (an estimate: not yet run on a GPU by
# us). 6 x 384 is nanoGPT's Shakespeare-char model, ~10.6M parameters without the position
# table; the learned table gets 32,768 rows so that extrapolation_test.py can score every
# scheme up to 32K (rows past 1024 are never trained, as at 256 in the CPU run).
PRESETS = {
    "preview": {"model": {"n_layer": 2, "n_head": 4, "n_embd": 64, "max_len": 4096},
                "train": {"seq_len": 256, "batch_size": 16, "steps": 400, "warmup": 20, "eval_every": 100,
                          "eval_windows": 16},
                "variants": ["none", "learned", "sin", "rope", "alibi"],
                "eval": {"tokens": 32768, "scalings": "yarn"}},
    "gpu": {"model": {"n_layer": 6, "n_head": 6, "n_embd": 384, "max_len": 32768},
            "train": {"seq_len": 1024, "batch_size": 16, "steps": 1500, "lr": 1e-3, "warmup": 100,
                      "eval_every": 100, "eval_windows": 16},
            "amp": "bf16", "fused": True},
}


def run_dirs(quick: bool = False, preset: str = None, corpus=None) -> tuple:
    """(checkpoint folder, results folder) of a kind of run: the one rule every script follows.
    Real runs: runs/main and results/ (results/gpu for the gpu preset, whose numbers are not the
    CPU run's); --quick and --preset preview: runs/<mode>/ and runs/<mode>/results. A named corpus
    other than the default (--corpus sympy) adds its name to both real folders (runs/main/sympy,
    results/sympy) and to the checkpoint folder of the others (runs/quick/sympy/results), so no
    Shakespeare row or checkpoint is ever overwritten by another corpus's."""
    if quick:
        ckpt, results = Path("runs/quick"), None
    elif preset == "preview":
        ckpt, results = Path("runs/preview"), None
    elif preset == "gpu":
        ckpt, results = Path("runs/gpu"), Path("results/gpu")
    else:
        ckpt, results = Path("runs/main"), Path("results")
    name = corpora.corpus_name(corpus)
    if name is not None and name != corpora.DEFAULT_NAME:
        ckpt, results = ckpt / name, (results / name if results is not None else None)
    return ckpt, results if results is not None else ckpt / "results"


# ----------------------------------------------------------------------------- building a variant

def recipe_changes(path: Path, tc: TrainConfig) -> list:
    """Names of the TrainConfig fields in which a finished checkpoint differs from tc (fields
    added or removed since it was saved included); [] if it matches or cannot be read."""
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)["extra"]["train_config"]
    except Exception:  # a note only: a broken file is reported when it is loaded for real
        return []
    now = {f.name: getattr(tc, f.name) for f in fields(tc)}
    return sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))


def variant_config(name: str, model_kw: dict) -> GPTConfig:
    """The GPTConfig of base variant `name` for a run's model_kw (vocab_size and sizes)."""
    kw = {**model_kw, **VARIANTS[name]}
    for every in ("nope_every", "global_every"):  # e.g. irope under --quick (2 layers): its last layer
        kw[every] = min(kw.get(every, 0), kw.get("n_layer", GPTConfig.n_layer))
    return make_config(**kw)  # a GPTConfig, or a LabConfig where the variant sets a bench field


def finetune_setup(name: str, parent_config: dict, parent_tc: dict) -> tuple:
    """(GPTConfig fields, TrainConfig) of fine-tune `name` of a parent checkpoint with these
    GPTConfig and TrainConfig fields: 4x the length for 10% of the steps, its scaling set."""
    ft = FINETUNES[name]
    known = {f.name for f in fields(TrainConfig)}  # tolerate keys an older version saved
    tc_parent = TrainConfig(**{**TRAIN_BEFORE_FIELD, **{k: v for k, v in parent_tc.items() if k in known}})
    cfg = dict(parent_config)
    if ft.get("pos"):  # a recalibration without the parent's positions (DroPE): only pos changes
        cfg["pos"] = ft["pos"]
    if ft["rope_scaling"]:
        cfg["rope_scaling"] = dict(ft["rope_scaling"], original_max_len=tc_parent.seq_len)
    mult, steps = ft["seq_len_mult"], max(1, int(tc_parent.steps * ft["steps_frac"]))
    tc = replace(tc_parent, seq_len=tc_parent.seq_len * mult, batch_size=max(1, tc_parent.batch_size // mult),
                 steps=steps, lr=ft["lr"], warmup=ft["warmup"], min_lr_frac=ft.get("min_lr_frac", 1.0), eval_every=max(1, steps // 4),
                 eval_windows=max(1, tc_parent.eval_windows // mult), seed=tc_parent.seed + 1)
    return cfg, tc


def build_variant(name: str, model_kw: dict, tc: TrainConfig, seed: int, out: Path, make_with: str = None):
    """(model, TrainConfig, parent_step) for a variant name, ready to train. model_kw: the
    GPTConfig fields of the run (vocab_size and sizes); tc: the base variants' TrainConfig; make_with: the
    command a message about a bad parent checkpoint suggests (the user's own)."""
    if name in VARIANTS:  # GPTConfig.train_len: the length it trains at, for a scheme's build
        torch.manual_seed(seed)
        return make_model(variant_config(name, {"train_len": tc.seq_len, **model_kw})), tc, 0
    ft = FINETUNES[name]
    model, ck = checkpoint_io.load_checkpoint(out / f"{ft['parent']}.pt",
                                        make_with=make_with or f"python train_compare.py --variants {ft['parent']}")
    cfg, tc = finetune_setup(name, ck["config"], ck["extra"]["train_config"])
    if cfg["pos"] != ck["config"]["pos"]:  # the same weights in a model without the parent's positions
        dropped = make_model(make_config(**cfg))
        missing, unused = dropped.load_state_dict(model.state_dict(), strict=False)
        # only the parent scheme's own weights (a learned table) may be left behind, and nothing may be missing
        if missing or any(not k.startswith(f"{ck['config']['pos']}.") for k in unused):
            raise ValueError(f"{name}: the weights of {ft['parent']} do not fit a {cfg['pos']} model "
                             f"(missing {missing}, left over {unused})")
        model = dropped.to(next(model.parameters()).device)
    if ft["rope_scaling"]:
        model.set_rope_scaling(cfg["rope_scaling"])
    return model, tc, ck["step"]


# ----------------------------------------------------------------------------- what a real run is

def real_run(name: str, vocab_size: int, preset: str = None) -> tuple:
    """(GPTConfig fields, TrainConfig fields) of the real run of a variant, the one results/ holds:
    the default model with the variant's overrides, TrainConfig() (COPY_STEPS steps for the copy
    family), and for a fine-tune the setup finetune_setup derives from its parent's real run.
    preset "gpu": the real run results/gpu/ holds, the preset's model and recipe (the copy family's
    too: a preset sets the steps), as train_compare.py --preset gpu builds them."""
    if name in FINETUNES:
        cfg, tc = finetune_setup(name, *real_run(FINETUNES[name]["parent"], vocab_size, preset))
        return cfg, asdict(tc)
    if preset:
        tc = replace(TrainConfig(), **PRESETS[preset]["train"])
        model_kw = {"vocab_size": vocab_size, "train_len": tc.seq_len, **PRESETS[preset]["model"]}
        return full_config(variant_config(name, model_kw)), asdict(tc)
    tc = replace(TrainConfig(), steps=COPY_STEPS) if name in COPY_OF else TrainConfig()
    return full_config(variant_config(name, {"vocab_size": vocab_size})), asdict(tc)


def real_run_mismatch(name: str, ckpt: dict, preset: str = None, amp: str = "off") -> list:
    """How checkpoint `ckpt`, found as <name>.pt, differs from the real run of variant `name`
    (of `preset`'s, for results/gpu; trained under autocast `amp`):
    ["n_layer=2 (real run: 4)", ...], GPTConfig fields first, amp last; [] for a real run. The seed may
    differ (other seeds are real runs too); a field the checkpoint lacks counts as the value runs had
    before it existed (BEFORE_FIELD, TRAIN_BEFORE_FIELD; amp "off", as every run before it was recorded),
    else its default."""
    if name not in ALL_NAMES:
        return [f"variant {name!r} is not in the registry"]
    extra = ckpt.get("extra") or {}
    if extra.get("scheme_file"):  # results/ holds only what the repository's own code trains
        return [f"scheme from --scheme-file {extra['scheme_file'].get('path')} (not in the repository)"]
    if extra.get("variant") != name:
        return [f"variant={extra.get('variant')!r} (real run: {name!r})"]
    if not isinstance(extra.get("train_config"), dict):
        return ["train_config=None (real run: the recipe's)"]
    config = ckpt.get("config") or {}
    want_cfg, want_tc = real_run(name, config.get("vocab_size", GPTConfig.vocab_size), preset)
    got_cfg = {**full_config(GPTConfig()), **checkpoint_io.BEFORE_FIELD, **config}
    got_tc = {**asdict(TrainConfig()), **TRAIN_BEFORE_FIELD, **extra["train_config"]}
    got_amp = (extra.get("provenance") or {}).get("amp", "off")
    return [f"{k}={got[k]!r} (real run: {want[k]!r})" for got, want in ((got_cfg, want_cfg), (got_tc, want_tc))
            for k in want if k != "seed" and got[k] != want[k]] + \
        ([f"amp={got_amp!r} (real run: {amp!r})"] if got_amp != amp else [])
