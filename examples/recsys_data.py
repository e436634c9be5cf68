#!/usr/bin/python3
"""Click logs with a planted ground truth, for the recommendation example
(examples/torch_recsys.py):

    python3 examples/recsys_data.py [--small] [--seed S] [--out DIR]

Each sample has 20 categorical fields (IDs drawn from Zipf distributions over
vocabularies of 10 to 10 million, exponents 0.1 to 1.2), 4 dense features
and a click label drawn from a known logistic model: a factorization machine
over per-ID weights and low-rank per-ID factors, plus the dense features and
their interaction with the factors (planted_logit below). Because the labels
come from that model, its own AUC on the held-out samples is the best any
model can score there (the Bayes-optimal ranking): planted_auc.

Writes to DIR (default runs/recsys/default-seed1, or small-seed1 with
--small): {train,test}_ids.npy (int64, samples x fields: 64-bit IDs, to be
read as uint64 bit for bit), {train,test}_dense.npy (float32, samples x 4),
{train,test}_labels.npy (uint8, 0 or 1), test_planted.npy (float32, the
planted click probability of each test sample) and meta.json (settings,
seed, planted_auc, counts). Everything is a function of the seed and the
settings: the same command writes the same bytes.

How the IDs are made: field f draws Zipf ranks (0 = most popular) with
rejection-inversion (the algorithm of common/zipf.c) from uniforms of
NumPy's PCG64 keyed by (seed, f), and maps rank r to the 64-bit ID
ps_zipf_scramble(r, salt_f) = mix64(r ^ mix64(salt_f)) with salt_f =
seed << 8 | f (mix64: SplitMix64's output function, common/mix64.h), a
bijection, so popular IDs are scattered over the whole 64-bit range and
nothing may assume small dense IDs.

Why these settings (docs/recsys.md derives them and has the
measurements): issue 24 wants a planted AUC of at least 0.80, a model
trained on the IDs within 0.01 of it, and the same model with IDs hashed
into 2^16 buckets at least 0.02 below that. One pass learns an ID's weight
to within a noise that falls with the number of times n it sees the ID
(an error variance of about 1 / (n p (1 - p)) at best, p the click
probability), while hashing loses whatever weight a bucket-mate carries,
however often both are seen. So the signal sits on a few IDs seen often
and carrying large weights: two nearly flat fields of 20,000 IDs
(exponents 0.1 and 0.2, weight std 3) hold most of it. Each of their IDs
is drawn 160 to 1,160 times in the default preset's 4 million samples, and
an ID shares its 2^16 bucket with another of its field's about one time in
four (1 - e^(-20,000 / 65,536)), mixing two weights of std 3. The other
18 fields carry small weights (std 0.1 to 0.25) and the factors of the
pairwise interactions are small (std 0.15), so the noise of learning them
costs little. An ID's weight is also full only while its probability is
at least p_weight (40 draws in 4 million samples) and shrinks in
proportion below (rank_scale), its factors likewise from p_factor (800
draws): the unlearnable Zipf tail of the 10-million fields carries almost
nothing.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

# (vocabulary, Zipf exponent, weight std) per field: three at 10 million, a
# spread below; two nearly flat fields of 20,000 IDs carry most of the signal.
FIELDS = [
    (10_000_000, 1.05, 0.15), (10_000_000, 1.1, 0.15), (10_000_000, 1.2, 0.15),
    (1_000_000, 1.05, 0.15), (1_000_000, 1.15, 0.15),
    (20_000, 0.1, 3.0), (20_000, 0.2, 3.0),
    (100_000, 0.3, 0.1), (100_000, 0.35, 0.1), (100_000, 0.4, 0.1), (100_000, 0.45, 0.1),
    (100_000, 0.5, 0.1), (100_000, 0.55, 0.1),
    (10_000, 1.05, 0.15), (10_000, 0.8, 0.15), (10_000, 1.2, 0.15),
    (1_000, 1.1, 0.25), (100, 1.2, 0.25), (50, 1.1, 0.25), (10, 1.05, 0.25),
]
DENSE = 4
FACTORS = 4  # the rank of the planted per-ID factors

PRESETS = {
    # Samples, and the planted model's scales (see the module's comment).
    "default": dict(train=4_000_000, test=500_000),
    "small": dict(train=40_000, test=10_000),
}
PLANT = dict(bias=-1.2, factor_std=0.15, p_weight=1e-5, p_factor=2e-4, decay=1.0,
             dense_std=0.35, dense_factor_std=0.25)

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
M1, M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
M1_INV, M2_INV = np.uint64(pow(int(M1), -1, 2**64)), np.uint64(pow(int(M2), -1, 2**64))


def mix64(z):
    """SplitMix64's output function over a uint64 array (common/mix64.h),
    wrapping as C's unsigned arithmetic does."""
    with np.errstate(over="ignore"):
        z = np.asarray(z, dtype=np.uint64) + GOLDEN
        z = (z ^ (z >> np.uint64(30))) * M1
        z = (z ^ (z >> np.uint64(27))) * M2
        return z ^ (z >> np.uint64(31))


def scramble(ranks, salt):
    """ps_zipf_scramble: rank -> 64-bit ID, a bijection for each salt."""
    return mix64(np.asarray(ranks, dtype=np.uint64) ^ mix64(np.array([salt], dtype=np.uint64)))


class Zipf:
    """Zipf ranks in [0, n) with exponent s by rejection-inversion, the
    algorithm of common/zipf.c over NumPy arrays (Hörmann and Derflinger
    1996): constant time per rank, no table, so a 10-million vocabulary
    costs nothing to set up."""

    def __init__(self, n, s):
        self.n, self.s = n, s
        self.h_x1 = self.big_h(1.5) - 1.0
        self.h_n = self.big_h(n + 0.5)
        self.cut = 2.0 - self.big_h_inv(self.big_h(2.5) - self.h(2.0))

    def h(self, x):
        return np.exp(-self.s * np.log(x))

    def big_h(self, x):
        """(x^(1-s) - 1) / (1 - s), exact near s = 1."""
        lx = np.log(x)
        t = (1.0 - self.s) * lx
        small = np.abs(t) <= 1e-8
        ratio = np.where(small, 1.0 + t * (0.5 + t / 6.0), np.expm1(t) / np.where(small, 1.0, t))
        return ratio * lx

    def big_h_inv(self, y):
        t = np.maximum((1.0 - self.s) * y, -1.0)
        small = np.abs(t) <= 1e-8
        ratio = np.where(small, 1.0 - t * (0.5 - t / 3.0), np.log1p(t) / np.where(small, 1.0, t))
        return np.exp(ratio * y)

    def draw(self, rng, size):
        out = np.empty(size, dtype=np.int64)
        todo = np.arange(size)
        while todo.size:
            u = self.h_n + rng.random(todo.size) * (self.h_x1 - self.h_n)
            x = self.big_h_inv(u)
            k = np.clip(np.floor(x + 0.5), 1.0, float(self.n))
            ok = (k - x <= self.cut) | (u >= self.big_h(k + 0.5) - self.h(k))
            out[todo[ok]] = k[ok].astype(np.int64) - 1
            todo = todo[~ok]
        return out


def auc(scores, labels):
    """The area under the ROC curve: the probability that a random positive
    scores above a random negative, ties counting one half (Mann-Whitney U
    from average ranks). O(n log n). Raises ValueError on a label that is not
    0 or 1, a non-finite score, or a class with no samples."""
    scores = np.asarray(scores, dtype=np.float64).ravel()
    labels = np.asarray(labels).ravel()
    if scores.shape != labels.shape:
        raise ValueError(f"auc: {scores.size} scores for {labels.size} labels")
    if not np.all(np.isfinite(scores)):
        raise ValueError("auc: a score is not a finite number")
    if not np.all((labels == 0) | (labels == 1)):
        raise ValueError("auc: labels must be 0 or 1")
    pos = labels.astype(bool)
    n_pos = int(pos.sum())
    n_neg = pos.size - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"auc: needs both classes ({n_pos} positives, {n_neg} negatives)")
    order = np.argsort(scores, kind="stable")
    s = scores[order]
    first = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    counts = np.diff(np.r_[first, s.size])
    # 1-based ranks; a run of equal scores shares the mean of its ranks.
    ranks = np.repeat(first + (counts + 1) / 2.0, counts)
    rank_sum = ranks[pos[order]].sum()
    return float((rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


_NORM = {}


def zipf_probability(n, s, ranks):
    """P(rank) of Zipf(n, s): (rank + 1)^-s / sum_{k=1..n} k^-s."""
    if (n, s) not in _NORM:
        _NORM[(n, s)] = float(np.sum(np.arange(1, n + 1, dtype=np.float64) ** -s))
    return (ranks + 1.0) ** -s / _NORM[(n, s)]


def rank_scale(prob, p_min, decay):
    """How strongly an ID drawn with probability prob moves the click
    probability: 1 while prob >= p_min, then falling as (prob / p_min)^decay.
    An ID's effect follows how often any data set of this generator shows
    it, whatever its field."""
    return np.minimum(1.0, prob / p_min) ** decay


def normals(key, count):
    """count standard normals per key (uint64 array) by Box-Muller on words
    mix64(key + c * golden), c = 0, 1, ...: a pure function of the key."""
    c = np.arange(2 * count, dtype=np.uint64) * GOLDEN
    with np.errstate(over="ignore"):
        words = mix64(key[:, None] + c[None, :])
    u = ((words >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53  # in (0, 1)
    u1, u2 = u[:, 0::2], u[:, 1::2]
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


def planted_rows(seed, f, ranks, plant, fields=FIELDS):
    """The planted weight and factors of field f's ranks, one row of
    1 + FACTORS per rank: normals keyed by mix64(mix64(mix64(seed) ^ f) ^
    rank), scaled by rank_scale, so a rank's row depends on nothing else
    (not on the preset, the split or the other draws)."""
    key = mix64(mix64(mix64(np.array([seed], dtype=np.uint64)) ^ np.uint64(f)) ^ ranks.astype(np.uint64))
    rows = normals(key, 1 + FACTORS)
    n, s, weight_std = fields[f]
    prob = zipf_probability(n, s, ranks.astype(np.float64))
    rows[:, 0] *= weight_std * rank_scale(prob, plant["p_weight"], plant["decay"])
    rows[:, 1:] *= (plant["factor_std"] * rank_scale(prob, plant["p_factor"], plant["decay"]))[:, None]
    return rows


def draw_ranks(seed, f, samples, fields=FIELDS):
    n, s = fields[f][:2]
    return Zipf(n, s).draw(np.random.Generator(np.random.PCG64([seed, f])), samples)


def field_rows(seed, f, ranks, plant, fields=FIELDS):
    """planted_rows for every draw, computed once per distinct rank."""
    uniq, inverse = np.unique(ranks, return_inverse=True)
    return planted_rows(seed, f, uniq, plant, fields)[inverse]


def unscramble(ids, salt):
    """The rank of each ID (int64 or uint64 array) under salt: scramble's
    inverse, through mix64's (xor-shifts undone, multipliers inverted modulo
    2^64)."""
    z = np.asarray(ids).view(np.uint64)
    with np.errstate(over="ignore"):
        z = z ^ (z >> np.uint64(31)) ^ (z >> np.uint64(62))
        z = z * M2_INV
        z = z ^ (z >> np.uint64(27)) ^ (z >> np.uint64(54))
        z = z * M1_INV
        z = z ^ (z >> np.uint64(30)) ^ (z >> np.uint64(60))
        z = z - GOLDEN
    return z ^ mix64(np.array([salt], dtype=np.uint64))


def planted_logit(ids, dense, seed, plant=PLANT, fields=FIELDS):
    """The planted model's logit of each sample (float64): bias + the sum of
    the fields' per-ID weights + every pair of fields' factor dot product +
    a linear term of the dense features + the dense features' interaction
    with the sum of the factors. The click probability is its sigmoid.
    Raises ValueError on an ID that no rank of its field maps to."""
    samples = ids.shape[0]
    logit = np.full(samples, plant["bias"], dtype=np.float64)
    fsum = np.zeros((samples, FACTORS), dtype=np.float64)  # sum over fields of v_f
    fsq = np.zeros(samples, dtype=np.float64)  # sum over fields of |v_f|^2
    for f, (n, _, _) in enumerate(fields):
        ranks = unscramble(ids[:, f], seed << 8 | f)
        if ranks.size and ranks.max() >= n:
            raise ValueError(f"field {f}: an ID that is not one of the {n} of this seed's vocabulary")
        row = field_rows(seed, f, ranks.astype(np.int64), plant, fields)
        logit += row[:, 0]
        fsum += row[:, 1:]
        fsq += (row[:, 1:] ** 2).sum(1)
    rng = np.random.Generator(np.random.PCG64([seed, len(fields), 1]))
    a = rng.standard_normal(DENSE) * plant["dense_std"]
    b = rng.standard_normal((DENSE, FACTORS)) * plant["dense_factor_std"]
    x = dense.astype(np.float64)
    # Every pair of fields: sum_{f<g} <v_f, v_g> = (|sum v|^2 - sum |v|^2) / 2.
    return logit + 0.5 * ((fsum * fsum).sum(1) - fsq) + x @ a + ((x @ b) * fsum).sum(1)


def generate(samples, seed, plant=PLANT, fields=FIELDS):
    """samples of (ids int64 [samples x fields], dense float32 [samples x
    DENSE], planted logit float64 [samples], labels uint8 [samples])."""
    ids = np.empty((samples, len(fields)), dtype=np.int64)
    for f in range(len(fields)):
        ids[:, f] = scramble(draw_ranks(seed, f, samples, fields), seed << 8 | f).view(np.int64)
    dense = np.random.Generator(np.random.PCG64([seed, len(fields), 0])).standard_normal(
        (samples, DENSE), dtype=np.float32)
    logit = planted_logit(ids, dense, seed, plant, fields)
    draw = np.random.Generator(np.random.PCG64([seed, len(fields), 2])).random(samples)
    labels = (draw < 1.0 / (1.0 + np.exp(-logit))).astype(np.uint8)
    return ids, dense, logit, labels


def default_dir(preset, seed):
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "..", "runs", "recsys", f"{preset}-seed{seed}")


def write(out, preset="default", seed=1):
    """Generates the preset's data set into out; returns its meta dict."""
    t0 = time.perf_counter()
    n_train, n_test = PRESETS[preset]["train"], PRESETS[preset]["test"]
    ids, dense, logit, labels = generate(n_train + n_test, seed)
    os.makedirs(out, exist_ok=True)
    for split, part in (("train", slice(0, n_train)), ("test", slice(n_train, None))):
        np.save(os.path.join(out, f"{split}_ids.npy"), ids[part])
        np.save(os.path.join(out, f"{split}_dense.npy"), dense[part])
        np.save(os.path.join(out, f"{split}_labels.npy"), labels[part])
    test_logit = logit[n_train:].astype(np.float32)
    np.save(os.path.join(out, "test_planted_logit.npy"), test_logit)
    meta = {
        "preset": preset, "seed": seed, "train": n_train, "test": n_test,
        "planted_auc": auc(test_logit, labels[n_train:]),
        "planted_auc_train": auc(logit[:n_train], labels[:n_train]),
        "click_rate": float(labels.mean()),
        "fields": [{"vocabulary": n, "exponent": s, "weight_std": w} for n, s, w in FIELDS],
        "dense": DENSE, "factors": FACTORS, "plant": PLANT,
        "id_mapping": "id = mix64(rank ^ mix64(seed << 8 | field)) as uint64 (ps_zipf_scramble)",
    }
    # meta.json last: its presence means the data set is complete.
    tmp = os.path.join(out, "meta.json.tmp")
    with open(tmp, "w") as fh:
        json.dump(meta, fh, indent=1)
    os.replace(tmp, os.path.join(out, "meta.json"))
    return dict(meta, generate_seconds=round(time.perf_counter() - t0, 1))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", action="store_true", help="the test preset: 40,000 + 10,000 samples")
    p.add_argument("--seed", type=int, default=1, help="everything follows from it (default 1)")
    p.add_argument("--out", help="the folder to write (default runs/recsys/PRESET-seedS in the tree)")
    a = p.parse_args()
    if not 0 <= a.seed < 2**56:
        p.error("--seed must be in [0, 2^56)")
    preset = "small" if a.small else "default"
    meta = write(a.out or default_dir(preset, a.seed), preset, a.seed)
    print(json.dumps({k: meta[k] for k in ("preset", "seed", "train", "test", "planted_auc",
                                          "click_rate", "generate_seconds")}))


if __name__ == "__main__":
    sys.exit(main())
