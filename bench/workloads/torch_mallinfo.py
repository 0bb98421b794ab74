"""Where a torch job's workers keep their memory: glibc's heap, per sample.

Runs bm_torch_dataloader.py unchanged (same arguments), except that each
worker appends glibc's mallinfo2() and its RssAnon to a log in OUT_DIR
every time the dataset creates a sample (before it creates it), then prints,
per worker, the means over the last three quarters of its samples:

  arena     bytes of the arenas (brk heap and the other threads' heaps)
  mmapped   bytes in mmap()ed chunks (large allocations below glibc's
            dynamic mmap threshold are served from the arenas instead)
  free      bytes free inside the arenas: freed, kept by glibc
  rss_anon  the process's anonymous resident memory

Only the synthetic shapes (repro, current).  Needs torch, like the
benchmark; glibc only.

    python torch_mallinfo.py OUT_DIR [bm_torch_dataloader.py arguments]
    python torch_mallinfo.py --summary OUT_DIR...
"""

import ctypes
import json
import os
import runpy
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
import _torchjob as tj

MiB = 1 << 20
FIELDS = ("arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks "
          "fordblks keepcost").split()


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in FIELDS]


def rss_anon():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


class LoggingSynthetic(tj.Synthetic):
    """tj.Synthetic that logs the worker's heap before each sample.  At
    module level here, so that forkserver workers can unpickle it (the
    parent's sys.path, which has this directory, is passed on)."""

    _libc = None

    def __getitem__(self, i):
        if LoggingSynthetic._libc is None:
            libc = ctypes.CDLL("libc.so.6")
            libc.mallinfo2.restype = MallInfo2
            LoggingSynthetic._libc = libc
        m = LoggingSynthetic._libc.mallinfo2()
        path = os.path.join(os.environ["BRC_MALLINFO_DIR"],
                            "%d.log" % os.getpid())
        with open(path, "a") as f:
            f.write(json.dumps([i, time.monotonic(), m.arena, m.hblkhd,
                                m.fordblks, rss_anon()]) + "\n")
        return super().__getitem__(i)


def summary(out_dir):
    print(out_dir)
    print("  worker  samples  arena  mmapped   free  rss_anon  (MiB)")
    total = 0
    for name in sorted(os.listdir(out_dir)):
        with open(os.path.join(out_dir, name)) as f:
            rows = [json.loads(line) for line in f]
        rows = rows[len(rows) // 4:]
        mean = [sum(r[k] for r in rows) / len(rows) / MiB
                for k in (2, 3, 4, 5)]
        total += mean[3]
        print("  %6s  %7d  %5.0f  %7.0f  %5.0f  %8.0f"
              % (name[:-len(".log")], len(rows), *mean))
    print("  workers' rss_anon, summed: %.0f MiB" % total)


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--summary":
        for out_dir in sys.argv[2:]:
            summary(out_dir)
        return
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out_dir = os.path.abspath(sys.argv[1])
    os.makedirs(out_dir, exist_ok=True)
    if os.listdir(out_dir):
        sys.exit("%s is not empty: give a new directory" % out_dir)
    os.environ["BRC_MALLINFO_DIR"] = out_dir
    # This file again, as a module: the workers unpickle the dataset's class
    # by its module's name, and __main__ is bm_torch_dataloader.py below.
    import torch_mallinfo
    tj.Synthetic = torch_mallinfo.LoggingSynthetic
    sys.argv = [os.path.join(HERE, "bm_torch_dataloader.py")] + sys.argv[2:]
    runpy.run_path(sys.argv[0], run_name="__main__")
    summary(out_dir)


if __name__ == "__main__":
    main()
