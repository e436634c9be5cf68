"""Embedding rows from Python (tests/integration/python_rows.sh).

  worker ADDRS RANK WORLD STEPS   one rank of a sync job on the servers ADDRS,
                                  declaring an MLP and two row tables: "users"
                                  (dim 8, zeros) and "items" (dim 3,
                                  uniform): bad arguments raise naming the
                                  table; every step it pulls the rows of its
                                  int64 IDs (negative ones, reinterpreted as
                                  uint64, and repeats among them), pushes
                                  gradients computed from them, and checks
                                  the rows it pulls against a NumPy reference
                                  of the whole job (every rank's pushes, each
                                  rank's repeats summed in call order, the
                                  ranks' sums added, divided by the world,
                                  SGD) bit for bit; "items" gets an empty push
                                  every other step and keeps its initial rows.
"""
import sys

import numpy as np

import shardps
from expect import raises

LR = np.float32(0.1)


def batch(step, rank):
    """A rank's IDs at a step: int64, negative ones and repeats among them."""
    base = np.array([-1, 5, -(2**63), 5, 42, 2**62 + step, 7, -1], np.int64)
    return np.roll(base, step + 3 * rank)[:6].copy()


def grads_of(rows, step, rank):
    """Each sample's gradient, from the row it pulled."""
    n = rows.shape[0]
    k = np.arange(rows.shape[1], dtype=np.float32)
    s = (np.arange(n, dtype=np.float32) + np.float32(step + 1 + rank))[:, None]
    return (rows * np.float32(0.5) + s * np.float32(0.125) - k * np.float32(0.01)).astype(
        np.float32)


def ref_step(ref, step, world, dim):
    """The job's step on the reference rows (uint64 ID -> float32 row)."""
    rank_sums = []
    for r in range(world):
        ids = batch(step, r).view(np.uint64)
        rows = np.stack([ref.get(int(i), np.zeros(dim, np.float32)) for i in ids])
        g = grads_of(rows, step, r)
        sums = {}
        for i, gi in zip(ids, g):  # the client: repeats summed in call order from 0
            sums[int(i)] = sums.get(int(i), np.zeros(dim, np.float32)) + gi
        rank_sums.append(sums)
    total = {}
    for sums in rank_sums:  # the server: the ranks' sums added (two: any order)
        for i, s in sums.items():
            total[i] = total.get(i, np.zeros(dim, np.float32)) + s
    for i, s in total.items():
        w = ref.get(i, np.zeros(dim, np.float32))
        ref[i] = (w - LR * (s * np.float32(1.0 / world))).astype(np.float32)


def worker(addrs, rank, world, steps):
    c = shardps.Client(addrs, rank=rank, world=world, chunk_bytes=4096, seed=7,
                       connect_timeout=30)
    c.declare_mlp([8, 4, 2])
    assert c.declare_rows("users", 8) == 0
    assert c.declare_rows("items", 3, init="uniform", lo=-0.1, hi=0.1) == 1
    raises(shardps.ShardpsError, lambda: c.declare_rows("users", 4), "declared twice")
    raises(shardps.ShardpsError, lambda: c.declare_rows("x", 0), "row table x: dim 0")
    raises(ValueError, lambda: c.declare_rows("x", 4, init="gauss"), "init 'gauss'")
    c.connect()
    assert c.row_table("users") == (0, 8) and c.row_table("items") == (1, 3)
    ids = batch(0, rank)
    raises(TypeError, lambda: c.pull_rows("users", ids.astype(np.float64)),
           "pull_rows (row table users): IDs are a 1-D C-contiguous int64")
    raises(TypeError, lambda: c.pull_rows("users", np.zeros(12, np.int64)[::2]), "non-C")
    raises(TypeError, lambda: c.push_rows("items", ids, np.zeros((6, 3), np.float64)),
           "push_rows (row table items): gradients are a C-contiguous float32")
    raises(ValueError, lambda: c.push_rows("items", ids, np.zeros((6, 2), np.float32)),
           "6 IDs of dim 3 take 18 gradient values; got 12")
    raises(shardps.ShardpsError, lambda: c.pull_rows("nope", ids), "no row table 'nope'")
    raises(TypeError, lambda: c.pull_rows("users", ids, out=np.empty((6, 8), np.float64)),
           "pull_rows (row table users): out is a C-contiguous, writable float32")
    raises(TypeError, lambda: c.pull_rows("users", ids, out=np.empty((6, 16), np.float32)[:, ::2]),
           "out is a C-contiguous")
    raises(ValueError, lambda: c.pull_rows("users", ids, out=np.empty((5, 8), np.float32)),
           "6 IDs of dim 8 take 48 values; out holds 40")

    weights = [np.empty(n, np.float32) for _, n in c.tensors]
    zeros = [np.zeros(n, np.float32) for _, n in c.tensors]
    ref = {}
    item_ids = np.array([3, -3, 1 << 40], np.int64)
    items0 = None
    for step in range(steps):
        c.pull(weights)
        ids = batch(step, rank)
        rows = c.pull_rows("users", ids)
        want = np.stack([ref.get(int(i), np.zeros(8, np.float32)) for i in ids.view(np.uint64)])
        assert rows.dtype == np.float32 and rows.shape == (6, 8)
        assert np.array_equal(rows.view(np.uint32), want.view(np.uint32)), \
            f"step {step}: rows differ from the reference by {np.abs(rows - want).max()}"
        items = c.pull_rows("items", item_ids, out=np.empty(9, np.float32)).reshape(3, 3)
        if items0 is None:
            items0 = items
            assert np.all(np.abs(items) <= 0.1) and np.any(items != 0)
        assert np.array_equal(items, items0), f"step {step}: untouched item rows changed"
        c.push_rows("users", ids, grads_of(rows, step, rank))
        # Sync: every table's push each step, even an empty one.
        c.push_rows("items", np.empty(0, np.int64), np.empty((0, 3), np.float32))
        for i, z in enumerate(zeros):
            c.push(i, z, block=False)
        c.wait()
        ref_step(ref, step, world, 8)
    c.pull(weights)
    final = c.pull_rows("users", np.array(list(ref), np.uint64))
    assert np.array_equal(final, np.stack(list(ref.values()))), "final rows differ"
    c.close()
    print(f"rank {rank}: {steps} steps, {len(ref)} rows equal to the reference bit for bit")


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        worker(sys.argv[2].split(","), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        raise SystemExit(f"unknown command {sys.argv[1]}")
