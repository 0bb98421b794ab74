"""XFREE (bm_xfree.py): cross-thread frees, the owners blocked on an
Event or running Python; the time per dropped object of list.clear() and
of a pop loop, and (full mode) the same drops counted under callgrind:
instructions and atomics per dropped object, by function group."""

import json
import statistics

from suites import all_values, label, order, round_ratios
from .common import Section, fmt_ratio, table

HEADING = "## XFREE: cross-thread frees, owners blocked or running"
BENCHES = [("xfree_clear", "clear"), ("xfree_pop", "pop loop")]
# (owners, suffix of the benchmarks' names)
OWNERS = [("blocked", ""), ("running", "_running")]
SCENARIOS = [("clear_blocked", "clear, owners blocked"),
             ("clear_running", "clear, owners running"),
             ("pop_blocked", "pop, owners blocked"),
             ("pop_running", "pop, owners running")]


def fmt_ns(bench):
    """median +- standard deviation in ns (fmt_time stops at 0.1 us)."""
    v = all_values(bench)
    std = statistics.stdev(v) if len(v) > 1 else 0.0
    return "%.1f ns +- %.1f (n=%d)" % (statistics.median(v) * 1e9,
                                       std * 1e9, len(v))


def ratios(ctx, config, name):
    b, ref = ctx.bench(config, name), ctx.bench("ft", name)
    return round_ratios(b, ref) if b and ref else []


def row(ctx, owners, suffix, config):
    """One configuration's cells, None where it ran neither drop."""
    cells = [owners, label(config)]
    for name, _ in BENCHES:
        b = ctx.bench(config, name + suffix)
        cells += (["n/a", ""] if b is None else
                  [fmt_ns(b), "" if config == "ft"
                   else fmt_ratio(ratios(ctx, config, name + suffix))])
    return None if cells.count("n/a") == len(BENCHES) else cells


def intro(bench):
    md = bench.get_metadata()
    return (
        "bench/workloads/bm_xfree.py: %s owner threads each build a list "
        "of %s two-element lists, then block on a threading.Event "
        "(*blocked*) or run `while not release.is_set(): pass` "
        "(*running*); the main thread drops every one of those lists, each "
        "owned by another thread: *clear*: `L.clear()`; *pop loop*: "
        "`while L: L.pop()`. Stock ft queues them to their owners, which "
        "free them at their next eval-breaker check (a blocked one after "
        "waking, outside the timing). Values: time of the drop per dropped "
        "object, median +- standard deviation over all values: wall time "
        "with the owners blocked, the dropping thread's CPU time with them "
        "running (they share the cores with it); ratios: per-round ratios "
        "to ft, median [min-max]."
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


def timings(ctx):
    rows = [r for owners, suffix in OWNERS for c in order("XFREE")
            for r in [row(ctx, owners, suffix, c)] if r]
    if not rows:
        return []
    some = next(b for c in order("XFREE") for n, _ in BENCHES
                for b in [ctx.bench(c, n)] if b)
    goal(ctx)
    return [intro(some), ""] + table(
        ["owners", "config", "clear: per object", "/ ft",
         "pop loop: per object", "/ ft"], rows)


# --------------------------------------------------------------------------
# counted (callgrind_xfree.json, bm_xfree.py --callgrind)

def fmt_x(value, ref):
    return "%.2fx" % (value / ref) if value is not None and ref else "–"


def fmt_n(value):
    return "–" if value is None else "%.1f" % value


def all_threads(s):
    return s["instructions"] + (s["owner_instructions"] or 0)


def counted_rows(configs):
    """The instruction table's rows and the groups table's, by scenario,
    in the manifest's order of configurations."""
    rows, groups = [], []
    names = next(iter(configs.values()))["groups"]
    for scenario, what in SCENARIOS:
        runs = {c: d["scenarios"][scenario] for c, d in configs.items()
                if scenario in d["scenarios"]}
        gil, up = runs.get("gil"), runs.get("ft-upstream")
        for config in [c for c in order("XFREE") if c in runs]:
            s = runs[config]
            rows.append([
                what, label(config), fmt_n(s["instructions"]),
                fmt_x(s["instructions"], gil and gil["instructions"]),
                fmt_x(s["instructions"], up and up["instructions"]),
                fmt_n(s["atomics"]), fmt_n(s["owner_instructions"]),
                fmt_n(all_threads(s)),
                fmt_x(all_threads(s), gil and all_threads(gil)),
                fmt_x(all_threads(s), up and all_threads(up))])
            groups.append([what, label(config)] + [
                fmt_n(s["groups"].get(g)) for g in names])
    return rows, groups, names


def counted(ctx):
    path = ctx.results.xfree_callgrind
    if not path.exists():
        return []
    d = json.loads(path.read_text())
    configs = d["configs"]
    if not configs:
        return []
    some = next(iter(configs.values()))
    rows, groups, names = counted_rows(configs)
    out = [
        "**Counted** (`bm_xfree.py --callgrind`, %s): %d owner threads own "
        "%s two-element lists in one list, blocked or running, and the "
        "main thread drops them: *clear* `L.clear()`, *pop* `all(map("
        "L.pop, itertools.repeat(-1, n)))` (each popped list dropped in C "
        "by all(): a Python loop's bytecodes could not be told apart). Per "
        "dropped object: the dropping thread's instructions inside the "
        "drop (`--toggle-collect` of %s), its atomics among them "
        "(lock-prefixed instructions and xchg with memory, their addresses "
        "from `objdump -d`), and the owners' instructions in `%s` (a "
        "second process; none on gil, which has no queue). *All threads*: "
        "the two added. Ratios to gil and to ft-upstream of the same "
        "scenario."
        % (some["tool"], some["owners"], format(some["objects"], ","),
           " / ".join("`%s` (%s)" % (fn, drop)
                      for drop, fn in some["dropper"].items()),
           some["owner_merge"]), ""]
    out += table(["scenario", "config", "instructions", "/ gil",
                  "/ ft-upstream", "atomics", "owners' instructions",
                  "all threads", "/ gil", "/ ft-upstream"], rows)
    out += ["The dropping thread's instructions per dropped object by "
            "function group (each function's self cost; the patterns are "
            "GROUPS in bm_xfree.py; *drop loop*: clear's loop, or all(), "
            "map() and list.pop):", ""]
    out += table(["scenario", "config"] + names, groups)
    return out


def section(ctx):
    md = [HEADING, ""]
    body = timings(ctx) + counted(ctx)
    return md + (body or ["*not run*", ""])


SECTION = Section(
    (HEADING,), section,
    ("XFREE time per dropped object, ft-brc / ft: clear; pop loop "
     "(ft-upstream beside)",))
