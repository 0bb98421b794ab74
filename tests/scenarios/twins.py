"""Drops to an owner thread that has a second thread state (review 5's C, 0009).

    python twins.py [--objects N] [--trials T] [--shapes swapped,reused-id]

Objects belong to an OS thread; the BRC bucket lists thread states by its
id.  A thread has two in one interpreter when it swaps in one of its own,
or when an exited thread left one bound and a new thread reuses its id.
Each trial: the owner makes N objects, keeps them all in a list, hands a
second reference to each to this thread, then runs Python reading the
list (so it writes their local reference counts) while this thread drops
its references one by one; then the owner clears the list.

swapped    the owner runs in a second thread state of its own (the series'
           probe _testinternalcapi.call_in_second_thread_state); where the
           probe is missing the shape is not run, and the result says so.
reused-id  a thread makes a second thread state (PyThreadState_New through
           ctypes: public API, every flavour) and exits, leaving it bound;
           the owner is the next thread whose id is the same.

Reported per shape: objects finalised while the owner still held them
(a merge on behalf raced with the owner's own reference counting: must
be 0), finalised twice, never finalised (after a collection), freed
only by a collection, and the longest drop -> free delay.  Every wait has
a deadline: a hang is a failure with the threads' stacks on stderr.

Also imported by tests/stress/mix.py, which judges the same shapes.
Prints one JSON line.
"""

import argparse
import ctypes
import faulthandler
import gc
import json
import sys
import threading
import time

WAIT = 20.0


def _second_state_runner():
    try:
        import _testinternalcapi
        return getattr(_testinternalcapi, "call_in_second_thread_state", None)
    except ImportError:
        return None


def _orphan_thread_state():
    """Leave a thread state bound to an exited thread; returns its id."""
    api = ctypes.pythonapi
    api.PyInterpreterState_Get.restype = ctypes.c_void_p
    api.PyThreadState_New.restype = ctypes.c_void_p
    api.PyThreadState_New.argtypes = [ctypes.c_void_p]
    made = []

    def body():
        if api.PyThreadState_New(api.PyInterpreterState_Get()):
            made.append(threading.get_ident())

    t = threading.Thread(target=body, name="twins-orphan")
    t.start()
    t.join(WAIT)
    return made[0] if made else None


class Ledger:
    def __init__(self, n):
        self.fin = [0] * n
        self.when = [0.0] * n
        self.held = True        # the owner still holds every object
        self.early = 0


def make_class(ledger):
    class Obj:
        __slots__ = ("i", "v")

        def __init__(self, i):
            self.i, self.v = i, i

        def __del__(self):
            ledger.fin[self.i] += 1
            ledger.when[self.i] = time.monotonic()
            if ledger.held:
                ledger.early += 1
    return Obj


def one_trial(n, shape, run_second):
    ledger = Ledger(n)
    Obj = make_class(ledger)
    handoff, ready, dropped, errors = [], threading.Event(), threading.Event(), []
    reading = threading.Event()
    twin = None
    if shape == "reused-id":
        twin = _orphan_thread_state()
        if twin is None:
            return {"error": "PyThreadState_New failed"}

    def read(keep):
        reading.set()
        s = 0
        while not dropped.is_set():
            for o in keep:          # local increfs and decrefs
                s += o.v
        return s

    def owner():
        try:
            if twin is not None and threading.get_ident() != twin:
                return
            keep = [Obj(i) for i in range(n)]
            handoff.extend(keep)
            ready.set()
            if run_second is not None:
                run_second(lambda: read(keep))
            else:
                read(keep)
            ledger.held = False
            keep.clear()
        except BaseException as e:      # reported, never lost
            errors.append(repr(e))

    # reused-id: start owners until one has the exited thread's id
    for attempt in range(50):
        t = threading.Thread(target=owner, name="twins-owner")
        t.start()
        if twin is None or ready.wait(0.5):
            break
        t.join(WAIT)
    else:
        return {"error": "no thread reused the id of the exited one in 50 tries"}
    if not ready.wait(WAIT) or not reading.wait(WAIT):
        faulthandler.dump_traceback(all_threads=True)
        return {"error": "the owner never started reading", "hung": True}
    t_drop = []
    while handoff:
        del handoff[-1]
        t_drop.append(time.monotonic())
    dropped.set()
    t.join(WAIT)
    if t.is_alive():
        faulthandler.dump_traceback(all_threads=True)
        return {"error": "the owner did not end", "hung": True}
    before_gc = sum(1 for c in ledger.fin if c)
    gc.collect()
    end = max(t_drop)
    late = [ledger.when[i] - end for i in range(n) if ledger.fin[i]]
    return {"early": ledger.early, "twice": sum(1 for c in ledger.fin if c > 1),
            "never": sum(1 for c in ledger.fin if c == 0),
            "by_gc": sum(1 for c in ledger.fin if c) - before_gc,
            "max_delay_ms": round(max(late) * 1e3, 3) if late else None,
            "errors": errors}


def run(shapes, n, trials):
    out = {}
    for shape in shapes:
        second = _second_state_runner() if shape == "swapped" else None
        if shape == "swapped" and second is None:
            out[shape] = {"run": False,
                          "why": "no _testinternalcapi.call_in_second_thread_state "
                                 "(a probe of the series)"}
            continue
        rs = [one_trial(n, shape, second) for _ in range(trials)]
        bad = [r["error"] for r in rs if "error" in r]
        rs = [r for r in rs if "error" not in r]
        out[shape] = {
            "run": True, "trials": trials, "objects": n,
            "trials_with_early_frees": sum(1 for r in rs if r["early"]),
            "early": sum(r["early"] for r in rs),
            "twice": sum(r["twice"] for r in rs),
            "never": sum(r["never"] for r in rs),
            "freed_by_gc": sum(r["by_gc"] for r in rs),
            "max_delay_ms": max((r["max_delay_ms"] for r in rs
                                 if r["max_delay_ms"] is not None), default=None),
            "errors": bad + [e for r in rs for e in r["errors"]],
        }
    return out


def failures(result):
    """What a flavour with 0009 must never show."""
    bad = []
    for shape, r in result.items():
        if not r.get("run"):
            continue
        for key in ("early", "twice", "never"):
            if r[key]:
                bad.append("%s: %d objects %s" % (shape, r[key], {
                    "early": "finalised while their owner still held them",
                    "twice": "finalised twice", "never": "never finalised"}[key]))
        bad += ["%s: %s" % (shape, e) for e in r["errors"]]
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", type=int, default=2000)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--shapes", default="swapped,reused-id")
    a = ap.parse_args()
    print(json.dumps(run(a.shapes.split(","), a.objects, a.trials)))


if __name__ == "__main__":
    main()
