"""Embedding rows through a checkpoint (tests/integration/rows_checkpoint.sh).

  worker ADDRS RANK WORLD STEPS OUT CHUNK
                                      one rank of a sync job on the servers
                                      ADDRS (tensors cut into CHUNK-byte
                                      chunks): an MLP and two row tables,
                                      "users" (dim 8, uniform, Adam rows,
                                      stored at the second push of an ID,
                                      expiring after 5 steps untouched) and
                                      "items" (dim 4, zeros, Adagrad rows);
                                      trains from the clock the job welcomes
                                      it at up to STEPS, each step pulling,
                                      pushing row gradients computed from the
                                      rows it pulled, then dense ones; rank 0
                                      then writes every dense weight and the
                                      rows of every ID the job ever used to
                                      OUT (raw float32).

The IDs of a step are a function of (step, rank) alone, and every gradient
a function of what was pulled, so a run restored at any clock and trained
on to STEPS ends with the same bytes as an uninterrupted one exactly when
the restore kept every row, its optimizer state and counters (Adam's
per-row step, expiry's last step), the admission sketch and the clocks;
nothing here depends on the number of servers or the chunk size, so the
same holds for a run restored onto another plan.
"""
import sys

import numpy as np

import shardps

UNIVERSE = np.arange(64, dtype=np.int64) * np.int64(0x9E3779B97F4A7C15 >> 2)


def batch(step, rank):
    """A rank's IDs at a step: some every step, some now and then (so they
    expire and wait for admission), repeats among them."""
    k = np.arange(10)
    pick = (k * 5 + step * (k % 3 + 1) + 7 * rank) % 48
    pick[k % 4 == 3] = 48 + (step * 3 + k[k % 4 == 3] + rank) % 16
    return UNIVERSE[pick].copy()


def row_grads(rows, step, rank):
    n, dim = rows.shape
    s = (np.arange(n, dtype=np.float32)[:, None] + np.float32(step + rank)) * np.float32(0.01)
    return (rows * np.float32(0.3) - s + np.arange(dim, dtype=np.float32) * np.float32(0.02)
            ).astype(np.float32)


def worker(addrs, rank, world, steps, out, chunk):
    c = shardps.Client(addrs, rank=rank, world=world, chunk_bytes=chunk, seed=11,
                       connect_timeout=30)
    c.declare_mlp([32, 16, 4])
    c.declare_rows("users", 8, init="uniform", lo=-0.2, hi=0.2, optimizer="adam",
                   admit_after=2, expire_after=5)
    c.declare_rows("items", 4, optimizer="adagrad")
    c.connect()
    start = c.start_clock
    weights = [np.empty(n, np.float32) for _, n in c.tensors]
    for step in range(start, steps):
        c.pull(weights)
        ids = batch(step, rank)
        users = c.pull_rows("users", ids)
        items = c.pull_rows("items", ids[::2].copy())
        c.push_rows("users", ids, row_grads(users, step, rank))
        c.push_rows("items", ids[::2].copy(), row_grads(items, step, rank))
        for i, w in enumerate(weights):
            g = (w * np.float32(0.05) + np.float32(0.001 * (step + 1 + rank))).astype(np.float32)
            c.push(i, g, block=False)
        c.wait()
    c.pull(weights)
    if rank == 0:
        users = c.pull_rows("users", UNIVERSE)
        items = c.pull_rows("items", UNIVERSE)
        with open(out, "wb") as f:
            for w in weights:
                f.write(w.tobytes())
            f.write(users.tobytes())
            f.write(items.tobytes())
    c.close()
    print(f"rank {rank}: steps {start}..{steps}")


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        worker(sys.argv[2].split(","), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
               sys.argv[6], int(sys.argv[7]))
    else:
        raise SystemExit(f"unknown command {sys.argv[1]}")
