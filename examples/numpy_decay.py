#!/usr/bin/python3
"""The C example examples/c/decay.c in NumPy: one worker of a shardps job
pulls the MLP 784-32-16-10's weights, pushes 0.01 * w as each gradient for
--steps steps, and writes the last weights it pulled to --out (the layout of
shardps-worker --dump-weights). Any servers do; a shardps-worker --hidden
32,16 may share the job.

    python3 examples/numpy_decay.py [--servers HOST:PORT[,...]] [--rank R] [--workers W] \\
        [--steps N] --out FILE

The options are the programs' (each also from SHARDPS_SERVERS, SHARDPS_RANK,
SHARDPS_WORKERS, SHARDPS_STEPS), with their defaults: 127.0.0.1:7000, rank 0
of 1; 10 steps. It imports the installed shardps (make
install); from a build tree, PYTHONPATH=python SHARDPS_LIB=build.
"""
import argparse
import os

import numpy as np

import shardps


def main() -> None:
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--servers", default=env("SHARDPS_SERVERS", "127.0.0.1:7000"),
                   help="the job's servers, HOST:PORT,HOST:PORT in index order")
    p.add_argument("--rank", type=int, default=int(env("SHARDPS_RANK", "0")))
    p.add_argument("--workers", type=int, default=int(env("SHARDPS_WORKERS", "1")))
    p.add_argument("--steps", type=int, default=int(env("SHARDPS_STEPS", "10")))
    p.add_argument("--out", required=True, help="where to write the last weights pulled")
    a = p.parse_args()
    with shardps.Client(a.servers, a.rank, a.workers) as c:
        c.declare_mlp([784, 32, 16, 10])
        c.connect()
        w = [np.empty(n, np.float32) for _, n in c.tensors]
        c.pull(w)
        for _ in range(a.steps):
            for i in reversed(range(len(w))):      # last layer first, as backward would
                c.push(i, np.float32(0.01) * w[i], block=False)
            c.pull(w)                              # waits for the pushes too
        with open(a.out, "wb") as f:
            for x in w:
                f.write(x.tobytes())


if __name__ == "__main__":
    main()
