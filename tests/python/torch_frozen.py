"""The classic fine-tuning recipe, written as a newcomer writes it: a
torchvision ResNet-18 whose backbone is frozen (requires_grad=False) under
a new head, attached with attach(model) alone and trained a few steps
under shardps-run (issue 33 point 1, issue 34 point 13). On two servers
the one that draws no part of the head holds frozen tensors and BatchNorm
buffers only; that server used to hold the job back for good after step 0
(sync) or refuse the workers' clocks (async).

  torch_frozen.py STEPS OUT   trains STEPS steps; rank r writes its final
                              state_dict to OUT.r and its state before the
                              first step to OUT.r.start
"""
import os
import sys

import torch
import torch.nn.functional as F
import torchvision

import shardps.torch


def main(steps: int, out: str) -> None:
    rank = int(os.environ["RANK"])
    torch.manual_seed(rank)
    model = torchvision.models.resnet18()
    for p in model.parameters():
        p.requires_grad = False
    model.fc = torch.nn.Linear(model.fc.in_features, 10)
    ps = shardps.torch.attach(model)
    ps.sync()
    torch.save(model.state_dict(), f"{out}.{rank}.start")
    g = torch.Generator().manual_seed(11 + rank)
    model.train()
    for _ in range(steps):
        x = torch.randn(4, 3, 32, 32, generator=g)
        y = torch.randint(0, 10, (4,), generator=g)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        ps.report(loss)
    ps.close()
    torch.save(model.state_dict(), f"{out}.{rank}")
    print(f"rank {rank}: {steps} steps, loss {float(loss):.4f}", flush=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(int(sys.argv[1]), sys.argv[2])
