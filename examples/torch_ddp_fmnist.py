#!/usr/bin/python3
"""The baseline for examples/torch_fmnist.py: the same model, data, batch,
initialisation scheme, Adam and cosine schedule, trained by 2 processes with
PyTorch's own DistributedDataParallel (gloo) instead of shardps, timed and
tested the same way (torch_fmnist's Clock). Ends with the same JSON line,
mode "ddp".

    python3 examples/torch_ddp_fmnist.py [--model cnn|mlp] [--epochs E] [--steps N]
"""
import argparse
import math
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_fmnist import CNN, MLP, Clock, batches, load, parse, report  # noqa: E402
import shardps.torch  # noqa: E402  (found through torch_fmnist's path)


def init_like_shardps(model):
    """Draws the weights from the distributions the shardps servers use
    (shardps.torch.default_init), so that both examples start alike."""
    kinds = shardps.torch.default_init(model.named_parameters())
    with torch.no_grad():
        for name, p in model.named_parameters():
            kind, fan_in, fan_out = kinds[name]
            if kind == shardps.INIT_ZERO:
                p.zero_()
            else:
                fan = fan_in if kind == shardps.INIT_HE_UNIFORM else fan_in + fan_out
                p.uniform_(-math.sqrt(6 / fan), math.sqrt(6 / fan))
    return model


def train(rank, a, init_file, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=a.workers)
    x, y = load("train")
    torch.manual_seed(a.seed)  # DDP also broadcasts rank 0's weights
    model = torch.nn.parallel.DistributedDataParallel(
        init_like_shardps(CNN() if a.model == "cnn" else MLP()))
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=a.steps)
    clock = Clock(a, rank)
    for step, idx in enumerate(batches(len(x), a, rank), 1):
        opt.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
        sched.step()
        clock.tick(model.module, step)
    out.update(clock.result())
    dist.destroy_process_group()


def main():
    a = parse(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))
    t0 = time.time()
    with tempfile.TemporaryDirectory() as d, mp.Manager() as m:
        out = m.dict()
        mp.spawn(train, args=(a, os.path.join(d, "init"), out), nprocs=a.workers)
        r = dict(out)
    report(a, r, time.time() - t0, "ddp")


if __name__ == "__main__":
    main()
