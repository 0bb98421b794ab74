"""PEER: CPython's own Tools/ftscalingbench and the detach path, each
flavour against stock ft."""

import json
import statistics

from stats import spread
from suites import round_ratios
from .common import Section, fmt_ratio, fmt_time, table

GOAL_FTSCALING = 1.03   # no ftscalingbench workload >= 1.03 x ft on ft-brc
GOAL_DETACH = 1.05      # the detach path <= 1.05 x ft in time
GOAL_SPREAD = 0.05      # rounds of one workload within 5 % of each other
OTHERS = ["ft-upstream", "ft-brc"]
DETACH = ["detach_sleep0", "detach_read", "detach_lock"]
HEADING = "## PEER: CPython's ftscalingbench and the detach path"


def per_round(values, ref):
    return [a / b for a, b in zip(values, ref)]


def ftscaling_rows(d, threads):
    """Rows of one thread count, each configuration's per-workload ratio
    medians, and every measurement's spread over rounds."""
    runs = d["ftscaling"]
    ft = runs.get("ft", {}).get(threads, {})
    rows, medians, spreads = [], {c: {} for c in OTHERS}, []
    for name, ref in ft.items():
        cells = [name, "%.1f ms (%.1f %%)" % (statistics.median(ref),
                                             100 * spread(ref))]
        spreads.append(spread(ref))
        for c in OTHERS:
            v = runs.get(c, {}).get(threads, {}).get(name)
            if not v:
                cells.append("n/a")
                continue
            r = per_round(v, ref)
            spreads.append(spread(v))
            cells.append("%s (%.1f %%)" % (fmt_ratio(r), 100 * spread(v)))
            medians[c][name] = statistics.median(r)
        rows.append(cells)
    return rows, medians, spreads


def ftscaling(ctx, d):
    out = ["CPython's `Tools/ftscalingbench/ftscalingbench.py`, taken from "
           "each flavour's own source tree, `--scale %d`: every workload on "
           "the main thread (`--baseline-only`) and on 2 threads at once "
           "(`--parallel-only -t 2`), one process per flavour and thread "
           "count in each of %d rounds, order rotated. Cells: ft's median "
           "time (its spread: (max - min) / median over rounds); the others "
           "as per-round ratios to ft, median [min-max] (their spread)."
           % (d["scale"], d.get("rounds", 0)), ""]
    worst, spreads = {}, []
    for threads in ("1", "2"):
        rows, medians, s = ftscaling_rows(d, threads)
        spreads += s
        if not rows:
            continue
        rows.append(["geometric mean", ""] + [
            "%.3fx" % statistics.geometric_mean(medians[c].values())
            if medians[c] else "n/a" for c in OTHERS])
        out += ["**%s thread%s**" % (threads, "" if threads == "1" else "s"),
                ""]
        out += table(["workload", "ft"] + ["%s / ft" % c for c in OTHERS],
                     rows)
        out += counted(ctx, d, threads)
        worst.update({(threads, n): m
                      for n, m in medians["ft-brc"].items()})
    goals(ctx, worst, spreads, d.get("rounds", 0))
    return out


def counted(ctx, d, threads):
    """The whole suite in instructions per unit of --scale, and its goal."""
    counts = {c: v[threads] for c, v in
              d.get("ftscaling_instructions", {}).items()}
    if "ft" not in counts:
        return []
    ref = counts["ft"]
    cells = ["%s %.2f M%s" % (c, n / 1e6, "" if c == "ft" else
                              " (%.4fx)" % (n / ref))
             for c, n in counts.items()]
    if "ft-brc" in counts:
        r = counts["ft-brc"] / ref
        ctx.goal("PEER ftscalingbench in instructions, whole suite on %s "
                 "thread%s: ft-brc / ft <= %.2f"
                 % (threads, "" if threads == "1" else "s", GOAL_FTSCALING),
                 "%.4fx" % r, r <= GOAL_FTSCALING)
    return ["Counted under cachegrind (every workload in one process, "
            "(I(--scale %d) - I(--scale %d)) / %d, per unit of scale): %s."
            % (2 * d["ftscaling_count_scale"], d["ftscaling_count_scale"],
               d["ftscaling_count_scale"], "; ".join(cells)), ""]


def goals(ctx, worst, spreads, rounds):
    """The two ftscalingbench goal rows, "not measured" without data."""
    text = ("PEER ftscalingbench: no workload >= %.2fx ft on ft-brc (1 and 2 "
            "threads, median of per-round ratios)" % GOAL_FTSCALING)
    if worst:
        over = [m for m in worst.values() if m >= GOAL_FTSCALING]
        top = max(worst.items(), key=lambda kv: kv[1])
        ctx.goal(text, "%d of %d at or above; highest %s on %s thread(s) "
                 "%.3fx" % (len(over), len(worst), top[0][1], top[0][0],
                            top[1]), not over)
    else:
        ctx.goal(text, "not measured (see Skipped)", None)
    text = ("PEER ftscalingbench: each workload's spread over rounds < %d %%"
            % (100 * GOAL_SPREAD))
    if spreads and rounds > 1:
        big = [s for s in spreads if s >= GOAL_SPREAD]
        ctx.goal(text, "%d of %d measurements at or above; largest %.1f %%"
                 % (len(big), len(spreads), 100 * max(spreads)), not big)
    else:
        ctx.goal(text, "not measured (fewer than 2 rounds)", None)


def detach(ctx, d):
    instr = d.get("instructions", {})
    rows = []
    for name in DETACH:
        ref = ctx.bench("ft", name)
        if ref is None:
            continue
        cells = [name, fmt_time(ref.median())]
        for c in OTHERS:
            b = ctx.bench(c, name)
            r = round_ratios(b, ref) if b else []
            cells.append(fmt_ratio(r))
            if c == "ft-brc" and r:
                ctx.goal("PEER detach path %s: ft-brc time / ft <= %.2f"
                         % (name, GOAL_DETACH), fmt_ratio(r),
                         statistics.median(r) <= GOAL_DETACH)
        base = instr.get("ft", {}).get(name)
        for c in ["ft"] + OTHERS:
            n = instr.get(c, {}).get(name)
            cells.append("n/a" if n is None else "%.0f" % n if c == "ft"
                         else "%.0f (%+.0f)" % (n, n - base))
        rows.append(cells)
    if not rows:
        return []
    return ["Detach path (bench/workloads/bm_detach.py): %d threads whose "
            "every call detaches and attaches; time per call (pyperf), "
            "per-round ratios to ft, median [min-max]; instructions per "
            "call counted under cachegrind on the main thread as T2I "
            "counts them ((I(%d calls) - I(0)) / %d; in brackets the "
            "difference to ft), one detach per call (detach_lock is timed "
            "only: whether a thread parks depends on the interleaving)."
            % (2, d.get("detach_calls", 0), d.get("detach_calls", 0)), ""] \
        + table(["workload", "ft", "ft-upstream / ft", "ft-brc / ft",
                 "instructions ft", "ft-upstream", "ft-brc"], rows)


def section(ctx):
    out = [HEADING, ""]
    f = ctx.results.peer
    if not f.exists():
        return out + ["*not run*", ""]
    d = json.loads(f.read_text())
    if d.get("ftscaling", {}).get("ft") and d["ftscaling"].get("ft-brc"):
        out += ftscaling(ctx, d)
    else:
        goals(ctx, {}, [], 0)
    return out + detach(ctx, d)


SECTION = Section(
    (HEADING,), section,
    ("PEER ftscalingbench: no workload >= Nx ft on ft-brc (N and N threads, "
     "median of per-round ratios)",
     "PEER ftscalingbench: each workload's spread over rounds < N %",
     "PEER detach path detach_sleepN: ft-brc time / ft <= N",
     "PEER detach path detach_read: ft-brc time / ft <= N",
     "PEER detach path detach_lock: ft-brc time / ft <= N"))
