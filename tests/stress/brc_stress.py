#!/usr/bin/env python3
"""Concurrency stress test for biased reference counting (BRC) merging.

Run BY the interpreter under test (stdlib only; gil, ft, ft-brc and
ft-brc-debug builds of CPython 3.14):

    python3 tests/stress/brc_stress.py [--duration 60] [--threads 8] [--json]

What it exercises, all at the same time for --duration seconds
----------------------------------------------------------------
* Workers (--threads Python threads) create ``Tracked`` objects -- alone, in
  lists/dicts/tuples, in reference cycles, now and then with a touched 1 MiB
  anonymous mmap as payload -- and hand them to other threads through
  mailboxes (a capped deque per worker, and a queue.SimpleQueue per worker),
  so that the LAST reference is usually dropped by a thread that does not own
  the object.  In the free-threaded build that drop queues the object to its
  owner's BRC queue.  Receivers also forward objects to a third thread, keep
  some for a while, steal from other mailboxes and evict when a mailbox is
  full; they poke the producer's event/pipe after dropping its objects.
* Owners block and wake at random between producing and consuming, in many
  ways (the "blocks" counts in the result): threading.Event.wait(timeout),
  time.sleep, Lock.acquire(timeout) on a lock another thread holds,
  select.select on a pipe, os.read on a pipe another thread writes to,
  queue.SimpleQueue.get(timeout), a C-level detached wait (libc usleep via
  ctypes, which releases the thread state around foreign calls), libc qsort
  with a Python comparator (a nested PyGILState_Ensure/Release per call), a
  short attached busy loop, a tight detach/attach loop (time.sleep(0)), and
  -- on the series' builds, through 0009's _testinternalcapi probe
  call_in_second_thread_state() -- a second thread state on the same OS
  thread (the first one detached meanwhile).  Every kind listed runs at
  least once, or the run fails; a series build without the probe is an
  error that names it.
* Native threads (pthread_create via ctypes; the start routine is a ctypes
  callback, so the thread attaches through PyGILState_Ensure) create objects,
  hand them off, drop other threads' objects, block and sort with callbacks;
  they are joined with pthread_timedjoin_np.
* Short-lived threads create objects, hand them off and exit at once -- often
  while other threads still hold their objects or their BRC queue is not
  empty.
* os.fork() (--forks times, default 2; not with --no-fork or on a TSan
  build) from a worker thread while everything runs: the child churns
  objects across new threads (hand-off, drops, gc.collect()), drops the
  objects its worker was keeping (mostly owned by parent threads that do not
  exist in the child), checks that every object it created was finalised
  exactly once and that pending calls still run, reports through a pipe and
  os._exit()s 0; the parent waits (pidfd + timeout; SIGUSR2 for a traceback
  dump, then SIGKILL).
* On patched builds the merge threshold is cycled (--thresholds) through
  _testinternalcapi.set_brc_merge_threshold(), so the merge-at-once, the
  below-threshold (pending call) and the switched-off paths all run.
* "Shutdown with queues full": a few times during the run and once after, a
  child interpreter (sys.executable) starts daemon owner threads that create
  objects and block forever (Event.wait, Lock.acquire, os.read, select,
  sleep, SimpleQueue.get, libc pause, or an attached busy loop), has other
  threads drop those objects, and exits while the owners are still blocked
  (some droppers keep churning during finalisation).  Patched builds get
  PYTHON_BRC_MERGE_THRESHOLD=0 or a huge value in some runs so that the
  owners' queues really are full at exit.

What it checks (exit status 0 only if all hold)
-----------------------------------------------
* After all threads are joined, every mailbox dropped and gc.collect() run,
  created == finalised EXACTLY: each Tracked takes a serial (dense, 1..N)
  and its __del__ records that serial; at the end a byte per serial counts
  the finalisations: a serial seen twice is a double finalisation (must be
  0), a serial never seen a leak (listed, with the kind and referrers of
  the leaked objects the GC can still see).  Up to 10 s of grace with
  gc.collect() are allowed for deallocations deferred to a pending call.
  (The bookkeeping is per thread and contention-free so that it is safe in
  a forked child; see "Object tracking" below.)
* No exception in any thread or finaliser (threading.excepthook and
  sys.unraisablehook record them), no thread that fails to join in time.
* Every fork child exited with status 0; every requested fork happened.
  (A child whose gc.collect() no longer collects at all -- a CPython issue
  when the fork lands in the middle of another thread's collection -- may
  keep its reference cycles; that is reported as gc_stuck, not failed.)
* Every shutdown run exited 0 within its timeout, printed its report and
  wrote nothing to stderr (no "Fatal Python error", assertion, traceback).
* Where sys._brc_stats() exists: nothing is queued at the end (enqueued is
  the sum of merged_* and queue_length by construction since 0017).
  Whether merges on behalf actually happened is reported (brc_stats_delta)
  and judged by tests/test_stress.py, not here.
* faulthandler.dump_traceback_later(--watchdog, exit=True) dumps every
  thread's traceback and exits non-zero if the whole run hangs; every join
  has a timeout.  `kill -USR2 <pid>` dumps all tracebacks of a running (or
  forked child) process.

Output: with --json exactly one JSON line on stdout (human summary
suppressed); otherwise a summary on stderr.  Failures are always also
written to stderr.
"""

import argparse
import array
import collections
import faulthandler
import gc
import heapq
import itertools
import json
import mmap
import os
import queue
import random
import select
import signal
import subprocess
import sys
import sysconfig
import threading
import time
import traceback
import warnings

try:
    import ctypes
    import ctypes.util
except ImportError:          # pragma: no cover - every flavour has ctypes
    ctypes = None

try:
    import _testinternalcapi as _tic
except ImportError:
    _tic = None

# brc_stats() is shared with the scenario scripts and the bench workloads
# (bench/workloads/_probes.py); found from this file (it runs from any
# directory).  Appended: it shadows nothing.
sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "bench", "workloads"))
from _probes import brc_stats  # noqa: E402

get_ident = threading.get_ident
monotonic = time.monotonic

MiB = 1 << 20
MMAP_SIZE = 1 * MiB
MMAP_FILL = b"\x5a" * MMAP_SIZE

# ThreadSanitizer builds: ctypes' libc pthread_create bypasses TSan's
# interceptor (TSan then aborts on the unknown thread), and TSan does not
# support starting threads in the child of a multi-threaded fork; so native
# threads and forks are skipped there, and shutdown runs do not report the
# (intended) daemon threads still running at exit as leaks.
TSAN = "--with-thread-sanitizer" in (sysconfig.get_config_var("CONFIG_ARGS") or "")

# How long any single join may take before the thread counts as hung.
JOIN_TIMEOUT = 60.0
# Grace for deallocations deferred to a pending call at the end.
SETTLE_TIMEOUT = 10.0


# =========================================================================
# Object tracking
#
# Finalisers run on any thread, at any eval-breaker check (even inside code
# that holds a lock), and also inside os.fork(): the child runs the
# destructors of objects queued to the threads that vanished, before any
# Python-level at-fork hook.  A PyMutex that was handed off to a waiting
# thread at the moment of the fork stays locked in the child, so any
# *contended* container touched there can hang the child (a CPython issue,
# seen on stock ft: e.g. a dict several threads write).  Therefore the
# tracking state is never contended:
#
# * serials come from itertools.count (compare-and-swap, no mutex), so the
#   serials of one process are dense: 1 .. N;
# * each thread has a record [created, off_owner, finalised serials] that only
#   that thread writes (looked up lock-free by thread ident; inserted once);
# * the mmap budget uses two itertools.count objects read through repr().
#
# At the end a byte per serial says how often it was finalised: every serial
# exactly once, none twice (double finalisation), none never (a leak).

SERIALS = itertools.count(1)
N_SHARDS = 61
RECORDS = tuple({} for _ in range(N_SHARDS))     # ident -> [created, off_owner, array of serials]
MMAP_MADE = itertools.count()
MMAP_FREED = itertools.count()
MMAP_CAP = [32]


def count_value(counter):
    """The next value of an itertools.count, without advancing it."""
    return int(repr(counter)[6:-1])


def _rec():
    ident = get_ident()
    shard = RECORDS[ident % N_SHARDS]
    rec = shard.get(ident)
    if rec is None:
        rec = shard.setdefault(ident, [0, 0, array.array("q")])
    return rec


def records():
    return [rec for shard in RECORDS for rec in list(shard.values())]


def totals():
    """(created, finalised, off_owner): racy while threads run."""
    created = finalised = off_owner = 0
    for rec in records():
        created += rec[0]
        off_owner += rec[1]
        finalised += len(rec[2])
    return created, finalised, off_owner


def finalised_serials(since=None):
    """Every finalised serial; with since (marks()), only those recorded after it."""
    for rec in records():
        yield from rec[2][since.get(id(rec), 0):] if since else rec[2]


def marks():
    """Where each record ends now: a fork child scans only what it adds, not
    the parent's whole history (millions of serials in a long run)."""
    return {id(rec): len(rec[2]) for rec in records()}


def check_serials(lo, hi, limit=20, since=None):
    """Count how often each serial lo < s <= hi was finalised.  Returns
    (finalised, doubles, double_sample, missing, missing_sample)."""
    size = hi - lo
    seen = bytearray(size)
    finalised = doubles = 0
    double_sample = []
    for serial in finalised_serials(since):
        i = serial - lo - 1
        if 0 <= i < size:
            finalised += 1
            if seen[i]:
                doubles += 1
                if len(double_sample) < limit:
                    double_sample.append(serial)
            else:
                seen[i] = 1
    missing = size - (finalised - doubles)
    missing_sample = []
    i = seen.find(0)
    while i >= 0 and len(missing_sample) < limit:
        missing_sample.append(lo + 1 + i)
        i = seen.find(0, i + 1)
    return finalised, doubles, double_sample, missing, missing_sample


def missing_serials(lo, hi, since=None):
    """All serials lo < s <= hi not finalised (for the fork child)."""
    size = hi - lo
    seen = bytearray(size)
    for serial in finalised_serials(since):
        i = serial - lo - 1
        if 0 <= i < size:
            seen[i] = 1
    out = []
    i = seen.find(0)
    while i >= 0:
        out.append(lo + 1 + i)
        i = seen.find(0, i + 1)
    return out


class Tracked:
    """An object whose creation and finalisation are counted."""

    __slots__ = ("serial", "kind", "tid", "payload", "peer", "mmap", "__weakref__")

    def __init__(self, kind, payload=None, peer=None):
        self.kind = kind
        self.tid = get_ident()
        self.payload = payload
        self.peer = peer
        self.mmap = False
        self.serial = next(SERIALS)
        _rec()[0] += 1

    def __del__(self):
        try:
            serial = self.serial
        except AttributeError:
            return
        rec = _rec()
        rec[2].append(serial)
        if self.tid != get_ident():
            rec[1] += 1
        if self.mmap:
            self.mmap = False
            self.payload = None          # unmap now
            next(MMAP_FREED)


def find_tracked(serials):
    """{serial: object} for the Tracked objects with these serials that the
    GC can see."""
    want = set(serials)
    found = {}
    for o in gc.get_objects():
        if type(o) is Tracked and getattr(o, "serial", None) in want:
            found[o.serial] = o
    return found


def describe_leaks(serials, found=None, limit=5):
    """Where are the objects with these serials?  For failure reports: the
    GC-visible ones with their kind, refcount, owner thread id (patched
    probe) and referrers; objects the GC does not see are only counted."""
    if found is None:
        found = find_tracked(serials)
    lines = ["%d of %d leaked objects visible to the GC" % (len(found), len(set(serials)))]
    for serial in sorted(found)[:limit]:
        o = found[serial]
        owner = None
        if _tic is not None and hasattr(_tic, "brc_object_owner"):
            owner = _tic.brc_object_owner(o)
        refs = [type(r).__name__ for r in gc.get_referrers(o) if r is not found]
        lines.append("  serial %d kind %r sys.getrefcount %d (incl. this report's) ob_tid %r"
                     " creator ident %r referrers %r"
                     % (serial, o.kind, sys.getrefcount(o), owner, o.tid, refs[:8]))
        del o
    return "\n".join(lines)


def gc_collects_cycles():
    """Does gc.collect() free a fresh unreachable cycle right now?"""
    import weakref

    class Node:
        pass
    a, b = Node(), Node()
    a.peer, b.peer = b, a
    ref = weakref.ref(a)
    del a, b
    gc.collect()
    return ref() is None


def pending_calls_run(timeout=2.0):
    """Does a pending call (_PyEval_AddPendingCall) still run in this
    process?  None where the _testinternalcapi probe is missing."""
    if _tic is None or not hasattr(_tic, "pending_threadfunc"):
        return None
    ran = threading.Event()
    if not _tic.pending_threadfunc(ran.set):
        return None
    deadline = monotonic() + timeout
    while not ran.is_set() and monotonic() < deadline:
        pass                        # bytecode: eval breaker checks
    return ran.is_set()


def small_payload(rng):
    r = rng.random()
    if r < 0.4:
        return None
    if r < 0.7:
        return [r] * rng.randrange(1, 16)
    return bytearray(rng.randrange(1, 2048))


def mmap_item(origin):
    if count_value(MMAP_MADE) - count_value(MMAP_FREED) >= MMAP_CAP[0]:
        return None                      # may overshoot by a few threads
    next(MMAP_MADE)
    try:
        buf = mmap.mmap(-1, MMAP_SIZE)
        buf[:] = MMAP_FILL               # touch every page
    except BaseException:
        next(MMAP_FREED)
        raise
    t = Tracked(origin + "/mmap", buf)
    t.mmap = True
    return t


def make_item(rng, origin):
    """One unit to hand over: a Tracked, a container of them, or a cycle."""
    r = rng.random()
    if r < 0.50:
        return Tracked(origin, small_payload(rng))
    if r < 0.64:
        return [Tracked(origin + "/list") for _ in range(rng.randrange(2, 17))]
    if r < 0.78:
        a = Tracked(origin + "/cycle")
        b = Tracked(origin + "/cycle", peer=a)
        a.peer = b
        if rng.random() < 0.3:
            a.payload = {"a": a, "b": b}
        return a
    if r < 0.88:
        return {i: Tracked(origin + "/dict") for i in range(rng.randrange(1, 9))}
    if r < 0.975:
        return (Tracked(origin + "/tuple"), Tracked(origin + "/tuple", [origin] * 4),
                bytes(rng.randrange(256)))
    item = mmap_item(origin)
    return item if item is not None else Tracked(origin)


# =========================================================================
# libc through ctypes


class Libc:
    """usleep, qsort, pause and pthread_create/_timedjoin_np, or None."""

    def __init__(self):
        self.ok = False
        if ctypes is None:
            return
        try:
            name = ctypes.util.find_library("c") or "libc.so.6"
            libc = ctypes.CDLL(name, use_errno=True)
            self.usleep = libc.usleep
            self.usleep.argtypes = [ctypes.c_uint]
            self.usleep.restype = ctypes.c_int
            self.CMPFUNC = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int),
                                            ctypes.POINTER(ctypes.c_int))
            self.qsort = libc.qsort
            self.qsort.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                                   self.CMPFUNC]
            self.qsort.restype = None
            self.THREADFUNC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
            self.pthread_t = ctypes.c_ulong
            self.pthread_create = libc.pthread_create
            self.pthread_create.argtypes = [ctypes.POINTER(self.pthread_t), ctypes.c_void_p,
                                            self.THREADFUNC, ctypes.c_void_p]
            self.pthread_create.restype = ctypes.c_int

            class timespec(ctypes.Structure):
                _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]
            self.timespec = timespec
            self.pthread_timedjoin_np = getattr(libc, "pthread_timedjoin_np", None)
            if self.pthread_timedjoin_np is not None:
                self.pthread_timedjoin_np.argtypes = [self.pthread_t, ctypes.c_void_p,
                                                      ctypes.POINTER(timespec)]
                self.pthread_timedjoin_np.restype = ctypes.c_int
            self.pthread_join = libc.pthread_join
            self.pthread_join.argtypes = [self.pthread_t, ctypes.c_void_p]
            self.pthread_join.restype = ctypes.c_int
            self.ok = True
        except (OSError, AttributeError):
            self.ok = False

    _array_types = {}
    _array_lock = threading.Lock()

    @classmethod
    def int_array_type(cls, n):
        """ctypes.c_int * n, made once. ctypes caches array types in a dict
        whose entry a dying type removes; two threads that create the same
        array type at once on a free-threaded build can both insert, and the
        second removal then fails (KeyError in _ctypes.DictRemover, seen on
        ft-brc-debug). That is a ctypes matter, not ours: avoid it."""
        with cls._array_lock:
            t = cls._array_types.get(n)
            if t is None:
                t = cls._array_types[n] = ctypes.c_int * n
            return t

    def sort_with_callback(self, n, rng, on_compare):
        """qsort n ints; the comparator (a ctypes callback: nested
        PyGILState_Ensure/Release around every call) calls on_compare every
        few comparisons."""
        arr = self.int_array_type(n)(*[rng.randrange(1 << 30) for _ in range(n)])
        calls = [0]

        def cmp(a, b):
            calls[0] += 1
            if calls[0] % 8 == 0:
                on_compare()
            x, y = a[0], b[0]
            return (x > y) - (x < y)

        func = self.CMPFUNC(cmp)        # alive until qsort returns
        self.qsort(arr, n, ctypes.sizeof(ctypes.c_int), func)
        for i in range(1, n):
            if arr[i - 1] > arr[i]:
                raise AssertionError("qsort did not sort")
        return calls[0]


LIBC = Libc()


# =========================================================================
# Shared state


class Context:
    def __init__(self, args, rng):
        self.args = args
        self.rng = rng
        self.stop = threading.Event()
        self.t0 = monotonic()
        self.errors = []                    # strings; list.append is atomic
        self.workers = []
        self.held_lock = threading.Lock()   # held by the waker most of the time
        self.fork_tokens = collections.deque()
        self.forks = []                     # results, appended by the forking worker
        self.forks_requested = 0
        self.shutdown_runs = []
        self.stats_lock = threading.Lock()  # merging per-thread tallies (never in __del__)
        self.blocks = collections.Counter()
        self.tally = collections.Counter()
        self.native_threads = 0
        self.native_failed = 0
        self.short_lived = 0
        self.last_gc = [0.0]
        self.threshold_changes = 0
        self.kinds = []

    def elapsed(self):
        return monotonic() - self.t0

    def error(self, where, text):
        msg = "[%s] %s" % (where, text.rstrip())
        self.errors.append(msg)
        try:
            sys.stderr.write("brc_stress: ERROR %s\n" % msg)
            sys.stderr.flush()
        except Exception:
            pass

    def merge(self, blocks=None, tally=None):
        with self.stats_lock:
            if blocks:
                self.blocks.update(blocks)
            if tally:
                self.tally.update(tally)

    def deliver(self, rng, env, tally):
        """Hand env = (producer index or -1, item) to a random worker."""
        workers = self.workers
        w = workers[rng.randrange(len(workers))]
        cap = self.args.mailbox_cap
        if rng.random() < 0.2 and w.sq.qsize() < cap // 4:
            w.sq.put(env)
            tally["handoff_queue"] += 1
            return
        mb = w.mailbox
        if len(mb) >= cap:
            try:
                mb.popleft()            # evicted and dropped right here
                tally["evictions"] += 1
            except IndexError:
                pass
        mb.append(env)
        tally["handoff_mailbox"] += 1

    def steal(self, rng, n, tally):
        """Take up to n items from a random mailbox and drop them."""
        w = self.workers[rng.randrange(len(self.workers))]
        for _ in range(n):
            try:
                env = w.mailbox.popleft()
            except IndexError:
                break
            del env
            tally["stolen"] += 1

    def maybe_gc(self, tally):
        now = monotonic()
        if now - self.last_gc[0] >= self.args.gc_interval:
            self.last_gc[0] = now
            gc.collect()
            tally["gc_collect"] += 1


def poke(fd):
    try:
        os.write(fd, b"!")
    except (BlockingIOError, OSError):
        pass


def block_time(rng, max_ms):
    if rng.random() < 0.8:
        return rng.uniform(0.0, min(5.0, max_ms)) / 1000.0
    return rng.uniform(min(5.0, max_ms), max_ms) / 1000.0


# =========================================================================
# Workers


class Worker:
    def __init__(self, ctx, idx, seed):
        self.ctx = ctx
        self.idx = idx
        self.rng = random.Random(seed)
        self.mailbox = collections.deque()
        self.sq = queue.SimpleQueue()
        self.event = threading.Event()
        self.rfd, self.wfd = os.pipe()
        os.set_blocking(self.wfd, False)
        self.hold = collections.deque()
        self.blocks = collections.Counter()
        self.tally = collections.Counter()
        self.thread = threading.Thread(target=self.run, name="worker-%d" % idx, daemon=True)
        self.origin = "worker"

    # -- producing / consuming
    def produce(self):
        rng = self.rng
        for _ in range(rng.randrange(1, 12)):
            self.ctx.deliver(rng, (self.idx, make_item(rng, self.origin)), self.tally)
            self.tally["produced"] += 1

    def wake_producer(self, producer):
        if producer >= 0 and self.rng.random() < 0.25:
            w = self.ctx.workers[producer]
            w.event.set()
            poke(w.wfd)

    def consume_env(self, env):
        rng = self.rng
        r = rng.random()
        if r < 0.10:
            self.ctx.deliver(rng, env, self.tally)     # forward: a third thread drops it
            self.tally["forwarded"] += 1
            return
        if r < 0.15:
            self.hold.append(env)                       # keep for a while
            if len(self.hold) > 64:
                for _ in range(32):
                    self.hold.popleft()
            return
        producer = env[0]
        del env
        self.tally["dropped"] += 1
        self.wake_producer(producer)

    def consume(self, limit=64):
        mb = self.mailbox
        for _ in range(limit):
            try:
                self.consume_env(mb.popleft())      # the only reference is consume_env's
            except IndexError:
                break
        for _ in range(limit // 4):
            try:
                self.consume_env(self.sq.get_nowait())
            except queue.Empty:
                break

    # -- blocking
    def block(self, kind, t):
        ctx = self.ctx
        if kind == "event":
            self.event.wait(t)
            self.event.clear()
        elif kind == "sleep":
            time.sleep(t)
        elif kind == "lock":
            if ctx.held_lock.acquire(timeout=t):
                ctx.held_lock.release()
                self.tally["lock_acquired"] += 1
        elif kind == "select":
            r, _, _ = select.select([self.rfd], [], [], t)
            if r:
                os.read(self.rfd, 4096)
        elif kind == "read":
            if ctx.waker.schedule(t, self.wfd):
                os.read(self.rfd, 4096)
        elif kind == "queue":
            try:
                self.consume_env(self.sq.get(timeout=t))
            except queue.Empty:
                pass
        elif kind == "usleep":
            LIBC.usleep(int(t * 1e6))
        elif kind == "qsort":
            LIBC.sort_with_callback(self.rng.randrange(16, 96), self.rng, self.in_callback)
        elif kind == "busy":
            end = monotonic() + min(t, 0.002)
            while monotonic() < end:
                pass
        elif kind == "detach_attach":
            for _ in range(self.rng.randrange(10, 400)):
                time.sleep(0)           # detaches and attaches again
        elif kind == "new_tstate":
            _tic.call_in_second_thread_state(self.in_second_tstate)
        else:
            raise ValueError(kind)
        self.blocks[kind] += 1

    def in_callback(self):
        """Runs inside a qsort comparator (nested PyGILState_Ensure)."""
        rng = self.rng
        if rng.random() < 0.5:
            self.ctx.deliver(rng, (self.idx, Tracked("worker/qsort")), self.tally)
        else:
            self.ctx.steal(rng, 2, self.tally)

    def in_second_tstate(self):
        """Runs in a second thread state of this OS thread; the first one is
        detached meanwhile (call_in_second_thread_state)."""
        rng = self.rng
        for _ in range(rng.randrange(1, 6)):
            self.ctx.deliver(rng, (self.idx, make_item(rng, "tstate2")), self.tally)
        self.ctx.steal(rng, 4, self.tally)
        time.sleep(rng.uniform(0, 0.002))

    # -- fork
    def maybe_fork(self):
        ctx = self.ctx
        try:
            token = ctx.fork_tokens.popleft()
        except IndexError:
            return
        started = monotonic()
        rfd, wfd = os.pipe()                        # the child's report
        try:
            pid = os.fork()
            if pid == 0:
                os.close(rfd)
                fork_child(ctx, self, token, wfd)       # never returns
            os.close(wfd)
            wfd = -1
            status, timed_out = wait_child(pid, ctx.args.fork_timeout)
            os.set_blocking(rfd, False)
            try:
                data = os.read(rfd, 65536)
            except BlockingIOError:
                data = b""
        finally:
            os.close(rfd)
            if wfd >= 0:
                os.close(wfd)
        rec = {"n": token, "at": round(started - ctx.t0, 2), "pid": pid,
               "worker": self.idx, "seconds": round(monotonic() - started, 2),
               "timed_out": timed_out,
               "exitcode": os.waitstatus_to_exitcode(status) if status is not None else None}
        try:
            rec["report"] = json.loads(data.decode())
        except ValueError:
            rec["report"] = None
        rec["ok"] = rec["exitcode"] == 0 and not timed_out and rec["report"] is not None
        ctx.forks.append(rec)
        if not rec["ok"]:
            ctx.error("fork", "fork child %d (fork %d) exited with %r%s%s" % (
                pid, token, rec["exitcode"], " after a timeout" if timed_out else "",
                "" if rec["report"] else ", no report"))

    def run(self):
        ctx = self.ctx
        rng = self.rng
        kinds = ctx.kinds
        try:
            while not ctx.stop.is_set():
                self.maybe_fork()
                self.produce()
                if rng.random() < 0.85:
                    self.block(kinds[rng.randrange(len(kinds))],
                               block_time(rng, ctx.args.max_block_ms))
                self.consume()
                r = rng.random()
                if r < 0.05:
                    ctx.steal(rng, rng.randrange(1, 8), self.tally)
                elif r < 0.07:
                    ctx.maybe_gc(self.tally)
        except BaseException:
            ctx.error(self.thread.name, traceback.format_exc())
        finally:
            self.hold.clear()
            ctx.merge(self.blocks, self.tally)


# =========================================================================
# Waker: timed pipe writes for "read" blocks, random wake-ups, the held lock
# and the merge threshold.


class Waker:
    def __init__(self, ctx, seed, thresholds):
        self.ctx = ctx
        self.rng = random.Random(seed)
        self.cond = threading.Condition()
        self.heap = []
        self.tiebreak = itertools.count()
        self.closed = False
        self.thresholds = thresholds
        self.thread = threading.Thread(target=self.run, name="waker", daemon=True)

    def schedule(self, delay, fd):
        """Write a byte to fd after delay; False if the waker has closed
        (the caller must then not block in read)."""
        with self.cond:
            if self.closed:
                return False
            heapq.heappush(self.heap, (monotonic() + delay, next(self.tiebreak), fd))
            self.cond.notify()
        return True

    def run(self):
        ctx, rng = self.ctx, self.rng
        held = ctx.held_lock
        holding = held.acquire(timeout=JOIN_TIMEOUT)
        next_threshold = monotonic()
        ti = 0
        try:
            while not ctx.stop.is_set():
                due = []
                with self.cond:
                    now = monotonic()
                    while self.heap and self.heap[0][0] <= now:
                        due.append(heapq.heappop(self.heap)[2])
                    if not due:
                        timeout = 0.005
                        if self.heap:
                            timeout = min(timeout, self.heap[0][0] - now)
                        self.cond.wait(max(timeout, 0.0))
                for fd in due:
                    poke(fd)
                if rng.random() < 0.05:
                    w = ctx.workers[rng.randrange(len(ctx.workers))]
                    w.event.set()
                    poke(w.wfd)
                if holding:
                    if rng.random() < 0.03:
                        held.release()
                        holding = False
                else:
                    holding = held.acquire(timeout=0.02)
                if self.thresholds and monotonic() >= next_threshold:
                    _tic.set_brc_merge_threshold(self.thresholds[ti % len(self.thresholds)])
                    ti += 1
                    ctx.threshold_changes += 1
                    next_threshold = monotonic() + ctx.args.threshold_period
        except BaseException:
            ctx.error("waker", traceback.format_exc())
        finally:
            with self.cond:
                self.closed = True
                self.heap.clear()
            for w in ctx.workers:
                poke(w.wfd)
                w.event.set()
            if holding:
                held.release()


# =========================================================================
# Native threads (pthread_create via ctypes, attached by PyGILState_Ensure)


class NativeThread:
    def __init__(self, ctx, idx, seed):
        self.ctx = ctx
        self.idx = idx
        self.seed = seed
        self.done = threading.Event()
        self.blocks = collections.Counter()
        self.tally = collections.Counter()
        self.error = None
        self.tid = LIBC.pthread_t()
        self.callback = LIBC.THREADFUNC(self._entry)   # kept alive until joined

    def start(self):
        rc = LIBC.pthread_create(ctypes.byref(self.tid), None, self.callback, None)
        if rc != 0:
            raise OSError(rc, "pthread_create failed: %s" % os.strerror(rc))

    def _entry(self, arg):
        try:
            self.body()
        except BaseException:
            self.error = traceback.format_exc()
        finally:
            self.done.set()
        return None

    def body(self):
        ctx = self.ctx
        rng = random.Random(self.seed)
        tally, blocks = self.tally, self.blocks
        mine = []
        for _ in range(rng.randrange(2, 8)):
            if ctx.stop.is_set():
                break
            for _ in range(rng.randrange(2, 16)):
                item = make_item(rng, "native")
                if rng.random() < 0.8:
                    ctx.deliver(rng, (-1, item), tally)
                else:
                    mine.append(item)
                del item
            ctx.steal(rng, rng.randrange(1, 12), tally)
            kind = rng.choice(("usleep", "event", "sleep", "qsort", "select"))
            t = block_time(rng, ctx.args.max_block_ms)
            if kind == "usleep":
                LIBC.usleep(int(t * 1e6))
            elif kind == "event":
                ctx.stop.wait(t)
            elif kind == "sleep":
                time.sleep(t)
            elif kind == "select":
                select.select([], [], [], t)
            else:
                LIBC.sort_with_callback(rng.randrange(16, 64), rng,
                                        lambda: ctx.steal(rng, 1, tally))
            blocks["native_" + kind] += 1
            if mine and rng.random() < 0.5:
                del mine[:rng.randrange(len(mine) + 1)]
        # leave with some objects still held by others (handed off above)
        mine.clear()

    def join(self, timeout):
        """True once the pthread has been joined."""
        if not self.done.wait(timeout):
            return False
        if LIBC.pthread_timedjoin_np is not None:
            deadline = time.time() + timeout
            ts = LIBC.timespec(int(deadline), int((deadline % 1) * 1e9))
            rc = LIBC.pthread_timedjoin_np(self.tid, None, ctypes.byref(ts))
        else:
            rc = LIBC.pthread_join(self.tid, None)
        if rc != 0:
            self.error = (self.error or "") + "pthread join failed: %s" % os.strerror(rc)
            return rc != 110        # ETIMEDOUT: still running
        return True


# =========================================================================
# Short-lived threads and the spawner


def short_lived_body(ctx, seed):
    rng = random.Random(seed)
    tally = collections.Counter()
    try:
        for _ in range(rng.randrange(2, 24)):
            ctx.deliver(rng, (-1, make_item(rng, "short")), tally)
        if rng.random() < 0.3:
            ctx.steal(rng, rng.randrange(1, 6), tally)
        if rng.random() < 0.5:
            # Detached for a moment while others drop what we just made,
            # then exit -- often with objects still queued to us.
            ctx.stop.wait(rng.uniform(0, 0.002))
    except BaseException:
        ctx.error("short-lived", traceback.format_exc())
    ctx.merge(tally=tally)


def spawner(ctx, seed):
    args = ctx.args
    rng = random.Random(seed)
    fork_times = [] if args.no_fork or TSAN else [
        args.duration * (i + 1) / (args.forks + 1) for i in range(args.forks)]
    shorts = []
    natives = []
    native_ok = LIBC.ok and not args.no_native and not TSAN

    def reap_native(nt, timeout):
        if not nt.join(timeout):
            return False
        if nt.error:
            ctx.error("native-%d" % nt.idx, nt.error)
        ctx.merge(nt.blocks, nt.tally)
        return True

    try:
        while not ctx.stop.wait(rng.uniform(0.001, 0.02)):
            now = ctx.elapsed()
            while fork_times and now >= fork_times[0]:
                fork_times.pop(0)
                ctx.forks_requested += 1
                ctx.fork_tokens.append(ctx.forks_requested)
            alive = []
            for t in shorts:
                if t.is_alive():
                    alive.append(t)
                else:
                    t.join(JOIN_TIMEOUT)
            shorts = alive
            for _ in range(min(2, args.max_short - len(shorts))):
                t = threading.Thread(target=short_lived_body, args=(ctx, rng.getrandbits(32)),
                                     name="short-%d" % ctx.short_lived, daemon=True)
                t.start()
                ctx.short_lived += 1
                shorts.append(t)
            natives = [nt for nt in natives
                       if not (nt.done.is_set() and reap_native(nt, JOIN_TIMEOUT))]
            if native_ok and len(natives) < args.max_native and rng.random() < 0.3:
                nt = NativeThread(ctx, ctx.native_threads + ctx.native_failed, rng.getrandbits(32))
                try:
                    nt.start()
                except OSError as exc:
                    ctx.native_failed += 1
                    ctx.error("spawner", "native thread: %s" % exc)
                else:
                    ctx.native_threads += 1
                    natives.append(nt)
    except BaseException:
        ctx.error("spawner", traceback.format_exc())
    finally:
        for t in shorts:
            t.join(JOIN_TIMEOUT)
            if t.is_alive():
                ctx.error("spawner", "short-lived thread %s did not finish" % t.name)
        for nt in natives:
            if not reap_native(nt, JOIN_TIMEOUT):
                ctx.error("spawner", "native thread %d did not finish" % nt.idx)


# =========================================================================
# fork


def wait_child(pid, timeout):
    """waitpid() with a timeout: (status, timed_out).  On a timeout the child
    gets SIGUSR2 (faulthandler dumps its threads) and then SIGKILL."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    try:
        deadline = monotonic() + timeout
        while True:
            wpid, status = os.waitpid(pid, os.WNOHANG)
            if wpid == pid:
                return status, False
            remaining = deadline - monotonic()
            if remaining <= 0:
                break
            if pidfd is not None:
                select.select([pidfd], [], [], remaining)
            else:
                time.sleep(min(0.01, remaining))
        try:
            os.kill(pid, signal.SIGUSR2)
            t_end = monotonic() + 3.0
            while monotonic() < t_end:
                wpid, status = os.waitpid(pid, os.WNOHANG)
                if wpid == pid:
                    return status, True
                if pidfd is not None:
                    select.select([pidfd], [], [], 0.1)
                else:
                    time.sleep(0.01)
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, status = os.waitpid(pid, 0)
        return status, True
    finally:
        if pidfd is not None:
            os.close(pidfd)


def fork_child(ctx, worker, token, report_fd):
    """Runs in the forked child (only the forking worker's thread survived).
    Never returns: writes a JSON report to report_fd and os._exit()s 0 if
    every object created in the child was finalised exactly once, pending
    calls still run, and nothing raised.

    The child touches only objects no other parent thread used: contended
    containers may hold a PyMutex that was handed off to a vanished thread
    (see "Object tracking").  It drops the objects its worker kept in its
    private hold list -- mostly owned by parent threads that do not exist
    here -- and churns objects across three new threads.

    Known CPython issue (every flavour, GIL build included): if the fork
    lands while another thread is inside a gc collection (running
    finalisers), the child inherits the "collection in progress" flag and its
    gc.collect() never collects anything again, so cycles made in the child
    cannot be freed.  When a fresh probe cycle is not freed either, leaked
    child/cycle objects are only reported ("gc_stuck"); any other leaked
    object -- freed by reference counting alone, so a BRC matter -- fails.
    """
    code = 70
    report = {"pid": os.getpid()}
    try:
        problems = []
        lo = count_value(SERIALS) - 1          # serials > lo are made here
        since = marks()
        rng = random.Random(ctx.args.seed * 1000 + token)
        stop = threading.Event()
        boxes = [collections.deque() for _ in range(3)]

        def churn(i, seed):
            r = random.Random(seed)
            try:
                n = 0
                while not stop.is_set():
                    for _ in range(r.randrange(1, 8)):
                        boxes[r.randrange(3)].append(make_item(r, "child"))
                    mine = boxes[i]
                    while True:
                        try:
                            mine.popleft()          # dropped here
                        except IndexError:
                            break
                    stop.wait(r.uniform(0, 0.003))
                    n += 1
                    if n % 50 == 0:
                        gc.collect()
            except BaseException:
                problems.append(traceback.format_exc())

        threads = [threading.Thread(target=churn, args=(i, rng.getrandbits(32)), daemon=True)
                   for i in range(3)]
        for t in threads:
            t.start()
        inherited = len(worker.hold)
        worker.hold.clear()
        report["inherited_dropped"] = inherited
        stop.wait(ctx.args.fork_child_seconds)
        stop.set()
        for t in threads:
            t.join(30)
            if t.is_alive():
                problems.append("child thread %s did not finish" % t.name)
        for b in boxes:
            b.clear()
        deadline = monotonic() + SETTLE_TIMEOUT
        while True:
            gc.collect()
            hi = count_value(SERIALS) - 1
            left = missing_serials(lo, hi, since)
            if not left or monotonic() > deadline:
                break
            threading.Event().wait(0.01)
        _, doubles, double_sample, _, _ = check_serials(lo, hi, since=since)
        report["child_created"] = hi - lo
        report["leaked"] = len(left)
        report["gc_stuck"] = False
        if left:
            found = find_tracked(left)
            cycles_only = len(found) == len(left) and all(
                o.kind == "child/cycle" for o in found.values())
            stuck = not gc_collects_cycles()
            report["gc_stuck"] = stuck
            if not (cycles_only and stuck):
                problems.append("%d of %d objects created in the child were not finalised: %r\n%s\n"
                                "gc.collect() frees a fresh cycle: %s"
                                % (len(left), hi - lo, left[:10], describe_leaks(left, found),
                                   not stuck))
            del found
        # A fork that lands while another thread runs a pending call leaves
        # the child's pending-call machinery pointing at that (vanished)
        # thread, and no pending call runs again (0006 fixes it).
        report["pending_calls_run"] = pending = pending_calls_run()
        if pending is False:
            problems.append("pending calls never run in the child (the fork landed while"
                            " another thread was running one?)")
        report["double_finalised"] = doubles
        if doubles:
            problems.append("%d double finalisations in the child: %r" % (doubles, double_sample))
        report["problems"] = [x[:2000] for x in problems]
        os.write(report_fd, json.dumps(report).encode()[:60000])    # < a pipe buffer
        if problems:
            os.write(2, ("brc_stress: fork child %d (worker %d):\n%s\n" % (
                os.getpid(), worker.idx, "\n".join(problems))).encode("utf-8", "replace"))
            code = 1
        else:
            code = 0
    except BaseException:
        try:
            os.write(2, ("brc_stress: fork child crashed:\n" + traceback.format_exc())
                     .encode("utf-8", "replace"))
        except BaseException:
            pass
        code = 71
    finally:
        os._exit(code)


# =========================================================================
# Shutdown with owners blocked and their queues full (child interpreter)

SHUTDOWN_CHILD = r'''
import faulthandler, json, os, queue, random, select, signal, sys, threading, time
faulthandler.enable()
faulthandler.register(signal.SIGUSR2, all_threads=True)
p = json.loads(sys.argv[1])
rng = random.Random(p["seed"])

class T:
    __slots__ = ("payload", "peer", "__weakref__")
    def __init__(self, payload=None, peer=None):
        self.payload = payload
        self.peer = peer
    def __del__(self):
        self.payload = None

handoff = []
ready = threading.Semaphore(0)
dropped = threading.Semaphore(0)
forever = threading.Event()
held = threading.Lock()
held.acquire()
r_fd, w_fd = os.pipe()
native_ids = {}
try:
    import ctypes
    libc = ctypes.CDLL(None)
    libc.pause.restype = ctypes.c_int
except Exception:
    libc = None

def block(kind):
    if kind == "event":
        forever.wait()
    elif kind == "lock":
        held.acquire()
    elif kind == "read":
        os.read(r_fd, 1)
    elif kind == "select":
        select.select([r_fd], [], [])
    elif kind == "sleep":
        time.sleep(3600)
    elif kind == "queue":
        queue.SimpleQueue().get()
    elif kind == "pause" and libc is not None:
        while True:
            libc.pause()
    elif kind == "busy":
        x = 0
        while True:
            x += 1
    forever.wait()

def owner(i, kind):
    native_ids[i] = threading.get_native_id()
    objs = []
    for j in range(p["per_owner"]):
        payload = None
        if p["mmap"] and j % 97 == 0:
            import mmap
            payload = mmap.mmap(-1, 256 * 1024)
            payload[:] = b"x" * len(payload)
        elif j % 3 == 0:
            payload = bytearray(512)
        o = T(payload, objs[-1] if objs and j % 5 == 0 else None)
        if j % 11 == 0:
            o.peer = o                  # a cycle
        objs.append(o)
    handoff.append(objs)
    del objs, o, payload
    ready.release()
    block(kind)

def dropper(k):
    while True:
        try:
            batch = handoff.pop()
        except IndexError:
            break
        for _ in range(len(batch)):
            batch.pop()
        del batch
    dropped.release()
    if k < p["churners"]:
        mine = []
        while True:                     # still running during finalisation
            mine.append([T() for _ in range(8)])
            if len(mine) > 16:
                del mine[:8]

def parked(i):
    try:
        with open("/proc/self/task/%d/stat" % native_ids[i]) as f:
            data = f.read()
        return data[data.rindex(")") + 2] == "S"
    except (OSError, KeyError, ValueError):
        return False

owners = []
for i, kind in enumerate(p["kinds"]):
    t = threading.Thread(target=owner, args=(i, kind), daemon=True)
    t.start()
    owners.append(t)
for _ in owners:
    if not ready.acquire(timeout=60):
        sys.exit("owners did not start")
all_parked = None
if p["wait_parked"]:
    deadline = time.monotonic() + 10
    want = [i for i, k in enumerate(p["kinds"]) if k != "busy"]
    while time.monotonic() < deadline and not all(parked(i) for i in want):
        time.sleep(0.001)
    all_parked = all(parked(i) for i in want)
droppers = [threading.Thread(target=dropper, args=(k,), daemon=True)
            for k in range(p["droppers"])]
for t in droppers:
    t.start()
for _ in droppers:
    if not dropped.acquire(timeout=60):
        sys.exit("droppers did not finish")
stats = getattr(sys, "_brc_stats", None)
st = stats() if stats else None
print(json.dumps({"ok": True, "all_parked": all_parked,
                  "queued_at_exit": st["queue_length"] if st else None,
                  "merged_on_behalf": st["merged_on_behalf"] if st else None}))
sys.stdout.flush()
# exit with the owners blocked (or busy) and their queues possibly full
'''

SHUTDOWN_KINDS = ("event", "lock", "read", "select", "sleep", "queue", "pause", "busy")
SHUTDOWN_THRESHOLDS = (None, "0", "1000000", None, "3")
STDERR_BAD = ("Fatal Python error", "Assertion", "assert", "Traceback", "Segmentation",
              "Exception ignored", "Aborted", "ThreadSanitizer", "AddressSanitizer")


def shutdown_run(ctx, n, patched):
    rng = random.Random(ctx.args.seed * 7919 + n)
    params = {
        "seed": rng.getrandbits(32),
        "kinds": [rng.choice(SHUTDOWN_KINDS) for _ in range(rng.randrange(2, 7))],
        "per_owner": rng.randrange(50, 400),
        "mmap": rng.random() < 0.5,
        "droppers": rng.randrange(1, 4),
        "churners": rng.randrange(0, 2),
        "wait_parked": rng.random() < 0.6,
    }
    threshold = SHUTDOWN_THRESHOLDS[n % len(SHUTDOWN_THRESHOLDS)] if patched else None
    env = dict(os.environ)
    if TSAN:
        env["TSAN_OPTIONS"] = (env.get("TSAN_OPTIONS", "") + " report_thread_leaks=0").strip()
    if threshold is not None:
        env["PYTHON_BRC_MERGE_THRESHOLD"] = threshold
    cmd = [sys.executable, "-X", "faulthandler", "-c", SHUTDOWN_CHILD, json.dumps(params)]
    rec = {"n": n, "at": round(ctx.elapsed(), 2), "threshold": threshold, "params": params}
    started = monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=ctx.args.shutdown_timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.send_signal(signal.SIGUSR2)
        try:
            out, err = proc.communicate(timeout=3)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    rec["seconds"] = round(monotonic() - started, 2)
    rec["returncode"] = proc.returncode
    rec["timed_out"] = timed_out
    out = out.decode("utf-8", "replace")
    err = err.decode("utf-8", "replace")
    report = None
    try:
        report = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        pass
    rec["report"] = report
    bad = [s for s in STDERR_BAD if s in err]
    rec["ok"] = (proc.returncode == 0 and not timed_out and report is not None
                 and report.get("ok") is True and not err.strip())
    if not rec["ok"]:
        rec["stderr_tail"] = err[-4000:]
        rec["stdout_tail"] = out[-1000:]
        ctx.error("shutdown-%d" % n, "child interpreter: returncode %r%s, stderr markers %r\n"
                  "params %s threshold %r\n%s" % (
                      proc.returncode, " (timed out)" if timed_out else "", bad,
                      json.dumps(params), threshold, err[-4000:]))
    ctx.shutdown_runs.append(rec)


def shutdown_runner(ctx, n_during, patched):
    try:
        for i in range(n_during):
            due = ctx.t0 + ctx.args.duration * (i + 0.5) / n_during
            if ctx.stop.wait(max(0.0, due - monotonic())):
                return
            shutdown_run(ctx, i, patched)
    except BaseException:
        ctx.error("shutdown-runner", traceback.format_exc())


# =========================================================================
# main


MERGE_KEYS = ("merged_by_owner", "merged_on_behalf", "merged_by_gc", "merged_at_exit")
GAUGES = ("queue_length",)


def interpreter_info():
    gil = getattr(sys, "_is_gil_enabled", None)
    return {
        "version": sys.version,
        "executable": sys.executable,
        "gil_enabled": gil() if gil is not None else True,
        "free_threaded_build": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
        "py_debug": bool(sysconfig.get_config_var("Py_DEBUG")),
        "has_brc_stats": hasattr(sys, "_brc_stats"),
        "has_brc_probes": _tic is not None and hasattr(_tic, "call_in_second_thread_state"),
        "ctypes_libc": LIBC.ok,
        "tsan": TSAN,
    }


def rss_peak_mib():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of stress (60)")
    ap.add_argument("--threads", type=int, default=8, help="worker threads (8)")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    ap.add_argument("--watchdog", type=float, default=None,
                    help="dump tracebacks and exit if the run takes longer (duration*3+60)")
    ap.add_argument("--no-fork", action="store_true", help="do not os.fork()")
    ap.add_argument("--forks", type=int, default=2, help="forks during the run (2)")
    ap.add_argument("--fork-timeout", type=float, default=90.0)
    ap.add_argument("--fork-child-seconds", type=float, default=0.5)
    ap.add_argument("--shutdown-runs", type=int, default=3,
                    help="child interpreters exiting with blocked owners: "
                         "n-1 during the run, 1 after (3)")
    ap.add_argument("--shutdown-timeout", type=float, default=90.0)
    ap.add_argument("--no-native", action="store_true", help="no pthread_create native threads")
    ap.add_argument("--max-native", type=int, default=2, help="native threads alive at once (2)")
    ap.add_argument("--max-short", type=int, default=8,
                    help="short-lived threads alive at once (8)")
    ap.add_argument("--kinds", default=None,
                    help="comma list of worker block kinds (default: every available one)")
    ap.add_argument("--max-block-ms", type=float, default=40.0)
    ap.add_argument("--mailbox-cap", type=int, default=256)
    ap.add_argument("--mmap-cap", type=int, default=32, help="1 MiB payloads alive at once (32)")
    ap.add_argument("--gc-interval", type=float, default=0.5,
                    help="at most one explicit gc.collect() per this many seconds (0.5)")
    ap.add_argument("--thresholds", default="1,2,8,1,0,1",
                    help="merge thresholds to cycle through on patched builds, or 'none' "
                         "to leave the threshold alone (1,2,8,1,0,1)")
    ap.add_argument("--threshold-period", type=float, default=0.5)
    ap.add_argument("--json", action="store_true", help="one JSON line on stdout")
    ap.add_argument("--verbose", action="store_true", help="progress on stderr")
    args = ap.parse_args(argv)
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(4), "little")
    if args.watchdog is None:
        args.watchdog = args.duration * 3 + 60
    if args.threads < 2:
        ap.error("--threads must be at least 2")
    return args


def available_kinds(args):
    kinds = ["event", "sleep", "lock", "select", "read", "queue", "busy",
             "detach_attach"]
    if LIBC.ok:
        kinds += ["usleep", "qsort"]
    if hasattr(sys, "_brc_stats"):     # the series: 0009's probe is there
        if _tic is None or not hasattr(_tic, "call_in_second_thread_state"):
            raise SystemExit("brc_stress: this build has sys._brc_stats() but no "
                             "_testinternalcapi.call_in_second_thread_state (0009's "
                             "probe) for the new_tstate kind: rebuild it with the series")
        kinds += ["new_tstate"]
    if args.kinds:
        wanted = [k.strip() for k in args.kinds.split(",") if k.strip()]
        missing = [k for k in wanted if k not in kinds]
        if missing:
            raise SystemExit("brc_stress: block kinds not available here: %s (have %s)"
                             % (", ".join(missing), ", ".join(kinds)))
        kinds = wanted
    return kinds


# main()'s stages, in the order it runs them.

# both fixed for the process: the BRC patch series, its threshold knob
PATCHED = hasattr(sys, "_brc_stats")
CAN_SET_THRESHOLD = _tic is not None and hasattr(_tic, "set_brc_merge_threshold")


def install_hooks(ctx):
    """An exception in a thread, or an unraisable one, fails the run."""
    def excepthook(hook_args):
        ctx.error("thread %s" % (hook_args.thread.name if hook_args.thread else "?"),
                  "".join(traceback.format_exception(hook_args.exc_type, hook_args.exc_value,
                                                     hook_args.exc_traceback)))
    threading.excepthook = excepthook

    def unraisablehook(u):
        ctx.error("unraisable", "%s: %s\n%s" % (
            u.err_msg or "Exception ignored in", repr(u.object),
            "".join(traceback.format_exception(u.exc_type, u.exc_value, u.exc_traceback))))
    sys.unraisablehook = unraisablehook


def setup(args):
    """The watchdog, the Context and the hooks.  Returns the Context, the
    merge thresholds to cycle through and the threshold to restore."""
    warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*fork.*")
    faulthandler.enable()
    faulthandler.register(signal.SIGUSR2, all_threads=True, chain=False)
    faulthandler.dump_traceback_later(args.watchdog, exit=True)

    ctx = Context(args, random.Random(args.seed))
    ctx.kinds = available_kinds(args)
    thresholds = []
    if CAN_SET_THRESHOLD and args.thresholds.strip().lower() not in ("", "none"):
        thresholds = [int(x) for x in args.thresholds.split(",")]
    original_threshold = _tic.set_brc_merge_threshold(-1) if CAN_SET_THRESHOLD else None
    MMAP_CAP[0] = args.mmap_cap
    install_hooks(ctx)

    if not args.json:
        sys.stderr.write("brc_stress: %s\n  seed %d, %d workers, %.0f s, kinds %s\n" % (
            sys.version.split()[0], args.seed, args.threads, args.duration,
            ",".join(ctx.kinds)))
    return ctx, thresholds, original_threshold


def start_threads(ctx, thresholds, n_during):
    """Start the workers, the waker, the spawner and the shutdown runner
    (n_during runs); returns the spawner's and the runner's threads."""
    rng = ctx.rng
    ctx.workers = [Worker(ctx, i, rng.getrandbits(32)) for i in range(ctx.args.threads)]
    ctx.waker = Waker(ctx, rng.getrandbits(32), thresholds)
    spawner_thread = threading.Thread(target=spawner, args=(ctx, rng.getrandbits(32)),
                                      name="spawner", daemon=True)
    runner = threading.Thread(target=shutdown_runner, args=(ctx, n_during, PATCHED),
                              name="shutdown-runner", daemon=True)
    ctx.t0 = monotonic()
    ctx.waker.thread.start()
    for w in ctx.workers:
        w.thread.start()
    spawner_thread.start()
    runner.start()
    return spawner_thread, runner


def run_phase(ctx):
    """Let the threads run for --duration, then tell them to stop; returns
    how long they ran."""
    args = ctx.args
    end = ctx.t0 + args.duration
    while True:
        remaining = end - monotonic()
        if remaining <= 0:
            break
        ctx.stop.wait(min(remaining, 5.0))
        if args.verbose:
            c, f, _ = totals()
            sys.stderr.write("  [%5.1fs] created %d finalised %d alive %d errors %d\n"
                             % (ctx.elapsed(), c, f, c - f, len(ctx.errors)))
    run_seconds = ctx.elapsed()
    ctx.stop.set()
    return run_seconds


def join_threads(ctx, spawner_thread, runner):
    """Join every thread; returns the names of those that did not end."""
    hung = []
    for t in [w.thread for w in ctx.workers] + [spawner_thread, ctx.waker.thread]:
        t.join(JOIN_TIMEOUT)
        if t.is_alive():
            hung.append(t.name)
    runner.join(ctx.args.shutdown_timeout + 30)
    if runner.is_alive():
        hung.append(runner.name)
    if hung:
        ctx.error("main", "threads did not finish: %s" % ", ".join(hung))
        faulthandler.dump_traceback(all_threads=True)
    return hung


def drain(ctx, hung):
    """Drop everything the workers hold and collect until every object is
    finalised (or SETTLE_TIMEOUT); returns how long that took."""
    for w in ctx.workers:
        w.mailbox.clear()
        w.hold.clear()
        while True:
            try:
                w.sq.get_nowait()
            except queue.Empty:
                break
    settle_start = monotonic()
    for _ in range(3):
        gc.collect()
    while (not hung and monotonic() - settle_start < SETTLE_TIMEOUT
           and totals()[0] != totals()[1]):
        threading.Event().wait(0.01)
        gc.collect()
    return monotonic() - settle_start


def brc_accounting(stats_before, stats_after, hung, failures):
    """The counters' change over the run and whether every queued object
    was merged (appended to failures where not); (None, None) where
    sys._brc_stats() is missing."""
    if stats_before is None or stats_after is None:
        return None, None
    delta = {k: stats_after[k] - stats_before[k] for k in stats_after if k not in GAUGES}
    for k in GAUGES:
        delta[k] = stats_after[k]
    merged = sum(stats_after[k] for k in MERGE_KEYS)
    # enqueued is merged + queue_length by construction (0017): only an
    # object still queued can fail it
    accounting = {"enqueued": stats_after["enqueued"], "merged": merged,
                  "queue_length": stats_after["queue_length"],
                  "ok": stats_after["queue_length"] == 0}
    if not accounting["ok"] and not hung:
        failures.append("%d objects still queued at the end" % stats_after["queue_length"])
    return delta, accounting


def judge(ctx, hung, stats_before):
    """Count the objects and the counters after the run and judge them: the
    result's "ok", "failures" and counts."""
    created, _, off_owner = totals()
    n_serials = count_value(SERIALS) - 1
    finalised, double, double_sample, leaked, leaked_sample = check_serials(0, n_serials)
    leak_report = describe_leaks(leaked_sample) if leaked else None
    mmaps = count_value(MMAP_MADE)
    stats_after = brc_stats()
    for w in ctx.workers:
        os.close(w.rfd)
        os.close(w.wfd)

    failures = list(ctx.errors)
    if created != n_serials:
        failures.append("created %d objects but handed out %d serials" % (created, n_serials))
    if created != finalised or leaked:
        failures.append("created %d != finalised %d (%d never finalised, e.g. serials %r)\n%s"
                        % (created, finalised, leaked, leaked_sample, leak_report))
    if double:
        failures.append("%d double finalisations (serials %r)" % (double, double_sample))
    # (failed forks and shutdown runs are in ctx.errors already)
    idle = [k for k in ctx.kinds if not ctx.blocks.get(k)]
    if idle and not hung:
        failures.append("block kinds listed but never run: %s" % ", ".join(idle))
    delta, accounting = brc_accounting(stats_before, stats_after, hung, failures)
    return {
        "ok": not failures,
        "failures": failures,
        "created": created,
        "finalised": finalised,
        "double_finalised": double,
        "leaked": leaked,
        "leaked_sample": leaked_sample,
        "finalised_off_owner": off_owner,
        "mmap_payloads": mmaps,
        "brc_stats_before": stats_before,
        "brc_stats_after": stats_after,
        "brc_stats_delta": delta,
        "brc_accounting": accounting,
    }


def describe_run(ctx, argv, thresholds, run_seconds, settle_seconds, hung):
    """The rest of the result: what ran, for how long, on what."""
    args = ctx.args
    return {
        "duration": args.duration,
        "elapsed": round(ctx.elapsed(), 2),
        "run_seconds": round(run_seconds, 2),
        "settle_seconds": round(settle_seconds, 3),
        "seed": args.seed,
        "threads": args.threads,
        "argv": sys.argv[1:] if argv is None else list(argv),
        "interpreter": interpreter_info(),
        "kinds": ctx.kinds,
        "blocks": dict(sorted(ctx.blocks.items())),
        "tally": dict(sorted(ctx.tally.items())),
        "native_threads": ctx.native_threads,
        "native_failed": ctx.native_failed,
        "short_lived_threads": ctx.short_lived,
        "forks_requested": ctx.forks_requested,
        "forks": ctx.forks,
        "shutdown_runs": ctx.shutdown_runs,
        "thresholds": thresholds,
        "threshold_changes": ctx.threshold_changes,
        "peak_rss_mib": rss_peak_mib(),
        "hung_threads": hung,
    }


def report(ctx, result, settle_seconds):
    """One JSON line on stdout (--json) or a summary on stderr, then the
    failures on stderr."""
    args = ctx.args
    if args.json:
        sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
        sys.stdout.flush()
    else:
        w = sys.stderr.write
        w("brc_stress: %s in %.1f s (seed %d)\n" % ("PASS" if result["ok"] else "FAIL",
                                                   result["elapsed"], args.seed))
        w("  created %d finalised %d double %d leaked %d (off-owner %d, mmap %d)\n" % (
            result["created"], result["finalised"], result["double_finalised"],
            result["leaked"], result["finalised_off_owner"], result["mmap_payloads"]))
        w("  blocks %s\n" % json.dumps(result["blocks"]))
        w("  native %d short-lived %d forks %s shutdown runs %s\n" % (
            ctx.native_threads, ctx.short_lived,
            [r["exitcode"] for r in ctx.forks], [r["returncode"] for r in ctx.shutdown_runs]))
        if result["brc_stats_delta"] is not None:
            w("  brc delta %s\n" % json.dumps(result["brc_stats_delta"]))
        w("  peak RSS %s MiB, settle %.3f s\n" % (result["peak_rss_mib"], settle_seconds))
    if result["failures"]:
        sys.stderr.write("brc_stress: FAILED (seed %d):\n" % args.seed)
        for f in result["failures"]:
            sys.stderr.write("  - %s\n" % f.replace("\n", "\n    "))
        sys.stderr.flush()


def main(argv=None):
    args = parse_args(argv)
    ctx, thresholds, original_threshold = setup(args)
    stats_before = brc_stats()
    n_during = max(0, args.shutdown_runs - 1)
    spawner_thread, runner = start_threads(ctx, thresholds, n_during)
    run_seconds = run_phase(ctx)
    hung = join_threads(ctx, spawner_thread, runner)
    if CAN_SET_THRESHOLD:
        _tic.set_brc_merge_threshold(original_threshold)
    if ctx.fork_tokens:
        ctx.error("main", "%d requested forks did not happen" % len(ctx.fork_tokens))
    settle_seconds = drain(ctx, hung)

    # ---- the final shutdown run, from the main thread
    if args.shutdown_runs > 0 and not hung:
        try:
            shutdown_run(ctx, n_during, PATCHED)
        except BaseException:
            ctx.error("main", "shutdown run: " + traceback.format_exc())

    result = judge(ctx, hung, stats_before)
    result.update(describe_run(ctx, argv, thresholds, run_seconds, settle_seconds, hung))
    report(ctx, result, settle_seconds)
    if hung:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(3)
    faulthandler.cancel_dump_traceback_later()
    faulthandler.dump_traceback_later(min(args.watchdog, 120.0), exit=True)   # guards finalisation
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
