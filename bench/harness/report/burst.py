"""BURST (bm_burst.py): a million objects of a blocked owner dropped at
once."""

import json
import statistics

from suites import label, order
from .common import STOCK, Section, beside, fmt_time, table

GOAL_BURST_SUSPENSIONS = 10     # ft-brc frees a blocked owner's burst in
GOAL_BURST_LATENCY = 2e-3       # ... and lets it run within 2 ms of waking
HEADING = "## BURST: a million objects of a blocked owner dropped at once"


def burst_records(results):
    """{config: {variant: [one record per round]}} of burst/<config>.jsonl."""
    out = {}
    for f in results.jsonls("BURST"):
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            out.setdefault(f.stem, {}).setdefault(rec["variant"], []).append(
                rec)
    return out


def fmt_med_max(values, fmt=fmt_time):
    """median; max over rounds of the values that are not None."""
    v = [x for x in values if x is not None]
    return "%s; %s" % (fmt(statistics.median(v)), fmt(max(v))) if v else "n/a"


def suspensions(recs):
    """sys._brc_stats() suspensions from the drop until freed, per round;
    [] where they are not counted (no sys._brc_stats())."""
    return [r["brc_to_freed"]["suspensions"] for r in recs
            if r.get("brc_to_freed")]


def fmt_freed_by(rec):
    return ", ".join("%s %d" % kv for kv in sorted(rec["freed_by"].items()))


def fmt_released_at(recs):
    """When the mid variant released the owner: the fraction of samples
    freed by then (0: at the timeout, nothing was freed)."""
    f = [r["released_at_fraction"] for r in recs]
    return "%.0f%% [%.0f-%.0f%%]" % (100 * statistics.median(f), 100 * min(f),
                                     100 * max(f))


def burst_blocked_text(recs):
    """A goal row's text for one configuration's blocked variant."""
    freed = [r for r in recs if r["freed_while_blocked"]]
    sus = suspensions(recs)
    return "freed while blocked in %d of %d rounds%s, suspensions %s" % (
        len(freed), len(recs),
        " (%s)" % fmt_med_max([r["all_freed_s"] for r in freed])
        if freed else "", fmt_med_max(sus, str) if sus else "not counted")


def burst_mid_text(recs):
    return "%s (released at %s freed)" % (
        fmt_med_max([r["next_bytecode_s"] for r in recs]),
        fmt_released_at(recs))


def intro(some):
    return (
        "bench/workloads/bm_burst.py: an owner thread builds a list of %d fresh small "
        "objects, hands the only reference to the main thread and blocks in "
        "os.read() on a pipe; the main thread drops the list and waits on a "
        "lock. Weakref callbacks on the list and on %d of its items "
        "timestamp the frees. *blocked*: the owner stays blocked until every "
        "sample is freed, or none has been for %g s; *mid*: a third thread "
        "releases it (a byte on its pipe) once %.0f%% of the samples are "
        "freed (after %g s if none is), and the owner's next bytecode after "
        "os.read() returns is timed from just before the write (stock ft: "
        "the owner merges and frees the whole burst at its eval breaker "
        "check right after the call); the owner then runs Python code until "
        "all is freed. Suspensions: `sys._brc_stats()`, from the drop until "
        "everything is freed; only ft-brc counts them (ft-upstream's design "
        "suspends the owner once per object queued while it is detached). "
        "Values: median; max over rounds."
        % (some["objects"], some["samples"], some["timeout_s"],
           100 * some["release_at"], some["mid_timeout_s"]))


def blocked_table(data, order):
    rows = []
    for config in order:
        recs = data[config].get("blocked")
        if not recs:
            continue
        freed = [r for r in recs if r["freed_while_blocked"]]
        st = recs[-1].get("brc_to_freed")
        rows.append([
            label(config), "%d of %d" % (len(freed), len(recs)),
            fmt_med_max([r["all_freed_s"] for r in freed]),
            fmt_med_max([r["box_freed_s"] for r in freed]),
            fmt_med_max([r["after_release_s"] for r in recs
                         if not r["freed_while_blocked"]]),
            fmt_med_max(suspensions(recs), str),
            "%d / %d" % (st["enqueued"], st["merged_on_behalf"])
            if st else "n/a",
            fmt_freed_by(recs[-1])])
    return table(["config", "freed while blocked", "drop -> all freed",
                  "drop -> list freed", "if not: release -> all freed",
                  "suspensions",
                  "enqueued / merged on behalf (last round)",
                  "samples freed by (last round)"], rows)


def mid_table(data, order):
    rows = [[label(config), fmt_released_at(recs),
             fmt_med_max([r["next_bytecode_s"] for r in recs]),
             fmt_med_max([r["all_freed_s"] for r in recs]),
             fmt_med_max(suspensions(recs), str), fmt_freed_by(recs[-1])]
            for config in order for recs in [data[config].get("mid")] if recs]
    return table(["config", "mid: released at (samples freed)",
                  "release -> owner's next bytecode", "drop -> all freed",
                  "suspensions", "samples freed by (last round)"], rows)


def burst_goals(ctx, data):
    def text(fn, variant):
        return lambda c: fn(data[c][variant]) if variant in data.get(
            c, {}) else "n/a"
    recs = data.get("ft-brc", {})
    if recs.get("blocked"):
        sus = suspensions(recs["blocked"])
        ctx.goal("BURST: ft-brc frees a blocked owner's burst while it stays "
                 "blocked, in <= %d suspensions (every round; %s beside)"
                 % (GOAL_BURST_SUSPENSIONS, ", ".join(STOCK)),
                 "ft-brc %s%s" % (burst_blocked_text(recs["blocked"]),
                                  beside(text(burst_blocked_text, "blocked"))),
                 bool(sus) and max(sus) <= GOAL_BURST_SUSPENSIONS and
                 all(r["freed_while_blocked"] for r in recs["blocked"]))
    if recs.get("mid"):
        lat = [r["next_bytecode_s"] for r in recs["mid"]]
        ctx.goal("BURST: an owner released in the middle of the burst runs "
                 "its next bytecode within %.0f ms (ft-brc, max over rounds; "
                 "%s beside)" % (GOAL_BURST_LATENCY * 1e3, ", ".join(STOCK)),
                 "ft-brc %s%s" % (burst_mid_text(recs["mid"]),
                                  beside(text(burst_mid_text, "mid"))),
                 max(lat) <= GOAL_BURST_LATENCY)


def section(ctx):
    md = [HEADING, ""]
    data = burst_records(ctx.results)
    if not data:
        skipped = ctx.info.get("skipped", {})
        return md + ["skipped (%s)" % skipped["BURST"] if "BURST" in skipped
                     else "*not run*", ""]
    some = next(r for v in data.values() for recs in v.values()
                for r in recs)
    known = order("BURST")
    configs = [c for c in known if c in data] + sorted(set(data) - set(known))
    md += [intro(some), ""] + blocked_table(data, configs)
    md += mid_table(data, configs)
    burst_goals(ctx, data)
    return md


SECTION = Section(
    (HEADING,), section,
    ("BURST: ft-brc frees a blocked owner's burst while it stays blocked, in "
     "<= N suspensions (every round; {beside} beside)",
     "BURST: an owner released in the middle of the burst runs its next "
     "bytecode within N ms (ft-brc, max over rounds; {beside} beside)"))
