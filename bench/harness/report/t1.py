"""T1: the hand-off cost, across thresholds of one ft-brc binary, ft,
ft-upstream and gil; the paired and against-stock runs; callgrind."""

import json
import statistics

from suites import T1_BENCHES, label, order, round_ratios
from .common import (STOCK, Section, compare_to, fmt_ratio, fmt_summary,
                     median_iqr, stock_name, table)

GOAL_T1 = 1.10      # ft-brc default CPU time <= 1.10 x threshold 0 (and ft)
GOAL_T1_UPSTREAM = 1.0   # ... and <= 1.0 x ft-upstream (issue 25)
WORKLOADS = [("pingpong", "ping-pong", "round trips"),
             ("clear", "clear", "rounds")]
HEADING = ("## T1: hand-off cost (one ft-brc binary across thresholds, ft "
           "and ft-upstream)")


def t1_goal(stock):
    return GOAL_T1_UPSTREAM if stock.endswith("ft-upstream") else GOAL_T1


def section(ctx):
    return t1_table(ctx) + paired(ctx) + against_stock(ctx) + callgrind(ctx)


SECTION = Section(
    (HEADING,), section,
    ("TN tN_pingpong_cpu: default threshold CPU / threshold N <= N",
     "TN tN_pingpong_cpu: default threshold CPU / {stock} <= N",
     "TN tN_clear_cpu: default threshold CPU / threshold N <= N",
     "TN tN_clear_cpu: default threshold CPU / {stock} <= N",
     "TN ping-pong paired in one process: threshold N CPU / threshold N <= N",
     "TN clear paired in one process: threshold N CPU / threshold N <= N",
     "TN ping-pong against stock ft, alternating processes: ft-brc CPU / ft "
     "<= N",
     "TN clear against stock ft, alternating processes: ft-brc CPU / ft <= "
     "N"))


def t1_goals(ctx, b, ref, name):
    """ft-brc's CPU goal rows of one benchmark: against threshold 0 and
    against the stock builds."""
    r = round_ratios(b, ref)
    if r:
        ctx.goal("T1 %s: default threshold CPU / threshold 0 <= %.2f"
                 % (name, GOAL_T1), fmt_ratio(r),
                 statistics.median(r) <= GOAL_T1)
    for stock in STOCK:
        other = ctx.bench(stock, name)
        r = round_ratios(b, other) if other else None
        if r:
            ctx.goal("T1 %s: default threshold CPU / %s <= %.2f"
                     % (name, stock_name(stock), t1_goal(stock)),
                     fmt_ratio(r), statistics.median(r) <= t1_goal(stock))


def t1_row(ctx, config):
    """One configuration's cells, None where it ran no T1 benchmark."""
    cells = []
    for name in T1_BENCHES:
        b = ctx.bench(config, name)
        ref = ctx.bench("ft-brc-t0", name)
        if b is None:
            cells.append("n/a")
            continue
        ratio = ("" if config == "ft-brc-t0" or ref is None
                 else "<br>%s" % fmt_ratio(round_ratios(b, ref)))
        cells.append(fmt_summary(b) + ratio)
        if config == "ft-brc" and name.endswith("_cpu") and ref:
            t1_goals(ctx, b, ref, name)
    if all(c == "n/a" for c in cells):
        return None
    return [label(config)] + cells


def t1_table(ctx):
    md = [HEADING, "",
          "pingpong: queue.Queue ping-pong of small objects between two "
          "threads (values per round trip); clear: one thread clears 2 x "
          "5000 small objects owned by threads blocked on a Barrier (values "
          "per round). *cpu* = time.process_time() (all threads), *wall* = "
          "perf_counter. Ratios relative to ft-brc threshold 0 (stock "
          "behaviour in the same binary).", ""]
    rows = [r for r in (t1_row(ctx, c) for c in order("T1")) if r]
    if not rows:
        return md + ["*not run*", ""]
    md += table(["config"] + T1_BENCHES, rows)
    # only the configurations that ran T1 (gil.json has other groups too)
    ran = [c for c in order("T1")[1:]
           if any(ctx.bench(c, n) is not None for n in T1_BENCHES)]
    c = compare_to(ctx.path, "ft-brc-t0", ran, T1_BENCHES, ctx.suites)
    if c:
        md += ["```\n%s\n```" % c, ""]
    return md


def paired(ctx):
    """t1_paired.py: default threshold against 0 in one process."""
    md = []
    for workload, what, unit in WORKLOADS:
        f = ctx.results.t1_paired(workload)
        if not f.exists():
            continue
        d = json.loads(f.read_text())
        md += ["**%s paired** (bench/workloads/t1_paired.py): one ft-brc process runs "
               "blocks of %d %s at threshold %d and at the default "
               "alternately, %d pairs, order rotated: median of the per-pair "
               "CPU ratios [interquartile range]. The rounds above move by "
               "+-30 %% here, more than the goal."
               % (what.capitalize(), d["round_trips"], unit,
                  d["base"]["threshold"], d["pairs"]), ""]
        for c in d["configs"]:
            med, lo, hi, text = median_iqr(c["ratios"])
            per_k = ", ".join(
                "%s %.1f" % (k.replace("_", " "),
                             v * 1000 / (d["pairs"] * d["round_trips"]))
                for k, v in c["counters"].items())
            md.append("- threshold %d: %.4f× [%.4f–%.4f]; per 1000 %s: %s"
                      % (c["threshold"], med, lo, hi, unit, per_k))
            ctx.goal("T1 %s paired in one process: threshold %d CPU / "
                     "threshold 0 <= %.2f" % (what, c["threshold"], GOAL_T1),
                     text, med <= GOAL_T1)
        md.append("")
    return md


def against_stock(ctx):
    """t1_vs_ft.py: ft-brc and a stock build in alternating processes."""
    md = []
    for stock in STOCK:
        for workload, what, _ in WORKLOADS:
            f = ctx.results.t1_vs(stock, workload)
            if not f.exists():
                continue
            d = json.loads(f.read_text())
            med, lo, hi, text = median_iqr(d["ratios"])
            md += ["**%s against %s** (bench/harness/t1_vs_ft.py): %d pairs of short "
                   "processes, ft-brc and %s back to back in alternating "
                   "order, each timing %d blocks of %d after a warm-up: "
                   "median of the per-pair CPU ratios %.4f× [interquartile "
                   "range %.4f–%.4f]."
                   % (what.capitalize(), stock_name(stock), len(d["ratios"]),
                      stock, d["blocks"], d["block"], med, lo, hi), ""]
            ctx.goal("T1 %s against %s, alternating processes: ft-brc CPU / "
                     "%s <= %.2f" % (what, stock_name(stock), stock,
                                     t1_goal(stock)),
                     text, med <= t1_goal(stock))
    return md


def callgrind(ctx):
    f = ctx.results.callgrind
    skipped = ctx.info.get("skipped", {})
    if not f.exists():
        if "CG" in skipped:
            return ["Callgrind: skipped (%s)." % skipped["CG"], ""]
        if ctx.info.get("mode") == "fast":
            return ["Callgrind instruction counts: full `make bench` only.",
                    ""]
        return []
    d = json.loads(f.read_text())
    counts = d["counts"]

    def net(config):
        c = counts[config]
        return [x - c["0"][0] for x in c[str(d["n"])]]
    base = (statistics.mean(net("ft-brc-t0")) if "ft-brc-t0" in counts
            else None)
    rows = []
    for config in order("T1"):
        if config not in counts:
            continue
        v = net(config)
        m = statistics.mean(v)
        st = d.get("brc_stats", {}).get(config) or []
        st = ", ".join("%s / %s / %s" % (x.get("enqueued"),
                                         x.get("merged_on_behalf"),
                                         x.get("suspensions"))
                       for x in st if x) or "n/a (not ft-brc)"
        rows.append([label(config), "%.1f M (%.1f-%.1f M)" % (
            m / 1e6, min(v) / 1e6, max(v) / 1e6),
            "%.3fx" % (m / base) if base else "n/a", st])
    return ["Callgrind instruction counts: %s, N=%d. Not fully "
            "deterministic: valgrind's thread interleaving varies, which "
            "moves the counts by a few per cent (compare ft with threshold "
            "0; the last column shows, per run, how many objects were merged "
            "on behalf)." % (d["workload"], d["n"]), ""] + table(
        ["config", "instructions N - N=0 (mean of runs; range)",
         "/ threshold 0", "enqueued / merged on behalf / suspensions"], rows)
