"""visualize_rope.py: the per-pair view (figure 4's rope_pairs.png and rope_pairs.md), which pairs each
scaling keeps, blends or interpolates, against each method's definition computed here by hand in
float64, and the logit multiplier against what RotaryEmbedding actually does to q·k; figures 1-4 need
no checkpoint, and a figure asked for must be made (or refused before any is drawn)."""
import math

import pytest
import torch

import pos_rope
from lab import checkpoint_io
import visualize_rope as vr

pytestmark = pytest.mark.usefixtures("one_thread")
S = 16.0
SCALES = {"repo": (32, 256, 1e4), "llama3": vr.LLAMA_SCALE[1:]}  # (d, L0, base)


def wavelengths(d, base):
    """2π / θ_i with θ_i = base^(-2i/d), i = 0 .. d/2-1, in float64."""
    return [2 * math.pi * base ** (2 * i / d) for i in range(d // 2)]


def by_hand(d, keep, interp):
    """(kept, blended, interpolated) index lists from two predicates on the pair index."""
    kept = [i for i in range(d // 2) if keep(i)]
    inter = [i for i in range(d // 2) if interp(i) and not keep(i)]
    return kept, [i for i in range(d // 2) if i not in kept + inter], inter


def yarn_by_hand(d, L0, base):
    # kept: turns >= beta_fast times in L0 (wavelength <= L0 / beta_fast); interpolated: <= beta_slow turns
    b = pos_rope.SCALING_DEFAULTS["yarn"]
    w = wavelengths(d, base)
    return by_hand(d, lambda i: w[i] <= L0 / b["beta_fast"], lambda i: w[i] >= L0 / b["beta_slow"])


def llama3_by_hand(d, L0, base):
    # kept: wavelength <= L0 / high_freq_factor; interpolated: wavelength >= L0 / low_freq_factor
    b = pos_rope.SCALING_DEFAULTS["llama3"]
    w = wavelengths(d, base)
    return by_hand(d, lambda i: w[i] <= L0 / b["high_freq_factor"], lambda i: w[i] >= L0 / b["low_freq_factor"])


def ntk_by_hand(d, L0, base):
    # θ'_i / θ_i = (base' / base)^(-2i/d) with base' = base s^(d/(d-2)): s^(-2i/(d-2))
    r = [S ** (-2 * i / (d - 2)) for i in range(d // 2)]
    return by_hand(d, lambda i: r[i] > 0.99, lambda i: r[i] < 1.01 / S)


HAND = {"yarn": yarn_by_hand, "llama3": llama3_by_hand, "ntk": ntk_by_hand,
        "linear": lambda d, L0, base: ([], [], list(range(d // 2)))}


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("kind", HAND)
def test_pair_classes_match_the_definitions(kind, scale):
    d, L0, base = SCALES[scale]
    ratio, _ = vr.pair_ratios(d, base, L0, S)[kind]
    got, want = vr.classify_pairs(ratio, S), HAND[kind](d, L0, base)
    assert got == want, f"{kind} at d={d}, L0={L0}, base {base:g}: (kept, blended, interpolated) {got} != {want}"


def test_yarn_keeps_only_pair_0_at_this_repos_scale():
    d, L0, base = SCALES["repo"]
    kept, blended, interp = yarn_by_hand(d, L0, base)
    assert kept == [0] and blended and interp, f"issue #10 says only pair 0 is kept here; by hand {kept}"


@pytest.mark.parametrize("scale", SCALES)
def test_ratios_against_closed_forms(scale):
    d, L0, base = SCALES[scale]
    r = vr.pair_ratios(d, base, L0, S)
    lin = (r["linear"][0].double() - 1 / S).abs().max().item()
    assert lin < 1e-7, f"linear: every pair at θ_i / s; max |ratio - 1/s| = {lin:.2e}"
    ntk = r["ntk"][0].double()
    want = torch.tensor([S ** (-2 * i / (d - 2)) for i in range(d // 2)], dtype=torch.float64)
    err = ((ntk - want).abs() / want).max().item()
    assert ntk[0].item() == 1.0, f"ntk: pair 0 turns at 1 rad/token for any base, ratio {ntk[0].item()!r}"
    assert err < 1e-4, f"ntk: ratio vs s^(-2i/(d-2)), max relative diff {err:.2e}; last pair {ntk[-1].item():.6f}"


def test_logit_multiplier_is_what_rotary_embedding_does_to_q_dot_k():
    d, L0, _ = SCALES["repo"]
    want = (0.1 * math.log(S) + 1) ** 2  # YaRN eq. 22: sqrt(1/t) = 0.1 ln s + 1, on the logits 1/t
    mults = {k: m for k, (_, m) in vr.pair_ratios(d, 1e4, L0, S).items()}
    assert abs(mults["yarn"] - want) < 1e-9 and all(mults[k] == 1 for k in ("linear", "ntk", "llama3")), mults
    rope = pos_rope.ScaledRotaryEmbedding(d, scaling={"rope_type": "yarn", "factor": S, "original_max_len": L0})
    q, k = torch.randn(1, 1, 64, d), torch.randn(1, 1, 64, d)
    qr, kr = rope(q, k, offset=300)  # same position for q and k: the rotation cancels in q·k
    got = (qr * kr).sum(-1) / (q * k).sum(-1)  # (1, 1, 64)
    err = (got.double() - mults["yarn"]).abs().max().item()
    assert err < 1e-4, f"q'·k' / q·k should be {mults['yarn']:.5f} at every position; max diff {err:.2e}"


def test_markdown_counts_match_by_hand(tmp_path):
    scales = [("repo", *SCALES["repo"]), ("llama", *SCALES["llama3"])]
    vr.fig_pairs(tmp_path, scales, S)
    assert (tmp_path / "rope_pairs.png").stat().st_size > 5_000
    rows = [[c.strip() for c in line.strip("|\n ").split("|")]
            for line in (tmp_path / "rope_pairs.md").read_text().splitlines() if line.startswith("| ")][1:]
    assert len(rows) == len(scales) * len(vr.PAIR_METHODS), rows
    names = {v: k for k, v in vr.PAIR_METHODS.items()}
    for label, method, *cells, mult in rows:
        d, L0, base = SCALES["repo" if label.startswith("repo") else "llama3"]
        kind = names[method]
        want = [len(x) for x in HAND[kind](d, L0, base)]
        got = [int(c.split()[0]) for c in cells]
        assert got == want, f"{label} {method}: counts (kept, blended, interpolated) {got} != {want}"
        want_mult = (0.1 * math.log(S) + 1) ** 2 if kind == "yarn" else 1.0
        assert abs(float(mult) - want_mult) < 6e-4, f"{label} {method}: logit multiplier {mult} != {want_mult:.4f}"


# ----------------------------------------------------------------------------- the script

def test_visualize_figures_1_to_4_need_no_checkpoint(tmp_path):
    out = tmp_path / "fig"
    vr.main(["--only", "1,2,3,4", "--out", str(out), "--positions", "8", "--radius", "16",
                         "--ckpt", str(tmp_path / "none.pt"), "--ckpt-dir", str(tmp_path / "none")])
    pngs = ["rope_rotation.png", "rope_relative.png", "rope_decay.png", "rope_wavelengths.png", "rope_pairs.png"]
    for name in pngs:
        f = out / name
        assert f.is_file(), f"figure {name} was not written"
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f.stat().st_size > 5_000, \
            f"{name} is not a real PNG ({f.stat().st_size} bytes)"
    assert "| YaRN |" in (out / "rope_pairs.md").read_text(), "figure 4's pair table has no YaRN row"
    assert sorted(p.name for p in out.iterdir()) == sorted(pngs + ["rope_pairs.md"])


def test_visualize_rope_figures_asked_for_must_be_made(quick_ck, tmp_path, refused):
    out = ["--out", str(tmp_path / "fig")]
    assert "--only" in refused(vr.main, ["--only", "9", *out])
    assert "--only" in refused(vr.main, ["--only", "1,x", *out])
    msg = refused(vr.main, ["--only", "5", "--ckpt", str(tmp_path / "missing.pt"), *out])
    assert "figure 5" in msg and "missing.pt" in msg, msg
    msg = refused(vr.main, ["--only", "1,6", "--ckpt-dir", str(quick_ck), *out])
    assert "figure 6" in msg and "rope_theta10.pt" in msg, msg
    msg = refused(vr.main, ["--only", "5", "--ckpt", str(quick_ck / "alibi.pt"), *out])
    assert "not a RoPE model" in msg, msg
    assert not (tmp_path / "fig").exists(), "figure 1 was drawn before figure 6's checkpoints were found missing"
    # the default (every figure, default folders): a missing checkpoint skips its figure, with a note
    assert vr.main(["--only", "5", "--ckpt", str(quick_ck / "rope.pt"), *out]) == 0
    assert (tmp_path / "fig" / "rope_attention.png").is_file()


def test_a_checkpoint_of_a_scheme_file_loads_with_scheme_file(tmp_path, refused):
    """Without --scheme-file the checkpoint of a file's scheme is refused with the flag to pass; visualize_rope
    takes that flag, so with it the checkpoint loads and is refused only for what figure 5 needs (RoPE)."""
    from pathlib import Path

    import schemes
    import tiny_lm
    from lab import variants
    toy = Path(__file__).resolve().parent / "schemes" / "toy_forget.py"
    mine = "toy_forget" not in schemes.REGISTRY
    try:
        schemes.load_files([toy])
        model = tiny_lm.TinyLM(tiny_lm.GPTConfig(vocab_size=20, n_layer=1, n_head=2, n_embd=16, max_len=64,
                                                 pos="toy_forget"))
        checkpoint_io.save_checkpoint(tmp_path / "t.pt", model, "a" * 20, 1, {}, variants.scheme_file_of("toy_forget"))
        if mine:
            schemes.unregister("toy_forget")
            schemes.FILES.pop("toy_forget")
        argv = ["--only", "5", "--ckpt", str(tmp_path / "t.pt"), "--out", str(tmp_path / "out")]
        assert f"pass --scheme-file {toy}" in refused(vr.main, argv)
        msg = refused(vr.main, ["--scheme-file", str(toy), *argv])
        assert "is not a RoPE model (pos='toy_forget')" in msg, msg
    finally:
        if mine and "toy_forget" in schemes.REGISTRY:
            schemes.unregister("toy_forget")
        if mine:
            schemes.FILES.pop("toy_forget", None)
