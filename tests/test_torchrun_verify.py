"""image/torchrun-verify.py, the pass/fail of `make torchrun-check`: it
passes a complete job and fails each way a job can fall short (a rank
missing, a wrong world size, a loss that did not fall, a worker that merged
nothing on behalf, a build without sys._brc_stats).  torch is never needed:
the rank files are written here as bench/workloads/ddp_train.py writes them."""

import json
import subprocess
import sys

import pytest

from conftest import ROOT

VERIFY = ROOT / "image" / "torchrun-verify.py"


def rank(r, world=2, losses=(0.02, 0.005), merged=(3, 4)):
    return {"rank": r, "world_size": world, "local_rank": r % 2,
            "node_rank": r // 2, "losses": list(losses), "events": [],
            "workers": len(merged), "workers_brc": {},
            "worker_merged_on_behalf": list(merged), "main_brc": None}


def verify(tmp_path, ranks, world):
    for d in ranks:
        (tmp_path / ("rank%d.json" % d["rank"])).write_text(json.dumps(d))
    return subprocess.run([sys.executable, str(VERIFY), str(tmp_path),
                           str(world), "--label", "t"],
                          capture_output=True, text=True, timeout=30)


def test_a_complete_job_passes(tmp_path):
    p = verify(tmp_path, [rank(r, world=4) for r in range(4)], 4)
    assert p.returncode == 0, p.stdout + p.stderr
    summary = json.loads(p.stdout.splitlines()[-1])
    assert summary["nodes"] == [0, 1] and summary["failures"] == []


@pytest.mark.parametrize("ranks, why", [
    ([rank(0)], "rank 1 wrote no result"),
    ([rank(0), rank(1, world=4)], "rank 1 saw world size 4"),
    ([rank(0), rank(1, losses=(0.01, 0.02))], "rank 1: loss did not fall"),
    ([rank(0), rank(1, merged=(5, 0))], "rank 1: a worker merged nothing"),
    ([rank(0, merged=(None, None)), rank(1)],
     "rank 0: a worker merged nothing"),
    ([rank(0, merged=()), rank(1)], "rank 0: a worker merged nothing"),
], ids=["missing", "world", "loss", "worker", "no-stats", "no-workers"])
def test_each_shortfall_fails(tmp_path, ranks, why):
    p = verify(tmp_path, ranks, 2)
    assert p.returncode == 1, p.stdout + p.stderr
    assert why in p.stderr, p.stderr
