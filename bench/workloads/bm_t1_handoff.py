"""T1: cost of cross-thread hand-offs when BRC enqueueing is hot.

pyperf Runner script.  Two workloads, each measured twice -- wall time and
CPU time of all threads (time.process_time()) -- as separate benchmarks:

  t1_pingpong_{cpu,wall}  queue.Queue ping-pong of small objects between
      two threads, BURST objects each way.  Each thread first receives the
      whole burst, then drops it -- objects created by the other thread,
      which by then is (mostly) blocked in its own get() -- so hand-offs
      queue objects to blocked (detached) owners.  Values are per round
      trip (PINGPONG of them per loop).
  t1_clear_{cpu,wall}  OWNERS threads each build a list of OBJECTS small
      objects and block on a threading.Barrier; the main thread waits until
      they sleep in the kernel, then clears every list (thousands of objects
      queued to blocked owners) and releases them.  Values are per round
      (CLEAR_ROUNDS of them per loop); the owners' own merging after they
      wake is inside the timed region too (the next round starts with a
      barrier all of them pass).

The knob is read from the environment: run with
PYTHON_BRC_MERGE_THRESHOLD=N and --inherit-environ=PYTHON_BRC_MERGE_THRESHOLD
(bench/harness/run.py does) so that pyperf's worker processes see it.  GC is
disabled in the workers: a collection merges all queues at random points.

Also usable without pyperf for a fixed, tiny workload (callgrind):

    python bm_t1_handoff.py --fixed N     # N ping-pongs + 2 x 5N-object clear
"""

import gc
import json
import statistics
import queue
import sys
import threading
import time

import _util as u

PINGPONG = 100      # round trips per loop (values are per round trip)
BURST = 16          # objects sent each way per round trip
OWNERS = 2          # owner threads in the clear workload
OBJECTS = 5000      # objects per owner per round
CLEAR_ROUNDS = 8    # rounds per loop (values are per round)


class Small:
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


# --------------------------------------------------------------------------
# (a) queue ping-pong

def pingpong(n, clock, burst=None, settle=0.0):
    """n round trips; each way a burst of small objects created by the
    sender, which then blocks in get() while the receiver drops them.
    settle > 0: sleep that long before dropping, so the sender is surely
    blocked by then (for valgrind, which runs one thread at a time)."""
    burst = BURST if burst is None else burst
    to_b = queue.Queue()
    to_a = queue.Queue()

    def b_side():
        for i in range(n):
            got = [to_b.get() for _ in range(burst)]
            if settle:
                time.sleep(settle)
            got.clear()             # A's objects; A is blocked in get()
            for j in range(burst):
                to_a.put(Small(j))

    tb = threading.Thread(target=b_side)
    tb.start()
    t0 = clock()
    for i in range(n):
        for j in range(burst):
            to_b.put(Small(j))
        got = [to_a.get() for _ in range(burst)]
        if settle:
            time.sleep(settle)
        got.clear()                 # B's objects; B is blocked in get()
    t1 = clock()
    tb.join()
    return t1 - t0


# --------------------------------------------------------------------------
# (b) one thread clears objects owned by threads blocked on a Barrier

class ClearWorkload:
    def __init__(self, owners, objects):
        self.owners = owners
        self.objects = objects
        self.slots = [None] * owners
        self.built = threading.Barrier(owners + 1)
        self.cleared = threading.Barrier(owners + 1)
        self.stop = False
        self.threads = [threading.Thread(target=self._owner, args=(k,),
                                         daemon=True)
                        for k in range(owners)]
        for t in self.threads:
            t.start()

    def _owner(self, k):
        n = self.objects
        while True:
            self.built.wait()
            if self.stop:
                return
            self.slots[k] = [Small(i) for i in range(n)]
            self.built.wait()       # tell main the lists are ready
            self.cleared.wait()     # blocked (detached) while main clears

    def round(self, settle=0.0):
        self.built.wait()           # owners start building
        self.built.wait()           # ... and are done
        if settle:
            time.sleep(settle)
        u.wait_sleeping([t.native_id for t in self.threads])
        for k in range(self.owners):
            self.slots[k].clear()   # drop OBJECTS objects owned by k
            self.slots[k] = None
        self.cleared.wait()

    def close(self):
        self.stop = True
        self.built.wait()
        for t in self.threads:
            t.join()


_clear = None


def clear(loops, clock):
    global _clear
    if _clear is None:
        _clear = ClearWorkload(OWNERS, OBJECTS)
        _clear.round()              # warm the threads up
    t0 = clock()
    for _ in range(loops * CLEAR_ROUNDS):
        _clear.round()
    return clock() - t0


def timed_block(workload, n, clock):
    """For t1_paired.py and blocks(): (block, units), where
    block() times one block of the workload with clock and units is what
    it ran: n ping-pong round trips, or n clear rounds rounded to whole
    loops of CLEAR_ROUNDS."""
    if workload == "clear":
        loops = max(1, n // CLEAR_ROUNDS)
        return (lambda: clear(loops, clock)), loops * CLEAR_ROUNDS
    return (lambda: pingpong(n, clock)), n


# --------------------------------------------------------------------------

def bench_pingpong(loops, clock):
    total = 0.0
    for _ in range(loops):
        total += pingpong(PINGPONG, clock)
    return total


def fixed(n):
    """Small workload for instruction counting.  Under valgrind only one
    thread runs at a time and every waiting thread looks asleep in /proc,
    so the droppers sleep before dropping to let the owners really block
    (detach); the sleeps cost the same instructions in every config."""
    gc.disable()
    if n:
        pingpong(n, time.perf_counter, burst=8, settle=0.002)
        w = ClearWorkload(OWNERS, max(1, n * 5))
        w.round(settle=0.05)
        w.close()
    # so that the caller can tell whether merges on behalf really happened
    print(json.dumps({"brc_stats": u.brc_stats()}))


def blocks(workload, count, size):
    """For the harness's t1_vs_ft.py: the median CPU time per unit of
    `count` timed blocks after a warm-up, as one JSON line."""
    gc.disable()
    run, n = timed_block(workload, size, time.process_time)
    run()
    per = [run() / n for _ in range(count)]
    print(json.dumps({"per_unit_s": statistics.median(per)}))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--fixed":
        fixed(int(sys.argv[2]))
        return
    if len(sys.argv) == 5 and sys.argv[1] == "--blocks":
        blocks(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    import pyperf

    gc.disable()
    runner = pyperf.Runner()
    runner.metadata.update(u.interpreter_metadata())
    runner.metadata["t1_pingpong_round_trips"] = PINGPONG
    runner.metadata["t1_clear_objects"] = OWNERS * OBJECTS
    cpu, wall = time.process_time, time.perf_counter
    for name, func, inner in (("t1_pingpong", bench_pingpong, PINGPONG),
                              ("t1_clear", clear, CLEAR_ROUNDS)):
        runner.bench_time_func(name + "_cpu", func, cpu, inner_loops=inner)
        runner.bench_time_func(name + "_wall", func, wall, inner_loops=inner)


if __name__ == "__main__":
    main()
