"""Helpers shared by the bench/workloads/bm_*.py scripts.

These scripts run under the interpreter being measured (dist/<flavour>, in
its bench/.venvs/<flavour> venv with pyperf installed); keep this module
stdlib + pyperf only.
"""

import json
import mmap
import os
import statistics
import sys
import threading
import time

# u.thread_state(), u.brc_stats(): one copy for the bench and the tests
from _probes import brc_stats, thread_state  # noqa: F401

PAGE = mmap.PAGESIZE
MiB = 1 << 20
KNOB = "PYTHON_BRC_MERGE_THRESHOLD"


def median_iqr(ratios):
    """Median, first and third quartile of paired ratios (t1_paired.py; the
    harness's stats.py computes them alike): the quartiles are the values a
    quarter from each end of the sorted list."""
    r = sorted(ratios)
    q = len(r) // 4
    return statistics.median(r), r[q], r[-q - 1]


def rss():
    """Resident set size of this process in bytes (/proc/self/statm)."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * PAGE


def touch(buf, value=1):
    """Write one byte per page so that a mapping is really resident."""
    for off in range(0, len(buf), PAGE):
        buf[off] = value


def fill_pages(buf, value=1):
    """Like touch(), but in C: one strided slice assignment."""
    n = (len(buf) + PAGE - 1) // PAGE
    buf[::PAGE] = bytes([value]) * n


def wait_sleeping(native_ids, timeout=10.0, poll=0.0002):
    """Poll until every thread in native_ids is sleeping in the kernel."""
    deadline = time.monotonic() + timeout
    while True:
        if all(thread_state(n) == "S" for n in native_ids):
            return
        if time.monotonic() > deadline:
            raise RuntimeError("threads %r not blocked after %.1fs"
                               % (native_ids, timeout))
        time.sleep(poll)


class RssSampler(threading.Thread):
    """Samples RSS every `interval` seconds into self.samples [(t, rss)].

    Allocation-light on purpose (one pread per sample on an open fd)."""

    def __init__(self, interval=0.005, t0=None):
        super().__init__(name="rss-sampler", daemon=True)
        self.interval = interval
        self.t0 = time.monotonic() if t0 is None else t0
        self.samples = []
        self._halt = threading.Event()

    def run(self):
        fd = os.open("/proc/self/statm", os.O_RDONLY)
        try:
            while not self._halt.is_set():
                data = os.pread(fd, 128, 0)
                self.samples.append((time.monotonic() - self.t0,
                                     int(data.split()[1]) * PAGE))
                self._halt.wait(self.interval)
        finally:
            os.close(fd)

    def stop(self):
        self._halt.set()
        self.join()


def interpreter_metadata():
    """Extra pyperf metadata naming the flavour and knob in force."""
    md = {}
    gil = getattr(sys, "_is_gil_enabled", None)
    md["gil_enabled"] = str(gil() if gil else True)
    if KNOB in os.environ:
        md["brc_merge_threshold"] = os.environ[KNOB]
    flavour = os.environ.get("BENCH_FLAVOUR")
    if flavour:
        md["bench_config"] = flavour
    if os.environ.get("BENCH_ROUND"):
        # bench/harness/run.py's round number: per-round ratios pair runs by it
        md["bench_round"] = int(os.environ["BENCH_ROUND"])
    return md


def record(filename, name, values, unit="second", extra=None):
    """Append one pyperf run of `values` for benchmark `name` to `filename`
    (created if missing), so that `pyperf compare_to` and `pyperf stats`
    work on measurements we took ourselves (memory, latency)."""
    import pyperf

    md = {"name": name, "unit": unit}
    md.update(interpreter_metadata())
    if extra:
        md.update(extra)
    values = [max(float(v), 1e-12) if unit == "second" else v
              for v in values]
    run = pyperf.Run(values, metadata=md, collect_metadata=True)
    pyperf.add_runs(filename, pyperf.Benchmark([run]))


def write_json(filename, obj):
    tmp = filename + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, filename)
