"""Public-API scenarios for the properties the series' own tests pin with
probes, so that each is a row for every flavour (gil, ft, ft-upstream,
ft-brc): they use threads, weakrefs and timing only.

    python properties.py --case CASE [--trials N]

In every case an owner thread creates the objects, hands the only
references to another thread and blocks in os.read() on a pipe (detached);
the other thread (the dropper) drops them once the owner sleeps in the
kernel.  Prints one JSON line; tests/compare/compare_scenarios.py judges.

spin    200 objects of 64 KiB; after the drop the dropper runs pure Python
        (no lock wait, no sleep, no call that detaches) for SPIN seconds
        and counts how many were finalised meanwhile, outside the owner.
chain   a chain of 1,000 objects (each refers to the next) dropped at its
        head, then pure Python: every level freed while the owner blocks?
pauses  a third thread calls sys._current_frames() in a loop (each call
        stops the world); the dropper drops 20 objects one by one, stops
        the pauser, waits 0.5 s and counts what is still alive while the
        owner is blocked.  Repeated --trials times with a new owner.
site    where the weakref callback of a dropped object runs: at the drop
        (inside the statement that drops it), at a later eval breaker
        check of the dropper -- also: inside a `with lock:` it entered
        after the drop --, or in the owner once it wakes.
handoff-event, handoff-lock
        a hand-off loop: the owner hands two objects over and at once waits
        in Event.wait() / lock.acquire(); the dropper drops them as soon as
        it has them (often while the owner spins attached before it parks)
        and counts the trials where some were alive once it was parked.
tasks   20,000 finished asyncio Tasks: the owner times freeing a batch of
        its own; then a second batch is dropped by the dropper while two
        other threads run Python, timed until every Task is finalised.
busy    review B: a hand-off loop in which a dropper thread drops the
        owner's objects as soon as it has them (often while the owner spins
        attached before it parks in lock.acquire()) and then blocks itself;
        the newest thread is in a long C call (sum(range(...))) and the
        main thread runs pure Python.  Per trial: how long after the drop
        the last object was finalised while the owner stayed parked.
upstream-test
        gh-157838's own test, restated: the owner holds 100 objects and
        parks in lock.acquire(); the dropper pops them one at a time and
        asks at once, through a weak reference, whether each is gone.
"""

import argparse
import asyncio
import os
import sys
import threading
import weakref

import _harness as h

SPIN = 3.0
WAIT = 10.0        # longest wait for frees while the owner stays blocked


class Obj:
    __slots__ = ("data", "__weakref__")

    def __init__(self, size=0):
        self.data = bytearray(size)


class Owner:
    """A thread that runs make() (returning the objects to hand over, held
    only by the list it fills) and then blocks in os.read() until
    release()."""

    def __init__(self, make):
        self.box = []
        self.r, self.w = os.pipe()
        self.handed = threading.Event()
        self.awake = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(make,),
                                       daemon=True)
        self.thread.start()
        if not self.handed.wait(h.BLOCK_TIMEOUT):
            raise RuntimeError("owner never handed over its objects")
        h.wait_blocked(self.thread.native_id)

    def _run(self, make):
        make(self.box)
        self.handed.set()
        os.read(self.r, 1)
        self.awake.set()

    @property
    def ident(self):
        return self.thread.ident

    def blocked(self):
        return (not self.awake.is_set()
                and h.thread_state(self.thread.native_id) == "S")

    def release(self):
        os.write(self.w, b"x")
        self.thread.join(h.WAKE_TIMEOUT)
        if self.thread.is_alive():
            raise RuntimeError("owner did not finish after release")
        os.close(self.r)
        os.close(self.w)


def watch(freed, obj):
    """Record the thread that finalises obj (a list append: no lock)."""
    weakref.finalize(obj, lambda: freed.append(threading.get_ident()))


def watch_all(freed, objs):
    for obj in objs:
        watch(freed, obj)


def settle_after_wake(freed, n):
    """Wait for everything to be finalised once the owner is awake."""
    end = h.now() + h.WAKE_TIMEOUT
    while len(freed) < n and h.now() < end:
        threading.Event().wait(h.POLL)
    return len(freed)


def drop_then_spin(owner, freed, n):
    """Drop the owner's objects, then run pure Python (no lock wait, no
    sleep, no detaching call) for up to SPIN seconds until all are freed."""
    dropped_at = h.now()
    owner.box.clear()
    end, all_at = dropped_at + SPIN, None
    while all_at is None and h.now() < end:
        if len(freed) == n:
            all_at = h.now() - dropped_at
    others = sum(1 for t in freed if t != owner.ident)
    blocked = owner.blocked()
    owner.release()
    return {"total": n, "freed_while_blocked": others,
            "all_freed_after_s": all_at, "owner_blocked_at_measure": blocked,
            "freed_after_wake": settle_after_wake(freed, n)}


def case_spin(trials):
    n = 200
    freed = []

    def make(box):
        box.extend(Obj(64 * 1024) for _ in range(n))
        watch_all(freed, box)

    return drop_then_spin(Owner(make), freed, n)


def case_chain(trials):
    """A dead graph: a chain of 1,000 objects of the owner, dropped at its
    head."""
    n = 1000
    freed = []

    def make(box):
        head = None
        for _ in range(n):
            obj = Obj()
            obj.data = head
            watch(freed, obj)
            head = obj
        box.append(head)

    return drop_then_spin(Owner(make), freed, n)


def case_pauses(trials):
    n = 20
    stop = threading.Event()

    def pauser():
        while not stop.is_set():
            sys._current_frames()

    left_behind = objects_left = void = 0
    freed_after_wake = True
    for _ in range(trials):
        freed = []

        def make(box):
            box.extend(Obj() for _ in range(n))
            watch_all(freed, box)

        owner = Owner(make)
        stop.clear()
        p = threading.Thread(target=pauser)
        p.start()
        while owner.box:
            owner.box.pop()
        stop.set()
        p.join()
        threading.Event().wait(0.5)
        alive = n - sum(1 for t in freed if t != owner.ident)
        if not owner.blocked():
            void += 1
        elif alive:
            left_behind += 1
            objects_left += alive
        owner.release()
        freed_after_wake &= settle_after_wake(freed, n) == n
    return {"trials": trials, "objects_per_trial": n,
            "trials_left_behind": left_behind, "objects_left": objects_left,
            "void_trials": void, "freed_after_wake": freed_after_wake}


def case_site(trials):
    sites = {}
    lock = threading.Lock()
    for _ in range(trials):
        phase = ["before"]
        seen = []

        def callback(ref, phase=phase, seen=seen):
            seen.append((threading.get_ident(), phase[0], lock.locked()))

        refs = []

        def make(box, refs=refs):
            box.append(Obj())
            refs.append(weakref.ref(box[-1], callback))

        owner = Owner(make)
        obj = owner.box.pop()           # the list's reference, now ours
        phase[0] = "at the drop"
        del obj                         # the last reference
        phase[0] = "after the drop"
        with lock:                      # the check after __enter__ returns
            phase[0] = "inside the lock"
            spin = h.now() + 0.05
            while h.now() < spin:
                pass
        phase[0] = "after the lock"
        threading.Event().wait(0.2)     # a wait, then the owner is woken
        phase[0] = "owner awake"
        blocked = owner.blocked()
        owner.release()
        end = h.now() + h.WAKE_TIMEOUT
        while not seen and h.now() < end:
            threading.Event().wait(h.POLL)
        del refs
        if not seen:
            site = "never"
        else:
            ident, where, locked = seen[0]
            if ident == owner.ident:
                site = "owner, once awake"
            elif ident != threading.get_ident():
                site = "another thread"
            elif where == "at the drop":
                site = "dropper, at the drop"
            elif locked:
                site = "dropper, inside a lock taken after the drop"
            else:
                site = "dropper, " + where
        if not blocked and site != "owner, once awake":
            site += " (void: owner woke)"
        sites[site] = sites.get(site, 0) + 1
    return {"trials": trials, "sites": sites}


def case_handoff(trials, kind):
    """An owner hands objects over and at once waits for the next round, in
    Event.wait() or lock.acquire(); the dropper drops them as soon as it
    has them, often while the owner still spins attached before it parks.
    Counts the trials where some were alive once the owner was parked."""
    n = 2
    freed = []
    box = []
    handed = threading.Event()
    state = {"go": None, "lock": threading.Lock(), "done": False}

    def owner():
        while not state["done"]:
            box.extend(Obj() for _ in range(n))
            watch_all(freed, box)
            if kind == "event":
                go = state["go"] = threading.Event()
                handed.set()
                go.wait()
            else:
                lock = state["lock"]        # held by the dropper
                handed.set()
                lock.acquire()
                lock.release()

    state["lock"].acquire()
    thread = threading.Thread(target=owner, daemon=True)
    thread.start()
    left = void = 0
    for i in range(trials):
        if not handed.wait(h.BLOCK_TIMEOUT):
            raise RuntimeError("owner never handed over its objects")
        handed.clear()
        before = len(freed)
        box.clear()
        h.wait_blocked(thread.native_id)
        threading.Event().wait(0.05)    # a wait: time to help
        if h.thread_state(thread.native_id) != "S":
            void += 1
        elif len(freed) - before < n:
            left += 1
        state["done"] = i == trials - 1
        if kind == "event":
            state["go"].set()
        else:
            old, state["lock"] = state["lock"], threading.Lock()
            state["lock"].acquire()
            old.release()
    thread.join(h.WAKE_TIMEOUT)
    return {"trials": trials, "trials_left_behind": left,
            "void_trials": void,
            "freed_after_wake": settle_after_wake(freed, n * trials) ==
            n * trials}


def case_busy(trials):
    n = 2
    freed, box = [], []
    handed, dropped, again = (threading.Event() for _ in range(3))
    state = {"lock": threading.Lock(), "done": False, "at": 0.0}
    state["lock"].acquire()

    def owner():
        while not state["done"]:
            box.extend(Obj() for _ in range(n))
            for obj in box:
                weakref.finalize(obj, lambda: freed.append(h.now()))
            del obj
            lock = state["lock"]        # held by the main thread
            handed.set()
            lock.acquire()
            lock.release()

    def dropper():
        for _ in range(trials):
            handed.wait()
            handed.clear()
            state["at"] = h.now()
            box.clear()
            dropped.set()
            again.wait()                # blocked until the next trial
            again.clear()

    def busy():
        while not state["done"]:
            sum(range(6 * 10**7))       # a long C call: no check

    threads = [threading.Thread(target=f, daemon=True)
               for f in (owner, dropper, busy)]
    for t in threads:
        t.start()
    latencies, left, settled = [], 0, True
    for i in range(trials):
        if not dropped.wait(h.BLOCK_TIMEOUT):
            raise RuntimeError("the dropper never dropped")
        dropped.clear()
        target = (i + 1) * n
        end = state["at"] + SPIN
        while len(freed) < target and h.now() < end:
            pass                        # pure Python: checks, no detach
        if len(freed) < target:
            left += 1
        else:
            latencies.append(max(freed[-n:]) - state["at"])
        state["done"] = i == trials - 1
        old, state["lock"] = state["lock"], threading.Lock()
        state["lock"].acquire()
        old.release()
        settled &= settle_after_wake(freed, target) == target
        again.set()
    state["lock"].release()
    for t in threads:
        t.join(h.WAKE_TIMEOUT)
    latencies.sort()
    return {"trials": trials, "trials_left_behind": left, "void_trials": 0,
            "freed_after_wake": settled,
            "free_latency_ms_median":
                latencies[len(latencies) // 2] * 1e3 if latencies else None,
            "free_latency_ms_max":
                latencies[-1] * 1e3 if latencies else None}


def make_tasks(n):
    async def nothing():
        pass

    async def spawn():
        tasks = [asyncio.ensure_future(nothing()) for _ in range(n)]
        await asyncio.gather(*tasks)
        return tasks

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(spawn())
    finally:
        loop.close()


def case_tasks(trials):
    n = 20000
    own = {}
    freed = []

    def make(box):
        mine = []
        tasks = make_tasks(n)
        watch_all(mine, tasks)
        start = h.now()
        del tasks
        while len(mine) < n and h.now() < start + WAIT:
            pass
        own["s"] = h.now() - start
        box.extend(make_tasks(n))
        watch_all(freed, box)

    owner = Owner(make)
    stop = threading.Event()

    def busy():
        while not stop.is_set():
            pass

    others = [threading.Thread(target=busy) for _ in range(2)]
    for t in others:
        t.start()
    dropped_at = h.now()
    owner.box.clear()
    end = dropped_at + WAIT
    while len(freed) < n and h.now() < end:
        threading.Event().wait(h.POLL)
    took = h.now() - dropped_at
    done = sum(1 for t in freed if t != owner.ident)
    stop.set()
    for t in others:
        t.join()
    blocked = owner.blocked()
    owner.release()
    return {"total": n, "own_free_s": round(own["s"], 6),
            "freed_while_blocked": done,
            "on_behalf_s": round(took, 6) if done == n else None,
            "ratio": round(took / own["s"], 2) if done == n else None,
            "owner_blocked_at_measure": blocked,
            "freed_after_wake": settle_after_wake(freed, n)}


def case_upstream_test(trials):
    at_drop = []
    for _ in range(trials):
        lock, filled, box = threading.Lock(), threading.Event(), []
        lock.acquire()

        def owner():
            box.extend(Obj() for _ in range(100))
            filled.set()
            lock.acquire()

        t = threading.Thread(target=owner, daemon=True)
        t.start()
        if not filled.wait(h.BLOCK_TIMEOUT):
            raise RuntimeError("owner never handed over its objects")
        h.wait_blocked(t.native_id)
        gone = 0
        while box:
            obj = box.pop()
            ref = weakref.ref(obj)
            del obj     # nothing runs between the drop and the check
            gone += ref() is None
        lock.release()
        t.join(h.WAKE_TIMEOUT)
        at_drop.append(gone)
    return {"trials": trials, "freed_at_the_drop_of_100": at_drop}


CASES = {"spin": case_spin, "chain": case_chain, "pauses": case_pauses,
         "site": case_site, "busy": case_busy,
         "tasks": case_tasks, "upstream-test": case_upstream_test,
         "handoff-event": lambda t: case_handoff(t, "event"),
         "handoff-lock": lambda t: case_handoff(t, "lock")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", choices=sorted(CASES), required=True)
    ap.add_argument("--trials", type=int, default=1)
    args = ap.parse_args()
    h.setup()
    result = CASES[args.case](args.trials)
    result["case"] = args.case
    h.emit(result)


if __name__ == "__main__":
    main()
