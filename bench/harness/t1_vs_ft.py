"""T1 against stock ft: two interpreters in alternating processes.

t1_paired.py compares thresholds inside one ft-brc process; stock ft is
another binary, so here each pair is two short processes run back to back,
ft-brc (at its default knobs) and ft, in an order swapped every pair. Each
process warms up and then times `--blocks` blocks of T1's ping-pong or clear
pattern (time.process_time(), as in bm_t1_handoff), and reports the median
CPU time per round trip (or round) of its blocks; the ratio of the two
medians is the pair's. Start-up and imports are outside the timing. The
result is the median of the per-pair ratios, with the interquartile range.
bench/harness/run.py runs it against ft and against ft-upstream (--against).

    .venv/bin/python bench/harness/t1_vs_ft.py [--workload pingpong|clear]
        [--pairs P] [--blocks B] [--block N]
        [--python dist/ft-brc/bin/python3] [--against dist/ft/bin/python3]
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from stats import median_iqr

ROOT = Path(__file__).resolve().parent.parent.parent
HANDOFF = ROOT / "bench" / "workloads" / "bm_t1_handoff.py"


def run_worker(python, workload, blocks, block):
    """One process: bm_t1_handoff.py's median CPU time per unit."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYTHON")}      # the knobs at their defaults
    proc = subprocess.run(
        [python, str(HANDOFF), "--blocks", workload, str(blocks), str(block)],
        env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit("t1_vs_ft.py: %s failed (exit %d):\n%s"
                 % (python, proc.returncode, proc.stderr))
    return json.loads(proc.stdout.strip().splitlines()[-1])["per_unit_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", choices=["pingpong", "clear"],
                    default="pingpong")
    ap.add_argument("--pairs", type=int, default=40)
    ap.add_argument("--blocks", type=int, default=15,
                    help="timed blocks per process")
    ap.add_argument("--block", type=int,
                    help="round trips (ping-pong, default 300) or rounds "
                         "(clear, default 40) per block")
    ap.add_argument("--python", default=str(ROOT / "dist/ft-brc/bin/python3"))
    ap.add_argument("--against", default=str(ROOT / "dist/ft/bin/python3"))
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    block = args.block or (40 if args.workload == "clear" else 300)
    for py in (args.python, args.against):
        if not os.access(py, os.X_OK):
            sys.exit("t1_vs_ft.py: %s is not an interpreter; build it first "
                     "(make flavours) or pass --python/--against" % py)
    ratios = []
    for i in range(args.pairs):
        order = [args.python, args.against]
        if i % 2:
            order.reverse()
        got = {py: run_worker(py, args.workload, args.blocks, block)
               for py in order}
        ratios.append(got[args.python] / got[args.against])
    med, lo, hi = median_iqr(ratios)
    print("t1 %s CPU, %s / %s, %d pairs of processes (%d blocks of %d "
          "each): median %.4f, IQR [%.4f-%.4f]"
          % (args.workload, Path(args.python).parent.parent.name,
             Path(args.against).parent.parent.name, len(ratios), args.blocks,
             block, med, lo, hi))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"workload": args.workload, "python": args.python,
                       "against": args.against, "blocks": args.blocks,
                       "block": block, "ratios": ratios}, f)


if __name__ == "__main__":
    main()
