"""shardps: a client of a shardps parameter-server job, over libshardps.

The library is loaded with ctypes (no compiled extension). NumPy arrays are
handed to it as they are, without copies: pushes send from the array, pulls
write into it, so an array given to a non-blocking call must stay untouched
until wait() returns (the client keeps a reference until then).

Errors are raised as ShardpsError, carrying the library's code and sentence.

A client that declares nothing joins the job whose tensors another worker
declared: after connect(), tensors and shapes describe them.

    with shardps.Client(["127.0.0.1:7000"], rank=0, world=1) as c:
        c.declare_mlp([784, 256, 128, 10])
        c.connect()
        weights = [np.empty(n, np.float32) for _, n in c.tensors]
        c.pull(weights)               # the weights of the step to compute
        ...                            # gradients from them
        for i, g in enumerate(grads):
            c.push(i, g, block=False)  # starts travelling now
        c.pull(weights)                # the next step's weights; waits
"""

import ctypes
import ctypes.util
import os

import numpy as np

__all__ = ["Client", "ShardpsError", "load_library", "INIT_ZERO", "INIT_HE_UNIFORM",
           "INIT_XAVIER_UNIFORM"]

INIT_ZERO, INIT_HE_UNIFORM, INIT_XAVIER_UNIFORM = 0, 1, 2

_lib = None


class ShardpsError(Exception):
    """A libshardps call failed: code is its negative return value."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def _candidates():
    env = os.environ.get("SHARDPS_LIB")
    if env:
        yield env
        return
    # A source tree: python/shardps/ beside build/ (make) or build-san/.
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for build in ("build", "build-san"):
        yield os.path.join(root, build, "libshardps.so.1")
    found = ctypes.util.find_library("shardps")
    yield found or "libshardps.so.1"


def load_library():
    """Loads libshardps once: $SHARDPS_LIB, else the source tree's build/,
    else the system's. Returns the ctypes library."""
    global _lib
    if _lib is not None:
        return _lib
    errors = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            errors.append(f"{path}: not found")
            continue
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            errors.append(str(e))
    else:
        raise ShardpsError(-2, "cannot load libshardps (build it with make, or set "
                               "SHARDPS_LIB): " + "; ".join(errors))
    c_int, c_char_p, c_void_p = ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p
    u64p = ctypes.POINTER(ctypes.c_uint64)
    fptr = ctypes.POINTER(ctypes.c_float)
    sigs = {
        "shardps_version": (c_char_p, []),
        "shardps_strerror": (c_char_p, [c_int]),
        "shardps_last_error": (c_char_p, [c_void_p]),
        "shardps_new": (c_int, [ctypes.POINTER(c_void_p), ctypes.POINTER(c_char_p), c_int,
                                c_int, c_int]),
        "shardps_set_option": (c_int, [c_void_p, c_char_p, c_char_p]),
        "shardps_declare": (c_int, [c_void_p, c_char_p, c_int, ctypes.POINTER(ctypes.c_int64),
                                    c_int, c_int, c_int]),
        "shardps_declare_mlp": (c_int, [c_void_p, ctypes.POINTER(c_int), c_int]),
        "shardps_connect": (c_int, [c_void_p]),
        "shardps_reconnect": (c_int, [c_void_p]),
        "shardps_tensor_count": (c_int, [c_void_p]),
        "shardps_tensor_info": (c_int, [c_void_p, c_int, c_char_p, ctypes.c_size_t,
                                        ctypes.POINTER(ctypes.c_size_t)]),
        "shardps_tensor_shape": (c_int, [c_void_p, c_int, ctypes.POINTER(ctypes.c_int64), c_int]),
        "shardps_start_clock": (c_int, [c_void_p, u64p]),
        "shardps_weights_clock": (c_int, [c_void_p, u64p]),
        "shardps_push": (c_int, [c_void_p, c_int, fptr, ctypes.c_size_t]),
        "shardps_pull": (c_int, [c_void_p, ctypes.c_uint64, ctypes.POINTER(fptr), c_int]),
        "shardps_progress": (c_int, [c_void_p]),
        "shardps_wait": (c_int, [c_void_p]),
        "shardps_close": (c_int, [c_void_p]),
        "shardps_abandon": (None, [c_void_p]),
        "shardps_new_from_env": (c_int, [ctypes.POINTER(c_void_p)]),
        "shardps_report": (c_int, [c_void_p, ctypes.c_uint64, ctypes.c_double, ctypes.c_uint64]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    _lib = lib
    return lib


def _float_ptr(a):
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


class Client:
    """One worker of a job: rank of world, to the servers "host:port" in the
    job's order. Options are shardps_set_option's (include/shardps.h), given
    as keywords with _ for - (auth_token_file="...", seed=1, ...)."""

    def __init__(self, servers, rank, world, **options):
        self._lib = load_library()
        self._h = None
        addrs = (ctypes.c_char_p * len(servers))(*[s.encode() for s in servers])
        h = ctypes.c_void_p()
        self._check(self._lib.shardps_new(ctypes.byref(h), addrs, len(servers), rank, world),
                    None)
        self._start(h, options)

    @classmethod
    def from_env(cls, **options):
        """The worker of the job shardps-run (or a person, by hand) put in the
        environment: SHARDPS_SERVERS, SHARDPS_RANK, SHARDPS_WORKERS, each option
        as SHARDPS_<NAME>, SHARDPS_REPORT_FD (shardps_new_from_env). Keyword
        options are set after, and win."""
        self = cls.__new__(cls)
        self._lib = load_library()
        self._h = None
        h = ctypes.c_void_p()
        self._check(self._lib.shardps_new_from_env(ctypes.byref(h)), None)
        self._start(h, options)
        return self

    def _start(self, h, options):
        self._h = h
        self._borrowed = []  # arrays in flight until wait()
        self._clock = None   # the step to pull next
        for name, value in options.items():
            self.set_option(name.replace("_", "-"), value)

    def _check(self, rc, h="self"):
        if rc < 0:
            handle = self._h if h == "self" else None
            msg = self._lib.shardps_last_error(handle).decode(errors="replace")
            if not msg:
                msg = self._lib.shardps_strerror(rc).decode()
            raise ShardpsError(rc, msg)
        return rc

    def _handle(self):
        if self._h is None:
            raise ShardpsError(-22, "the client is closed")
        return self._h

    def set_option(self, name, value):
        if isinstance(value, bool):
            value = int(value)
        self._check(self._lib.shardps_set_option(self._handle(), name.encode(),
                                                 str(value).encode()))

    def declare(self, name, shape, init, fan_in, fan_out):
        """Declares the next tensor of the table (shardps_declare)."""
        dims = (ctypes.c_int64 * len(shape))(*shape)
        self._check(self._lib.shardps_declare(self._handle(), name.encode(), len(shape), dims,
                                              init, fan_in, fan_out))

    def declare_mlp(self, sizes):
        arr = (ctypes.c_int * len(sizes))(*sizes)
        self._check(self._lib.shardps_declare_mlp(self._handle(), arr, len(sizes)))

    def connect(self):
        """Joins the job; the first pull() asks for the clock it welcomed us at.
        With nothing declared, it adopts the tensors the servers hold (waiting
        within connect_timeout for a worker to declare them): see tensors and
        shapes."""
        self._check(self._lib.shardps_connect(self._handle()))
        self._clock = self.start_clock

    def reconnect(self):
        self._check(self._lib.shardps_reconnect(self._handle()))
        self._borrowed = []
        self._clock = self.start_clock

    @property
    def tensors(self):
        """[(name, numel)] in the table's order."""
        n = self._check(self._lib.shardps_tensor_count(self._handle()))
        out = []
        for i in range(n):
            name = ctypes.create_string_buffer(64)
            numel = ctypes.c_size_t()
            self._check(self._lib.shardps_tensor_info(self._h, i, name, 64, ctypes.byref(numel)))
            out.append((name.value.decode(), numel.value))
        return out

    @property
    def shapes(self):
        """[shape tuple] in the table's order."""
        n = self._check(self._lib.shardps_tensor_count(self._handle()))
        out = []
        for i in range(n):
            dims = (ctypes.c_int64 * 4)()
            ndim = self._check(self._lib.shardps_tensor_shape(self._h, i, dims, 4))
            out.append(tuple(dims[:ndim]))
        return out

    def _clock_of(self, fn):
        v = ctypes.c_uint64()
        self._check(fn(self._handle(), ctypes.byref(v)))
        return v.value

    @property
    def start_clock(self):
        return self._clock_of(self._lib.shardps_start_clock)

    @property
    def weights_clock(self):
        """The clock of the weights of the last pull."""
        return self._clock_of(self._lib.shardps_weights_clock)

    @staticmethod
    def _as_buffer(a, writable):
        if not isinstance(a, np.ndarray) or a.dtype != np.float32 or not a.flags.c_contiguous:
            raise TypeError("shardps moves C-contiguous float32 NumPy arrays (no copies are "
                            "made); got " + (f"{a.dtype} {'C' if a.flags.c_contiguous else 'non-C'}"
                                             "-contiguous array" if isinstance(a, np.ndarray)
                                             else type(a).__name__))
        if writable and not a.flags.writeable:
            raise TypeError("a pull needs writable arrays")
        return a

    def push(self, tensor, grad, block=True):
        """Pushes tensor's gradient (float32, its numel elements), computed on
        the weights of the last pull. block=False: returns at once; the array
        is borrowed until wait()."""
        g = self._as_buffer(grad, False)
        # Borrowed even if the call fails: a push that failed half-way may
        # have queued some of its chunks.
        self._borrowed.append(g)
        self._check(self._lib.shardps_push(self._handle(), tensor, _float_ptr(g), g.size))
        if block:
            self.wait()

    def pull(self, dest, clock=None, block=True):
        """Pulls every tensor into dest (a list of float32 arrays, one per
        tensor). clock: the step whose weights to pull; None: the next one
        (the welcome clock first, then one past the weights last pulled).
        block=False: the arrays are borrowed until wait()."""
        if self._clock is None:
            raise ShardpsError(-22, "pull: not connected (connect() first)")
        arrs = [self._as_buffer(a, True) for a in dest]
        ptrs = (ctypes.POINTER(ctypes.c_float) * len(arrs))(*[_float_ptr(a) for a in arrs])
        step = self._clock if clock is None else clock
        self._borrowed.extend(arrs)
        self._borrowed.append(ptrs)
        self._check(self._lib.shardps_pull(self._handle(), step, ptrs, len(arrs)))
        self._pulling = True
        if block:
            self.wait()

    def report(self, step, loss, samples):
        """Tells the launcher how training goes: step steps of the job done,
        loss the latest one's training loss (nan: not known), samples trained
        since the last call (NumPy or PyTorch scalars too); a progress line
        every progress_every steps (shardps_report)."""
        self._check(self._lib.shardps_report(self._handle(), int(step), float(loss), int(samples)))

    def progress(self):
        """Moves what can move without blocking and sends the heartbeats the
        servers asked for: call it now and then in a long computation or
        test, or the servers count the silence as a worker gone."""
        self._check(self._lib.shardps_progress(self._handle()))

    def wait(self):
        """Completes every push and pull started (each has a deadline)."""
        # After a failure the arrays stay borrowed: the requests may still
        # be queued, and closing the client flushes them.
        self._check(self._lib.shardps_wait(self._handle()))
        self._borrowed = []
        if getattr(self, "_pulling", False):
            self._pulling = False
            # In sync mode a worker that fell behind gets newer weights than
            # it asked for; it continues from them.
            self._clock = max(self._clock, self.weights_clock) + 1

    def close(self):
        """Leaves the job (barriers stop counting this worker) and frees the
        client."""
        if self._h is not None:
            self._lib.shardps_close(self._h)
            self._h = None

    def abandon(self):
        """Frees the client without a goodbye: the servers keep its place."""
        if self._h is not None:
            self._lib.shardps_abandon(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abandon()

    def __del__(self):
        if getattr(self, "_h", None) is not None and getattr(self, "_lib", None) is not None:
            self.abandon()
