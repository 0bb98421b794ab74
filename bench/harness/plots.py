"""Every figure of the benchmarks, with one colour per flavour.

The report's figures (plot_memory, plot_latency, plot_throughput,
plot_torch), which report/ writes beside report.md, and the two that docs/
shows, made here from results already on disk (no benchmark is run): the
torch job's memory over time and M2's free-latency ECDF, gil / ft /
ft-upstream / ft-brc on one figure each.  Runs in the host venv (pyperf,
matplotlib).

    python bench/harness/plots.py --bench RESULTS_DIR --torch RESULTS_DIR \\
        [--shape SHAPE] [--out DIR]

--bench: a `make bench` results dir with M2 (its *.json pyperf suites);
--torch: a `make bench-torch` results dir with the cam4 shape (timelines/).
Writes DIR/torch_memory.png and DIR/free_latency.png (default docs/img).
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

from suites import (FLAVOUR_ORDER, MiB, T1_BENCHES, T2_BENCHES, TORCH_SHAPES,
                    all_values, get_bench, label, load_suites, order, pct,
                    round_ratios)
from results import Results

ROOT = Path(__file__).resolve().parents[2]
# one colour per flavour, in every figure that colours by flavour
COLOR = {"gil": "tab:green", "ft": "tab:red", "ft-upstream": "tab:orange",
         "ft-brc": "tab:blue"}
REPORT_DPI = 110
DOCS_DPI = 90       # small files: docs/img is committed


def pyplot():
    """matplotlib's pyplot with the file-only Agg backend (no display here)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save(plt, fig, out, dpi=REPORT_DPI):
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    plt.close(fig)


# --------------------------------------------------------------------------
# data the figures (and report/torchjob.py) read

def torch_timelines(results, name, config):
    """{round: {"result": ..., "timeline": ...}} of bm_torch_dataloader.py."""
    return {int(f.stem.rsplit("_r", 1)[1]): json.loads(f.read_text())
            for f in Results(results).torch_timelines(name, config)}


def last_rounds(results, name):
    """[(flavour, round, data)] of the last round of a torch shape, per
    flavour that ran it."""
    runs = []
    for config in FLAVOUR_ORDER:
        tls = torch_timelines(results, name, config)
        if tls:
            runs.append((config, max(tls), tls[max(tls)]))
    return runs


def m2_ecdf(ax, suites, legend, **kw):
    """Step ECDF of M2's free latency in ms, a line per flavour labelled
    legend(config, sorted values); False where no flavour has it."""
    drew = False
    for config in order("M2"):
        b = get_bench(suites, config, "m2_free_latency")
        if b is None:
            continue
        v = sorted(x * 1e3 for x in all_values(b))
        y = [(i + 1) / len(v) for i in range(len(v))]
        ax.step(v, y, where="post", color=COLOR[config],
                label=legend(config, v), **kw)
        drew = True
    return drew


# --------------------------------------------------------------------------
# the report's figures

def plot_memory(results, out):
    plt = pyplot()
    runs = []
    for config in order("M1"):
        f = Results(results).timeline("M1", config)
        if f.exists():
            runs.append((config, json.loads(f.read_text())))
    if not runs:
        return False
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 1.2 + 2.0 * len(runs)),
                             sharex=True, sharey=True, squeeze=False)
    for ax, (config, d) in zip(axes[:, 0], runs):
        t = [s[0] for s in d["samples"]]
        r = [s[1] / MiB for s in d["samples"]]
        ax.plot(t, r, linewidth=1, color=COLOR.get(config, "tab:blue"))
        ax.axhline(d["baseline_rss"] / MiB, color="grey", linestyle=":",
                   linewidth=1)
        for et, kind, _ in d["events"]:
            if kind == "ack":
                ax.axvline(et, color="grey", alpha=0.25, linewidth=0.8)
        ax.set_ylabel("RSS (MiB)")
        ax.set_title("%s: peak %.0f, steady %.0f, rest %.0f MiB "
                     "(baseline %.0f)" % (label(config), d["peak_rss"] / MiB,
                                          d["steady_rss"] / MiB,
                                          d.get("rest_rss", 0) / MiB,
                                          d["baseline_rss"] / MiB),
                     fontsize=9)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("time since start of the producer run (s); grey "
                           "lines: consumer acks -> registry entry dropped")
    fig.suptitle("M1: DataLoader-like producer RSS over time (last round)",
                 fontsize=10)
    save(plt, fig, out)
    return True


def plot_latency(suites, out):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    if not m2_ecdf(ax, suites, lambda config, v: label(config)):
        plt.close(fig)
        return False
    ax.set_xscale("log")
    ax.set_xlabel("last decref -> weakref callback (ms, log scale)")
    ax.set_ylabel("fraction of samples (ECDF)")
    ax.axvline(1.0, color="grey", linestyle=":", linewidth=1)
    ax.set_title("M2: free latency, owner thread blocked")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    save(plt, fig, out)
    return True


def throughput_rows(suites, names, ref_config, configs, fmt):
    """[(label, [throughput ratios to ref_config, one a round])]."""
    rows = []
    for name in names:
        ref = get_bench(suites, ref_config, name)
        for config in configs:
            b = get_bench(suites, config, name)
            if ref is None or b is None:
                continue
            r = [1 / x for x in round_ratios(b, ref)]
            if r:
                rows.append((fmt(name, config), r))
    return rows


def plot_throughput(suites, out):
    plt = pyplot()
    panels = []
    # T1: throughput relative to ft-brc threshold 0, per benchmark
    t1 = throughput_rows(suites, T1_BENCHES, "ft-brc-t0", order("T1")[1:],
                         lambda n, c: "%s %s" % (n[3:], label(c)))
    if t1:
        panels.append(("T1: throughput vs ft-brc threshold 0 (higher is "
                       "better)", t1))
    names = list(T2_BENCHES)
    for suite in suites.values():
        names += [n for n in suite.get_benchmark_names()
                  if n.startswith("pp_") and n not in names]
    t2 = throughput_rows(suites, names, "ft", ("ft-brc", "gil"),
                         lambda n, c: "%s %s" % (n, c))
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
        med = [statistics.median(r[1]) for r in rows]
        lo = [m - min(r[1]) for m, r in zip(med, rows)]
        hi = [max(r[1]) - m for m, r in zip(med, rows)]
        y = list(range(len(rows)))
        ax.barh(y, med, xerr=[lo, hi], color="tab:blue", alpha=0.7,
                capsize=2)
        ax.set_yticks(y)
        ax.set_yticklabels([r[0] for r in rows], fontsize=7)
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3, axis="x")
        ax.set_xlabel("ratio (bar: median of per-round ratios; whiskers: "
                      "min-max over rounds)", fontsize=7)
    save(plt, fig, out)
    return True


def plot_torch(results, out):
    plt = pyplot()
    shapes = [(name, runs) for name in TORCH_SHAPES
              for runs in [last_rounds(results, name)] if runs]
    if not shapes:
        return False
    fig, axes = plt.subplots(len(shapes), 1,
                             figsize=(9, 1.0 + 2.6 * len(shapes)),
                             squeeze=False)
    for ax, (name, runs) in zip(axes[:, 0], shapes):
        for config, _, d in runs:
            tl = d["timeline"]
            t = [s[0] for s in tl["samples"]]
            ax.plot(t, [s[1] / MiB for s in tl["samples"]], linewidth=1.2,
                    color=COLOR[config], label="%s job" % config)
            ax.plot(t, [s[3] / MiB for s in tl["samples"]], linewidth=0.8,
                    linestyle="--", color=COLOR[config],
                    label="%s /dev/shm part" % config)
            for et, kind, _ in tl["events"]:
                if kind == "epoch_end":
                    ax.axvline(et, color=COLOR[config], alpha=0.4,
                               linewidth=0.8, linestyle=":")
        r = runs[0][2]["result"]
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
    save(plt, fig, out)
    return True


# --------------------------------------------------------------------------
# the figures of docs/

def torch_memory(results, shape, out):
    """Job memory (top) and its /dev/shm part (bottom) of one round of a
    torch shape.  The last round, as the report's own figure, so that the
    round is not picked by its numbers."""
    plt = pyplot()
    runs = last_rounds(results, shape)
    if not runs:
        sys.exit("no %s timelines in %s/timelines" % (shape, results))
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(8, 5.2), sharex=True,
        gridspec_kw={"height_ratios": [3, 2]})
    for config, _, d in runs:
        s = d["timeline"]["samples"]      # t, job, pss, shm, ...
        t = [x[0] for x in s]
        top.plot(t, [x[1] / MiB for x in s], color=COLOR[config],
                 linewidth=1.3, label=config)
        bottom.plot(t, [x[3] / MiB for x in s], color=COLOR[config],
                    linewidth=1.3, label=config)
    # the phases are the same in every run (a fixed schedule): shade the
    # idle ones of the first run
    ev = {(kind, arg): t for t, kind, arg in runs[0][2]["timeline"]["events"]}
    epochs = runs[0][2]["result"]["epochs"]
    idle = [(ev.get(("epoch_end", e)), ev.get(("pause_end", e)))
            for e in range(epochs)]     # ddp pauses after every epoch
    idle.append((ev.get(("epoch_end", epochs - 1)), ev.get(("tail_end", None))))
    for ax in (top, bottom):
        for a, b in idle:
            if a is not None and b is not None:
                ax.axvspan(a, b, color="grey", alpha=0.12, linewidth=0)
        ax.grid(alpha=0.3)
    r = runs[0][2]["result"]
    top.set_title("torch DataLoader job, %s: %s%d workers, batches of %.0f "
                  "MiB, %d epochs (grey: loader idle)"
                  % (shape, "%d DDP ranks x " % r["ranks"] if r.get("ranks")
                     else "", r["workers"], r["batch_mib"], r["epochs"]),
                  fontsize=10)
    top.set_ylabel("job memory (MiB)")
    top.legend(fontsize=8, ncol=4, loc="lower center")
    bottom.set_ylabel("/dev/shm held (MiB)")
    bottom.set_xlabel("time since the loader started (s); job = PSS of main "
                      "+ workers + /dev/shm; round %d of the run"
                      % runs[0][1])
    idle_shm = {c: d["result"]["shm_idle"] / MiB for c, _, d in runs}
    # in the first idle phase, where only ft's line is off zero
    bottom.text(0.02, 0.92, "held while idle (this round):\n" + ", ".join(
        "%s %.0f" % (c, v) for c, v in idle_shm.items()) + " MiB",
        transform=bottom.transAxes, fontsize=7.5, va="top")
    save(plt, fig, out, DOCS_DPI)


def fmt_ms(ms, tick=False):
    """µs or ms, a reader need not convert; the legend as the report
    rounds (report.common.fmt_time), the ticks without decimals."""
    if ms >= 1:
        return ("%g ms" if tick else "%.2f ms") % ms
    return ("%g µs" if tick else "%.1f µs") % (ms * 1e3)


def free_latency(results, out):
    """M2: ECDF of the time from the last cross-thread decref to the
    weakref callback, the owner blocked."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.8))
    if not m2_ecdf(ax, load_suites(results),
                   lambda config, v: "%s: p50 %s, p99 %s" % (
                       config, fmt_ms(statistics.median(v)),
                       fmt_ms(pct(v, 99))), linewidth=1.5):
        sys.exit("no m2_free_latency in %s" % results)
    ax.set_xscale("log")
    ticks = [1e-3, 1e-2, 1e-1, 1, 10, 100]
    ax.set_xticks(ticks, [fmt_ms(t, tick=True) for t in ticks])
    ax.set_xlim(5e-4, 200)
    ax.axvline(1.0, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("last decref in another thread -> weakref callback "
                  "(log scale)")
    ax.set_ylabel("fraction of drops")
    ax.set_title("M2: free latency while the owner thread is blocked "
                 "(ft: until its 50-ms wait ends)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(0.42, 0.5))
    save(plt, fig, out, DOCS_DPI)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", type=Path, required=True,
                    help="make bench results dir (M2)")
    ap.add_argument("--torch", type=Path, required=True,
                    help="make bench-torch results dir")
    ap.add_argument("--shape", default="cam4", help="torch shape (cam4)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch_memory(args.torch, args.shape, args.out / "torch_memory.png")
    free_latency(args.bench, args.out / "free_latency.png")
    for name in ("torch_memory.png", "free_latency.png"):
        out = args.out / name
        print("wrote %s (%d KiB)" % (out, (out.stat().st_size + 1023) // 1024))


if __name__ == "__main__":
    main()
