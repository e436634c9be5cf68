"""shardps.torch in the loops people write (tests/integration/torch_loop.sh).

  loop ADDR VARIANT STEPS OUT   one worker of a fresh server trains a small MLP
                                for STEPS fixed batches and writes its final
                                parameters to OUT. VARIANT is what the loop
                                does to the gradients right after backward,
                                while their pushes are in flight: plain
                                (nothing), zero_grad (PyTorch 1.13's default,
                                zeroed in place), none (set_to_none=True),
                                inplace (each .grad scaled by NaN in place)
                                or drop (each .grad deleted). Every variant
                                must end with the plain loop's parameters,
                                bit for bit.
"""
import sys

import torch
import torch.nn.functional as F

import shardps.torch

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


def loop(addr, variant, steps, out):
    torch.manual_seed(0)
    model = mlp()
    # 1 KiB chunks: each tensor travels as several frames, corked until the
    # pull, so the pushes are still in flight when the loop goes on.
    ps = shardps.torch.attach(model, addr, 0, 1, seed=3, chunk_bytes=1024, total_steps=steps)
    for x, y in batches(steps):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        after_backward(model, variant)
    ps.close()
    with open(out, "wb") as f:
        for p in model.parameters():
            f.write(p.detach().numpy().tobytes())
    print(f"PASS loop {variant}")


if __name__ == "__main__":
    if sys.argv[1] == "loop":
        loop(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        raise SystemExit(f"no mode {sys.argv[1]}")
