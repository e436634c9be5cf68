"""PyTorch on shardps: the servers hold the weights and run the optimizer.

    ps = shardps.torch.attach(model, servers, rank, world)
    for x, y in batches:
        loss = F.cross_entropy(model(x), y)   # weights pulled before forward
        loss.backward()                       # each gradient pushed as autograd
                                              # produces it
    ps.close()                                # the final weights, then leave

attach declares one tensor per parameter (named as in named_parameters, in
that order; every worker of the job must build the same model), joins the
job and hooks the model: a gradient hook on each parameter pushes it the
moment backward has it, and a forward pre-hook completes those pushes and
pulls the next step's weights straight into the parameters (CPU: no copy).
No optimizer runs here: the servers apply sync, async or ssp as they were
started. The loop needs no optimizer.step() and no zero_grad().

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

import math
from collections.abc import Iterable, Sequence, Sized
from typing import Callable, Dict, List, Optional, Tuple, Union

import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, Sampler

from . import INIT_HE_UNIFORM, INIT_XAVIER_UNIFORM, INIT_ZERO, Client

#: (kind, fan_in, fan_out) of one parameter: kind one of shardps.INIT_*.
Init = Tuple[int, int, int]

__all__ = ["attach", "Attached", "default_init", "sampler", "check_sampler"]


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
                 accumulate: int = 1, clip_norm: float = 0.0) -> None:
        self.client = client
        self.rank, self.world = rank, world
        named = list(model.named_parameters())
        self._names = [n for n, _ in named]
        self._params = [p for _, p in named]
        self._accumulate = accumulate
        self._clip_norm = clip_norm
        self._cuda = any(p.is_cuda for p in self._params)
        if self._cuda:
            self._host = [torch.empty(p.numel(), dtype=torch.float32).pin_memory()
                          for p in self._params]
            self._grad_host = [torch.empty_like(h).pin_memory() for h in self._host]
        else:
            # Pulls land in the parameters' own storage.
            self._host = [p.data.view(-1) for p in self._params]
        self._dest = [h.numpy() for h in self._host]
        # Per parameter: the gradients backward gave it this step, and
        # (accumulate > 1) their sum so far.
        self._count = [0] * len(self._params)
        self._sum: List[Optional[torch.Tensor]] = [None] * len(self._params)
        self._pushed = 0     # this step's pushes so far
        self._pulled = False
        self._versions: List[int] = []  # each parameter's _version after the last pull
        self._handles = [p.register_hook(self._grad_hook(i)) for i, p in enumerate(self._params)]
        self._handles.append(model.register_forward_pre_hook(lambda m, inp: self.sync()))
        self.sync()

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
            if g.is_cuda:
                # Synchronous: the bytes are in the staging buffer, which
                # nobody else writes, before the push starts.
                self._grad_host[i].copy_(g)
                self.client.push(i, self._grad_host[i].numpy(), block=False)
            else:
                # The library's copy: the loop may zero, change or drop the
                # gradient as soon as backward has it.
                self.client.push(i, g.contiguous().numpy(), block=False, copy=True)
            self.client.progress()
            self._pushed += 1
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
        for name, p, v in zip(self._names, self._params, self._versions):
            if p._version != v:
                raise RuntimeError(
                    f"shardps: {name} was changed in place since its weights were pulled (an "
                    "optimizer.step(), a GradScaler's step or a manual update left in the "
                    "loop?): the servers run the optimizer, and the next pull would overwrite "
                    "the change. Remove the optimizer (and its lr_scheduler) from the loop and "
                    "give the servers --optimizer, --lr, --momentum, --weight-decay and "
                    "--lr-schedule (docs/torch.md)")

    def sync(self) -> None:
        """Completes this step's pushes and pulls the next weights into the
        parameters: called before every forward, so a loop never calls it."""
        self._check_unchanged()
        if self._pulled and len(set(self._count)) == 1 and self._pushed == 0:
            # A forward with nothing to exchange (a test of the model, or
            # the next micro-batch of an accumulated step): the servers
            # still hear from us, however long it takes.
            self.client.progress()
            return
        if self._pulled and self._pushed < len(self._params):
            missing = next(n for n, c in zip(self._names, self._count)
                           if c < self._accumulate)
            raise RuntimeError(f"shardps: only {self._pushed} of {len(self._params)} parameters "
                               f"got their gradient this step ({missing} did not); every "
                               "parameter must be pushed")
        self.client.pull(self._dest)  # waits for the pushes too
        self._pushed = 0
        self._count = [0] * len(self._params)
        self._pulled = True
        with torch.no_grad():
            for p, h in zip(self._params, self._host):
                if self._cuda:
                    p.data.view(-1).copy_(h, non_blocking=False)
                p.grad = None
        self._versions = [p._version for p in self._params]

    def close(self) -> None:
        """Completes the last step (its pushes, and the pull of the weights
        they make), unhooks the model and leaves the job: the model keeps the
        final weights. A step left unfinished raises after the job is left."""
        try:
            if any(self._count):
                self.sync()
        finally:
            for h in self._handles:
                h.remove()
            self._handles = []
            self.client.close()


def attach(model: torch.nn.Module, servers: Union[str, Sequence[str]], rank: int, world: int,
           init: Optional[Dict[str, Init]] = None, accumulate: int = 1,
           clip_norm: float = 0.0, **options: Union[str, int, float, bool]) -> Attached:
    """Declares model's parameters as the job's tensors, joins the job, pulls
    the current weights into the model and hooks it (see the module text).
    servers: as Client's ("HOST:PORT,HOST:PORT" or a sequence of "HOST:PORT").
    init: {name: (kind, fan_in, fan_out)} overriding default_init.
    accumulate: K backward passes (each after its own forward) summed into
    one step's gradient, as p.grad sums them before an optimizer.step().
    clip_norm: each tensor's gradient scaled to at most this L2 norm before
    it is pushed (the C worker's --clip-norm; 0: off). options:
    Client's (auth_token_file=..., seed=..., total_steps=..., ...). Returns
    the Attached model; its close() leaves the job."""
    if isinstance(accumulate, bool) or not isinstance(accumulate, int) or accumulate < 1:
        raise ValueError(f"attach: accumulate is the count of backward passes per step, an "
                         f"int >= 1; got {accumulate!r}")
    if not isinstance(clip_norm, (int, float)) or not 0 <= clip_norm < math.inf:
        raise ValueError(f"attach: clip_norm is an L2 norm >= 0 (0: off); got {clip_norm!r}")
    params = list(model.named_parameters())
    for name, p in params:
        if p.dtype != torch.float32:
            raise TypeError(f"shardps trains float32 parameters; {name} is {p.dtype}")
    kinds = default_init(params)
    kinds.update(init or {})
    client = Client(servers, rank, world, **options)
    try:
        for name, p in params:
            client.declare(name, list(p.shape), *kinds[name])
        client.connect()
        return Attached(model, client, rank, world, accumulate, float(clip_norm))
    except BaseException:
        client.abandon()
        raise
