"""lab/train_state.py: the shards of a global batch under torchrun, and the command that continues an
interrupted run. (Resuming a killed run bit-identically: test_train_compare.py.)"""
import torch

import train_compare as tcmp
from lab import train_state


def test_continue_command_with_force_lists_what_is_left():
    names = ["none", "rope", "alibi"]
    cmd = tcmp.continue_command(["--force", "--variants", ",".join(names), "--quick"], names, "rope")
    assert cmd == "python train_compare.py --force --quick --variants rope,alibi", cmd
    cmd = tcmp.continue_command(["--quick"], ["none", "rope"], "rope")
    assert cmd == "python train_compare.py --quick", cmd


def test_shards_partition_the_global_batch():
    x = torch.arange(8 * 3).view(8, 3)  # 8 windows
    parts = [train_state.shard(x, r, 4) for r in range(4)]
    assert [p.shape for p in parts] == [(2, 3)] * 4, [p.shape for p in parts]
    rows = sorted(tuple(row.tolist()) for p in parts for row in p)
    assert rows == sorted(tuple(row.tolist()) for row in x), "the shards must be the batch's windows, each once"
    assert torch.equal(parts[1], x[[1, 5]]), parts[1]
    assert train_state.shard(x, 0, 1) is x, "one process takes the whole batch, untouched"
