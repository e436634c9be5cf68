"""A worker program under shardps-run (tests/integration/run.sh), on NumPy
and the shardps package: least squares of y = 3x + 1, each rank on points
of its own, rank 0 declaring w = (slope, intercept), the others joining.

  run_worker.py MODE SERVERS WORKERS [TOKEN_FILE]

First it checks the environment the launcher (or the test, by hand) gave it
against what the test asked for: SERVERS servers on 127.0.0.1,
SHARDPS_WORKERS = WORLD_SIZE = LOCAL_WORLD_SIZE = WORKERS, SHARDPS_RANK =
RANK = LOCAL_RANK, the auth token only as its file's path (TOKEN_FILE, or
"-" for none), and under a launcher (SHARDPS_REPORT_FD set) the report pipe
at fd 3, the job's --chunk-bytes and --steps as SHARDPS_CHUNK_BYTES and
SHARDPS_STEPS, OMP_NUM_THREADS from --threads, no stray SHARDPS_ variable
of the launcher's own environment (SHARDPS_STRAY). Then, by MODE:

  train    SHARDPS_STEPS steps, each reported (Client.report), then close;
           prints "rank R: loss L" (the loss of its points at the end)
  fail     train, but rank 1 raises at step 3
  early    train, but rank 1 exits 0 at step 3 without closing the client
  short    train, but rank 1 closes the client and exits 0 at step 3
  forever  trains until a signal ends the process
"""
import os
import stat
import sys

import numpy as np

import shardps


def check_env(servers, workers, token_file):
    env = os.environ
    rank = int(env["SHARDPS_RANK"])
    addrs = env["SHARDPS_SERVERS"].split(",")
    assert len(addrs) == servers, f"SHARDPS_SERVERS {addrs}: not {servers} servers"
    for a in addrs:
        host, port = a.rsplit(":", 1)
        assert host == "127.0.0.1" and 0 < int(port) < 65536, f"server address {a}"
    for name in ("SHARDPS_WORKERS", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        assert env[name] == str(workers), f"{name}={env.get(name)}, expected {workers}"
    for name in ("RANK", "LOCAL_RANK"):
        assert env[name] == str(rank), f"{name}={env.get(name)}, SHARDPS_RANK={rank}"
    assert 0 <= rank < workers
    if token_file != "-":
        assert env["SHARDPS_AUTH_TOKEN_FILE"] == token_file, "SHARDPS_AUTH_TOKEN_FILE"
        token = open(token_file).read().strip()
        leaks = [k for k, v in env.items() if token in v]
        assert not leaks, f"the auth token itself is in the environment: {leaks}"
    if "SHARDPS_REPORT_FD" in env:
        assert env["SHARDPS_REPORT_FD"] == "3"
        mode = os.fstat(3).st_mode
        assert stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode), "fd 3 is not the launcher's pipe"
        assert env["SHARDPS_CHUNK_BYTES"] == "4096", "the job's --chunk-bytes"
        assert env["OMP_NUM_THREADS"] == "1", "OMP_NUM_THREADS from --threads 1"
        assert "SHARDPS_STRAY" not in env, "the launcher's own SHARDPS_ variables leak"
        assert env["SHARDPS_LIB"], "SHARDPS_LIB must reach the workers"
    return rank


def main():
    mode, servers, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rank = check_env(servers, workers, sys.argv[4] if len(sys.argv) > 4 else "-")
    steps = int(os.environ.get("SHARDPS_STEPS", "0")) or 20
    c = shardps.Client.from_env(total_steps=steps)
    if rank == 0:
        c.declare("w", [2], shardps.INIT_ZERO, 1, 1)
    c.connect()
    rng = np.random.default_rng(rank)
    x = rng.uniform(-1, 1, 64).astype(np.float32)
    y = 3 * x + 1
    w = np.zeros(2, np.float32)
    c.pull([w])
    step = c.start_clock
    while mode == "forever" or step < steps:
        err = w[0] * x + w[1] - y
        g = np.array([np.mean(err * x), np.mean(err)], np.float32)
        c.push(0, g, block=False)
        step += 1
        c.report(step, float(np.mean(err * err) / 2), x.size)
        if rank == 1 and step == 3 and mode == "fail":
            raise RuntimeError("rank 1 fails on purpose at step 3")
        if rank == 1 and step == 3 and mode == "early":
            os._exit(0)
        if rank == 1 and step == 3 and mode == "short":
            break
        c.pull([w])
    err = w[0] * x + w[1] - y
    print(f"rank {rank}: loss {float(np.mean(err * err) / 2):.6f}", flush=True)
    c.close()


if __name__ == "__main__":
    main()
