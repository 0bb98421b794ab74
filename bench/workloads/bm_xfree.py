"""XFREE: cross-thread frees, the owners blocked or running Python.

OWNERS threads each build a list of OBJECTS two-element lists, then either
block on a threading.Event (detached) or run Python until it is set
(`while not release.is_set(): pass`, attached); the main thread drops
every one of those lists, each owned by another thread:

  xfree_clear          L.clear() of each owner's list, owners blocked
  xfree_pop            `while L: L.pop()`, owners blocked: each popped list
                       dropped by the eval loop, one at a time
  xfree_clear_running  L.clear(), owners running
  xfree_pop_running    the pop loop, owners running

Then it sets the Event and the owners start the next round.  Values are
the time of the drop per dropped object (ROUNDS rounds a loop): wall time
with the owners blocked; with them running, the dropping thread's CPU time
(time.thread_time()), since four spinning owners share the cores with it
and its wall time would mostly be waiting for one.  The items are [None,
None]: immortal, so that only the lists are freed.  gil frees in the drop;
stock ft queues each list to its owner, which frees it at its next
eval-breaker check (a blocked one after it wakes, outside the timing);
ft-upstream and ft-brc free the lists of a blocked owner on its behalf.

pyperf Runner script.  GC is disabled: a collection merges every queue.
`--once` instead times one loop of each without pyperf (a bare build) and
prints ns per object and sys._brc_stats() as JSON.

`--callgrind` counts instead of timing (valgrind, no pyperf): per scenario
{clear, pop} x {owners blocked, running}, one process under callgrind
drops 4 x 3,000 lists, and the JSON line printed gives per dropped object

  instructions        the dropping thread's, inside the C function that
                      drops (--toggle-collect: py_list_clear; for pop
                      builtin_all, which drops what
                      all(map(L.pop, repeat(-1, n))) pops: a Python pop
                      loop's own bytecodes could not be told apart)
  atomics             lock-prefixed instructions and xchg with memory
                      among them (addresses from objdump -d of each object
                      file; callgrind gives object-relative addresses)
  groups              those instructions by function group (GROUPS: each
                      function's self cost, its name matched in order)
  owner_instructions  the owner threads' in _Py_brc_merge_refcounts, a
                      second process (None on gil: there is no queue)
"""

import gc
import itertools
import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time

import _util as u

OWNERS = 4          # owner threads
OBJECTS = 4000      # two-element lists per owner per round
ROUNDS = 4          # rounds per loop


def hold(release, running):
    """An owner's wait while its objects are dropped: blocked in the
    kernel, detached; or running Python, attached, with an eval-breaker
    check every iteration."""
    if not running:
        release.wait()
        return
    while not release.is_set():
        pass


class Owners:
    """The owner threads: every round each builds its list, hands it over
    and holds (blocked or running) until the main thread has dropped it."""

    def __init__(self, running):
        self.running = running
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
            hold(release, self.running)

    def round(self, drop, clock):
        """One round: the time `drop` takes to drop every owner's list."""
        self.release = threading.Event()    # read by the owners after
        self.ready.wait()                   # this barrier
        self.ready.wait()
        if not self.running:
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


_owners = {}        # running -> its Owners


def bench(loops, drop, running, clock):
    owners = _owners.get(running)
    if owners is None:
        owners = _owners[running] = Owners(running)
        owners.round(drop, clock)       # the threads warm up
    total = 0.0
    for _ in range(loops * ROUNDS):
        total += owners.round(drop, clock)
    return total


def once():
    gc.disable()
    out = {}
    for name, drop, running, clock in DROPS:
        bench(1, drop, running, clock)      # the first round of a new drop
        out[name + "_ns"] = round(
            bench(1, drop, running, clock) / (ROUNDS * OWNERS * OBJECTS)
            * 1e9, 1)
    out["brc_stats"] = u.brc_stats()
    print(json.dumps(out))


DROPS = (("xfree_clear", drop_clear, False, time.perf_counter),
         ("xfree_pop", drop_pop, False, time.perf_counter),
         ("xfree_clear_running", drop_clear, True, time.thread_time),
         ("xfree_pop_running", drop_pop, True, time.thread_time))


# --------------------------------------------------------------------------
# --callgrind: instructions and atomics per dropped object

CG_OBJECTS = 3000   # per owner: 12,000 dropped a run, ~5 s under callgrind
SCENARIOS = ("clear_blocked", "clear_running", "pop_blocked", "pop_running")
# the C function inside which the dropping thread drops, per drop
DROPPER = {"clear": "py_list_clear", "pop": "builtin_all"}
OWNER_MERGE = "_Py_brc_merge_refcounts"
# Function groups of the dropping thread's instructions: the first pattern
# that matches a function's name (re.match) takes its self cost.
GROUPS = (
    # the drop's own loop: clear's, or all() calling pop through map()
    ("drop loop", r"py_list_clear|list_clear|builtin_all|map_next"
                  r"|repeat_next|list_pop|list_resize|list_length"
                  r"|cfunction_vectorcall|PyObject_IsTrue|PyLong_AsSsize_t"
                  r"|_PyNumber_Index|_Py_CheckFunctionResult|PyErr_Occurred"
                  r"|__mem(cpy|move)"),
    ("BRC queue/merge", r"_Py_brc_|merge_|try_suspend_owner|find_thread_"
                        r"|get_bucket|owner_detached|wants_merge"
                        r"|help_detached|_Py_ExplicitMergeRefcount"
                        r"|_PyObjectStack"),
    ("suspend/resume, parking lot", r"_PyThreadState_(TrySuspend|Resume)"
                                    r"|_PyParkingLot|_PyMutex|PyMutex"
                                    r"|_PySemaphore|_PyCriticalSection"
                                    r"|pthread_|futex|syscall|sem_"),
    ("refcount", r"_Py_DecRef|_Py_IncRef|Py_DecRef|Py_IncRef"
                 r"|_Py_MergeZeroLocalRefcount"),
    ("dealloc", r"_Py_Dealloc|list_dealloc|PyObject_GC_|_PyObject_GC_"
                r"|_PyTrash"),
    # mimalloc (ft), pymalloc (gil), libc, and ft's delayed frees
    ("allocator", r"_?mi_|.*malloc|.*realloc|.*[Ff]ree|_int_|unlink_chunk"
                  r"|alloc_perturb|_PyMem_|PyMem_|_PyObject_Mi|_Py_qsbr"),
)
OTHER = "other"
# an atomic read-modify-write: a lock prefix, or xchg with a memory
# operand (xchg %ax,%ax is a two-byte nop)
ATOMIC = re.compile(r"lock\b|xchg\s.*\(")
COST_LINE = re.compile(r"[0-9+*-]")
NAME_LINE = re.compile(r"(c?ob|c?fn)=\((\d+)\)(?: (.*))?")


def counted(drop, running, per_owner):
    """The program callgrind runs: OWNERS threads each append per_owner
    lists to one list L and hold; the main thread drops them all inside
    DROPPER[drop], once the owners are surely blocked or running (0.2 s:
    under valgrind one thread runs at a time, and a thread waiting for its
    turn is asleep in the kernel as well).  The owners then run Python
    again (a blocked stock-ft owner merges its queue) before they exit."""
    gc.disable()
    items = []
    ready = threading.Barrier(OWNERS + 1)
    release = threading.Event()

    def own():
        items.extend([[None, None] for _ in range(per_owner)])
        ready.wait()
        hold(release, running)
        ready.wait()

    threads = [threading.Thread(target=own) for _ in range(OWNERS)]
    for t in threads:
        t.start()
    ready.wait()
    time.sleep(0.2)
    n = len(items)
    if drop == "clear":
        items.clear()
    else:   # every [None, None] is true: all() drops each one it pops
        all(map(items.pop, itertools.repeat(-1, n)))
    assert not items
    release.set()
    ready.wait()
    for t in threads:
        t.join()
    print(json.dumps({"objects": n, "brc_stats": u.brc_stats()}))


def read_callgrind(path):
    """A callgrind output file of --dump-instr=yes: its total, the self
    cost of each (object, function) and the cost of each (object,
    address), i.e. how often each instruction ran."""
    names = {"ob": {}, "fn": {}}
    ob = fn = None
    total = 0
    by_fn, by_addr = {}, {}
    addr = 0
    call = False        # the line after calls= is a call's inclusive cost
    with open(path) as f:
        for line in f:
            if COST_LINE.match(line):
                pos = line.split()
                p = pos[0]
                addr = (int(p, 16) if p.startswith("0x") else addr
                        if p == "*" else addr + int(p))
                if call:
                    call = False
                    continue
                cost = int(pos[-1])
                by_fn[ob, fn] = by_fn.get((ob, fn), 0) + cost
                by_addr[ob, addr] = by_addr.get((ob, addr), 0) + cost
            elif line.startswith("calls="):
                call = True
            elif line.startswith(("summary:", "totals:")):
                total = int(line.split()[1])
            else:
                m = NAME_LINE.match(line)
                if m:
                    kind, ref, name = m.groups()
                    table = names[kind.lstrip("c")]
                    if name is not None:
                        table[ref] = name.strip()
                    if kind == "ob":
                        ob = table[ref]
                    elif kind == "fn":
                        fn = table[ref]
    return total, by_fn, by_addr


_atomics = {}       # object file -> addresses of its atomic instructions


def atomic_addresses(obj):
    if obj not in _atomics:
        out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", obj],
                             capture_output=True, text=True, check=True)
        found = set()
        for line in out.stdout.splitlines():
            head, _, insn = line.partition(":\t")
            if insn and ATOMIC.match(insn):
                found.add(int(head, 16))
        _atomics[obj] = found
    return _atomics[obj]


def group_of(fn):
    return next((g for g, pattern in GROUPS if re.match(pattern, fn)), OTHER)


def callgrind_run(valgrind, toggle, drop, running, per_owner, tmp):
    """One process under callgrind; its per-thread output files (thread 1
    first) and the program's JSON line."""
    out = os.path.join(tmp, "%s-%s-%d" % (toggle, drop, running))
    cmd = [valgrind, "--tool=callgrind", "--toggle-collect=" + toggle,
           "--separate-threads=yes", "--fair-sched=yes", "--dump-instr=yes",
           "--callgrind-out-file=%s.%%p" % out, sys.executable,
           os.path.abspath(__file__), "--counted", drop,
           "running" if running else "blocked", str(per_owner)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("callgrind failed (%s):\n%s%s" % (
            " ".join(cmd), p.stdout[-1000:], p.stderr[-2000:]))
    files = sorted(f for f in os.listdir(tmp)
                   if f.startswith(os.path.basename(out) + ".")
                   and re.search(r"-\d+$", f))
    return [os.path.join(tmp, f) for f in files], json.loads(
        p.stdout.strip().splitlines()[-1])


def per_object(value, n):
    return round(value / n, 1)


def callgrind_scenario(valgrind, scenario, per_owner, brc, tmp):
    drop, owners = scenario.split("_")
    running = owners == "running"
    t0 = time.monotonic()
    files, child = callgrind_run(valgrind, DROPPER[drop], drop, running,
                                 per_owner, tmp)
    n = child["objects"]
    total, by_fn, by_addr = read_callgrind(files[0])
    if not total:
        raise SystemExit("callgrind counted nothing inside %s: renamed or "
                         "inlined in this build?" % DROPPER[drop])
    groups = dict.fromkeys([g for g, _ in GROUPS] + [OTHER], 0)
    for (_, fn), cost in by_fn.items():
        groups[group_of(fn or "?")] += cost
    atomics = sum(cost for (ob, addr), cost in by_addr.items()
                  if ob and os.path.exists(ob)
                  and addr in atomic_addresses(ob))
    top = sorted(by_fn.items(), key=lambda kv: -kv[1])[:12]
    out = {"instructions": per_object(total, n),
           "atomics": per_object(atomics, n),
           "groups": {g: per_object(c, n) for g, c in groups.items()},
           "functions": {fn: per_object(c, n) for (_, fn), c in top},
           "owner_instructions": None, "brc_stats": child["brc_stats"]}
    if brc:     # no queue on gil: nothing for an owner to merge
        files, child = callgrind_run(valgrind, OWNER_MERGE, drop, running,
                                     per_owner, tmp)
        out["owner_instructions"] = per_object(
            sum(read_total(f) for f in files[1:]), child["objects"])
    out["seconds"] = round(time.monotonic() - t0, 1)
    return out


def read_total(path):
    with open(path) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    return 0


def callgrind(args):
    import argparse
    ap = argparse.ArgumentParser(prog="bm_xfree.py --callgrind")
    ap.add_argument("--valgrind", default="valgrind")
    ap.add_argument("--objects", type=int, default=CG_OBJECTS,
                    help="lists per owner (default %(default)s)")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    opts = ap.parse_args(args)
    brc = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    version = subprocess.run([opts.valgrind, "--version"],
                             capture_output=True, text=True).stdout.strip()
    result = {"owners": OWNERS, "objects": OWNERS * opts.objects,
              "tool": "%s --tool=callgrind --separate-threads=yes "
                      "--fair-sched=yes --dump-instr=yes" % version,
              "dropper": DROPPER, "owner_merge": OWNER_MERGE,
              "groups": [g for g, _ in GROUPS] + [OTHER], "scenarios": {}}
    with tempfile.TemporaryDirectory(prefix="xfree-cg-") as tmp:
        for scenario in opts.scenarios.split(","):
            result["scenarios"][scenario] = callgrind_scenario(
                opts.valgrind, scenario, opts.objects, brc, tmp)
    print(json.dumps(result))


def main():
    if sys.argv[1:] == ["--once"]:
        once()
        return
    if sys.argv[1:2] == ["--callgrind"]:
        callgrind(sys.argv[2:])
        return
    if sys.argv[1:2] == ["--counted"]:
        drop, owners, per_owner = sys.argv[2:5]
        counted(drop, owners == "running", int(per_owner))
        return
    import pyperf

    gc.disable()
    runner = pyperf.Runner()
    runner.metadata.update(u.interpreter_metadata())
    runner.metadata["xfree_owners"] = OWNERS
    runner.metadata["xfree_objects_per_owner"] = OBJECTS
    for name, drop, running, clock in DROPS:
        runner.bench_time_func(name, bench, drop, running, clock,
                               inner_loops=ROUNDS * OWNERS * OBJECTS)


if __name__ == "__main__":
    main()
