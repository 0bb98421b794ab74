#!/usr/bin/env python3
"""Provoke the free-threaded build's optimistic reads of freed objects.

Reader threads load an object from a list item, a dict value, a module
global, an instance attribute and a class attribute while a writer thread
replaces it and frees the old one.  The readers' lock-free paths
(_Py_TryXGetRef(), _Py_TryIncrefCompare(), _Py_TryXGetStackRef(),
_Py_TryIncrefCompareStackRef() in list_get_item_ref(), the dict lookup, the
LOAD_GLOBAL/LOAD_ATTR specializations and the type cache) then read the header
of an object that was freed meanwhile: by design (the increment fails, or the
slot no longer holds the pointer, and they retry).  The writer frees objects
it created itself and allocates nothing of their size in between, so a freed
block stays free (and, under ASan with MI_TRACK_ASAN, poisoned) for a while.

On a stock --with-address-sanitizer build with MI_TRACK_ASAN this reports
use-after-poison in _Py_TryIncrefFast() and _Py_TryIncRefShared(); with the
checking patch (patches/3.14/checking/asan.series) it reports nothing.
tests/regrtest_checks.py asan runs it on the -asan flavours.

    python3 tests/asan/optimistic_reads.py [SECONDS]
"""
import sys
import threading
import time

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
BATCH = 20000


class Holder:
    attr = None

    def __init__(self):
        self.x = None


class Payload:
    pass


G = None
d = {"k": None}
lst = [None]
holder = Holder()
stop = threading.Event()


def writer():
    global G
    end = time.monotonic() + SECONDS
    while time.monotonic() < end:
        objs = [Payload() for _ in range(BATCH)]
        while objs:
            o = objs.pop()
            lst[0] = o
            d["k"] = o
            G = o
            holder.x = o
            Holder.attr = o
            del o
    stop.set()


def reader():
    h = holder
    while not stop.is_set():
        for _ in range(100):
            lst[0]
            d["k"]
            G
            h.x
            Holder.attr


def main():
    threads = [threading.Thread(target=writer)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("optimistic_reads: done")


if __name__ == "__main__":
    main()
