"""xPos: RoPE's rotation times a per-pair decay with distance, as a scheme file (scheme "xpos").

Paper: Sun et al. 2022, "A Length-Extrapolatable Transformer" (xPos, "extrapolatable position
embedding"). Pair i of q and k (the RoPE pair, turned by m θ_i as in pos_rope.py) is
also scaled, the query by zeta_i^(m/s) and the key by zeta_i^(-n/s), so that

    q_m . k_n = sum_i zeta_i^((m - n)/s) [RoPE's term of pair i],   zeta_i = (2i/r + gamma) / (1 + gamma)

with r the rotated dims (the head dim unless partial_rotary_factor < 1), gamma = 0.4 and scale base
s = 512 (torchscale's defaults; options gamma and scale_base). zeta_i < 1, so a far key counts less,
and the most on the fast pairs (small i, high θ_i, zeta_i near gamma/(1+gamma)), whose RoPE term
oscillates most beyond the training length.

Conventions:
  * Positions are taken relative to a fixed centre c = cfg.train_len // 2 (torchscale's centre for a
    window of train_len tokens): q_m gets zeta^((m - c)/s), k_n zeta^(-(n - c)/s). The product keeps
    zeta^((m - n)/s) whatever c is, and at 4096 tokens the scales stay within zeta^(+-8), finite.
  * The same zeta_i on both members of pair i, read from the layer's rope: pairing "adjacent" (2i, 2i+1),
    "half" (i, i + r/2); dims past r carry no position and keep scale 1. A p-RoPE pair of frequency 0
    keeps its zeta_i (the paper, without p-RoPE, scales every pair).
  * Rotation and scale in float32 whatever the model's dtype; only the result is cast to q's dtype.
  * `offset` is the position of the first new token (cached decoding); TinyLM caches the scaled keys.
  * A NoPE layer (layer.rope None) is neither turned nor scaled.

Checked against microsoft/torchscale, torchscale/component/xpos_relative_position.py (XPOS): the same
zeta ((arange(0, d, 2) + 0.4 d) / (1.4 d)), scale base 512, adjacent pairs (rotate_every_two), the scale
on cos and sin (the rotation times the scale), keys with 1/scale. Its centre is ceil(L/2) of the current
total length L, recomputed each call, because its multihead_attention.py caches keys before xPos and
scales them all again; ours is fixed, since TinyLM caches keys after rotate_qk. lucidrains/
rotary-embedding-torch, src/rotary_embedding_torch/rotary_embedding_torch.py (use_xpos): the same zeta
and base, centre len(t) // 2 of the sequence, its scale cast to q's dtype (ours stays float32 until the
end). The paper's blockwise causal attention (BCA, at inference) is not part of this scheme.

Copying the file into another project takes pos_rope.py with it (the rotation is its RotaryEmbedding),
and torch; the registration at the bottom runs only inside this repository. `PYTHONPATH=. python field/field_xpos.py` checks (pos_rope.py on the path).
Here: registered by schemes.py (`--variants xpos`).
"""
import math

import torch
import torch.nn as nn

from pos_rope import RotaryEmbedding

try:  # inside the repository the scheme registers itself (--scheme-file); a copy works without it
    import schemes
except ImportError:
    schemes = None

GAMMA, SCALE_BASE = 0.4, 512.0  # torchscale's XPOS: 0.4 in its zeta, scale_base=512


def xpos_zeta(rot_dim: int, gamma: float = GAMMA) -> torch.Tensor:
    """zeta_i for the rot_dim / 2 pairs, float32, (rot_dim/2,)."""
    # zeta_i = (2i/r + gamma) / (1 + gamma),   i = 0 .. r/2 - 1
    i = torch.arange(rot_dim // 2, dtype=torch.float32)
    return (2 * i / max(rot_dim, 1) + gamma) / (1 + gamma)


def xpos_scale(positions: torch.Tensor, rot_dim: int, pairing: str = "adjacent", gamma: float = GAMMA,
               scale_base: float = SCALE_BASE, centre: int = 0) -> torch.Tensor:
    """zeta_i^((m - c)/s) for each position m, float32, (T, rot_dim): pair i's value on both of its dims."""
    # zeta_i^((m - c)/s) = exp((m - c)/s * ln zeta_i)
    power = (positions.float() - centre) / scale_base                       # (T,)
    log_zeta = torch.log(xpos_zeta(rot_dim, gamma)).to(power.device)         # (r/2,)
    z = torch.exp(power[:, None] * log_zeta[None, :])                         # (T, 1) * (1, r/2) -> (T, r/2)
    if pairing == "adjacent":
        return z.repeat_interleave(2, dim=-1)  # (T, r/2) -> (T, r): dims 2i, 2i+1
    if pairing == "half":
        return torch.cat((z, z), dim=-1)       # (T, r/2) -> (T, r): dims i, i + r/2
    raise ValueError(f"unknown RoPE pairing {pairing!r}; xPos scales pairs 'adjacent' or 'half'")


def apply_xpos(q: torch.Tensor, k: torch.Tensor, rope: nn.Module, offset: int = 0, gamma: float = GAMMA,
               scale_base: float = SCALE_BASE, centre: int = 0):
    """q, k (B, H, T, D) at positions offset .. offset+T-1: turned by rope in float32, q times the scale,
    k divided by it; returned in q's and k's dtypes."""
    T, D = q.shape[-2], q.shape[-1]
    r = getattr(rope, "rot_dim", rope.head_dim)  # ScaledRotaryEmbedding turns the first r dims only
    qf, kf = rope(q.float(), k.float(), offset=offset)  # (B, H, T, D) each, float32
    pos = torch.arange(offset, offset + T, device=q.device)
    s = xpos_scale(pos, r, rope.pairing, gamma, scale_base, centre)  # (T, r)
    s = torch.cat((s, s.new_ones(T, D - r)), dim=-1)                 # (T, D): the unturned dims keep 1
    # q_m <- R(m) q_m zeta^((m - c)/s),   k_n <- R(n) k_n zeta^(-(n - c)/s)
    return (qf * s).to(q.dtype), (kf / s).to(k.dtype)               # (B, H, T, D) * (T, D)


class XPos(nn.Module):
    """No parameters: gamma, the scale base and the centre. rotate_qk uses the layer's RoPE tables."""

    def __init__(self, gamma: float = GAMMA, scale_base: float = SCALE_BASE, centre: int = 0):
        super().__init__()
        if not gamma > 0 or not scale_base > 0:
            raise ValueError(f"xPos needs gamma > 0 and scale_base > 0, got gamma={gamma!r}, scale_base={scale_base!r}")
        self.gamma, self.scale_base, self.centre = gamma, scale_base, centre

    def extra_repr(self) -> str:
        return f"gamma={self.gamma}, scale_base={self.scale_base}, centre={self.centre}"

    def rotate_qk(self, q, k, offset: int, layer):
        """The hook: q, k (B, H, T, D) -> turned and scaled; a NoPE layer (no rope) passes them through."""
        if layer.rope is None:
            return q, k
        return apply_xpos(q, k, layer.rope, offset, self.gamma, self.scale_base, self.centre)


def _build(cfg) -> XPos:
    o = cfg.pos_options
    return XPos(o["gamma"], o["scale_base"], centre=cfg.train_len // 2)


def _self_check() -> None:
    z = xpos_zeta(4).tolist()
    assert abs(z[0] - 2 / 7) < 1e-7 and abs(z[1] - 9 / 14) < 1e-7, z  # (0 + 0.4)/1.4, (0.5 + 0.4)/1.4
    print(f"ok  zeta for r = 4: {z[0]:.6f} = 2/7, {z[1]:.6f} = 9/14")
    s = xpos_scale(torch.tensor([100 + 512]), 4, centre=100)[0].tolist()
    assert max(abs(a - b) for a, b in zip(s, [2 / 7, 2 / 7, 9 / 14, 9 / 14])) < 1e-6, s
    print("ok  one scale base past the centre the scale is zeta itself, on dims (0, 1) and (2, 3)")
    rope, e0 = RotaryEmbedding(4), torch.tensor([1.0, 0.0, 0.0, 0.0]).view(1, 1, 1, 4)

    def score(m, n):  # q = k = e_0 (pair 0, θ_0 = 1) at positions m and n, centre 128
        return (apply_xpos(e0, e0, rope, m, centre=128)[0] * apply_xpos(e0, e0, rope, n, centre=128)[1]).sum().item()
    want = math.cos(512.0) * 2 / 7  # cos((m - n) θ_0) zeta_0^((m - n)/512)
    got = [score(n + 512, n) for n in (0, 1000, 3584)]
    assert max(abs(g - want) for g in got) < 1e-3, (got, want)
    print(f"ok  e_0 . e_0 at m - n = 512: {', '.join(f'{g:.5f}' for g in got)} (n = 0, 1000, 3584); "
          f"cos(512) * 2/7 = {want:.5f}")
    torch.manual_seed(0)
    q, k = apply_xpos(torch.randn(1, 2, 4096, 64), torch.randn(1, 2, 4096, 64), RotaryEmbedding(64), centre=128)
    assert torch.isfinite(q).all() and torch.isfinite(k).all()
    print(f"ok  4096 positions, centre 128: q and k finite (largest |k| {k.abs().max().item():.3g})")


# Registered by schemes.py's last line (importing this file); run as a script, that import has done it.
if schemes is not None and __name__ != "__main__":
    schemes.register(schemes.Scheme("xpos", "Q/K rotation and scale", __file__, build=_build,
                                    rotate_qk=XPos.rotate_qk, rope_options=True,
                                    options={"gamma": GAMMA, "scale_base": SCALE_BASE}))

if __name__ == "__main__":
    import argparse  # --help prints this docstring; any argument is refused before the work starts
    argparse.ArgumentParser(description=__doc__ + "\nRun alone, it runs the self-check.",
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    _self_check()
