#!/usr/bin/env python3
"""The hazard mix: a seeded, time-bounded run in which the mechanisms meet.

Every hazard the series had came from two mechanisms meeting (a merge on
behalf and a pause, a merge and a fork, a Task's unlink and a fork or an
exit).  This run makes them meet at random, in one process tree, and checks
the properties each test checks alone.  Run by the interpreter under test
(stdlib only):

    python mix.py [--seconds 60] [--seed N] [--json]         the supervisor
    python mix.py --child KIND --seed N --seconds T           one child run

The supervisor runs these children one after another, each a process of its
own with a deadline, and prints one JSON line (--json) or a summary:

  main       the mix below, then every thread joined and checked; where
             sys._brc_stats() exists once per PYTHON_BRC_MERGE_THRESHOLD
             (1, 0, 7), else once.  Threads forking from it run in it.
  exit       the mix for a moment, then the process ends with its daemon
             threads still dropping and blocking (five seeds).
  isolated   the mix's owners and droppers inside an isolated subinterpreter.
  reentry    the shapes of a re-entered merge (review 5, issue 46), each
             with a deadline: a stream of drops to an owner that runs
             Python, whose objects have a __del__ or a weakref callback
             (every finalizer must run, and on a patched flavour the
             merges nest at most 4 deep); destructors that the owner's
             own merge runs and that wait for another object of the same
             owner, dropped by another thread meanwhile (polling a weak
             reference, a chain of two, and a permit (a Lock), in short
             waits, that the other object's finalizer releases).  Stock ft and
             ft-upstream lose stream finalizers to RecursionError (a stock
             defect that 0010 fixes): there the loss is reported with its
             count, not judged; the waiting shapes are judged everywhere.
  twins      drops to an owner with a second thread state (review 5's C,
             0009; tests/scenarios/twins.py): one it swapped in and runs
             Python in (the series' probe; not run elsewhere, and said so),
             and one an exited thread left bound, whose id the owner reuses
             (ctypes, every flavour).  No object may be finalised while its
             owner holds it, twice, or never.  Judged on a patched flavour;
             elsewhere reported, not judged: ft-upstream merges on behalf of
             the exited thread's state while the owner counts references
             and aborts ("called on object with a non-zero refcount").
  legacy     the same in a legacy subinterpreter (which shares the main
             interpreter's objects and switches merging on behalf off).
             Reported, not judged (--judge-subinterpreters judges them),
             where stock fails them: legacy on both lines (stock main-ft
             crashes in the GC's handle_resurrected_objects() or hangs in 3
             of 8 seeds), isolated on 3.14 (stock 3.14.7t crashes at exit in
             _PyObject_FinalizeUniqueIdPool() or hangs in most seeds; two at
             once with pauses finalise objects twice).  CPython main passes
             isolated, and is judged there.

The mix (each thread draws its operations from its own random.Random,
seeded from --seed and its index, so a seed replays the same operations):

  owners     make a batch (one object, a container of 10**0..10**6 objects,
             a dead chain, objects with weakref callbacks, finished asyncio
             Tasks, or 10**4 objects and 1000 Tasks for two droppers at
             once), hand it to the droppers, then block: Lock, Event,
             Condition, queue.Queue, os.read of a pipe a waker writes to,
             time.sleep, select, or a long C call that never checks.
  droppers   hold batches for a while and drop them.
  pausers    stop the world: sys._current_frames(), gc.collect(), and
             threading.settrace_all_threads() switched on and off.
  forker     os.fork() now and then: the child frees what it inherited,
             runs a short mix of its own, checks it and exits 0.
  sentinel   an owner that hands over 8 objects and blocks while the
             pausers pause in a loop: were they freed within 0.5 s, while
             it still blocks?  (left_behind; judged by the caller.)  Timed
             by their weakref callbacks, not by when the judging thread
             (slow to wake under a sanitizer) sees them go; time the world
             was held stopped does not count: a fork, or a pause (the
             pauser's, a storm's or not) over 0.1 s, held up by a thread
             that runs without checks (the long C call; seconds under a
             sanitizer), when nothing can run (held; reported, as
             seen_late is).

Tracked objects count their finalisations by serial; weakref callbacks
allocate, take a lock no dropping thread holds and sometimes collect.
On a flavour without the series (no sys._brc_stats()), a main run whose
only failures are objects never finalised and callbacks missing (its own
or a fork child's, which exits 1), with finalizers that failed on
RecursionError (counted by an unraisable hook), is the stock defect above:
reported with its counts, not judged.

A child fails on: an object finalised twice or never, a callback missing,
an exception in a thread, a fork child that fails or outlives its deadline,
sys._brc_stats() that still has objects queued, more than LEAK_BLOCKS live
allocator blocks at the end than at its start.  RSS is reported, not
judged: mimalloc keeps freed pages (an exited thread's for good, on stock
ft too), so RSS cannot tell a leak from them.  Under ASan
(malloc, which counts no blocks) memory is not judged, and the run says so.
A child that outlives its deadline has every thread's Python stack dumped
(faulthandler, SIGUSR2) and, where gdb is installed, its C stacks; then it
is killed.  Every failure names the seed and the command that replays it.
"""

import argparse
import array
import asyncio
import collections
import contextlib
import gc
import json
import os
import queue
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
import weakref

warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)

HERE = os.path.abspath(__file__)
# brc_stats() (bench/workloads/_probes.py, shared with the scenario scripts
# and the bench) and the reentry scenario's shapes (tests/scenarios): their
# folders are found from this file, as the runs in subinterpreters
# (runpy.run_path) need them too.  Appended, so that they shadow nothing.
TESTS = os.path.dirname(os.path.dirname(HERE))
sys.path.append(os.path.join(TESTS, "scenarios"))
sys.path.append(os.path.join(os.path.dirname(TESTS), "bench", "workloads"))
from _probes import brc_stats  # noqa: E402
from reentry import stream_shape, waiting_shape  # noqa: E402
import twins  # noqa: E402
try:
    import _testinternalcapi    # a late sentinel round says if help is wanted
except ImportError:
    _testinternalcapi = None

# --with-thread-sanitizer puts the flag in PY_CFLAGS, not CONFIG_ARGS
TSAN = "-fsanitize=thread" in (__import__("sysconfig").get_config_var("PY_CFLAGS") or "")
CAN_FORK = hasattr(os, "fork") and not TSAN


# -- bookkeeping ------------------------------------------------------------

class Slot:
    """One thread's serials (made), the finalisations it ran (fin), the
    weakref callbacks it registered (cbr) and ran (cbc)."""
    __slots__ = ("idx", "made", "fin", "cbr", "cbc")


class Ledger:
    """Serials of tracked objects and their finalisations.

    No lock: a finaliser can run at any eval breaker check, also inside a
    `with lock:` of the thread it runs in.  Each thread counts in a Slot of
    its own; list.append and array.append are atomic.
    """

    def __init__(self):
        self.slots = []
        self.tls = threading.local()
        self.errors = []
        self.cb_lock = threading.RLock()    # taken by weakref callbacks only
        self.cb_lock_pid = os.getpid()      # the process it was made in

    def slot(self):
        s = getattr(self.tls, "s", None)
        if s is None:
            s = Slot()
            s.made, s.fin, s.cbr, s.cbc = 0, array.array("Q"), 0, 0
            self.slots.append(s)
            s.idx = self.slots.index(s)     # Slot compares by identity
            self.tls.s = s
        return s

    def new(self):
        s = self.slot()
        s.made += 1
        return s.idx << 32 | s.made

    def finalised(self, n):
        self.slot().fin.append(n)

    def created(self, first_slot=0):
        return sum(s.made for s in self.slots[first_slot:])

    def callbacks(self):
        return sum(s.cbr for s in self.slots), sum(s.cbc for s in self.slots)

    def counts(self, first_slot=0):
        """{serial's slot: bytearray of finalisations per serial} of slots from first_slot."""
        counts = {s.idx: bytearray(s.made + 1) for s in self.slots[first_slot:]}
        for s in self.slots:
            for v in s.fin:
                c = counts.get(v >> 32)
                if c is not None and c[v & 0xFFFFFFFF] < 255:
                    c[v & 0xFFFFFFFF] += 1
        return counts

    def check(self, first_slot=0):
        """Every serial made by slots from first_slot finalised exactly once."""
        never = twice = 0
        for c in self.counts(first_slot).values():
            never += c.count(0) - 1
            twice += len(c) - c.count(0) - c.count(1)
        out = []
        if never:
            out.append("%d objects never finalised" % never)
        if twice:
            out.append("%d objects finalised more than once" % twice)
        return out

    def times_finalised(self, serials):
        wanted, want = set(serials), collections.Counter()
        for s in self.slots:
            for v in s.fin:
                if v in wanted:
                    want[v] += 1
        return [want[n] for n in serials]


LEDGER = Ledger()
RECURSION_ERRORS = [0]      # finalizers that failed on RecursionError


def count_unraisable(u, default=sys.unraisablehook):
    if isinstance(u.exc_value, RecursionError):
        RECURSION_ERRORS[0] += 1    # thousands: the count is the report
    else:
        default(u)


def new_cb_lock():
    LEDGER.cb_lock, LEDGER.cb_lock_pid = threading.RLock(), os.getpid()


os.register_at_fork(after_in_child=new_cb_lock)


class Obj:
    __slots__ = ("serial", "next", "payload", "__weakref__")

    def __init__(self, payload=None):
        self.serial = LEDGER.new()
        self.next = None
        self.payload = payload

    def __del__(self):
        LEDGER.finalised(self.serial)


CALLED = set()      # ids of weakrefs whose callback ran (pruning, below)


def on_dead(ref):
    CALLED.add(id(ref))
    junk = [ref] * 8                        # allocates, in whichever thread frees
    # No thread holds it while it drops; but a fork child clears the dead
    # threads' states, running callbacks, before its at-fork hooks run, and
    # a dead thread may hold it there: until new_cb_lock() runs it does not
    # wait, or a dead thread's queue of callbacks would wait 2 s each.
    locked = LEDGER.cb_lock.acquire(timeout=2 if LEDGER.cb_lock_pid == os.getpid() else 0)
    LEDGER.slot().cbc += 1
    if locked:
        LEDGER.cb_lock.release()
    if id(junk) % 4099 == 0:
        gc.collect()


def pruned(ref):
    """Forget a weakref whose callback ran; False if it has not yet."""
    if id(ref) in CALLED:
        CALLED.discard(id(ref))
        return True
    return False


def watched(refs):
    o = Obj()
    refs.append(weakref.ref(o, on_dead))
    LEDGER.slot().cbr += 1
    return o


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class Pair(tuple):
    """Two batches that go to the droppers separately."""


def make_tasks(loop, n):
    async def carry(o):
        return o
    tasks = [loop.create_task(carry(Obj())) for _ in range(n)]
    loop.run_until_complete(asyncio.wait(tasks))
    return tasks


# -- the threads of the mix -------------------------------------------------

class Mix:
    def __init__(self, seed, seconds, forks=True, sentinel=True, owners=3, droppers=3):
        self.seed, self.seconds = seed, seconds
        self.forks, self.sentinel = forks and CAN_FORK, sentinel
        self.n_owners, self.n_droppers = owners, droppers
        self.stop = threading.Event()
        self.storm = threading.Event()      # the sentinel wants pauses in a loop
        self.handoff = queue.SimpleQueue()
        self.held = threading.Lock()        # held by the mix's thread: owners time out on it
        self.wake_fds = {}
        self.waker_q = queue.SimpleQueue()
        self.counts = collections.Counter()
        self.left_behind = 0
        self.late = []          # per round past 0.5 s: when all 8 went (None if not while
                                # blocked), time held stopped, help wanted, who freed them,
                                # how many pauses it waited through and the longest
        self.held_rounds = []   # per round with time held stopped: how long (s)
        self.seen_late = 0      # rounds freed in time that the judge saw go late
        self.pauses = []        # (start, end) of each pause or fork this round
        self.now = {"pause": None, "fork": None}    # start of the one in progress
        self.sentinel_rounds = 0
        self.fork_results = []
        self.threads = []
        self.refs = []          # weakrefs kept until the end, so that every callback runs

    def rng(self, idx):
        return random.Random(self.seed * 1_000_003 + idx)

    def error(self, where):
        LEDGER.errors.append("%s: %s" % (where, traceback.format_exc(limit=8)))

    def spawn(self, target, idx, daemon=False):
        def body():
            try:
                target(self.rng(idx), idx)
            except BaseException:
                self.error("%s[%d]" % (target.__name__, idx))
        t = threading.Thread(target=body, name="%s-%d" % (target.__name__, idx), daemon=daemon)
        t.start()
        self.threads.append(t)

    # owners ------------------------------------------------------------
    def make_batch(self, rng, loop, refs):
        kind = rng.choices(("one", "container", "chain", "callbacks", "tasks", "pair"),
                           (3, 4, 2, 2, 2, 2))[0]
        self.counts["batch_" + kind] += 1
        if kind == "one":
            return Obj()
        if kind == "container":
            k = 6 if rng.random() < 0.01 else rng.randint(0, 5)
            n = 10 ** k
            plain = [(i, float(i)) for i in range(n)]
            return [Obj(plain), {i: Obj() for i in range(min(n, 64))}]
        if kind == "chain":
            head = Obj()
            node = head
            for _ in range(rng.randint(10, 5000)):
                node.next = Obj()
                node = node.next
            return head
        if kind == "callbacks":
            return [watched(refs) for _ in range(rng.randint(1, 200))]

        if kind == "tasks":
            return make_tasks(loop, rng.randint(1, 1000))
        # two batches of one owner for two droppers at once: the Tasks'
        # unlinks meet the objects' merges at the owner's bucket lock
        return Pair(([Obj() for _ in range(10_000)], make_tasks(loop, 1000)))

    def block(self, rng, idx):
        kind = rng.choice(("lock", "event", "condition", "queue", "read", "sleep",
                           "select", "ccall"))
        r = rng.random()
        t = rng.uniform(0, 0.02) if r < 0.7 else rng.uniform(0.02, 0.2) if r < 0.95 else \
            rng.uniform(0.2, 1.0)
        self.counts["block_" + kind] += 1
        if kind == "lock":
            self.held.acquire(timeout=t)
        elif kind == "event":
            threading.Event().wait(t)
        elif kind == "condition":
            c = threading.Condition()
            with c:
                c.wait(t)
        elif kind == "queue":
            try:
                queue.Queue().get(timeout=t)
            except queue.Empty:
                pass
        elif kind == "read":
            rfd, wfd = self.wake_fds[idx]
            self.waker_q.put((time.monotonic() + t, wfd))
            os.read(rfd, 1)
        elif kind == "sleep":
            time.sleep(t)
        elif kind == "select":
            select.select([self.wake_fds[idx][0]], [], [], t)
        else:
            sum(range(int(t * 2e7)))        # attached, no check until it returns

    def owner(self, rng, idx):
        loop = asyncio.new_event_loop()
        refs = []
        self.wake_fds[idx] = os.pipe()
        try:
            while not self.stop.is_set():
                # no reference left here once handed over: a fork child
                # checks that what it inherited is freed
                batch = self.make_batch(rng, loop, refs)
                parts = list(batch) if isinstance(batch, Pair) else [batch]
                del batch
                while parts:
                    self.handoff.put(parts.pop())
                self.block(rng, idx)
                if len(refs) > 1000:
                    # A dead referent (r() is None) may still be in its
                    # dealloc on another thread, its callback to come:
                    # dropping the weakref then cancels the callback.
                    refs[:] = [r for r in refs if r() is not None or not pruned(r)]
        finally:
            loop.close()
            self.refs.append(refs)

    def waker(self, rng, idx):
        pending = []
        while not (self.stop.is_set() and not pending):
            try:
                pending.append(self.waker_q.get(timeout=0.005))
            except queue.Empty:
                pass
            now = time.monotonic()
            for item in [p for p in pending if p[0] <= now or self.stop.is_set()]:
                pending.remove(item)
                os.write(item[1], b"x")

    # droppers, pausers ---------------------------------------------------
    def dropper(self, rng, idx):
        held = collections.deque()
        while True:
            try:
                held.append(self.handoff.get(timeout=0.01))
                self.counts["dropped"] += 1
            except queue.Empty:
                if self.stop.is_set():
                    break
            while len(held) > rng.randint(0, 3):
                held.popleft()
            if rng.random() < 0.05:
                time.sleep(rng.uniform(0, 0.01))
        held.clear()

    def pauser(self, rng, idx):
        def tracer(frame, event, arg):
            return None
        while not self.stop.is_set():
            storm = self.storm.is_set()
            op = "frames" if storm else rng.choices(("frames", "collect", "trace"),
                                                    (14, 1, 3))[0]
            # Every pause is timed, a storm's or not: one under way when a
            # sentinel round starts (a collection frees what it finds
            # queued, late under TSan) holds its objects as well.
            with self.stopping("pause"):
                if op == "frames":
                    sys._current_frames()   # waits for the slowest attached thread
                elif op == "collect":
                    gc.collect()
                else:
                    threading.settrace_all_threads(tracer)
                    time.sleep(0.001)
                    threading.settrace_all_threads(None)
            if not storm:
                self.counts["pause_" + op] += 1
                time.sleep(rng.uniform(0, 0.004))

    def sentinel_owner(self, rng, idx):
        """Hand over 8 objects and block 2 s; the partner judges."""
        inbox = queue.SimpleQueue()
        partner = threading.Thread(target=self.sentinel_dropper, args=(inbox,), daemon=True)
        partner.start()
        while not self.stop.is_set():
            gone = []
            objs = [Obj() for _ in range(8)]
            # when each went, and which thread freed it
            refs = [weakref.ref(o, lambda r: gone.append(
                        (time.monotonic(), threading.current_thread().name))) for o in objs]
            wake = threading.Event()
            inbox.put((objs, gone, wake))
            del objs
            wake.wait(30)                   # detached until the partner is done
            del refs
            self.stop.wait(rng.uniform(0.05, 0.3))
        inbox.put(None)
        partner.join(5)

    def sentinel_dropper(self, inbox):
        while (item := inbox.get()) is not None:
            objs, gone, wake = item
            del item
            self.pauses = []
            self.storm.set()
            objs.clear()                    # the drop, while the world pauses
            del objs
            start = now = time.monotonic()
            while (len(gone) < 8 and now - start - self.held_stopped(start, now) < 0.5
                   and now - start < 30):
                time.sleep(0.002)
                now = time.monotonic()
            held = self.held_stopped(start, now)
            self.storm.clear()
            self.sentinel_rounds += 1
            if held:
                self.held_rounds.append(round(held, 3))
            if len(gone) < 8:
                # Judged by when they went (their callbacks' clock), not by when
                # this thread, slow to wake under a sanitizer, saw them go.
                help_wanted = getattr(_testinternalcapi, "brc_help_wanted", lambda: None)()
                deadline = time.monotonic() + 1.0
                while len(gone) < 8 and time.monotonic() < deadline:
                    time.sleep(0.002)
                went = max(t for t, _ in gone) if len(gone) == 8 else None
                if went is None or went - start - self.held_stopped(start, went) > 0.5:
                    self.left_behind += 1
                    spans = [e - b for b, e in list(self.pauses)
                             if e > start and (went is None or b < went)]
                    self.late.append([None if went is None else round(went - start, 3),
                                      round(held, 3), help_wanted,
                                      sorted({name for _, name in gone}),
                                      len(spans), round(max(spans, default=0), 3)])
                else:
                    self.seen_late += 1
            wake.set()

    @contextlib.contextmanager
    def stopping(self, kind):
        """Time a pause or a fork: in progress in self.now, then in self.pauses."""
        self.now[kind] = t = time.monotonic()
        yield
        self.pauses.append((t, time.monotonic()))
        self.now[kind] = None

    def held_stopped(self, start, now):
        """Seconds of [start, now] in the pauses and forks of over 0.1 s."""
        pauses = list(self.pauses)
        for began in self.now.values():
            if began is not None and all(b != began for b, _ in pauses):
                pauses.append((began, now))
        held, end = 0.0, start      # a fork and a pause may overlap: their union
        for b, e in sorted((max(b, start), min(e, now)) for b, e in pauses
                           if e - b > 0.1 and e > start and b < now):
            held += max(0.0, e - max(b, end))
            end = max(end, e)
        return held

    # forks ---------------------------------------------------------------
    def forker(self, rng, idx):
        while not self.stop.wait(rng.uniform(0.05, 0.6)):
            loop = asyncio.new_event_loop()
            mine = self.make_batch(rng, loop, self.refs)
            loop.close()
            try:
                theirs = self.handoff.get(timeout=0.1)
            except queue.Empty:
                theirs = None
            box = [mine, theirs]
            del mine, theirs
            # os.fork() stops the world (for 0.9 s seen under ASan): the
            # sentinel does not count that time, as with the pausers' pauses.
            with self.stopping("fork"):
                pid = os.fork()
                if pid == 0:
                    os._exit(fork_child(self.seed + idx, box))
            box.clear()
            self.fork_results.append(wait_pid(pid, 30, "fork child (seed %d)" % (self.seed + idx)))
            self.counts["forks"] += 1

    # the run -------------------------------------------------------------
    def start(self, daemon=False):
        # Stock CPython sets tracing up once, under a flag that a fork
        # landing inside leaves locked in the child, whose every
        # sys.settrace() then waits for ever (docs/reliability.md): do it
        # before any thread forks.
        sys.settrace(None)
        self.held.acquire()
        idx = 0
        for role, n in ((self.owner, self.n_owners), (self.dropper, self.n_droppers),
                        (self.pauser, 1), (self.waker, 1),
                        (self.sentinel_owner, int(self.sentinel)), (self.forker, int(self.forks))):
            for _ in range(n):
                self.spawn(role, idx, daemon)
                idx += 1

    def finish(self):
        self.stop.set()
        for _, wfd in list(self.wake_fds.values()):
            os.write(wfd, b"x")             # an owner in os.read() whose waker has gone
        hung = []
        for t in self.threads:
            t.join(60)
            if t.is_alive():
                hung.append(t.name)
        self.held.release()
        while not self.handoff.empty():     # put after the droppers had gone
            self.handoff.get()
        return hung


def fork_child(seed, box):
    """In a fork child: free what it inherited (box), run a short mix, check it."""
    LEDGER.errors.clear()
    try:
        first = len(LEDGER.slots)
        inherited = [o.serial for batch in box for o in (batch if isinstance(batch, list)
                                                          else [batch]) if isinstance(o, Obj)]
        box.clear()
        mix = Mix(seed, 0.3, forks=False, sentinel=False, owners=1, droppers=1)
        mix.start()
        time.sleep(mix.seconds)
        hung = mix.finish()
        gc.collect()
        fails = LEDGER.check(first) + LEDGER.errors
        # Reported, not judged: an object of a dead thread's batch was seen
        # unfreed here at every threshold, 0 included (cause not found yet).
        times = LEDGER.times_finalised(inherited)
        twice = [t for t in times if t > 1]
        fails += ["an inherited object finalised %d times" % t for t in twice]
        if len(twice) < len(times) - times.count(1):
            print("fork child (seed %d): note: %d inherited objects not finalised"
                  % (seed, times.count(0)), file=sys.stderr)
        if hung:
            fails.append("threads did not end: %s" % hung)
        for f in fails:
            print("fork child (seed %d): %s" % (seed, f), file=sys.stderr)
        return 1 if fails else 0
    except BaseException:
        traceback.print_exc()
        return 2


def dump_and_kill(pid):
    """Every thread's Python stack (faulthandler), C stacks (gdb), then kill."""
    try:
        os.kill(pid, signal.SIGUSR2)
        time.sleep(1)
        if shutil.which("gdb"):
            subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"],
                           stdout=sys.stderr, stderr=subprocess.STDOUT, timeout=60)
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass


def live_group(pgid):
    """The processes of group pgid that have not exited (Linux /proc)."""
    pids = []
    for name in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % name) as f:
                state, _, pgrp = f.read().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue
        if int(pgrp) == pgid and state != "Z":
            pids.append(int(name))
    return pids


def wait_pid(pid, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            return {"ok": code == 0, "exitcode": code}
        time.sleep(0.01)
    print("%s: still running after %d s: its stacks:" % (what, timeout), file=sys.stderr)
    dump_and_kill(pid)
    os.waitpid(pid, 0)
    return {"ok": False, "exitcode": None, "hung": True}


# -- one child run ------------------------------------------------------------

def check_stats(stats, fails):
    if stats is None:
        return
    # (enqueued is merged + queue_length by construction since 0017)
    if stats["queue_length"]:
        fails.append("objects still queued at the end: %s" % stats)


# sys.getallocatedblocks() at the end less at the start: a leaked container
# of 10**5 (int, float) pairs is 3 * 10**5 blocks; the mix's own records
# left 2,300-6,700 in 12- to 60-s parts (docs/reliability.md).
LEAK_BLOCKS = 100_000


def child_main(seed, seconds, daemon_exit, forks=True, judge_memory=True):
    blocks = sys.getallocatedblocks()
    mix = Mix(seed, seconds, forks=forks)
    mix.start(daemon=daemon_exit)
    mix.stop.wait(seconds * 0.2)
    warm = rss_mib()
    mix.stop.wait(seconds * 0.8)
    if daemon_exit:
        return {"kind": "exit", "counts": dict(mix.counts)}    # daemons still running
    hung = mix.finish()
    mix.pauses = []     # the last round's record: a storm's is 10**5 tuples
    gc.collect()
    gc.collect()
    end = rss_mib()
    leaked = sys.getallocatedblocks() - blocks
    fails = LEDGER.check() + LEDGER.errors
    fails += ["threads did not end: %s" % hung] if hung else []
    fails += ["fork child failed: %s" % r for r in mix.fork_results if not r["ok"]]
    registered, called = LEDGER.callbacks()
    if called != registered:
        fails.append("weakref callbacks: %d registered, %d called" % (registered, called))
    stats = brc_stats()
    check_stats(stats, fails)
    if judge_memory and not blocks:
        # ASan's build allocates with malloc, which counts no blocks: said, not judged
        print("memory not judged: sys.getallocatedblocks() is 0 (malloc, as under ASan)",
              file=sys.stderr)
    elif judge_memory and leaked > LEAK_BLOCKS:
        fails.append("%d more live blocks at the end than at the start (a leak)" % leaked)
    return {"kind": "main", "ok": not fails, "failures": fails, "created": LEDGER.created(),
            "recursion_errors": RECURSION_ERRORS[0],
            "callbacks": called, "forks": len(mix.fork_results),
            "left_behind": mix.left_behind, "late": mix.late, "held": mix.held_rounds,
            "seen_late": mix.seen_late,
            "sentinel_rounds": mix.sentinel_rounds,
            "rss_warm_mib": round(warm), "rss_end_mib": round(end), "blocks_left": leaked if blocks else None,
            "brc_stats": stats,
            "counts": dict(mix.counts)}


def sub_run(seed, seconds):
    """Inside a subinterpreter: a small mix of its own, checked there."""
    mix = Mix(seed, seconds, forks=False, sentinel=False, owners=2, droppers=1)
    mix.start()
    mix.stop.wait(seconds)
    hung = mix.finish()
    gc.collect()
    fails = LEDGER.check() + LEDGER.errors + (["threads did not end: %s" % hung] if hung else [])
    if fails:
        raise AssertionError("; ".join(fails))


def child_subinterpreters(seed, seconds, legacy):
    import _interpreters
    code = ("import runpy; runpy.run_path(%r, run_name='mix_sub')['sub_run'](%d, %r)"
            % (HERE, seed, seconds))
    # One: two isolated ones at once, with pauses, cross objects on stock
    # 3.14.7t too (docs/reliability.md); their own checks are reported, not
    # judged, for the same reason.  A hang or a crash is judged.
    ids = [_interpreters.create("legacy" if legacy else "isolated")]
    fails, sub_fails = [], []

    def run_in(iid):
        err = _interpreters.exec(iid, code)
        if err is not None:
            sub_fails.append("subinterpreter %d: %s" % (iid, getattr(err, "formatted", err)))
    threads = [threading.Thread(target=run_in, args=(i,)) for i in ids]
    for t in threads:
        t.start()
    # the main interpreter's mix meanwhile; no fork while subinterpreters run
    # memory not judged: objects cross interpreters here (on stock 3.14.7t too)
    r = child_main(seed, seconds, False, forks=False, judge_memory=False)
    for t in threads:
        t.join(seconds * 2 + 60)
        if t.is_alive():
            fails.append("a subinterpreter's run did not end")
    for i in ids:
        _interpreters.destroy(i)
    r.update(kind="legacy" if legacy else "isolated", ok=r["ok"] and not fails,
             failures=r["failures"] + fails, subinterpreter_failures=sub_fails)
    return r


# -- the re-entered merge's shapes ---------------------------------------------

MAX_MERGE_DEPTH = 4         # Python/brc.c (0010)


def child_reentry(seed):
    patched = hasattr(sys, "_brc_stats")
    n = 20_000 if TSAN else 100_000
    fails, known, shapes = [], [], {}
    for name, callback in (("stream-del", False), ("stream-callback", True)):
        RECURSION_ERRORS[0] = 0
        ended, ran, depth = stream_shape(n, callback, make=Obj)
        shapes[name] = {"objects": n, "finalised": ran, "max_depth": depth,
                        "recursion_errors": RECURSION_ERRORS[0]}
        bad = []
        if ran != n:
            bad.append("%s: %d of %d finalizers never ran (%d RecursionError)"
                       % (name, n - ran, n, RECURSION_ERRORS[0]))
        if patched and depth > MAX_MERGE_DEPTH:
            bad.append("%s: merges nested %d deep" % (name, depth))
        if not ended:
            fails.append("%s: the owner did not end" % name)
        (fails if patched else known).extend(bad)
    # (No chain of permit waits: a waiter parked when the next object is
    # dropped has it freed at the drop, by the dropper, which then waits
    # inside it for the object it has yet to drop, as with the GIL.)
    for chain, permit_wait in ((1, False), (2, False), (1, True)):
        name = "wait-%s-%d" % ("permit" if permit_wait else "poll", chain)
        ended, outcome = waiting_shape(chain, permit_wait)
        shapes[name] = outcome
        if not ended or len(outcome) != chain or not all(o[1] for o in outcome):
            fails.append("%s: a destructor waited in vain for an object of its own "
                         "thread: %s" % (name, outcome))
    return {"kind": "reentry", "ok": not fails, "failures": fails,
            "known_defects": known, "shapes": shapes}


def child_twins(seed):
    n, trials = (2_000, 4) if TSAN else (20_000, 30)
    shapes = twins.run(("swapped", "reused-id"), n, trials)
    fails = twins.failures(shapes)
    return {"kind": "twins", "ok": not fails, "failures": fails, "shapes": shapes}


# -- the supervisor ------------------------------------------------------------

def run_child(kind, seed, seconds, threshold, deadline):
    cmd = [sys.executable, HERE, "--child", kind, "--seed", str(seed), "--seconds", "%g" % seconds]
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_BRC_MERGE_THRESHOLD"}
    if threshold is not None:
        env["PYTHON_BRC_MERGE_THRESHOLD"] = str(threshold)
    replay = "%s%s" % ("PYTHON_BRC_MERGE_THRESHOLD=%s " % threshold if threshold is not None
                       else "", " ".join(cmd))
    # a session of its own: what it forks (and may outlive it, holding its
    # output open) is killed with it
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    t0 = time.monotonic()
    hung = False
    try:
        out, err = p.communicate(timeout=deadline)
    except subprocess.TimeoutExpired:
        hung = True
        sys.stderr.write("%s: %s after %d s; stacks follow\n" % (
            replay, "hung" if p.poll() is None else
            "exited, but a process it forked still runs", deadline))
        for pid in live_group(p.pid):
            dump_and_kill(pid)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = p.communicate()
    r = {"kind": kind, "seed": seed, "threshold": threshold, "seconds": round(
         time.monotonic() - t0, 1), "returncode": p.returncode, "hung": hung, "replay": replay}
    lines = out.strip().splitlines()
    try:
        r.update(json.loads(lines[-1]))
    except (IndexError, ValueError):
        r.setdefault("failures", []).append("no result line on stdout")
    fails = r.setdefault("failures", [])
    # (the unraisable hook may itself hit the recursion limit: count both)
    r["recursion_errors"] = r.get("recursion_errors", 0) + err.count("RecursionError")
    if hung:
        fails.append("did not end within %d s" % deadline)
    if p.returncode != 0:
        fails.append("exit status %s" % p.returncode)
    if "Fatal Python error" in err or "Traceback" in err and kind != "main":
        first = next((ln for ln in err.splitlines()
                      if "Assertion failed" in ln or "Fatal Python error" in ln), "")
        fails.append("stderr has an error" + (": " + first[-200:] if first else ""))
    r["ok"] = not fails
    if fails:
        r["stderr_tail"] = err[-4000:]
        # whole, for the top of a hung thread's C stack that the tail cuts
        fd, r["stderr_file"] = tempfile.mkstemp(prefix="mix-%s-%s-" % (kind, seed),
                                                 suffix=".err")
        with os.fdopen(fd, "w") as f:
            f.write(err)
    return r


def stock_reentry_loss(r):
    """A main run that only lost finalizers, to RecursionError: the
    re-entered merge of stock CPython and of upstream's fix (0010)."""
    lost = ("objects never finalised", "weakref callbacks:")
    # a fork child that lost them exits 1 (seen on ft-upstream, seed 235302526)
    exits = ("exit status 1", "fork child failed: {'ok': False, 'exitcode': 1}")
    return (r["kind"] == "main" and r.get("recursion_errors", 0) > 0 and not r["hung"]
            and r["returncode"] in (0, 1) and r["failures"]
            and all(any(k in f for k in lost) or f in exits
                    for f in r["failures"]))


def supervise(args):
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    patched = hasattr(sys, "_brc_stats")
    thresholds = (1, 0, 7) if patched else (None,)
    main_s = args.seconds * 0.6 / len(thresholds)
    plan = [("main", seed + i, main_s, th, main_s * 3 + 90) for i, th in enumerate(thresholds)]
    plan += [("exit", seed + 10 + i, 1.5, thresholds[0], 30) for i in range(5)]
    plan.append(("reentry", seed + 30, 0, thresholds[0], 240 if TSAN else 120))
    plan.append(("twins", seed + 40, 0, thresholds[0], 240 if TSAN else 120))
    judged = {"isolated": args.judge_subinterpreters or sys.version_info >= (3, 15),
              "legacy": args.judge_subinterpreters}
    # Under TSan a part that is not judged would still count its reports:
    # left out (docs/reliability.md), as stock ft-tsan was not run on them.
    plan += [(kind, seed + 20 + i, args.seconds * 0.15, thresholds[0], args.seconds + 90)
             for i, kind in enumerate(("isolated", "legacy")) if judged[kind] or not TSAN]
    runs = []
    for kind, s, secs, th, deadline in plan:
        r = run_child(kind, s, secs, th, deadline)
        if kind in judged and not judged[kind]:
            r["judged"], r["ok"] = False, True     # stock crashes there too
        if not patched and (stock_reentry_loss(r) or kind == "twins" and r["failures"]):
            r["known_defects"] = r["failures"]
            r["failures"], r["ok"] = [], True
        if r.get("known_defects"):
            r["judged"] = False     # reported with its counts (0010's defect)
        if args.expect_prompt and kind == "main" and th == 1 and r.get("left_behind"):
            r["failures"].append("%d of %d sentinel rounds left objects behind a blocked owner"
                                 " (all freed while it blocked after, in s: %s)"
                                 % (r["left_behind"], r["sentinel_rounds"], r.get("late")))
            r["ok"] = False
        runs.append(r)
        if not args.json:
            print("%-8s seed %-10d threshold %-4s %5.1f s  %s%s" % (
                kind, s, th, r["seconds"], "ok" if r["ok"] else "FAILED: %s" % r["failures"],
                "" if r.get("judged", True) else " (not judged: %s)" % (
                    r["failures"] or r.get("known_defects") or "passed")),
                file=sys.stderr)
    result = {"seed": seed, "ok": all(r["ok"] for r in runs), "runs": runs,
              "python": sys.version, "patched": patched}
    if args.json:
        print(json.dumps(result))
    for r in runs:
        if not r["ok"] and r.get("judged", True):
            print("FAILED %s (seed %d); replay: %s\n%s" % (r["kind"], r["seed"], r["replay"],
                  r.get("stderr_tail", "")), file=sys.stderr)
    return 0 if result["ok"] else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--expect-prompt", action="store_true",
                    help="fail a threshold-1 run whose sentinel found objects left behind")
    ap.add_argument("--judge-subinterpreters", action="store_true",
                    help="judge the subinterpreter parts that stock fails too "
                    "(docs/reliability.md)")
    ap.add_argument("--child", choices=("main", "exit", "reentry", "twins", "isolated",
                                             "legacy"))
    args = ap.parse_args(argv)
    if not args.child:
        return supervise(args)
    import faulthandler                     # not in subinterpreters: main only
    faulthandler.register(signal.SIGUSR2, all_threads=True)
    sys.unraisablehook = count_unraisable
    seed = args.seed if args.seed is not None else 1
    if args.child == "reentry":
        r = child_reentry(seed)
    elif args.child == "twins":
        r = child_twins(seed)
    elif args.child in ("main", "exit"):
        r = child_main(seed, args.seconds, args.child == "exit")
    else:
        r = child_subinterpreters(seed, args.seconds, args.child == "legacy")
    print(json.dumps(r))
    sys.stdout.flush()
    return 0 if r.get("ok", True) else 1


if __name__ == "__main__":
    sys.exit(main())
