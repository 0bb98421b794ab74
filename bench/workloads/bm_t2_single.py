"""T2: single-threaded micro-workloads (no cross-thread hand-off at all).

pyperf Runner script.  The patch series only adds work on the enqueue path
of biased reference counting, which a single thread never takes, so ft-brc
must match ft within noise here.  Small stand-ins for pyperformance (which
`make bench` runs in addition):

  t2_nbody        float arithmetic on lists (pyperformance's nbody, shortened)
  t2_dict_str     build/lookup/delete a dict keyed by formatted strings
  t2_alloc        allocate and drop short-lived objects and lists
  t2_recursion    recursive fib (calls, frames, small ints)

Each call takes ~10-30 ms, so bench/harness/run.py runs them with --loops 1 (no
calibration, same work in every configuration).
"""

import _util as u


def nbody(steps=1500):
    bodies = [
        [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], 39.47],
        [[4.84, -1.16, -0.10], [0.60, 2.81, -0.02], 0.037],
        [[8.34, 4.12, -0.40], [-1.01, 1.82, 0.008], 0.011],
        [[12.89, -15.11, -0.22], [1.08, 0.86, -0.01], 0.0017],
        [[15.37, -25.91, 0.17], [0.97, 0.59, -0.03], 0.002],
    ]
    pairs = [(bodies[i], bodies[j]) for i in range(5) for j in range(i + 1, 5)]
    dt = 0.01
    for _ in range(steps):
        for ((r1, v1, m1), (r2, v2, m2)) in pairs:
            dx = r1[0] - r2[0]
            dy = r1[1] - r2[1]
            dz = r1[2] - r2[2]
            mag = dt * ((dx * dx + dy * dy + dz * dz) ** -1.5)
            b1 = m1 * mag
            b2 = m2 * mag
            v1[0] -= dx * b2
            v1[1] -= dy * b2
            v1[2] -= dz * b2
            v2[0] += dx * b1
            v2[1] += dy * b1
            v2[2] += dz * b1
        for (r, v, m) in bodies:
            r[0] += dt * v[0]
            r[1] += dt * v[1]
            r[2] += dt * v[2]
    return bodies[0][0][0]


def dict_str(n=8000):
    d = {}
    for i in range(n):
        d["key-%d-%s" % (i, i * 7)] = i
    total = 0
    for i in range(n):
        total += d["key-%d-%s" % (i, i * 7)]
    for i in range(0, n, 2):
        del d["key-%d-%s" % (i, i * 7)]
    return total + len(d)


class Node:
    __slots__ = ("value", "children")

    def __init__(self, value):
        self.value = value
        self.children = []


def alloc(n=6000):
    total = 0
    for i in range(n):
        node = Node(i)
        node.children = [Node(j) for j in range(4)]
        pair = (node, [i, i + 1], {"i": i})
        total += len(pair[0].children) + len(pair[2])
    return total


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def recursion():
    return fib(24)


def main():
    import pyperf

    runner = pyperf.Runner()
    runner.metadata.update(u.interpreter_metadata())
    runner.bench_func("t2_nbody", nbody)
    runner.bench_func("t2_dict_str", dict_str)
    runner.bench_func("t2_alloc", alloc)
    runner.bench_func("t2_recursion", recursion)


if __name__ == "__main__":
    main()
