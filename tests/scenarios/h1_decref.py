"""H1 of docs/upstream.md: finalizers (each running gc.collect()) of a
blocked owner's queued objects, run by whichever decref queues the next
object of that owner -- here a float's, inside BINARY_OP_ADD_FLOAT, a
specialized instruction that does not save its frame's stack pointer.

    python h1_decref.py

Prints one JSON line: where the 200 finalizers ran ("thread at opcode of
the caller") and how many.  On a --with-pydebug build of a design that
frees inside that decref, CPython's own assertion that the stack pointer
was saved before Python code runs aborts the process instead.
"""

import dis
import gc
import json
import sys
import threading

where = {}


class Tracer:
    def __del__(self):
        f = sys._getframe(1)
        op = dis._all_opname[f.f_code._co_code_adaptive[f.f_lasti]]
        key = "%s at %s" % (threading.current_thread().name, op)
        where[key] = where.get(key, 0) + 1
        gc.collect()                        # and a collection there


box, floats = [], []
handed = threading.Event()
state = {"lock": threading.Lock(), "done": False}
state["lock"].acquire()


def owner():
    floats.extend(i + 0.5 for i in range(1000))
    while not state["done"]:
        box.extend(Tracer() for _ in range(2))
        lock = state["lock"]
        handed.set()
        lock.acquire()                      # spins attached, then parks
        lock.release()


def add(xs):
    return xs.pop() + 1.0                   # BINARY_OP_ADD_FLOAT


def main():
    for _ in range(10):
        add([1.5])                          # specialize it
    t = threading.Thread(target=owner, name="owner", daemon=True)
    t.start()
    for i in range(100):
        handed.wait()
        handed.clear()
        box.clear()                         # often while the owner spins
        threading.Event().wait(0.005)       # it parks, the objects queued
        add(floats)                         # queues a float to the owner
        state["done"] = i == 99
        old, state["lock"] = state["lock"], threading.Lock()
        state["lock"].acquire()
        old.release()
    t.join()
    print(json.dumps({"finalizers": where}))


if __name__ == "__main__":
    main()
