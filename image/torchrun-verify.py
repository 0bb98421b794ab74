"""Checks what bench/workloads/ddp_train.py's ranks wrote (`make torchrun-check`):

    python3 image/torchrun-verify.py DIR WORLD_SIZE [--label TEXT]

passes (exit 0) when DIR holds rank0.json .. rank<WORLD_SIZE-1>.json, each
rank saw WORLD_SIZE ranks and its loss fell from the first epoch to the last,
and every DataLoader worker of every rank shows merged_on_behalf > 0 in
sys._brc_stats(), i.e. the feeder thread's drops to the blocked main thread
were merged on its behalf.  Prints one line per rank and a JSON summary.
"""

import argparse
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("world", type=int)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    failures = []
    ranks = []
    for r in range(args.world):
        path = os.path.join(args.dir, "rank%d.json" % r)
        try:
            with open(path) as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            failures.append("rank %d wrote no result (%s)" % (r, e))
            continue
        ranks.append(d)
        losses, mob = d["losses"], d["worker_merged_on_behalf"]
        print("%s rank %d (node %d, local %d): world %d, losses %s, workers' "
              "merged_on_behalf %s" % (args.label, r, d["node_rank"],
                                       d["local_rank"], d["world_size"],
                                       " ".join("%.4f" % v for v in losses),
                                       mob))
        if d["world_size"] != args.world:
            failures.append("rank %d saw world size %d" % (r, d["world_size"]))
        if not losses[-1] < losses[0]:
            failures.append("rank %d: loss did not fall (%s)" % (r, losses))
        if not mob or not all(m and m > 0 for m in mob):
            failures.append("rank %d: a worker merged nothing on behalf "
                            "(%s; not an ft-brc build?)" % (r, mob))
    print(json.dumps({"label": args.label, "world": args.world,
                      "nodes": sorted({d["node_rank"] for d in ranks}),
                      "losses": [d["losses"] for d in ranks],
                      "workers_merged_on_behalf":
                      [d["worker_merged_on_behalf"] for d in ranks],
                      "failures": failures}))
    if failures:
        sys.exit("torchrun-check %s: FAILED: %s" % (args.label,
                                                    "; ".join(failures)))


if __name__ == "__main__":
    main()
