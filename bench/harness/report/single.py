"""T2: single-threaded workloads (no cost elsewhere): the small pyperf
benchmarks, pyperformance, and T2 in instructions (T2I)."""

import json
import statistics
import subprocess
import sys

import pyperf

import plots

from suites import T2_BENCHES, label, round_ratios
from .common import Section, compare_to, fmt_ratio, fmt_summary, table

GOAL_T2I = 1.005    # single-threaded instructions ft-brc (and t=0) <= x ft
T2_HEADER = ["benchmark", "ft", "ft-brc / ft", "gil / ft"]
HEADING = "## T2: single-threaded workloads (no cost elsewhere)"


def section(ctx):
    md = [HEADING, ""]
    t2, pp, t2i = t2_lines(ctx), pp_lines(ctx), t2i_section(ctx)
    md += t2 + pp
    if not t2 and not pp and not ctx.results.t2i.exists():
        md += ["*not run*", ""]
    md += t2i
    out = ctx.results.plot("throughput")
    if plots.plot_throughput(ctx.suites, out):
        md += ["![throughput ratios](%s)" % out.name, ""]
    return md


SECTION = Section((HEADING,), section,
                  ("TN ft-brc / ft, single-threaded (within noise{fast})",))


def t2_lines(ctx):
    rows = []
    for name in T2_BENCHES:
        ref = ctx.bench("ft", name)
        if ref is None:
            continue
        cells = [name, fmt_summary(ref)]
        for config in ("ft-brc", "gil"):
            b = ctx.bench(config, name)
            cells.append(fmt_ratio(round_ratios(b, ref)) if b else "n/a")
        rows.append(cells)
    if not rows:
        return []
    md = ["Small pyperf benchmarks (bench/workloads/bm_t2_single.py); time ratios "
          "relative to ft (lower is faster).", ""]
    md += table(T2_HEADER, rows)
    c = compare_to(ctx.path, "ft", ["ft-brc", "gil"], T2_BENCHES, ctx.suites)
    if c:
        md += ["```\n%s\n```" % c, ""]
    r = []
    for name in T2_BENCHES:
        ref = ctx.bench("ft", name)
        b = ctx.bench("ft-brc", name)
        if ref and b:
            r += round_ratios(b, ref)
    if r:
        ctx.goal("T2 ft-brc / ft, single-threaded (within noise%s)"
                 % ("; few rounds in fast mode"
                    if ctx.info.get("mode") == "fast" else ""),
                 "median %.3fx over %d benchmark-rounds [%.3f-%.3f]"
                 % (statistics.median(r), len(r), min(r), max(r)), None)
    return md


# --------------------------------------------------------------------------
# pyperformance (PP)

def pp_lines(ctx):
    files = ctx.results.pyperformances()
    pp_suites = {c: pyperf.BenchmarkSuite.load(str(f))
                 for c, f in files.items()}
    if not pp_suites:
        return []
    ref = pp_suites.get("ft")
    rows = []
    for name in ref.get_benchmark_names() if ref else []:
        rb = ref.get_benchmark(name)
        cells = [name, fmt_summary(rb)]
        for config in ("ft-brc", "gil"):
            s = pp_suites.get(config)
            try:
                b = s.get_benchmark(name) if s else None
            except KeyError:
                b = None
            cells.append("%.3fx" % (b.median() / rb.median()) if b
                         else "n/a")
        rows.append(cells)
    md = ["pyperformance (`pyperformance run --fast`):", ""]
    md += table(T2_HEADER, rows)
    compared = [c for c in ("ft", "ft-brc", "gil") if c in pp_suites]
    if len(compared) > 1:
        p = subprocess.run([sys.executable, "-m", "pyperf", "compare_to",
                            "--table"] + [str(files[c]) for c in compared],
                           capture_output=True, text=True)
        md += ["```\n%s\n```" % (p.stdout + p.stderr).rstrip(), ""]
    return md


# --------------------------------------------------------------------------
# T2 in instructions (T2I)

def t2i_per_loop(d, config, name):
    """Instructions per loop, one value per run (layout x repeat), in the
    order of d["runs"][name]."""
    c = d["counts"].get(config, {}).get(name)
    if not c:
        return []
    l0, l1 = d["loops"]
    return [(b - a) / (l1 - l0) for a, b in zip(c[str(l0)], c[str(l1)])
            if a is not None and b is not None]


def t2i_startup(d, config, name):
    """Instructions of the loops[0] run minus its loops (startup, imports,
    pyperf's metadata), of the run with the fewest instructions per loop."""
    per = t2i_per_loop(d, config, name)
    i = per.index(min(per))
    return d["counts"][config][name][str(d["loops"][0])][i] - \
        d["loops"][0] * per[i]


def fmt_instr(n):
    return "%.2f M" % (n / 1e6) if n < 1e9 else "%.3f G" % (n / 1e9)


def fmt_spread(values):
    if len(values) < 2:
        return "n/a"
    return "%.3f%%" % (100 * (max(values) - min(values)) / min(values))


def t2i_intro(d):
    nruns = sum(1 for c in d["counts"].values() for b in c.values()
                for v in b.values() for x in v if x is not None)
    return (
        "Wall time of single-threaded code is too noisy here for a 0.5 %% "
        "gate, so T2I counts instructions: %s; `%s`%s; %s. %s. The counts "
        "depend on the memory layout (in richards two hot names can collide "
        "in the type attribute cache, +1.6-2.2 %% per loop, in ft as in "
        "ft-brc, in some layouts), so each benchmark runs in %d layouts (a "
        "longer environment, more objects on the heap) x %d repeat(s), and "
        "in more, up to %d, while a configuration's ratio to ft is outside "
        "[%.4f, %.4f]. *Gated*: smallest instructions per loop of a "
        "configuration / ft's smallest; *per layout*: the ratios of runs in "
        "the same layout, min-max; spread: (max - min) / min over one "
        "configuration's runs; startup: the loops=%d run minus its loops "
        "(interpreter start, imports, pyperf's metadata; it also depends "
        "on what else the flavour's bench venv has installed, e.g. the .pth "
        "file of setuptools that the TORCH group brings), not gated. %d "
        "cachegrind runs took %.0f s (two at a time)."
        % (d["tool"], d["command"].replace("{loops}", "L"),
           "".join("; %s: `%s`" % (k, " ".join(v))
                   for k, v in d.get("args", {}).items()),
           d["env"], d["workload"], d.get("layouts", 0), d.get("reps", 1),
           d.get("max_layouts", 0), 1 / GOAL_T2I, GOAL_T2I, d["loops"][0],
           nruns, d.get("wall_s", float("nan"))))


def t2i_row(d, name, configs, others, worst):
    """One benchmark's cells, None where ft has no count; adds each other
    configuration's gated ratio to worst."""
    ref = t2i_per_loop(d, "ft", name)
    if not ref:
        return None
    runs = d.get("runs") or {}
    cells = [name, "%d" % len({r["layout"] for r in runs.get(name, [])}),
             fmt_instr(min(ref))]
    for c in others:
        v = t2i_per_loop(d, c, name)
        if not v:
            cells.append("n/a")
            worst[c].append((float("inf"), name))
            continue
        r = min(v) / min(ref)
        pairs = [a / b for a, b in zip(v, ref)]
        worst[c].append((r, name))
        cells.append("%s%.4f%s; %.4f-%.4f" % (
            "**" if r > GOAL_T2I else "", r,
            "**" if r > GOAL_T2I else "", min(pairs), max(pairs)))
    cells.append("; ".join(fmt_spread(t2i_per_loop(d, c, name))
                           for c in configs))
    st = t2i_startup(d, "ft", name)
    cells.append("; ".join([fmt_instr(st)] + [
        "%.4f" % (t2i_startup(d, c, name) / st)
        if t2i_per_loop(d, c, name) else "n/a" for c in others]))
    return cells


def t2i_goals(ctx, worst):
    for c, what in (("ft-brc", "ft-brc (default threshold)"),
                    ("ft-brc-t0", "threshold 0 (ft-brc-t0)")):
        rs = worst.get(c)
        if not rs:
            continue
        top, top_name = max(rs)
        finite = [r for r, _ in rs if r != float("inf")]
        gmean = (statistics.geometric_mean(finite) if finite
                 else float("nan"))
        ctx.goal("T2 instructions %s / ft <= %.3f per loop, in every one of "
                 "%d pyperformance benchmarks (smallest count over the runs)"
                 % (what, GOAL_T2I, len(rs)),
                 "max %.4f (%s), geometric mean %.4f" % (top, top_name, gmean),
                 top <= GOAL_T2I)


def t2i_section(ctx):
    f = ctx.results.t2i
    skipped = ctx.info.get("skipped", {})
    if not f.exists():
        if "T2I" in skipped:
            return ["T2 in instructions (T2I): skipped (%s)."
                    % skipped["T2I"], ""]
        if ctx.info.get("mode") == "fast":
            return ["T2 in instructions (T2I): full `make bench` only.", ""]
        return []
    d = json.loads(f.read_text())
    configs = [c for c in ("ft", "ft-brc", "ft-brc-t0") if c in d["counts"]]
    others = [c for c in configs if c != "ft"]
    worst = {c: [] for c in others}
    rows = [r for r in (t2i_row(d, name, configs, others, worst)
                        for name in d["benchmarks"]) if r]
    md = ["### T2 in instructions (T2I)", "", t2i_intro(d), ""]
    md += table(["benchmark", "layouts", "ft: instructions per loop"]
                + ["%s / ft: gated; per layout" % label(c) for c in others]
                + ["spread over runs: %s" % "; ".join(configs),
                   "startup: ft; %s" % "; ".join("%s / ft" % c
                                                 for c in others)], rows)
    t2i_goals(ctx, worst)
    return md
