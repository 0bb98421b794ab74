"""XFREE (bm_xfree.py): cross-thread frees, the owners blocked on an
Event; the time per dropped object of list.clear() and of a pop loop."""

import statistics

from suites import all_values, label, order, round_ratios
from .common import Section, fmt_ratio, table

HEADING = "## XFREE: cross-thread frees, owners blocked on an Event"
BENCHES = [("xfree_clear", "clear"), ("xfree_pop", "pop loop")]


def fmt_ns(bench):
    """median +- standard deviation in ns (fmt_time stops at 0.1 us)."""
    v = all_values(bench)
    std = statistics.stdev(v) if len(v) > 1 else 0.0
    return "%.1f ns +- %.1f (n=%d)" % (statistics.median(v) * 1e9,
                                       std * 1e9, len(v))


def ratios(ctx, config, name):
    b, ref = ctx.bench(config, name), ctx.bench("ft", name)
    return round_ratios(b, ref) if b and ref else []


def row(ctx, config):
    """One configuration's cells, None where it ran neither drop."""
    cells = [label(config)]
    for name, _ in BENCHES:
        b = ctx.bench(config, name)
        cells += (["n/a", ""] if b is None else
                  [fmt_ns(b), "" if config == "ft"
                   else fmt_ratio(ratios(ctx, config, name))])
    return None if cells.count("n/a") == len(BENCHES) else cells


def intro(bench):
    md = bench.get_metadata()
    return (
        "bench/workloads/bm_xfree.py: %s owner threads each build a list "
        "of %s two-element lists and block on a threading.Event; once they "
        "sleep, the main thread drops every one of those lists, each owned "
        "by a blocked thread: *clear*: `L.clear()`; *pop loop*: `while L: "
        "L.pop()`. Stock ft queues them to their owners, which free them "
        "after waking, outside the timing. Values: wall time of the drop "
        "per dropped object, median +- standard deviation over all values; "
        "ratios: per-round ratios to ft, median [min-max]."
        % (md.get("xfree_owners", "?"), md.get("xfree_objects_per_owner",
                                               "?")))


def goal(ctx):
    """ft-brc's ratios to ft, ft-upstream's beside; no threshold."""
    def text(config):
        return "; ".join("%s %s" % (what, fmt_ratio(ratios(ctx, config, n)))
                         for n, what in BENCHES)
    if ctx.bench("ft-brc", "xfree_clear") and ctx.bench("ft", "xfree_clear"):
        ctx.goal("XFREE time per dropped object, ft-brc / ft: clear; pop "
                 "loop (ft-upstream beside)",
                 "ft-brc %s; ft-upstream %s" % (text("ft-brc"),
                                                text("ft-upstream")), None)


def section(ctx):
    md = [HEADING, ""]
    rows = [r for r in (row(ctx, c) for c in order("XFREE")) if r]
    if not rows:
        return md + ["*not run*", ""]
    some = next(b for c in order("XFREE") for n, _ in BENCHES
                for b in [ctx.bench(c, n)] if b)
    md += [intro(some), ""] + table(
        ["config", "clear: per object", "/ ft", "pop loop: per object",
         "/ ft"], rows)
    goal(ctx)
    return md


SECTION = Section(
    (HEADING,), section,
    ("XFREE time per dropped object, ft-brc / ft: clear; pop loop "
     "(ft-upstream beside)",))
