"""Sinusoidal absolute position encoding (方案 B：Sinusoidal).

Paper: Vaswani et al. 2017, "Attention Is All You Need", section 3.5.

    PE(pos, 2i)   = sin(pos / base^(2i/dim))
    PE(pos, 2i+1) = cos(pos / base^(2i/dim)),    base = 10000

Convention: sin on even dims, cos on odd dims (interleaved, as in the paper and the
tutorial), added to the token embedding at the input. Nothing is learned.

Where this differs from the tutorial's `sinusoidal_pe` / `SinPosModel`: the tutorial
precomputes a fixed `max_len=4096` buffer and silently slices it, so position 4096 is an
index error (and other copies of this code cap at 5000 without saying so). Here the table
is a pure function of (positions, dim) and the module's cache grows on demand, so any
position works. Angles are computed in float32 (float64 for the check) whatever the
model dtype. An odd `dim` is allowed: the last (even) column is a sin with no cos partner.

Why it "should" extrapolate: PE(pos + k) is a fixed rotation of PE(pos) (each (sin, cos)
pair turns by the angle k * w_i), so the formula is defined everywhere. Whether a model
trained at 256 *uses* it well at 4096 is an empirical question; extrapolation_test.py
measures it.

Copyable alone: imports torch and math only.
"""
import math

import torch
import torch.nn as nn


def sinusoidal_pe(max_len: int, dim: int, offset: int = 0, base: float = 10000.0,
                  dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """The table for positions offset .. offset+max_len-1, shape (max_len, dim)."""
    pos = torch.arange(offset, offset + max_len, device=device, dtype=dtype).unsqueeze(1)  # (T, 1)
    # w_i = base^(-2i/dim) = exp(-(2i) * ln(base) / dim),  i = 0 .. ceil(dim/2)-1
    two_i = torch.arange(0, dim, 2, device=device, dtype=dtype)  # (ceil(dim/2),)
    div = torch.exp(two_i * (-math.log(base) / dim))             # (ceil(dim/2),)
    angles = pos * div                                           # (T, 1) * (dim/2,) -> (T, dim/2)
    pe = torch.zeros(max_len, dim, device=device, dtype=dtype)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : dim // 2])
    return pe  # (T, dim)


def shift_matrix(k: int, dim: int, base: float = 10000.0, dtype=torch.float64) -> torch.Tensor:
    """The fixed (dim, dim) linear map M_k with PE(pos + k) = M_k @ PE(pos) for every pos.

    Per pair (sin a, cos a) -> (sin(a + b), cos(a + b)) with b = k * w_i:
        sin(a+b) =  cos(b) sin(a) + sin(b) cos(a)
        cos(a+b) = -sin(b) sin(a) + cos(b) cos(a)
    """
    if dim % 2:
        raise ValueError(f"shift_matrix needs an even dim (sin/cos pairs), got {dim}")
    w = torch.exp(torch.arange(0, dim, 2, dtype=dtype) * (-math.log(base) / dim))  # (dim/2,)
    b = k * w
    M = torch.zeros(dim, dim, dtype=dtype)
    M[0::2, 0::2] = torch.diag(torch.cos(b))
    M[0::2, 1::2] = torch.diag(torch.sin(b))
    M[1::2, 0::2] = torch.diag(-torch.sin(b))
    M[1::2, 1::2] = torch.diag(torch.cos(b))
    return M


class SinusoidalPositionalEncoding(nn.Module):
    """forward(T, offset) -> PE rows for positions offset .. offset+T-1, shape (T, dim).

    The float32 cache grows when a longer position is asked for; it is not saved in
    checkpoints (persistent=False) because it is a pure function of dim and base.
    """

    def __init__(self, dim: int, base: float = 10000.0, init_len: int = 256):
        super().__init__()
        self.dim, self.base = dim, base
        self.register_buffer("pe", sinusoidal_pe(init_len, dim, base=base), persistent=False)

    def forward(self, T: int, offset: int = 0) -> torch.Tensor:
        need = offset + T
        if need > self.pe.shape[0]:
            grown = max(need, 2 * self.pe.shape[0])
            self.pe = sinusoidal_pe(grown, self.dim, base=self.base, device=self.pe.device)
        return self.pe[offset:need]  # (T, dim), float32


def _self_check() -> None:
    dim = 16
    pe = sinusoidal_pe(64, dim, dtype=torch.float64)
    pos, i = 5, 3
    want = math.sin(pos / 10000 ** (2 * i / dim)), math.cos(pos / 10000 ** (2 * i / dim))
    got = pe[pos, 2 * i].item(), pe[pos, 2 * i + 1].item()
    assert max(abs(a - b) for a, b in zip(got, want)) < 1e-12, (got, want)
    print(f"ok  PE({pos}, {2*i}) and PE({pos}, {2*i+1}) match the formula: {got[0]:.6f}, {got[1]:.6f}")
    M = shift_matrix(7, dim)
    err = (pe[7:] - pe[:-7] @ M.T).abs().max().item()
    assert err < 1e-10, err
    print(f"ok  PE(p+7) = M_7 PE(p) for p = 0..56 (max error {err:.1e})")
    mod = SinusoidalPositionalEncoding(dim, init_len=8)
    far = mod(4, offset=10_000)
    err = (far - sinusoidal_pe(4, dim, offset=10_000)).abs().max().item()
    assert err == 0.0
    print(f"ok  no length cap: positions 10000..10003 computed, cache grew to {mod.pe.shape[0]} rows")


if __name__ == "__main__":
    import argparse  # --help prints this docstring; any argument is refused before the work starts
    argparse.ArgumentParser(description=__doc__ + "\nRun alone, it runs the self-check.",
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    _self_check()
