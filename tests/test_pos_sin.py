"""pos_sin: the sinusoidal encoding against Vaswani et al. 2017 section 3.5, written out independently
(math.sin/math.cos loops), its shift matrix (PE(p + k) is a fixed rotation of PE(p)), no length cap."""
import math

import pytest
import torch

import pos_sin

pytestmark = pytest.mark.usefixtures("one_thread")


def max_diff(a, b) -> float:
    return (a.double() - b.double()).abs().max().item()


def sin_formula(positions, dim, base=10000.0) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / base^(2i/dim)), PE(pos, 2i+1) = cos(same), with math.sin/math.cos loops."""
    pe = torch.zeros(len(positions), dim, dtype=torch.float64)
    for r, pos in enumerate(positions):
        for c in range(dim):
            i2 = c - (c % 2)  # the "2i" of this column
            angle = pos / base ** (i2 / dim)
            pe[r, c] = math.sin(angle) if c % 2 == 0 else math.cos(angle)
    return pe


@pytest.mark.parametrize("dim", [16, 7])
def test_sin_table_matches_formula(dim):
    """sinusoidal_pe equals the paper's formula; an odd dim ends with a lone sin column."""
    positions = list(range(50))
    want = sin_formula(positions, dim)
    got64 = pos_sin.sinusoidal_pe(50, dim, dtype=torch.float64)
    err = max_diff(got64, want)
    assert err < 1e-12, f"float64 table vs formula (dim={dim}) max diff {err:.2e}"
    got32 = pos_sin.sinusoidal_pe(50, dim)
    assert got32.dtype == torch.float32
    err = max_diff(got32, want)
    assert err < 1e-5, f"float32 table vs formula (dim={dim}) max diff {err:.2e}"


@pytest.mark.parametrize("k", [1, 7, 100, -3])
def test_sin_shift_matrix(k):
    """PE(p + k) = M_k PE(p) for every p: a shift is one fixed linear map (a rotation per pair)."""
    dim, n = 16, 300
    pe = pos_sin.sinusoidal_pe(n, dim, dtype=torch.float64)  # rows p = 0..n-1
    M = pos_sin.shift_matrix(k, dim)
    lo, hi = max(0, -k), min(n, n - k)                        # p and p + k both inside the table
    pred = pe[lo:hi] @ M.T                                    # row p: (M_k PE(p))^T
    err = max_diff(pred, pe[lo + k:hi + k])
    assert err < 1e-10, f"PE(p+{k}) vs M_{k} PE(p) max diff {err:.2e}"
    # M_k is a rotation: orthogonal, and does not depend on p (checked above for all p at once).
    err = max_diff(M @ M.T, torch.eye(dim, dtype=torch.float64))
    assert err < 1e-12, f"M_{k} M_{k}^T vs I max diff {err:.2e}"


def test_sin_shift_matrix_composes():
    """M_a M_b = M_(a+b), and M_0 = I."""
    dim = 12
    err = max_diff(pos_sin.shift_matrix(5, dim) @ pos_sin.shift_matrix(9, dim), pos_sin.shift_matrix(14, dim))
    assert err < 1e-12, f"M_5 M_9 vs M_14 max diff {err:.2e}"
    err = max_diff(pos_sin.shift_matrix(0, dim), torch.eye(dim, dtype=torch.float64))
    assert err < 1e-15, f"M_0 vs I max diff {err:.2e}"
    with pytest.raises(ValueError, match="even"):
        pos_sin.shift_matrix(1, 7)


def test_sin_no_length_cap():
    """Positions beyond 5000 (the usual silent cap) are computed, pure function and module alike."""
    dim = 16
    positions = list(range(10_000, 10_004))
    want = sin_formula(positions, dim)
    got64 = pos_sin.sinusoidal_pe(4, dim, offset=10_000, dtype=torch.float64)
    err = max_diff(got64, want)
    assert err < 1e-9, f"float64 PE at positions 10000..10003 vs formula max diff {err:.2e}"
    mod = pos_sin.SinusoidalPositionalEncoding(dim, init_len=8)
    got = mod(4, offset=10_000)
    assert got.shape == (4, dim) and got.dtype == torch.float32
    assert mod.pe.shape[0] >= 10_004, f"cache did not grow: {mod.pe.shape[0]} rows"
    # float32 angles near 10^4 carry ~1e-3 rad of rounding; the values are still the formula's.
    err = max_diff(got, want)
    assert err < 2e-3, f"module PE at 10000..10003 vs formula max diff {err:.2e}"


def test_sin_cache_growth_matches_pure_function():
    """The module's grown cache gives the same values as the pure function, at every stage of growth."""
    dim = 10
    mod = pos_sin.SinusoidalPositionalEncoding(dim, init_len=8)
    assert "pe" not in mod.state_dict(), "the PE cache is a pure function; it should not be saved"
    sizes = []
    for T, offset in [(4, 0), (8, 0), (5, 30), (3, 200), (64, 0)]:
        got = mod(T, offset)
        sizes.append(mod.pe.shape[0])
        want = pos_sin.sinusoidal_pe(T, dim, offset=offset)
        err = max_diff(got, want)
        assert err < 1e-6, f"T={T} offset={offset}: module vs sinusoidal_pe max diff {err:.2e}"
    assert sizes[0] == 8 and sizes == sorted(sizes) and sizes[-1] >= 203, f"cache sizes {sizes}"
    full = pos_sin.sinusoidal_pe(mod.pe.shape[0], dim)
    err = max_diff(mod.pe, full)
    assert err < 1e-6, f"whole grown cache vs pure function max diff {err:.2e}"
