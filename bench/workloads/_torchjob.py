"""A torch DataLoader job, instrumented: shared by bm_torch_dataloader.py
(the benchmark) and image/torch-check.py (the check inside the torch image).

Runs under the interpreter being measured, with torch and numpy installed.
The datasets live here, at module level, so that forkserver workers (the
default start method on 3.14) can unpickle them.

What is instrumented, without changing what the DataLoader does:

* every batch a worker collates gets a weakref.finalize on its big tensor,
  recording which thread of the worker freed it and when, and a Stamp whose
  __reduce__ records when the data queue's feeder thread pickled it (the
  batch reaches the main process as a plain int);
* each worker runs a "brc-probe" thread, blocked in os.read() on a FIFO
  until the main process asks (probe_workers()); it then writes the worker's
  sys._brc_stats(), thread names and free records as JSON.  It is detached
  the rest of the time and allocates nothing, so it changes neither when the
  worker's objects are merged nor when its garbage collector runs.
"""

import json
import os
import sys
import threading
import time
import weakref

from _util import brc_stats

MiB = 1 << 20

# ---------------------------------------------------------------- datasets


class Synthetic:
    """The original shape: one large flat float32 tensor per sample."""

    key = "img"

    def __init__(self, length, numel, probe_dir=None):
        self.length = length
        self.numel = numel
        self.probe_dir = probe_dir

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        import torch
        img = torch.full((self.numel,), float(i % 251), dtype=torch.float32)
        return {"img": img, "meta": {"index": i, "label": i % 10}}

    def expect(self, first_index):
        return float(first_index % 251)


class Cameras:
    """A multi-camera sample, as a driving or robotics job loads it: one
    frame per camera (cams x 3 x H x W float32) and a dict of numpy
    metadata (calibration, timestamps, boxes)."""

    key = "images"

    def __init__(self, length, cams=6, height=480, width=800,
                 probe_dir=None):
        self.length = length
        self.cams = cams
        self.height = height
        self.width = width
        self.probe_dir = probe_dir

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        import numpy as np
        import torch
        images = torch.full((self.cams, 3, self.height, self.width),
                            float(i % 251), dtype=torch.float32)
        rng = np.random.default_rng(i)
        meta = {
            "intrinsics": rng.random((self.cams, 3, 3), dtype=np.float32),
            "extrinsics": rng.random((self.cams, 4, 4), dtype=np.float32),
            "timestamps": np.arange(self.cams, dtype=np.int64) + 100 * i,
            "boxes": rng.random((32, 7), dtype=np.float32),
            "index": i,
        }
        return {"images": images, "meta": meta}

    def expect(self, first_index):
        return float(first_index % 251)

    def sample_bytes(self):
        return self.cams * 3 * self.height * self.width * 4


# ------------------------------------------------------- worker-side probes

_pickled = {}          # batch id -> time the feeder pickled it
_frees = []            # [batch id, freeing thread, t pickled, t freed]


class Stamp:
    """Rides in the batch; records when the queue's feeder pickles it."""

    def __init__(self, bid):
        self.bid = bid

    def __reduce__(self):
        _pickled[self.bid] = time.monotonic()
        return (int, (self.bid,))


def _freed(bid):
    _frees.append([bid, threading.current_thread().name,
                   _pickled.pop(bid, None), time.monotonic()])


def traced_collate(samples):
    """default_collate (in a worker it collates into shared memory), plus
    the free record and the Stamp."""
    from torch.utils.data import default_collate
    batch = default_collate(samples)
    key = "images" if "images" in batch else "img"
    bid = int(batch["meta"]["index"][0])
    weakref.finalize(batch[key], _freed, bid)
    batch["stamp"] = Stamp(bid)
    return batch


def traced_stack_collate(samples):
    """A user's own collate_fn: torch.stack the big tensors, keep the
    metadata as a list of dicts.  Unlike default_collate in a worker it does
    not allocate the batch in shared memory, so the storages are moved there
    while the data queue's feeder thread pickles the batch (as with
    batch_size=None and a dataset that returns ready batches)."""
    import torch
    key = "images" if "images" in samples[0] else "img"
    bid = int(samples[0]["meta"]["index"])
    batch = {key: torch.stack([s[key] for s in samples]),
             "meta": [s["meta"] for s in samples]}
    weakref.finalize(batch[key], _freed, bid)
    batch["stamp"] = Stamp(bid)
    return batch


COLLATES = {"default": traced_collate, "stack": traced_stack_collate}


def worker_init(worker_id):
    import torch.utils.data
    probe_dir = torch.utils.data.get_worker_info().dataset.probe_dir
    if probe_dir:
        start_probe(probe_dir, worker_id)


def start_probe(probe_dir, worker_id):
    path = os.path.join(probe_dir, "%d.fifo" % os.getpid())
    os.mkfifo(path)
    fd = os.open(path, os.O_RDWR)      # never blocks, keeps the FIFO open

    def serve():
        while True:
            req = os.read(fd, 64)
            if not req:
                return
            report = {
                "seq": int(req.split()[-1]),
                "pid": os.getpid(),
                "worker_id": worker_id,
                "brc": brc_stats(),
                "threads": sorted(t.name for t in threading.enumerate()),
                "frees": list(_frees),
            }
            out = os.path.join(probe_dir, "%d.json" % os.getpid())
            with open(out + ".tmp", "w") as f:
                json.dump(report, f)
            os.replace(out + ".tmp", out)

    threading.Thread(target=serve, name="brc-probe", daemon=True).start()


def probe_workers(probe_dir, seq, timeout=10.0):
    """Ask every worker's probe thread for a report; returns the reports."""
    fifos = [f for f in os.listdir(probe_dir) if f.endswith(".fifo")]
    asked = []
    for name in fifos:
        try:
            fd = os.open(os.path.join(probe_dir, name),
                         os.O_WRONLY | os.O_NONBLOCK)
        except OSError:                 # that worker has exited
            continue
        try:
            os.write(fd, b"%d\n" % seq)
            asked.append(name[:-len(".fifo")])
        finally:
            os.close(fd)
    reports = []
    deadline = time.monotonic() + timeout
    for pid in asked:
        path = os.path.join(probe_dir, pid + ".json")
        while True:
            try:
                with open(path) as f:
                    r = json.load(f)
                if r["seq"] == seq:
                    reports.append(r)
                    break
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("worker %s did not answer the probe" % pid)
            time.sleep(0.01)
    return sorted(reports, key=lambda r: r["worker_id"])


def sum_stats(reports):
    """Summed sys._brc_stats() of the workers (None on builds without it)."""
    stats = [r["brc"] for r in reports if r.get("brc")]
    if not stats:
        return None
    out = {}
    for s in stats:
        for k, v in s.items():
            out[k] = out.get(k, 0) + v
    return out


def free_summary(reports):
    """Per freeing thread: how many batches, and the delay between the
    feeder pickling a batch and the batch being freed (median, max)."""
    by = {}
    for r in reports:
        for bid, thread, t_pickled, t_freed in r["frees"]:
            if t_pickled is None:
                continue
            by.setdefault(thread, []).append(t_freed - t_pickled)
    out = {}
    for thread, d in by.items():
        d.sort()
        out[thread] = {"batches": len(d), "median_ms":
                       round(d[len(d) // 2] * 1e3, 2),
                       "max_ms": round(d[-1] * 1e3, 2)}
    return out


# ----------------------------------------------------------------- the job

def train_step(batch, key, step_s, weight):
    """Stands in for forward/backward: read the whole batch, a few small
    matmuls, then sleep until the step has taken step_s."""
    import torch
    t = time.monotonic()
    x = batch[key]
    feat = float(x.sum())
    for _ in range(8):
        weight = torch.tanh(weight @ weight * 0.01)
    rest = step_s - (time.monotonic() - t)
    if rest > 0:
        time.sleep(rest)
    return feat, weight


def jobmem_sampler(out, interval):
    """Start bench/workloads/_jobmem.py on this process tree (it excludes itself)."""
    import subprocess
    here = os.path.dirname(os.path.abspath(__file__))
    return subprocess.Popen([sys.executable, "-I",
                             os.path.join(here, "_jobmem.py"),
                             str(os.getpid()), out, "--interval",
                             str(interval)], stdin=subprocess.PIPE)
