"""shardps.torch.attach on models with buffers, frozen and unused parameters
(tests/integration/torch_attach.sh). Modes:

  values ADDR RANK INIT OUT  rank RANK of 2 builds the model from seed 100 +
                             RANK (so the ranks' values differ; rank 0 also
                             sets its BatchNorm's running statistics and a
                             num_batches_tracked past 2^40), attaches with
                             init=INIT (model or server), checks its first
                             pull (model: rank 0's state_dict bit for bit;
                             server: its parameters are not its own but its
                             buffers and frozen weight are rank 0's), trains
                             4 steps in which rank 1 does not use
                             `only_rank0` and no rank uses `unused`, and
                             writes its final state_dict to OUT.
  env OUT                    under shardps-run: attach(model) alone (the job
                             from the environment), 3 steps and no close():
                             the exit leaves the job, completing the last
                             step, after which (atexit runs its handlers
                             last in, first out) the state_dict is written
                             to OUT.RANK.
"""
import atexit
import os
import sys

import torch
import torch.nn.functional as F

import shardps.torch


class Net(torch.nn.Module):
    """Conv + BatchNorm + a frozen embedding-like weight + a head, with names
    past 31 bytes, a layer only rank 0 uses and one nobody uses."""

    def __init__(self) -> None:
        super().__init__()
        self.features_with_a_rather_long_name = torch.nn.Sequential(
            torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
        self.frozen_scale = torch.nn.Parameter(torch.rand(4), requires_grad=False)
        self.head = torch.nn.Linear(4 * 4 * 4, 3)
        self.only_rank0 = torch.nn.Linear(3, 3)
        self.unused = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor, rank: int) -> torch.Tensor:
        h = self.features_with_a_rather_long_name(x) * self.frozen_scale.view(1, 4, 1, 1)
        out = self.head(h.flatten(1))
        return self.only_rank0(out) if rank == 0 else out


def build(rank: int) -> Net:
    torch.manual_seed(100 + rank)
    m = Net()
    bn = m.features_with_a_rather_long_name[1]
    if rank == 0:
        with torch.no_grad():
            bn.running_mean.copy_(torch.randn(4))
            bn.running_var.copy_(torch.rand(4) + 0.5)
            bn.num_batches_tracked.fill_(2 ** 40 + 3)
    return m


def same(a: dict, b: dict, keys) -> None:
    for k in keys:
        if not torch.equal(a[k], b[k]):
            raise SystemExit(f"FAIL: {k} differs from rank 0's: {a[k].flatten()[:3]} vs "
                             f"{b[k].flatten()[:3]}")


def train(m: Net, rank: int, steps: int) -> None:
    g = torch.Generator().manual_seed(7 + rank)
    for _ in range(steps):
        x = torch.randn(8, 1, 4, 4, generator=g)
        y = torch.randint(0, 3, (8,), generator=g)
        loss = F.cross_entropy(m(x, rank), y)
        loss.backward()


def values(addr: str, rank: int, init: str, out: str) -> None:
    m = build(rank)
    want = build(0).state_dict()
    start_unused = {k: v.clone() for k, v in want.items() if k.startswith("unused")}
    ps = shardps.torch.attach(m, addr, rank, 2, init=init)
    got = m.state_dict()
    buffers = [k for k, _ in m.named_buffers()] + ["frozen_scale"]
    if init == "model":
        same(got, want, want.keys())
        print(f"PASS: rank {rank}: the first pull is rank 0's state_dict bit for bit")
    else:
        same(got, want, buffers)
        if torch.equal(got["head.weight"], want["head.weight"]):
            raise SystemExit("FAIL: init=server pulled rank 0's own head.weight")
        print(f"PASS: rank {rank}: init=server: the servers' parameters, rank 0's buffers")
    train(m, rank, 4)
    ps.close()
    sd = m.state_dict()
    if sd["features_with_a_rather_long_name.1.num_batches_tracked"].item() != 2 ** 40 + 3 + 4:
        raise SystemExit("FAIL: num_batches_tracked is "
                         f"{sd['features_with_a_rather_long_name.1.num_batches_tracked'].item()}")
    same(sd, want, ["frozen_scale"])
    if init == "model":
        same(sd, start_unused, start_unused.keys())
        if torch.equal(sd["only_rank0.weight"], want["only_rank0.weight"]):
            raise SystemExit("FAIL: only_rank0 was not trained")
    torch.save(sd, out)
    print(f"PASS: rank {rank}: rank 0's counter carried exactly, frozen and unused kept")


def env(out: str) -> None:
    rank = int(os.environ["RANK"])
    m = build(rank)
    atexit.register(lambda: torch.save(m.state_dict(), f"{out}.{rank}"))
    shardps.torch.attach(m)
    train(m, rank, 3)
    print(f"rank {rank}: trained, leaving without close()", flush=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "values":
        values(args[0], int(args[1]), args[2], args[3])
    elif mode == "env":
        env(args[0])
    else:
        raise SystemExit(f"unknown mode {mode}")
