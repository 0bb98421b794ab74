"""Shared helpers for the BRC scenario scripts.

The scripts in this directory are run *by the interpreter under test* (any
CPython >= 3.8, GIL or free-threaded, stdlib only) and print exactly one JSON
line on stdout.  They measure; they do not judge -- tests/test_scenarios.py
holds the expected outcome per interpreter flavour.

Vocabulary used by every scenario:

owner    the thread that creates the payload objects (and therefore owns them
         in the free-threaded build's biased reference counting).
dropper  another thread, which drops the last reference while the owner is
         blocked (detached) in some system call.

Most scenarios drop only once the owner is parked.  The no-wait variants
drop as soon as the owner can no longer merge its BRC queue itself before it
blocks (wait_committed()), so the drop may land while it is still attached.

A tracked object counts as "freed while blocked" when its weakref.finalize
callback ran in a thread other than the owner.  With GC disabled, a stock
free-threaded build can only free such an object from the owner thread (when
it merges its BRC queue after waking), so a finaliser running elsewhere means
the memory was released without waiting for the owner.  After measuring, the
harness checks that the owner is still blocked, so the measurement really was
taken while the owner was blocked.
"""

import faulthandler
import gc
import json
import mmap
import os
import select
import sys
import threading
import time
import weakref

# the scripts use them as h.thread_state(), h.brc_stats(); their one copy is
# bench/workloads/_probes.py, found from this file (appended: shadows nothing)
sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "bench", "workloads"))
from _probes import brc_stats, thread_state  # noqa: E402,F401

MiB = 1 << 20
PAGE = mmap.PAGESIZE
PAYLOAD_SIZE = 64 * MiB
N_PAYLOADS = 2

# How long to wait for "the owner is blocked" / "everything got freed after
# the owner woke".  Generous: these are only reached when something is wrong.
BLOCK_TIMEOUT = 30.0
WAKE_TIMEOUT = 30.0
# The owner must be seen sleeping in the kernel for this long without
# interruption before we believe it is parked (and not just passing through).
SETTLE = 0.02
POLL = 0.001
# An object dropped for the blocked owner as the payloads went (a second
# level of a dead graph, or one handed on to another thread) may still be
# queued when they are all freed.  measure() gives the queues this long to
# drain, sleeping; where nothing merges on behalf, they stay queued and it
# waits it out.
QUEUE_SETTLE = 0.05


def now():
    return time.monotonic()


# --------------------------------------------------------------------------
# memory accounting


_max_seen = [0]


def rss():
    """Current resident set size of this process, in bytes."""
    with open("/proc/self/statm") as f:
        value = int(f.read().split()[1]) * PAGE
    _max_seen[0] = max(_max_seen[0], value)
    return value


def rss_peak():
    """Peak resident set size, in bytes: the kernel's VmHWM (which it only
    updates lazily) or the largest value rss() has seen, whichever is
    larger."""
    peak = _max_seen[0]
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                peak = max(peak, int(line.split()[1]) * 1024)
    return peak


def touch(buf):
    """Write one byte per page so the mapping is really resident."""
    for off in range(0, len(buf), PAGE):
        buf[off] = 1


# --------------------------------------------------------------------------
# thread state probe


def wait_blocked(native_id, timeout=BLOCK_TIMEOUT, settle=SETTLE):
    """Poll until the thread is sleeping in the kernel ('S') continuously
    for `settle` seconds.  CPython detaches the thread state before any such
    sleep (parking-lot futex wait, Py_BEGIN_ALLOW_THREADS around sleep /
    select / read), so this means the owner is blocked *and* detached -- a
    lock waiter that is still spinning attached shows up as 'R'.

    Returns the time it took; raises on timeout.
    """
    start = now()
    deadline = start + timeout
    since = None
    while True:
        t = now()
        state = thread_state(native_id)
        if state == "S":
            if since is None:
                since = t
            elif t - since >= settle:
                return t - start
        else:
            since = None
        if t > deadline:
            raise RuntimeError("thread %d not blocked after %.1fs (state %r)"
                               % (native_id, timeout, state))
        time.sleep(POLL)


def wait_committed(predicate, timeout=BLOCK_TIMEOUT):
    """Spin -- without sleeping, so as to see the moment -- until
    predicate() is true, and return how long that took; raises on timeout.

    Used by the no-wait scenarios: `predicate` tells that the owner has gone
    past the last check of its eval breaker before its blocking call.  From
    then on it cannot merge its BRC queue itself before it blocks: an object
    dropped now reaches it while it is still attached (spinning on a lock
    before it parks, or on its way into the system call) or already
    detached.
    """
    start = now()
    deadline = start + timeout
    n = 0
    while not predicate():
        n += 1
        if n % 4096 == 0 and now() > deadline:
            raise RuntimeError("owner not about to block after %.1fs"
                               % timeout)
    return now() - start


def condition_committed(cond):
    """True once a thread waiting in cond.wait() has released the
    condition's lock: Condition.wait() appends its waiter, releases the lock
    (the eval breaker check after that release call is its last one) and
    then blocks in waiter.acquire() after only a few plain bytecodes.  Holds
    for a threading.Condition over a Lock or an RLock (RLock.locked() is new
    in 3.14); the caller must know that nobody else takes the lock or waits
    on the condition meanwhile."""
    return bool(cond._waiters) and not cond._lock.locked()


# --------------------------------------------------------------------------
# BRC counters (ft-brc only)


def add_brc_stats(result, key, stats):
    # the JSON result has the key only where the counters exist
    if stats is not None:
        result[key] = stats


# --------------------------------------------------------------------------
# payloads and finalisation tracking


class Payload:
    """Small weakref-able wrapper around a big, touched mmap buffer."""

    def __init__(self, index, buf):
        self.index = index
        self.buf = buf


def anon_buffer(size=PAYLOAD_SIZE, shared=False):
    flags = mmap.MAP_SHARED if shared else mmap.MAP_PRIVATE
    buf = mmap.mmap(-1, size, flags=flags)
    touch(buf)
    return buf


class Tracker:
    """Records, for every watched object, which thread finalised it.

    _freed takes no lock: a finalizer runs at any eval-breaker check, also
    one inside _freed or Event.set() on the same thread (where an owner
    merges its own queue), and would deadlock on a lock its thread holds
    (seen on stock ft). A pipe says that all are freed."""

    def __init__(self):
        self._lock = threading.Lock()
        self.expected = 0
        self.records = []          # (label, thread ident, monotonic time)
        self._done_r, self._done_w = os.pipe()
        os.set_blocking(self._done_w, False)

    def watch(self, obj, label):
        with self._lock:
            self.expected += 1
        weakref.finalize(obj, self._freed, label)

    def watch_payload(self, payload):
        """Track both the wrapper and the buffer it holds."""
        self.watch(payload, "payload%d" % payload.index)
        self.watch(payload.buf, "buffer%d" % payload.index)

    def _freed(self, label):
        self.records.append((label, threading.get_ident(), now()))
        if len(self.records) >= self.expected:
            try:
                os.write(self._done_w, b"x")
            except BlockingIOError:     # the pipe is full: it is readable
                pass

    def wait_all_freed(self, timeout):
        """True once every watched object is finalised (within timeout s)."""
        return bool(select.select([self._done_r], [], [], max(0.0, timeout))[0])

    def snapshot(self):
        return list(self.records)

    def freed_count(self):
        return len(self.records)


def new_payload(index, tracker):
    """Create one tracked payload.  Call it *in the owner thread* and pass the
    result straight on (e.g. ``box.append(new_payload(i, t))``) so that no
    local variable of the owner keeps it alive."""
    payload = Payload(index, anon_buffer())
    tracker.watch_payload(payload)
    return payload


# --------------------------------------------------------------------------
# the common measurement protocol


def measure(tracker, owner_ident, owner_native_id, owner_awake, deadline,
            dropped_at):
    """Called by the dropper after it dropped its references (at monotonic
    time `dropped_at`).

    Waits until `deadline` seconds after the drop for everything to be
    finalised, then records what was freed, by whom, the RSS and (ft-brc)
    the BRC counters as "brc_stats_after", and finally re-checks that the
    owner is still blocked (otherwise the measurement is void).
    `owner_awake` is a callable returning True once the owner has returned
    from its blocking call.
    """
    tracker.wait_all_freed(dropped_at + deadline - now())
    waited = now() - dropped_at
    # The counters are the ones the settling loop ended on. Read again
    # after the snapshot and the RSS, they once counted 1 object queued
    # although the loop had just seen none (queue_settle_s 0.0; all 4
    # payloads freed): something dropped after the loop, not traced.
    settle_start = now()
    stats = brc_stats()
    while ((stats or {}).get("queue_length")
           and now() - settle_start < QUEUE_SETTLE):
        time.sleep(POLL)
        stats = brc_stats()
    settled = now() - settle_start
    records = tracker.snapshot()
    rss_after_drop = rss()
    state = thread_state(owner_native_id)
    blocked = state == "S" and not owner_awake()
    freed_by_other = [r for r in records if r[1] != owner_ident]
    result = {
        "freed_while_blocked": len(freed_by_other),
        "freed_by_owner_before_measure": len(records) - len(freed_by_other),
        "free_latency_s": (round(max(r[2] for r in freed_by_other)
                                 - dropped_at, 6)
                           if freed_by_other else None),
        "measure_wait_s": round(waited, 4),
        "queue_settle_s": round(settled, 4),
        "rss_after_drop": rss_after_drop,
        "owner_state_at_measure": state,
        "owner_blocked_at_measure": blocked,
    }
    add_brc_stats(result, "brc_stats_after", stats)
    return result


def after_wake(tracker, owner_ident):
    """Called after the owner was released (and joined, where possible):
    everything must eventually be freed -- the objects were held, not
    leaked."""
    tracker.wait_all_freed(WAKE_TIMEOUT)
    records = tracker.snapshot()
    result = {
        "freed_after_wake": len(records),
        "freed_by_owner": sum(1 for r in records if r[1] == owner_ident),
        "rss_after_wake": rss(),
    }
    add_brc_stats(result, "brc_stats_end", brc_stats())
    return result


def interpreter_info():
    is_gil = getattr(sys, "_is_gil_enabled", None)
    try:
        import sysconfig
        ft_build = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    except Exception:
        ft_build = False
    return {
        "python": sys.version.split()[0],
        "free_threaded_build": ft_build,
        "gil_enabled": is_gil() if is_gil is not None else True,
        "brc_merge_threshold_env": os.environ.get("PYTHON_BRC_MERGE_THRESHOLD"),
        "xoptions": {str(k): str(v) for k, v in sys._xoptions.items()},
    }


def setup():
    """Common process setup: GC would merge BRC queues and mask the bug.
    A scenario that hangs dumps every thread's stack to stderr and exits
    before the test's 120-s subprocess timeout, so the hang can be read."""
    gc.disable()
    faulthandler.dump_traceback_later(100, exit=True)


def emit(result):
    result.update(interpreter_info())
    result["rss_peak"] = rss_peak()
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    sys.stdout.flush()
