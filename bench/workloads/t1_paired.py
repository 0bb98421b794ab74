"""T1 ping-pong (or clear), paired: threshold 0 against the default in one process.

On a noisy VM a round of make bench's T1 moves by +-30 %, more than the 2 %
goal, since the configurations it compares run one after the other. Here
one ft-brc process switches the knobs (via _testinternalcapi) between
blocks of ping-pong round trips, in a rotated order every round, and
reports for each configuration the median of its per-round CPU-time ratio
to threshold 0: the same binary, heap and moment on both sides of each
ratio.

    dist/ft-brc/bin/python3 bench/workloads/t1_paired.py [--round-trips N] [--pairs P]
        [--config THRESHOLD ...] [--json FILE]
        [--workload clear]

The default compares threshold 1 with threshold 0. Each --config adds
another threshold; each round then runs every configuration once.
--workload clear times T1's other pattern instead: blocks of
--round-trips/8 loops of 8 rounds, each dropping 2 x 5000 objects owned by
threads blocked on a Barrier.
make bench runs it after T1's rounds (bench/harness/run.py, the report's T1 goals).
"""

import argparse
import gc
import json
import statistics
import sys
import time

import _util as u
import bm_t1_handoff as t1

COUNTERS = ("merged_on_behalf", "suspensions")


def parse_config(text):
    try:
        threshold = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a threshold")
    if threshold < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must not be negative")
    return threshold


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--round-trips", type=int, default=300,
                    help="round trips per block")
    ap.add_argument("--pairs", type=int, default=300,
                    help="rounds (each runs every configuration once)")
    ap.add_argument("--threshold", type=int, default=1,
                    help="the threshold compared against 0")
    ap.add_argument("--config", type=parse_config, action="append",
                    default=[], metavar="THRESHOLD",
                    help="another configuration to compare against 0")
    ap.add_argument("--workload", choices=["pingpong", "clear"],
                    default="pingpong")
    ap.add_argument("--json", metavar="FILE",
                    help="also write the ratios and counters there")
    args = ap.parse_args()
    try:
        import _testinternalcapi as T
        set_threshold = T.set_brc_merge_threshold
    except (ImportError, AttributeError):
        sys.exit("t1_paired.py: needs an ft-brc build with its test modules "
                 "(_testinternalcapi.set_brc_merge_threshold); run it with "
                 "dist/ft-brc/bin/python3")
    gc.disable()
    n = args.round_trips
    base = 0
    configs = [base, args.threshold]
    configs += [c for c in args.config if c not in configs]
    block, n = t1.timed_block(args.workload, n, time.process_time)
    old = set_threshold(args.threshold)
    block()                                     # warm up
    cpu = {c: [] for c in configs}
    ratios = {c: [] for c in configs}
    stats = {c: dict.fromkeys(COUNTERS, 0) for c in configs}
    try:
        for i in range(args.pairs):
            k = i % len(configs)
            got = {}
            for c in configs[k:] + configs[:k]:
                set_threshold(c)
                s0 = sys._brc_stats()
                got[c] = block()
                s1 = sys._brc_stats()
                cpu[c].append(got[c])
                for key in COUNTERS:
                    stats[c][key] += s1[key] - s0[key]
            for c in configs[1:]:
                ratios[c].append(got[c] / got[base])
    finally:
        set_threshold(old)
    out = {"workload": args.workload, "round_trips": n,
           "pairs": args.pairs,
           "base": {"threshold": base, "cpu": cpu[base]},
           "configs": []}
    for c in configs[1:]:
        out["configs"].append({"threshold": c,
                               "ratios": ratios[c], "cpu": cpu[c],
                               "counters": stats[c]})
        med, lo, hi = u.median_iqr(ratios[c])
        per_k = {key: round(v * 1000 / (args.pairs * n), 1)
                 for key, v in stats[c].items()}
        what = ("ping-pong", "round trips", "round trip")
        if args.workload == "clear":
            what = ("clear", "rounds", "round")
        print("t1 %s CPU, threshold %d / threshold 0, "
              "%d pairs of %d %s: median %.4f, IQR [%.4f-%.4f]; "
              "per %s %.1f us / %.1f us; per 1000 %s %s"
              % (what[0], c, len(ratios[c]), n, what[1], med, lo,
                 hi, what[2], statistics.median(cpu[c]) / n * 1e6,
                 statistics.median(cpu[base]) / n * 1e6, what[1], per_k))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
