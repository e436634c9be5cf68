#!/usr/bin/python3
"""What shardps.torch's hooks cost (docs/torch.md): the same ResNet-18 loop
in one process, without attach (forward, backward, torch.optim.SGD's step)
and with attach against one local shardps-server (forward, backward; the
servers run SGD), and forward + backward alone, median seconds per step over --steps steps after
--warmup, one thread. With attach, the time in the gradient hooks (the
library's copy and the push) and in the forward pre-hook (waiting for the
pushes, pulling the weights into the parameters) is measured apart.

    python3 tests/bench/torch_hook_cost.py [--build build] [--steps 20] [--batch 32]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))


def model():
    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=10)


def batch(n):
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 3, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)


def timed(step, steps, warmup):
    out = []
    for i in range(warmup + steps):
        t = time.perf_counter()
        step()
        if i >= warmup:
            out.append(time.perf_counter() - t)
    return statistics.median(out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default=os.path.join(HERE, "..", "..", "build"))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=32)
    a = p.parse_args()
    os.environ.setdefault("SHARDPS_LIB", a.build)
    import shardps.torch
    torch.set_num_threads(1)
    x, y = batch(a.batch)

    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)

    def plain():
        F.cross_entropy(m(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    t_plain = timed(plain, a.steps, a.warmup)

    def compute():
        F.cross_entropy(m(x), y).backward()
        m.zero_grad(set_to_none=True)
    t_compute = timed(compute, a.steps, a.warmup)

    r, w = os.pipe()
    srv = subprocess.Popen([f"{a.build}/shardps-server", "--listen", "127.0.0.1:0", "--ready-fd",
                            str(w), "--server-index", "0", "--num-servers", "1", "--workers", "1",
                            "--optimizer", "sgd", "--momentum", "0", "--lr", "0.01",
                            "--lr-schedule", "constant"], pass_fds=(w,), stderr=subprocess.DEVNULL)
    os.close(w)
    with os.fdopen(r) as f:
        port = f.readline().strip()
    m = model()
    ps = shardps.torch.attach(m, f"127.0.0.1:{port}", 0, 1)
    spent = {"hooks": 0.0, "sync": 0.0}

    def clocked(name, fn):
        def wrapper(*args):
            t = time.perf_counter()
            try:
                return fn(*args)
            finally:
                spent[name] += time.perf_counter() - t
        return wrapper
    ps._push = clocked("hooks", ps._push)
    ps.sync = clocked("sync", ps.sync)

    def attached():
        F.cross_entropy(m(x), y).backward()
    for _ in range(a.warmup):
        attached()
    spent = {"hooks": 0.0, "sync": 0.0}
    t_attach = timed(attached, a.steps, 0)
    ps.close()
    srv.wait(timeout=60)
    n = sum(p.numel() for p in m.parameters())
    print(f"resnet18 ({n / 1e6:.1f} M parameters, {len(list(m.parameters()))} tensors), batch "
          f"{a.batch}, 1 thread: plain loop {t_plain * 1e3:.1f} ms/step, with attach "
          f"{t_attach * 1e3:.1f} ms/step ({(t_attach / t_plain - 1) * 100:+.1f}%), forward + "
          f"backward alone {t_compute * 1e3:.1f} ms; per step in "
          f"the gradient hooks (copy + push) {spent['hooks'] / a.steps * 1e3:.1f} ms, in the "
          f"forward pre-hook (wait + pull) {spent['sync'] / a.steps * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
