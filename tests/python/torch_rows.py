"""shardps.torch.ServedEmbedding against PyTorch alone (tests/integration/torch_rows.sh).

    torch_rows.py ADDR STEPS

One worker of a sync job on the server ADDR (sgd, lr 0.1, momentum 0): a
model of an EmbeddingBag (mean) served by the row table "emb" (dim 4,
uniform init) and a Linear(4, 1) trains STEPS steps on batches of int64 IDs
(negative ones and repeats among them); the same model in PyTorch alone
(nn.EmbeddingBag over the IDs' rows as the server first read them, the same
initial Linear, torch.optim.SGD) must end with the same rows and weights
within 1e-6. An attach with accumulate=2 is refused naming the table.
"""
import sys

import numpy as np
import torch

import shardps.torch as st

LR = 0.1


class Net(torch.nn.Module):
    def __init__(self, emb):
        super().__init__()
        self.emb = emb
        self.fc = torch.nn.Linear(4, 1)

    def forward(self, ids, offsets):
        return self.fc(self.emb(ids, offsets)).squeeze(1)


class Ref(torch.nn.Module):
    def __init__(self, rows, fc):
        super().__init__()
        self.emb = torch.nn.EmbeddingBag(rows.shape[0], 4, mode="mean")
        self.fc = torch.nn.Linear(4, 1)
        with torch.no_grad():
            self.emb.weight.copy_(rows)
            self.fc.weight.copy_(fc.weight)
            self.fc.bias.copy_(fc.bias)

    def forward(self, idx, offsets):
        return self.fc(self.emb(idx, offsets)).squeeze(1)


VOCAB = np.array([-1, 5, -(2**63), 42, 2**62, 7, 123456789, -99], np.int64)


def batch(step):
    g = torch.Generator().manual_seed(step)
    idx = torch.randint(0, len(VOCAB), (12,), generator=g)
    offsets = torch.tensor([0, 3, 7, 9])
    y = torch.randn(4, generator=g)
    return idx, offsets, y


def main(addr, steps):
    bad = Net(st.ServedEmbedding("emb", 4, init="uniform", lo=-0.5, hi=0.5))
    try:
        st.attach(bad, addr, 0, 1, accumulate=2, chunk_bytes=4096, seed=3)
        raise AssertionError("accumulate=2 was accepted")
    except ValueError as e:
        assert "ServedEmbedding emb: one forward and backward per step" in str(e), e

    model = Net(st.ServedEmbedding("emb", 4, mode="mean", init="uniform", lo=-0.5, hi=0.5))
    ps = st.attach(model, addr, 0, 1, chunk_bytes=4096, seed=3)
    rows0 = torch.from_numpy(ps.client.pull_rows("emb", VOCAB))
    assert torch.all(rows0.abs() <= 0.5) and torch.any(rows0 != 0)
    ref = Ref(rows0, model.fc)
    opt = torch.optim.SGD(ref.parameters(), lr=LR)
    for step in range(steps):
        idx, offsets, y = batch(step)
        loss = ((model(torch.from_numpy(VOCAB)[idx], offsets) - y) ** 2).mean()
        loss.backward()
        opt.zero_grad()
        ((ref(idx, offsets) - y) ** 2).mean().backward()
        opt.step()
    # The last step's rows (its push was acknowledged once applied), then
    # the last step's dense weights, which close() pulls into the model.
    rows = torch.from_numpy(ps.client.pull_rows("emb", VOCAB))
    ps.close()
    diff_rows = (rows - ref.emb.weight).abs().max().item()
    assert diff_rows <= 1e-6, f"rows differ by {diff_rows}"
    assert (rows - rows0).abs().max().item() > 1e-3, "the rows did not train"
    diff_fc = max((model.fc.weight - ref.fc.weight).abs().max().item(),
                  (model.fc.bias - ref.fc.bias).abs().max().item())
    assert diff_fc <= 1e-6, f"Linear differs by {diff_fc}"
    print(f"{steps} steps: rows within {diff_rows:.2g} and the Linear within {diff_fc:.2g} of "
          "PyTorch alone")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
