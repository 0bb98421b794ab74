"""Real DataLoader memory: torch.utils.data.DataLoader(num_workers=4).

Only run by `make bench` with BENCH_TORCH=1 (bench/run.py installs torch
into the flavour's bench venv first; it is several GB).  A synthetic
dataset returns large float32 tensors; the workers collate them into batches
and put them on their data queue, whose feeder thread moves the storages to
shared memory while pickling -- the very pattern bm_m1_memory.py imitates.
The main process "trains" a few ms per batch.

A sampler thread in the main process reads /proc/<pid>/statm of the main
process and of every worker every ~5 ms.  Recorded (pyperf runs, unit byte):

  torch_worker_peak_rss    peak of the summed RSS of the worker processes
  torch_worker_steady_rss  its time-average over the epoch
  torch_main_peak_rss      peak RSS of the main process

    python bm_torch_dataloader.py -o OUT.json [--batches N] [--timeline F]
"""

import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _util as u  # noqa: E402


def statm_rss(pid):
    try:
        with open("/proc/%d/statm" % pid, "rb") as f:
            return int(f.read().split()[1]) * u.PAGE
    except OSError:
        return 0


class Synthetic:
    """Map-style dataset of large float32 tensors (module level, so that
    forkserver/spawn workers can unpickle it)."""

    def __init__(self, length, numel):
        self.length = length
        self.numel = numel

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        import torch
        img = torch.full((self.numel,), float(i % 251), dtype=torch.float32)
        return {"img": img, "meta": {"index": i, "label": i % 10}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--timeline")
    ap.add_argument("--batches", type=int, default=48)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--image-mib", type=int, default=16)
    ap.add_argument("--train-ms", type=float, default=20.0)
    args = ap.parse_args()

    import torch
    from torch.utils.data import DataLoader

    dataset = Synthetic(args.batches * args.batch_size,
                        args.image_mib * u.MiB // 4)
    loader = DataLoader(dataset, batch_size=args.batch_size,
                        num_workers=args.workers, prefetch_factor=2,
                        shuffle=False)
    it = iter(loader)
    pids = [w.pid for w in getattr(it, "_workers", [])]
    me = os.getpid()
    samples = []                       # (t, main rss, summed worker rss)
    stop = threading.Event()
    t0 = time.monotonic()

    def sample():
        while not stop.is_set():
            samples.append((time.monotonic() - t0, statm_rss(me),
                            sum(statm_rss(p) for p in pids)))
            stop.wait(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    seen = 0
    for batch in it:
        expect = float((seen * args.batch_size) % 251)
        if float(batch["img"][0, 0]) != expect:
            raise RuntimeError("batch %d garbled" % seen)
        seen += 1
        time.sleep(args.train_ms / 1e3)
        del batch
    stop.set()
    sampler.join()
    del it, loader
    if seen != args.batches:
        raise RuntimeError("got %d batches, expected %d" % (seen, args.batches))

    window = samples[len(samples) // 10:] or samples
    worker_peak = max(s[2] for s in samples)
    worker_steady = sum(s[2] for s in window) / len(window)
    main_peak = max(s[1] for s in samples)
    extra = {"torch_version": torch.__version__,
             "torch_workers": args.workers}
    u.record(args.output, "torch_worker_peak_rss", [worker_peak], "byte",
             extra)
    u.record(args.output, "torch_worker_steady_rss", [int(worker_steady)],
             "byte", extra)
    u.record(args.output, "torch_main_peak_rss", [main_peak], "byte", extra)
    if args.timeline:
        u.write_json(args.timeline, {"samples": samples})
    print("torch: workers peak %.0f MiB, steady %.0f MiB; main peak %.0f MiB"
          % (worker_peak / u.MiB, worker_steady / u.MiB, main_peak / u.MiB))


if __name__ == "__main__":
    main()
