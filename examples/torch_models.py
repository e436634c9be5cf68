#!/usr/bin/python3
"""Real models on shardps: torchvision's ResNet-18, unmodified, or a Vision
Transformer, trained on Fashion-MNIST by an ordinary PyTorch loop with one
line added (shardps.torch.attach), under shardps-run:

    shardps-run --servers 2 --workers 2 --optimizer sgd --momentum 0.9 --lr 0.05 \\
        --lr-schedule constant -- python3 examples/torch_models.py --model resnet18 --steps 200

attach(model) joins the job shardps-run put in the environment, starts
every rank from rank 0's model (its own initialisation), shares the
BatchNorm buffers as DDP does, and leaves the job at exit. Each rank trains
on its share of the data (ps.sampler); rank 0 prints the test accuracy at
the end. The servers run the optimizer: there is no torch.optim here.
"""
import argparse
import gzip
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import shardps.torch  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"


def load(kind):
    with gzip.open(f"{DATA}/{kind}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(f"{DATA}/{kind}-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    return torch.from_numpy(x.astype(np.float32) / 255.0), torch.from_numpy(y.astype(np.int64))


class ViT(nn.Module):
    """4x4 patches of the 28x28 image as 49 tokens and a class token,
    learned position embeddings, a pre-norm nn.TransformerEncoder, LayerNorm
    and a linear classifier."""

    def __init__(self, dim=64, depth=4, heads=4):
        super().__init__()
        self.patch_embedding = nn.Conv2d(1, dim, 4, stride=4)
        self.class_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.position_embedding = nn.Parameter(torch.randn(1, 50, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.transformer_encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        t = self.patch_embedding(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.class_token.expand(len(t), -1, -1), t], 1)
        return self.head(self.norm(self.transformer_encoder(t + self.position_embedding)[:, 0]))


class Gray(nn.Module):
    """torchvision's ResNet-18 as it is, fed the grayscale image on its 3
    input channels."""

    def __init__(self):
        super().__init__()
        self.net = torchvision.models.resnet18(num_classes=10)

    def forward(self, x):
        return self.net(x.expand(-1, 3, -1, -1))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["resnet18", "vit"], default="resnet18")
    p.add_argument("--steps", type=int, default=200, help="training steps (default 200)")
    p.add_argument("--batch", type=int, default=64, help="per rank (default 64)")
    p.add_argument("--test", type=int, default=2000, help="test images rank 0 scores at the end")
    a = p.parse_args()
    torch.manual_seed(int(os.environ.get("RANK", "0")))  # rank 0's values win anyway
    x, y = load("train")
    model = Gray() if a.model == "resnet18" else ViT()
    ps = shardps.torch.attach(model)                                  # the one line
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y),
                                         batch_size=a.batch, sampler=ps.sampler(x, seed=1),
                                         drop_last=True)
    step, epoch = 0, 0
    while step < a.steps:
        loader.sampler.set_epoch(epoch)
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            ps.report(loss)  # optional: the launcher's progress line shows it
            step += 1
            if step == a.steps:
                break
        epoch += 1
    ps.close()
    if ps.rank == 0:
        tx, ty = load("t10k")
        model.eval()
        with torch.no_grad():
            right = sum((model(tx[i:i + 500]).argmax(1) == ty[i:i + 500]).sum().item()
                        for i in range(0, a.test, 500))
        print(f"{a.model}: {step} steps, last loss {loss.item():.4f}, test accuracy "
              f"{right / a.test:.4f} on {a.test} images", flush=True)


if __name__ == "__main__":
    main()
