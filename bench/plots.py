"""The two figures docs/ shows, made from results already on disk (no
benchmark is run): the torch job's memory over time and M2's free-latency
ECDF, gil / ft / ft-upstream / ft-brc on one figure each.  Runs in the host
venv (pyperf, matplotlib), like report.py, whose loaders it uses.

    python bench/plots.py --bench RESULTS_DIR --torch RESULTS_DIR [--out DIR]

--bench: a `make bench` results dir with M2 (its *.json pyperf suites);
--torch: a `make bench-torch` results dir with the cam4 shape (timelines/).
Writes DIR/torch_memory.png and DIR/free_latency.png (default docs/img).
"""

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MiB = report.MiB
FLAVOURS = report.FLAVOUR_ORDER
# one colour per flavour in both figures (report.plot_torch's)
COLOR = {"gil": "tab:green", "ft": "tab:red", "ft-upstream": "tab:orange",
         "ft-brc": "tab:blue"}
# small files: docs/img is committed
DPI = 90


def save(plt, fig, out):
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    print("wrote %s (%d KiB)" % (out, (out.stat().st_size + 1023) // 1024))


def torch_memory(results, shape, out):
    """Job memory (top) and its /dev/shm part (bottom) of one round of a
    torch shape.  The last round, as the report's own figure, so that the
    round is not picked by its numbers."""
    plt = report._pyplot()
    runs = []
    for config in FLAVOURS:
        tls = report.torch_timelines(results, shape, config)
        if tls:
            runs.append((config, max(tls), tls[max(tls)]))
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
    save(plt, fig, out)


def fmt_ms(ms, tick=False):
    """µs or ms, a reader need not convert; the legend as the report
    rounds (report.fmt_time), the ticks without decimals."""
    if ms >= 1:
        return ("%g ms" if tick else "%.2f ms") % ms
    return ("%g µs" if tick else "%.1f µs") % (ms * 1e3)


def free_latency(results, out):
    """M2: ECDF of the time from the last cross-thread decref to the
    weakref callback, the owner blocked."""
    plt = report._pyplot()
    suites = report.load_suites(results)
    fig, ax = plt.subplots(figsize=(8, 3.8))
    drew = False
    for config in FLAVOURS:
        b = report.get_bench(suites, config, "m2_free_latency")
        if b is None:
            continue
        v = sorted(x * 1e3 for x in report.all_values(b))
        y = [(i + 1) / len(v) for i in range(len(v))]
        ax.step(v, y, where="post", color=COLOR[config], linewidth=1.5,
                label="%s: p50 %s, p99 %s" % (
                    config, fmt_ms(statistics.median(v)),
                    fmt_ms(report.pct(v, 99))))
        drew = True
    if not drew:
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
    save(plt, fig, out)


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


if __name__ == "__main__":
    main()
