"""M1: DataLoader-like producer memory (peak and steady-state RSS).

A producer process sends batches shaped like a DataLoader's,

    (task_id, {"img": [Image, Image, ...], "meta": {...}})

through one multiprocessing.Queue to consumer processes.  As in a
DataLoader whose workers are the bottleneck, the producer loads a batch,
put()s it and waits until it is consumed (--prefetch 1 batch in flight):

  main thread   "loads" every image into private anonymous memory (pages
                touched, a short sleep per image standing in for decoding),
                put()s the batch, then blocks on the ack queue; on an ack it
                drops the batch's entry from `registry`.
  feeder thread (the queue's) pickles the batch.  Image.__reduce__ moves
                the image to shared memory as torch's storage sharing does:
                it creates a Storage (memfd, MAP_SHARED, data copied in),
                registers it in `registry` and returns rebuild arguments.
                The Storage is therefore owned by the feeder thread, which
                is blocked in its condition wait for the next batch when the
                main thread drops the registry entry.  Likewise the private
                images (owned by main) lose their last reference in the
                feeder while main is blocked waiting for an ack.
  consumers     rebuild the storage by opening /proc/<producer>/fd/<fd>,
                read one byte per page, "train" a few ms, close and ack.

A sampler thread reads /proc/self/statm every ~5 ms.  Reported, per run:

  m1_peak_rss    max RSS of the producer (bytes)
  m1_steady_rss  time-average RSS between the first and the last ack
  m1_rest_rss    median RSS right after each batch's registry entry was
                 dropped (the level the loop returns to before loading the
                 next batch; stock ft keeps the dropped batch here)
  m1_baseline_rss  RSS before the first batch (the interpreter alone)

Pages are touched in C (strided mmap slice assignment) and loading is
mostly sleeping, so the phases of the loop last about as long in every
flavour and the time-average compares memory, not interpreter speed.

GC is disabled in the producer (as in tests/scenarios): a collection merges
every BRC queue, at times that depend on unrelated allocations.

One invocation = one producer run = one pyperf run per metric, appended to
-o FILE; bench/harness/run.py interleaves invocations across flavours.

    python bm_m1_memory.py -o OUT.json [--steps N] [--timeline FILE]
"""

import argparse
import gc
import mmap
import multiprocessing
import os
import time

import _util as u

registry = {}          # task_id -> [Storage]; the producer-side registry
PRODUCER_PID = os.getpid()


class Storage:
    """A shared-memory storage: a memfd mapped MAP_SHARED."""

    def __init__(self, size):
        self.size = size
        self.fd = os.memfd_create("brc-bench-storage")
        os.ftruncate(self.fd, size)
        self.buf = mmap.mmap(self.fd, size, flags=mmap.MAP_SHARED)

    def __del__(self):
        self.buf.close()
        os.close(self.fd)


class Image:
    """A 'tensor' in private memory; pickling moves it to shared memory."""

    def __init__(self, task_id, index, size):
        self.task_id = task_id
        self.marker = (task_id * 7 + index) % 251 + 1
        self.buf = mmap.mmap(-1, size)          # private, anonymous
        u.fill_pages(self.buf, self.marker)

    def __reduce__(self):
        # Runs in the queue's feeder thread, inside pickling.
        storage = Storage(len(self.buf))
        storage.buf[:] = self.buf               # copy: all pages resident
        registry.setdefault(self.task_id, []).append(storage)
        return (rebuild_image, (PRODUCER_PID, storage.fd, storage.size,
                                self.marker))


def rebuild_image(pid, fd, size, marker):
    """Consumer side: map the producer's memfd read-only."""
    fd = os.open("/proc/%d/fd/%d" % (pid, fd), os.O_RDONLY)
    try:
        view = mmap.mmap(fd, size, flags=mmap.MAP_SHARED,
                         prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    return (view, marker)


def consumer(data_q, ack_q, consume_s):
    while True:
        item = data_q.get()
        if item is None:
            return
        task_id, sample = item
        ok = True
        for view, marker in sample["img"]:
            page_bytes = view[::u.PAGE]          # reads every page
            ok = ok and page_bytes.count(marker) == len(page_bytes)
            view.close()
        time.sleep(consume_s)                    # the training step
        ack_q.put((task_id, ok))


def run_once(args):
    gc.disable()
    image_size = args.image_mib * u.MiB
    ctx = multiprocessing.get_context("fork")   # fork before any thread
    data_q = ctx.Queue()
    ack_q = ctx.Queue()
    consumers = [ctx.Process(target=consumer,
                             args=(data_q, ack_q, args.consume_ms / 1e3),
                             daemon=True)
                 for _ in range(args.consumers)]
    for p in consumers:
        p.start()

    t0 = time.monotonic()
    baseline = u.rss()
    sampler = u.RssSampler(interval=args.sample_ms / 1e3, t0=t0)
    sampler.start()
    events = []                                  # (t, kind, task_id)

    def load_and_put(task_id):
        images = []
        for k in range(args.images):
            images.append(Image(task_id, k, image_size))
            time.sleep(args.load_ms / 1e3)       # "decoding"
        batch = (task_id, {"img": images,
                           "meta": {"index": task_id, "label": task_id % 10,
                                    "shape": (args.images, image_size)}})
        del images
        data_q.put(batch)
        events.append((time.monotonic() - t0, "put", task_id))

    rest = []                                    # RSS after each drop
    in_flight = 0
    next_id = 0
    bad = 0
    while next_id < args.steps and in_flight < args.prefetch:
        load_and_put(next_id)
        next_id += 1
        in_flight += 1
    while in_flight:
        task_id, ok = ack_q.get()                # main blocks (detached)
        bad += not ok
        in_flight -= 1
        del registry[task_id]                    # last ref: feeder-owned
        rest.append(u.rss())
        events.append((time.monotonic() - t0, "ack", task_id))
        if next_id < args.steps:
            load_and_put(next_id)
            next_id += 1
            in_flight += 1
    end_rss = u.rss()
    time.sleep(args.tail_ms / 1e3)               # feeder still blocked
    tail_rss = u.rss()

    for _ in consumers:
        data_q.put(None)
    for p in consumers:
        p.join()
    data_q.close()
    data_q.join_thread()
    sampler.stop()
    if bad:
        raise RuntimeError("%d batches arrived corrupted" % bad)

    samples = sampler.samples
    acks = [t for t, kind, _ in events if kind == "ack"]
    window = [r for t, r in samples if acks[0] <= t <= acks[-1]]
    peak = max(r for _, r in samples)
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                peak = max(peak, int(line.split()[1]) * 1024)
    return {
        "baseline_rss": baseline,
        "peak_rss": peak,
        "steady_rss": sum(window) / len(window),
        "rest_rss": sorted(rest)[len(rest) // 2],
        "end_rss": end_rss,
        "tail_rss": tail_rss,
        "batch_bytes": args.images * image_size,
        "samples": samples,
        "events": events,
        "brc_stats": u.brc_stats(),
        "elapsed_s": time.monotonic() - t0,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", required=True,
                    help="pyperf JSON file to append the runs to")
    ap.add_argument("--timeline", help="write samples/events JSON here")
    ap.add_argument("--steps", type=int, default=12, help="batches to send")
    ap.add_argument("--images", type=int, default=4, help="images per batch")
    ap.add_argument("--image-mib", type=int, default=16)
    ap.add_argument("--prefetch", type=int, default=1,
                    help="batches in flight")
    ap.add_argument("--consumers", type=int, default=2)
    ap.add_argument("--load-ms", type=float, default=5.0,
                    help="sleep per image while loading")
    ap.add_argument("--consume-ms", type=float, default=10.0)
    ap.add_argument("--tail-ms", type=float, default=50.0)
    ap.add_argument("--sample-ms", type=float, default=5.0)
    args = ap.parse_args()

    res = run_once(args)
    extra = {"m1_batch_bytes": res["batch_bytes"],
             "m1_steps": args.steps}
    u.record(args.output, "m1_peak_rss", [res["peak_rss"]], "byte", extra)
    u.record(args.output, "m1_steady_rss", [int(res["steady_rss"])], "byte",
             extra)
    u.record(args.output, "m1_rest_rss", [res["rest_rss"]], "byte", extra)
    u.record(args.output, "m1_baseline_rss", [res["baseline_rss"]], "byte",
             extra)
    if args.timeline:
        u.write_json(args.timeline, {
            k: res[k] for k in ("baseline_rss", "peak_rss", "steady_rss",
                                "rest_rss",
                                "end_rss", "tail_rss", "batch_bytes",
                                "samples", "events", "brc_stats",
                                "elapsed_s")})
    print("m1: peak %.1f MiB, steady %.1f MiB, rest %.1f MiB, baseline "
          "%.1f MiB, after last ack %.1f MiB (+%d ms: %.1f MiB), %.2fs"
          % (res["peak_rss"] / u.MiB, res["steady_rss"] / u.MiB,
             res["rest_rss"] / u.MiB,
             res["baseline_rss"] / u.MiB, res["end_rss"] / u.MiB,
             args.tail_ms, res["tail_rss"] / u.MiB, res["elapsed_s"]))


if __name__ == "__main__":
    main()
