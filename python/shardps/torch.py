"""PyTorch on shardps: the servers hold the weights and run the optimizer.

    ps = shardps.torch.attach(model)          # the job shardps-run started
    for x, y in batches:
        loss = F.cross_entropy(model(x), y)   # weights pulled before forward
        loss.backward()                       # each gradient pushed as autograd
                                              # produces it
    ps.close()                                # the final weights, then leave
                                              # (at exit if never called)

attach declares one tensor per parameter and per buffer (parameters named
and ordered as in named_parameters, then buffers as in named_buffers; every
worker of the job must build the same model, and the servers refuse one
whose table differs), joins the job and hooks the model: a gradient hook on
each parameter pushes it the moment backward has it, and a forward pre-hook
completes those pushes and pulls the next step's weights and buffers
straight into the model (CPU: no copy). No optimizer runs here: the servers
apply sync, async or ssp as they were started. The loop needs no
optimizer.step() and no zero_grad().

The starting point is rank 0's model as it is when attach is called (its
own initialisation, pretrained or fine-tuned weights): rank 0 alone sends
its values, and every rank's first pull equals rank 0's state_dict bit for
bit, whichever rank starts first. init="server" keeps the servers' seeded
initialisation for the parameters instead (a checkpoint the servers
restored wins over both).

What DDP does by default, shardps.torch does: every rank's forward uses
rank 0's buffers (BatchNorm's running statistics and its int64
num_batches_tracked, carried exactly), refreshed every step: rank 0 writes
its buffers as its backward starts, and every rank pulls them with the
weights. Parameters with requires_grad=False are declared frozen, with
their values, and never pushed. A parameter that no forward of a step used
is updated as DDP with find_unused_parameters=True and torch.optim update
it: with the mean over the ranks (its gradient counting as zero here) when
another rank used it, and not at all (no momentum, weight decay or Adam
step) when no rank did.

What a gradient hook pushes is a copy the library owns (shardps_push_copy,
on CUDA the pinned staging buffer), taken before the hook returns: a
zero_grad() (either way), an in-place op on a .grad or a gradient freed
while its push is in flight changes nothing that travels. The copy costs
about 0.6 ms per million parameters here (docs/torch.md).

Each rank trains on its own share of the data: ps.sampler(dataset) is a
DistributedSampler(num_replicas=world, rank=rank) of the job's place, and
ps.check_sampler(loader) refuses a DataLoader that would give every rank the
same batches (docs/torch.md).

CUDA parameters are staged through pinned host buffers (a copy each way per
step). That path is untested: the machine this was written on has no GPU.
"""

from __future__ import annotations

import atexit
import math
import os
import weakref
from collections.abc import Iterable, Sequence, Sized
from typing import Callable, Dict, List, Optional, Tuple, Union

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, Sampler

from . import (INIT_HE_UNIFORM, INIT_XAVIER_UNIFORM, INIT_ZERO, KIND_BUFFER, KIND_FROZEN,
               KIND_PARAMETER, MAX_NAME_BYTES, MAX_TENSORS, Client)

#: (kind, fan_in, fan_out) of one parameter: kind one of shardps.INIT_*.
Init = Tuple[int, int, int]

__all__ = ["attach", "Attached", "default_init", "sampler", "check_sampler", "ServedEmbedding"]


def default_init(named_params: Iterable[Tuple[str, torch.nn.Parameter]]) -> Dict[str, Init]:
    """{name: (kind, fan_in, fan_out)} by the servers' conventions: weights
    (2 or more dimensions) He-uniform, the last one Xavier-uniform; biases
    zero. Fans are those of a dense [out, in] or conv [out, in, kh, kw]
    weight."""
    named = list(named_params)
    weights = [n for n, p in named if p.dim() >= 2]
    out: Dict[str, Init] = {}
    fans: Optional[Tuple[int, int]] = None
    for name, p in named:
        if p.dim() >= 2:
            rf = math.prod(p.shape[2:])
            fans = (p.shape[1] * rf, p.shape[0] * rf)
            kind = INIT_XAVIER_UNIFORM if name == weights[-1] else INIT_HE_UNIFORM
            out[name] = (kind, *fans)
        else:
            # A bias takes its layer's fans (the servers' tables do the same).
            out[name] = (INIT_ZERO, *(fans or (p.numel(), p.numel())))
    return out


def sampler(dataset: Sized, rank: int, world: int, shuffle: bool = True, seed: int = 0,
            drop_last: bool = False) -> DistributedSampler:
    """Rank's share of dataset (anything with a length): PyTorch's
    DistributedSampler(dataset, num_replicas=world, rank=rank, ...). Each
    epoch the same shuffle on every rank (call set_epoch(e) for a new one),
    dealt out so that the ranks' shares are disjoint and together cover the
    data; drop_last=False repeats up to world - 1 samples to even the shares
    out, drop_last=True leaves up to world - 1 out instead."""
    # It only takes len(dataset): a range or any sized collection does.
    return DistributedSampler(dataset, num_replicas=world, rank=rank,  # type: ignore[arg-type]
                              shuffle=shuffle, seed=seed, drop_last=drop_last)


def check_sampler(data: Union[DataLoader, Sampler, BatchSampler], rank: int, world: int) -> None:
    """Raises ValueError unless data (a DataLoader, or the sampler or batch
    sampler it draws from) deals rank its own share of the dataset: a
    DistributedSampler for rank of world. With world 1 any sampler is."""
    s: object = data
    if isinstance(s, DataLoader):
        s = s.batch_sampler if s.batch_sampler is not None else s.sampler
    if isinstance(s, BatchSampler):
        s = s.sampler
    if isinstance(s, DistributedSampler):
        if (s.num_replicas, s.rank) != (world, rank):
            raise ValueError(f"shardps: this worker is rank {rank} of {world}, but its "
                             f"DistributedSampler deals rank {s.rank} of {s.num_replicas}: use "
                             "shardps.torch.sampler(dataset, rank, world) (or ps.sampler(dataset))")
    elif world > 1:
        raise ValueError(f"shardps: rank {rank} of {world} draws its data from a "
                         f"{type(s).__name__}, which deals every rank the whole dataset: the "
                         "ranks would train on the same batches. Give the DataLoader "
                         "sampler=ps.sampler(dataset) (a DistributedSampler for this rank), and "
                         "call its set_epoch(epoch) each epoch (docs/torch.md)")


def _clipped(g: torch.Tensor, max_norm: float) -> torch.Tensor:
    """g scaled to an L2 norm of at most max_norm, as the C worker's
    --clip-norm does it (kernels/layers.c ps_clip_norm: the squares summed
    in double, one float32 scale)."""
    sq = float(torch.sum(g.double() ** 2))
    if sq > max_norm * max_norm:
        return g * (max_norm / math.sqrt(sq))
    return g


class Attached:
    """A model hooked to a job (see attach). close() leaves the job."""

    def __init__(self, model: torch.nn.Module, client: Client, rank: int, world: int,
                 table: List[Tuple[str, torch.Tensor, int]], accumulate: int = 1,
                 clip_norm: float = 0.0, served: Sequence[ServedEmbedding] = ()) -> None:
        self.client = client
        # The model's row tables: each step ends for them where it does for
        # the dense tensors, at the next forward's sync.
        self._served = list(served)
        self.rank, self.world = rank, world
        self._tensors = [t for _, t, _ in table]
        # The trainable parameters: their index in the table, name, tensor.
        self._pidx = [i for i, (_, _, k) in enumerate(table) if k == KIND_PARAMETER]
        self._names = [table[i][0] for i in self._pidx]
        self._params = [table[i][1] for i in self._pidx]
        self._buffers = [i for i, (_, _, k) in enumerate(table) if k == KIND_BUFFER]
        # Every parameter, frozen ones too, must not change in place.
        self._watched = [(n, t) for n, t, k in table if k != KIND_BUFFER]
        self._accumulate = accumulate
        self._clip_norm = clip_norm
        self._cuda = any(t.is_cuda for t in self._tensors)
        if self._cuda:
            self._host = [torch.empty(t.numel(), dtype=t.dtype).pin_memory()
                          for t in self._tensors]
            self._grad_host = [self._host[i].clone().pin_memory() for i in self._pidx]
        else:
            # Pulls land in the tensors' own storage.
            self._host = [t.data.view(-1) for t in self._tensors]
        self._dest = [h.numpy() for h in self._host]
        # Per parameter: the gradients backward gave it this step, and
        # (accumulate > 1) their sum so far.
        self._count = [0] * len(self._params)
        self._sum: List[Optional[torch.Tensor]] = [None] * len(self._params)
        self._pushed = 0     # this step's pushes so far
        self._pulled = False
        self._versions: List[int] = []  # each parameter's _version after the last pull
        self._handles = [p.register_hook(self._grad_hook(j)) for j, p in enumerate(self._params)]
        self._samples = 0  # trained since the last report
        self._loss = math.nan  # the loop's, through report()
        self._handles.append(model.register_forward_pre_hook(self._pre_forward))
        self.sync()
        # Leaves the job at exit if the script never calls close().
        ref = weakref.ref(self)
        self._at_exit = lambda: _leave_at_exit(ref)
        atexit.register(self._at_exit)

    def _pre_forward(self, module: torch.nn.Module, inp: Tuple[object, ...]) -> None:
        """Before every forward: syncs, and counts a training forward's
        samples (the length of its first tensor argument) for the launcher's
        progress line."""
        self.sync()
        if module.training and torch.is_grad_enabled() and inp and isinstance(inp[0],
                                                                               torch.Tensor):
            self._samples += len(inp[0]) if inp[0].dim() else 1

    def report(self, loss: Union[float, torch.Tensor]) -> None:
        """Gives the launcher this step's training loss (a float or a
        one-element tensor), shown in its progress line; the steps and
        samples attach reports by itself after every step (nan as the loss
        until this is called)."""
        self._loss = float(loss)

    def _write_buffers(self) -> None:
        """Rank 0, before a step's first push: its buffers, as its forward
        left them, for every rank's next pull (DDP's broadcast_buffers)."""
        values: List[Optional[np.ndarray]] = [None] * len(self._tensors)
        for i in self._buffers:
            if self._cuda:
                self._host[i].copy_(self._tensors[i].detach().view(-1))
                values[i] = self._dest[i]
            else:
                values[i] = self._tensors[i].detach().view(-1).numpy()
        self.client.write_buffers(values)

    def _push(self, j: int, g: Optional[torch.Tensor]) -> None:
        """Pushes parameter j's gradient g (flat), or None: that no forward
        of the step used it; rank 0's buffers first."""
        if self._pushed == 0 and self.rank == 0 and self._buffers:
            self._write_buffers()
        if g is None:
            self.client.push_unused(self._pidx[j], block=False)
        elif g.is_cuda:
            # Synchronous: the bytes are in the staging buffer, which
            # nobody else writes, before the push starts.
            self._grad_host[j].copy_(g)
            self.client.push(self._pidx[j], self._grad_host[j].numpy(), block=False)
        else:
            # The library's copy: the loop may zero, change or drop the
            # gradient as soon as backward has it.
            self.client.push(self._pidx[j], g.contiguous().numpy(), block=False, copy=True)
        self.client.progress()
        self._pushed += 1

    def _grad_hook(self, i: int) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            if self._count[i] == self._accumulate:
                raise RuntimeError(
                    f"shardps: {self._names[i]} got a gradient from more than "
                    f"{self._accumulate} backward pass(es) before the next forward: a step of "
                    "the job takes one gradient per parameter, pulled weights in between. To "
                    "sum K backward passes into one step (gradient accumulation), attach with "
                    "accumulate=K and run a forward before each (docs/torch.md)")
            g = grad.detach().reshape(-1)
            self._count[i] += 1
            if self._accumulate > 1:
                if self._count[i] == 1:
                    self._sum[i] = g.clone()
                else:
                    self._sum[i].add_(g)  # type: ignore[union-attr]
                if self._count[i] < self._accumulate:
                    return
                g, self._sum[i] = self._sum[i], None  # type: ignore[assignment]
            if self._clip_norm > 0:
                g = _clipped(g, self._clip_norm)
            self._push(i, g)
        return hook

    def sampler(self, dataset: Sized, shuffle: bool = True, seed: int = 0,
                drop_last: bool = False) -> DistributedSampler:
        """This rank's share of dataset: shardps.torch.sampler with the job's
        rank and world."""
        return sampler(dataset, self.rank, self.world, shuffle, seed, drop_last)

    def check_sampler(self, data: Union[DataLoader, Sampler, BatchSampler]) -> None:
        """shardps.torch.check_sampler for this worker's rank and world."""
        check_sampler(data, self.rank, self.world)

    def _check_unchanged(self) -> None:
        """Refuses parameters changed in place since the pull: the servers
        run the optimizer, and the next pull would silently undo it."""
        for (name, p), v in zip(self._watched, self._versions):
            if p._version != v:
                raise RuntimeError(
                    f"shardps: {name} was changed in place since its weights were pulled (an "
                    "optimizer.step(), a GradScaler's step or a manual update left in the "
                    "loop?): the servers run the optimizer, and the next pull would overwrite "
                    "the change. Remove the optimizer (and its lr_scheduler) from the loop and "
                    "give the servers --optimizer, --lr, --momentum, --weight-decay and "
                    "--lr-schedule (docs/torch.md)")

    def sync(self) -> None:
        """Completes this step's pushes and pulls the next weights and
        buffers into the model: called before every forward, so a loop
        never calls it.

        A parameter that no forward of the step used (its gradient hook
        never ran) is pushed as unused once every other parameter has its
        gradient, so that the sync step completes: the servers average it
        as a zero with the other ranks' gradients, as DDP with
        find_unused_parameters=True averages a rank's unused parameter,
        and where no rank used it they leave it, its optimizer state and
        its step count as they were, as torch.optim skips a parameter
        whose .grad DDP left None (docs/torch.md)."""
        self._check_unchanged()
        for m in self._served:
            m._end_step(self._pushed > 0)
        if self._pulled and len(set(self._count)) == 1 and self._pushed == 0:
            # A forward with nothing to exchange (a test of the model, or
            # the next micro-batch of an accumulated step): the servers
            # still hear from us, however long it takes.
            self.client.progress()
            return
        if self._pulled and self._pushed < len(self._params):
            partial = [(n, c) for n, c in zip(self._names, self._count)
                       if 0 < c < self._accumulate]
            if partial:
                raise RuntimeError(f"shardps: {partial[0][0]} got {partial[0][1]} of the "
                                   f"{self._accumulate} gradients of the step; a parameter "
                                   "used in the step must get one from each backward pass")
            for j, c in enumerate(self._count):
                if c == 0:
                    self._push(j, None)
        stepped = self._pulled
        self.client.pull(self._dest)  # waits for the pushes too
        if stepped:
            self.client.report(self.client.weights_clock, self._loss, self._samples)
            self._samples, self._loss = 0, math.nan
        self._pushed = 0
        self._count = [0] * len(self._params)
        self._pulled = True
        with torch.no_grad():
            for t, h in zip(self._tensors, self._host):
                if self._cuda:
                    t.data.view(-1).copy_(h, non_blocking=False)
            for p in self._params:
                p.grad = None
        self._versions = [p._version for _, p in self._watched]

    def close(self) -> None:
        """Completes the last step (its pushes, and the pull of the weights
        they make), unhooks the model and leaves the job: the model keeps the
        final weights. A step left unfinished raises after the job is left.
        Called at interpreter exit if the script never calls it."""
        if not self._handles:
            return
        atexit.unregister(self._at_exit)
        try:
            if any(self._count) or any(m._ids for m in self._served):
                self.sync()
        finally:
            for h in self._handles:
                h.remove()
            self._handles = []
            self.client.close()


# ---- Embedding tables (issue 24): a model's embeddings served by a row table ----

class ServedEmbedding(torch.nn.Module):
    """nn.Embedding (mode None) or nn.EmbeddingBag (mode "sum" or "mean") whose
    table lives on the servers as a row table of dim float32 columns, addressed
    by any int64 ID: attach declares it (name, dim and the row table's options,
    declare_rows'), and each forward pulls the rows of the batch's unique IDs
    (after the dense weights: the model's forward pre-hook runs first), each
    ID once per step. The rows pulled are a leaf of this step's graph only:
    nothing of the table is held past the step.

    It may be used several times in a step's forward, as a tied nn.Embedding
    is (the same table for two fields): a server takes one rows push per
    table and step, so the gradients of every use (autograd sums repeats
    within a use) are summed per ID, uses in the order they ran, and pushed
    once, when the last use's gradient arrives, or, where a use's output did
    not reach the loss, when the next forward starts the next step (that use
    counts as zero, as in PyTorch). A step that trained without using the
    table pushes it empty, so that a sync step completes. A use after that
    push, or a gradient reaching a use of an earlier step, raises. One
    backward per step (attach's accumulate=1)."""

    def __init__(self, name: str, dim: int, mode: Optional[str] = None,
                 **row_options: Union[str, int, float]) -> None:
        super().__init__()
        if mode not in (None, "sum", "mean"):
            raise ValueError(f"ServedEmbedding {name}: mode None, 'sum' or 'mean'; got {mode!r}")
        self.name, self.dim, self.mode = name, int(dim), mode
        self._row_options = row_options
        self._client: Optional[Client] = None
        # This step's uses: each one's unique IDs and, once backward gave
        # it, its rows' gradient; whether the step's push is done; the step
        # (counted by _end_step) whose hooks may still arrive.
        self._ids: List[np.ndarray] = []
        self._grads: List[Optional[torch.Tensor]] = []
        self._pushed = False
        self._step = 0
        # The rows this step pulled, by sorted ID.
        self._known = np.empty(0, np.int64)
        self._table = torch.empty(0, self.dim)

    def _declare(self, client: Client, accumulate: int) -> None:
        if accumulate != 1:
            raise ValueError(f"ServedEmbedding {self.name}: one forward and backward per step "
                             "(attach's accumulate=1): a row table takes one push per step")
        client.declare_rows(self.name, self.dim, **self._row_options)  # type: ignore[arg-type]

    def _bind(self, client: Client) -> None:
        self._client = client

    def forward(self, ids: torch.Tensor, offsets: Optional[torch.Tensor] = None) -> torch.Tensor:
        if self._client is None:
            raise RuntimeError(f"ServedEmbedding {self.name}: not attached (shardps.torch.attach "
                               "declares and binds it)")
        if ids.dtype != torch.int64:
            raise TypeError(f"ServedEmbedding {self.name}: IDs are int64; got {ids.dtype}")
        training = torch.is_grad_enabled()
        if training and self._pushed:
            raise RuntimeError(f"ServedEmbedding {self.name}: used after the gradient of its "
                               "step was pushed (every earlier use's backward had run): a row "
                               "table takes one push per step, and the next step starts with "
                               "the attached model's next forward")
        uniq, inverse = torch.unique(ids.detach().cpu(), return_inverse=True)
        keys = uniq.contiguous().numpy()
        rows = self._rows_of(keys)
        if training:
            rows.requires_grad_(True)
            use, step = len(self._ids), self._step
            self._ids.append(keys)
            self._grads.append(None)
            rows.register_hook(lambda g: self._gradient(step, use, g))
        rows_d = rows.to(ids.device)
        inverse = inverse.to(ids.device).reshape(ids.shape)
        if self.mode is None:
            return torch.nn.functional.embedding(inverse, rows_d)
        return torch.nn.functional.embedding_bag(inverse, rows_d, offsets, mode=self.mode)

    def _rows_of(self, keys: np.ndarray) -> torch.Tensor:
        """The step's rows of keys (sorted, unique) as a new tensor: each ID
        is pulled once per step, so every use sees the same row (in async
        mode too) and a later use pulls only the IDs no earlier one did.
        Memory torch owns: a tensor over NumPy's would be freed through
        Python, which hangs the interpreter's exit when autograd still
        holds the leaf then (a backward that raised part way)."""
        known = self._known
        if known.size:
            at = np.minimum(np.searchsorted(known, keys), known.size - 1)
            new = keys[known[at] != keys]
        else:
            new = keys
        if new.size:
            pulled = torch.empty((new.size, self.dim), dtype=torch.float32)
            self._client.pull_rows(self.name, new, out=pulled.numpy())  # type: ignore[union-attr]
            if not known.size:
                # The first use: its rows are all the step holds.
                self._known, self._table = new, pulled.detach()
                return pulled
            merged = np.concatenate([known, new])
            order = np.argsort(merged, kind="stable")
            self._known = merged[order]
            self._table = torch.cat([self._table, pulled])[torch.from_numpy(order)]
        return self._table[torch.from_numpy(np.searchsorted(self._known, keys))]

    def _gradient(self, step: int, use: int, g: torch.Tensor) -> None:
        """Backward's gradient of use's rows: kept, and the step's push made
        once every use of the step has one."""
        if step != self._step:
            raise RuntimeError(f"ServedEmbedding {self.name}: a backward reached a forward of "
                               "an earlier step (the attached model's forward has run since): "
                               "its rows are gone; run backward before the next forward")
        if self._grads[use] is not None:
            raise RuntimeError(f"ServedEmbedding {self.name}: use {use + 1} of the step got a "
                               "gradient from more than one backward pass; a row table takes "
                               "one push per step")
        self._grads[use] = g.detach().cpu()
        if all(x is not None for x in self._grads):
            self._push()

    def _push(self) -> None:
        """Pushes the sum of the gradients the step's uses got, per ID (none:
        an empty push)."""
        got = [(k, g) for k, g in zip(self._ids, self._grads) if g is not None]
        if not got:
            keys, total = np.empty(0, np.int64), torch.empty(0, self.dim)
        elif len(got) == 1:
            keys, total = got[0]
        else:
            keys, where = np.unique(np.concatenate([k for k, _ in got]), return_inverse=True)
            total = torch.zeros(len(keys), self.dim, dtype=torch.float32)
            # index_add_ adds the rows in order: each ID's sum is its uses'
            # gradients in the order the uses ran.
            total.index_add_(0, torch.from_numpy(where.reshape(-1)), torch.cat([g for _, g in got]))
        self._pushed = True
        self._client.push_rows(  # type: ignore[union-attr]
            self.name, keys, total.contiguous().numpy().astype("float32", copy=False))

    def _end_step(self, trained: bool) -> None:
        """The attached model's next forward (or close) ends the step: the
        gradients of uses whose output reached the loss, if not pushed yet
        (another use's never reached it), are pushed now; a step that
        trained (trained: its dense gradients were pushed) without a
        gradient for this table pushes it empty, as a sync step needs
        every rank's push of every table (the dense tensors' push_unused)."""
        try:
            if not self._pushed and (trained or any(g is not None for g in self._grads)):
                self._push()
        finally:
            self._ids, self._grads, self._pushed = [], [], False
            self._known, self._table = np.empty(0, np.int64), torch.empty(0, self.dim)
            self._step += 1

# ---- end of the embedding tables -------------------------------------------------


def _leave_at_exit(ref: "weakref.ref[Attached]") -> None:
    """atexit: the Attached model of ref, if it is still attached, leaves the
    job (its last step completed) as close() does."""
    a = ref()
    if a is not None:
        a.close()


def _table(model: torch.nn.Module) -> List[Tuple[str, torch.Tensor, int]]:
    """The job's table of model: (name, tensor, kind) of each parameter
    (frozen when requires_grad is False), then each buffer; raises naming
    the first tensor shardps cannot carry."""
    out = [(n, p, KIND_PARAMETER if p.requires_grad else KIND_FROZEN)
           for n, p in model.named_parameters()]
    out += [(n, b, KIND_BUFFER) for n, b in model.named_buffers()]
    if len(out) > MAX_TENSORS:
        raise ValueError(f"shardps: the model has {len(out)} tensors (parameters and buffers); "
                         f"a job's table holds at most {MAX_TENSORS}")
    for name, t, kind in out:
        if not 1 <= len(name.encode()) <= MAX_NAME_BYTES:
            raise ValueError(f"shardps: the name {name[:40]}... is {len(name.encode())} bytes; a "
                             f"tensor's name takes at most {MAX_NAME_BYTES}")
        if kind != KIND_BUFFER and t.dtype != torch.float32:
            raise TypeError(f"shardps trains float32 parameters; {name} is {t.dtype}")
        if t.dtype not in (torch.float32, torch.int64):
            raise TypeError(f"shardps carries float32 and int64 buffers; {name} is {t.dtype}")
        if t.dim() > 4:
            raise ValueError(f"shardps: {name} has {t.dim()} dimensions {tuple(t.shape)}; a "
                             "tensor of the job has 1 to 4")
        if not t.is_contiguous():
            raise ValueError(f"shardps: {name} is not contiguous; the pulls write into its "
                             "storage")
    return out


def attach(model: torch.nn.Module, servers: Optional[Union[str, Sequence[str]]] = None,
           rank: Optional[int] = None, world: Optional[int] = None,
           init: Union[str, Dict[str, Init]] = "model", accumulate: int = 1,
           clip_norm: float = 0.0, **options: Union[str, int, float, bool]) -> Attached:
    """Declares model's parameters and buffers as the job's tensors, joins the
    job, pulls its starting point into the model and hooks it (see the
    module text).
    servers, rank, world: the job's place (servers as Client's, "HOST:PORT,
    HOST:PORT" or a sequence of "HOST:PORT"); all three None (the default):
    the job shardps-run put in the environment (Client.from_env:
    SHARDPS_SERVERS, SHARDPS_RANK, SHARDPS_WORKERS, SHARDPS_<OPTION>).
    init: "model" (rank 0's current values, the default), "server" (the
    servers' seeded initialisation, default_init's kinds), or {name: (kind,
    fan_in, fan_out)}: "server" with those kinds. Buffers and frozen
    parameters always start from rank 0's values.
    accumulate: K backward passes (each after its own forward) summed into
    one step's gradient, as p.grad sums them before an optimizer.step().
    clip_norm: each tensor's gradient scaled to at most this L2 norm before
    it is pushed (the C worker's --clip-norm; 0: off). options:
    Client's (auth_token_file=..., seed=..., total_steps=..., ...):
    total_steps=N, the steps this worker plans, is the span of the servers'
    cosine schedule under shardps-run without --total-steps (the most any
    rank plans), which refuses a worker that plans none. Returns
    the Attached model; its close() leaves the job (at exit, if the script
    never calls it)."""
    if isinstance(accumulate, bool) or not isinstance(accumulate, int) or accumulate < 1:
        raise ValueError(f"attach: accumulate is the count of backward passes per step, an "
                         f"int >= 1; got {accumulate!r}")
    if not isinstance(clip_norm, (int, float)) or not 0 <= clip_norm < math.inf:
        raise ValueError(f"attach: clip_norm is an L2 norm >= 0 (0: off); got {clip_norm!r}")
    if not (isinstance(init, dict) or init in ("model", "server")):
        raise ValueError(f"attach: init is \"model\", \"server\" or {{name: (kind, fan_in, "
                         f"fan_out)}}; got {init!r}")
    place = (servers, rank, world)
    if any(v is None for v in place) and any(v is not None for v in place):
        raise ValueError("attach: give servers, rank and world together, or none of them (the "
                         "job shardps-run put in the environment)")
    table = _table(model)
    kinds = default_init((n, t) for n, t, k in table if k != KIND_BUFFER)
    if isinstance(init, dict):
        kinds.update(init)
    if servers is None:
        client = Client.from_env(**options)
        rank, world = int(os.environ["SHARDPS_RANK"]), int(os.environ["SHARDPS_WORKERS"])
    else:
        client = Client(servers, rank, world, **options)  # type: ignore[arg-type]
    served = [m for m in model.modules() if isinstance(m, ServedEmbedding)]
    try:
        for name, t, kind in table:
            if kind == KIND_PARAMETER and init != "model":
                client.declare(name, list(t.shape) or [1], *kinds[name])
            else:
                client.declare_values(name, t.detach().cpu().contiguous().numpy(), kind)
        for m in served:
            m._declare(client, accumulate)
        client.connect()
        for m in served:
            m._bind(client)
        return Attached(model, client, rank, world, table,  # type: ignore[arg-type]
                        accumulate, float(clip_norm), served)
    except BaseException:
        client.abandon()
        raise
