#!/usr/bin/python3
"""examples/recsys_data.py, the recommendation example's data generator
(ctest py_recsys_data; argument: the ps-rows-ref program):

- auc() equals the pairwise count it stands for (positives above negatives,
  ties one half) on data full of ties, and refuses what it cannot score;
- the 64-bit IDs are common/zipf's ps_zipf_scramble of the ranks, bit for
  bit (against the C function), and unscramble inverts them;
- the Zipf sampler draws each rank with its probability, at 30 and at 10
  million ranks, and at exponents below 1; zipf_probability sums to 1 and
  rank_scale is 1 down to its probability, then falls in proportion;
- the --small preset is the same bytes from the same seed and different
  from another seed; its arrays have the documented shapes, types and
  ranges, every ID maps back to a rank of its field's vocabulary, the
  labels follow the planted probabilities, and meta.json's planted_auc is
  the AUC of the planted model (recomputed from the IDs and dense features)
  on the test labels.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "examples")
sys.path.insert(0, EXAMPLES)
import recsys_data as rd  # noqa: E402

ROWS_REF = None  # the ps-rows-ref program, from argv


def pairwise_auc(scores, labels):
    pos, neg = scores[labels == 1], scores[labels == 0]
    above = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return above / (len(pos) * len(neg))


class Auc(unittest.TestCase):
    def test_equals_the_pairwise_count(self):
        rng = np.random.default_rng(7)
        for n in (2, 3, 10, 97, 500):
            for levels in (2, 5, 1000):  # many ties, some, almost none
                labels = rng.integers(0, 2, n)
                labels[:2] = (0, 1)
                scores = rng.integers(0, levels, n).astype(np.float32)
                self.assertAlmostEqual(rd.auc(scores, labels), pairwise_auc(scores, labels), places=12)

    def test_edges(self):
        labels = np.array([0, 0, 1, 1, 0, 1])
        self.assertEqual(rd.auc(labels * 2.0 - 1.0, labels), 1.0)
        self.assertEqual(rd.auc(1.0 - labels, labels), 0.0)
        self.assertEqual(rd.auc(np.zeros(6), labels), 0.5)

    def test_refuses(self):
        with self.assertRaisesRegex(ValueError, "both classes"):
            rd.auc([0.1, 0.2], [1, 1])
        with self.assertRaisesRegex(ValueError, "finite"):
            rd.auc([np.nan, 0.2], [0, 1])
        with self.assertRaisesRegex(ValueError, "0 or 1"):
            rd.auc([0.1, 0.2], [0, 2])
        with self.assertRaisesRegex(ValueError, "scores for"):
            rd.auc([0.1, 0.2, 0.3], [0, 1])


class Ids(unittest.TestCase):
    def test_mix64_is_splitmix64(self):
        # SplitMix64's first output from state 0 (Steele, Lea and Flood).
        self.assertEqual(int(rd.mix64(np.array([0], dtype=np.uint64))[0]), 0xE220A8397B1DCDAF)

    def test_scramble_is_the_c_function(self):
        ranks = [0, 1, 2, 999, 2**32 + 5, 2**53 - 1, 2**64 - 1]
        for salt in (0, 1, (7 << 8) | 19, 2**64 - 1):
            out = subprocess.run([ROWS_REF, "scramble", str(salt)] + [str(r) for r in ranks],
                                 check=True, capture_output=True, text=True).stdout.split()
            ours = rd.scramble(np.array(ranks, dtype=np.uint64), salt)
            self.assertEqual([int(x) for x in ours], [int(x) for x in out], f"salt {salt}")

    def test_unscramble_inverts(self):
        ranks = np.array([0, 1, 12345, 2**40, 2**64 - 1], dtype=np.uint64)
        for salt in (0, 258, 2**64 - 1):
            self.assertTrue((rd.unscramble(rd.scramble(ranks, salt), salt) == ranks).all())


class Zipf(unittest.TestCase):
    def check(self, n, s, draws, upto):
        ranks = rd.Zipf(n, s).draw(np.random.Generator(np.random.PCG64(5)), draws)
        self.assertTrue(0 <= ranks.min() and ranks.max() < n)
        p = np.arange(1, n + 1, dtype=np.float64) ** -s
        p /= p.sum()
        seen = np.bincount(ranks, minlength=n)[:upto] / draws
        # Within 5 standard errors of each rank's probability.
        bound = 5 * np.sqrt(p[:upto] * (1 - p[:upto]) / draws) + 1e-9
        self.assertTrue((np.abs(seen - p[:upto]) <= bound).all(), np.abs(seen - p[:upto]) / bound)
        tail = p[upto:].sum()
        self.assertLessEqual(abs((ranks >= upto).mean() - tail), 5 * np.sqrt(tail * (1 - tail) / draws))

    def test_small_vocabulary(self):
        self.check(30, 1.3, 200_000, 30 - 1)

    def test_ten_million(self):
        self.check(10_000_000, 1.05, 1_000_000, 1000)

    def test_exponent_below_one(self):
        # The middle fields' flat distributions (exponents 0.1 to 0.55).
        self.check(20_000, 0.1, 1_000_000, 1000)
        self.check(100_000, 0.55, 1_000_000, 1000)

    def test_probability_and_rank_scale(self):
        ranks = np.arange(1000, dtype=np.float64)
        p = rd.zipf_probability(1000, 0.7, ranks)
        self.assertAlmostEqual(p.sum(), 1.0, places=12)
        self.assertAlmostEqual(p[0] / p[9], 10**0.7, places=12)
        scale = rd.rank_scale(p, p[99], 1.0)
        np.testing.assert_array_equal(scale[:100], 1.0)
        np.testing.assert_allclose(scale[100:], p[100:] / p[99], rtol=1e-12)


def generate(out, *args):
    subprocess.run([sys.executable, os.path.join(EXAMPLES, "recsys_data.py"), "--small", "--out", out, *args],
                   check=True, capture_output=True)


class SmallPreset(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dirs = {}
        for name, seed in (("a", "3"), ("b", "3"), ("c", "4")):
            cls.dirs[name] = os.path.join(cls.tmp.name, name)
            generate(cls.dirs[name], "--seed", seed)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def load(self, name, split, kind):
        return np.load(os.path.join(self.dirs[name], f"{split}_{kind}.npy"))

    def test_same_seed_same_bytes(self):
        files = sorted(os.listdir(self.dirs["a"]))
        self.assertEqual(files, sorted(os.listdir(self.dirs["b"])))
        for f in files:
            with open(os.path.join(self.dirs["a"], f), "rb") as x, open(os.path.join(self.dirs["b"], f), "rb") as y:
                self.assertEqual(x.read(), y.read(), f)
        self.assertFalse(np.array_equal(self.load("a", "train", "ids"), self.load("c", "train", "ids")))

    def test_shapes_types_ranges(self):
        with open(os.path.join(self.dirs["a"], "meta.json")) as fh:
            meta = json.load(fh)
        fields = len(rd.FIELDS)
        for split, n in (("train", 40_000), ("test", 10_000)):
            ids, dense = self.load("a", split, "ids"), self.load("a", split, "dense")
            labels = self.load("a", split, "labels")
            self.assertEqual((ids.dtype, ids.shape), (np.int64, (n, fields)))
            self.assertEqual((dense.dtype, dense.shape), (np.float32, (n, rd.DENSE)))
            self.assertEqual((labels.dtype, labels.shape), (np.uint8, (n,)))
            self.assertTrue(np.isfinite(dense).all())
            self.assertEqual(set(np.unique(labels)), {0, 1})
            for f, (vocab, _, _) in enumerate(rd.FIELDS):
                ranks = rd.unscramble(ids[:, f], 3 << 8 | f)
                self.assertLess(int(ranks.max()), vocab, f"field {f}")
                self.assertLessEqual(np.unique(ids[:, f]).size, vocab)
            # The IDs use the whole 64-bit range: both signs as int64.
            self.assertTrue((ids < 0).any() and (ids > 2**62).any())
        self.assertEqual((meta["seed"], meta["train"], meta["test"]), (3, 40_000, 10_000))
        self.assertEqual(meta["fields"], [{"vocabulary": n, "exponent": s, "weight_std": w}
                                          for n, s, w in rd.FIELDS])

    def test_labels_follow_the_planted_model(self):
        with open(os.path.join(self.dirs["a"], "meta.json")) as fh:
            meta = json.load(fh)
        ids, dense = self.load("a", "test", "ids"), self.load("a", "test", "dense")
        labels = self.load("a", "test", "labels")
        stored = np.load(os.path.join(self.dirs["a"], "test_planted_logit.npy"))
        np.testing.assert_array_equal(rd.planted_logit(ids, dense, 3).astype(np.float32), stored)
        self.assertEqual(meta["planted_auc"], rd.auc(stored, labels))
        self.assertGreater(meta["planted_auc"], 0.8)
        # Calibration: in each fifth of the planted probability, the click
        # rate is the mean probability (within 4 standard errors).
        p = 1.0 / (1.0 + np.exp(-stored.astype(np.float64)))
        for part in np.array_split(np.argsort(p), 5):
            err = 4 * np.sqrt(p[part].mean() * (1 - p[part].mean()) / part.size)
            self.assertLess(abs(labels[part].mean() - p[part].mean()), err)
        train = self.load("a", "train", "labels")
        self.assertAlmostEqual(meta["click_rate"], np.concatenate([train, labels]).mean(), places=12)

    def test_foreign_id_refused(self):
        ids = self.load("a", "test", "ids")[:2].copy()
        ids[0, 19] = rd.scramble(np.array([10], dtype=np.uint64), 3 << 8 | 19).view(np.int64)[0]
        with self.assertRaisesRegex(ValueError, "field 19"):
            rd.planted_logit(ids, self.load("a", "test", "dense")[:2], 3)


if __name__ == "__main__":
    ROWS_REF = sys.argv.pop(1)
    unittest.main()
