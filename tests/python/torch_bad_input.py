"""shardps.torch given bad input (tests/integration/torch_bad_input.sh):
each is one clear exception, and the job goes on. Modes:

  limits                  no server: a model of 4,097 tensors, or with a
                          name of 256 bytes, raises ValueError naming the
                          limit before anything is sent; Client's
                          declare_values refuses values of another dtype,
                          not contiguous or int64 for a parameter, and
                          write_buffers before connect()
  missing ADDR            nothing listens at ADDR: attach raises
                          ShardpsError within its connect_timeout (1 s),
                          naming the server
  job ADDR LOG            a sync job of 2 (one server, logging to LOG): rank 0
                          attaches in a thread, and once the server's log
                          says it joined (its table is the job's: the first
                          declarer's), rank 1 models differing from rank 0's by
                          count, name and shape are each refused naming the
                          first difference; then rank 1's right model joins
                          (in a thread) and a second rank 1 is refused as
                          one started twice; ranks 0 and 1 train 3 steps and
                          leave with the same weights
  order ADDR LOG          a sync job of 2 whose rank 1 starts first, with a
                          model that differs from rank 0's: once the server
                          holds rank 1's table, rank 0 comes and its table
                          wins (the job's is rank 0's, whatever the order);
                          rank 1 raises naming both ranks and the first
                          difference, then rank 1 with the right model joins,
                          pulls rank 0's values bit for bit, and both train
                          3 steps to the same weights
  big ADDR                a synthetic model of 4,096 tensors named with 255
                          bytes each trains 10 steps as the only worker
"""
import sys
import threading

import torch
import torch.nn.functional as F

import shardps
import shardps.torch
from expect import raises


class Net(torch.nn.Module):
    def __init__(self, hidden: int = 8, name: str = "fc2", extra: bool = False) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(4, hidden)
        setattr(self, name, torch.nn.Linear(hidden, 2))
        self._last = name
        if extra:
            self.fc3 = torch.nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(self, self._last)(torch.relu(self.fc1(x)))


class Many(torch.nn.Module):
    """n parameters of 2 values, each named with width bytes."""

    def __init__(self, n: int, width: int) -> None:
        super().__init__()
        self.names = [f"p{i:04d}_".ljust(width, "x") for i in range(n)]
        for name in self.names:
            self.register_parameter(name, torch.nn.Parameter(torch.full((2,), 1.0)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * sum(getattr(self, n).sum() for n in self.names)


def limits() -> None:
    import numpy as np
    c = shardps.Client("127.0.0.1:1", 0, 1)
    raises(TypeError, lambda: c.declare_values("w", np.zeros(3)), "the values of w are float64")
    raises(ValueError, lambda: c.declare_values("w", np.zeros((3, 2), np.float32).T),
           "not C-contiguous")
    raises(shardps.ShardpsError, lambda: c.declare_values("n", np.zeros(3, np.int64)),
           "a parameter is float32")
    raises(shardps.ShardpsError, lambda: c.write_buffers([None]), "not connected")
    c.abandon()
    raises(ValueError, lambda: shardps.torch.attach(
        Many(4097, 8), "127.0.0.1:1", 0, 1), "4097 tensors")
    raises(ValueError, lambda: shardps.torch.attach(
        Many(1, 256), "127.0.0.1:1", 0, 1), "256 bytes")


def missing(addr: str) -> None:
    raises(shardps.ShardpsError, lambda: shardps.torch.attach(
        Net(), addr, 0, 1, connect_timeout=1), addr)


def train(model: torch.nn.Module, ps, steps: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x, y = torch.randn(4, 4, generator=g), torch.randint(0, 2, (4,), generator=g)
        F.cross_entropy(model(x), y).backward()
    ps.close()


def wait_for_line(path: str, words: str) -> None:
    """Polls the log at path until a line holds words (at most 60 s)."""
    import time
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with open(path) as f:
            if any(words in line for line in f):
                return
        time.sleep(0.05)
    raise SystemExit(f"FAIL: no '{words}' in {path}")


def job(addr: str, log: str) -> None:
    models, errors = {}, []

    def rank(r: int) -> None:
        try:
            torch.manual_seed(r)
            m = Net()
            ps = shardps.torch.attach(m, addr, r, 2, connect_timeout=60)
            ready[r].set()
            train(m, ps, 3, r)
            models[r] = m
        except BaseException as e:  # reported by the main thread
            errors.append(f"rank {r}: {e}")
            ready[r].set()

    ready = [threading.Event(), threading.Event()]
    t0 = threading.Thread(target=rank, args=(0,))
    t0.start()
    wait_for_line(log, "worker 0 (")
    # Rank 1 with models that differ from rank 0's: each refused, naming
    # the first difference.
    for model, words in ((Net(extra=True), "first extra: fc3.weight"),
                         (Net(name="head"), "head.weight from the worker, fc2.weight on this"),
                         (Net(hidden=9), "fc1.weight")):
        raises(shardps.ShardpsError,
               lambda: shardps.torch.attach(model, addr, 1, 2, connect_timeout=60), words)
    t1 = threading.Thread(target=rank, args=(1,))
    t1.start()
    ready[1].wait()
    # A second rank 1 while the first is in the job.
    raises(shardps.ShardpsError, lambda: shardps.torch.attach(
        Net(), addr, 1, 2, connect_timeout=5), "rank 1")
    t0.join()
    t1.join()
    if errors:
        raise SystemExit("FAIL: " + "; ".join(errors))
    for k, v in models[0].state_dict().items():
        if not torch.equal(v, models[1].state_dict()[k]):
            raise SystemExit(f"FAIL: the ranks' {k} differ")
    print("PASS: the refused ranks changed nothing: ranks 0 and 1 trained 3 steps, equal")


def order(addr: str, log: str) -> None:
    results: dict = {}

    def rank(r: int, model: torch.nn.Module, steps: int) -> None:
        try:
            ps = shardps.torch.attach(model, addr, r, 2, connect_timeout=60)
            results[r] = {k: v.clone() for k, v in model.state_dict().items()}
            train(model, ps, steps, r)
        except BaseException as e:  # reported by the main thread
            results[r] = e

    torch.manual_seed(1)
    first = threading.Thread(target=rank, args=(1, Net(hidden=9), 3))
    first.start()
    wait_for_line(log, "declared by worker 1")
    torch.manual_seed(0)
    m0 = Net()
    start = {k: v.clone() for k, v in m0.state_dict().items()}
    t0 = threading.Thread(target=rank, args=(0, m0, 3))
    t0.start()
    first.join()
    words = ("rank 0 declared another table than rank 1: tensor fc1.weight: 8x4 from rank 0, "
             "9x4 declared first")
    if not isinstance(results.get(1), shardps.ShardpsError) or words not in str(results[1]):
        raise SystemExit(f"FAIL: rank 1, first with another model, got {results.get(1)!r}")
    print(f"raised for rank 1: {results[1]}")
    torch.manual_seed(1)
    m1 = Net()
    rank(1, m1, 3)
    t0.join()
    for r in (0, 1):
        if isinstance(results[r], BaseException):
            raise SystemExit(f"FAIL: rank {r}: {results[r]}")
        for k, v in start.items():
            if not torch.equal(results[r][k], v):
                raise SystemExit(f"FAIL: rank {r} started from another {k} than rank 0's")
    for k, v in m0.state_dict().items():
        if not torch.equal(v, m1.state_dict()[k]):
            raise SystemExit(f"FAIL: the ranks' {k} differ")
    print("PASS: rank 0's table wins over one rank 1 declared first; both start from rank 0's "
          "values and train 3 steps to the same weights")


def big(addr: str) -> None:
    m = Many(4096, 255)
    ps = shardps.torch.attach(m, addr, 0, 1)
    for _ in range(10):
        m(torch.ones(1)).sum().backward()
    ps.close()
    w = getattr(m, m.names[-1])
    print(f"PASS: 4096 tensors of 255-byte names trained 10 steps: {w.tolist()}")
    if not torch.all(w < 1.0):
        raise SystemExit("FAIL: the weights did not move")


if __name__ == "__main__":
    torch.set_num_threads(1)
    mode, args = sys.argv[1], sys.argv[2:]
    {"limits": limits, "missing": missing, "job": job, "order": order, "big": big}[mode](*args)
