"""What every section of the report shares: the Section each module
declares, the stock builds goal rows put ft-brc beside, loading pyperf
suites, ratios over rounds, formatting, and the one table helper."""

import statistics
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable

from results import Results
from stats import median_iqr as _median_iqr
from suites import MiB, all_values, get_bench, summary, values_by_round


@dataclass(frozen=True)
class Section:
    """A module's part of report.md; the manifest's groups name it (their
    `section`) and place it: where the first of them stands."""
    headings: tuple         # its "## " headings, in the order it writes them
    write: Callable         # write(ctx) -> lines; adds its goal rows to ctx
    # The goal rows it adds to a quick (smoke or fast) report, every number
    # written N; tests/test_bench_report.py expects them in this order and
    # fills {stock} (a row per stock build), {beside} and {fast}.
    goals: tuple = ()


# what ft-brc is put beside in the goal rows
STOCK = ["ft", "ft-upstream"]


def stock_name(config):
    """ft as "stock ft" in the goal rows; ft-upstream as it is."""
    return "stock ft" if config == "ft" else config


def beside(text):
    """"; ft X; ft-upstream Y": text(config) of the configurations a goal
    row puts ft-brc beside."""
    return "".join("; %s %s" % (c, text(c)) for c in STOCK)


# --------------------------------------------------------------------------
# data access


def above_baseline_ratios(suites, config, name):
    """Per-round ratio of (metric - baseline RSS) to gil's, i.e. with the
    interpreters' different baselines taken out."""
    b = get_bench(suites, config, name)
    base = get_bench(suites, config, "m1_baseline_rss")
    gb = get_bench(suites, "gil", name)
    gbase = get_bench(suites, "gil", "m1_baseline_rss")
    if None in (b, base, gb, gbase):
        return []
    v, vb = values_by_round(b), values_by_round(base)
    g, gbb = values_by_round(gb), values_by_round(gbase)
    out = []
    for r in sorted(set(v) & set(vb) & set(g) & set(gbb)):
        num = statistics.median(v[r]) - statistics.median(vb[r])
        den = statistics.median(g[r]) - statistics.median(gbb[r])
        if den > 0:
            out.append(num / den)
    return out


def median_iqr(ratios):
    """Median and interquartile range of paired ratios (t1_paired.py,
    t1_vs_ft.py), and the goal row's text for them."""
    med, lo, hi = _median_iqr(ratios)
    return med, lo, hi, "%.4fx [IQR %.4f-%.4f], %d pairs" % (
        med, lo, hi, len(ratios))


def fmt_ratio(ratios):
    if not ratios:
        return "n/a"
    med = statistics.median(ratios)
    if len(ratios) == 1:
        return "%.3fx" % med
    return "%.3fx [%.3f-%.3f]" % (med, min(ratios), max(ratios))


def fmt_time(sec):
    if sec >= 1:
        return "%.2f s" % sec
    if sec >= 1e-3:
        return "%.2f ms" % (sec * 1e3)
    return "%.1f us" % (sec * 1e6)


def fmt_value(bench, v):
    unit = bench.get_unit()
    if unit == "byte":
        return "%.1f MiB" % (v / MiB)
    if unit == "second":
        return fmt_time(v)
    return "%g" % v


def fmt_summary(bench):
    s = summary(all_values(bench))
    return "%s +- %s (n=%d)" % (fmt_value(bench, s["median"]),
                                fmt_value(bench, s["std"]), s["n"])


# --------------------------------------------------------------------------
# compare_to

def compare_to(results, ref, others, names, suites):
    files = [c for c in [ref] + others if c in suites]
    names = [n for n in names
             if all(get_bench(suites, c, n) is not None for c in files)]
    if len(files) < 2 or not names:
        return None
    cmd = [sys.executable, "-m", "pyperf", "compare_to", "--table"]
    for n in names:
        cmd += ["-b", n]
    cmd += [str(Results(results).suite(c)) for c in files]
    p = subprocess.run(cmd, capture_output=True, text=True)
    return (" ".join(["pyperf compare_to --table"] +
                     ["-b " + n for n in names] +
                     [Results(results).suite(c).name for c in files])
            + "\n" + (p.stdout + p.stderr).rstrip())


def table(header, rows):
    """A Markdown table: the header cells, then one list of cells a row."""
    out = ["| %s |" % " | ".join(header), "|%s" % ("---|" * len(header))]
    out += ["| %s |" % " | ".join(str(c) for c in row) for row in rows]
    return out + [""]


class Context:
    """What a section writer gets: the results, the run's info and suites,
    and the goal rows it adds to (goal, measured, met: True/False/None)."""

    def __init__(self, results, info, suites):
        self.results = Results(results)
        self.path = self.results.path
        self.info = info
        self.suites = suites
        self.goals = []

    def goal(self, text, measured, met):
        self.goals.append((text, measured, met))

    def bench(self, config, name):
        return get_bench(self.suites, config, name)
