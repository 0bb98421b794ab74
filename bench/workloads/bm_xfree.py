"""XFREE: cross-thread frees, the owners blocked on an Event.

OWNERS threads each build a list of OBJECTS two-element lists and block on
a threading.Event (detached); once they sleep in the kernel, the main
thread drops every one of those lists, each owned by a blocked thread:

  xfree_clear  L.clear() of each owner's list: one C loop of decrefs
  xfree_pop    `while L: L.pop()`: each popped list dropped by the eval
               loop, one bytecode-level drop at a time

Then it sets the Event and the owners start the next round.  Values are
the wall time of the drop per dropped object (ROUNDS rounds a loop).  The
items are [None, None]: immortal, so that only the lists are freed.  gil
frees in the drop; stock ft queues each list to its blocked owner, which
frees them after it wakes, outside the timing; ft-upstream and ft-brc free
them on the owner's behalf.

pyperf Runner script.  GC is disabled: a collection merges every queue.
`--once` instead times one loop of each without pyperf (a bare build) and
prints ns per object and sys._brc_stats() as JSON.
"""

import gc
import json
import sys
import threading
import time

import _util as u

OWNERS = 4          # owner threads
OBJECTS = 4000      # two-element lists per owner per round
ROUNDS = 4          # rounds per loop


class Owners:
    """The owner threads: every round each builds its list, hands it over
    and blocks on the round's Event until the main thread has dropped it."""

    def __init__(self):
        self.ready = threading.Barrier(OWNERS + 1)
        self.release = threading.Event()
        self.lists = [None] * OWNERS
        self.threads = [threading.Thread(target=self._own, args=(k,),
                                         daemon=True)
                        for k in range(OWNERS)]
        for t in self.threads:
            t.start()

    def _own(self, k):
        while True:
            self.ready.wait()           # a round starts
            release = self.release
            self.lists[k] = [[None, None] for _ in range(OBJECTS)]
            self.ready.wait()           # ... and the list is there
            release.wait()              # blocked (detached) while dropped

    def round(self, drop, clock):
        """One round: the time `drop` takes to drop every owner's list."""
        self.release = threading.Event()    # read by the owners after
        self.ready.wait()                   # this barrier
        self.ready.wait()
        u.wait_sleeping([t.native_id for t in self.threads])
        lists, self.lists = self.lists, [None] * OWNERS
        t0 = clock()
        drop(lists)
        elapsed = clock() - t0
        self.release.set()
        return elapsed


def drop_clear(lists):
    for objs in lists:
        objs.clear()


def drop_pop(lists):
    for objs in lists:
        pop = objs.pop
        while objs:
            pop()


_owners = None


def bench(loops, drop):
    global _owners
    if _owners is None:
        _owners = Owners()
        _owners.round(drop, time.perf_counter)     # the threads warm up
    total = 0.0
    for _ in range(loops * ROUNDS):
        total += _owners.round(drop, time.perf_counter)
    return total


def once():
    gc.disable()
    out = {}
    for name, drop in DROPS:
        bench(1, drop)                  # the first round of a new drop
        out[name + "_ns"] = round(
            bench(1, drop) / (ROUNDS * OWNERS * OBJECTS) * 1e9, 1)
    out["brc_stats"] = u.brc_stats()
    print(json.dumps(out))


DROPS = (("xfree_clear", drop_clear), ("xfree_pop", drop_pop))


def main():
    if sys.argv[1:] == ["--once"]:
        once()
        return
    import pyperf

    gc.disable()
    runner = pyperf.Runner()
    runner.metadata.update(u.interpreter_metadata())
    runner.metadata["xfree_owners"] = OWNERS
    runner.metadata["xfree_objects_per_owner"] = OBJECTS
    for name, drop in DROPS:
        runner.bench_time_func(name, bench, drop,
                               inner_loops=ROUNDS * OWNERS * OBJECTS)


if __name__ == "__main__":
    main()
