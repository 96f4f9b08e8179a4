"""The strategy interface v2: micro-steps accumulating into one optimizer step, sharded parameters (left out of
the all-reduce, checkpointed per rank with their optimizer state, resumed bitwise), steps without a gradient
due (a pipeline filling), and mini-batch inference without whole-partition blocks.

The loop's optimizer step runs here in two real gloo processes with a toy strategy whose gradients are known in
closed form; micro-batches run through `g3 train` against the independent single-process reference.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from helpers import DROPOUT, LR, SEED, flags, g3_plan, invoke, records, weights
from reference_minibatch import global_batches, minibatch_train
from test_eval import independent_accuracy
from test_minibatch import EPOCHS, run_distdgl
from test_train import max_weight_diff, ref_graph

from stages.train.checkpoint import load_checkpoint, rank_state_path, save_checkpoint


# --- the loop's optimizer step, with a toy strategy -------------------------------------------------------------
class ToyModel(torch.nn.Module):
    """``shared`` is replicated; ``mine`` is sharded: each rank holds its own slice (a different value)."""

    def __init__(self, rank: int):
        super().__init__()
        self.shared = torch.nn.Parameter(torch.tensor([1.0, 2.0], dtype=torch.float64))
        self.mine = torch.nn.Parameter(torch.tensor([10.0 * (rank + 1)], dtype=torch.float64))


class ToyStrategy:
    """Two micro-steps per optimizer step; each gives one target whose logits are (shared·x, mine) with
    x = (rank + 1, micro + 1); ``due`` says whether backward has a gradient due."""

    name = "toy"

    def __init__(self, model, rank: int, world: int, due: bool = True):
        self.model, self.rank, self.world, self.due = model, rank, world, due
        self.calls: list[tuple[int, int, int]] = []

    def micro_steps(self, epoch, step):
        return 2

    def steps(self, epoch):
        return 1

    def forward(self, epoch, step, micro=0):
        from stages.kits.runtime.strategy import StepOutput

        self.calls.append((epoch, step, micro))
        x = torch.tensor([self.rank + 1.0, micro + 1.0], dtype=torch.float64)
        self.out = torch.stack([self.model.shared @ x, self.model.mine[0]]).unsqueeze(0)
        return StepOutput(
            self.out.detach(), torch.tensor([0]), torch.tensor([0]), global_targets=2 * self.world
        )

    def backward(self, grad):
        torch.autograd.backward(self.out, grad)
        return self.due

    def before_update(self):
        self.calls.append("before_update")

    def update(self, optimizer, replicated):  # the default update of every strategy (all-reduce, step)
        from stages.kits.runtime.strategy import Strategy

        return Strategy.update(self, optimizer, replicated)

    def sharded_parameters(self):
        return ("mine",)


class _Ctx:
    def __init__(self, rank, world):
        from stages.kits.runtime.trace import Tracer

        self.rank, self.world, self.tracer = rank, world, Tracer(rank)

    def all_reduce_int(self, x, op="sum"):
        raise AssertionError("the toy strategy gives its global target count")


def _toy_rank(rank: int, world: int, init: str, out: str) -> None:
    from stages.train.loop import optimizer_step, summed_over_ranks

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    results = {}
    for due in (True, False):
        model = ToyModel(rank)
        strategy = ToyStrategy(model, rank, world, due)
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        replicated = [p for n, p in model.named_parameters() if n not in strategy.sharded_parameters()]
        done = optimizer_step(strategy, _Ctx(rank, world), optimizer, replicated, 0, 0)
        results[due] = {
            "shared": model.shared.detach().tolist(),
            "mine": model.mine.detach().tolist(),
            "loss": summed_over_ranks(done.loss, world),
            "micro": done.micro_steps,
            "calls": strategy.calls,
        }
    torch.save(results, Path(out) / f"rank{rank}.pt")
    dist.destroy_process_group()


def _expected(rank: int, world: int) -> dict:
    """Closed form: logits z = (shared·x, mine) per micro-step, one target of class 0, loss / (2·world)."""
    shared, mine = torch.tensor([1.0, 2.0], dtype=torch.float64), 10.0 * (rank + 1)
    g_shared, g_mine = torch.zeros(2, dtype=torch.float64), 0.0
    for r in range(world):
        m_r = 10.0 * (r + 1)
        for micro in range(2):
            x = torch.tensor([r + 1.0, micro + 1.0], dtype=torch.float64)
            p = torch.softmax(torch.stack([shared @ x, torch.tensor(m_r, dtype=torch.float64)]), 0)
            d = (p - torch.tensor([1.0, 0.0], dtype=torch.float64)) / (2 * world)
            g_shared += d[0] * x
            if r == rank:
                g_mine += float(d[1])
    return {"shared": (shared - g_shared).tolist(), "mine": [mine - g_mine]}


def test_micro_steps_accumulate_and_sharded_parameters_stay_out_of_the_all_reduce(tmp_path):
    world = 2
    init = f"file://{tmp_path / 'rendezvous'}"
    mp.start_processes(_toy_rank, args=(world, init, str(tmp_path)), nprocs=world, start_method="spawn")
    for rank in range(world):
        got = torch.load(tmp_path / f"rank{rank}.pt", weights_only=False)
        want = _expected(rank, world)
        # the micro-steps, then (after the all-reduce) before_update, once; with no update due, never
        assert got[True]["calls"] == [(0, 0, 0), (0, 0, 1), "before_update"] and got[True]["micro"] == 2
        assert got[False]["calls"] == [(0, 0, 0), (0, 0, 1)]
        # replicated: the sum over ranks and micro-steps; sharded: this rank's own gradient, never summed
        assert got[True]["shared"] == pytest.approx(want["shared"], abs=1e-12)
        assert got[True]["mine"] == pytest.approx(want["mine"], abs=1e-12)
        # no gradient due: the weights stay, the loss is still reported
        assert got[False]["shared"] == [1.0, 2.0] and got[False]["mine"] == [10.0 * (rank + 1)]
        assert got[False]["loss"] == pytest.approx(got[True]["loss"])


# --- sharded parameters in checkpoints ----------------------------------------------------------------------
class _Cfg:
    seed = 3


def test_sharded_parameters_and_their_optimizer_state_resume_bitwise_per_rank(tmp_path, monkeypatch):
    """Each rank's checkpoint file holds its own shard and its Adam moments; the host file holds neither, so a
    rank restores its own values, not rank 0's."""
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    saved = {}
    for rank in (0, 1):
        model = ToyModel(rank)
        strategy = ToyStrategy(model, rank, 2)
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        for step in range(3):
            opt.zero_grad()
            (model.shared.sum() * (step + 1) + model.mine.sum() * (rank + 2) ** step).backward()
            opt.step()
        save_checkpoint(
            tmp_path,
            4,
            model,
            opt,
            _Cfg(),
            type("S", (), {"state_dict": lambda self: {}, "sharded_parameters": lambda self: ("mine",)})(),
            rank,
        )
        saved[rank] = (
            model.mine.detach().clone(),
            {k: v.clone() for k, v in opt.state[model.mine].items()},
            model.shared.detach().clone(),
        )
    ckpt = tmp_path / "checkpoints" / "epoch-00004.pt"
    host = torch.load(ckpt, weights_only=True)
    assert "mine" not in host["model"] and len(host["optimizer"]["state"]) == 1
    for rank in (0, 1):
        assert torch.load(rank_state_path(ckpt, rank), weights_only=True)["format"] == 2
        model = ToyModel(5)
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        strategy = type(
            "S", (), {"sharded_parameters": lambda self: ("mine",), "load_state_dict": lambda self, s: None}
        )()
        assert load_checkpoint(ckpt, model, opt, strategy, rank) == 4
        mine, state, shared = saved[rank]
        assert torch.equal(model.mine.detach(), mine) and torch.equal(model.shared.detach(), saved[0][2])
        for k, v in state.items():
            assert torch.equal(opt.state[model.mine][k], v), k


# --- micro-batches through `g3 train` -------------------------------------------------------------------------
@pytest.mark.parametrize("k,order", [(2, "global"), (2, "local")])
def test_micro_batches_train_the_model_of_whole_batches(store, partitions, tmp_path, k, order):
    """--micro-batches 3 accumulates three passes into each optimizer step: the same model as whole batches
    (the sampler draws by node), the global order's equals the independent reference, and the metrics say how
    many micro-steps ran; the epoch's evaluation is layer-wise inference, equal to the reference's accuracy."""
    part = partitions("distdgl", k)
    whole = run_distdgl(part, tmp_path, order=order, out="whole")
    micro = run_distdgl(
        part, tmp_path, order=order, train=("--micro-batches", "3", "--eval-every", "1"), out="micro"
    )
    assert max_weight_diff(weights(whole)[1], weights(micro)[1]) < 1e-10
    recs = records(micro)
    steps = recs[0].get("steps", 1)
    assert recs[0]["micro_steps"] == 3 * steps
    if order == "global":
        graph = ref_graph(store)
        init, final = weights(micro)
        ref = minibatch_train(
            "sage", init, graph, global_batches(graph, 40, SEED), [3, 2], EPOCHS, LR, DROPOUT, SEED
        )
        assert max_weight_diff(final, ref) < 1e-5
    acc = independent_accuracy(store, weights(micro)[1], "sage")
    assert {s: recs[-1][f"{s}_acc"] for s in acc} == pytest.approx(acc, abs=1e-9)


def test_micro_batches_below_one_are_refused(partitions, tmp_path):
    sampling = flags(strategy="distdgl", hidden=6, fanouts="3,2", batch_size=40)
    plan = g3_plan(partitions("distdgl", 2), tmp_path / "plan", *sampling)
    r = invoke(["train", str(plan), "--micro-batches", "0", "-o", str(tmp_path / "run")])
    assert r.exit_code == 2 and "--micro-batches must be >= 1" in r.output
    assert not (tmp_path / "run").exists()
