"""The check inside the torch image (`make image-torch-check`):

    podman run --rm --shm-size=2g -v $PWD/bench:/opt/brc-merge/bench:ro \
        -v $PWD/image/torch-check.py:/opt/brc-merge/torch-check.py:ro \
        brc-merge:3.14.7-ft-brc-torch python3 /opt/brc-merge/torch-check.py

1. the public thread's repro (bench/workloads/bm_torch_dataloader.py --shape repro):
   0 MiB of /dev/shm/torch_* still mapped in the job after the main process
   dropped every batch (and more than 0 while it held the last one, so that
   the measurement is known to see the mappings);
2. a short DataLoader job (the cameras shape at half resolution, 2 workers,
   one epoch of 8 batches): its workers' sys._brc_stats() show
   merged_on_behalf > 0, i.e. the fix was at work.

Prints what it ran and one JSON line; exit status 0 iff both hold.
"""

import json
import os
import subprocess
import sys

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench",
                     "workloads")
SCRIPT = os.path.join(BENCH, "bm_torch_dataloader.py")
MiB = 1 << 20


def run(*args):
    cmd = [sys.executable, SCRIPT] + list(args)
    print("$ " + " ".join(["python3", "bench/workloads/bm_torch_dataloader.py"]
                          + list(args)), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit("torch-check: %s failed (exit %d)"
                         % (" ".join(args), p.returncode))
    lines = p.stdout.strip().splitlines()
    print("  " + "\n  ".join(lines[:-1]), flush=True)
    return json.loads(lines[-1])


def main():
    import torch
    ok = {"gil_disabled": sys._is_gil_enabled() is False,
          "brc_stats": hasattr(sys, "_brc_stats")}
    repro = run("--shape", "repro")
    job = run("--shape", "cameras", "--workers", "2", "--batches", "8",
              "--epochs", "1", "--tail", "1.5", "--height", "240",
              "--width", "400", "--step-ms", "100")
    idle = job["workers_brc"].get("idle") or {}
    # the measurement sees the last batch while the main process holds it
    ok["repro_sees_the_held_batch"] = repro["mapped_while_held"] > 0
    ok["repro_0_mib_after_drop"] = repro["after_drop"]["mapped"] == 0
    ok["epoch_merged_on_behalf"] = idle.get("merged_on_behalf", 0) > 0
    result = {
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "repro_mib_while_held": repro["mapped_while_held"] / MiB,
        "repro_mib_after_drop": repro["after_drop"]["mapped"] / MiB,
        "repro_workers_brc": repro["after_drop"]["workers_brc"],
        "repro_freed_by": repro["after_timeout"]["frees"],
        "epoch_workers_brc": idle,
        "epoch_main_brc": job["main_brc_after"],
        "epoch_job_peak_mib": round(job["job_peak"] / MiB),
        "ok": ok,
    }
    print(json.dumps(result))
    if not all(ok.values()):
        raise SystemExit("torch-check: FAILED: %s"
                         % ", ".join(k for k, v in ok.items() if not v))
    print("torch-check: ok")


if __name__ == "__main__":
    main()
