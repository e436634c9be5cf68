"""The two small Fashion-MNIST models of the proof against DDP
(tests/python/ddp_proof.py) and of their full runs (examples/torch_models.py
--model resnet|vit): a ResNet of torchvision's BasicBlock and a Vision
Transformer of nn.TransformerEncoder. The defaults are the proof's sizes;
the full runs widen them (docs/results.md says which sizes and why). Both
take a batch of 28x28 images, flat (N, 784) or (N, 1, 28, 28).
"""
import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models.resnet import BasicBlock, conv1x1


class ResNet(nn.Module):
    """A stem, two BasicBlocks (the second strided, with a downsampling 1x1
    conv + BatchNorm), global pooling, a classifier. The stem runs on the
    image halved by average pooling (14x14: the proof's, cheap), or with
    stem_pool on the full 28x28 image, max-pooled after it as torchvision's
    ResNet stems are (the full runs: the first convolution sees every pixel)."""

    def __init__(self, width: int = 8, stem_pool: bool = False) -> None:
        super().__init__()
        self.stem_pool = stem_pool
        self.stem = nn.Sequential(nn.Conv2d(1, width, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU(inplace=True))
        self.layer1 = BasicBlock(width, width)
        self.layer2 = BasicBlock(width, 2 * width, stride=2,
                                 downsample=nn.Sequential(conv1x1(width, 2 * width, 2),
                                                          nn.BatchNorm2d(2 * width)))
        self.fc = nn.Linear(2 * width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.view(-1, 1, 28, 28)
        if self.stem_pool:
            x = F.max_pool2d(self.stem(x), 2)
        else:
            x = self.stem(F.avg_pool2d(x, 2))
        x = self.layer2(self.layer1(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class ViT(nn.Module):
    """Patches of patch x patch pixels as tokens plus a class token, learned
    position embeddings, depth pre-norm encoder layers of width dim (heads
    heads, a feed-forward of 2 x dim, no dropout), LayerNorm, a classifier."""

    def __init__(self, dim: int = 32, depth: int = 2, heads: int = 2, patch: int = 7) -> None:
        super().__init__()
        if 28 % patch:
            raise ValueError(f"ViT: the patch side must divide 28; got {patch}")
        self.patch_embedding = nn.Conv2d(1, dim, patch, stride=patch)
        self.class_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.position_embedding = nn.Parameter(torch.randn(1, (28 // patch)**2 + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=2 * dim, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.transformer_encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch_embedding(x.view(-1, 1, 28, 28)).flatten(2).transpose(1, 2)
        t = torch.cat([self.class_token.expand(t.shape[0], -1, -1), t], 1)
        t = self.transformer_encoder(t + self.position_embedding)
        return self.head(self.norm(t[:, 0]))
