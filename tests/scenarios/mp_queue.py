"""DataLoader-like hand-off through a multiprocessing.Queue.

In a torch DataLoader worker, batches are put() on a multiprocessing.Queue
and the queue's *feeder thread* pickles them.  Pickling a tensor moves its
storage to shared memory: the reduction, running in the feeder thread,
creates a new storage object holding the shared buffer and keeps it in a
registry until the other side has it; the registry's reference is dropped
later by a different thread.  The feeder is then typically blocked in its
condition wait for the next batch -- so in a stock free-threaded build the
shared buffer stays mapped until the next put().

Reproduction (single process, so it is fast and robust; the consumer is the
main thread reading the queue back through the real pipe):

  main:    q.put(Batch(i)) for each payload, then q.get() them back
  feeder:  Batch.__reduce__ creates a Storage (memfd, MAP_SHARED, 64 MiB,
           touched), appends it to `registry`, returns a reconstruct tuple
           carrying a dup of the memfd
  main:    waits until the feeder is blocked (the /proc probe), then
           registry.clear() and measures; then puts one more (storage-less)
           batch to wake the feeder and checks everything is freed.

    python mp_queue.py [--deadline SECONDS]
"""

import argparse
import mmap
import multiprocessing
import os
import threading
import weakref

import _harness as h

MARKER = 0x5A
GET_TIMEOUT = 30.0

tracker = h.Tracker()
registry = []                # keeps shared storages alive, like torch does
feeder_woke = threading.Event()


class Storage:
    """Shared-memory storage: a touched MAP_SHARED mapping of a memfd."""

    def __init__(self, index, size=h.PAYLOAD_SIZE):
        self.index = index
        self.size = size
        self.fd = os.memfd_create("brc-storage-%d" % index)
        os.ftruncate(self.fd, size)
        self.buf = mmap.mmap(self.fd, size, flags=mmap.MAP_SHARED)
        h.touch(self.buf)
        self.buf[0] = MARKER
        # close our descriptor together with the storage (mmap has its own)
        weakref.finalize(self, os.close, self.fd)


def share(index):
    """Runs in the feeder thread, inside pickling: create the storage,
    register it and return the reconstruct arguments."""
    storage = Storage(index)
    tracker.watch_payload(storage)
    registry.append(storage)
    return (index, os.dup(storage.fd), storage.size)


def rebuild(index, fd, size):
    """Consumer side: map the shared memory, check it, let go of it."""
    try:
        view = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    try:
        return (index, view[0])
    finally:
        view.close()


def rebuild_plain(index):
    return (index, None)


class Batch:
    def __init__(self, index):
        self.index = index

    def __reduce__(self):
        if self.index < 0:           # the wake-up batch: no storage
            feeder_woke.set()
            return (rebuild_plain, (self.index,))
        return (rebuild, share(self.index))


def run(deadline):
    h.setup()
    # "fork" context: nothing is forked, but its SemLock is unlinked at once,
    # so no resource-tracker process is started (forkserver default would).
    q = multiprocessing.get_context("fork").Queue()
    t_start = h.now()
    rss_before = h.rss()

    for i in range(h.N_PAYLOADS):
        q.put(Batch(i))
    feeder = q._thread
    got = sorted(q.get(timeout=GET_TIMEOUT) for _ in range(h.N_PAYLOADS))
    if got != [(i, MARKER) for i in range(h.N_PAYLOADS)]:
        raise RuntimeError("consumer read back %r" % (got,))
    rss_after_alloc = h.rss()

    # the feeder has written both batches; wait until it parks in its
    # condition wait for the next one
    block_wait = h.wait_blocked(feeder.native_id)
    stats_before = h.brc_stats()
    dropped_at = h.now()
    registry.clear()
    result = h.measure(tracker, feeder.ident, feeder.native_id,
                       feeder_woke.is_set, deadline, dropped_at)
    h.add_brc_stats(result, "brc_stats_before", stats_before)

    t_release = h.now()
    q.put(Batch(-1))
    if q.get(timeout=GET_TIMEOUT) != (-1, None):
        raise RuntimeError("wake-up batch garbled")
    release_to_wake = h.now() - t_release
    result.update(h.after_wake(tracker, feeder.ident))
    q.close()
    q.join_thread()

    result.update({
        "scenario": "mp_queue",
        "kind": "mp-queue",
        "total": tracker.expected,
        "deadline_s": deadline,
        "rss_before": rss_before,
        "rss_after_alloc": rss_after_alloc,
        "block_wait_s": round(block_wait, 4),
        "release_to_wake_s": round(release_to_wake, 4),
        "elapsed_s": round(h.now() - t_start, 4),
    })
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deadline", type=float, default=5.0)
    args = ap.parse_args()
    h.emit(run(args.deadline))


if __name__ == "__main__":
    main()
