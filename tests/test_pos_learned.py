"""pos_learned: the GPT/BERT lookup table; offsets, the named limit, and rows past the training length."""
import pytest
import torch

import pos_learned

pytestmark = pytest.mark.usefixtures("one_thread")


def test_learned_offset_and_overflow():
    """forward(T, offset) returns rows offset..offset+T-1; asking past the table names the limit."""
    pe = pos_learned.LearnedPositionalEmbedding(max_len=16, dim=8)
    full = pe(16)
    assert torch.equal(full, pe.table.weight), "pe(max_len) should be the whole table"
    assert torch.equal(pe(4, offset=10), full[10:14])
    for T, offset in [(17, 0), (1, 16), (4, 13)]:
        with pytest.raises(ValueError, match=r"16 rows") as e:
            pe(T, offset)
        assert f"position {offset + T - 1}" in str(e.value), str(e.value)


def test_learned_untrained_rows_get_no_gradient():
    """Training at length 8 on a 16-row table: rows 8..15 get exactly zero gradient and never move."""
    pe = pos_learned.LearnedPositionalEmbedding(max_len=16, dim=8)
    before = pe.table.weight.detach().clone()
    opt = torch.optim.Adam(pe.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        (pe(8) - 1.0).pow(2).sum().backward()
        opt.step()
    g = pe.table.weight.grad
    assert g[8:].abs().max().item() == 0.0, f"rows past the training length got gradient {g[8:].abs().max():.2e}"
    assert (g[:8].abs().sum(dim=1) > 0).all(), "every trained row should get gradient"
    moved = (pe.table.weight - before).abs().sum(dim=1)
    assert moved[8:].max().item() == 0.0, f"untrained rows moved by {moved[8:].max():.2e}"
    assert (moved[:8] > 0).all()
