"""Owner thread creates big payloads, hands them over and blocks; the main
thread (the dropper) drops the last references while the owner is blocked and
reports whether the memory came back.

    python blocking.py --kind {event,condition,sleep,lock,select,queue}
                       [--no-wait] [--deadline SECONDS]

--deadline is how long after the drop the dropper waits for the finalisers
before it measures (it returns early once everything is freed).

--no-wait (kinds event, condition, lock, queue): instead of waiting until
the owner is parked, the dropper spins until the owner has gone past the
last check of its eval breaker before its blocking call, and drops at once
-- so the drop often lands while the owner is still attached (a lock waiter
spins for a while before it parks).  Only then does it wait until the owner
is parked, and measures.  What "past the last check" means per kind is in
its committed() method.  (select and sleep detach right after such a check,
so a drop practically never lands while they are attached.)

Hand-off: for most kinds the owner appends the payloads to a list created by
the main thread and the main thread clear()s it.  For --kind queue the owner
put()s them into a queue.Queue, blocks in get() on a second queue, and the
main thread get()s the payloads and discards them.  Either way the last
reference was taken by the owner thread and is dropped by the main thread.
"""

import argparse
import os
import queue
import select
import threading
import time

import _harness as h

SLEEP = 2.0  # the time.sleep kind's blocking call (not used for sync);
            # must outlast the wait until parked plus the retain window


class EventKind:
    def __init__(self):
        self.event = threading.Event()

    def block(self):
        self.event.wait()

    def committed(self):
        return h.condition_committed(self.event._cond)

    def release(self):
        self.event.set()


class ConditionKind:
    def __init__(self):
        self.cond = threading.Condition()
        self.go = False

    def block(self):
        with self.cond:
            while not self.go:
                self.cond.wait()

    def committed(self):
        return h.condition_committed(self.cond)  # over an RLock

    def release(self):
        with self.cond:
            self.go = True
            self.cond.notify_all()


class SleepKind:
    """Cannot be interrupted: the owner wakes by itself after SLEEP seconds.
    The dropper still waits for the /proc probe; the after-wake check happens
    after joining the owner."""

    def block(self):
        time.sleep(SLEEP)

    def release(self):
        pass


class LockKind:
    def __init__(self):
        self.lock = threading.Lock()
        self.lock.acquire()  # held by the main thread
        self.blocking = False

    def block(self):
        # A plain store: no eval breaker check between it and the spinning
        # inside acquire() (calls check it only once they return).
        self.blocking = True
        self.lock.acquire()
        self.lock.release()

    def committed(self):
        return self.blocking

    def release(self):
        self.lock.release()


class SelectKind:
    def __init__(self):
        self.r, self.w = os.pipe()

    def block(self):
        select.select([self.r], [], [])
        os.read(self.r, 1)

    def release(self):
        os.write(self.w, b"x")


class QueueKind:
    """Hand-off through a queue.Queue; owner blocks in get() on another."""

    def __init__(self):
        self.items = queue.Queue()
        self.back = queue.Queue()

    def sink(self, payload):       # owner side
        self.items.put(payload)

    def drop(self):                # main thread side
        for _ in range(h.N_PAYLOADS):
            self.items.get_nowait()  # result discarded at once

    def block(self):
        self.back.get()

    def committed(self):
        return h.condition_committed(self.back.not_empty)

    def release(self):
        self.back.put(None)


KINDS = {
    "event": EventKind,
    "condition": ConditionKind,
    "sleep": SleepKind,
    "lock": LockKind,
    "select": SelectKind,
    "queue": QueueKind,
}


class ListHandoff:
    def __init__(self):
        self.box = []              # created by the main thread

    def sink(self, payload):       # owner: the list's reference is the owner's
        self.box.append(payload)

    def drop(self):                # main thread drops the last references
        self.box.clear()


def run(kind_name, deadline, no_wait=False):
    h.setup()
    kind = KINDS[kind_name]()
    if no_wait and not hasattr(kind, "committed"):
        raise SystemExit("--no-wait is not supported for --kind " + kind_name)
    handoff = kind if hasattr(kind, "sink") else ListHandoff()
    tracker = h.Tracker()
    handed = threading.Event()
    awake = threading.Event()
    mem = {}

    def owner():
        mem["rss_before"] = h.rss()
        for i in range(h.N_PAYLOADS):
            handoff.sink(h.new_payload(i, tracker))
        mem["rss_after_alloc"] = h.rss()
        handed.set()
        kind.block()
        awake.set()

    t_start = h.now()
    thread = threading.Thread(target=owner, name="brc owner (x)", daemon=True)
    thread.start()
    if not handed.wait(h.BLOCK_TIMEOUT):
        raise RuntimeError("owner never handed over its payloads")
    timing = {}
    if no_wait:
        stats_before = h.brc_stats()
        timing["commit_wait_s"] = round(h.wait_committed(kind.committed), 6)
        dropped_at = h.now()
        handoff.drop()
        state_after_drop = h.thread_state(thread.native_id)
        # Now wait until it is parked, running bytecode meanwhile (as any
        # program would): ft-brc may leave the final deallocation to a
        # pending call on a running thread.
        h.wait_blocked(thread.native_id)
        timing["parked_after_drop_s"] = round(h.now() - dropped_at, 4)
    else:
        timing["block_wait_s"] = round(h.wait_blocked(thread.native_id), 4)
        stats_before = h.brc_stats()
        dropped_at = h.now()
        handoff.drop()
        state_after_drop = None
    result = h.measure(tracker, thread.ident, thread.native_id,
                       awake.is_set, deadline, dropped_at)
    h.add_brc_stats(result, "brc_stats_before", stats_before)

    t_release = h.now()
    kind.release()
    thread.join(h.WAKE_TIMEOUT)
    if thread.is_alive():
        raise RuntimeError("owner did not finish after release")
    result.update(h.after_wake(tracker, thread.ident))

    result.update(mem)
    result.update(timing)
    result.update({
        "scenario": "blocking",
        "kind": kind_name,
        "no_wait": no_wait,
        "owner_state_after_drop": state_after_drop,
        "total": tracker.expected,
        "deadline_s": deadline,
        "release_to_wake_s": round(h.now() - t_release, 4),
        "elapsed_s": round(h.now() - t_start, 4),
    })
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", choices=sorted(KINDS), required=True)
    ap.add_argument("--no-wait", action="store_true")
    ap.add_argument("--deadline", type=float, default=5.0)
    args = ap.parse_args()
    h.emit(run(args.kind, args.deadline, args.no_wait))


if __name__ == "__main__":
    main()
