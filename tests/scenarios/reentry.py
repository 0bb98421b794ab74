"""A re-entered BRC merge: the shapes of review 5 (hang A) and issue 46.

    python reentry.py [--objects N] [--trials T] [--chains 1,2]
                      [--shapes stream,wait]

An owner thread fills a box and then runs Python (eval breaker checks)
while this thread drops what it made; the owner's checks free it.

stream  N objects with a __del__ (and, separately, with a weakref
        callback) popped and dropped one at a time.  Stock CPython enters
        the owner's merge again inside each finalizer whose next object
        is already queued, one level per object, until RecursionError
        makes the rest fail: counted as finalizers that never ran; the
        deepest nesting of the finalizer is reported too.
wait    destructors that the owner's merge runs and that wait (polling a
        weak reference, attached) for another object of the same owner,
        which this thread drops once the destructor started; a chain of
        such destructors.  Reported: trials where a wait ran out (10 s),
        and drop -> freed latencies.

Also imported by tests/stress/mix.py, which judges the same shapes.
Prints one JSON line; tests/compare/compare_scenarios.py judges.
"""

import argparse
import json
import sys
import threading
import time
import weakref

WAIT = 10.0         # a waiting destructor gives up: a failure, not a hang


class Plain:
    __slots__ = ("__weakref__",)


def nesting(code):
    """How many frames of code are on the caller's stack."""
    f, n = sys._getframe(1), 0
    while f is not None:
        n += f.f_code is code
        f = f.f_back
    return n


def with_running_owner(fill, drop):
    """fill(box) in an owner thread that then runs Python until drop(box),
    run here, returns; False if the owner never ended."""
    box, filled, stop = [], threading.Event(), threading.Event()

    def owner():
        fill(box)
        filled.set()
        while not stop.is_set():
            pass

    t = threading.Thread(target=owner, name="reentry-owner")
    t.start()
    try:
        if filled.wait(WAIT):
            drop(box)
    finally:
        stop.set()
        t.join(WAIT * 3)
    return not t.is_alive()


def stream_shape(n, callback, make=Plain):
    """n objects of a running owner dropped one at a time:
    (owner ended, finalizers run, deepest nesting)."""
    depths, refs = [], []

    class Fin:
        __slots__ = ("__weakref__",)

        def __del__(self):
            depths.append(nesting(Fin.__del__.__code__))

    def on_dead(ref):
        depths.append(nesting(on_dead.__code__))

    def fill(box):
        if callback:
            objs = [make() for _ in range(n)]
            refs.extend(weakref.ref(o, on_dead) for o in objs)
        else:
            objs = [Fin() for _ in range(n)]
        box.extend(objs)

    def drop(box):
        while box:
            box.pop()

    ended = with_running_owner(fill, drop)
    return ended, len(depths), max(depths, default=0)


def waiting_shape(chain, permit_wait=False):
    """Destructors run by their owner's merge, each waiting for the next
    object of the same owner, which this thread drops once the destructor
    started: (owner ended, [(index, freed, seconds from its drop)]),
    innermost first.  With permit_wait, one destructor waits, in short
    waits, for a permit that the next object's finalizer releases."""
    assert chain == 1 or not permit_wait     # see tests/stress/mix.py
    started = [threading.Event() for _ in range(chain)]
    # a Lock as the permit: threading.Semaphore.release() takes the lock
    # that its acquire() holds while it runs bytecode (and checks), so a
    # finalizer releasing it there deadlocks on any free-threaded build
    permit = threading.Lock()
    dropped = [None] * (chain + 1)
    outcome = []

    class Last:
        def __del__(self):
            if permit_wait:
                permit.release()

    class Waiter:
        def __init__(self, i, nxt):
            self.i, self.nxt = i, weakref.ref(nxt)

        def __del__(self):
            started[self.i].set()
            t0 = time.monotonic()
            freed = False
            while not freed and time.monotonic() - t0 < WAIT:
                if permit_wait:
                    freed = permit.acquire(timeout=0.001)
                else:
                    freed = self.nxt() is None
            t1 = time.monotonic()
            late = t1 - dropped[self.i + 1] if dropped[self.i + 1] else None
            outcome.append((self.i, freed, late))

    def fill(box):
        if permit_wait:
            permit.acquire()            # released by Last.__del__
        box.append(Last())
        for i in reversed(range(chain)):
            box.append(Waiter(i, box[-1]))

    def drop(box):
        for i in range(chain):
            box.pop()
            if not started[i].wait(WAIT):
                return
        dropped[chain] = time.monotonic()
        for i in range(chain - 1, 0, -1):
            dropped[i] = dropped[chain]
        box.pop()

    ended = with_running_owner(fill, drop)
    return ended, outcome


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", type=int, default=300_000)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--chains", default="1,2")
    ap.add_argument("--shapes", default="stream,wait")
    args = ap.parse_args()
    r = {"free_threaded_build": bool(__import__("sysconfig")
                                     .get_config_var("Py_GIL_DISABLED")),
         "gil_enabled": getattr(sys, "_is_gil_enabled", lambda: True)()}
    lost = [0]

    def hook(u, default=sys.unraisablehook):
        if isinstance(u.exc_value, RecursionError):
            lost[0] += 1
        else:
            default(u)

    sys.unraisablehook = hook
    shapes = args.shapes.split(",")
    for name, callback in (("stream_del", False), ("stream_callback", True)):
        if "stream" not in shapes:
            break
        runs = []
        for _ in range(args.trials):
            lost[0] = 0
            ended, ran, depth = stream_shape(args.objects, callback)
            runs.append({"lost": args.objects - ran, "max_depth": depth,
                         "recursion_errors": lost[0], "ended": ended})
        r[name] = runs
    # With the GIL a dropped object is freed in the dropping thread, which
    # would wait in the destructor for an object it has yet to drop.
    chains = args.chains.split(",") if "wait" in shapes else []
    for chain in map(int, chains) if not r["gil_enabled"] else ():
        for permit_wait in (False, True) if chain == 1 else (False,):
            runs = [waiting_shape(chain, permit_wait) for _ in range(args.trials)]
            r["wait_%s_%d" % ("permit" if permit_wait else "poll", chain)] = {
                "kept": sum(not e or len(o) != chain or not all(x[1] for x in o)
                            for e, o in runs),
                "late_s": sorted(x[2] for _, o in runs for x in o
                                 if x[1] and x[2] is not None)}
    print(json.dumps(r))


if __name__ == "__main__":
    main()
