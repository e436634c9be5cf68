"""A ServedEmbedding used twice in one forward (a tied table, as for a user
and an item field) against PyTorch alone (tests/integration/torch_rows.sh).

    torch_rows_tied.py ADDR RANK WORLD STEPS

Rank RANK of WORLD of a sync job on the server ADDR (sgd, lr 0.1, momentum
0): the table "emb" (dim 4, uniform init) is looked up for the users and
again for the items of each batch (IDs shared between the two, repeats
within each), a Linear(8, 1) on [user, user * item]; on step 1 a third
lookup's output is left out of the loss, and on step 2 the last rank does
not use the table at all (it pushes it empty). The same model in PyTorch alone,
one nn.Embedding used the same ways over the rows the server first read,
trains by torch.optim.SGD on the global batch (every rank's, the mean of
the ranks' losses, which is what the server's mean of the ranks' pushes
makes): rows and dense weights must end within TOL of it. With one worker,
the remaining refusals: a use after the step's push, and a backward that
reaches the forward of an earlier step; then it prints the rows it should
have pulled, each ID once per step ("rows pulled: N"), for the test to
hold against the server's count.
"""
import sys

import numpy as np
import torch

import shardps.torch as st

LR = 0.1
# Float32 rounding per step is a few ulps of the weights (|w| < 1: ulp
# 6e-8 at most): the sum of the uses' and ranks' gradients is added in
# another order here than there, and the rate times the gradient rounds
# apart; over 5 steps that is under 1e-6, doubled for the Linear's share.
TOL = 2e-6
VOCAB = np.array([-1, 5, -(2**63), 42, 2**62, 7, 123456789, -99], np.int64)


class Tied(torch.nn.Module):
    def __init__(self, emb):
        super().__init__()
        self.emb = emb
        self.fc = torch.nn.Linear(8, 1)

    def forward(self, users, items, extra=None, skip=False):
        if skip:  # a step without the table
            return self.fc(torch.ones(len(users), 8)).squeeze(1)
        u, i = self.emb(users), self.emb(items)
        if extra is not None:
            self.emb(extra)  # a lookup whose output the loss never sees
        return self.fc(torch.cat([u, u * i], 1)).squeeze(1)


def batch(step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    users = torch.randint(0, len(VOCAB), (6,), generator=g)
    items = torch.randint(0, len(VOCAB), (6,), generator=g)
    return users, items, torch.randn(6, generator=g)


def ids(idx):
    return torch.from_numpy(VOCAB)[idx]


def union(*idx):
    """How many distinct IDs the index tensors name: what a step pulls."""
    return len(set(torch.cat(idx).tolist()))


def refusals(ps, model):
    """Returns the rows the three forwards here pulled."""
    users, items, y = batch(99, 0)
    loss = ((model(ids(users), ids(items)) - y) ** 2).mean()
    loss.backward()  # the step's push
    try:
        model.emb(ids(users))
        raise AssertionError("a use after the step's push was accepted")
    except RuntimeError as e:
        assert "ServedEmbedding emb: used after the gradient of its step was pushed" in str(e), e
    stale = ((model(ids(users), ids(items)) - y) ** 2).mean()
    model(ids(users), ids(items))  # the next step starts
    try:
        stale.backward()
        raise AssertionError("a backward into an earlier step's forward was accepted")
    except RuntimeError as e:
        assert "ServedEmbedding emb: a backward reached a forward of an earlier step" in str(e), e
    print("refused: a use after the step's push, a backward into an earlier step", flush=True)
    return 3 * union(users, items)


def main(addr, rank, world, steps):
    model = Tied(st.ServedEmbedding("emb", 4, init="uniform", lo=-0.5, hi=0.5))
    ps = st.attach(model, addr, rank, world, chunk_bytes=4096, seed=3)
    rows0 = torch.from_numpy(ps.client.pull_rows("emb", VOCAB))
    ref_emb = torch.nn.Embedding(len(VOCAB), 4)
    ref_fc = torch.nn.Linear(8, 1)
    with torch.no_grad():
        ref_emb.weight.copy_(rows0)
        ref_fc.weight.copy_(model.fc.weight)
        ref_fc.bias.copy_(model.fc.bias)
    opt = torch.optim.SGD([ref_emb.weight, ref_fc.weight, ref_fc.bias], lr=LR)
    pulled = 2 * len(VOCAB)  # rows0 and the last rows, below
    for step in range(steps):
        users, items, y = batch(step, rank)
        extra = ids(torch.tensor([0, 3, 3])) if step == 1 else None
        skip = step == 2 and rank == world - 1
        if not skip:
            pulled += union(users, items, torch.tensor([0, 3]) if step == 1 else users)
        ((model(ids(users), ids(items), extra, skip) - y) ** 2).mean().backward()
        opt.zero_grad()
        total = 0
        for r in range(world):
            users, items, y = batch(step, r)
            if step == 2 and r == world - 1:
                h = torch.ones(len(users), 8)
            else:
                u, i = ref_emb(users), ref_emb(items)
                h = torch.cat([u, u * i], 1)
            total = total + ((ref_fc(h).squeeze(1) - y) ** 2).mean()
        (total / world).backward()
        opt.step()
    ps.sync()  # the last step applied, its weights pulled
    rows = torch.from_numpy(ps.client.pull_rows("emb", VOCAB))
    diff_rows = (rows - ref_emb.weight).abs().max().item()
    diff_fc = max((model.fc.weight - ref_fc.weight).abs().max().item(),
                  (model.fc.bias - ref_fc.bias).abs().max().item())
    assert (rows - rows0).abs().max().item() > 1e-3, "the rows did not train"
    assert diff_rows <= TOL, f"rows differ by {diff_rows}"
    assert diff_fc <= TOL, f"Linear differs by {diff_fc}"
    print(f"rank {rank} of {world}, {steps} steps, the table used twice: rows within "
          f"{diff_rows:.2g} and the Linear within {diff_fc:.2g} of PyTorch alone", flush=True)
    if world == 1:
        pulled += refusals(ps, model)
        # Each ID once per step, however many uses name it.
        print(f"rows pulled: {pulled}", flush=True)
    ps.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
