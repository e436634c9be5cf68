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
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

# The models, at their default (the proof's) sizes: the full runs of
# examples/torch_models.py train them wider.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples"))
from small_models import ResNet, ViT  # noqa: E402

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


MODELS = {"resnet": ResNet, "vit": ViT}


def load(kind: str, n: int):
    import gzip
    with gzip.open(f"{DATA}/{kind}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(16 + n * 784), np.uint8, offset=16).reshape(n, 784)
    with gzip.open(f"{DATA}/{kind}-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(8 + n), np.uint8, offset=8)
    return torch.from_numpy(x.astype(np.float32) / 255.0), torch.from_numpy(y.astype(np.int64))


def run(name: str, rank: int, wrap, start=None) -> dict:
    """Trains model name as rank; wrap(model) -> (forward module, step
    function after backward, done function). Returns the record."""
    torch.manual_seed(100 + rank)
    model = MODELS[name]()
    fwd, step, done = wrap(model)
    x, y = load("train", N_TRAIN)
    xe, ye = load("t10k", N_EVAL)
    order = list(DistributedSampler(range(N_TRAIN), num_replicas=2, rank=rank, shuffle=True,
                                    seed=0))
    rec = {"loss": [], "evals": {}}
    for s in range(STEPS):
        idx = order[s * BATCH:(s + 1) * BATCH]
        loss = F.cross_entropy(fwd(x[idx]), y[idx])
        loss.backward()
        step()
        rec["loss"].append(loss.item())
        if s + 1 in EVAL_AT:
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


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "ddp":
        import torch.multiprocessing as mp
        mp.spawn(ddp_rank, args=(args[0],), nprocs=2)
    elif mode == "shardps":
        shardps_rank(int(args[0]), args[1], args[2], args[3])
    elif mode == "compare":
        compare(args[0])
    else:
        sys.exit(f"unknown mode {mode}")
