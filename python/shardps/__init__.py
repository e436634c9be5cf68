"""shardps: a client of a shardps parameter-server job, over libshardps.

The library is loaded with ctypes (no compiled extension). NumPy arrays are
handed to it as they are, without copies: pushes send from the array, pulls
write into it, so an array given to a non-blocking call must stay untouched
until wait() returns (the client keeps a reference until then); a push with
copy=True is sent from the library's own copy instead, and the array is
free again when push() returns.

Every array is checked against the job's table before the library sees it:
a NumPy ndarray (TypeError), of the tensor's dtype (float32; int64 for an
int64 buffer or frozen tensor: TypeError), C-contiguous (ValueError) and of
the tensor's element count (ValueError), each message naming the tensor; a
pull takes one array per tensor (ValueError).

A tensor declared with declare_values starts from the caller's values
(rank 0's: every rank's first pull holds them bit for bit); its kind says
whether the servers' optimizer updates it (KIND_PARAMETER), rank 0 writes
it each step (KIND_BUFFER, write_buffers) or nobody changes it
(KIND_FROZEN). The library checks
the sizes again (shardps_pull_into, shardps_push): nothing is written
outside an array.

Errors of the library are raised as ShardpsError, carrying its code and
sentence.

Which libshardps: $SHARDPS_LIB when set (a file, or a build folder holding
libshardps.so.1: how the tests and a source tree point at a build), else the
library `make install` put beside this package, else the system's
libshardps.so.1. A library whose shardps_version() is not this package's
__version__ is refused, so a stale copy is never used by mistake.

A client that declares nothing joins the job whose tensors another worker
declared: after connect(), tensors and shapes describe them.

    with shardps.Client("127.0.0.1:7000", rank=0, world=1) as c:
        c.declare_mlp([784, 256, 128, 10])
        c.connect()
        weights = [np.empty(n, np.float32) for _, n in c.tensors]
        c.pull(weights)               # the weights of the step to compute
        ...                            # gradients from them
        for i, g in enumerate(grads):
            c.push(i, g, block=False)  # starts travelling now
        c.pull(weights)                # the next step's weights; waits
"""

from __future__ import annotations

import ctypes
import operator
import os
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Dict, List, Optional, Tuple, Type, Union

import numpy as np
from numpy.typing import NDArray

__version__ = "1.6.0"

__all__ = ["Client", "ShardpsError", "Float32Array", "load_library", "library_path", "INIT_ZERO",
           "INIT_HE_UNIFORM", "INIT_XAVIER_UNIFORM", "KIND_PARAMETER", "KIND_BUFFER",
           "KIND_FROZEN", "MAX_TENSORS", "MAX_NAME_BYTES", "__version__"]

# Every constant and signature below that copies a C header is held to it by
# tests/python/test_binding_header.py (ctest py_binding_header).

#: Initial values of a declared tensor (include/shardps.h's SHARDPS_INIT_*).
INIT_ZERO, INIT_HE_UNIFORM, INIT_XAVIER_UNIFORM = 0, 1, 2
#: What a tensor is (SHARDPS_KIND_*): a parameter the servers' optimizer
#: updates, a buffer rank 0 writes each step, a frozen tensor nobody changes.
KIND_PARAMETER, KIND_BUFFER, KIND_FROZEN = 0, 1, 2
#: The dtypes a tensor's values may have (SHARDPS_DTYPE_*, in that order):
#: int64 for buffers and frozen tensors only.
_DTYPES = (np.dtype(np.float32), np.dtype(np.int64))
_KIND_NAMES = ("parameter", "buffer", "frozen")
#: A job's table at most (common/model_spec.h's PS_MAX_TENSORS and
#: PS_MAX_NAME_BYTES): tensors, bytes of a name.
MAX_TENSORS, MAX_NAME_BYTES = 4096, 255
#: A row table's initializers by name (SHARDPS_ROW_INIT_*).
_ROW_INITS = {"zeros": 0, "uniform": 1, "normal": 2}

# include/shardps.h's SHARDPS_EVERSION: a library of another version.
_EVERSION = -10002
_SONAME = "libshardps.so.1"

_lib: Optional[ctypes.CDLL] = None


class ShardpsError(Exception):
    """A libshardps call failed: code is its negative return value (a negated
    errno value or one of include/shardps.h's SHARDPS_E*), the message the
    library's sentence."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _candidates() -> List[Tuple[str, str]]:
    """(path or soname, where it comes from), in the order they are tried."""
    env = os.environ.get("SHARDPS_LIB")
    if env:
        return [(os.path.join(env, _SONAME) if os.path.isdir(env) else env, "$SHARDPS_LIB")]
    try:
        # Written by `make install` beside the installed copy of this package.
        from . import _installed  # type: ignore[attr-defined]
        return [(_installed.LIBRARY, "installed with this package")]
    except ImportError:
        # A source tree's copy: the system's library (ldconfig), never a
        # build folder nobody named.
        return [(_SONAME, "the system's")]


def load_library() -> ctypes.CDLL:
    """Loads libshardps once (see the module text for which one) and checks
    that its version is this package's. Returns the ctypes library; raises
    ShardpsError when none loads or its version differs."""
    global _lib
    if _lib is not None:
        return _lib
    errors = []
    for path, origin in _candidates():
        if os.sep in path and not os.path.exists(path):
            errors.append(f"{path} ({origin}): not found")
            continue
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            errors.append(f"{origin}: {e}")
    else:
        raise ShardpsError(-2, "cannot load libshardps (make install, or set SHARDPS_LIB to a "
                               "build folder): " + "; ".join(errors))
    _bind(lib, "shardps_version")
    version = lib.shardps_version().decode()
    if version != __version__:
        raise ShardpsError(_EVERSION, f"{lib._name} ({origin}) is libshardps {version}; this "
                                      f"shardps package ({os.path.dirname(__file__)}) is "
                                      f"{__version__}: install both from one tree (make install), "
                                      "or point SHARDPS_LIB at the matching build")
    _declare(lib)
    _lib = lib
    return lib


def library_path() -> str:
    """The path (or soname) of the libshardps this package loaded (loading
    it first)."""
    return load_library()._name


def _declare(lib: ctypes.CDLL) -> None:
    """Gives each function of include/shardps.h that this package calls its
    C signature."""
    for name in _SIGNATURES:
        _bind(lib, name)


def _bind(lib: ctypes.CDLL, name: str) -> None:
    res, args = _SIGNATURES[name]
    f = getattr(lib, name)
    f.restype, f.argtypes = res, args


def _server_list(servers: Union[str, Sequence[str]]) -> List[str]:
    """The servers as the programs take them (--servers H:P,H:P): one string,
    comma-separated, or a sequence of "HOST:PORT" strings. The library checks
    each address; anything else is a TypeError here, before a string is
    taken apart character by character."""
    if isinstance(servers, str):
        return servers.split(",")
    if isinstance(servers, Sequence) and not isinstance(servers, (bytes, bytearray)):
        bad = [s for s in servers if not isinstance(s, str)]
        if not bad:
            return list(servers)
        raise TypeError(f"servers: every address must be a str \"HOST:PORT\"; got "
                        f"{type(bad[0]).__name__} {bad[0]!r}")
    raise TypeError("servers: a str \"HOST:PORT[,HOST:PORT...]\" or a sequence of such str; "
                    f"got {type(servers).__name__}")


#: What pushes read and pulls write: C-contiguous float32 arrays.
Float32Array = NDArray[np.float32]


def _float_ptr(a: Float32Array) -> Any:
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


class _RowTable(ctypes.Structure):
    """include/shardps.h's shardps_row_table, field for field."""
    _fields_ = [("name", ctypes.c_char_p), ("dim", ctypes.c_uint32), ("init", ctypes.c_int),
                ("lo", ctypes.c_double), ("hi", ctypes.c_double), ("mean", ctypes.c_double),
                ("std", ctypes.c_double), ("optimizer", ctypes.c_char_p),
                ("admit_after", ctypes.c_uint32), ("expire_after", ctypes.c_uint32),
                ("capacity", ctypes.c_uint64)]


def _signatures() -> Dict[str, Tuple[Any, List[Any]]]:
    """{name: (restype, argtypes)}: the C signature of every function of
    include/shardps.h this package calls, the one table of them. The handle
    (shardps *) is a c_void_p; a char buffer, in or out, a c_char_p."""
    c_int, c_char_p, c_void_p = ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p
    size_t = ctypes.c_size_t
    P = ctypes.POINTER
    i64p, u64, u64p = P(ctypes.c_int64), ctypes.c_uint64, P(ctypes.c_uint64)
    fptr = P(ctypes.c_float)
    return {
        "shardps_version": (c_char_p, []),
        "shardps_strerror": (c_char_p, [c_int]),
        "shardps_new": (c_int, [P(c_void_p), P(c_char_p), c_int, c_int, c_int]),
        "shardps_set_option": (c_int, [c_void_p, c_char_p, c_char_p]),
        "shardps_declare": (c_int, [c_void_p, c_char_p, c_int, i64p, c_int, c_int, c_int]),
        "shardps_declare_values": (c_int, [c_void_p, c_char_p, c_int, i64p, c_int, c_int,
                                           c_void_p, size_t]),
        "shardps_declare_mlp": (c_int, [c_void_p, P(c_int), c_int]),
        "shardps_connect": (c_int, [c_void_p]),
        "shardps_reconnect": (c_int, [c_void_p]),
        "shardps_tensor_count": (c_int, [c_void_p]),
        "shardps_tensor_info": (c_int, [c_void_p, c_int, c_char_p, size_t, P(size_t)]),
        "shardps_tensor_shape": (c_int, [c_void_p, c_int, i64p, c_int]),
        "shardps_tensor_kind": (c_int, [c_void_p, c_int, P(c_int), P(c_int)]),
        "shardps_start_clock": (c_int, [c_void_p, u64p]),
        "shardps_weights_clock": (c_int, [c_void_p, u64p]),
        "shardps_push": (c_int, [c_void_p, c_int, fptr, size_t]),
        "shardps_push_copy": (c_int, [c_void_p, c_int, fptr, size_t]),
        "shardps_push_unused": (c_int, [c_void_p, c_int]),
        "shardps_pull_into": (c_int, [c_void_p, u64, P(fptr), P(size_t), c_int]),
        "shardps_write_buffers": (c_int, [c_void_p, P(c_void_p), P(size_t), c_int]),
        "shardps_progress": (c_int, [c_void_p]),
        "shardps_wait": (c_int, [c_void_p]),
        "shardps_last_error": (c_char_p, [c_void_p]),
        "shardps_close": (c_int, [c_void_p]),
        "shardps_abandon": (None, [c_void_p]),
        "shardps_new_from_env": (c_int, [P(c_void_p)]),
        "shardps_report": (c_int, [c_void_p, u64, ctypes.c_double, u64]),
        "shardps_declare_rows": (c_int, [c_void_p, P(_RowTable), size_t]),
        "shardps_row_table_find": (c_int, [c_void_p, c_char_p, P(ctypes.c_uint32)]),
        "shardps_pull_rows": (c_int, [c_void_p, c_int, u64, u64p, size_t, fptr, size_t]),
        "shardps_push_rows": (c_int, [c_void_p, c_int, u64p, size_t, fptr, size_t]),
    }


_SIGNATURES = _signatures()


class Client:
    """One worker of a job: rank of world, to the job's servers in index
    order, as one str "HOST:PORT,HOST:PORT" (the programs' --servers) or a
    sequence of "HOST:PORT". Options are shardps_set_option's
    (include/shardps.h), given as keywords with _ for -
    (auth_token_file="...", seed=1, chunk_bytes=65536, ...). Use it as a
    context manager, or call close() (leave the job) or abandon()."""

    def __init__(self, servers: Union[str, Sequence[str]], rank: int, world: int,
                 **options: Union[str, int, float, bool]) -> None:
        self._h: Optional[ctypes.c_void_p] = None
        addrs = _server_list(servers)
        rank, world = operator.index(rank), operator.index(world)
        self._lib = load_library()
        arr = (ctypes.c_char_p * len(addrs))(*[s.encode() for s in addrs])
        h = ctypes.c_void_p()
        self._check(self._lib.shardps_new(ctypes.byref(h), arr, len(addrs), rank, world), None)
        self._start(h, tuple(addrs), options)

    @classmethod
    def from_env(cls, **options: Union[str, int, float, bool]) -> "Client":
        """The worker of the job shardps-run (or a person, by hand) put in the
        environment: SHARDPS_SERVERS, SHARDPS_RANK, SHARDPS_WORKERS, each
        option as SHARDPS_<NAME>, SHARDPS_REPORT_FD, SHARDPS_JOB_SETTINGS
        (shardps_new_from_env). Keyword options are set after, and win:
        total_steps=N (the steps this worker plans) spans the servers'
        cosine schedule when the job does not fix it (docs/run.md)."""
        self = cls.__new__(cls)
        self._h = None
        self._lib = load_library()
        h = ctypes.c_void_p()
        self._check(self._lib.shardps_new_from_env(ctypes.byref(h)), None)
        self._start(h, tuple(os.environ["SHARDPS_SERVERS"].split(",")), options)
        return self

    def _start(self, h: ctypes.c_void_p, servers: Tuple[str, ...],
               options: Dict[str, Union[str, int, float, bool]]) -> None:
        self._h = h
        self._servers = servers
        self._borrowed: List[Any] = []  # arrays in flight until wait()
        self._clock: Optional[int] = None  # the step to pull next
        self._pulling = False
        self._table: Optional[List[Tuple[str, int]]] = None  # (name, numel), once connected
        self._dtypes: List[np.dtype] = []  # each tensor's, once connected
        self._declared: List[Any] = []  # declare_values' arrays, until connect() returns
        for name, value in options.items():
            self.set_option(name.replace("_", "-"), value)

    def _check(self, rc: int, h: Optional[str] = "self") -> int:
        if rc < 0:
            handle = self._h if h == "self" else None
            msg = self._lib.shardps_last_error(handle).decode(errors="replace")
            if not msg:
                msg = self._lib.shardps_strerror(rc).decode()
            raise ShardpsError(rc, msg)
        return rc

    def _handle(self) -> ctypes.c_void_p:
        if self._h is None:
            raise ShardpsError(-22, "the client is closed")
        return self._h

    @property
    def servers(self) -> Tuple[str, ...]:
        """The servers' addresses, in the job's order."""
        return self._servers

    def set_option(self, name: str, value: Union[str, int, float, bool]) -> None:
        """Sets one of shardps_set_option's options by its name ("chunk-bytes")
        before connect(); a bool is given as 1 or 0."""
        if isinstance(value, bool):
            value = int(value)
        self._check(self._lib.shardps_set_option(self._handle(), name.encode(),
                                                 str(value).encode()))

    def declare(self, name: str, shape: Sequence[int], init: int, fan_in: int,
                fan_out: int) -> None:
        """Declares the next tensor of the table (shardps_declare): name, shape
        (1 to 4 dimensions, row-major), init one of INIT_*, and the fans its
        bound comes from."""
        dims = (ctypes.c_int64 * len(shape))(*shape)
        self._check(self._lib.shardps_declare(self._handle(), name.encode(), len(shape), dims,
                                              init, fan_in, fan_out))

    def declare_values(self, name: str, values: Any, kind: int = KIND_PARAMETER) -> None:
        """Declares the next tensor with its own initial values
        (shardps_declare_values): values a C-contiguous NumPy array, float32
        (or int64 for a KIND_BUFFER or KIND_FROZEN tensor), whose shape is the
        tensor's (1 to 4 dimensions; a 0-dimensional array is shape (1,)).
        Only rank 0's values are sent; the array is kept until connect()
        returns."""
        what = f"declare_values: the values of {name}"
        if not isinstance(values, np.ndarray):
            raise TypeError(f"{what} are a {type(values).__name__}; give a NumPy array")
        if values.dtype not in _DTYPES:
            raise TypeError(f"{what} are {values.dtype}; a tensor's values are float32 (int64 "
                            "for a buffer or frozen tensor)")
        if not values.flags.c_contiguous:
            raise ValueError(f"{what} are not C-contiguous; use np.ascontiguousarray")
        shape = values.shape or (1,)
        dims = (ctypes.c_int64 * len(shape))(*shape)
        self._check(self._lib.shardps_declare_values(
            self._handle(), name.encode(), len(shape), dims, operator.index(kind),
            _DTYPES.index(values.dtype), values.ctypes.data_as(ctypes.c_void_p), values.nbytes))
        self._declared.append(values)

    def declare_mlp(self, sizes: Sequence[int]) -> None:
        """Declares an MLP's table (shardps_declare_mlp): layer sizes from the
        input to the classes."""
        arr = (ctypes.c_int * len(sizes))(*sizes)
        self._check(self._lib.shardps_declare_mlp(self._handle(), arr, len(sizes)))

    def connect(self) -> None:
        """Joins the job; the first pull() asks for the clock it welcomed us at.
        With nothing declared, it adopts the tensors the servers hold (waiting
        within connect_timeout for a worker to declare them): see tensors and
        shapes."""
        try:
            self._check(self._lib.shardps_connect(self._handle()))
        finally:
            self._declared = []
        self._table = self.tensors
        self._dtypes = [_DTYPES[d] for _, d in self.kinds]
        self._clock = self.start_clock

    def reconnect(self) -> None:
        """Connects again after a server went away (SHARDPS_ECLOSED): the
        servers kept this worker's place."""
        self._check(self._lib.shardps_reconnect(self._handle()))
        self._borrowed = []
        self._clock = self.start_clock

    @property
    def tensors(self) -> List[Tuple[str, int]]:
        """[(name, numel)] in the table's order."""
        n = self._check(self._lib.shardps_tensor_count(self._handle()))
        out = []
        for i in range(n):
            name = ctypes.create_string_buffer(256)  # names of up to 255 bytes
            numel = ctypes.c_size_t()
            self._check(self._lib.shardps_tensor_info(self._h, i, name, 256, ctypes.byref(numel)))
            out.append((name.value.decode(), numel.value))
        return out

    @property
    def shapes(self) -> List[Tuple[int, ...]]:
        """[shape tuple] in the table's order."""
        n = self._check(self._lib.shardps_tensor_count(self._handle()))
        out = []
        for i in range(n):
            dims = (ctypes.c_int64 * 4)()
            ndim = self._check(self._lib.shardps_tensor_shape(self._h, i, dims, 4))
            out.append(tuple(dims[:ndim]))
        return out

    @property
    def kinds(self) -> List[Tuple[int, int]]:
        """[(kind, dtype)] in the table's order: kind one of KIND_*, dtype 0
        (float32) or 1 (int64)."""
        n = self._check(self._lib.shardps_tensor_count(self._handle()))
        out = []
        for i in range(n):
            kind, dtype = ctypes.c_int(), ctypes.c_int()
            self._check(self._lib.shardps_tensor_kind(self._h, i, ctypes.byref(kind),
                                                      ctypes.byref(dtype)))
            out.append((kind.value, dtype.value))
        return out

    def _clock_of(self, fn: Any) -> int:
        v = ctypes.c_uint64()
        self._check(fn(self._handle(), ctypes.byref(v)))
        return v.value

    @property
    def start_clock(self) -> int:
        """The clock the job welcomed this worker at (after connect())."""
        return self._clock_of(self._lib.shardps_start_clock)

    @property
    def weights_clock(self) -> int:
        """The clock of the weights of the last pull."""
        return self._clock_of(self._lib.shardps_weights_clock)

    def _as_buffer(self, a: Any, tensor: int, call: str, writable: bool) -> Float32Array:
        """a, checked as the array of tensor for call ("push", "pull"):
        raises before the library sees it (see the module text)."""
        assert self._table is not None
        name, numel = self._table[tensor]
        what = f"{call}: the array of {name} (tensor {tensor})"
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{what} is a {type(a).__name__}; shardps moves float32 NumPy arrays "
                            "(no copies are made)")
        want = self._dtypes[tensor] if self._dtypes else np.dtype(np.float32)
        if a.dtype != want:
            raise TypeError(f"{what} is {a.dtype}; {name} is {want} (no copies are made: "
                            f"convert it with .astype(np.{want}) and keep the result)")
        if not a.flags.c_contiguous:
            raise ValueError(f"{what} is not C-contiguous (a strided view?); use "
                             "np.ascontiguousarray and keep the result")
        if a.size != numel:
            raise ValueError(f"{what} holds {a.size} {want} values; {name} has {numel}")
        if writable and not a.flags.writeable:
            raise ValueError(f"{what} is read-only; a pull writes into it")
        return a

    def _connected_table(self, call: str) -> List[Tuple[str, int]]:
        self._handle()
        if self._table is None or self._clock is None:
            raise ShardpsError(-22, f"{call}: not connected (connect() first)")
        return self._table

    def push(self, tensor: int, grad: Float32Array, block: bool = True,
             copy: bool = False) -> None:
        """Pushes tensor's gradient (float32, its numel elements), computed on
        the weights of the last pull. block=False: returns at once; the array
        is borrowed until wait(), unless copy=True: the library sends from
        its own copy (shardps_push_copy) and grad is free when this returns."""
        table = self._connected_table("push")
        tensor = operator.index(tensor)
        if not 0 <= tensor < len(table):
            raise ValueError(f"push: no tensor {tensor} (the table has {len(table)})")
        g = self._as_buffer(grad, tensor, "push", False)
        if copy:
            self._check(self._lib.shardps_push_copy(self._h, tensor, _float_ptr(g), g.size))
        else:
            # Borrowed even if the call fails: a push that failed half-way
            # may have queued some of its chunks.
            self._borrowed.append(g)
            self._check(self._lib.shardps_push(self._h, tensor, _float_ptr(g), g.size))
        if block:
            self.wait()

    def push_unused(self, tensor: int, block: bool = True) -> None:
        """Tells the servers that no forward used tensor this step, instead of
        pushing its gradient (shardps_push_unused): a zero in the step's
        mean over the ranks, and in a step no rank used it no update at all
        (weights, momentum, Adam's moments and step count stay), as DDP with
        find_unused_parameters=True and torch.optim do. block=False: returns
        at once."""
        table = self._connected_table("push_unused")
        tensor = operator.index(tensor)
        if not 0 <= tensor < len(table):
            raise ValueError(f"push_unused: no tensor {tensor} (the table has {len(table)})")
        self._check(self._lib.shardps_push_unused(self._h, tensor))
        if block:
            self.wait()

    def pull(self, dest: Sequence[Float32Array], clock: Optional[int] = None,
             block: bool = True) -> None:
        """Pulls every tensor into dest (a list of float32 arrays, one per
        tensor). clock: the step whose weights to pull; None: the next one
        (the welcome clock first, then one past the weights last pulled).
        block=False: the arrays are borrowed until wait()."""
        table = self._connected_table("pull")
        dest = list(dest)
        if len(dest) != len(table):
            raise ValueError(f"pull: the table has {len(table)} tensors ("
                             + ", ".join(n for n, _ in table[:8])
                             + (", ..." if len(table) > 8 else "")
                             + f"); got {len(dest)} arrays")
        arrs = [self._as_buffer(a, i, "pull", True) for i, a in enumerate(dest)]
        ptrs = (ctypes.POINTER(ctypes.c_float) * len(arrs))(*[_float_ptr(a) for a in arrs])
        counts = (ctypes.c_size_t * len(arrs))(*[a.size for a in arrs])
        step = self._clock if clock is None else clock
        self._borrowed.extend(arrs)
        self._borrowed.append(ptrs)
        self._check(self._lib.shardps_pull_into(self._h, step, ptrs, counts, len(arrs)))
        self._pulling = True
        if block:
            self.wait()

    # ---- Embedding tables (include/shardps.h 1.4; issue 24) ------------------
    # Row tables are declared beside the tensors, before connect(); a joiner
    # learns them. A table is named by its name.

    def declare_rows(self, name: str, dim: int, init: str = "zeros", lo: float = -np.inf,
                     hi: float = np.inf, mean: float = 0.0, std: float = 0.0,
                     optimizer: str = "", admit_after: int = 0, expire_after: int = 0,
                     capacity: int = 0) -> int:
        """Declares the next row table (before connect()): rows of dim float32
        addressed by any 64-bit ID. init "zeros", "uniform" (lo, hi) or
        "normal" (mean, std, truncated to [lo, hi]); optimizer "" for the
        job's, else sgd, nesterov, adam, adamw, adagrad or rowwise-adagrad;
        admit_after N: a row is stored at its Nth push; expire_after T: a row
        untouched for T steps reads as new; capacity: the most rows a server
        stores. Returns the table's id."""
        if init not in _ROW_INITS:
            raise ValueError(f"row table {name}: init {init!r}; one of "
                             f"{', '.join(_ROW_INITS)}")
        t = _RowTable(name.encode(), operator.index(dim), _ROW_INITS[init], float(lo),
                             float(hi), float(mean), float(std), optimizer.encode(),
                             operator.index(admit_after), operator.index(expire_after),
                             operator.index(capacity))
        self._check(self._lib.shardps_declare_rows(self._handle(), ctypes.byref(t),
                                                   ctypes.sizeof(t)))
        return self.row_table(name)[0]

    def row_table(self, table: str) -> Tuple[int, int]:
        """(id, dim) of the row table named table."""
        dim = ctypes.c_uint32()
        tid = self._lib.shardps_row_table_find(self._handle(), str(table).encode(),
                                               ctypes.byref(dim))
        if tid < 0:
            raise ShardpsError(tid, f"no row table {table!r}")
        return tid, dim.value

    def _row_ids(self, where: str, ids: Any) -> NDArray[np.uint64]:
        """ids as the uint64 array the wire carries: a 1-D C-contiguous int64
        array reinterpreted bit for bit (or a uint64 one as it is)."""
        if (not isinstance(ids, np.ndarray) or ids.dtype not in (np.int64, np.uint64)
                or ids.ndim != 1 or not ids.flags.c_contiguous):
            got = (f"{ids.dtype} {ids.ndim}-D {'C' if ids.flags.c_contiguous else 'non-C'}"
                   "-contiguous array" if isinstance(ids, np.ndarray) else type(ids).__name__)
            raise TypeError(f"{where}: IDs are a 1-D C-contiguous int64 (or uint64) NumPy "
                            f"array; got {got}")
        return ids.view(np.uint64)

    def pull_rows(self, table: str, ids: Any, clock: Optional[int] = None,
                  out: Optional[Float32Array] = None) -> Float32Array:
        """The rows of ids (int64 or uint64, repeats allowed) of the row
        table named table as a (len(ids), dim) float32 array: a new one, or
        out (C-contiguous, writable, len(ids) * dim float32 values; a torch
        tensor's .numpy(), which then owns the memory). clock: the step whose
        rows to read; None: the step of the weights last pulled (the start
        clock before any pull). Blocks; completes the requests started
        before."""
        tid, dim = self.row_table(table)
        where = f"pull_rows (row table {table})"
        u = self._row_ids(where, ids)
        if out is None:
            out = np.empty((u.size, dim), np.float32)
        elif (not isinstance(out, np.ndarray) or out.dtype != np.float32
              or not out.flags.c_contiguous or not out.flags.writeable):
            raise TypeError(f"{where}: out is a C-contiguous, writable float32 NumPy array")
        elif out.size != u.size * dim:
            raise ValueError(f"{where}: {u.size} IDs of dim {dim} take {u.size * dim} values; "
                             f"out holds {out.size}")
        if clock is None:
            self.wait()
            clock = self.weights_clock if self._clock != self.start_clock else self._clock
        self._check(self._lib.shardps_pull_rows(self._handle(), tid, int(clock),
                                                u.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64)),
                                                u.size, _float_ptr(out), out.size))
        return out

    def push_rows(self, table: str, ids: Any, grads: Float32Array) -> None:
        """Pushes the gradients grads (float32, (len(ids), dim) or flat,
        C-contiguous) of ids (int64 or uint64; repeats are summed) of the
        row table named table, computed on the weights last pulled. In sync mode once per
        table and step, even with no IDs. Blocks until acknowledged."""
        tid, dim = self.row_table(table)
        where = f"push_rows (row table {table})"
        u = self._row_ids(where, ids)
        if (not isinstance(grads, np.ndarray) or grads.dtype != np.float32
                or not grads.flags.c_contiguous):
            raise TypeError(f"{where}: gradients are a C-contiguous float32 NumPy array")
        if grads.size != u.size * dim:
            raise ValueError(f"{where}: {u.size} IDs of dim {dim} take {u.size * dim} "
                             f"gradient values; got {grads.size}")
        self._check(self._lib.shardps_push_rows(self._handle(), tid,
                                                u.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64)),
                                                u.size, _float_ptr(grads), grads.size))

    # ---- end of the embedding tables ------------------------------------------
    def write_buffers(self, values: Sequence[Optional[Any]]) -> None:
        """Rank 0: writes the buffers (shardps_write_buffers) whose entry is
        an array (one entry per tensor, None for the others, each array
        checked as a pull's); every rank's pull of the next step holds them
        exactly. Call it before the step's pushes. The arrays are copied
        before this returns."""
        table = self._connected_table("write_buffers")
        values = list(values)
        if len(values) != len(table):
            raise ValueError(f"write_buffers: the table has {len(table)} tensors; got "
                             f"{len(values)} entries (None for the tensors not written)")
        arrs = [None if a is None else self._as_buffer(a, i, "write_buffers", False)
                for i, a in enumerate(values)]
        ptrs = (ctypes.c_void_p * len(arrs))(*[None if a is None else a.ctypes.data
                                               for a in arrs])
        sizes = (ctypes.c_size_t * len(arrs))(*[0 if a is None else a.nbytes for a in arrs])
        self._check(self._lib.shardps_write_buffers(self._h, ptrs, sizes, len(arrs)))

    def report(self, step: int, loss: float, samples: int) -> None:
        """Tells the launcher how training goes: step steps of the job done,
        loss the latest one's training loss (nan: not known), samples trained
        since the last call (NumPy or PyTorch scalars too); a progress line
        every progress_every steps (shardps_report)."""
        self._check(self._lib.shardps_report(self._handle(), int(step), float(loss), int(samples)))

    def progress(self) -> None:
        """Moves what can move without blocking and sends the heartbeats the
        servers asked for: call it now and then in a long computation or
        test, or the servers count the silence as a worker gone."""
        self._check(self._lib.shardps_progress(self._handle()))

    def wait(self) -> None:
        """Completes every push and pull started (each has a deadline)."""
        # After a failure the arrays stay borrowed: the requests may still
        # be queued, and closing the client flushes them.
        self._check(self._lib.shardps_wait(self._handle()))
        self._borrowed = []
        if self._pulling and self._clock is not None:
            self._pulling = False
            # In sync mode a worker that fell behind gets newer weights than
            # it asked for; it continues from them.
            self._clock = max(self._clock, self.weights_clock) + 1

    def close(self) -> None:
        """Leaves the job (barriers stop counting this worker) and frees the
        client."""
        if self._h is not None:
            self._lib.shardps_close(self._h)
            self._h = None

    def abandon(self) -> None:
        """Frees the client without a goodbye: the servers keep its place."""
        if self._h is not None:
            self._lib.shardps_abandon(self._h)
            self._h = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abandon()

    def __del__(self) -> None:
        if getattr(self, "_h", None) is not None and getattr(self, "_lib", None) is not None:
            self.abandon()
