"""lab/training.py, the loop every script that trains shares: train(batches=...) is the plain recipe written
out here (AdamW, the schedule, clipping, batches in step order), a probe changes nothing, periodic
saves of the training state draw no random numbers, and --amp bf16 really runs in bfloat16."""
import pytest
import torch
import torch.nn.functional as F

from experiments import breakage_test as bt
import tiny_lm
import train_compare as tcmp
from lab import training
from lab import variants
from tiny_lm import GPTConfig, TinyLM

pytestmark = pytest.mark.usefixtures("one_thread")


def weights(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def test_train_with_a_batch_function_is_the_plain_recipe():
    """train(batches=...) = AdamW from make_optimizer, lr_at's schedule, clipping, and batches
    drawn in step order from a generator seeded tc.seed + 12345; checked against a loop written here."""
    task = bt.make_task()
    x, y = bt.training_set(task)
    tc = variants.TrainConfig(seq_len=4, batch_size=8, steps=6, warmup=2, eval_every=3, seed=5)
    batches = bt.answer_batches(x, y, tc.batch_size)
    m1 = TinyLM(GPTConfig(vocab_size=len(task.vocab), n_layer=2, n_head=2, n_embd=16, max_len=8))
    m2 = TinyLM(GPTConfig(vocab_size=len(task.vocab), n_layer=2, n_head=2, n_embd=16, max_len=8))
    m2.load_state_dict(m1.state_dict())
    hist = training.train(m1, None, None, tc, batches=batches)
    opt, gen, losses = variants.make_optimizer(m2, tc), torch.Generator().manual_seed(tc.seed + 12345), []
    for step in range(tc.steps):
        xb, yb = batches(step, gen)
        for g in opt.param_groups:
            g["lr"] = variants.lr_at(step, tc)
        loss = F.cross_entropy(m2(xb).logits[:, -1, :], yb[:, -1])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m2.parameters(), tc.grad_clip)
        opt.step()
        losses.append(loss.item())
    diff = max((a - b).abs().max().item() for a, b in zip(m1.parameters(), m2.parameters()))
    assert diff < 1e-5, f"train() and the plain loop end with different weights: max diff {diff:.1e}"
    want = [sum(losses[:3]) / 3, sum(losses[3:]) / 3]
    got_diff = max(abs(a - b) for a, b in zip(hist["train_loss"], want))
    assert hist["step"] == [3, 6] and got_diff < 1e-5, f"{hist['train_loss']} vs {want} (max diff {got_diff:.1e})"
    assert hist["val_loss"] == [None, None], "no validation text: val_loss entries must be None"


def test_train_probe_is_called_at_each_eval_and_changes_nothing():
    tc = variants.TrainConfig(seq_len=16, batch_size=4, steps=6, warmup=2, eval_every=2, eval_windows=2)
    ids = torch.randint(0, 20, (2000,))
    cfg = tiny_lm.GPTConfig(vocab_size=20, n_layer=1, n_head=2, n_embd=8, pos="rope")
    models = []
    for probe in (None, lambda m: {"n": float(m(ids[None, :16]).logits.detach().sum())}):
        torch.manual_seed(0)
        models.append(tiny_lm.TinyLM(cfg))
        hist = training.train(models[-1], ids, ids, tc, probe=probe)
    assert [p["n"] for p in hist["probe"]] and len(hist["probe"]) == len(hist["step"]) == 3, hist
    for (n, a), b in zip(models[0].state_dict().items(), models[1].state_dict().values()):
        assert torch.equal(a, b), f"{n} differs with a probe: max diff {(a - b).abs().max():.2e}"


def tiny_setup(seed=0):
    torch.manual_seed(seed)
    model = TinyLM(GPTConfig(vocab_size=11, n_layer=1, n_head=2, n_embd=16, pos="rope"))
    ids = torch.randint(0, 11, (2000,), generator=torch.Generator().manual_seed(1))
    return model, ids, tcmp.TrainConfig(seq_len=16, batch_size=4, steps=6, warmup=2, eval_every=3, eval_windows=2)


def test_saving_the_state_changes_nothing_and_bf16_is_used(tmp_path):
    """Periodic saves draw no random numbers: the same weights as a plain train(). --amp bf16
    really runs in bfloat16 (close to float32, not equal). A saved state holds what resuming needs."""
    m0, ids, tc = tiny_setup()
    m1, _, _ = tiny_setup()
    m2, _, _ = tiny_setup()
    h0 = training.train(m0, ids, ids, tc)
    state = tmp_path / "s.pt"
    h1 = training.train(m1, ids, ids, tc, run=tcmp.RunConfig(state_path=state, save_every=2, identity={"x": 1}))
    assert h0["train_loss"] == h1["train_loss"] and h0["val_loss"] == h1["val_loss"], (h0, h1)
    differ = [k for k, v in m0.state_dict().items() if not torch.equal(v, m1.state_dict()[k])]
    assert not differ, f"saving the state changed the training: {differ}"
    st = weights(state)
    assert st["step"] == 4 and st["identity"] == {"x": 1} and st["hist"]["step"] == [3], (st["step"], st["hist"])
    assert {"model", "optimizer", "gen", "rng_torch", "running"} <= st.keys(), st.keys()
    h2 = training.train(m2, ids, ids, tc, run=tcmp.RunConfig(amp="bf16"))
    gap = max(abs(a - b) for a, b in zip(h0["train_loss"], h2["train_loss"]))
    assert 0 < gap < 0.05, f"bf16 autocast vs float32 training loss gap {gap:.2e}: expected small but nonzero"
