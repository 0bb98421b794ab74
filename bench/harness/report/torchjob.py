"""The real DataLoader (torch): the public thread's repro and the job
memory of each shape."""

import statistics

import plots
from plots import torch_timelines

from suites import (FLAVOUR_ORDER, MiB, TORCH_REPROS, TORCH_REPRO_CONFIGS,
                    TORCH_SHAPES, all_values, label, order, round_ratios,
                    values_by_round)
from .common import STOCK, Section, beside, fmt_ratio, table

GOAL_TORCH = 1.05   # ft-brc steady job memory <= 1.05 x gil
HEADING = "## Real DataLoader (torch)"


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


def section(ctx):
    md = [HEADING, ""]
    torch_skips = {k: v for k, v in ctx.info.get("skipped", {}).items()
                   if k.startswith("TORCH")}
    repro = repro_lines(ctx)
    jobs = job_lines(ctx)
    md += repro + jobs
    out = ctx.results.plot("torch_memory")
    if jobs and plots.plot_torch(ctx.path, out):
        md += ["![torch job memory over time](%s)" % out.name, ""]
    md += ["- %s skipped: %s" % kv for kv in torch_skips.items()]
    if not jobs and not repro and not torch_skips:
        md.append("*not run* (`make bench-torch`, or `make bench "
                  "BENCH_TORCH=1`)")
    return md + [""]


# --------------------------------------------------------------------------
# the public thread's repro

REPRO_INTRO = (
    "DataLoader(num_workers=%d, persistent_workers=True), one epoch of "
    "batches of %d MiB, every batch dropped by the main process; MiB of "
    "`/dev/shm/torch_*` still mapped in the job 0.5 s later, and 6 s later, "
    "after the workers' 5-s status-check timeout has woken their main "
    "threads. *repro*: default_collate (in a worker it allocates the batch "
    "in shared memory); *repro-stack*: a user's collate_fn (torch.stack), so "
    "the queue's feeder thread moves the batch to shared memory while "
    "pickling it. ft-brc-t0 is the patched binary with merging on behalf off "
    "(stock behaviour), run for its `sys._brc_stats()`, summed over the "
    "workers. *freed by*: which worker thread freed the batch tensors and "
    "how long after the feeder had pickled them.")


def repro_row(name, config, d):
    last = d[max(d)]["result"]
    later = last["after_timeout"]["workers_brc"]
    return [name, label(config),
            fmt_mib_range([d[k]["result"]["after_drop"]["mapped"]
                           for k in sorted(d)]),
            fmt_mib_range([d[k]["result"]["after_timeout"]["mapped"]
                           for k in sorted(d)]),
            "%s; %s" % (", ".join("%.0f" % (x / MiB) for x in
                                  last["after_drop"]["mapped_workers"]),
                        ", ".join("%.0f" % (x / MiB) for x in
                                  last["after_timeout"]["mapped_workers"])),
            fmt_brc(last["after_drop"]["workers_brc"])
            + ("; %d" % later["queue_length"] if later else ""),
            fmt_frees(last["after_timeout"]["frees"])]


def repro_goal(ctx, name, repro):
    def mapped(c):
        return [x["result"]["after_drop"]["mapped"]
                for x in repro[c].values()]
    ctx.goal("TORCH %s: ft-brc MiB of /dev/shm/torch mapped after the drop "
             "= 0 (%s beside)" % (name, ", ".join(STOCK)),
             "ft-brc %s%s" % (fmt_mib_range(mapped("ft-brc")),
                              beside(lambda c: fmt_mib_range(mapped(c)))),
             max(mapped("ft-brc")) == 0)


def repro_lines(ctx):
    rows, some = [], None
    for name in TORCH_REPROS:
        repro = {c: torch_timelines(ctx.path, name, c)
                 for c in TORCH_REPRO_CONFIGS}
        for config in TORCH_REPRO_CONFIGS:
            if repro[config]:
                some = some or next(iter(repro[config].values()))["result"]
                rows.append(repro_row(name, config, repro[config]))
                if config == "ft-brc":
                    repro_goal(ctx, name, repro)
    if not rows:
        return []
    return ["### The public thread's repro", "",
            REPRO_INTRO % (some["workers"], some["batch_mib"]), ""] + table(
        ["repro", "config", "mapped after the drop", "6 s later",
         "per worker after the drop; 6 s later (last round)",
         "workers' sys._brc_stats() after the drop; queued 6 s later "
         "(last round)", "batch tensors freed by (last round)"], rows)


# --------------------------------------------------------------------------
# job memory

JOB_INTRO = (
    "Memory of the whole job as an operator sees it (bench/workloads/_jobmem.py, "
    "sampled every 0.2 s): PSS summed over the main process and all its "
    "descendants (forkserver, workers, resource tracker; pages shared "
    "between them counted once) plus the `/dev/shm` objects the job holds "
    "(mapped or only open). *steady*: average while epochs run (from the "
    "first batch; of a job with several epochs only the later ones: workers "
    "start, each importing torch, during the first); *idle*: average while "
    "the loader waits between epochs and after the last (persistent "
    "workers); *without file pages*: the same with PSS_Anon in place of "
    "PSS, i.e. without the resident share of torch's library files, which "
    "depends on how each venv's copy sits in the page cache (tens of MiB "
    "between identical copies here), not on the interpreter; the `/dev/shm` "
    "part beside. Values: median [min-max] over rounds; ratios: per-round "
    "ratios to gil, median [min-max].")


def job_lines(ctx):
    md = []
    for name in TORCH_SHAPES:
        # ft-brc-t0 (run.py --torch-t0): merging on behalf off in the same
        # binary, the fairest "stock" beside ft-brc.
        tls = {c: torch_timelines(ctx.path, name, c)
               for c in order("TORCH")}
        if any(tls.values()):
            md += shape_lines(ctx, name, tls)
    return ["### Job memory", "", JOB_INTRO, ""] + md if md else []


def shape_intro(name, r):
    return ("**%s**: %s%d workers, %d batches of %d x %.1f MiB per epoch, %d "
            "epoch(s)%s, training step %.0f ms, persistent workers %s."
            % (name, "torchrun, %d DDP ranks (gloo), each with " % r["ranks"]
               if r.get("ranks") else "", r["workers"], r["batches"],
               r["batch_size"], r["batch_mib"] / r["batch_size"],
               r["epochs"], ", %.0f s pause between" % r["pause"]
               if r["epochs"] > 1 else "", r["step_ms"],
               "yes" if r["persistent"] else "no"))


def shape_row(ctx, name, config):
    """One configuration's cells of a shape's table, None if it has no job
    memory."""
    def bench(c, metric):
        return ctx.bench(c, "torch_%s_%s" % (name, metric))
    cells = []
    for metric in ("job_peak", "job_steady", "job_idle"):
        b, ref = bench(config, metric), bench("gil", metric)
        if b is None:
            cells += ["n/a", ""]
            continue
        ratios = round_ratios(b, ref) if ref else []
        cells += [fmt_mib_range(round_medians(b)),
                  fmt_ratio(ratios) if config != "gil" else ""]
    if all(c == "n/a" for c in cells[::2]):
        return None
    anon = []
    for metric in ("anon_steady", "anon_idle"):
        b, ref = bench(config, metric), bench("gil", metric)
        anon.append(fmt_ratio(round_ratios(b, ref))
                    if b and ref and config != "gil" else
                    fmt_mib_range(round_medians(b)) if b else "n/a")
    shm = [fmt_mib_range(round_medians(b)) if b else "n/a"
           for b in (bench(config, "shm_steady"), bench(config, "shm_idle"))]
    ep = bench(config, "epoch")
    return [label(config)] + cells + [
        "; ".join(anon), "; ".join(shm),
        "%.1f" % statistics.median(all_values(ep)) if ep else "n/a"]


def shape_lines(ctx, name, tls):
    order = [c for c in tls if c in FLAVOUR_ORDER or tls[c]]
    some = next(d for c in order for d in tls[c].values())
    rows = [r for r in (shape_row(ctx, name, c) for c in order) if r]
    md = [shape_intro(name, some["result"]), ""] + table(
        ["config", "peak", "/ gil", "steady", "/ gil", "idle", "/ gil",
         "without file pages: steady / gil; idle / gil",
         "/dev/shm steady; idle", "epoch (s)"], rows)
    for config in order:
        d = tls[config]
        if not d:
            continue
        last = d[max(d)]["result"]
        point = "idle" if "idle" in last["workers_brc"] else "last_batch"
        md.append("- %s, last round, workers at the %s probe: %s; freed by: "
                  "%s" % (label(config), point.replace("_", " "),
                          fmt_brc(last["workers_brc"].get(point)),
                          fmt_frees(last["frees"].get(point))))
    return md + [""] + shape_goal(ctx, name)


def shape_goal(ctx, name):
    """ft-brc against ft-brc-t0 (a line) and gil (a goal row)."""
    def bench(c, metric="job_steady"):
        return ctx.bench(c, "torch_%s_%s" % (name, metric))
    md = []
    b, ref, t0 = bench("ft-brc"), bench("gil"), bench("ft-brc-t0")
    if b and t0:
        a, a0 = bench("ft-brc", "anon_steady"), bench("ft-brc-t0",
                                                      "anon_steady")
        md += ["ft-brc against ft-brc-t0 (the same binary, merging on behalf "
               "off), per round: steady job memory %s; without file pages %s."
               % (fmt_ratio(round_ratios(b, t0)),
                  fmt_ratio(round_ratios(a, a0)) if a and a0 else "n/a"), ""]
    if b and ref:
        r = round_ratios(b, ref)

        def steady(c):
            other = bench(c)
            return fmt_ratio(round_ratios(other, ref)) if other else "n/a"
        ctx.goal("TORCH %s: ft-brc steady job memory / gil <= %.2f (%s "
                 "beside)" % (name, GOAL_TORCH, ", ".join(STOCK)),
                 "ft-brc %s%s" % (fmt_ratio(r), beside(steady)),
                 statistics.median(r) <= GOAL_TORCH)
    return md


SECTION = Section((HEADING,), section)     # full `make bench` only
