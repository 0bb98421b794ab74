"""Turn a results dir of bench/run.py into compare_to tables, plots and
report.md.  Runs in the host venv (pyperf, matplotlib).

    python bench/report.py RESULTS_DIR
"""

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pyperf

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _util  # noqa: E402

MiB = 1 << 20
T1_ORDER = ["ft-brc-t0", "ft-brc", "ft-brc-t2", "ft-brc-t10",
            "ft-brc-t100", "ft", "ft-upstream"]
# ft-upstream: stock ft + the backport of upstream's fix (bench/run.py)
FLAVOUR_ORDER = ["gil", "ft", "ft-upstream", "ft-brc"]
BURST_ORDER = FLAVOUR_ORDER + ["ft-brc-t0"]
# what ft-brc is put beside in the goal rows
STOCK = ["ft", "ft-upstream"]
M1_ORDER = FLAVOUR_ORDER
M2_ORDER = FLAVOUR_ORDER
LABEL = {"ft-brc": "ft-brc (default, =1)", "ft-brc-t0": "ft-brc t=0 (off)",
         "ft-brc-t2": "ft-brc t=2", "ft-brc-t10": "ft-brc t=10",
         "ft-brc-t100": "ft-brc t=100"}
T1_BENCHES = ["t1_pingpong_cpu", "t1_pingpong_wall", "t1_clear_cpu",
              "t1_clear_wall"]
T2_BENCHES = ["t2_nbody", "t2_dict_str", "t2_alloc", "t2_recursion"]

# Goals from the issue
GOAL_M1 = 1.05      # ft-brc RSS <= 1.05 x gil
GOAL_M2 = 1e-3      # ft-brc p99 free latency <= 1 ms
GOAL_T1 = 1.10      # ft-brc default CPU time <= 1.10 x threshold 0 (and ft)
GOAL_T1_UPSTREAM = 1.0   # ... and <= 1.0 x ft-upstream (issue 25)


def t1_goal(stock):
    return GOAL_T1_UPSTREAM if stock.endswith("ft-upstream") else GOAL_T1
GOAL_TORCH = 1.05   # ft-brc steady job memory <= 1.05 x gil
GOAL_T2I = 1.005    # single-threaded instructions ft-brc (and t=0) <= x ft
GOAL_BURST_SUSPENSIONS = 10     # ft-brc frees a blocked owner's burst in
GOAL_BURST_LATENCY = 2e-3       # ... and lets it run within 2 ms of waking
TORCH_SHAPES = ["current", "cam4", "cam8", "cam4-stack", "ddp"]
TORCH_REPROS = ["repro", "repro-stack"]
TORCH_REPRO_CONFIGS = ["gil", "ft", "ft-upstream", "ft-brc", "ft-brc-t0"]


def label(config):
    return LABEL.get(config, config)


def stock_name(config):
    """ft as "stock ft" in the goal rows; ft-upstream as it is."""
    return "stock ft" if config == "ft" else config


def beside(text):
    """"; ft X; ft-upstream Y": text(config) of the configurations a goal
    row puts ft-brc beside."""
    return "".join("; %s %s" % (c, text(c)) for c in STOCK)


# --------------------------------------------------------------------------
# data access

def load_suites(results):
    suites = {}
    for f in sorted(results.glob("*.json")):
        # Not pyperf suites: the run's info, callgrind counts, and the
        # paired T1 runs (t1_paired*.json, t1_vs_ft*.json).
        if (f.name == "info.json" or f.name.startswith("callgrind")
                or f.name.startswith("t1_")):
            continue
        try:
            suites[f.stem] = pyperf.BenchmarkSuite.load(str(f))
        except Exception as exc:        # a half-written file: report it
            print("report: cannot load %s: %s" % (f, exc), file=sys.stderr)
    return suites


def get_bench(suites, config, name):
    suite = suites.get(config)
    if suite is None:
        return None
    try:
        return suite.get_benchmark(name)
    except KeyError:
        return None


def values_by_round(bench):
    """{round: [values]} using the bench_round metadata run.py sets."""
    out = {}
    for run in bench.get_runs():
        if not run.values:
            continue
        r = int(run.get_metadata().get("bench_round", 0))
        out.setdefault(r, []).extend(run.values)     # already per loop
    return out


def all_values(bench):
    return list(bench.get_values())


def pct(values, p):
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summary(values):
    return {
        "n": len(values),
        "median": statistics.median(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }


def round_ratios(bench, ref):
    """Per-round ratio of medians bench/ref over the rounds both have."""
    a = values_by_round(bench)
    b = values_by_round(ref)
    return [statistics.median(a[r]) / statistics.median(b[r])
            for r in sorted(set(a) & set(b))]


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
    med, lo, hi = _util.median_iqr(ratios)
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
    cmd += [str(results / (c + ".json")) for c in files]
    p = subprocess.run(cmd, capture_output=True, text=True)
    return (" ".join(["pyperf compare_to --table"] +
                     ["-b " + n for n in names] +
                     [c + ".json" for c in files])
            + "\n" + (p.stdout + p.stderr).rstrip())


# --------------------------------------------------------------------------
# plots

def _pyplot():
    """matplotlib's pyplot with the file-only Agg backend (no display here)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(plt, fig, out):
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_memory(results, out):
    plt = _pyplot()

    runs = []
    for config in M1_ORDER:
        f = results / "timelines" / ("m1_%s.json" % config)
        if f.exists():
            runs.append((config, json.loads(f.read_text())))
    if not runs:
        return False
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 1.2 + 2.0 * len(runs)),
                             sharex=True, sharey=True, squeeze=False)
    for ax, (config, d) in zip(axes[:, 0], runs):
        t = [s[0] for s in d["samples"]]
        r = [s[1] / MiB for s in d["samples"]]
        ax.plot(t, r, linewidth=1, color="tab:blue")
        ax.axhline(d["baseline_rss"] / MiB, color="grey", linestyle=":",
                   linewidth=1)
        for et, kind, _ in d["events"]:
            if kind == "ack":
                ax.axvline(et, color="tab:green", alpha=0.25, linewidth=0.8)
        ax.set_ylabel("RSS (MiB)")
        ax.set_title("%s: peak %.0f, steady %.0f, rest %.0f MiB "
                     "(baseline %.0f)" % (label(config), d["peak_rss"] / MiB,
                                          d["steady_rss"] / MiB,
                                          d.get("rest_rss", 0) / MiB,
                                          d["baseline_rss"] / MiB),
                     fontsize=9)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("time since start of the producer run (s); green:"
                           " consumer acks -> registry entry dropped")
    fig.suptitle("M1: DataLoader-like producer RSS over time (last round)",
                 fontsize=10)
    _save(plt, fig, out)
    return True


def plot_latency(suites, out):
    plt = _pyplot()

    fig, ax = plt.subplots(figsize=(9, 4.5))
    drew = False
    for config in M2_ORDER:
        b = get_bench(suites, config, "m2_free_latency")
        if b is None:
            continue
        v = sorted(x * 1e3 for x in all_values(b))
        y = [(i + 1) / len(v) for i in range(len(v))]
        ax.step(v, y, where="post", label=label(config))
        drew = True
    if not drew:
        plt.close(fig)
        return False
    ax.set_xscale("log")
    ax.set_xlabel("last decref -> weakref callback (ms, log scale)")
    ax.set_ylabel("fraction of samples (ECDF)")
    ax.axvline(1.0, color="grey", linestyle=":", linewidth=1)
    ax.set_title("M2: free latency, owner thread blocked")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    _save(plt, fig, out)
    return True


def plot_throughput(suites, out):
    plt = _pyplot()

    panels = []
    # T1: throughput relative to ft-brc threshold 0, per benchmark
    t1 = []
    for name in T1_BENCHES:
        ref = get_bench(suites, "ft-brc-t0", name)
        for config in T1_ORDER[1:]:
            b = get_bench(suites, config, name)
            if ref is None or b is None:
                continue
            r = [1 / x for x in round_ratios(b, ref)]
            if r:
                t1.append(("%s\n%s" % (name[3:], label(config)), r))
    if t1:
        panels.append(("T1: throughput vs ft-brc threshold 0 (higher is "
                       "better)", t1))
    t2 = []
    names = list(T2_BENCHES)
    for suite in suites.values():
        names += [n for n in suite.get_benchmark_names()
                  if n.startswith("pp_") and n not in names]
    for name in names:
        ref = get_bench(suites, "ft", name)
        for config in ("ft-brc", "gil"):
            b = get_bench(suites, config, name)
            if ref is None or b is None:
                continue
            r = [1 / x for x in round_ratios(b, ref)]
            if r:
                t2.append(("%s %s" % (name, config), r))
    if t2:
        panels.append(("T2: single-thread throughput vs ft (higher is "
                       "better)", t2))
    if not panels:
        return False
    fig, axes = plt.subplots(len(panels), 1,
                             figsize=(9, 1.2 + 0.32 * sum(len(p[1])
                                                          for p in panels)
                                      + 1.0 * len(panels)),
                             squeeze=False)
    for ax, (title, rows) in zip(axes[:, 0], panels):
        labels = [r[0].replace("\n", " ") for r in rows]
        med = [statistics.median(r[1]) for r in rows]
        lo = [m - min(r[1]) for m, r in zip(med, rows)]
        hi = [max(r[1]) - m for m, r in zip(med, rows)]
        y = list(range(len(rows)))
        ax.barh(y, med, xerr=[lo, hi], color="tab:blue", alpha=0.7,
                capsize=2)
        ax.set_yticks(y)
        ax.set_yticklabels(labels, fontsize=7)
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3, axis="x")
        ax.set_xlabel("ratio (bar: median of per-round ratios; whiskers: "
                      "min-max over rounds)", fontsize=7)
    _save(plt, fig, out)
    return True


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


def t2i_section(results, info, goals):
    md = []
    w = md.append
    f = results / "callgrind_t2.json"
    skipped = info.get("skipped", {})
    if not f.exists():
        if "T2I" in skipped:
            w("T2 in instructions (T2I): skipped (%s)." % skipped["T2I"])
            w("")
        elif info.get("mode") == "fast":
            w("T2 in instructions (T2I): full `make bench` only.")
            w("")
        return md
    d = json.loads(f.read_text())
    configs = [c for c in ("ft", "ft-brc", "ft-brc-t0") if c in d["counts"]]
    others = [c for c in configs if c != "ft"]
    runs = d.get("runs") or {}
    nruns = sum(1 for c in d["counts"].values() for b in c.values()
                for v in b.values() for x in v if x is not None)
    w("### T2 in instructions (T2I)")
    w("")
    w("Wall time of single-threaded code is too noisy here for a 0.5 %% "
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
    w("")
    w("| benchmark | layouts | ft: instructions per loop | %s | spread "
      "over runs: %s | startup: ft; %s |"
      % (" | ".join("%s / ft: gated; per layout" % label(c)
                    for c in others),
         "; ".join(configs), "; ".join("%s / ft" % c for c in others)))
    w("|---|---|---|%s---|---|" % ("---|" * len(others)))
    worst = {c: [] for c in others}
    for name in d["benchmarks"]:
        ref = t2i_per_loop(d, "ft", name)
        if not ref:
            continue
        cells = ["%d" % len({r["layout"] for r in runs.get(name, [])}),
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
        w("| %s | %s |" % (name, " | ".join(cells)))
    w("")
    for c, what in (("ft-brc", "ft-brc (default threshold)"),
                    ("ft-brc-t0", "threshold 0 (ft-brc-t0)")):
        rs = worst.get(c)
        if not rs:
            continue
        top, top_name = max(rs)
        finite = [r for r, _ in rs if r != float("inf")]
        gmean = (statistics.geometric_mean(finite) if finite
                 else float("nan"))
        goals.append(("T2 instructions %s / ft <= %.3f per loop, in every "
                      "one of %d pyperformance benchmarks (smallest count "
                      "over the runs)" % (what, GOAL_T2I, len(rs)),
                      "max %.4f (%s), geometric mean %.4f"
                      % (top, top_name, gmean),
                      top <= GOAL_T2I))
    return md


# --------------------------------------------------------------------------
# burst (bm_burst.py)

def burst_records(results):
    """{config: {variant: [one record per round]}} of burst/<config>.jsonl."""
    out = {}
    for f in sorted((results / "burst").glob("*.jsonl")):
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


def burst_section(results, info, goals):
    md = []
    w = md.append
    w("## BURST: a million objects of a blocked owner dropped at once")
    w("")
    data = burst_records(results)
    if not data:
        w("skipped (%s)" % info["skipped"]["BURST"]
          if "BURST" in info.get("skipped", {}) else "*not run*")
        w("")
        return md
    some = next(r for v in data.values() for recs in v.values()
                for r in recs)
    w("bench/bm_burst.py: an owner thread builds a list of %d fresh small "
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
    w("")
    w("| config | freed while blocked | drop -> all freed | drop -> list "
      "freed | if not: release -> all freed | suspensions | enqueued / "
      "merged on behalf (last round) | samples freed by "
      "(last round) |")
    w("|---|---|---|---|---|---|---|---|")
    order = [c for c in BURST_ORDER if c in data] + sorted(
        set(data) - set(BURST_ORDER))
    for config in order:
        recs = data[config].get("blocked")
        if not recs:
            continue
        freed = [r for r in recs if r["freed_while_blocked"]]
        st = recs[-1].get("brc_to_freed")
        w("| %s | %d of %d | %s | %s | %s | %s | %s | %s |" % (
            label(config), len(freed), len(recs),
            fmt_med_max([r["all_freed_s"] for r in freed]),
            fmt_med_max([r["box_freed_s"] for r in freed]),
            fmt_med_max([r["after_release_s"] for r in recs
                         if not r["freed_while_blocked"]]),
            fmt_med_max(suspensions(recs), str),
            "%d / %d" % (st["enqueued"], st["merged_on_behalf"])
            if st else "n/a",
            fmt_freed_by(recs[-1])))
    w("")
    w("| config | mid: released at (samples freed) | release -> owner's next "
      "bytecode | drop -> all freed | suspensions | samples freed by (last "
      "round) |")
    w("|---|---|---|---|---|---|")
    for config in order:
        recs = data[config].get("mid")
        if recs:
            w("| %s | %s | %s | %s | %s | %s |" % (
                label(config), fmt_released_at(recs),
                fmt_med_max([r["next_bytecode_s"] for r in recs]),
                fmt_med_max([r["all_freed_s"] for r in recs]),
                fmt_med_max(suspensions(recs), str), fmt_freed_by(recs[-1])))
    w("")

    def text(fn, variant):
        return lambda c: fn(data[c][variant]) if variant in data.get(
            c, {}) else "n/a"
    recs = data.get("ft-brc", {})
    if recs.get("blocked"):
        sus = suspensions(recs["blocked"])
        goals.append(("BURST: ft-brc frees a blocked owner's burst while it "
                      "stays blocked, in <= %d suspensions (every round; %s "
                      "beside)" % (GOAL_BURST_SUSPENSIONS, ", ".join(STOCK)),
                      "ft-brc %s%s" % (
                          burst_blocked_text(recs["blocked"]),
                          beside(text(burst_blocked_text, "blocked"))),
                      bool(sus) and max(sus) <= GOAL_BURST_SUSPENSIONS and
                      all(r["freed_while_blocked"] for r in recs["blocked"])))
    if recs.get("mid"):
        lat = [r["next_bytecode_s"] for r in recs["mid"]]
        goals.append(("BURST: an owner released in the middle of the burst "
                      "runs its next bytecode within %.0f ms (ft-brc, max "
                      "over rounds; %s beside)"
                      % (GOAL_BURST_LATENCY * 1e3, ", ".join(STOCK)),
                      "ft-brc %s%s" % (burst_mid_text(recs["mid"]),
                                       beside(text(burst_mid_text, "mid"))),
                      max(lat) <= GOAL_BURST_LATENCY))
    return md


# --------------------------------------------------------------------------
# torch

def torch_timelines(results, name, config):
    """{round: {"result": ..., "timeline": ...}} of bm_torch_dataloader.py."""
    out = {}
    for f in (results / "timelines").glob("torch_%s_%s_r*.json"
                                          % (name, config)):
        out[int(f.stem.rsplit("_r", 1)[1])] = json.loads(f.read_text())
    return out


def fmt_mib_range(values):
    """median [min-max] in MiB over rounds."""
    v = [x / MiB for x in values]
    if not v:
        return "n/a"
    if len(v) == 1:
        return "%.0f MiB" % v[0]
    return "%.0f MiB [%.0f-%.0f]" % (statistics.median(v), min(v), max(v))


def round_medians(bench):
    return [statistics.median(v) for _, v in
            sorted(values_by_round(bench).items())]


def fmt_brc(st):
    if not st:
        return "n/a (no sys._brc_stats)"
    return ("enqueued %d, merged on behalf %d (%d suspensions), by owner %d,"
            " by gc %d, queued now %d" % (
                st.get("enqueued", 0), st.get("merged_on_behalf", 0),
                st.get("suspensions", 0), st.get("merged_by_owner", 0),
                st.get("merged_by_gc", 0), st.get("queue_length", 0)))


def fmt_frees(frees):
    if not frees:
        return "n/a"
    return "; ".join("%s %d (median %.0f ms, max %.0f ms)"
                     % (thread, d["batches"], d["median_ms"], d["max_ms"])
                     for thread, d in sorted(frees.items(),
                                             key=lambda kv: -kv[1]["batches"]))


def plot_torch(results, out):
    plt = _pyplot()

    shapes = []
    for name in TORCH_SHAPES:
        runs = []
        for config in FLAVOUR_ORDER:
            tls = torch_timelines(results, name, config)
            if tls:
                runs.append((config, tls[max(tls)]))
        if runs:
            shapes.append((name, runs))
    if not shapes:
        return False
    colors = {"gil": "tab:green", "ft": "tab:red", "ft-upstream": "tab:orange",
              "ft-brc": "tab:blue"}
    fig, axes = plt.subplots(len(shapes), 1,
                             figsize=(9, 1.0 + 2.6 * len(shapes)),
                             squeeze=False)
    for ax, (name, runs) in zip(axes[:, 0], shapes):
        for config, d in runs:
            tl = d["timeline"]
            t = [s[0] for s in tl["samples"]]
            ax.plot(t, [s[1] / MiB for s in tl["samples"]], linewidth=1.2,
                    color=colors[config], label="%s job" % config)
            ax.plot(t, [s[3] / MiB for s in tl["samples"]], linewidth=0.8,
                    linestyle="--", color=colors[config],
                    label="%s /dev/shm part" % config)
            for et, kind, _ in tl["events"]:
                if kind == "epoch_end":
                    ax.axvline(et, color=colors[config], alpha=0.4,
                               linewidth=0.8, linestyle=":")
        r = runs[0][1]["result"]
        ax.set_title("%s: %d workers, %d batches x %.0f MiB%s, step %.0f ms "
                     "(dotted: epoch ends; last round)" % (
                         name, r["workers"], r["batches"], r["batch_mib"],
                         ", %d epochs, pause %.0f s" % (r["epochs"],
                                                        r["pause"])
                         if r["epochs"] > 1 else "", r["step_ms"]),
                     fontsize=9)
        ax.set_ylabel("MiB")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=3, loc="upper right")
    axes[-1, 0].set_xlabel("time since the loader started (s); job = PSS of "
                           "main + workers (shared pages once) + /dev/shm")
    fig.suptitle("torch DataLoader job memory over time", fontsize=10)
    _save(plt, fig, out)
    return True


def torch_section(results, suites, info, goals):
    md = []
    w = md.append
    w("## Real DataLoader (torch)")
    w("")
    skipped = info.get("skipped", {})
    torch_skips = {k: v for k, v in skipped.items() if k.startswith("TORCH")}
    any_repro = False
    for name in TORCH_REPROS:
        repro = {c: torch_timelines(results, name, c)
                 for c in TORCH_REPRO_CONFIGS}
        if not any(repro.values()):
            continue
        some = next(d for c in TORCH_REPRO_CONFIGS for d in repro[c].values())
        r = some["result"]
        if not any_repro:
            w("### The public thread's repro")
            w("")
            w("DataLoader(num_workers=%d, persistent_workers=True), one epoch "
              "of batches of %d MiB, every batch dropped by the main process; "
              "MiB of `/dev/shm/torch_*` still mapped in the job 0.5 s later, "
              "and 6 s later, after the workers' 5-s status-check timeout has "
              "woken their main threads. *repro*: default_collate (in a worker "
              "it allocates the batch in shared memory); *repro-stack*: a "
              "user's collate_fn (torch.stack), so the queue's feeder thread "
              "moves the batch to shared memory while pickling it. ft-brc-t0 "
              "is the patched binary with merging on behalf off (stock "
              "behaviour), run for its `sys._brc_stats()`, summed over the "
              "workers. *freed by*: which worker thread freed the batch tensors "
              "and how long after the feeder had pickled them."
              % (r["workers"], r["batch_mib"]))
            w("")
            w("| repro | config | mapped after the drop | 6 s later | per "
              "worker after the drop; 6 s later (last round) | workers' "
              "sys._brc_stats() after the drop; queued 6 s later (last round) "
              "| batch tensors freed by (last round) |")
            w("|---|---|---|---|---|---|---|")
            any_repro = True
        for config in TORCH_REPRO_CONFIGS:
            d = repro[config]
            if not d:
                continue
            last = d[max(d)]["result"]
            drop = [d[k]["result"]["after_drop"]["mapped"] for k in sorted(d)]
            tmo = [d[k]["result"]["after_timeout"]["mapped"]
                   for k in sorted(d)]
            later = last["after_timeout"]["workers_brc"]
            w("| %s | %s | %s | %s | %s; %s | %s%s | %s |" % (
                name, label(config), fmt_mib_range(drop), fmt_mib_range(tmo),
                ", ".join("%.0f" % (x / MiB)
                          for x in last["after_drop"]["mapped_workers"]),
                ", ".join("%.0f" % (x / MiB)
                          for x in last["after_timeout"]["mapped_workers"]),
                fmt_brc(last["after_drop"]["workers_brc"]),
                "; %d" % later["queue_length"] if later else "",
                fmt_frees(last["after_timeout"]["frees"])))
            if config == "ft-brc":
                goals.append(("TORCH %s: ft-brc MiB of /dev/shm/torch "
                              "mapped after the drop = 0 (%s beside)"
                              % (name, ", ".join(STOCK)),
                              "ft-brc %s%s" % (fmt_mib_range(drop), beside(
                                  lambda c: fmt_mib_range(
                                      [x["result"]["after_drop"]["mapped"]
                                       for x in repro[c].values()]))),
                              max(drop) == 0))
    if any_repro:
        w("")

    rows_any = False
    for name in TORCH_SHAPES:
        # ft-brc-t0 (bench/run.py --torch-t0): merging on behalf off in the
        # same binary, the fairest "stock" beside ft-brc.
        order = FLAVOUR_ORDER + ["ft-brc-t0"]
        tls = {c: torch_timelines(results, name, c) for c in order}
        order = [c for c in order if c in FLAVOUR_ORDER or tls[c]]
        if not any(tls.values()):
            continue
        if not rows_any:
            w("### Job memory")
            w("")
            w("Memory of the whole job as an operator sees it "
              "(bench/_jobmem.py, sampled every 0.2 s): PSS summed over the "
              "main process and all its descendants (forkserver, workers, "
              "resource tracker; pages shared between them counted once) "
              "plus the `/dev/shm` objects the job holds (mapped or only "
              "open). *steady*: average while epochs run (from the first batch; "
              "of a job with several epochs only the later ones: workers "
              "start, each importing torch, during the first); *idle*: "
              "average "
              "while the loader waits between epochs and after the last "
              "(persistent workers); *without file pages*: the same with "
              "PSS_Anon in place of PSS, i.e. without the resident share of "
              "torch's library files, which depends on how each venv's copy "
              "sits in the page cache (tens of MiB between identical copies "
              "here), not on the interpreter; the `/dev/shm` part beside. "
              "Values: median [min-max] over rounds; ratios: per-round "
              "ratios to gil, median [min-max].")
            w("")
            rows_any = True
        some = next(d for c in order for d in tls[c].values())
        r = some["result"]
        w("**%s**: %s%d workers, %d batches of %d x %.1f MiB per epoch, %d "
          "epoch(s)%s, training step %.0f ms, persistent workers %s."
          % (name, "torchrun, %d DDP ranks (gloo), each with " % r["ranks"]
             if r.get("ranks") else "", r["workers"], r["batches"],
             r["batch_size"],
             r["batch_mib"] / r["batch_size"], r["epochs"],
             ", %.0f s pause between" % r["pause"] if r["epochs"] > 1
             else "", r["step_ms"], "yes" if r["persistent"] else "no"))
        w("")
        w("| config | peak | / gil | steady | / gil | idle | / gil | "
          "without file pages: steady / gil; idle / gil | "
          "/dev/shm steady; idle | epoch (s) |")
        w("|---|---|---|---|---|---|---|---|---|---|")
        for config in order:
            cells = []
            for metric in ("job_peak", "job_steady", "job_idle"):
                b = get_bench(suites, config, "torch_%s_%s" % (name, metric))
                ref = get_bench(suites, "gil", "torch_%s_%s" % (name, metric))
                if b is None:
                    cells += ["n/a", ""]
                    continue
                ratios = round_ratios(b, ref) if ref else []
                cells += [fmt_mib_range(round_medians(b)),
                          fmt_ratio(ratios) if config != "gil" else ""]
            anon = []
            for metric in ("anon_steady", "anon_idle"):
                b = get_bench(suites, config, "torch_%s_%s" % (name, metric))
                ref = get_bench(suites, "gil", "torch_%s_%s" % (name, metric))
                anon.append(fmt_ratio(round_ratios(b, ref))
                            if b and ref and config != "gil" else
                            fmt_mib_range(round_medians(b)) if b else "n/a")
            shm = []
            for metric in ("shm_steady", "shm_idle"):
                b = get_bench(suites, config, "torch_%s_%s" % (name, metric))
                shm.append(fmt_mib_range(round_medians(b)) if b else "n/a")
            ep = get_bench(suites, config, "torch_%s_epoch" % name)
            if all(c == "n/a" for c in cells[::2]):
                continue
            w("| %s | %s | %s | %s | %s |" % (
                label(config), " | ".join(cells), "; ".join(anon),
                "; ".join(shm),
                "%.1f" % statistics.median(all_values(ep)) if ep else "n/a"))
        w("")
        for config in order:
            d = tls[config]
            if not d:
                continue
            last = d[max(d)]["result"]
            point = "idle" if "idle" in last["workers_brc"] else "last_batch"
            w("- %s, last round, workers at the %s probe: %s; freed by: %s"
              % (label(config), point.replace("_", " "),
                 fmt_brc(last["workers_brc"].get(point)),
                 fmt_frees(last["frees"].get(point))))
        w("")
        b = get_bench(suites, "ft-brc", "torch_%s_job_steady" % name)
        ref = get_bench(suites, "gil", "torch_%s_job_steady" % name)
        t0 = get_bench(suites, "ft-brc-t0", "torch_%s_job_steady" % name)
        if b and t0:
            a = get_bench(suites, "ft-brc", "torch_%s_anon_steady" % name)
            a0 = get_bench(suites, "ft-brc-t0",
                           "torch_%s_anon_steady" % name)
            w("ft-brc against ft-brc-t0 (the same binary, merging on behalf "
              "off), per round: steady job memory %s; without file pages %s."
              % (fmt_ratio(round_ratios(b, t0)),
                 fmt_ratio(round_ratios(a, a0)) if a and a0 else "n/a"))
            w("")
        if b and ref:
            r = round_ratios(b, ref)

            def steady(c):
                other = get_bench(suites, c, "torch_%s_job_steady" % name)
                return fmt_ratio(round_ratios(other, ref)) if other else "n/a"
            goals.append(("TORCH %s: ft-brc steady job memory / gil <= %.2f "
                          "(%s beside)" % (name, GOAL_TORCH, ", ".join(STOCK)),
                          "ft-brc %s%s" % (fmt_ratio(r), beside(steady)),
                          statistics.median(r) <= GOAL_TORCH))
    if rows_any and plot_torch(results, results / "torch_memory.png"):
        w("![torch job memory over time](torch_memory.png)")
        w("")
    for k, v in torch_skips.items():
        w("- %s skipped: %s" % (k, v))
    if not rows_any and not any_repro and not torch_skips:
        w("*not run* (`make bench-torch`, or `make bench BENCH_TORCH=1`)")
    w("")
    return md


# --------------------------------------------------------------------------
# report

def write_report(results):
    results = Path(results).resolve()
    info_file = results / "info.json"
    info = json.loads(info_file.read_text()) if info_file.exists() else {}
    suites = load_suites(results)
    md = []
    goals = []
    w = md.append

    mach = info.get("machine", {})
    w("# brc-merge benchmarks (%s)" % info.get("mode", "?"))
    w("")
    w("Started %s, took %s s. Results: `%s` (pyperf JSON per configuration)."
      % (info.get("started", "?"), info.get("elapsed_s", "?"),
         results.name))
    w("")
    w("| | |")
    w("|---|---|")
    w("| machine | %s cores, %s, %s RAM |" % (mach.get("nproc"),
                                              mach.get("cpu"),
                                              mach.get("memory")))
    w("| kernel | %s |" % mach.get("kernel"))
    w("| commit | %s%s |" % (mach.get("commit"),
                             " (patches/ or bench/ modified)"
                             if mach.get("dirty") else ""))
    w("| patch series sha256 | `%s` (%s) |"
      % (str(mach.get("series_sha256", ""))[:16],
         ", ".join("%s %s" % (k[:4], v)
                   for k, v in mach.get("patches", {}).items())))
    if mach.get("compare_patches"):
        w("| ft-upstream's backport | %s |" % ", ".join(
            "%s %s" % kv for kv in mach["compare_patches"].items()))
    for f, d in mach.get("flavours", {}).items():
        w("| %s | %s; configure `%s`; build key %s |"
          % (f, d.get("version"), d.get("configure"),
             d.get("build_key_sha256")))
    if info.get("knob_check"):
        w("| threshold in force | %s |" % ", ".join(
            "%s: %s" % (k, v) for k, v in info["knob_check"].items()))
    if info.get("group_seconds"):
        w("| time per group | %s |" % ", ".join(
            "%s %ss" % kv for kv in info["group_seconds"].items()))
    if info.get("warning"):
        w("| WARNING | %s |" % info["warning"])
    if info.get("note"):
        w("| note | %s |" % info["note"])
    w("")
    w("Ratios are per-round ratios of medians (every round runs all "
      "configurations back to back, in rotated order), given as median "
      "[min-max] over rounds. Values are median +- standard deviation over "
      "all values. The machine is noisy (a shared VM whose speed was seen "
      "to change by up to 2x between and even within processes), so trust "
      "compare_to's significance and the ranges more than single numbers.")
    w("")
    w("*ft-upstream* is stock ft plus `patches/%s/compare/`, the backport "
      "of the fix shipped upstream for gh-157838 (in 3.14.10): a thread "
      "that queues an object to a detached owner suspends it, merges its "
      "whole queue and frees the objects inside that Py_DECREF. It has no "
      "`sys._brc_stats()` and no knobs; it runs wherever stock ft runs with "
      "threads, and is skipped when not built." % info.get("line", "3.14"))
    w("")
    w("GOALS_PLACEHOLDER")
    w("")

    # ---- M1
    w("## M1: DataLoader-like producer memory")
    w("")
    w("Producer process: the multiprocessing.Queue feeder thread creates "
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
      "'slower' means 'more'.")
    w("")
    rows = []
    metrics = [("m1_peak_rss", "peak"), ("m1_steady_rss", "steady"),
               ("m1_rest_rss", "rest")]
    for config in M1_ORDER:
        if get_bench(suites, config, "m1_peak_rss") is None:
            continue
        cells = []
        for name, what in metrics:
            b = get_bench(suites, config, name)
            ref = get_bench(suites, "gil", name)
            if b is None:
                cells += ["n/a", "n/a"]
                continue
            r = round_ratios(b, ref) if ref else []
            cells += [fmt_summary(b), fmt_ratio(r)]
            if config == "ft-brc" and what != "rest" and r:
                goals.append(("M1 %s RSS ft-brc / gil <= %.2f"
                              % (what, GOAL_M1), fmt_ratio(r),
                              statistics.median(r) <= GOAL_M1))
        above = above_baseline_ratios(suites, config, "m1_steady_rss")
        cells.append(fmt_ratio(above))
        if config == "ft-brc" and above:
            goals.append(("M1 steady RSS above the interpreter's baseline, "
                          "ft-brc / gil <= %.2f" % GOAL_M1, fmt_ratio(above),
                          statistics.median(above) <= GOAL_M1))
        tl = results / "timelines" / ("m1_%s.json" % config)
        extra = ""
        if tl.exists():
            d = json.loads(tl.read_text())
            extra = "%.1f MiB; rest - baseline %.1f MiB" % (
                d["baseline_rss"] / MiB,
                (d.get("rest_rss", 0) - d["baseline_rss"]) / MiB)
            if d.get("brc_stats"):
                st = d["brc_stats"]
                extra += ("; merged on behalf %d, by owner %d"
                          % (st.get("merged_on_behalf", 0),
                             st.get("merged_by_owner", 0)))
        rows.append("| %s | %s | %s |" % (label(config), " | ".join(cells),
                                          extra))
    if rows:
        w("| config | peak RSS | peak / gil | steady RSS | steady / gil | "
          "rest RSS | rest / gil | steady - baseline, / gil's | "
          "baseline; brc stats (last round's run) |")
        w("|---|---|---|---|---|---|---|---|---|")
        md.extend(rows)
        w("")
        if plot_memory(results, results / "m1_memory.png"):
            w("![M1 memory over time](m1_memory.png)")
            w("")
        c = compare_to(results, "gil", M1_ORDER[1:],
                       [m for m, _ in metrics], suites)
        if c:
            w("```\n%s\n```" % c)
            w("")
    else:
        w("*not run*")
        w("")

    # ---- M2
    w("## M2: free latency with a blocked owner")
    w("")
    w("Time from the last cross-thread decref to the weakref callback, the "
      "owner thread blocked in Event.wait(50 ms) or select()+os.read() "
      "(alternating). Stock ft frees when the owner wakes, so its latency is "
      "bounded by that timeout.")
    w("")
    rows = []
    for config in M2_ORDER:
        b = get_bench(suites, config, "m2_free_latency")
        if b is None:
            continue
        v = all_values(b)
        per_round = [pct(x, 99) for x in values_by_round(b).values()]
        rows.append("| %s | %d | %s | %s | %s | %s | %s |" % (
            label(config), len(v), fmt_time(pct(v, 50)), fmt_time(pct(v, 99)),
            fmt_time(max(v)),
            "%s-%s" % (fmt_time(min(per_round)), fmt_time(max(per_round))),
            fmt_time(statistics.mean(v))))
        if config == "ft-brc":
            goals.append(("M2 free latency p99 ft-brc <= 1 ms",
                          "%s (p50 %s)" % (fmt_time(pct(v, 99)),
                                           fmt_time(pct(v, 50))),
                          pct(v, 99) <= GOAL_M2))
    if rows:
        w("| config | n | p50 | p99 | max | p99 range over rounds | mean |")
        w("|---|---|---|---|---|---|---|")
        md.extend(rows)
        w("")
        if plot_latency(suites, results / "m2_latency.png"):
            w("![M2 free latency](m2_latency.png)")
            w("")
    else:
        w("*not run*")
        w("")

    # ---- T1
    w("## T1: hand-off cost (one ft-brc binary across thresholds, ft and "
      "ft-upstream)")
    w("")
    w("pingpong: queue.Queue ping-pong of small objects between two threads "
      "(values per round trip); clear: one thread clears 2 x 5000 small "
      "objects owned by threads blocked on a Barrier (values per round). "
      "*cpu* = time.process_time() (all threads), *wall* = perf_counter. "
      "Ratios relative to ft-brc threshold 0 (stock behaviour in the same "
      "binary).")
    w("")
    rows = []
    for config in T1_ORDER:
        cells = []
        any_b = False
        for name in T1_BENCHES:
            b = get_bench(suites, config, name)
            ref = get_bench(suites, "ft-brc-t0", name)
            if b is None:
                cells.append("n/a")
                continue
            any_b = True
            ratio = ("" if config == "ft-brc-t0" or ref is None
                     else "<br>%s" % fmt_ratio(round_ratios(b, ref)))
            cells.append(fmt_summary(b) + ratio)
            if config == "ft-brc" and name.endswith("_cpu") and ref:
                r = round_ratios(b, ref)
                if r:
                    goals.append(("T1 %s: default threshold CPU / threshold 0"
                                  " <= %.2f" % (name, GOAL_T1), fmt_ratio(r),
                                  statistics.median(r) <= GOAL_T1))
                for stock in STOCK:
                    other = get_bench(suites, stock, name)
                    r = round_ratios(b, other) if other else None
                    if r:
                        goals.append(("T1 %s: default threshold CPU / %s <= "
                                      "%.2f" % (name, stock_name(stock),
                                                t1_goal(stock)), fmt_ratio(r),
                                      statistics.median(r) <= t1_goal(stock)))
        if any_b:
            rows.append("| %s | %s |" % (label(config), " | ".join(cells)))
    if rows:
        w("| config | %s |" % " | ".join(T1_BENCHES))
        w("|---|%s" % ("---|" * len(T1_BENCHES)))
        md.extend(rows)
        w("")
        c = compare_to(results, "ft-brc-t0", T1_ORDER[1:], T1_BENCHES, suites)
        if c:
            w("```\n%s\n```" % c)
            w("")
    else:
        w("*not run*")
        w("")
    for fname, what, unit in (("t1_paired.json", "ping-pong", "round trips"),
                              ("t1_paired_clear.json", "clear", "rounds")):
        tp = results / fname
        if not tp.exists():
            continue
        d = json.loads(tp.read_text())
        w("**%s paired** (bench/t1_paired.py): one ft-brc process runs "
          "blocks of %d %s at threshold %d and at the default alternately, "
          "%d pairs, order rotated: median of the per-pair CPU ratios "
          "[interquartile range]. The rounds above move by +-30 %% here, "
          "more than the goal." % (what.capitalize(), d["round_trips"], unit,
                                   d["base"]["threshold"], d["pairs"]))
        w("")
        for c in d["configs"]:
            med, lo, hi, text = median_iqr(c["ratios"])
            per_k = ", ".join(
                "%s %.1f" % (k.replace("_", " "),
                             v * 1000 / (d["pairs"] * d["round_trips"]))
                for k, v in c["counters"].items())
            w("- threshold %d: %.4f× [%.4f–%.4f]; per 1000 "
              "%s: %s" % (c["threshold"], med, lo, hi,
                          unit, per_k))
            goals.append(("T1 %s paired in one process: threshold %d CPU / "
                          "threshold 0 <= %.2f"
                          % (what, c["threshold"], GOAL_T1), text,
                          med <= GOAL_T1))
        w("")
    runs = [(stock, suffix, what) for stock in STOCK
            for suffix, what in (("", "ping-pong"), ("_clear", "clear"))]
    for stock, suffix, what in runs:
        tp = results / ("t1_vs_%s%s.json" % (stock, suffix))
        if not tp.exists():
            continue
        d = json.loads(tp.read_text())
        med, lo, hi, text = median_iqr(d["ratios"])
        w("**%s against %s** (bench/t1_vs_ft.py): %d pairs of short "
          "processes, ft-brc and %s back to back in alternating order, each "
          "timing %d blocks of %d after a warm-up: median of the per-pair "
          "CPU ratios %.4f× [interquartile range %.4f–%.4f]."
          % (what.capitalize(), stock_name(stock), len(d["ratios"]), stock,
             d["blocks"], d["block"], med, lo, hi))
        w("")
        goals.append(("T1 %s against %s, alternating processes: "
                      "ft-brc CPU / %s <= %.2f"
                      % (what, stock_name(stock), stock, t1_goal(stock)),
                      text, med <= t1_goal(stock)))
    cg = results / "callgrind.json"
    if cg.exists():
        d = json.loads(cg.read_text())
        w("Callgrind instruction counts: %s, N=%d. Not fully deterministic:"
          " valgrind's thread interleaving varies, which moves the counts "
          "by a few per cent (compare ft with threshold 0; the last column "
          "shows, per run, how many objects were merged on behalf)."
          % (d["workload"], d["n"]))
        w("")
        w("| config | instructions N - N=0 (mean of runs; range) | "
          "/ threshold 0 | enqueued / merged on behalf / suspensions |")
        w("|---|---|---|---|")
        counts = d["counts"]

        def net(config):
            c = counts[config]
            base = c["0"][0]
            return [x - base for x in c[str(d["n"])]]
        base = statistics.mean(net("ft-brc-t0")) if "ft-brc-t0" in counts \
            else None
        for config in T1_ORDER:
            if config not in counts:
                continue
            v = net(config)
            m = statistics.mean(v)
            st = d.get("brc_stats", {}).get(config) or []
            st = ", ".join("%s / %s / %s" % (x.get("enqueued"),
                                             x.get("merged_on_behalf"),
                                             x.get("suspensions"))
                           for x in st if x) or "n/a (not ft-brc)"
            w("| %s | %.1f M (%.1f-%.1f M) | %s | %s |" % (
                label(config), m / 1e6, min(v) / 1e6, max(v) / 1e6,
                "%.3fx" % (m / base) if base else "n/a", st))
        w("")
    elif "CG" in info.get("skipped", {}):
        w("Callgrind: skipped (%s)." % info["skipped"]["CG"])
        w("")
    elif info.get("mode") == "fast":
        w("Callgrind instruction counts: full `make bench` only.")
        w("")

    md.extend(burst_section(results, info, goals))

    # ---- T2
    w("## T2: single-threaded workloads (no cost elsewhere)")
    w("")
    rows = []
    for name in T2_BENCHES:
        ref = get_bench(suites, "ft", name)
        if ref is None:
            continue
        cells = [fmt_summary(ref)]
        for config in ("ft-brc", "gil"):
            b = get_bench(suites, config, name)
            cells.append(fmt_ratio(round_ratios(b, ref)) if b else "n/a")
        rows.append("| %s | %s |" % (name, " | ".join(cells)))
        b = get_bench(suites, "ft-brc", name)
    if rows:
        w("Small pyperf benchmarks (bench/bm_t2_single.py); time ratios "
          "relative to ft (lower is faster).")
        w("")
        w("| benchmark | ft | ft-brc / ft | gil / ft |")
        w("|---|---|---|---|")
        md.extend(rows)
        w("")
        c = compare_to(results, "ft", ["ft-brc", "gil"], T2_BENCHES, suites)
        if c:
            w("```\n%s\n```" % c)
            w("")
        r = []
        for name in T2_BENCHES:
            ref = get_bench(suites, "ft", name)
            b = get_bench(suites, "ft-brc", name)
            if ref and b:
                r += round_ratios(b, ref)
        if r:
            goals.append(("T2 ft-brc / ft, single-threaded (within noise%s)"
                          % ("; few rounds in fast mode"
                             if info.get("mode") == "fast" else ""),
                          "median %.3fx over %d benchmark-rounds [%.3f-%.3f]"
                          % (statistics.median(r), len(r), min(r), max(r)),
                          None))
    pp = results / "pyperformance"
    pp_suites = {}
    if pp.exists():
        for f in sorted(pp.glob("*.json")):
            pp_suites[f.stem] = pyperf.BenchmarkSuite.load(str(f))
    if pp_suites:
        w("pyperformance (`pyperformance run --fast`):")
        w("")
        ref = pp_suites.get("ft")
        names = ref.get_benchmark_names() if ref else []
        w("| benchmark | ft | ft-brc / ft | gil / ft |")
        w("|---|---|---|---|")
        for name in names:
            rb = ref.get_benchmark(name)
            cells = [fmt_summary(rb)]
            for config in ("ft-brc", "gil"):
                s = pp_suites.get(config)
                try:
                    b = s.get_benchmark(name) if s else None
                except KeyError:
                    b = None
                cells.append("%.3fx" % (b.median() / rb.median()) if b
                             else "n/a")
            w("| %s | %s |" % (name, " | ".join(cells)))
        w("")
        files = [c for c in ("ft", "ft-brc", "gil") if c in pp_suites]
        if len(files) > 1:
            p = subprocess.run([sys.executable, "-m", "pyperf", "compare_to",
                                "--table"] +
                               [str(pp / (c + ".json")) for c in files],
                               capture_output=True, text=True)
            w("```\n%s\n```" % (p.stdout + p.stderr).rstrip())
            w("")
    t2i = t2i_section(results, info, goals)
    if not rows and not pp_suites and not (results /
                                           "callgrind_t2.json").exists():
        w("*not run*")
        w("")
    md.extend(t2i)
    if plot_throughput(suites, results / "throughput.png"):
        w("![throughput ratios](throughput.png)")
        w("")

    # ---- torch
    skipped = info.get("skipped", {})
    md.extend(torch_section(results, suites, info, goals))

    other = {k: v for k, v in skipped.items() if not k.startswith("TORCH")}
    if other:
        w("## Skipped")
        w("")
        for k, v in other.items():
            w("- %s: %s" % (k, v))
        w("")

    g = ["## Goals", "", "| goal | measured | verdict |", "|---|---|---|"]
    for goal, measured, ok in goals:
        verdict = ("see table" if ok is None else "met" if ok else "NOT met")
        g.append("| %s | %s | %s |" % (goal, measured, verdict))
    if not goals:
        g.append("| (no goal could be evaluated) | | |")
    text = "\n".join(md).replace("GOALS_PLACEHOLDER", "\n".join(g))
    (results / "report.md").write_text(text + "\n")
    print(text)
    return text


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    write_report(sys.argv[1])
