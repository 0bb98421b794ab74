"""M2: free latency of objects whose owner thread is blocked (detached).

An owner thread creates a small object (a class instance holding a 64 KiB
bytearray), hands it to the main thread and blocks in Event.wait(timeout)
(a futex wait: detached).  The main thread waits until the owner sleeps in
the kernel (/proc/self/task/<tid>/stat), then drops the last reference and
measures the time until the object's weakref callback runs:

  gil      the object is freed by the drop itself (microseconds);
  ft       it is queued to the owner and freed when the owner wakes up,
           i.e. after the rest of the owner's timeout (--timeout-ms, 50 ms:
           the latency is about the timeout, which bounds it);
  ft-brc   the dropping thread merges the blocked owner's queue on its
           behalf and frees it at once.

The drop alternates between the owner blocked in Event.wait() and in
os.read() on a pipe (select() with the same timeout), two different ways of
detaching.  GC is disabled: a collection would merge the queue.

Each invocation appends one pyperf run (unit: seconds, one value per
sample) for benchmark m2_free_latency to -o FILE; p50/p99 come from
pyperf's Benchmark.percentile() over all runs.

    python bm_m2_latency.py -o OUT.json [--samples N] [--timeout-ms MS]
"""

import argparse
import gc
import os
import select
import statistics
import threading
import time
import weakref

import _util as u


class Payload:
    __slots__ = ("data", "__weakref__")

    def __init__(self):
        self.data = bytearray(64 * 1024)


class Owner(threading.Thread):
    def __init__(self, timeout):
        super().__init__(name="owner", daemon=True)
        self.timeout = timeout
        self.go = threading.Semaphore(0)       # main -> owner: make one
        self.ready = threading.Semaphore(0)    # owner -> main: it is in box
        self.box = []
        self.mode = "event"
        self.quit = False
        self.rfd, self.wfd = os.pipe()

    def run(self):
        never = threading.Event()
        while True:
            self.go.acquire()
            if self.quit:
                return
            self.box.append(Payload())
            self.ready.release()
            if self.mode == "event":
                never.wait(self.timeout)       # futex wait, detached
            else:                              # blocked in a syscall
                r, _, _ = select.select([self.rfd], [], [], self.timeout)
                if r:
                    os.read(self.rfd, 1)


def measure(samples, timeout):
    gc.disable()
    owner = Owner(timeout)
    owner.start()
    # The callback may run in this thread at an eval breaker check inside
    # the wait below (with ft-brc's grace period, or a collection), where a
    # threading.Event's non-reentrant lock can be held by this very thread:
    # Event.set() there would deadlock. A Condition over an RLock can be
    # notified from anywhere in its owning thread.
    freed = threading.Condition(threading.RLock())
    freed_at = [0.0]

    def on_free():
        with freed:
            freed_at[0] = time.perf_counter()
            freed.notify_all()

    latencies = []
    by_mode = {"event": [], "read": []}
    for i in range(samples):
        owner.mode = "event" if i % 2 == 0 else "read"
        freed_at[0] = 0.0
        owner.go.release()
        owner.ready.acquire()
        obj = owner.box.pop()
        weakref.finalize(obj, on_free)
        u.wait_sleeping([owner.native_id])
        t0 = time.perf_counter()
        del obj                                 # last reference
        # (A notification can be missed if the callback runs in this thread
        # between the check of freed_at and the wait: hence the short waits.
        # The latency is taken in the callback, so they do not change it.)
        give_up = time.perf_counter() + 10 * timeout + 5
        with freed:
            while not freed_at[0]:
                if time.perf_counter() > give_up:
                    raise RuntimeError("object not freed after the owner woke")
                freed.wait(0.01)
        lat = freed_at[0] - t0
        latencies.append(lat)
        by_mode[owner.mode].append(lat)
        # let the owner finish its timeout before the next sample, so
        # every sample starts with the owner freshly blocked
        while u.thread_state(owner.native_id) == "S" and \
                time.perf_counter() - t0 < timeout:
            time.sleep(timeout / 10)
    owner.quit = True
    owner.go.release()
    owner.join()
    return latencies, by_mode


def percentile(values, p):
    """Interpolated as pyperf's Benchmark.percentile() does."""
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", required=True,
                    help="pyperf JSON file to append the run to")
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--timeout-ms", type=float, default=50.0,
                    help="how long the owner blocks before it wakes")
    args = ap.parse_args()
    lat, by_mode = measure(args.samples, args.timeout_ms / 1e3)
    u.record(args.output, "m2_free_latency", lat, "second",
             {"m2_owner_timeout_ms": args.timeout_ms})
    print("m2: %d samples, p50 %.3f ms, p99 %.3f ms, max %.3f ms "
          "(event p50 %.3f ms, read p50 %.3f ms)"
          % (len(lat), percentile(lat, 50) * 1e3, percentile(lat, 99) * 1e3,
             max(lat) * 1e3, percentile(by_mode["event"], 50) * 1e3,
             percentile(by_mode["read"], 50) * 1e3))


if __name__ == "__main__":
    main()
