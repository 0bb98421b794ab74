"""Real DataLoader memory: torch.utils.data.DataLoader with worker processes.

Only run by `make bench-torch` / `make bench BENCH_TORCH=1` (bench/harness/run.py
installs torch and numpy into the flavour's bench venv first; several GB).
The datasets and probes are in _torchjob.py.

--shape repro   The public thread's repro: DataLoader(num_workers=2,
                persistent_workers=True), one epoch of 8 batches of
                4 x 8 MiB, no training; every batch dropped, then, 0.5 s
                later, the MiB of /dev/shm/torch_* still mapped in the job
                (main + workers), and again 5.5 s later (after the workers'
                5-s status-check timeout, MP_STATUS_CHECK_INTERVAL, has woken
                them).  gil and ft-brc: 0; stock ft: about one batch per
                worker, freed only when the worker's main thread wakes.
--shape current The original shape: 4 workers, 48 batches of 4 x 16 MiB,
                20 ms "training" per batch, one epoch, workers not persistent.
--shape cameras A job shaped like a multi-camera training run: samples of
                6 x 3 x H x W float32 (default 480 x 800: 27.6 MB) plus a
                dict of numpy metadata, persistent_workers=True, --epochs
                epochs of --batches batches with a --pause between them (the
                loader idle: validation, checkpointing) and a --tail at the
                end, and a training step (_torchjob.train_step: read the whole
                batch, 8 small matmuls, sleep) of --step-ms, longer than
                loading.

Job memory (repro excepted) is sampled every --interval s by _jobmem.py as
an operator sees it: the sum of PSS over the main process and all its
descendants (forkserver, workers, resource tracker), shared memory counted
once, plus the /dev/shm objects the job holds.  Recorded (pyperf runs, unit
byte unless said), NAME = --name (default: the shape):

  torch_NAME_job_peak     maximum over the run
  torch_NAME_job_steady   average while epochs run (first batch -> epoch
                          end), the first epoch left out when there are more
                          (workers are still starting during it)
  torch_NAME_job_idle     average while the loader is idle (pauses, tail;
                          persistent workers only)
  torch_NAME_anon_steady, torch_NAME_anon_idle   the same without the
                          pages of files (see _jobmem.py)
  torch_NAME_shm_steady, torch_NAME_shm_idle   the /dev/shm part of those
  torch_NAME_epoch        seconds per epoch (unit second)

(The repro's numbers, often 0, are only in the JSON summary and --timeline.)

--collate stack replaces default_collate, which in a worker allocates the
batch in shared memory itself, by a user's collate_fn (torch.stack): then
the queue's feeder thread moves the batch to shared memory while pickling
it, as it does for batch_size=None and a dataset returning ready batches.

The last line printed is a JSON summary (sys._brc_stats() of the main
process and, summed, of the workers; which worker thread freed the batches
and how long after the feeder had sent them).

    python bm_torch_dataloader.py --shape SHAPE [-o OUT.json] [--timeline F]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import _jobmem
import _torchjob as tj

MiB = 1 << 20
# torch.utils.data._utils.MP_STATUS_CHECK_INTERVAL: an idle worker's
# index_queue.get() times out, and it runs Python again, after this long.
STATUS_CHECK_S = 5.0

SHAPES = {
    "repro": dict(workers=2, batches=8, batch_size=4, image_mib=8,
                  epochs=1, step_ms=0, persistent=True),
    "current": dict(workers=4, batches=48, batch_size=4, image_mib=16,
                    epochs=1, step_ms=20, persistent=False, pause=0,
                    tail=1.0),
    "cameras": dict(workers=4, batches=24, batch_size=2, epochs=2,
                    step_ms=150, persistent=True, pause=6.0, tail=2.0,
                    cams=6, height=480, width=800),
    # per rank; the pause follows every epoch, the last one included
    "ddp": dict(ranks=2, workers=2, batches=12, batch_size=2, epochs=3,
                step_ms=150, persistent=True, pause=4.0, tail=0,
                cams=6, height=480, width=800),
}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="current")
    ap.add_argument("--name", help="metric name part (default: the shape)")
    ap.add_argument("-o", "--output", help="pyperf JSON to append to")
    ap.add_argument("--timeline", help="write samples/events/probes here")
    for opt, typ in (("workers", int), ("batches", int), ("batch-size", int),
                     ("image-mib", int), ("epochs", int), ("step-ms", float),
                     ("pause", float), ("tail", float), ("cams", int),
                     ("ranks", int),
                     ("height", int), ("width", int)):
        ap.add_argument("--" + opt, type=typ)
    ap.add_argument("--collate", choices=["default", "stack"],
                    default="default",
                    help="default: default_collate (in a worker it "
                    "collates into shared memory); stack: a user's collate_fn "
                    "(torch.stack; the feeder thread moves the batch to "
                    "shared memory)")
    ap.add_argument("--interval", type=float, default=0.2,
                    help="memory sampling interval (s)")
    args = ap.parse_args()
    for k, v in SHAPES[args.shape].items():
        if getattr(args, k, None) is None:
            setattr(args, k, v)
    args.name = args.name or args.shape
    return args


def make_loader(args, probe_dir):
    from torch.utils.data import DataLoader
    n = args.batches * args.batch_size
    if args.shape == "cameras":
        ds = tj.Cameras(n, args.cams, args.height, args.width, probe_dir)
    else:
        ds = tj.Synthetic(n, args.image_mib * MiB // 4, probe_dir)
    loader = DataLoader(ds, batch_size=args.batch_size,
                        num_workers=args.workers, prefetch_factor=2,
                        persistent_workers=args.persistent, shuffle=False,
                        collate_fn=tj.COLLATES[args.collate],
                        worker_init_fn=tj.worker_init)
    return ds, loader


def check(ds, batch, n, batch_size):
    got = float(batch[ds.key].reshape(-1)[0])
    if got != ds.expect(n * batch_size) or batch["stamp"] != n * batch_size:
        raise RuntimeError("batch %d garbled (%r)" % (n, got))


def mean(xs):
    return sum(xs) / len(xs) if xs else None


def run_repro(args, probe_dir):
    ds, loader = make_loader(args, probe_dir)
    me = os.getpid()
    main_before = tj.brc_stats()
    n = 0
    held = None
    for n, batch in enumerate(loader):
        check(ds, batch, n, args.batch_size)
        if n == args.batches - 1:
            # the measurement must see a batch that is still in use
            held = sum(_jobmem.torch_mapped(me).values())
        del batch
    if n + 1 != args.batches:
        raise RuntimeError("got %d batches" % (n + 1))
    time.sleep(0.5)
    points = {}
    for point, wait in (("after_drop", 0), ("after_timeout",
                                             STATUS_CHECK_S + 0.5)):
        time.sleep(wait)
        mapped = _jobmem.torch_mapped(me)
        reports = tj.probe_workers(probe_dir, len(points) + 1)
        points[point] = {
            "mapped": sum(mapped.values()),
            "mapped_main": mapped.get(me, 0),
            "mapped_workers": [mapped.get(r["pid"], 0) for r in reports],
            "workers_brc": tj.sum_stats(reports),
            "frees": tj.free_summary(reports),
            "threads": reports[0]["threads"] if reports else [],
        }
    main_after = tj.brc_stats()
    del loader
    out = {"shape": "repro", "name": args.name, "collate": args.collate,
           "workers": args.workers,
           "batch_mib": args.batch_size * args.image_mib,
           "mapped_while_held": held,
           "main_brc_before": main_before, "main_brc_after": main_after}
    out.update(points)
    return out


def run_job(args, probe_dir):
    import torch
    torch.set_num_threads(1)        # the step must not take both cores
    ds, loader = make_loader(args, probe_dir)
    fd, samples_file = tempfile.mkstemp(prefix="brc-jobmem-", suffix=".json")
    os.close(fd)
    sampler = tj.jobmem_sampler(samples_file, args.interval)
    events = []
    probes = {}
    weight = torch.randn(256, 256)

    def ev(kind, epoch=None):
        events.append([round(time.monotonic(), 4), kind, epoch])

    main_before = tj.brc_stats()
    time.sleep(0.5)                 # the main process alone, torch imported
    ev("start")
    for e in range(args.epochs):
        ev("epoch_start", e)
        n = -1
        for n, batch in enumerate(loader):
            if n == 0:
                ev("first_batch", e)
            check(ds, batch, n, args.batch_size)
            if e == args.epochs - 1 and n == args.batches - 1:
                probes["last_batch"] = tj.probe_workers(probe_dir, 1)
            _, weight = tj.train_step(batch, ds.key, args.step_ms / 1e3,
                                      weight)
            del batch
        if n + 1 != args.batches:
            raise RuntimeError("epoch %d: got %d batches" % (e, n + 1))
        ev("epoch_end", e)
        if e < args.epochs - 1 and args.pause:
            time.sleep(args.pause)
            ev("pause_end", e)
    if args.persistent and args.tail:
        time.sleep(0.5)
        probes["idle"] = tj.probe_workers(probe_dir, 2)
        time.sleep(max(0.0, args.tail - 0.5))
    elif args.tail:
        time.sleep(args.tail)
    ev("tail_end")
    main_after = tj.brc_stats()
    sampler.stdin.close()
    sampler.wait(timeout=30)
    with open(samples_file) as f:
        mem = json.load(f)
    os.unlink(samples_file)
    del loader

    return summarize(args, events, mem, probes, ds.sample_bytes()
                     if args.shape == "cameras" else args.image_mib * MiB,
                     (main_before, main_after))


def run_ddp(args, probe_dir):
    """torchrun --standalone with --ranks ranks of ddp_train.py (DDP, gloo),
    each with its own persistent DataLoader; the whole tree sampled."""
    fd, samples_file = tempfile.mkstemp(prefix="brc-jobmem-", suffix=".json")
    os.close(fd)
    sampler = tj.jobmem_sampler(samples_file, args.interval)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", str(args.ranks),
           os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "ddp_train.py"), "--out", probe_dir,
           "--epochs", str(args.epochs), "--batches", str(args.batches),
           "--batch-size", str(args.batch_size),
           "--workers", str(args.workers), "--height", str(args.height),
           "--width", str(args.width), "--step-ms", str(args.step_ms),
           "--idle", str(args.pause)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=500)
    sampler.stdin.close()
    sampler.wait(timeout=30)
    with open(samples_file) as f:
        mem = json.load(f)
    os.unlink(samples_file)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise RuntimeError("torchrun exited with %d" % p.returncode)
    ranks = []
    for r in range(args.ranks):
        with open(os.path.join(probe_dir, "rank%d.json" % r)) as f:
            ranks.append(json.load(f))
    events = ranks[0]["events"]
    events.append([events[-1][0], "tail_end", None])
    result, timeline = summarize(
        args, events, mem,
        {"idle": [{"brc": r["workers_brc"]} for r in ranks]},
        args.cams * 3 * args.height * args.width * 4,
        (None, ranks[0]["main_brc"]))   # a rank reports at its end only
    result["ranks"] = args.ranks
    result["losses"] = [r["losses"] for r in ranks]
    return result, timeline


def summarize(args, events, mem, probes, sample_bytes, main_brc):
    """The job's memory numbers from the sampler's rows and the events."""
    t_ev = {}
    for t, kind, epoch in events:
        t_ev[(kind, epoch)] = t
    active, idle = [], []
    for e in range(args.epochs):
        # steady: the epochs after the first, whose first batches arrive
        # while workers are still starting (importing torch)
        if e > 0 or args.epochs == 1:
            active.append((t_ev[("first_batch", e)], t_ev[("epoch_end", e)]))
        if ("pause_end", e) in t_ev:    # ddp: after every epoch
            idle.append((t_ev[("epoch_end", e)], t_ev[("pause_end", e)]))
    if args.persistent and args.tail:
        idle.append((t_ev[("epoch_end", args.epochs - 1)],
                     t_ev[("tail_end", None)]))
    rows = mem["samples"]        # [t, job, pss, shm, root_pss, n, anon]

    def within(windows):
        return [r for r in rows if any(a <= r[0] <= b for a, b in windows)]

    run = within([(t_ev[("start", None)], t_ev[("tail_end", None)])])
    act, idl = within(active), within(idle)
    t0 = t_ev[("start", None)]
    result = {
        "shape": args.shape, "name": args.name, "workers": args.workers,
        "batches": args.batches, "batch_size": args.batch_size,
        "epochs": args.epochs, "step_ms": args.step_ms, "pause": args.pause,
        "tail": args.tail, "persistent": args.persistent,
        "collate": args.collate,
        "batch_mib": round(args.batch_size * sample_bytes / MiB, 1),
        "job_peak": max(r[1] for r in run),
        "job_steady": mean([r[1] for r in act]),
        "job_idle": mean([r[1] for r in idl]),
        "anon_steady": mean([r[6] for r in act]),
        "anon_idle": mean([r[6] for r in idl]),
        "shm_steady": mean([r[3] for r in act]),
        "shm_idle": mean([r[3] for r in idl]),
        "shm_peak": max(r[3] for r in run),
        "job_start": rows[0][1] if rows else None,
        "epoch_s": [round(b - a, 3) for a, b in
                    [(t_ev[("epoch_start", e)], t_ev[("epoch_end", e)])
                     for e in range(args.epochs)]],
        "main_brc_before": main_brc[0], "main_brc_after": main_brc[1],
        "workers_brc": {k: tj.sum_stats(v) for k, v in probes.items()},
        "frees": {k: tj.free_summary(v) for k, v in probes.items()
                  if all("frees" in r for r in v)},
        "threads": probes["last_batch"][0]["threads"]
        if probes.get("last_batch") else [],
    }
    timeline = {
        "samples": [[round(r[0] - t0, 3)] + r[1:] for r in rows],
        "columns": mem["columns"],
        "events": [[round(t - t0, 3), k, e] for t, k, e in events],
    }
    return result, timeline


def record(args, res):
    import pyperf  # noqa: F401  (only with -o: the bench venv has it)
    import _util as u
    extra = {"torch_version": __import__("torch").__version__,
             "torch_shape": args.name, "torch_workers": args.workers}
    if args.shape == "repro":
        return          # 0 bytes is no pyperf value; the report reads --timeline
    for key in ("job_peak", "job_steady", "job_idle", "anon_steady",
                "anon_idle", "shm_steady", "shm_idle"):
        if res[key] is not None:
            u.record(args.output, "torch_%s_%s" % (args.name, key),
                     [int(res[key])], "byte", extra)
    u.record(args.output, "torch_%s_epoch" % args.name, res["epoch_s"],
             "second", extra)


def main():
    args = parse_args()
    probe_dir = tempfile.mkdtemp(prefix="brc-torch-probe-")
    try:
        if args.shape == "repro":
            res, timeline = run_repro(args, probe_dir), None
            print("torch %s: %.0f MiB of /dev/shm/torch mapped after the "
                  "drop, %.0f MiB after %.0f s" % (
                      args.name, res["after_drop"]["mapped"] / MiB,
                      res["after_timeout"]["mapped"] / MiB,
                      STATUS_CHECK_S + 0.5))
        else:
            run = run_ddp if args.shape == "ddp" else run_job
            res, timeline = run(args, probe_dir)
            print("torch %s: job peak %.0f MiB, steady %.0f MiB, idle %s; "
                  "epochs %s s" % (
                      args.name, res["job_peak"] / MiB,
                      res["job_steady"] / MiB,
                      "%.0f MiB" % (res["job_idle"] / MiB)
                      if res["job_idle"] is not None else "n/a",
                      res["epoch_s"]))
    finally:
        shutil.rmtree(probe_dir, ignore_errors=True)
    if args.output:
        record(args, res)
    if args.timeline:
        with open(args.timeline, "w") as f:
            json.dump({"result": res, "timeline": timeline}, f)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
