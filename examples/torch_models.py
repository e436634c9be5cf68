#!/usr/bin/python3
"""Real models on shardps: torchvision's ResNet-18, unmodified, a Vision
Transformer, or the two small models of the proof against DDP, trained on
Fashion-MNIST by an ordinary PyTorch loop with one line added
(shardps.torch.attach), under shardps-run:

    shardps-run --servers 2 --workers 2 --optimizer sgd --momentum 0.9 --lr 0.05 \\
        --lr-schedule constant -- python3 examples/torch_models.py --model resnet18 --steps 200

attach(model) joins the job shardps-run put in the environment, starts
every rank from rank 0's model (its own initialisation), shares the
BatchNorm buffers as DDP does, and leaves the job at exit. Each rank trains
on its share of the data (ps.sampler: PyTorch's DistributedSampler); the
servers run the optimizer: there is no torch.optim in this mode.

--ddp runs the same loop on the same batches without shardps: 2 processes
(gloo, one thread each) under DistributedDataParallel, each running
torch.optim.Adam at --lr, cosine-annealed to 0 over the run's steps, as
`shardps-run --optimizer adam --lr LR --lr-schedule cosine` has the servers
do over the run's steps (the steps each worker tells attach). Both
modes start from the same model (rank 0's, built from --seed) and end with
the same lines: rank 0 tests on --test test images after every epoch (and
every --eval-every steps), off the training clock (torch_fmnist's Clock),
prints the curve as it goes, the time to --target, and a final JSON line
(torch_fmnist's: test_accuracy, seconds_to_target, train_seconds,
samples_per_second, mode, steps).

--model small-resnet and small-vit are examples/small_models.py's ResNet
and ViT at the sizes of the full runs of docs/results.md; resnet18 and vit
are the larger models of docs/torch.md.
"""
import argparse
import os
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# torch_fmnist puts this tree's python/shardps first on the path; its
# library is the one built beside it (build/), as torch_fmnist's launcher
# has it, unless SHARDPS_LIB names another.
if os.path.exists(os.path.join(HERE, "..", "build", "libshardps.so.1")):
    os.environ.setdefault("SHARDPS_LIB", os.path.join(HERE, "..", "build"))
from small_models import ResNet, ViT  # noqa: E402
from torch_fmnist import Clock, load, report  # noqa: E402
import shardps.torch  # noqa: E402  (found through torch_fmnist's path)


class Gray(nn.Module):
    """torchvision's ResNet-18 as it is, fed the grayscale image on its 3
    input channels."""

    def __init__(self):
        super().__init__()
        self.net = torchvision.models.resnet18(num_classes=10)

    def forward(self, x):
        return self.net(x.view(-1, 1, 28, 28).expand(-1, 3, -1, -1))


# name: (the model, the default --target)
MODELS = {
    "resnet18": (Gray, 0.91),
    "vit": (lambda: ViT(dim=64, depth=4, heads=4, patch=4), 0.88),
    "small-resnet": (lambda: ResNet(width=16, stem_pool=True), 0.91),
    "small-vit": (lambda: ViT(dim=48, depth=3, heads=4, patch=7), 0.88),
}


def train(a, model, net, loader, step, clock):
    """The loop both modes run: net is what the loop calls (the model, or
    DDP's wrapper of it), step(loss) whatever follows backward. Returns the
    last loss."""
    steps, epoch, per_epoch, tested = 0, 0, len(loader), 0
    while steps < a.steps:
        loader.sampler.set_epoch(epoch)
        for xb, yb in loader:
            loss = F.cross_entropy(net(xb), yb)
            loss.backward()
            step(loss)
            steps += 1
            clock.tick(model, steps)
            if len(clock.curve) > tested:
                s, t, acc = clock.curve[-1]
                print(f"step {s} (epoch {s / per_epoch:.2f}): test accuracy {acc:.4f} after "
                      f"{t:.1f} training seconds", flush=True)
                tested = len(clock.curve)
            if steps == a.steps:
                break
        epoch += 1
    return loss


class EpochClock(Clock):
    """torch_fmnist's Clock, testing at every epoch's end as well as every
    a.eval_every steps and after the last."""

    def __init__(self, a, rank, per_epoch, settle=lambda: None):
        super().__init__(a, rank, settle)
        self.per_epoch = per_epoch
        if self.test is not None:
            self.test = (self.test[0][:a.test], self.test[1][:a.test])

    def tick(self, model, step):
        every = self.a.eval_every
        if step % self.per_epoch == 0 or (every and step % every == 0) or step == self.a.steps:
            # Clock tests at multiples of a.eval_every: with 1, at this step.
            saved, self.a.eval_every = every, 1
            super().tick(model, step)
            self.a.eval_every = saved


def data(a, sampler):
    """The training images as a DataLoader of this rank's share: the same
    DistributedSampler (shuffled by --seed, each epoch anew) in both modes."""
    x, y = load("train")
    dataset = torch.utils.data.TensorDataset(x, y)
    return torch.utils.data.DataLoader(dataset, batch_size=a.batch, drop_last=True,
                                       sampler=sampler(dataset, seed=a.seed, drop_last=True))


def shardps_worker(a):
    t0 = time.time()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed + int(os.environ.get("SHARDPS_RANK", "0")))  # rank 0's wins
    model = MODELS[a.model][0]()
    a.workers = int(os.environ.get("SHARDPS_WORKERS", "2"))
    a.steps = a.steps or a.epochs * (60000 // (a.batch * a.workers))
    # The steps this run takes: the servers' cosine schedule spans them
    # (unless shardps-run's --total-steps says otherwise).
    ps = shardps.torch.attach(model, total_steps=a.steps)             # the one line
    loader = data(a, ps.sampler)
    clock = EpochClock(a, ps.rank, len(loader), settle=ps.sync)
    loss = train(a, model, model, loader, ps.report, clock)
    ps.close()
    finish(a, ps.rank, clock, loss, t0, a.mode)


def ddp_rank(rank, a, init_file, t0):
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=a.workers)
    torch.manual_seed(a.seed + rank)  # DDP broadcasts rank 0's
    model = MODELS[a.model][0]()
    net = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=a.steps)

    def step(loss):
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)

    def sampler(dataset, seed, drop_last):
        return torch.utils.data.DistributedSampler(dataset, a.workers, rank, shuffle=True,
                                                   seed=seed, drop_last=drop_last)
    loader = data(a, sampler)
    clock = EpochClock(a, rank, len(loader))
    loss = train(a, model, net, loader, step, clock)
    dist.destroy_process_group()
    finish(a, rank, clock, loss, t0, "ddp")


def ddp(a):
    import torch.multiprocessing as mp
    t0 = time.time()
    a.workers = 2
    a.steps = a.steps or a.epochs * (60000 // (a.batch * a.workers))
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(ddp_rank, args=(a, os.path.join(d, "init"), t0), nprocs=a.workers)


def finish(a, rank, clock, loss, t0, mode):
    """Rank 0's last lines: the one it_torch_attach reads, then the JSON."""
    if rank != 0:
        return
    r = clock.result()
    print(f"{a.model}: {a.steps} steps, last loss {loss.item():.4f}, test accuracy "
          f"{r['test_accuracy']:.4f} on {len(clock.test[0])} images; "
          + (f"{a.target} after {r['seconds_to_target']} training seconds"
             if r["seconds_to_target"] is not None else f"{a.target} not reached"), flush=True)
    report(a, r, time.time() - t0, mode)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=list(MODELS), default="resnet18")
    p.add_argument("--ddp", action="store_true",
                   help="train on DistributedDataParallel (2 processes, gloo) instead of shardps")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=0, help="stop after N steps (0: every epoch)")
    p.add_argument("--batch", type=int, default=64, help="per rank (default 64)")
    p.add_argument("--lr", type=float, default=0.001,
                   help="--ddp: Adam's, cosine-annealed to 0 (shardps: the servers' --lr)")
    p.add_argument("--seed", type=int, default=1, help="the model's and the data order's")
    p.add_argument("--eval-every", type=int, default=0,
                   help="rank 0 also tests every N steps (always after each epoch and the last)")
    p.add_argument("--test", type=int, default=10000, help="test images rank 0 scores")
    p.add_argument("--target", type=float, help="report the training seconds to this test "
                   "accuracy (default: 0.91 for the ResNets, 0.88 for the ViTs)")
    p.add_argument("--curve", help="write [step, training seconds, accuracy] rows to this file")
    a = p.parse_args()
    a.target = a.target if a.target is not None else MODELS[a.model][1]
    a.mode = os.environ.get("SHARDPS_MODE", "sync")
    ddp(a) if a.ddp else shardps_worker(a)


if __name__ == "__main__":
    main()
