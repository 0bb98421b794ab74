"""T1 ping-pong, paired: threshold 0 against the default in one process.

make bench's T1 compares configurations run one after the other; on a
noisy VM a round moves by +-30 %, more than the 2 % goal.  Here one
ft-brc process alternates the threshold (via _testinternalcapi) between
two blocks of ping-pong round trips, swapping the order every pair, and
reports the median of the per-pair CPU-time ratios: the same binary, heap
and moment for both sides of each ratio.

    dist/ft-brc/bin/python3 bench/t1_paired.py [--round-trips N] [--pairs P]
"""

import argparse
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bm_t1_handoff as t1  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--round-trips", type=int, default=300,
                    help="round trips per block")
    ap.add_argument("--pairs", type=int, default=300)
    ap.add_argument("--threshold", type=int, default=1,
                    help="the threshold compared against 0")
    args = ap.parse_args()
    try:
        import _testinternalcapi
        set_threshold = _testinternalcapi.set_brc_merge_threshold
    except (ImportError, AttributeError):
        sys.exit("t1_paired.py: needs an ft-brc build with its test modules "
                 "(_testinternalcapi.set_brc_merge_threshold); run it with "
                 "dist/ft-brc/bin/python3")
    gc.disable()
    n = args.round_trips
    old = set_threshold(args.threshold)
    t1.pingpong(n, time.process_time)           # warm up
    cpu = {0: [], args.threshold: []}
    ratios = []
    try:
        for i in range(args.pairs):
            order = (0, args.threshold) if i % 2 else (args.threshold, 0)
            got = {}
            for th in order:
                set_threshold(th)
                got[th] = t1.pingpong(n, time.process_time)
                cpu[th].append(got[th])
            ratios.append(got[args.threshold] / got[0])
    finally:
        set_threshold(old)
    ratios.sort()
    q = len(ratios) // 4
    print("t1 ping-pong CPU, threshold %d / 0, %d pairs of %d round trips: "
          "median %.4f, IQR [%.4f-%.4f]; per round trip %.1f us / %.1f us"
          % (args.threshold, len(ratios), n, statistics.median(ratios),
             ratios[q], ratios[-q - 1],
             statistics.median(cpu[args.threshold]) / n * 1e6,
             statistics.median(cpu[0]) / n * 1e6))


if __name__ == "__main__":
    main()
