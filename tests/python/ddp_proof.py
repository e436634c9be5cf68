"""shardps.torch against DDP, step for step (tests/integration/ddp_proof.sh).

Two models: a small ResNet of torchvision's BasicBlock (BatchNorm; 38
tensors) and a small Vision Transformer (7x7 patches as tokens,
nn.TransformerEncoder, LayerNorm; names past 31 bytes). Each is trained
STEPS steps by 2 ranks on the same batches of Fashion-MNIST (the first
N_TRAIN training images, dealt by DistributedSampler(shuffle=True, seed=0),
BATCH per rank), SGD with lr LR and momentum MU, from rank 0's model: each
rank builds its model from seed 100 + rank, and the job must start from
rank 0's. Every EVAL_AT steps (and after the last) each rank computes an
eval-mode loss on the first N_EVAL test images through its (wrapped) model,
which is also when both sides have synced the buffers to rank 0's, and
records it with its state_dict. Modes:

  ddp OUT            DDP (gloo, 2 processes, 1 thread each), with the
                     default broadcast_buffers=True (OUT/ddp.<model>.<rank>.pt)
                     and with broadcast_buffers=False (the control
                     "buffers not shared": OUT/nobuf.<model>.<rank>.pt)
  shardps RANK VARIANT ADDRS OUT
                     rank RANK of a shardps sync job on servers ADDRS
                     (sgd, momentum MU, constant LR): VARIANT model
                     (attach's default: rank 0's values) or server (the
                     control "initial values not shared": init="server");
                     OUT/<variant>.<model>.<rank>.pt, the ResNet's job on
                     ADDRS' first half of servers, the ViT's on the second
  compare OUT        every quantity of shardps against DDP, the relative
                     differences, the tolerance (TOLERANCE, derived below),
                     and both controls (the ViT has no buffers: only the
                     ResNet has the buffers control)

Unused parameters (issue 23 point 3): a small MLP whose forward takes two
branches by step and rank (routes: `rare` by both ranks or by neither,
`solo` by neither, rank 0 alone, both, or rank 1 alone), trained U_STEPS
steps as above with momentum SGD (bit for bit) and with Adam (within
ADAM_TOLERANCE, derived below) against DDP(find_unused_parameters=True)
with torch.optim, which leaves a parameter no rank used with .grad None and
so skips it (no momentum, no Adam moments, no step count). The control
"unused applied as zero" is DDP with a zero gradient given to such a
parameter before the step, what the servers did before they skipped it: it
must miss by CONTROL_FACTOR x CEILING. The DDP runs are part of `ddp OUT`
(OUT/<ddp|zero>-<optimizer>.branchy.<rank>.pt);

  unused RANK OPTIMIZER ADDRS OUT
                     rank RANK of a shardps sync job on servers ADDRS
                     (OPTIMIZER sgd: momentum MU, lr LR; adam: lr U_LR_ADAM,
                     weight decay U_WD_ADAM; constant) training the branchy
                     MLP: OUT/shardps-<optimizer>.branchy.<rank>.pt
  compare-unused OUT shardps against DDP and the control, per optimizer
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DistributedSampler
from torchvision.models.resnet import BasicBlock, conv1x1

STEPS, BATCH, LR, MU = 50, 16, 2.0 ** -5, 0.9
N_TRAIN, N_EVAL, EVAL_AT = STEPS * BATCH * 2, 256, (1, 10, 25, 50)
DATA = "/usr/share/datasets/fashion-mnist"
# The tolerance, derived: 0, every quantity bit for bit. Both sides run the
# same float32 operations in the same order: the same forward and backward
# (one thread, the same weights, batches and kernels), the mean of two
# ranks' gradients (g/2 is exact, and a + b = b + a), and SGD with momentum
# as torch.optim computes it: v = mu*v + g (a multiply, then an add, on both
# sides), then w - lr*v, which torch.optim computes as one fused
# multiply-add and the server as a multiply, then a subtract: with lr a
# power of two (2^-5) the product is exact, so both round once, at the same
# place. The dynamics do not forgive a difference: with lr 0.05 (one
# rounding apart per step) the ResNet's parameters were 3e-2 apart after 50
# steps, the ViT's 6e-4, so any tolerance short of the ceiling would
# only hide a real divergence. The controls must miss by at least
# CONTROL_FACTOR times that ceiling, CEILING.
TOLERANCE, CEILING, CONTROL_FACTOR = 0.0, 1e-4, 100


class ResNet(nn.Module):
    """14x14 input, a stem, two BasicBlocks (the second strided, with a
    downsampling 1x1 conv + BatchNorm), global pooling, a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU(inplace=True))
        self.layer1 = BasicBlock(8, 8)
        self.layer2 = BasicBlock(8, 16, stride=2,
                                 downsample=nn.Sequential(conv1x1(8, 16, 2), nn.BatchNorm2d(16)))
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.avg_pool2d(x.view(-1, 1, 28, 28), 2)
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class ViT(nn.Module):
    """16 patches of 7x7 as tokens plus a class token, 2 pre-norm encoder
    layers of width 32 (2 heads, no dropout), LayerNorm, a classifier."""

    def __init__(self, dim: int = 32) -> None:
        super().__init__()
        self.patch_embedding = nn.Conv2d(1, dim, 7, stride=7)
        self.class_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.position_embedding = nn.Parameter(torch.randn(1, 17, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, 2, dim_feedforward=64, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.transformer_encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch_embedding(x.view(-1, 1, 28, 28)).flatten(2).transpose(1, 2)
        t = torch.cat([self.class_token.expand(t.shape[0], -1, -1), t], 1)
        t = self.transformer_encoder(t + self.position_embedding)
        return self.head(self.norm(t[:, 0]))


MODELS = {"resnet": ResNet, "vit": ViT}

U_STEPS, U_LR_ADAM, U_WD_ADAM = 20, 2.0 ** -8, 0.01
U_OPTIMIZERS = ("sgd", "adam")
# Adam is not bit for bit: torch.optim divides by sqrt(v) / sqrt(1 - b2^t)
# and adds eps, the server multiplies sqrt(v) by the reciprocal, and torch
# may fuse a multiply and an add. tests/python/torch_loop.py's
# optim_tolerance bounds the difference those roundings make on the same
# gradients: 16 s u (|w| + the moves so far) per weight after s steps, u =
# 2^-24. Here s = U_STEPS = 20 and the moves (at most about lr = 2^-8 a step
# for Adam) sum to 0.08, less than the largest initial weight (1/7, the
# body's bound), so the bound is 320 u x 2 max|w| = 3.8e-5 relative to the
# largest weight. The gradients are then computed on weights that differ by
# that much; Adam divides them by their own running size, so the step moves
# by about as much relatively, not more. The tolerance is the issue's
# ceiling, 1e-4, 2.6 times that bound; the measured differences are printed.
ADAM_TOLERANCE = 1e-4


def routes(step: int, rank: int) -> tuple:
    """(rare, solo): whether rank's forward in step takes each branch. rare:
    both ranks in steps 0 and 1 of every 5, neither in the other three (its
    momentum or moments would go on moving it). solo, in turn: neither rank
    (its first step is Adam's step 1 on both sides), rank 0 alone (the mean
    of rank 0's gradient and rank 1's zero), both, rank 1 alone."""
    rare = step % 5 < 2
    solo = (False, rank == 0, True, rank == 1)[step % 4]
    return rare, solo


class Branchy(nn.Module):
    """7x7 pooled pixels, a body, two residual branches a step may skip
    (route), a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(49, 32)
        self.rare = nn.Linear(32, 32)
        self.solo = nn.Linear(32, 32)
        self.head = nn.Linear(32, 10)
        self.route = (True, True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.body(F.avg_pool2d(x.view(-1, 1, 28, 28), 4).flatten(1)))
        rare, solo = self.route
        if rare:
            h = h + torch.relu(self.rare(h))
        if solo:
            h = h + torch.relu(self.solo(h))
        return self.head(h)


def u_optimizer(name: str, params):
    if name == "sgd":
        return torch.optim.SGD(params, lr=LR, momentum=MU)
    return torch.optim.Adam(params, lr=U_LR_ADAM, weight_decay=U_WD_ADAM)


def load(kind: str, n: int):
    import gzip
    with gzip.open(f"{DATA}/{kind}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(16 + n * 784), np.uint8, offset=16).reshape(n, 784)
    with gzip.open(f"{DATA}/{kind}-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(8 + n), np.uint8, offset=8)
    return torch.from_numpy(x.astype(np.float32) / 255.0), torch.from_numpy(y.astype(np.int64))


def run(name: str, rank: int, wrap, steps: int = STEPS) -> dict:
    """Trains model name as rank for steps steps; wrap(model) -> (forward
    module, step function after backward, done function). Returns the
    record (the states at EVAL_AT and after the last step)."""
    torch.manual_seed(100 + rank)
    model = MODELS[name]() if name in MODELS else Branchy()
    fwd, step, done = wrap(model)
    x, y = load("train", N_TRAIN)
    xe, ye = load("t10k", N_EVAL)
    order = list(DistributedSampler(range(N_TRAIN), num_replicas=2, rank=rank, shuffle=True,
                                    seed=0))
    rec = {"loss": [], "evals": {}}
    for s in range(steps):
        idx = order[s * BATCH:(s + 1) * BATCH]
        if isinstance(model, Branchy):
            model.route = routes(s, rank)
        loss = F.cross_entropy(fwd(x[idx]), y[idx])
        loss.backward()
        step()
        rec["loss"].append(loss.item())
        if s + 1 in EVAL_AT or s + 1 == steps:
            if isinstance(model, Branchy):
                model.route = (True, True)
            model.eval()
            with torch.no_grad():
                ev = F.cross_entropy(fwd(xe), ye).item()
            model.train()
            rec["evals"][s + 1] = (ev, {k: v.clone() for k, v in model.state_dict().items()})
    done()
    return rec


def ddp_rank(rank: int, out: str) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out}/gloo.rendezvous", rank=rank,
                            world_size=2)
    for variant, broadcast in (("ddp", True), ("nobuf", False)):
        for name in MODELS:
            def wrap(model):
                d = DDP(model, broadcast_buffers=broadcast)
                opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MU)

                def step():
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                return d, step, lambda: None
            torch.save(run(name, rank, wrap), f"{out}/{variant}.{name}.{rank}.pt")
    for opt_name in U_OPTIMIZERS:
        for variant in ("ddp", "zero"):
            def wrap(model):
                d = DDP(model, find_unused_parameters=True)
                opt = u_optimizer(opt_name, model.parameters())

                def step():
                    if variant == "zero":
                        # The control: a parameter no rank used gets a
                        # zero gradient, and the optimizer moves it.
                        for p in model.parameters():
                            if p.grad is None:
                                p.grad = torch.zeros_like(p)
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                return d, step, lambda: None
            torch.save(run("branchy", rank, wrap, U_STEPS),
                       f"{out}/{variant}-{opt_name}.branchy.{rank}.pt")
    dist.destroy_process_group()


def shardps_rank(rank: int, variant: str, addrs: str, out: str) -> None:
    import shardps.torch
    torch.set_num_threads(1)
    servers = addrs.split(",")
    half = len(servers) // len(MODELS)
    for i, name in enumerate(MODELS):
        def wrap(model):
            ps = shardps.torch.attach(model, servers[i * half:(i + 1) * half], rank, 2,
                                      init=variant)
            return model, lambda: None, ps.close
        torch.save(run(name, rank, wrap), f"{out}/{variant}.{name}.{rank}.pt")


def unused_rank(rank: int, opt_name: str, addrs: str, out: str) -> None:
    import shardps.torch
    torch.set_num_threads(1)

    def wrap(model):
        ps = shardps.torch.attach(model, addrs.split(","), rank, 2)
        return model, lambda: None, ps.close
    torch.save(run("branchy", rank, wrap, U_STEPS), f"{out}/shardps-{opt_name}.branchy.{rank}.pt")


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest difference relative to the reference's largest value."""
    a, b = a.double(), b.double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def differences(got: dict, want: dict) -> dict:
    """{quantity kind: worst relative difference} of one rank's record."""
    d = {"loss": max(abs(g - w) / abs(w) for g, w in zip(got["loss"], want["loss"])),
         "eval loss": 0.0, "parameters": 0.0, "buffers": 0.0, "counters": 0.0}
    for s, (ev, state) in want["evals"].items():
        gev, gstate = got["evals"][s]
        d["eval loss"] = max(d["eval loss"], abs(gev - ev) / abs(ev))
        for k, v in state.items():
            kind = ("counters" if v.dtype == torch.int64 else
                    "buffers" if "running" in k else "parameters")
            d[kind] = max(d[kind], rel(gstate[k], v) if v.dtype != torch.int64
                          else float((gstate[k] != v).any()))
    return d


def compare(out: str) -> None:
    ok = True
    for name in MODELS:
        state = torch.load(f"{out}/ddp.{name}.0.pt")["evals"][STEPS][1]
        n_buffers = sum(1 for k in state if "running" in k or "num_batches" in k)
        print(f"{name}: {len(state)} tensors ({n_buffers} buffers), the longest name "
              f"{max(len(k) for k in state)} bytes")
        worst = {}
        for label, variant, ref in (("shardps vs DDP", "model", "ddp"),
                                    ("control: buffers not shared", "model", "nobuf"),
                                    ("control: initial values not shared", "server", "ddp")):
            w = {}
            for r in (0, 1):
                got = torch.load(f"{out}/{variant}.{name}.{r}.pt")
                want = torch.load(f"{out}/{ref}.{name}.{r}.pt")
                for k, v in differences(got, want).items():
                    w[k] = max(w.get(k, 0.0), v)
            worst[label] = w
            print(f"{name} {label}: " + ", ".join(f"{k} {v:.2e}" for k, v in w.items()))
        agree = max(worst["shardps vs DDP"].values())
        if agree > TOLERANCE:
            print(f"FAIL: {name}: shardps and DDP differ by {agree:.2e} > {TOLERANCE:.0e}")
            ok = False
        # A model without buffers (the ViT: LayerNorm has none) has no
        # buffers to leave unshared.
        controls = ["control: initial values not shared"]
        controls += ["control: buffers not shared"] if n_buffers else []
        for label in controls:
            miss = max(worst[label].values())
            if miss < CONTROL_FACTOR * CEILING:
                print(f"FAIL: {name}: {label} misses by only {miss:.2e} "
                      f"(< {CONTROL_FACTOR} x {CEILING:.0e})")
                ok = False
    if not ok:
        sys.exit(1)
    print(f"PASS: both models agree with DDP bit for bit over {STEPS} steps (losses, "
          "parameters, buffers, eval-mode losses), and the controls miss by at least "
          f"{CONTROL_FACTOR} x {CEILING:.0e}")


def compare_unused(out: str) -> None:
    ok = True
    for opt_name, tolerance in (("sgd", TOLERANCE), ("adam", ADAM_TOLERANCE)):
        worst = {}
        for label, ref in (("shardps vs DDP", "ddp"), ("control: unused applied as zero", "zero")):
            w: dict = {}
            for r in (0, 1):
                got = torch.load(f"{out}/shardps-{opt_name}.branchy.{r}.pt")
                want = torch.load(f"{out}/{ref}-{opt_name}.branchy.{r}.pt")
                for k, v in differences(got, want).items():
                    w[k] = max(w.get(k, 0.0), v)
            worst[label] = w
            print(f"branchy {opt_name} {label}: " + ", ".join(f"{k} {v:.2e}" for k, v in w.items()))
        agree = max(worst["shardps vs DDP"].values())
        if agree > tolerance:
            print(f"FAIL: branchy {opt_name}: shardps and DDP(find_unused_parameters=True) differ "
                  f"by {agree:.2e} > {tolerance:.0e}")
            ok = False
        miss = max(worst["control: unused applied as zero"].values())
        if miss < CONTROL_FACTOR * CEILING:
            print(f"FAIL: branchy {opt_name}: the control misses by only {miss:.2e} "
                  f"(< {CONTROL_FACTOR} x {CEILING:.0e})")
            ok = False
    if not ok:
        sys.exit(1)
    print(f"PASS: parameters some steps left unused agree with DDP(find_unused_parameters=True) "
          f"over {U_STEPS} steps, momentum SGD bit for bit and Adam within {ADAM_TOLERANCE:.0e}, "
          f"and applying them a zero gradient misses by at least {CONTROL_FACTOR} x {CEILING:.0e}")


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "ddp":
        import torch.multiprocessing as mp
        mp.spawn(ddp_rank, args=(args[0],), nprocs=2)
    elif mode == "shardps":
        shardps_rank(int(args[0]), args[1], args[2], args[3])
    elif mode == "compare":
        compare(args[0])
    elif mode == "unused":
        unused_rank(int(args[0]), args[1], args[2], args[3])
    elif mode == "compare-unused":
        compare_unused(args[0])
    else:
        sys.exit(f"unknown mode {mode}")
