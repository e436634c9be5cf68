#!/usr/bin/python3
"""examples/torch_recsys.py, the recommendation example's model, on the
--small preset (ctest py_recsys_model; argument: the ps-rows-ref program):

- its tables start every row at the value shardps' uniform initializer
  gives that (seed, table, ID), bit for bit against ps_row_init_values;
- a local run generates the data set it does not find, learns (a test AUC
  an untrained model does not reach) and ends with the documented JSON line,
  whose rows are exactly the distinct (field, ID) pairs it trained on;
- the hashed control keeps at most B rows per field;
- DDP on 2 processes, splitting each batch, trains the same model as one
  process on the whole batch (the same test AUC to 1e-3).
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
import torch_recsys as tr  # noqa: E402

ROWS_REF = None  # the ps-rows-ref program, from argv


def run(data, *args):
    out = subprocess.run([sys.executable, os.path.join(EXAMPLES, "torch_recsys.py"), "--small", "--data", data,
                          *args], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


class RowInit(unittest.TestCase):
    def test_is_the_servers_initializer(self):
        ids = np.array([0, 1, -1, 2**62 + 12345, -(2**63)], dtype=np.int64)
        for seed, table, dim, bound in ((1, 0, 16, 0.05), (2**40 + 3, 19, 5, 1.5)):
            ours = tr.row_init_uniform(seed, table, ids, dim, -bound, bound)
            out = subprocess.run([ROWS_REF, "uniform", str(seed), str(table), str(dim), str(-bound), str(bound)] +
                                 [str(int(i)) for i in ids.view(np.uint64)],
                                 check=True, capture_output=True, text=True).stdout
            theirs = np.array([[float.fromhex(x) for x in line.split()] for line in out.splitlines()],
                              dtype=np.float32)
            np.testing.assert_array_equal(ours, theirs)


class Train(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.data = os.path.join(cls.tmp.name, "data")  # missing: the first run generates it
        cls.local = run(cls.data)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_local_learns_and_reports(self):
        r = self.local
        with open(os.path.join(self.data, "meta.json")) as fh:
            meta = json.load(fh)
        self.assertEqual(r["mode"], "local")
        self.assertEqual(r["planted_auc"], meta["planted_auc"])
        # An untrained model scores about 0.5; the planted model about 0.95.
        self.assertGreater(r["test_auc"], 0.6)
        self.assertLess(r["test_auc"], meta["planted_auc"])
        self.assertGreater(r["samples_per_second"], 0)
        ids = np.load(os.path.join(self.data, "train_ids.npy"))[:r["samples"]]
        self.assertEqual(r["rows"], sum(np.unique(ids[:, f]).size for f in range(ids.shape[1])))
        self.assertEqual(r["samples"], 40_000 // 2048 * 2048)

    def test_hashed_control(self):
        r = run(self.data, "--hash-buckets", "64")
        self.assertEqual(r["hash_buckets"], 64)
        self.assertLessEqual(r["rows"], 64 * 20)

    def test_ddp_trains_the_same_model(self):
        r = run(self.data, "--mode", "ddp")
        self.assertEqual((r["mode"], r["rows"], r["samples"]), ("ddp", self.local["rows"], self.local["samples"]))
        self.assertAlmostEqual(r["test_auc"], self.local["test_auc"], delta=1e-3)


if __name__ == "__main__":
    ROWS_REF = sys.argv.pop(1)
    unittest.main()
