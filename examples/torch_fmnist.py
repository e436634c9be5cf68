#!/usr/bin/python3
"""Fashion-MNIST with PyTorch workers on shardps (after `make`):

    python3 examples/torch_fmnist.py --mode sync|async [--epochs E] [--steps N]

starts 2 shardps-servers and 2 PyTorch workers on 127.0.0.1, trains, and ends
with one JSON line: test_accuracy, wall_seconds, samples_per_second, mode.
The training loop (train() below) is an ordinary PyTorch loop plus one line,
shardps.torch.attach; the servers run Adam and the consistency mode.

--model cnn (the default) is models/cnn.model's network: two 3x3 convolutions
with 2x2 max pooling, dense 128, dropout, dense 10; --model mlp is the C
worker's default MLP 784-256-128-10. The servers adopt the tensor table the
first worker declares (shardps.torch.attach: one tensor per parameter).
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


def train(a):
    torch.set_num_threads(1)
    x, y = load("train")
    model = CNN() if a.model == "cnn" else MLP()
    ps = shardps.torch.attach(model, a.addrs.split(","), a.rank, a.workers,
                              total_steps=a.steps)                    # the one line
    g = torch.Generator().manual_seed(a.seed)
    step = 0
    while step < a.steps:
        order = torch.randperm(len(x), generator=g)[a.rank::a.workers]  # this worker's half
        for i in range(0, len(order) - a.batch + 1, a.batch):
            idx = order[i:i + a.batch]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            step += 1
            if step == a.steps:
                break
    ps.close()  # the final weights; the job ends when every worker has left
    result = {}
    if a.rank == 0:
        tx, ty = load("t10k")
        model.eval()
        with torch.no_grad():
            result["test_accuracy"] = (model(tx).argmax(1) == ty).float().mean().item()
    print(json.dumps(result), flush=True)


def start_server(a, build, index, n):
    r, w = os.pipe()
    p = subprocess.Popen([f"{build}/shardps-server", "--listen", "127.0.0.1:0",
                          "--server-index", str(index), "--num-servers", str(n), "--workers",
                          str(a.workers), "--mode", a.mode, "--lr",
                          str(a.lr), "--ready-fd", str(w)], pass_fds=(w,))
    os.close(w)
    with os.fdopen(r) as f:
        port = f.readline().strip()
    if not port:
        raise SystemExit(f"shardps-server {index} did not start")
    return p, f"127.0.0.1:{port}"


def launch(a):
    build = a.build or os.path.join(HERE, "..", "build")
    steps_per_epoch = 60000 // (a.batch * a.workers)
    steps = a.steps or a.epochs * steps_per_epoch
    t0 = time.time()
    servers = [start_server(a, build, i, 2) for i in range(2)]
    addrs = ",".join(addr for _, addr in servers)
    workers = [subprocess.Popen([sys.executable, __file__, "--worker", "--rank", str(r),
                                 "--addrs", addrs, "--steps", str(steps), "--batch", str(a.batch),
                                 "--workers", str(a.workers), "--seed", str(a.seed),
                                 "--model", a.model],
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
    wall = time.time() - t0
    acc = json.loads(outs[0].strip().splitlines()[-1])["test_accuracy"]
    print(json.dumps({"test_accuracy": round(acc, 4), "wall_seconds": round(wall, 2),
                      "samples_per_second": round(steps * a.batch * a.workers / wall, 1),
                      "mode": a.mode, "steps": steps}, separators=(",", ":")))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=["sync", "async", "ssp"], default="sync")
    p.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--steps", type=int, default=0, help="stop after N steps (0: every epoch)")
    p.add_argument("--batch", type=int, default=64, help="samples per step per worker")
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--build", help="the build folder (default: build/ beside examples/)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--addrs", help=argparse.SUPPRESS)
    p.add_argument("--workers", type=int, default=2, help=argparse.SUPPRESS)
    a = p.parse_args()
    train(a) if a.worker else launch(a)


if __name__ == "__main__":
    main()
