"""PEER: the detach path, threads whose every call detaches and attaches.

The series adds work where a thread state detaches (0004: nothing may stay
queued to an owner that detaches) and where a dropper meets a detached
owner.  CPython's Tools/lockbench runs raw C threads without thread states,
so it never detaches; this does, from Python:

  detach_sleep0   time.sleep(0): one detach and attach around a
                  clock_nanosleep() whose deadline has passed (the
                  thread's timer slack set to 1 ns where Linux allows, or
                  the kernel's 50-us default is most of what is timed)
  detach_read     os.read() of one byte from a pipe that has data (one
                  os.write() refills it every 4096 reads)
  detach_lock     two threads taking one threading.Lock in turn: the
                  loser parks (detaches) until the holder hands it over

Each value is the wall time of THREADS threads making CALLS calls each,
per call.  pyperf Runner script; `--fixed N NAME` instead makes N calls of
detach_sleep0 or detach_read on the main thread, for cachegrind: the
harness subtracts the count of N=0 (start-up) and divides by N to get the
instructions per call, one detach each.
"""

import json
import os
import sys
import threading
import time

import _util as u

THREADS = 2
CALLS = 20000


def no_timer_slack():
    try:
        import ctypes
        ctypes.CDLL(None).prctl(29, 1, 0, 0, 0)    # PR_SET_TIMERSLACK
    except (OSError, AttributeError):
        pass


def sleep0(n, _state):
    no_timer_slack()
    sleep = time.sleep
    for _ in range(n):
        sleep(0)


def read_setup(_n):
    return os.pipe()


def read(n, state):
    r, w = state
    rd = os.read
    while n > 0:
        k = min(n, 4096)
        os.write(w, b"x" * k)
        for _ in range(k):
            rd(r, 1)
        n -= k


LOCK = threading.Lock()


def lock(n, _state):
    with_lock = LOCK
    for _ in range(n):
        with with_lock:
            pass


WORKLOADS = {"detach_sleep0": (sleep0, None),
             "detach_read": (read, read_setup),
             "detach_lock": (lock, None)}


def timed(loops, func, setup):
    """Seconds for `loops` rounds of THREADS threads making CALLS calls,
    divided by CALLS (pyperf divides by loops)."""
    total = 0.0
    for _ in range(loops):
        states = [setup(CALLS) if setup else None for _ in range(THREADS)]
        start = threading.Barrier(THREADS + 1)

        def work(state):
            start.wait()
            func(CALLS, state)
        threads = [threading.Thread(target=work, args=(s,)) for s in states]
        for t in threads:
            t.start()
        start.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        total += time.perf_counter() - t0
        for s in states:
            if s:
                os.close(s[0])
                os.close(s[1])
    return total / CALLS


def fixed(n, name):
    """N calls of one workload on this thread, for an instruction count."""
    func, setup = WORKLOADS[name]
    state = setup(n) if setup else None
    func(n, state)
    print(json.dumps({"calls": n, "workload": name}))


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--fixed":
        fixed(int(sys.argv[2]), sys.argv[3])
        return
    import pyperf

    runner = pyperf.Runner()
    runner.metadata.update(u.interpreter_metadata())    # the round, for ratios
    runner.metadata["threads"] = THREADS
    runner.metadata["calls_per_thread"] = CALLS
    for name, (func, setup) in WORKLOADS.items():
        runner.bench_time_func(name, timed, func, setup)


if __name__ == "__main__":
    main()
