"""A worker program under shardps-run (tests/integration/run_cosine.sh)
that shows the span of the servers' learning-rate schedule in its weight:
w starts at 0 and every rank pushes the gradient 1 each step, so with SGD
(no momentum) the servers' average step moves w by exactly -lr(k), and w
after SHARDPS_STEPS steps is minus the sum of the rates the servers used.

  cosine_worker.py PLAN0 PLAN1 SPAN

Rank r states PLANr steps (Client.from_env(total_steps=PLANr); 0 states
none), joins the job (rank 0 declares w), trains, and checks w against the
cosine schedule over SPAN steps from the job's --lr (SHARDPS_LR) down to 0,
printing "rank R: w W, cosine over SPAN: E". The program raises when they
differ; a ShardpsError is printed as its one line, exit 1.
"""
import math
import os
import sys

import numpy as np

import shardps


def main():
    plans, span = [int(sys.argv[1]), int(sys.argv[2])], int(sys.argv[3])
    rank, steps = int(os.environ["SHARDPS_RANK"]), int(os.environ["SHARDPS_STEPS"])
    lr = float(os.environ["SHARDPS_LR"])
    options = {"total_steps": plans[rank]} if plans[rank] else {}
    try:
        c = shardps.Client.from_env(**options)
        if rank == 0:
            c.declare("w", [1], shardps.INIT_ZERO, 1, 1)
        c.connect()
    except shardps.ShardpsError as e:
        sys.exit(f"rank {rank}: {e}")
    w = np.zeros(1, np.float32)
    c.pull([w])
    for step in range(1, steps + 1):
        c.push(0, np.ones(1, np.float32))
        c.pull([w])
        c.report(step, float("nan"), 1)
    c.close()
    # The rate of step k (from 0): lr/2 (1 + cos(pi k / span)), as float32
    # arithmetic of w -= rate leaves it within an ulp per step.
    want = -sum(lr * 0.5 * (1 + math.cos(math.pi * k / span)) for k in range(steps))
    print(f"rank {rank}: w {w[0]:.7f}, cosine over {span}: {want:.7f}", flush=True)
    if abs(w[0] - want) > 1e-5 * steps:
        raise SystemExit(f"rank {rank}: w {w[0]:.7f} is not the cosine over {span} steps "
                         f"({want:.7f}; a constant rate gives {-lr * steps:.7f})")


if __name__ == "__main__":
    main()
