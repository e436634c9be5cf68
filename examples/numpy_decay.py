#!/usr/bin/python3
"""The C example examples/c/decay.c in NumPy: one worker of a shardps job
pulls the MLP 784-32-16-10's weights, pushes 0.01 * w as each gradient for
STEPS steps, and writes the last weights it pulled to OUT.

    python3 examples/numpy_decay.py HOST:PORT[,...] RANK WORLD STEPS OUT
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import shardps  # noqa: E402

servers, rank, world, steps, out = sys.argv[1].split(","), *map(int, sys.argv[2:5]), sys.argv[5]
with shardps.Client(servers, rank, world, chunk_bytes=65536) as c:
    c.declare_mlp([784, 32, 16, 10])
    c.connect()
    w = [np.empty(n, np.float32) for _, n in c.tensors]
    c.pull(w)
    for _ in range(steps):
        for i in reversed(range(len(w))):      # last layer first, as backward would
            c.push(i, np.float32(0.01) * w[i], block=False)
        c.pull(w)                              # waits for the pushes too
    with open(out, "wb") as f:
        for x in w:
            f.write(x.tobytes())
