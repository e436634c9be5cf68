#!/usr/bin/python3
"""A DLRM-style click model on examples/recsys_data.py's click logs:

    python3 examples/torch_recsys.py --mode local|ddp|sync|async [--small] [--hash-buckets 65536]

generates the data set if it is missing (runs/recsys/PRESET-seedS), trains
one epoch, scores the held-out samples and ends with one JSON line:
test_auc, planted_auc (the model that drew the labels: the best any model
can score), samples_per_second (training only, all processes), rows
(embedding rows that received a gradient: those a parameter server
stores; in sync and async those the servers store at the end), mode, and
the peak resident memory.

--mode local trains in this process; --mode ddp in 2 processes of PyTorch's
DistributedDataParallel (gloo), each holding every table, each taking half
of every batch (the same global batch and so the same updates as local).
--hash-buckets B is the control: every field's IDs hashed into B rows
(mix64(id) mod B) instead of one row per distinct ID. --mode sync and
async (after make) run this script as the 2 workers of a shardps-run job
of 2 servers (run_served): every field's embedding a row table served by
shardps.torch.ServedEmbedding with per-row Adagrad, the MLPs shardps
tensors (attach), each rank reading its share of every batch.

The model (DLRM, Naumov et al. 2019): one nn.Embedding(sparse=True) per
field, a bottom MLP over the dense features to the embedding dimension, the
dot products of every pair of those F + 1 vectors, and a top MLP over them
and the dense vector to one logit. The embeddings train with sparse
Adagrad, the MLPs with Adam. LocalTables gives each distinct 64-bit ID its
own row of an nn.Embedding, starting from the value a shardps table's
uniform initializer gives that ID (common/row_init.h: a pure function of
seed, table, ID); served_model serves the same embeddings from shardps row
tables, the rest of the model unchanged.
"""
import argparse
import json
import os
import resource
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import recsys_data  # noqa: E402


def row_init_uniform(seed, table, ids, dim, lo, hi):
    """The rows shardps' uniform initializer gives ids (common/row_init.h):
    element e of row id is lo + (hi - lo) * u, u the top 53 bits of
    mix64(key + e * golden), key = mix64(mix64(mix64(seed) ^ table) ^ id)."""
    mix64 = recsys_data.mix64
    base = mix64(mix64(np.array([seed], dtype=np.uint64)) ^ np.uint64(table))
    out = np.empty((ids.size, dim), dtype=np.float32)
    steps = np.arange(dim, dtype=np.uint64) * recsys_data.GOLDEN
    for i in range(0, ids.size, 1 << 18):  # bounded temporaries
        key = mix64(base ^ ids[i:i + (1 << 18)].view(np.uint64))
        with np.errstate(over="ignore"):
            words = mix64(key[:, None] + steps[None, :])
        u = (words >> np.uint64(11)).astype(np.float64) * 2.0**-53
        out[i:i + (1 << 18)] = lo + (hi - lo) * u
    return out


class LocalTables:
    """Every field's table in this process: one row per distinct ID of the
    data (train and test, so a test-only ID reads its initial value, as an
    unstored shardps row does), or per hash bucket with buckets > 0.
    index() turns a batch's 64-bit IDs into the rows the model looks up."""

    def __init__(self, ids_parts, dim, seed, init_bound, buckets):
        self.buckets = buckets
        self.vocab, self.emb = [], torch.nn.ModuleList()
        for f in range(ids_parts[0].shape[1]):
            if buckets:
                keys = np.arange(buckets, dtype=np.int64)
            else:
                keys = np.unique(np.concatenate([p[:, f] for p in ids_parts]))
                self.vocab.append(keys)
            e = torch.nn.Embedding(keys.size, dim, sparse=True)
            with torch.no_grad():
                e.weight.copy_(torch.from_numpy(row_init_uniform(seed, f, keys, dim, -init_bound, init_bound)))
            self.emb.append(e)
        self.touched = [np.zeros(e.num_embeddings, dtype=bool) for e in self.emb]

    def index(self, ids):
        """Rows of a [samples x fields] int64 ID array, as int64."""
        rows = np.empty_like(ids)
        for f in range(ids.shape[1]):
            if self.buckets:
                h = recsys_data.mix64(ids[:, f].view(np.uint64)) % np.uint64(self.buckets)
                rows[:, f] = h.astype(np.int64)
            else:
                rows[:, f] = np.searchsorted(self.vocab[f], ids[:, f])
        return rows

    def trained(self, rows):
        """Marks rows [samples x fields] as having received a gradient."""
        for f, t in enumerate(self.touched):
            t[rows[:, f]] = True

    def rows(self):
        return int(sum(t.sum() for t in self.touched))


def mlp(sizes):
    layers = []
    for i in range(len(sizes) - 1):
        layers += [torch.nn.Linear(sizes[i], sizes[i + 1]), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


class DLRM(torch.nn.Module):
    """Embeddings (one module per field, whatever serves them), a bottom MLP
    from the dense features to their dimension, every pairwise dot product
    of those F + 1 vectors, and a top MLP from the vectors and the dots to a
    click logit. The vectors themselves reach the top MLP too (DLRM feeds it
    only the dense one): that is the per-ID first-order term, which plain
    DLRM has to learn through dot products with the dense vector and learns
    markedly slower (docs/recsys.md)."""

    def __init__(self, embeddings, dense, dim, seed, emb_scale=1.0, top=(256, 128)):
        super().__init__()
        self.emb = embeddings
        self.emb_scale = emb_scale
        torch.manual_seed(seed)  # the same MLPs whatever serves the embeddings
        self.bottom = torch.nn.Sequential(mlp([dense, 64, dim]), torch.nn.ReLU())
        n = len(embeddings) + 1
        self.pairs = torch.triu_indices(n, n, 1)
        self.top = mlp([n * dim + n * (n - 1) // 2, *top, 1])

    def forward(self, rows, dense):
        t = torch.stack([self.bottom(dense)] + [e(rows[:, f]) * self.emb_scale
                                                for f, e in enumerate(self.emb)], 1)
        dots = torch.bmm(t, t.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([t.flatten(1), dots], 1)).squeeze(1)


def load(a):
    """The data set's arrays and meta, generated first when missing."""
    preset = "small" if a.small else "default"
    data = a.data or recsys_data.default_dir(preset, a.seed)
    if not os.path.exists(os.path.join(data, "meta.json")):
        print(f"generating the {preset} data set into {data}", file=sys.stderr)
        recsys_data.write(data, preset, a.seed)
    with open(os.path.join(data, "meta.json")) as fh:
        meta = json.load(fh)
    arrays = {f"{s}_{k}": np.load(os.path.join(data, f"{s}_{k}.npy"))
              for s in ("train", "test") for k in ("ids", "dense", "labels")}
    return meta, arrays


def evaluate(model, rows, dense, labels, batch=65536):
    model.eval()
    with torch.no_grad():
        # np.array: a copy of the batch, so memory-mapped files work too.
        scores = np.concatenate([model(torch.from_numpy(np.array(rows[i:i + batch])),
                                       torch.from_numpy(np.array(dense[i:i + batch]))).numpy()
                                 for i in range(0, len(rows), batch)])
    model.train()
    return recsys_data.auc(scores, labels)


def train(a, model, tables, rows, dense, labels, rank=0, world=1):
    """a.epochs passes over the samples in order, batch a.batch split over
    world processes; returns the training seconds and samples."""
    opt_emb = torch.optim.Adagrad(list(tables.emb.parameters()), lr=a.lr_emb)
    opt_dense = torch.optim.Adam([p for n, p in model.named_parameters() if not n.startswith(
        ("emb.", "module.emb."))], lr=a.lr_dense)
    share = a.batch // world
    steps = len(rows) // a.batch
    t0 = time.perf_counter()
    for epoch, step in ((e, s) for e in range(a.epochs) for s in range(steps)):
        lo = step * a.batch + rank * share
        r = torch.from_numpy(rows[lo:lo + share])
        y = torch.from_numpy(labels[lo:lo + share].astype(np.float32))
        loss = F.binary_cross_entropy_with_logits(model(r, torch.from_numpy(dense[lo:lo + share])), y)
        opt_emb.zero_grad()
        opt_dense.zero_grad()
        loss.backward()
        opt_emb.step()
        opt_dense.step()
        if rank == 0 and a.progress and step % a.progress == 0:
            print(f"epoch {epoch} step {step}/{steps} loss {loss.item():.4f}", file=sys.stderr)
    tables.trained(rows[:steps * a.batch])
    return time.perf_counter() - t0, a.epochs * steps * a.batch


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def setup(a, meta, arrays):
    torch.manual_seed(a.seed)
    tables = LocalTables([arrays["train_ids"], arrays["test_ids"]], a.dim, a.seed, a.init_bound,
                         a.hash_buckets)
    model = DLRM(tables.emb, meta["dense"], a.dim, a.seed)
    return tables, model, tables.index(arrays["train_ids"]), tables.index(arrays["test_ids"])


def ddp_worker(rank, a, out):
    import torch.distributed as dist
    torch.set_num_threads(1)
    meta, arrays = load(a)
    dist.init_process_group("gloo", init_method=f"file://{out}.rendezvous", rank=rank, world_size=2)
    tables, model, train_rows, test_rows = setup(a, meta, arrays)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    seconds, samples = train(a, ddp, tables, train_rows, arrays["train_dense"], arrays["train_labels"],
                             rank, 2)
    result = {"seconds": seconds, "samples": samples, "rows": tables.rows(), "peak_rss_mib": peak_rss_mib()}
    if rank == 0:
        result["test_auc"] = evaluate(model, test_rows, arrays["test_dense"], arrays["test_labels"])
    with open(f"{out}.{rank}", "w") as fh:
        json.dump(result, fh)
    dist.destroy_process_group()


def served_model(a, meta):
    """The model with each field's embeddings served by a row table
    (field00, field01, ...: row table f is field f, as LocalTables' table f,
    so a row starts at the same (seed, f, ID) value), trained with per-row
    Adagrad on the servers. The servers run one rate for every tensor and
    table (the job's --lr, Adam's for the MLPs), so the embeddings are
    stored divided by emb_scale = lr_emb / lr_dense and multiplied back in
    the forward: Adagrad's step is the same fraction of the rate whatever
    the gradient's scale, so the rows move by lr_dense per step in stored
    units, lr_emb in the model's, as LocalTables' rows do under
    Adagrad(lr_emb)."""
    import shardps.torch
    scale = a.lr_emb / a.lr_dense
    bound = a.init_bound / scale
    emb = torch.nn.ModuleList(
        shardps.torch.ServedEmbedding(f"field{f:02d}", a.dim, init="uniform", lo=-bound, hi=bound,
                                      optimizer="adagrad")
        for f in range(len(meta["fields"])))
    return DLRM(emb, meta["dense"], a.dim, a.seed, emb_scale=scale)


def served_worker(a):
    """One worker of the shardps job shardps-run started (--worker): its
    share of every global batch (rank r of W takes the r-th 1/W of it, as
    --mode ddp does) read from the memory-mapped data set, no optimizer here
    (the servers run it), rank 0 scoring the test set before leaving. Each
    rank writes its result to a.worker_out.RANK."""
    data = a.data or recsys_data.default_dir("small" if a.small else "default", a.seed)
    with open(os.path.join(data, "meta.json")) as fh:
        meta = json.load(fh)
    arr = {f"{s}_{k}": np.load(os.path.join(data, f"{s}_{k}.npy"), mmap_mode="r")
           for s in ("train", "test") for k in ("ids", "dense", "labels")}
    import shardps.torch
    model = served_model(a, meta)
    ps = shardps.torch.attach(model)
    rank, world = ps.rank, ps.world
    if a.batch % world:
        raise SystemExit(f"--batch {a.batch} is not a multiple of the {world} workers")
    share = a.batch // world
    steps = len(arr["train_ids"]) // a.batch
    t0 = time.perf_counter()
    for epoch in range(a.epochs):
        for step in range(steps):
            lo = step * a.batch + rank * share
            ids = torch.from_numpy(np.array(arr["train_ids"][lo:lo + share]))
            x = torch.from_numpy(np.array(arr["train_dense"][lo:lo + share]))
            y = torch.from_numpy(arr["train_labels"][lo:lo + share].astype(np.float32))
            loss = F.binary_cross_entropy_with_logits(model(ids, x), y)
            loss.backward()
            ps.report(loss)
            if rank == 0 and a.progress and step % a.progress == 0:
                print(f"epoch {epoch} step {step}/{steps} loss {loss.item():.4f}", file=sys.stderr,
                      flush=True)
    seconds = time.perf_counter() - t0
    result = {"seconds": seconds, "samples": a.epochs * steps * share}
    if rank == 0:
        # The first forward completes the last step; the rows of the test
        # IDs are pulled batch by batch, never a whole table.
        result["test_auc"] = evaluate(model, arr["test_ids"], arr["test_dense"], arr["test_labels"])
    ps.close()
    result["peak_rss_mib"] = round(peak_rss_mib())
    with open(f"{a.worker_out}.{rank}", "w") as fh:
        json.dump(result, fh)


def launcher(build):
    """shardps-run and libshardps of the build folder (default: this tree's
    build/, what make builds)."""
    build = build or os.path.join(HERE, "..", "build")
    run = os.path.join(build, "shardps-run")
    lib = os.path.join(build, "libshardps.so.1")
    for f in (run, lib):
        if not os.path.exists(f):
            raise SystemExit(f"torch_recsys.py: {os.path.normpath(f)} is missing: run make first")
    return os.path.normpath(run), os.path.normpath(lib)


def run_served(a, meta, argv):
    """Runs this script as the 2 workers of a shardps job (2 servers, the
    mode a.mode, Adam at --lr-dense for the MLPs, per-row Adagrad for the
    tables, a constant rate) under shardps-run, passing its output on, and
    returns the result: rank 0's test AUC, the workers' samples over the
    slowest one's training time, and the rows the servers store at the end
    (the sum of their summary lines' "rows N stored") and the memory the
    servers' row stores hold (rows_mib)."""
    import re
    import subprocess
    import tempfile
    run, lib = launcher(a.build)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result")
        cmd = [run, "--servers", str(a.servers), "--workers", str(a.workers), "--mode", a.mode,
               "--optimizer", "adam", "--lr", repr(a.lr_dense), "--lr-schedule", "constant",
               "--seed", str(a.seed), "--", sys.executable, os.path.abspath(__file__),
               *argv, "--worker", out]
        env = dict(os.environ, SHARDPS_LIB=lib,
                   PYTHONPATH=os.pathsep.join(filter(None, [os.path.join(HERE, "..", "python"),
                                                            os.environ.get("PYTHONPATH")])))
        stored, mib = [], []
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        for line in proc.stdout:
            sys.stderr.write(line)
            m = re.search(r"summary of \d+ row tables?: .*; rows (\d+) stored, .*, ([0-9.]+) MiB", line)
            if m:
                stored.append(int(m.group(1)))
                mib.append(float(m.group(2)))
        if proc.wait() != 0:
            raise SystemExit(f"torch_recsys.py: shardps-run exited with status {proc.returncode}")
        ranks = [json.load(open(f"{out}.{r}")) for r in range(a.workers)]
    if len(stored) != a.servers:
        raise SystemExit(f"torch_recsys.py: {len(stored)} of the {a.servers} servers' row summaries "
                         "found in shardps-run's output")
    seconds = max(r["seconds"] for r in ranks)
    return {"test_auc": ranks[0]["test_auc"], "rows": sum(stored), "rows_mib": round(sum(mib), 1),
            "peak_rss_mib": [r["peak_rss_mib"] for r in ranks],
            "samples": sum(r["samples"] for r in ranks), "seconds": seconds}



def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("local", "ddp", "sync", "async"), default="local")
    p.add_argument("--small", action="store_true", help="the small data set (seconds)")
    p.add_argument("--data", help="a data set folder (default: the preset's, generated when missing)")
    p.add_argument("--seed", type=int, default=1, help="the data set's seed and the model's")
    p.add_argument("--dim", type=int, default=16, help="embedding dimension (default 16)")
    p.add_argument("--batch", type=int, default=2048, help="global batch (default 2048)")
    p.add_argument("--epochs", type=int, default=1, help="passes over the training set (default 1)")
    p.add_argument("--lr-emb", type=float, default=0.05, help="Adagrad's rate for the embeddings")
    p.add_argument("--lr-dense", type=float, default=0.001, help="Adam's rate for the MLPs")
    p.add_argument("--init-bound", type=float, default=0.05, help="embeddings start in [-b, b]")
    p.add_argument("--hash-buckets", type=int, default=0, help="the control: IDs hashed into B rows")
    p.add_argument("--servers", type=int, default=2, help="--mode sync|async: servers (default 2)")
    p.add_argument("--workers", type=int, default=2, help="--mode sync|async: workers (default 2)")
    p.add_argument("--build", help="--mode sync|async: the build folder with shardps-run and "
                                   "libshardps (default: build/ of this tree)")
    p.add_argument("--threads", type=int, default=1,
                   help="PyTorch threads in --mode local (default 1: on a busy 2-core machine a second "
                        "thread spins rather than helps)")
    p.add_argument("--progress", type=int, default=0, help="a progress line every N steps")
    p.add_argument("--worker", metavar="OUT", help=argparse.SUPPRESS)  # a copy shardps-run started
    argv = sys.argv[1:]
    a = p.parse_args(argv)
    if (a.dim < 1 or a.batch < 2 or a.batch % 2 or a.hash_buckets < 0 or a.init_bound <= 0
            or a.epochs < 1 or a.servers < 1 or a.workers < 1 or a.lr_emb <= 0 or a.lr_dense <= 0):
        p.error("--dim >= 1, an even --batch >= 2, --hash-buckets >= 0, --epochs, --servers and "
                "--workers >= 1, and rates and --init-bound > 0")
    if a.mode in ("sync", "async") and a.hash_buckets:
        p.error("--hash-buckets is the local control's (--mode local)")
    if a.worker:
        a.worker_out = a.worker
        return served_worker(a)
    meta, arrays = load(a)
    if a.mode == "local":
        torch.set_num_threads(a.threads)
        tables, model, train_rows, test_rows = setup(a, meta, arrays)
        seconds, samples = train(a, model, tables, train_rows, arrays["train_dense"], arrays["train_labels"])
        result = {"test_auc": evaluate(model, test_rows, arrays["test_dense"], arrays["test_labels"]),
                  "rows": tables.rows(), "peak_rss_mib": round(peak_rss_mib())}
    elif a.mode == "ddp":
        import tempfile
        import torch.multiprocessing as mp
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "result")
            mp.spawn(ddp_worker, args=(a, out), nprocs=2)
            ranks = [json.load(open(f"{out}.{r}")) for r in range(2)]
        seconds, samples = max(r["seconds"] for r in ranks), ranks[0]["samples"]
        result = {"test_auc": ranks[0]["test_auc"], "rows": ranks[0]["rows"],
                  "peak_rss_mib": [round(r["peak_rss_mib"]) for r in ranks]}
    else:
        del arrays  # the workers map the files themselves
        result = run_served(a, meta, argv)
        seconds, samples = result.pop("seconds"), result.pop("samples")
    result.update(planted_auc=meta["planted_auc"], samples_per_second=round(samples / seconds),
                  train_seconds=round(seconds, 1), mode=a.mode, hash_buckets=a.hash_buckets,
                  dim=a.dim, samples=samples)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
