#!/usr/bin/python3
"""Fashion-MNIST with PyTorch workers on shardps (after `make`):

    python3 examples/torch_fmnist.py --mode sync|async [--epochs E] [--steps N]

starts 2 shardps-servers and 2 PyTorch workers on 127.0.0.1 from a build
folder (--build, default build/ beside examples/: its programs, its
libshardps and this tree's python/shardps, unless SHARDPS_LIB names
another library), trains, and ends
with one JSON line: test_accuracy, seconds_to_target (training seconds until
rank 0's test every --eval-every steps first reached --target; null if never),
train_seconds (evaluations excluded), wall_seconds (everything),
samples_per_second (over train_seconds), mode. torch_ddp_fmnist.py is the
same run on PyTorch's DistributedDataParallel.
The training loop (train() below) is an ordinary PyTorch loop plus one line,
shardps.torch.attach; the servers run Adam and the consistency mode.

--model cnn (the default) is models/cnn.model's network: two 3x3 convolutions
with 2x2 max pooling, dense 128, dropout, dense 10; --model mlp is the C
worker's default MLP 784-256-128-10. The servers adopt the tensor table the
first worker declares (shardps.torch.attach: one tensor per parameter) and
draw its initial values (init="server": the distributions the DDP baseline
draws from too; attach's default would start from rank 0's model).
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import shardps.torch  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"


def load(kind):
    with gzip.open(f"{DATA}/{kind}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
    with gzip.open(f"{DATA}/{kind}-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    return torch.from_numpy(x.astype(np.float32) / 255.0), torch.from_numpy(y.astype(np.int64))


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, padding=1)
        self.fc1, self.fc2 = torch.nn.Linear(64 * 7 * 7, 128), torch.nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x.view(-1, 1, 28, 28))), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.dropout(F.relu(self.fc1(x.flatten(1))), 0.25, self.training))


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = (torch.nn.Linear(784, 256), torch.nn.Linear(256, 128),
                                        torch.nn.Linear(128, 10))

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def batches(n, a, rank):
    """This rank's a.steps batches: a fresh shuffle of the n samples each
    epoch (the same on every rank), of which each rank takes its share
    (shardps.torch.sampler: PyTorch's DistributedSampler for this rank; the
    DDP baseline deals its batches with the same)."""
    share = shardps.torch.sampler(range(n), rank, a.workers, seed=a.seed, drop_last=True)
    step, epoch = 0, 0
    while True:
        share.set_epoch(epoch)
        order = torch.tensor(list(share))
        for i in range(0, len(order) - a.batch + 1, a.batch):
            yield order[i:i + a.batch]
            step += 1
            if step == a.steps:
                return
        epoch += 1


class Clock:
    """Rank 0's training clock and test accuracy: tests every a.eval_every
    steps and after the last, with the time spent testing taken off the
    clock. settle() brings the model's weights up to the steps so far. Other
    ranks only train."""

    def __init__(self, a, rank, settle=lambda: None):
        self.a, self.settle = a, settle
        self.test = load("t10k") if rank == 0 else None
        self.curve = []  # [step, training seconds, test accuracy]
        self.paused = 0.0
        self.t0 = time.perf_counter()

    def tick(self, model, step):
        every = self.a.eval_every
        if self.test is None or (step != self.a.steps and not (every and step % every == 0)):
            return
        self.settle()
        t = time.perf_counter()
        tx, ty = self.test
        model.eval()
        with torch.no_grad():  # in slices: all 10,000 at once would take gigabytes
            right = sum((model(tx[i:i + 1000]).argmax(1) == ty[i:i + 1000]).sum().item()
                        for i in range(0, len(tx), 1000))
        model.train()
        self.curve.append([step, round(t - self.t0 - self.paused, 2), right / len(tx)])
        self.paused += time.perf_counter() - t

    def result(self):
        """What rank 0 reports; {} elsewhere."""
        if self.test is None:
            return {}
        hit = [s for _, s, acc in self.curve if acc >= self.a.target]
        return {"test_accuracy": self.curve[-1][2], "train_seconds": self.curve[-1][1],
                "seconds_to_target": hit[0] if hit else None, "curve": self.curve}


def train(a):
    torch.set_num_threads(1)
    x, y = load("train")
    model = CNN() if a.model == "cnn" else MLP()
    ps = shardps.torch.attach(model, a.servers, a.rank, a.workers, init="server",
                              total_steps=a.steps)                    # the one line
    clock = Clock(a, a.rank, settle=ps.sync)  # measuring only, as the DDP baseline does
    for step, idx in enumerate(batches(len(x), a, a.rank), 1):
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        clock.tick(model, step)
    ps.close()  # the job ends when every worker has left
    print(json.dumps(clock.result()), flush=True)


def start_server(a, build, index, n):
    r, w = os.pipe()
    p = subprocess.Popen([f"{build}/shardps-server", "--listen", "127.0.0.1:0",
                          "--server-index", str(index), "--num-servers", str(n), "--workers",
                          str(a.workers), "--mode", a.mode, "--lr", str(a.lr),
                          "--total-steps", str(a.steps),  # the cosine schedule's span
                          "--ready-fd", str(w)], pass_fds=(w,))
    os.close(w)
    with os.fdopen(r) as f:
        port = f.readline().strip()
    if not port:
        raise SystemExit(f"shardps-server {index} did not start")
    return p, f"127.0.0.1:{port}"


def launch(a):
    build = a.build or os.path.join(HERE, "..", "build")
    # The workers' library is the one built with these servers.
    os.environ.setdefault("SHARDPS_LIB", build)
    t0 = time.time()
    servers = [start_server(a, build, i, 2) for i in range(2)]
    addrs = ",".join(addr for _, addr in servers)
    workers = [subprocess.Popen([sys.executable, __file__, "--worker", "--rank", str(r),
                                 "--servers", addrs, "--workers", str(a.workers),
                                 "--steps", str(a.steps), "--batch", str(a.batch), "--seed",
                                 str(a.seed), "--model", a.model, "--eval-every",
                                 str(a.eval_every), "--target", str(a.target)],
                                stdout=subprocess.PIPE, text=True) for r in range(a.workers)]
    outs = [w.communicate()[0] for w in workers]
    failed = [r for r, w in enumerate(workers) if w.returncode != 0]
    for p, _ in servers:
        if failed:
            p.kill()
        try:
            p.wait(timeout=60)  # a server exits once every worker has left
        except subprocess.TimeoutExpired:
            p.kill()
            failed.append("(a server did not exit)")
    if failed:
        raise SystemExit(f"worker(s) {failed} failed")
    report(a, json.loads(outs[0].strip().splitlines()[-1]), time.time() - t0, a.mode)


def report(a, r, wall, mode):
    """The final JSON line from rank 0's Clock.result(); the curve to a.curve."""
    if a.curve:
        with open(a.curve, "w") as f:
            json.dump(r["curve"], f)
    print(json.dumps({"test_accuracy": round(r["test_accuracy"], 4),
                      "seconds_to_target": r["seconds_to_target"], "target": a.target,
                      "train_seconds": r["train_seconds"], "wall_seconds": round(wall, 2),
                      "samples_per_second": round(a.steps * a.batch * a.workers /
                                                  r["train_seconds"], 1),
                      "mode": mode, "steps": a.steps}, separators=(",", ":")))


def parse(p, argv=None):
    """The training options both examples share, parsed; a.steps planned."""
    p.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--steps", type=int, default=0, help="stop after N steps (0: every epoch)")
    p.add_argument("--batch", type=int, default=64, help="samples per step per worker")
    p.add_argument("--lr", type=float, default=0.001, help="Adam's, cosine-annealed to 0")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--eval-every", type=int, default=100,
                   help="rank 0 tests every N steps (0: after the last only), off the clock")
    p.add_argument("--target", type=float, default=0.88,
                   help="report the training seconds to this test accuracy")
    p.add_argument("--curve", help="write [step, training seconds, accuracy] rows to this file")
    p.add_argument("--workers", type=int, default=2, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.steps = a.steps or a.epochs * (60000 // (a.batch * a.workers))
    return a


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=["sync", "async", "ssp"], default="sync")
    p.add_argument("--build", help="the build folder (default: build/ beside examples/)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--servers", help=argparse.SUPPRESS)
    a = parse(p)
    train(a) if a.worker else launch(a)


if __name__ == "__main__":
    main()
