"""shardps.torch in the loops people write (tests/integration/torch_loop.sh).
Each mode below runs with its arguments; several, separated by "--", run
one after another in one process.

  loop ADDR VARIANT STEPS OUT   one worker of a fresh server trains a small MLP
                                for STEPS fixed batches and writes its final
                                parameters to OUT. VARIANT is what the loop
                                does to the gradients right after backward,
                                while their pushes are in flight: plain
                                (nothing), zero_grad (PyTorch 1.13's default,
                                zeroed in place), none (set_to_none=True),
                                inplace (each .grad scaled by NaN in place)
                                or drop (each .grad deleted); or accumulate:
                                attach(accumulate=2), each step two forward
                                and backward passes of the batch at half the
                                loss (a power of two: the sum is the plain
                                gradient exactly). Every variant must end
                                with the plain loop's parameters, bit for bit.
  refuse ADDR CASE              a loop attach cannot serve raises, with the
                                sentence to read: optimizer (an
                                optimizer.step() left in, with its
                                lr_scheduler), scaler (a GradScaler's
                                step), twice (a second backward before the
                                next forward), args (attach's accumulate
                                and clip_norm out of range)
  clip ADDR                     attach(clip_norm=0.05) on plain SGD, lr 0.5:
                                the step is w - lr * g * min(1, 0.05/|g|) per
                                tensor, as the C worker's --clip-norm
  shard ADDR RANK OUT           rank RANK of 2 in a sync job trains one epoch
                                of a 100-sample dataset through a DataLoader
                                with ps.sampler (batches of 10) and writes the
                                sample indices it trained on to OUT; rank 0
                                first checks that check_sampler refuses a
                                shuffling DataLoader and another rank's
                                sampler, and that the shares of 103 samples
                                cover them (one repeated, or one left out
                                with drop_last)
  optim ADDR KIND LR MU WD STEPS
                                the server's optimizer KIND (sgd, nesterov,
                                adam, adamw; momentum MU, weight decay WD,
                                constant LR) against torch.optim's on the
                                same weights and the same gradient, after
                                each of STEPS steps, within the tolerance
                                below (optim_tolerance)
"""
import sys

import numpy as np
import torch
import torch.nn.functional as F

import shardps.torch
from expect import raises

IN, HIDDEN, OUT, BATCH = 32, 128, 10, 16


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(),
                               torch.nn.Linear(HIDDEN, OUT))


def batches(steps, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(BATCH, IN, generator=g), torch.randint(0, OUT, (BATCH,), generator=g))
            for _ in range(steps)]


def after_backward(model, variant):
    """What a loop does to the gradients while their pushes travel."""
    if variant == "zero_grad":
        model.zero_grad()
    elif variant == "none":
        model.zero_grad(set_to_none=True)
    elif variant == "inplace":
        for p in model.parameters():
            p.grad.mul_(float("nan"))
    elif variant == "drop":
        for p in model.parameters():
            del p.grad
    elif variant != "plain":
        raise SystemExit(f"no variant {variant}")


def attached(addr, steps, **kw):
    torch.manual_seed(0)
    model = mlp()
    # 1 KiB chunks: each tensor travels as several frames, corked until the
    # pull, so the pushes are still in flight when the loop goes on.
    return model, shardps.torch.attach(model, addr, 0, 1, seed=3, chunk_bytes=1024,
                                       total_steps=steps, **kw)


def loop(addr, variant, steps, out):
    model, ps = attached(addr, steps, accumulate=2 if variant == "accumulate" else 1)
    for x, y in batches(steps):
        if variant == "accumulate":
            for _ in range(2):
                (F.cross_entropy(model(x), y) / 2).backward()
            continue
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        after_backward(model, variant)
    ps.close()
    with open(out, "wb") as f:
        for p in model.parameters():
            f.write(p.detach().numpy().tobytes())
    print(f"PASS loop {variant}")


def refuse(addr, case):
    if case == "args":
        for kw, words in (({"accumulate": 0}, "accumulate is the count"),
                          ({"accumulate": 1.5}, "accumulate is the count"),
                          ({"clip_norm": -1.0}, "clip_norm is an L2 norm"),
                          ({"clip_norm": float("nan")}, "clip_norm is an L2 norm")):
            raises(ValueError, lambda: shardps.torch.attach(mlp(), addr, 0, 1, **kw), words)
        print("PASS refuse args")
        return
    model, ps = attached(addr, 3)
    (x, y), = batches(1)
    if case in ("optimizer", "scaler"):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        # On the CPU PyTorch 1.13 disables the scaler (with a warning): its
        # step is the optimizer's.
        scaler = torch.cuda.amp.GradScaler(enabled=case == "scaler" and torch.cuda.is_available())
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        scaler.scale(F.cross_entropy(model(x), y)).backward()
        scaler.step(opt)
        scaler.update()
        sched.step()
        opt.zero_grad()
        raises(RuntimeError, lambda: model(x),
               "0.weight was changed in place since its weights were pulled (an optimizer.step()")
    elif case == "twice":
        loss = F.cross_entropy(model(x), y)
        loss.backward(retain_graph=True)
        raises(RuntimeError, loss.backward, "got a gradient from more than 1 backward pass")
    else:
        raise SystemExit(f"no case {case}")
    ps.client.abandon()
    print(f"PASS refuse {case}")


def clip(addr):
    lr, max_norm = 0.5, 0.05
    model, ps = attached(addr, 1, clip_norm=max_norm)
    ref = mlp()
    ref.load_state_dict(model.state_dict())  # the weights pulled at attach
    (x, y), = batches(1)
    F.cross_entropy(model(x), y).backward()
    F.cross_entropy(ref(x), y).backward()
    ps.close()
    clipped = 0
    for name, p, r in zip(ps._names, model.parameters(), ref.parameters()):
        g = r.grad.numpy().reshape(-1)
        norm = np.sqrt(np.sum(g.astype(np.float64) ** 2))
        if norm > max_norm:
            g = g * np.float32(max_norm / norm)
            clipped += 1
        want = r.detach().numpy().reshape(-1) - np.float32(lr) * g
        got = p.detach().numpy().reshape(-1)
        # The squares' sum in double may be rounded differently by NumPy and
        # PyTorch: the scale by one float32 ulp, the weight by one more.
        tol = 2 * 2.0 ** -23 * (np.abs(want) + lr * np.abs(g))
        assert (np.abs(got - want) <= tol).all(), f"{name}: {got} != {want}"
    assert clipped == 4, f"only {clipped} of 4 tensors' gradients were over {max_norm}"
    print("PASS clip")


def shard(addr, rank, out):
    n, world = 100, 2
    data = torch.utils.data.TensorDataset(torch.arange(n), torch.randn(n, IN),
                                          torch.randint(0, OUT, (n,)))
    if rank == 0:
        plain = torch.utils.data.DataLoader(data, batch_size=10, shuffle=True)
        raises(ValueError, lambda: shardps.torch.check_sampler(plain, 0, world),
               "rank 0 of 2 draws its data from a RandomSampler, which deals every rank "
               "the whole dataset")
        other = shardps.torch.sampler(data, 1, world)
        raises(ValueError, lambda: shardps.torch.check_sampler(other, 0, world),
               "its DistributedSampler deals rank 1 of 2")
        shardps.torch.check_sampler(plain, 0, 1)  # one worker: all of it is its share
        for drop_last, repeated, left_out in ((False, 1, 0), (True, 0, 1)):
            shares = [list(shardps.torch.sampler(range(103), r, world, drop_last=drop_last))
                      for r in range(world)]
            seen = shares[0] + shares[1]
            assert len(set(shares[0]) & set(shares[1])) == repeated, (drop_last, shares)
            assert len(set(range(103)) - set(seen)) == left_out, (drop_last, shares)
    torch.manual_seed(0)
    model = mlp()
    ps = shardps.torch.attach(model, addr, rank, world, seed=3, total_steps=n // world // 10)
    loader = torch.utils.data.DataLoader(data, batch_size=10, sampler=ps.sampler(data, seed=7))
    ps.check_sampler(loader)
    seen = []
    loader.sampler.set_epoch(0)
    for idx, x, y in loader:
        F.cross_entropy(model(x), y).backward()
        seen += idx.tolist()
    ps.close()
    with open(out, "w") as f:
        f.write(" ".join(map(str, seen)) + "\n")
    print(f"PASS shard rank {rank}: {len(seen)} samples")


def torch_optimizer(kind, p, lr, mu, wd):
    if kind == "sgd":
        return torch.optim.SGD([p], lr=lr, momentum=mu, weight_decay=wd)
    if kind == "nesterov":
        return torch.optim.SGD([p], lr=lr, momentum=mu, weight_decay=wd, nesterov=True)
    if kind == "adam":
        return torch.optim.Adam([p], lr=lr, weight_decay=wd)
    if kind == "adamw":
        return torch.optim.AdamW([p], lr=lr, weight_decay=wd)
    raise SystemExit(f"no optimizer {kind}")


def optim_tolerance(step, w, moved):
    """The largest difference float32 allows after step steps, per weight.

    Both sides compute the same formula in float32, each operation rounded
    to nearest (relative error at most u = 2^-24), but not the same way:
    torch's kernels may fuse a multiply and an add (one rounding instead of
    two), divide by sqrt(bias correction) where the server multiplies by its
    reciprocal, and round the step size from double at another point. One
    step of the longest rule (AdamW: decay, moments, square root, divide,
    update) rounds at most 16 times; each rounding is relative to a value no
    larger than the weight or the move it makes, so one step's results may
    differ by 16 u (|w| + |move|). The moments carry such differences into
    later steps, where they act on moves of the same size again: after s
    steps the bound is 16 s u (|w| + the sum of |move| so far), per weight.
    """
    return 16 * step * 2.0 ** -24 * (np.abs(w) + moved)


def optim(addr, kind, lr, mu, wd, steps):
    n = 4096
    c = shardps.Client(addr, rank=0, world=1, connect_timeout=10, total_steps=steps)
    c.declare("w", [64, 64], shardps.INIT_HE_UNIFORM, 64, 64)
    c.connect()
    w = np.empty(n, np.float32)
    c.pull([w])
    p = torch.nn.Parameter(torch.from_numpy(w.copy()))
    opt = torch_optimizer(kind, p, lr, mu, wd)
    g = np.random.default_rng(5).standard_normal(n).astype(np.float32)
    moved = np.zeros(n)
    for step in range(1, steps + 1):
        before = p.detach().numpy().copy()
        p.grad = torch.from_numpy(g.copy())
        opt.step()
        want = p.detach().numpy()
        moved += np.abs(want.astype(np.float64) - before)
        c.push(0, g, block=False)
        c.pull([w])
        tol = optim_tolerance(step, want, moved)
        diff = np.abs(w.astype(np.float64) - want)
        worst = int(np.argmax(diff / tol))
        assert (diff <= tol).all(), (f"{kind} step {step}: weight {worst} is {w[worst]!r}, "
                                     f"torch.optim's {want[worst]!r} (tolerance {tol[worst]:.3g})")
        # The tolerance is far below what a step moves: a wrong coefficient,
        # bias correction or step count shows.
        assert moved.max() > 1000 * tol.max(), (moved.max(), tol.max())
        print(f"{kind} step {step}: largest difference {diff.max():.3g}, "
              f"{(diff / tol).max():.3f} of the tolerance, largest move {moved.max():.3g}")
    c.close()
    print(f"PASS optim {kind}")


def run(mode, *args):
    if mode == "loop":
        loop(args[0], args[1], int(args[2]), args[3])
    elif mode == "refuse":
        refuse(*args)
    elif mode == "shard":
        shard(args[0], int(args[1]), args[2])
    elif mode == "clip":
        clip(*args)
    elif mode == "optim":
        optim(args[0], args[1], *map(float, args[2:5]), int(args[5]))
    else:
        raise SystemExit(f"no mode {mode}")


if __name__ == "__main__":
    # Several runs, separated by "--", in one process: PyTorch takes seconds
    # to import.
    call = []
    for arg in sys.argv[1:] + ["--"]:
        if arg != "--":
            call.append(arg)
        elif call:
            run(*call)
            call = []
