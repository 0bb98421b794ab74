"""Forks and exits while finished asyncio Tasks of a blocked owner are
freed by other threads (the v4 hang of asyncio_tasks_lock).

    python tasks_fork_exit.py fork N     fork N children that exit at once
    python tasks_fork_exit.py exit S     run S seconds as daemons, then exit

An owner thread creates 200 finished Tasks and four lists of 5,000 plain
objects, then blocks in os.read(); two threads free its Tasks one at a time,
two drop its lists (which keeps its BRC bucket busy), and wake it to refill
when they run dry.  "fork" prints one JSON line: the children still alive
after CHILD_DEADLINE seconds (killed, counted as hung).  "exit" prints
nothing; the caller bounds the process with a timeout.
"""

import asyncio
import json
import os
import select
import signal
import sys
import threading
import time
import warnings

CHILD_DEADLINE = 3.0

r, w = os.pipe()
tasks, lists = [], []
wake = threading.Lock()
woken = [False]
dropped = [0]
busy = threading.Event()


async def nothing():
    pass


async def spawn():
    box = [asyncio.ensure_future(nothing()) for _ in range(200)]
    await asyncio.gather(*box)
    return box


def owner():
    while True:
        tasks.extend(asyncio.run(spawn()))
        lists.extend([object() for _ in range(5000)] for _ in range(4))
        woken[0] = False
        os.read(r, 1)


def kick():
    with wake:
        if not woken[0]:
            woken[0] = True
            os.write(w, b"x")


def dropper(box, kick=kick, sleep=time.sleep, dropped=dropped, busy=busy,
            IndexError=IndexError):
    # Locals only: a LOAD_GLOBAL that specializes locks the builtins dict,
    # and a daemon handed that lock while parked hangs the exit on stock
    # 3.14 too (finalize_restore_builtins); see docs/reliability.md.
    while True:
        try:
            box.pop()
        except IndexError:
            kick()
            sleep(0.001)        # back off until the owner has refilled
        else:
            dropped[0] += 1
            if dropped[0] > 1000:
                busy.set()


def fork_children(n):
    warnings.simplefilter("ignore", DeprecationWarning)   # fork with threads
    hung = 0
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        fd = os.pidfd_open(pid)
        if not select.select([fd], [], [], CHILD_DEADLINE)[0]:
            hung += 1
            os.kill(pid, signal.SIGKILL)
        os.close(fd)
        os.waitpid(pid, 0)
    return hung


def main():
    mode, arg = sys.argv[1], sys.argv[2]
    threads = [threading.Thread(target=owner, daemon=True)]
    threads += [threading.Thread(target=dropper, args=(box,), daemon=True)
                for box in (tasks, tasks, lists, lists)]
    for t in threads:
        t.start()
    if not busy.wait(60):
        sys.exit("the droppers never got going")
    if mode == "exit":
        time.sleep(float(arg))
        return
    print(json.dumps({"forks": int(arg), "hung": fork_children(int(arg))}))


if __name__ == "__main__":
    main()
