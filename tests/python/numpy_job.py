"""The NumPy client against real servers (tests/integration/python_numpy.sh).

  alone ADDR HIDDEN LR     one worker (4096-byte chunks), plain SGD: every pulled weight after a
                           push is w - lr * g, bit for bit, and errors are raised
                           with the library's sentence
  share ADDRS HIDDEN STEPS OUT
                           rank 1 of 2 beside a shardps-worker: pushes
                           0.01 * w each step, then writes the last weights it
                           pulled to OUT (the C worker's --dump-weights layout);
                           every tensor must have changed
  join ADDRS HIDDEN STEPS OUT
                           share, but declaring nothing: the client joins the
                           C worker's tensors, whose names and shapes it must
                           report as the MLP's
  arrays ADDR              one worker (plain SGD, lr 0.1) of a table w [2, 3],
                           b [6]: every array of the wrong size, dtype,
                           layout or count is refused naming its tensor before
                           anything is written (a short view of a longer array
                           keeps the rest of it), and a push with copy=True
                           sends the gradient as it was when push() returned
"""
import sys

import numpy as np

import shardps
from expect import raises


def sizes_of(hidden):
    return [784] + [int(h) for h in hidden.split(",")] + [10]


def expect_error(fn, code, words):
    try:
        fn()
    except shardps.ShardpsError as e:
        assert e.code == code, f"code {e.code}, expected {code}: {e}"
        assert words in str(e), f"'{words}' not in '{e}'"
        return
    raise AssertionError(f"no error raised (expected '{words}')")


def alone(addr, hidden, lr):
    # Nobody has declared the tensors yet: a joiner gives up, saying so.
    c = shardps.Client([addr], rank=0, world=1, connect_timeout=0.3, chunk_bytes=4096)
    expect_error(c.connect, -10009, "no worker has declared the job's tensors")
    c.abandon()
    # The server as one "HOST:PORT" string, as the programs' --servers takes it.
    c = shardps.Client(addr, rank=0, world=1, connect_timeout=10, chunk_bytes=4096)
    assert c.servers == (addr,), c.servers
    expect_error(lambda: c.push(0, np.zeros(1, np.float32)), -22, "not connected")
    c.declare_mlp(sizes_of(hidden))
    c.connect()
    w = [np.empty(n, np.float32) for _, n in c.tensors]
    c.pull(w)
    assert c.weights_clock == 0
    assert all(np.isfinite(x).all() for x in w) and np.abs(w[0]).max() > 0
    rng = np.random.default_rng(7)
    for step in range(3):
        g = [rng.standard_normal(x.size).astype(np.float32) for x in w]
        for i in reversed(range(len(g))):
            c.push(i, g[i], block=False)  # all in flight together, then the pull
        new = [np.empty_like(x) for x in w]
        c.pull(new)
        assert c.weights_clock == step + 1
        for i, (old, grad, got) in enumerate(zip(w, g, new)):
            want = old - np.float32(lr) * grad
            bad = np.flatnonzero(want.view(np.uint32) != got.view(np.uint32))
            assert bad.size == 0, (f"step {step} tensor {i}: {bad.size} weights differ, "
                                   f"first at {bad[0]}: {got[bad[0]]!r} != {want[bad[0]]!r}")
        w = new
    # Errors carry the library's sentence and leave the client usable.
    c.push(0, np.zeros(w[0].size, np.float32), block=False)
    expect_error(lambda: c.push(0, np.zeros(w[0].size, np.float32)), -16, "already pushed")
    c.close()
    # A server that is not there: the library's sentence names it.
    c = shardps.Client(["127.0.0.1:1"], rank=0, world=1, connect_timeout=0.3)
    c.declare_mlp(sizes_of(hidden))
    expect_error(c.connect, -10009, "cannot reach server 0 at 127.0.0.1:1")
    c.abandon()
    expect_error(lambda: shardps.Client(["nohost"], rank=0, world=1), -22, "'nohost'")
    # A list in one string is split at its commas, each address checked by
    # the library; anything but a str or a sequence of str is a TypeError.
    two = shardps.Client("127.0.0.1:7000,[::1]:7001", rank=0, world=1)
    assert two.servers == ("127.0.0.1:7000", "[::1]:7001"), two.servers
    two.abandon()
    expect_error(lambda: shardps.Client("127.0.0.1:7000,", rank=0, world=1), -22,
                 "server address 1 ('')")
    for bad, words in ((b"127.0.0.1:7000", "got bytes"), (7000, "got int"), (None, "got NoneType"),
                       (["127.0.0.1:7000", 7001], "got int 7001")):
        try:
            shardps.Client(bad, rank=0, world=1)
            raise AssertionError(f"servers={bad!r} accepted")
        except TypeError as e:
            assert str(e).startswith("servers: ") and words in str(e), e
    expect_error(lambda: shardps.Client([addr], rank=2, world=2), -22, "rank 2")
    expect_error(lambda: shardps.Client([addr], rank=0, world=1, compress="zip"), -22,
                 "option compress")
    print("PASS alone")


def share(addrs, hidden, steps, out, join=False):
    c = shardps.Client(addrs, rank=1, world=2, connect_timeout=30,
                       chunk_bytes=65536, total_steps=steps)
    sizes = sizes_of(hidden)
    if not join:
        c.declare_mlp(sizes)
    c.connect()
    shapes = []
    for i in range(1, len(sizes)):
        shapes += [(sizes[i], sizes[i - 1]), (sizes[i],)]
    names = [f"fc{i}.{kind}" for i in range(1, len(sizes)) for kind in ("weight", "bias")]
    assert c.shapes == shapes, c.shapes
    assert c.tensors == [(n, int(np.prod(s))) for n, s in zip(names, shapes)], c.tensors
    w = [np.empty(n, np.float32) for _, n in c.tensors]
    c.pull(w)
    first = [x.copy() for x in w]
    for _ in range(steps):
        for i in reversed(range(len(w))):
            c.push(i, np.float32(0.01) * w[i], block=False)
        c.pull(w)
    assert c.weights_clock == steps, c.weights_clock
    assert all((a != b).any() for a, b in zip(first, w)), "the pulls never changed a tensor"
    with open(out, "wb") as f:
        for x in w:
            f.write(x.tobytes())
    c.close()
    print("PASS join" if join else "PASS share")


def arrays(addr):
    c = shardps.Client(addr, rank=0, world=1, connect_timeout=10)
    c.declare("w", [2, 3], shardps.INIT_HE_UNIFORM, 3, 2)
    c.declare("b", [6], shardps.INIT_ZERO, 3, 2)
    c.connect()
    w, b = np.empty(6, np.float32), np.empty(6, np.float32)
    # The case: a view of 2 values of a 10-value array, for a
    # 6-value tensor. The library would write 6 floats from its start.
    big = np.full(10, -7, np.float32)
    raises(ValueError, lambda: c.pull([w, big[:2]]),
           "pull: the array of b (tensor 1) holds 2 float32 values; b has 6")
    assert (big == -7).all(), big
    bad = [([w, big], ValueError, "the array of b (tensor 1) holds 10 float32 values"),
           ([w, np.empty(6, np.float64)], TypeError, "the array of b (tensor 1) is float64"),
           ([w, np.empty(12, np.float32)[::2]], ValueError,
            "the array of b (tensor 1) is not C-contiguous"),
           ([w, [0.0] * 6], TypeError, "the array of b (tensor 1) is a list"),
           ([w], ValueError, "the table has 2 tensors (w, b); got 1 arrays"),
           ([w, b, b], ValueError, "the table has 2 tensors (w, b); got 3 arrays")]
    for dest, exc, words in bad:
        raises(exc, lambda: c.pull(dest), words)
    ro = np.empty(6, np.float32)
    ro.flags.writeable = False
    raises(ValueError, lambda: c.pull([ro, b]), "the array of w (tensor 0) is read-only")
    c.pull([w, b])
    assert (b == 0).all() and (w != 0).all(), (w, b)
    for g, exc, words in ((big[:2], ValueError, "push: the array of b (tensor 1) holds 2"),
                          (big, ValueError, "push: the array of b (tensor 1) holds 10"),
                          (np.ones(6, np.float64), TypeError, "b (tensor 1) is float64"),
                          (np.ones(12, np.float32)[::2], ValueError, "b (tensor 1) is not C-")):
        raises(exc, lambda: c.push(1, g), words)
    raises(ValueError, lambda: c.push(2, b), "push: no tensor 2 (the table has 2)")
    # copy=True: the array is the caller's again when push() returns; what
    # travels is its value then (plain SGD, lr 0.1: w - 0.1 g bit for bit).
    gw, gb = np.arange(6, dtype=np.float32), np.full(6, 2, np.float32)
    want = [w - np.float32(0.1) * gw, b - np.float32(0.1) * gb]
    c.push(0, gw, block=False, copy=True)
    c.push(1, gb, block=False, copy=True)
    gw[:] = np.nan
    del gb
    c.pull([w, b])
    for got, exp in zip((w, b), want):
        assert (got.view(np.uint32) == exp.view(np.uint32)).all(), (got, exp)
    c.close()
    print("PASS arrays")


if __name__ == "__main__":
    if sys.argv[1] == "arrays":
        arrays(sys.argv[2])
    elif sys.argv[1] == "alone":
        alone(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    else:
        share(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[1] == "join")
