#!/usr/bin/python3
"""The baseline for examples/torch_fmnist.py: the same model, data, batch,
Adam and cosine schedule, trained by 2 processes with PyTorch's own
DistributedDataParallel (gloo) instead of shardps. Ends with the same JSON
line (test_accuracy, wall_seconds, samples_per_second, mode "ddp").

    python3 examples/torch_ddp_fmnist.py [--model cnn|mlp] [--epochs E] [--steps N]
"""
import argparse
import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_fmnist import CNN, MLP, load  # noqa: E402


def train(rank, a, init_file, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=a.workers)
    x, y = load("train")
    torch.manual_seed(a.seed)  # the same initial weights on both ranks
    model = torch.nn.parallel.DistributedDataParallel(CNN() if a.model == "cnn" else MLP())
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=a.steps)
    g = torch.Generator().manual_seed(a.seed)
    step = 0
    while step < a.steps:
        order = torch.randperm(len(x), generator=g)[rank::a.workers]
        for i in range(0, len(order) - a.batch + 1, a.batch):
            idx = order[i:i + a.batch]
            opt.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
            sched.step()
            step += 1
            if step == a.steps:
                break
    if rank == 0:
        tx, ty = load("t10k")
        model.eval()
        with torch.no_grad():
            out["test_accuracy"] = (model(tx).argmax(1) == ty).float().mean().item()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    a.workers = 2
    a.steps = a.steps or a.epochs * (60000 // (a.batch * a.workers))
    t0 = time.time()
    with tempfile.TemporaryDirectory() as d, mp.Manager() as m:
        out = m.dict()
        mp.spawn(train, args=(a, os.path.join(d, "init"), out), nprocs=a.workers)
        acc = out["test_accuracy"]
    wall = time.time() - t0
    print(json.dumps({"test_accuracy": round(acc, 4), "wall_seconds": round(wall, 2),
                      "samples_per_second": round(a.steps * a.batch * a.workers / wall, 1),
                      "mode": "ddp", "steps": a.steps}, separators=(",", ":")))


if __name__ == "__main__":
    main()
