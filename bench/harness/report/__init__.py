"""Turn a results dir of bench/harness/run.py into compare_to tables, plots
and report.md (`python bench/harness/run.py --report-only DIR`).  Runs in the
host venv (pyperf, matplotlib).  One module a section, each declaring its
SECTION (common.Section: its headings, writer and goal rows); the
manifest's groups name them and set their order.  common.py holds what they
share."""

import importlib
import json

import manifest
from results import Results

from suites import load_suites
from .common import Context, table
from .single import GOAL_T2I, t2i_per_loop

__all__ = ["write_report", "sections", "t2i_per_loop", "GOAL_T2I"]


def sections():
    """Every Section, in the manifest's order: where the first group that
    names it stands."""
    names = dict.fromkeys(g.section for g in manifest.GROUPS.values()
                          if g.section)
    return [importlib.import_module("." + name, __name__).SECTION
            for name in names]


def machine_rows(info):
    mach = info.get("machine", {})
    rows = [["machine", "%s cores, %s, %s RAM" % (
                mach.get("nproc"), mach.get("cpu"), mach.get("memory"))],
            ["kernel", mach.get("kernel")],
            ["commit", "%s%s" % (mach.get("commit"),
                                 " (patches/ or bench/ modified)"
                                 if mach.get("dirty") else "")],
            ["patch series sha256", "`%s` (%s)" % (
                str(mach.get("series_sha256", ""))[:16],
                ", ".join("%s %s" % (k[:4], v)
                          for k, v in mach.get("patches", {}).items()))]]
    if mach.get("compare_patches"):
        rows.append(["ft-upstream's backport", ", ".join(
            "%s %s" % kv for kv in mach["compare_patches"].items())])
    for f, d in mach.get("flavours", {}).items():
        rows.append([f, "%s; configure `%s`; build key %s" % (
            d.get("version"), d.get("configure"), d.get("build_key_sha256"))])
    if info.get("knob_check"):
        rows.append(["threshold in force", ", ".join(
            "%s: %s" % kv for kv in info["knob_check"].items())])
    if info.get("group_seconds"):
        rows.append(["time per group", ", ".join(
            "%s %ss" % kv for kv in info["group_seconds"].items())])
    for key, what in (("warning", "WARNING"), ("note", "note")):
        if info.get(key):
            rows.append([what, info[key]])
    return rows


def write_report(results):
    results = Results(results)
    info = (json.loads(results.info.read_text()) if results.info.exists()
            else {})
    ctx = Context(results.path, info, load_suites(results.path))
    head = [
        "# brc-merge benchmarks (%s)" % info.get("mode", "?"), "",
        "Started %s, took %s s. Results: `%s` (pyperf JSON per "
        "configuration)." % (info.get("started", "?"),
                             info.get("elapsed_s", "?"), results.path.name),
        ""] + table(["", ""], machine_rows(info)) + [
        "Ratios are per-round ratios of medians (every round runs all "
        "configurations back to back, in rotated order), given as median "
        "[min-max] over rounds. Values are median +- standard deviation over "
        "all values. The machine is noisy (a shared VM whose speed was seen "
        "to change by up to 2x between and even within processes), so trust "
        "compare_to's significance and the ranges more than single numbers.",
        "",
        "*ft-upstream* is stock ft plus `patches/%s/compare/`, the backport "
        "of the fix shipped upstream for gh-157838 (in 3.14.10): a thread "
        "that queues an object to a detached owner suspends it, merges its "
        "whole queue and frees the objects inside that Py_DECREF. It has no "
        "`sys._brc_stats()` and no knobs; it runs wherever stock ft runs with "
        "threads, and is skipped when not built." % info.get("line", "3.14"),
        ""]
    body = []
    for section in sections():
        body += section.write(ctx)
    other = {k: v for k, v in info.get("skipped", {}).items()
             if not k.startswith("TORCH")}
    if other:
        body += ["## Skipped", ""]
        body += ["- %s: %s" % kv for kv in other.items()] + [""]
    goals = [[goal, measured, "see table" if ok is None
              else "met" if ok else "NOT met"]
             for goal, measured, ok in ctx.goals]
    goals = goals or [["(no goal could be evaluated)", "", ""]]
    text = "\n".join(head + ["## Goals", ""]
                     + table(["goal", "measured", "verdict"], goals) + body)
    results.report.write_text(text + "\n")
    print(text)
    return text
