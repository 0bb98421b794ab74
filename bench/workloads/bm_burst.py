"""BURST: freeing a burst of a million objects whose owner thread is blocked.

An owner thread builds a list of --objects fresh small objects (the list
and its items are owned by it), hands the only reference to the main thread
and blocks in os.read() on a pipe (detached).  Once the owner sleeps in the
kernel, the main thread drops the list and waits on a lock, as a thread
waiting for work would.  Weakref callbacks on the list and on every
(objects / --samples)-th item timestamp the frees (100 callbacks for a
million objects: cheap, and they run in whichever thread frees):

  blocked  the owner stays blocked until every sampled item is freed, or
           until none has been for --timeout seconds ("not freed while
           blocked"); then it is released (a byte on its pipe) and the
           time until the rest is freed is measured.
  mid      the owner is released in the middle of the burst: a third
           thread, woken by the callback that sees the --release-at
           fraction of the samples freed (after --mid-timeout seconds if
           nothing is freed), takes a timestamp and writes the byte; the
           owner takes one right after os.read() returns.  The difference
           is the latency of its next bytecode: the wake-up, any wait to
           attach while it is suspended, and what its eval breaker check
           right after the call does (stock ft: merge and free the whole
           burst).  The owner then runs Python code until all is freed.

Expected: gil frees in the drop; ft not while blocked (the owner frees it
after waking); ft-upstream in the drop, suspending the owner once per
object; ft-brc at the dropping thread's next eval breaker check, in a few
suspensions.  Where sys._brc_stats() exists (ft-brc), how
its counters change from the drop until everything is freed or the timeout
(brc_to_freed), and over the whole variant (brc), is recorded.  GC is
disabled: a collection would merge the queue.

Appends one JSON line per variant to -o FILE and prints a summary.

    python bm_burst.py -o OUT.jsonl [--objects N] [--samples S]
        [--timeout SEC] [--release-at FRACTION] [--mid-timeout SEC]
        [--variants blocked,mid]
"""

import argparse
import gc
import json
import os
import threading
import time
import weakref

import _util as u

clock = time.perf_counter


class Item:
    __slots__ = ("__weakref__",)


class Box(list):
    # a list that can be weakly referenced (its callback runs before the
    # list releases its items)
    __slots__ = ("__weakref__",)


def signal(lock):
    """Release a lock that a callback found due; another thread's callback
    may have done it first (no atomic counter to avoid the race)."""
    try:
        lock.release()
    except RuntimeError:
        pass


class Frees:
    """Weakref callbacks on the box and on a sample of its items."""

    def __init__(self, box, samples, release_at):
        step = max(1, len(box) // samples)
        sample = range(0, len(box), step)
        self.total = len(sample)
        self.middle = max(1, round(self.total * release_at))
        self.times = []             # (perf_counter, thread id) per free
        self.box_freed = None
        # Raw locks released by the callbacks: releasing one never blocks,
        # so a callback may run anywhere, even inside a wait on it.
        self.done = threading.Lock()
        self.half = threading.Lock()
        self.done.acquire()
        self.half.acquire()
        self.refs = [weakref.ref(box, self._box)]
        self.refs += [weakref.ref(box[i], self._item) for i in sample]

    def _box(self, _):
        self.box_freed = clock()

    def _item(self, _):
        self.times.append((clock(), threading.get_ident()))
        n = len(self.times)
        if n >= self.middle and self.half.locked():
            signal(self.half)
        if n >= self.total:
            signal(self.done)

    def wait(self, lock, timeout, since):
        """Wait for lock while sampled items keep being freed; False once
        none has been for `timeout` seconds."""
        last = since
        while not lock.acquire(timeout=max(0.0, last + timeout - clock())):
            newest = self.times[-1][0] if self.times else since
            if newest <= last:
                return False
            last = newest
        return True

    def fraction(self, before=None):
        """Fraction of the samples freed (before a time)."""
        return len([t for t, _ in self.times
                    if before is None or t < before]) / self.total

    def last(self):
        return max(t for t, _ in self.times) if self.times else None

    def freed_by(self, names):
        """How many sampled items each thread freed."""
        out = {}
        for _, ident in self.times:
            name = names.get(ident, "other")
            out[name] = out.get(name, 0) + 1
        return out


class Owner(threading.Thread):
    def __init__(self, objects):
        super().__init__(name="owner", daemon=True)
        self.objects = objects
        self.rfd, self.wfd = os.pipe()
        self.box = []
        self.ready = threading.Lock()
        self.ready.acquire()
        self.released = self.woke = None
        self.stop = False

    def run(self):
        self.box.append(Box([Item() for _ in range(self.objects)]))
        self.ready.release()
        os.read(self.rfd, 1)            # blocked in a system call: detached
        self.woke = clock()             # its next bytecode
        # Then it runs Python code (eval breaker checks included), as a
        # woken thread would, rather than exit: what is still being freed
        # stays owned by a living, attached thread.
        while not self.stop:
            pass

    def take(self):
        self.ready.acquire()
        return self.box.pop()

    def release(self):
        self.released = clock()         # just before the write
        os.write(self.wfd, b"x")

    def close(self):
        self.stop = True
        self.join()
        os.close(self.rfd)
        os.close(self.wfd)


def stats_delta(before, after):
    """Change of sys._brc_stats() (None without it); queue lengths are
    levels, kept as they are after."""
    if before is None:
        return None
    return {k: v if "queue_length" in k else v - before.get(k, 0)
            for k, v in after.items()}


def burst(variant, args):
    """One drop of the variant; its record."""
    timeout = args.timeout
    owner = Owner(args.objects)
    owner.start()
    box = owner.take()
    frees = Frees(box, args.samples, args.release_at)
    threads = [owner]
    if variant == "mid":
        def releaser():
            frees.wait(frees.half, args.mid_timeout, clock())
            owner.release()
        threads.append(threading.Thread(target=releaser, name="releaser",
                                        daemon=True))
        threads[-1].start()
    u.wait_sleeping([t.native_id for t in threads])
    names = {threading.get_ident(): "dropper", owner.ident: "owner"}
    before = u.brc_stats()
    t_drop = clock()
    del box                             # the only reference
    freed = frees.wait(frees.done, timeout, t_drop)
    to_freed = stats_delta(before, u.brc_stats())
    rec = {"variant": variant, "objects": args.objects,
           "samples": frees.total,
           "freed_while_blocked": freed and owner.released is None,
           "fraction_freed_while_blocked": frees.fraction(owner.released),
           "brc_to_freed": to_freed}
    if variant == "blocked":
        owner.release()
    elif not freed:
        threads[1].join()               # it releases the owner at its timeout
    if not freed:
        freed = frees.wait(frees.done, timeout, owner.released)
    owner.close()
    threads[-1].join()
    last = frees.last()
    rec.update({
        "freed": freed,
        "box_freed_s": frees.box_freed and frees.box_freed - t_drop,
        "all_freed_s": last - t_drop if freed else None,
        "released_s": owner.released - t_drop,
        "after_release_s": max(0.0, last - owner.released) if freed else None,
        "released_at_fraction": frees.fraction(owner.released),
        "next_bytecode_s": owner.woke - owner.released,
        "freed_by": frees.freed_by(names),
        "brc": stats_delta(before, u.brc_stats()),
    })
    return rec


def fmt_ms(sec):
    return "n/a" if sec is None else "%.2f ms" % (sec * 1e3)


def describe(rec):
    """A short summary (bench/harness/run.py logs the first 110 characters)."""
    if rec["variant"] == "mid":
        text = "mid: released at %.0f%%, next bytecode %s" % (
            100 * rec["released_at_fraction"], fmt_ms(rec["next_bytecode_s"]))
    elif rec["freed_while_blocked"]:
        text = "freed in %s" % fmt_ms(rec["all_freed_s"])
    else:
        text = "not freed blocked (%.0f%%), %s after release" % (
            100 * rec["fraction_freed_while_blocked"],
            fmt_ms(rec["after_release_s"]))
    st = rec["brc_to_freed"]
    return text + (" (%d susp.)" % st["suspensions"] if st else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", required=True,
                    help="JSON lines file to append the records to")
    ap.add_argument("--objects", type=int, default=1_000_000)
    ap.add_argument("--samples", type=int, default=100,
                    help="items with a weakref callback")
    ap.add_argument("--timeout", type=float, default=10.0,
                    help="seconds without a sampled free before giving up")
    ap.add_argument("--release-at", type=float, default=0.5,
                    help="mid: fraction of the samples freed at release")
    # Only stock behaviour waits it out; what is measured then is the
    # owner's own free after it wakes.
    ap.add_argument("--mid-timeout", type=float, default=1.0,
                    help="mid: seconds without a sampled free before the "
                         "owner is released anyway")
    ap.add_argument("--variants", default="blocked,mid")
    args = ap.parse_args()
    gc.disable()
    md = {"config": os.environ.get("BENCH_FLAVOUR"),
          "round": int(os.environ.get("BENCH_ROUND", 0)),
          "gil_enabled": u.interpreter_metadata()["gil_enabled"] == "True",
          "timeout_s": args.timeout, "mid_timeout_s": args.mid_timeout,
          "release_at": args.release_at}
    lines = []
    with open(args.output, "a") as f:
        for variant in args.variants.split(","):
            rec = dict(md, **burst(variant, args))
            f.write(json.dumps(rec) + "\n")
            lines.append(describe(rec))
    print("; ".join(lines))


if __name__ == "__main__":
    main()
