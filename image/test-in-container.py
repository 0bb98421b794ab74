"""DataLoader-like check, run by the image's python3 (stdlib only):

    podman run --rm -i IMAGE python3 - < image/test-in-container.py

An owner thread (a loader worker) creates an mmap-backed batch, hands it to
the main thread (the training loop) and blocks on an Event, as an idle worker
blocks on its queue. The main thread drops the batch. With the GC disabled, a
stock free-threaded build frees it only when the owner wakes up; ft-brc frees
it while the owner is still blocked. Prints one JSON line; exit status 0 iff
the batch was freed, by a thread other than the owner, within DEADLINE seconds
while the owner stayed blocked.
"""

import gc
import json
import mmap
import queue
import sys
import threading
import time
import weakref

DEADLINE = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
SIZE = 32 << 20  # 32 MiB batch


class Batch:
    def __init__(self, buf):
        self.buf = buf


def thread_state(native_id):
    """'S' when the thread sleeps in the kernel (detached: blocked in a wait)."""
    try:
        with open("/proc/self/task/%d/stat" % native_id) as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rindex(")") + 2:].split()[0]


def wait_blocked(native_id, timeout=30.0, settle=0.05):
    start = time.monotonic()
    since = None
    while time.monotonic() - start < timeout:
        if thread_state(native_id) == "S":
            since = since or time.monotonic()
            if time.monotonic() - since >= settle:
                return True
        else:
            since = None
        time.sleep(0.001)
    return False


def main():
    gc.disable()
    freed = {}
    freed_event = threading.Event()
    handoff = queue.Queue()
    release = threading.Event()
    owner_awake = threading.Event()

    def on_free(label):
        freed[label] = (threading.current_thread().name, time.monotonic())
        if len(freed) == 2:
            freed_event.set()

    def owner():
        buf = mmap.mmap(-1, SIZE)
        for off in range(0, SIZE, mmap.PAGESIZE):
            buf[off] = 1  # really resident
        batch = Batch(buf)
        weakref.finalize(batch, on_free, "batch")
        weakref.finalize(buf, on_free, "buffer")
        handoff.put(batch)
        del batch, buf  # the main thread now holds the only references
        release.wait()  # blocked, detached, until the main thread lets go
        owner_awake.set()

    t = threading.Thread(target=owner, name="loader-worker")
    t.start()
    batch = handoff.get()
    blocked = wait_blocked(t.native_id)
    batch.buf[0:5] = b"train"  # "use" the batch
    dropped = time.monotonic()
    del batch  # the last reference, dropped by a non-owner thread
    freed_in_time = freed_event.wait(DEADLINE)
    latency = time.monotonic() - dropped
    still_blocked = thread_state(t.native_id) == "S" and not owner_awake.is_set()
    stats = sys._brc_stats() if hasattr(sys, "_brc_stats") else None
    release.set()
    t.join(30)
    freed_event.wait(30)  # held, not leaked: freed at the latest by the owner
    by = sorted({name for name, _ in freed.values()})
    ok = bool(blocked and freed_in_time and still_blocked and by == ["MainThread"])
    print(json.dumps({
        "ok": ok,
        "python": sys.version.split()[0],
        "gil_enabled": sys._is_gil_enabled(),
        "has_brc_stats": stats is not None,
        "owner_blocked_before_drop": blocked,
        "freed_while_blocked": freed_in_time and still_blocked,
        "freed_by": by,
        "free_latency_s": round(latency, 6) if freed_in_time else None,
        "deadline_s": DEADLINE,
        "brc_stats": stats,
    }, sort_keys=True))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
