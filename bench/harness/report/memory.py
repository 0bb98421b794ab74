"""M1: the DataLoader-like producer's memory; M2: free latency with a
blocked owner."""

import json
import statistics

import plots

from suites import (MiB, all_values, label, order, pct, round_ratios,
                    values_by_round)
from .common import (Section, above_baseline_ratios, compare_to, fmt_ratio,
                     fmt_summary, fmt_time, table)

# Goals from the issue
GOAL_M1 = 1.05      # ft-brc RSS <= 1.05 x gil
GOAL_M2 = 1e-3      # ft-brc p99 free latency <= 1 ms

M1_METRICS = [("m1_peak_rss", "peak"), ("m1_steady_rss", "steady"),
              ("m1_rest_rss", "rest")]
M1_HEADING = "## M1: DataLoader-like producer memory"
M2_HEADING = "## M2: free latency with a blocked owner"


def section(ctx):
    return m1(ctx) + m2(ctx)


SECTION = Section(
    (M1_HEADING, M2_HEADING), section,
    ("MN peak RSS ft-brc / gil <= N",
     "MN steady RSS ft-brc / gil <= N",
     "MN steady RSS above the interpreter's baseline, ft-brc / gil <= N",
     "MN free latency pN ft-brc <= N ms"))


def m1_last_run(ctx, config):
    """The baseline; brc stats cell, from the last round's timeline."""
    tl = ctx.results.timeline("M1", config)
    if not tl.exists():
        return ""
    d = json.loads(tl.read_text())
    extra = "%.1f MiB; rest - baseline %.1f MiB" % (
        d["baseline_rss"] / MiB,
        (d.get("rest_rss", 0) - d["baseline_rss"]) / MiB)
    if d.get("brc_stats"):
        st = d["brc_stats"]
        extra += ("; merged on behalf %d, by owner %d"
                  % (st.get("merged_on_behalf", 0),
                     st.get("merged_by_owner", 0)))
    return extra


def m1_row(ctx, config):
    """One configuration's cells; ft-brc's adds the M1 goal rows."""
    cells = [label(config)]
    for name, what in M1_METRICS:
        b = ctx.bench(config, name)
        ref = ctx.bench("gil", name)
        if b is None:
            cells += ["n/a", "n/a"]
            continue
        r = round_ratios(b, ref) if ref else []
        cells += [fmt_summary(b), fmt_ratio(r)]
        if config == "ft-brc" and what != "rest" and r:
            ctx.goal("M1 %s RSS ft-brc / gil <= %.2f" % (what, GOAL_M1),
                     fmt_ratio(r), statistics.median(r) <= GOAL_M1)
    above = above_baseline_ratios(ctx.suites, config, "m1_steady_rss")
    cells.append(fmt_ratio(above))
    if config == "ft-brc" and above:
        ctx.goal("M1 steady RSS above the interpreter's baseline, "
                 "ft-brc / gil <= %.2f" % GOAL_M1, fmt_ratio(above),
                 statistics.median(above) <= GOAL_M1)
    return cells + [m1_last_run(ctx, config)]


def m1(ctx):
    md = [M1_HEADING, ""]
    md += [
        "Producer process: the multiprocessing.Queue feeder thread creates "
        "shared-memory storages while pickling (registered in a producer-side "
        "registry); the main thread drops them when the consumer acks, while "
        "the feeder is blocked waiting for the next batch. RSS sampled every "
        "5 ms. *Steady* is the time-average between the first and last ack; "
        "*rest* the median RSS right after each dropped registry entry (the "
        "level the loop returns to; stock ft keeps the dropped batch there). "
        "The baseline (interpreter alone) is about 4 MiB larger for the "
        "free-threaded builds, which is in every ratio to gil. The "
        "time-average also reflects how long each phase of the loop takes "
        "in each build, not only what is held. For memory, compare_to's "
        "'slower' means 'more'.", ""]
    rows = [m1_row(ctx, config) for config in order("M1")
            if ctx.bench(config, "m1_peak_rss") is not None]
    if not rows:
        return md + ["*not run*", ""]
    md += table(["config", "peak RSS", "peak / gil", "steady RSS",
                 "steady / gil", "rest RSS", "rest / gil",
                 "steady - baseline, / gil's",
                 "baseline; brc stats (last round's run)"], rows)
    out = ctx.results.plot("m1_memory")
    if plots.plot_memory(ctx.path, out):
        md += ["![M1 memory over time](%s)" % out.name, ""]
    c = compare_to(ctx.path, "gil", order("M1")[1:],
                   [m for m, _ in M1_METRICS], ctx.suites)
    if c:
        md += ["```\n%s\n```" % c, ""]
    return md


def m2(ctx):
    md = [M2_HEADING, "",
          "Time from the last cross-thread decref to the weakref callback, "
          "the owner thread blocked in Event.wait(50 ms) or "
          "select()+os.read() (alternating). Stock ft frees when the owner "
          "wakes, so its latency is bounded by that timeout.", ""]
    rows = []
    for config in order("M2"):
        b = ctx.bench(config, "m2_free_latency")
        if b is None:
            continue
        v = all_values(b)
        per_round = [pct(x, 99) for x in values_by_round(b).values()]
        rows.append([label(config), len(v), fmt_time(pct(v, 50)),
                     fmt_time(pct(v, 99)), fmt_time(max(v)),
                     "%s-%s" % (fmt_time(min(per_round)),
                                fmt_time(max(per_round))),
                     fmt_time(statistics.mean(v))])
        if config == "ft-brc":
            ctx.goal("M2 free latency p99 ft-brc <= 1 ms",
                     "%s (p50 %s)" % (fmt_time(pct(v, 99)),
                                      fmt_time(pct(v, 50))),
                     pct(v, 99) <= GOAL_M2)
    if not rows:
        return md + ["*not run*", ""]
    md += table(["config", "n", "p50", "p99", "max", "p99 range over rounds",
                 "mean"], rows)
    out = ctx.results.plot("m2_latency")
    if plots.plot_latency(ctx.suites, out):
        md += ["![M2 free latency](%s)" % out.name, ""]
    return md
