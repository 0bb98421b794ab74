#!/usr/bin/env python3
"""Benchmark orchestrator: `make bench` / `make bench-fast` run this.

Runs under the host venv (.venv, with bench/requirements.txt: pyperf,
matplotlib, pyperformance).  For every flavour in dist/ it makes a venv
bench/.venvs/<flavour> (from dist/<flavour>/bin/python3, with pyperf) and
runs the bench/bm_*.py scripts with it.  A *configuration* is a flavour plus
environment (the ft-brc threshold knob), e.g. ft-brc-t0.  ft-upstream
(stock ft plus patches/<line>/compare/, the backport of the fix upstream
shipped for gh-157838; built on demand: ./build.sh ft-upstream)
runs wherever stock ft runs with threads; it is skipped when not built.

Configurations and benchmarks are interleaved: every round runs every
benchmark group once per configuration, in an order rotated each round, and
all runs of a configuration are appended to <results>/<config>.json (pyperf
JSON), so slow drifts of a noisy machine hit every configuration alike.
Ratios are computed per round and summarised as median [min-max].

    bench/run.py --mode fast|full [--results DIR] [--groups M1,M2,...]
    bench/run.py --report-only DIR        # redo tables, plots, report.md

Groups: M1 (memory), M2 (free latency), T1 (hand-off cost), BURST (a
million objects of a blocked owner dropped at once), T2 (single thread),
CG (callgrind of a tiny T1 workload, full only), T2I (T2 in instructions:
cachegrind on single-threaded pyperformance benchmarks, the gate ft-brc
and threshold 0 <= 1.005 x ft; full only, about 4.5 minutes),
PP (pyperformance, full only), TORCH (full only, opt-in with BENCH_TORCH=1).
T2I counts instructions of single-threaded code, which do not depend on the
machine's load: a run of T2I alone does not wait for a running build.
"""

import argparse
import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
import report  # noqa: E402

KNOB = "PYTHON_BRC_MERGE_THRESHOLD"
FLAVOURS = ("gil", "ft", "ft-brc", "ft-upstream")
VENVS = BENCH / ".venvs"
FLAVOUR_REQUIREMENTS = BENCH / "requirements-flavour.txt"
TORCH_SPEC = os.environ.get("BENCH_TORCH_SPEC", "torch==2.14.1")
TORCH_CHECK = ("import torch, numpy; print('torch', torch.__version__, "
               "'numpy', numpy.__version__)")
TORCH_MIN_FREE_GB = 8
# The TORCH group: (name, bm_torch_dataloader.py arguments, configurations).
# ft-brc-t0 (merging on behalf off: stock behaviour in the patched binary)
# runs the repro too, for its sys._brc_stats(): what stays queued.  The
# -stack variants use a user's collate_fn, so that the queue's feeder thread
# moves each batch to shared memory (see bm_torch_dataloader.py).
TORCH_PLAN = [
    ("repro", ["--shape", "repro"],
     ["gil", "ft", "ft-upstream", "ft-brc", "ft-brc-t0"]),
    ("repro-stack", ["--shape", "repro", "--collate", "stack", "--name",
                     "repro-stack"],
     ["gil", "ft", "ft-upstream", "ft-brc", "ft-brc-t0"]),
    ("current", ["--shape", "current"],
     ["gil", "ft", "ft-upstream", "ft-brc"]),
    ("cam4", ["--shape", "cameras", "--workers", "4", "--name", "cam4"],
     ["gil", "ft", "ft-upstream", "ft-brc"]),
    ("cam8", ["--shape", "cameras", "--workers", "8", "--name", "cam8"],
     ["gil", "ft", "ft-upstream", "ft-brc"]),
    ("cam4-stack", ["--shape", "cameras", "--workers", "4", "--collate",
                    "stack", "--name", "cam4-stack"],
     ["gil", "ft", "ft-upstream", "ft-brc"]),
    # torchrun, 2 DDP ranks (gloo) with 2 persistent workers each
    ("ddp", ["--shape", "ddp"], ["gil", "ft", "ft-upstream", "ft-brc"]),
]

# name -> (flavour, extra environment)
CONFIGS = {
    "gil": ("gil", {}),
    "ft": ("ft", {}),
    "ft-upstream": ("ft-upstream", {}),   # stock ft + upstream's fix
    "ft-brc": ("ft-brc", {}),   # default threshold (1)
    "ft-brc-t0": ("ft-brc", {KNOB: "0"}),
    "ft-brc-t2": ("ft-brc", {KNOB: "2"}),
    "ft-brc-t10": ("ft-brc", {KNOB: "10"}),
    "ft-brc-t100": ("ft-brc", {KNOB: "100"}),
}
FLAVOUR_CONFIGS = ["gil", "ft", "ft-brc"]
# The groups with threads put ft-upstream beside stock ft (single-threaded
# code, T2, T2I and PP, never reaches the code it changes).
M1_CONFIGS = ["gil", "ft", "ft-upstream", "ft-brc"]
M2_CONFIGS = list(M1_CONFIGS)
T1_CONFIGS = ["ft-brc-t0", "ft-brc", "ft-brc-t2", "ft-brc-t10",
              "ft-brc-t100", "ft", "ft-upstream"]
# threshold 0 is stock behaviour in the patched binary
BURST_CONFIGS = ["gil", "ft", "ft-upstream", "ft-brc", "ft-brc-t0"]
T2I_CONFIGS = ["ft", "ft-brc", "ft-brc-t0"]
GROUPS = ["M1", "M2", "T1", "BURST", "T2", "CG", "T2I", "PP", "TORCH"]
# Groups whose results are instruction counts of single-threaded code: they
# do not depend on the load, so a run of only these does not wait for builds.
LOAD_FREE_GROUPS = {"T2I"}



def use_line(line):
    """Point the configurations at the flavours of another line: main has
    main-ft and main-ft-brc (and no GIL build), so "ft" and "ft-brc" (and
    the threshold variants) run CPython main, and "gil" is dropped."""
    global FLAVOURS
    if line == "3.14":
        return
    FLAVOURS = tuple(f"{line}-{f}" for f in FLAVOURS if f != "gil")
    for name, (flavour, extra) in list(CONFIGS.items()):
        if flavour == "gil":
            del CONFIGS[name]
        else:
            CONFIGS[name] = (f"{line}-{flavour}", extra)
    for configs in (FLAVOUR_CONFIGS, M1_CONFIGS, M2_CONFIGS, T1_CONFIGS,
                    BURST_CONFIGS, T2I_CONFIGS):
        configs[:] = [c for c in configs if c in CONFIGS]


# Per-mode settings.  fast: <= 3 minutes on 2 cores with warm venvs.
MODES = {
    "fast": {
        "groups": ["M1", "M2", "T1", "BURST", "T2"],
        "rounds": {"M1": 3, "M2": 3, "T1": 3, "BURST": 3, "T2": 4},
        "m1_args": ["--steps", "8"],
        "m2_args": ["--samples", "30"],
        # stock ft keeps the burst until the timeout in every round
        "burst_args": ["--timeout", "1"],
        "pyperf_args": {"T1": ["-p", "1", "-n", "3", "-w", "1"],
                        "T2": ["-p", "1", "-n", "3", "-w", "1"]},
        "t1_paired_pairs": 60,
        "t1_vs_ft_pairs": 10,
        # t1_vs_ft.py against these (ft-upstream's ~45 s would take fast
        # mode past 3 minutes; its per-round T1 ratios are there)
        "t1_vs": ["ft"],
    },
    "full": {
        "groups": ["M1", "M2", "T1", "BURST", "T2", "CG", "T2I", "PP",
                   "TORCH"],
        "rounds": {"M1": 6, "M2": 4, "T1": 5, "BURST": 5, "T2": 3,
                   "TORCH": 3},
        "m1_args": ["--steps", "20"],
        "m2_args": ["--samples", "60"],
        "burst_args": ["--timeout", "10"],
        "pyperf_args": {"T1": ["-p", "2", "-n", "5", "-w", "1"],
                        "T2": ["-p", "4", "-n", "4", "-w", "1"]},
        # T1 ping-pong and clear paired in one ft-brc process each
        # (t1_paired.py), after T1's rounds: threshold 1 and 0 alternating
        # (~30 s and ~50 s for 300 pairs here).
        "t1_paired_pairs": 300,
        # ... and against stock ft and ft-upstream in pairs of processes
        # (t1_vs_ft.py; against ft ~40 s and ~70 s for 40 pairs).
        "t1_vs_ft_pairs": 40,
        "t1_vs": ["ft", "ft-upstream"],
        "callgrind_n": 100,
        "callgrind_reps": 2,
        "pyperformance": ["nbody", "richards", "float", "deltablue",
                          "generators", "json_dumps"],
        # T2I: the same pyperformance benchmarks but json_dumps (its
        # instructions per loop vary by up to 1.2 % between runs: json's
        # circular-reference check keys a dict by id(), and mimalloc
        # randomises its addresses), with extra arguments for less work
        # per loop; each run as one pyperf worker process under cachegrind
        # with each number of `loops`, in `layouts` memory layouts
        # (_t2i_worker.py), `reps` times; up to `max_layouts` layouts for a
        # benchmark whose ratio to ft is outside [1/1.005, 1.005].
        "t2i": {"benchmarks": ["nbody", "richards", "float", "deltablue",
                               "generators"],
                "args": {"nbody": ["--iterations", "5000"]},
                "loops": [1, 2], "layouts": 2, "max_layouts": 5,
                "reps": 1},
    },
}
GROUP_SCRIPT = {"M1": "bm_m1_memory.py", "M2": "bm_m2_latency.py",
                "T1": "bm_t1_handoff.py", "T2": "bm_t2_single.py",
                "BURST": "bm_burst.py",
                "TORCH": "bm_torch_dataloader.py"}


def log(msg):
    print("[bench %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


# --------------------------------------------------------------------------
# environment

def dist_dir():
    return Path(os.environ.get("BRC_MERGE_DIST") or ROOT / "dist")


def dist_python(flavour):
    py = dist_dir() / flavour / "bin" / "python3"
    return py if py.exists() and os.access(py, os.X_OK) else None


def running_builds():
    """Command lines of running `make -jN` / build.sh processes (a CPython
    build on 2 cores would corrupt every timing)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        argv = [a.decode(errors="replace") for a in argv if a]
        if not argv:
            continue
        prog = os.path.basename(argv[0])
        if prog == "make" and any(a.startswith("-j") for a in argv[1:]):
            found.append(" ".join(argv))
        elif any(os.path.basename(a) == "build.sh" for a in argv[:2]) \
                and "--print-config" not in argv and "--help" not in argv:
            found.append(" ".join(argv))
    return found


def wait_for_builds(max_wait):
    start = time.monotonic()
    announced = False
    while True:
        builds = running_builds()
        if not builds:
            return
        if not announced:
            log("a build is running; waiting (timings would be "
                "meaningless):\n    " + "\n    ".join(builds[:3]))
            announced = True
        if time.monotonic() - start > max_wait:
            sys.exit("bench: a build is still running after %ds; giving up"
                     % max_wait)
        time.sleep(10)


def clean_env(extra=None):
    """os.environ without PYTHON* (PYTHON_GIL, PYTHONPATH, the knob...)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.pop("VIRTUAL_ENV", None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra or {})
    return env


def ensure_venv(flavour):
    """bench/.venvs/<flavour> with pyperf; recreated when the interpreter
    changed (new build) or the requirements changed."""
    base = dist_python(flavour)
    venv = VENVS / flavour
    py = venv / "bin" / "python"
    stamp = venv / ".bench-stamp"
    ident = subprocess.run([str(base), "-VV"], capture_output=True,
                           text=True, check=True).stdout.strip()
    key_file = dist_dir() / flavour / ".brc-merge-key"
    want = "\n".join([
        ident, str(base.resolve()),
        key_file.read_text() if key_file.exists() else "",
        FLAVOUR_REQUIREMENTS.read_text()])
    if py.exists() and stamp.exists() and stamp.read_text() == want:
        return py
    log("creating %s (%s)" % (venv.relative_to(ROOT), ident.splitlines()[0]))
    subprocess.run([str(base), "-m", "venv", "--clear", str(venv)],
                   check=True, env=clean_env())
    subprocess.run([str(py), "-m", "pip", "install", "-q",
                    "--disable-pip-version-check", "-r",
                    str(FLAVOUR_REQUIREMENTS)], check=True, env=clean_env())
    stamp.write_text(want)
    return py


# --------------------------------------------------------------------------
# running

class Bench:
    def __init__(self, mode, results, groups, rounds_override=None):
        self.mode = mode
        self.cfg = MODES[mode]
        self.results = results
        self.groups = groups
        self.rounds_override = rounds_override
        self.pythons = {}
        self.skipped = {}          # group/config -> reason
        self.timings = {}          # group -> seconds
        self.info = {"mode": mode, "groups": groups, "started":
                     datetime.datetime.now().isoformat(timespec="seconds")}

    def rounds(self, group):
        if self.rounds_override:
            return self.rounds_override
        return self.cfg["rounds"].get(group, 1)

    def available(self, configs):
        return [c for c in configs if CONFIGS[c][0] in self.pythons]

    def env_for(self, config, round_no):
        flavour, extra = CONFIGS[config]
        env = clean_env(extra)
        env["BENCH_FLAVOUR"] = config
        env["BENCH_ROUND"] = str(round_no)
        return env

    def out(self, config):
        return self.results / (config + ".json")

    def run_script(self, group, config, round_no, extra=(), label=None):
        flavour, _ = CONFIGS[config]
        py = self.pythons[flavour]
        script = BENCH / GROUP_SCRIPT[group]
        cmd = [str(py), str(script)]
        if group == "M1":
            tl = self.results / "timelines" / ("m1_%s.json" % config)
            cmd += ["-o", str(self.out(config)), "--timeline", str(tl)]
            cmd += self.cfg["m1_args"]
        elif group == "M2":
            cmd += ["-o", str(self.out(config))] + self.cfg["m2_args"]
        elif group == "BURST":          # JSON lines, one per variant
            cmd += ["-o", str(self.results / "burst" / (config + ".jsonl"))]
            cmd += self.cfg["burst_args"]
        elif group == "TORCH":
            cmd += ["-o", str(self.out(config))] + list(extra)
        else:
            cmd += ["--append", str(self.out(config)), "--loops", "1",
                    "--quiet", "--inherit-environ",
                    ",".join([KNOB, "BENCH_FLAVOUR",
                              "BENCH_ROUND"])]
            cmd += self.cfg["pyperf_args"][group]
        t = time.monotonic()
        try:
            # a DataLoader can hang (a worker killed by the OOM killer...)
            proc = subprocess.run(cmd, env=self.env_for(config, round_no),
                                  cwd=str(self.results), capture_output=True,
                                  text=True,
                                  timeout=600 if group == "TORCH" else None)
        except subprocess.TimeoutExpired:
            raise SystemExit("bench: %s timed out after 600 s for %s"
                             % (script.name, config))
        lines = proc.stdout.rstrip("\n").split("\n")
        if group == "TORCH":            # the last line is a JSON summary
            lines = lines[:-1]
        summary = " ".join(lines[-3:]).strip()
        log("%-5s r%d %-12s %5.1fs  %s" % (label or group, round_no, config,
                                           time.monotonic() - t,
                                           summary[:110]))
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout + proc.stderr)
            raise SystemExit("bench: %s failed for %s (exit %d)"
                             % (script.name, config, proc.returncode))

    def check_knob(self):
        """Ask each ft-brc configuration which threshold it
        really runs with (_testinternalcapi probes from the patch series)."""
        seen = {}
        for config, (flavour, _) in CONFIGS.items():
            if not flavour.endswith("ft-brc") or flavour not in self.pythons:
                continue
            code = ("import _testinternalcapi as t;"
                    "print(t.set_brc_merge_threshold(-1))")
            p = subprocess.run([str(self.pythons[flavour]), "-c", code],
                               env=self.env_for(config, 0),
                               capture_output=True, text=True)
            seen[config] = (p.stdout.strip() if p.returncode == 0
                            else "probe unavailable")
        self.info["knob_check"] = seen
        log("threshold in force: %s" % seen)

    # -- valgrind (CG, T2I) -----------------------------------------------

    def valgrind(self, group):
        """Path of valgrind, installed with apt-get if missing and we are
        root; None (and the group marked skipped) if there is none."""
        valgrind = shutil.which("valgrind")
        if not valgrind and os.geteuid() == 0 and shutil.which("apt-get"):
            log("installing valgrind")
            subprocess.run(["apt-get", "install", "-y", "-q", "valgrind"],
                           capture_output=True)
            valgrind = shutil.which("valgrind")
        if not valgrind:
            self.skipped[group] = ("valgrind not installed (apt-get install "
                                   "valgrind)")
        return valgrind

    @staticmethod
    def two_at_a_time(jobs, cwd=None):
        """Run jobs (key, cmd, env), two at a time (instruction counts do
        not depend on load); yield (key, returncode, stdout, stderr,
        seconds) as each finishes.  Output goes to temporary files, so a
        chatty job cannot block on a full pipe.  Jobs still running when
        the caller stops (an error) are killed."""
        jobs = list(jobs)
        running = []
        try:
            while jobs or running:
                while jobs and len(running) < 2:
                    key, cmd, env = jobs.pop(0)
                    out = tempfile.TemporaryFile("w+")
                    err = tempfile.TemporaryFile("w+")
                    p = subprocess.Popen(cmd, env=env, stdout=out,
                                         stderr=err, cwd=cwd)
                    running.append((key, p, out, err, time.monotonic()))
                done = [j for j in running if j[1].poll() is not None]
                if not done:
                    time.sleep(0.05)
                    continue
                for job in done:
                    running.remove(job)
                    key, p, out, err, t = job
                    texts = []
                    for f in (out, err):
                        f.seek(0)
                        texts.append(f.read())
                        f.close()
                    yield key, p.returncode, texts[0], texts[1], \
                        time.monotonic() - t
        finally:
            for _, p, out, err, _ in running:
                p.kill()
                p.wait()
                out.close()
                err.close()

    # -- callgrind --------------------------------------------------------

    def run_callgrind(self):
        valgrind = self.valgrind("CG")
        if not valgrind:
            return
        configs = self.available(T1_CONFIGS)
        n = self.cfg["callgrind_n"]
        jobs = []
        for config in configs:
            py = self.pythons[CONFIGS[config][0]]
            for size in [0] + [n] * self.cfg["callgrind_reps"]:
                cmd = [valgrind, "--tool=callgrind",
                       "--callgrind-out-file=/dev/null", "--fair-sched=yes",
                       str(py), str(BENCH / "bm_t1_handoff.py"), "--fixed",
                       str(size)]
                jobs.append(((config, size), cmd, self.env_for(config, 0)))
        counts = {}
        stats = {}
        for (config, size), rc, out, err, _ in self.two_at_a_time(jobs):
            m = re.search(r"Collected\s*:\s*(\d+)", err)
            if rc != 0 or not m:
                raise SystemExit("callgrind failed for %s:\n%s"
                                 % (config, err[-2000:]))
            counts.setdefault(config, {}).setdefault(size, []).append(
                int(m.group(1)))
            if size:
                st = json.loads(out.strip().splitlines()[-1])["brc_stats"]
                stats.setdefault(config, []).append(st)
            log("CG    %-12s n=%-4d %d instructions" % (config, size,
                                                       int(m.group(1))))
        result = {"n": n, "workload": "bm_t1_handoff.py --fixed N: N "
                  "ping-pong round trips of 8 objects each way + one clear "
                  "of 2 x 5N objects owned by threads blocked on a Barrier "
                  "(droppers sleep first so that owners are detached even "
                  "under valgrind); instructions of N minus those of N=0 "
                  "(startup)", "counts": counts, "brc_stats": stats}
        (self.results / "callgrind.json").write_text(json.dumps(result,
                                                                indent=1))

    # -- T2 in instructions -----------------------------------------------

    def run_t2i(self):
        """T2I: instructions per loop of single-threaded pyperformance
        benchmarks, counted by cachegrind (--cache-sim=no: it only counts
        instructions; 1.7x faster than callgrind).

        Each benchmark script runs as one pyperf worker process (no
        calibration, no child processes) through _t2i_worker.py, which
        disables the cyclic GC (the free-threaded GC decides from the
        process's RSS when to collect, which is not reproducible), with
        PYTHONHASHSEED=0, once with loops[0] and once with loops[1] loops;
        the difference divided by the difference in loops cancels startup,
        imports, the first loop's specialisation and pyperf's metadata.

        Beyond that the counts depend on the memory layout: e.g. richards
        runs 1.6-2.2 % more instructions per loop in some processes whose
        environment is a few bytes longer or shorter, in ft as in ft-brc
        (two hot names collide in the type attribute cache, whose index
        mixes the name's address).  So every measurement runs in `layouts`
        layouts (BENCH_T2I_LAYOUT=i:<24*i bytes>: a longer environment and
        i more objects of each small size on the heap), `reps` times each;
        the report compares the smallest per-loop count of each
        configuration.  While that ratio to ft is outside [1/1.005, 1.005]
        for a benchmark, it runs in one more layout, up to `max_layouts`
        (so a failure of the gate is confirmed in several layouts).  The
        runs get a fixed environment, not the caller's, and run in bench/,
        so that a layout is the same from one invocation to the next.
        -> callgrind_t2.json
        """
        settings = dict(MODES["full"]["t2i"])
        settings.update(self.cfg.get("t2i") or {})
        valgrind = self.valgrind("T2I")
        if not valgrind:
            return
        try:
            import pyperformance
        except ImportError:
            self.skipped["T2I"] = ("pyperformance is not installed in the "
                                   "host venv (bench/requirements.txt)")
            return
        bmdir = Path(pyperformance.__file__).parent / "data-files" / \
            "benchmarks"
        configs = self.available(T2I_CONFIGS)
        if "ft" not in configs or len(configs) < 2:
            self.skipped["T2I"] = "needs ft and ft-brc built"
            return
        names = []
        for name in settings["benchmarks"]:
            if (bmdir / ("bm_" + name) / "run_benchmark.py").exists():
                names.append(name)
            else:
                self.skipped["T2I/" + name] = ("no %s/bm_%s/run_benchmark.py"
                                               % (bmdir, name))
        loops, reps = settings["loops"], settings["reps"]
        version = subprocess.run([valgrind, "--version"], capture_output=True,
                                 text=True).stdout.strip()
        tool = [valgrind, "--tool=cachegrind", "--cache-sim=no",
                "--cachegrind-out-file=/dev/null"]
        worker = ["--worker", "--loops", "{loops}", "--values", "1",
                  "--warmups", "0"]
        runs = {name: [] for name in names}     # name -> [{layout, rep}]
        counts = {c: {name: {str(n): [] for n in loops} for name in names}
                  for c in configs}
        result = {
            "workload": "pyperformance bm_<name>/run_benchmark.py as one "
                        "pyperf worker process, cyclic GC disabled "
                        "(bench/_t2i_worker.py); instructions per loop = "
                        "(I(loops=%d) - I(loops=%d)) / %d, per run"
                        % (loops[1], loops[0], loops[1] - loops[0]),
            "tool": "%s (%s)" % (" ".join(["valgrind"] + tool[1:]), version),
            "command": "python _t2i_worker.py run_benchmark.py "
                       + " ".join(worker),
            "args": {k: v for k, v in settings["args"].items()
                     if k in names},
            "env": "only HOME, LANG=C.UTF-8, PYTHONDONTWRITEBYTECODE=1, "
                   "PYTHONHASHSEED=0, BENCH_T2I_LAYOUT=i:<24*i x's> and the "
                   "configuration's threshold; cwd bench/",
            "pyperformance": getattr(pyperformance, "__version__", "?"),
            "loops": loops, "layouts": settings["layouts"],
            "max_layouts": settings["max_layouts"], "reps": reps,
            "benchmarks": names, "configs": configs, "runs": runs,
            "counts": counts,
        }
        seconds = {}
        t0 = time.monotonic()
        todo = {name: list(range(settings["layouts"])) for name in names}
        def job(config, name, layout, n):
            """(command, environment) of one cachegrind run."""
            flavour, extra = CONFIGS[config]
            # A fixed environment (the layout depends on its size), not
            # the caller's.
            env = {"HOME": os.environ.get("HOME", "/"), "LANG": "C.UTF-8",
                   "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
                   "BENCH_T2I_LAYOUT": "%d:%s" % (layout, "x" * (24 * layout))}
            env.update(extra)
            cmd = tool + [str(self.pythons[flavour]),
                          str(BENCH / "_t2i_worker.py"),
                          str(bmdir / ("bm_" + name) / "run_benchmark.py")]
            cmd += [a.format(loops=n) for a in worker]
            cmd += settings["args"].get(name, [])
            return cmd, env

        while todo:
            jobs = []
            for name, layouts in todo.items():
                for r in range(reps):
                    for layout in layouts:
                        i = len(runs[name])
                        runs[name].append({"layout": layout, "rep": r})
                        for config in configs:
                            for n in loops:
                                counts[config][name][str(n)].append(None)
                                jobs.append(((config, name, n, i),
                                             *job(config, name, layout, n)))
            log("T2I   %d cachegrind runs: %s x %s x loops %s x %d, "
                "two at a time" % (
                    len(jobs), ",".join(configs), "; ".join(
                        "%s layout %s" % (name, ",".join(map(str, ls)))
                        for name, ls in todo.items()),
                    "/".join(map(str, loops)), reps))
            for (config, name, n, i), rc, out, err, sec in \
                    self.two_at_a_time(jobs, cwd=BENCH):
                m = re.search(r"I\s+refs:\s*([\d,]+)", err)
                if rc != 0 or not m:
                    raise SystemExit("T2I: cachegrind failed for %s %s:\n%s%s"
                                     % (config, name, out[-1000:],
                                        err[-2000:]))
                count = int(m.group(1).replace(",", ""))
                counts[config][name][str(n)][i] = count
                seconds.setdefault(config, {}).setdefault(name, 0.0)
                seconds[config][name] += sec
                log("T2I   %-10s %-11s loops=%d layout=%d rep=%d %14d "
                    "instructions %5.1fs" % (
                        config, name, n, runs[name][i]["layout"],
                        runs[name][i]["rep"], count, sec))
            # Another layout for a benchmark whose gated ratio (smallest
            # counts) is outside [1/goal, goal] in some configuration:
            # confirm that it is not one unlucky layout.
            todo = {}
            for name in names:
                ref = min(report.t2i_per_loop(result, "ft", name))
                out = [c for c in configs if c != "ft" and not (
                    1 / report.GOAL_T2I <= min(report.t2i_per_loop(
                        result, c, name)) / ref <= report.GOAL_T2I)]
                done = len({x["layout"] for x in runs[name]})
                if out and done < settings["max_layouts"]:
                    todo[name] = [done]
                    log("T2I   %s: %s outside [%.4f, %.4f] x ft: one more "
                        "layout" % (name, ", ".join(out),
                                    1 / report.GOAL_T2I, report.GOAL_T2I))
        result["seconds"] = {c: {k: round(v, 1) for k, v in d.items()}
                             for c, d in seconds.items()}
        result["wall_s"] = round(time.monotonic() - t0, 1)
        (self.results / "callgrind_t2.json").write_text(
            json.dumps(result, indent=1))

    # -- pyperformance ----------------------------------------------------

    def run_pyperformance(self):
        names = self.cfg["pyperformance"]
        pyperformance = Path(sys.executable).parent / "pyperformance"
        if not pyperformance.exists():
            self.skipped["PP"] = "pyperformance is not installed in the host venv"
            return
        workdir = VENVS / "pyperformance"
        workdir.mkdir(parents=True, exist_ok=True)
        outdir = self.results / "pyperformance"
        outdir.mkdir(exist_ok=True)
        for flavour in [f for f in FLAVOUR_CONFIGS if f in self.pythons]:
            base = dist_python(flavour)
            out = outdir / (flavour + ".json")
            cmd = [str(pyperformance), "run", "--fast", "--timeout", "600",
                   "--python", str(base),
                   "-b", ",".join(names), "-o", str(out)]
            t = time.monotonic()
            p = subprocess.run(cmd, cwd=str(workdir), env=clean_env(),
                               capture_output=True, text=True)
            (outdir / (flavour + ".log")).write_text(p.stdout + p.stderr)
            log("PP    %-12s %5.1fs exit %d" % (flavour, time.monotonic() - t,
                                               p.returncode))
            if p.returncode != 0 or not out.exists():
                tail = "\n".join((p.stdout + p.stderr).splitlines()[-5:])
                self.skipped["PP/" + flavour] = (
                    "pyperformance failed (see pyperformance/%s.log): %s"
                    % (flavour, tail))

    # -- torch ------------------------------------------------------------

    def torch_ready(self, flavour):
        """Install TORCH_SPEC + numpy into the flavour's bench venv unless
        they import; returns None or why not."""
        py = self.pythons[flavour]
        venv = VENVS / flavour
        check = subprocess.run([str(py), "-c", TORCH_CHECK], env=clean_env(),
                               capture_output=True, text=True)
        if check.returncode == 0:
            log("TORCH %s: %s already in %s" % (flavour, check.stdout.strip(),
                                                venv.relative_to(ROOT)))
            return None
        free = shutil.disk_usage(VENVS).free / 1e9
        if free < TORCH_MIN_FREE_GB:
            return ("only %.1f GB free under %s; installing %s needs about "
                    "%d GB per flavour venv" % (free, VENVS, TORCH_SPEC,
                                                TORCH_MIN_FREE_GB))
        log("TORCH %s: installing %s + numpy into %s with that venv's pip "
            "(your pip configuration: index, find-links). The wheels are "
            "about 3 GB per ABI (cp314 for gil, cp314t for free-threading; "
            "downloaded once into pip's cache), installed about 5 GB per "
            "venv; %.0f GB free. Takes 1-5 minutes."
            % (flavour, TORCH_SPEC, venv.relative_to(ROOT), free))
        logfile = self.results / ("torch-install-%s.log" % flavour)
        t = time.monotonic()
        with open(logfile, "w") as f:
            p = subprocess.run([str(py), "-m", "pip", "install",
                                "--disable-pip-version-check",
                                "--progress-bar", "off", TORCH_SPEC, "numpy"],
                               stdout=f, stderr=subprocess.STDOUT,
                               env=clean_env())
        if p.returncode != 0:
            tail = " ".join(logfile.read_text().split()[-40:])
            return "pip install %s failed (%s): %s" % (
                TORCH_SPEC, logfile.name, tail)
        size = subprocess.run(["du", "-sh", str(venv)], capture_output=True,
                              text=True).stdout.split("\t")[0]
        log("TORCH %s: installed in %.0fs; %s is now %s"
            % (flavour, time.monotonic() - t, venv.relative_to(ROOT), size))
        return None

    def run_torch(self):
        if os.environ.get("BENCH_TORCH") not in ("1", "yes", "true"):
            self.skipped["TORCH"] = (
                "opt-in: `make bench-torch` or BENCH_TORCH=1 (installs %s "
                "into each flavour's bench venv, about 5 GB each; never in "
                "bench-fast/CI)" % TORCH_SPEC)
            return
        ok = []
        flavours = {CONFIGS[c][0]: None for _, _, configs in TORCH_PLAN
                    for c in configs if c in CONFIGS}   # ordered, unique
        for flavour in [f for f in flavours if f in self.pythons]:
            why = self.torch_ready(flavour)
            if why:
                self.skipped["TORCH/" + flavour] = why
                log("TORCH %s: skipped: %s" % (flavour, why))
            else:
                ok.append(flavour)
        if not ok:
            self.skipped.setdefault("TORCH", "torch could not be installed "
                                    "for any flavour")
            return
        wait_for_builds(3600)
        self.info["torch_plan"] = [[n, a] for n, a, _ in TORCH_PLAN]
        rounds = self.rounds("TORCH")
        log("TORCH: %d rounds of %s on %s (about 6 minutes per round on 2 "
            "cores)"
            % (rounds, ", ".join(n for n, _, _ in TORCH_PLAN), ", ".join(ok)))
        for r in range(rounds):
            for name, args, configs in TORCH_PLAN:
                configs = [c for c in configs
                           if c in CONFIGS and CONFIGS[c][0] in ok]
                if not configs:
                    continue
                k = r % len(configs)
                for config in configs[k:] + configs[:k]:
                    tl = self.results / "timelines" / (
                        "torch_%s_%s_r%d.json" % (name, config, r))
                    self.run_script("TORCH", config, r,
                                    args + ["--timeline", str(tl)],
                                    label="T:" + name)

    def run_tool(self, label, cmd):
        """Run one of bench/'s standalone measurements; log its output."""
        t = time.monotonic()
        proc = subprocess.run(cmd, env=clean_env(), cwd=str(self.results),
                              capture_output=True, text=True)
        log("T1P   %-12s %5.1fs  %s" % (label, time.monotonic() - t,
                                        proc.stdout.strip()[:110]))
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout + proc.stderr)
            raise SystemExit("bench: %s failed for %s (exit %d)"
                             % (Path(cmd[1]).name, label, proc.returncode))

    def run_t1_paired(self):
        """T1 ping-pong and clear, threshold 1 against 0 alternating in one
        ft-brc process (bench/t1_paired.py), and ft-brc against stock ft and
        ft-upstream in alternating processes (bench/t1_vs_ft.py): the rounds
        above move by +-30 % on this VM, more than the 2 % goal."""
        flavour = CONFIGS["ft-brc"][0]
        if flavour not in self.pythons:
            self.skipped["T1P"] = "needs ft-brc built"
            return
        pairs = self.cfg.get("t1_paired_pairs", 60)
        # Blocks of 300 ping-pong round trips (~35 ms) or 40 clear rounds
        # (~85 ms).
        for workload, block, out in (("pingpong", 300, "t1_paired.json"),
                                     ("clear", 40, "t1_paired_clear.json")):
            self.run_tool(workload, [
                str(self.pythons[flavour]), str(BENCH / "t1_paired.py"),
                "--workload", workload, "--round-trips", str(block),
                "--pairs", str(pairs), "--json", str(self.results / out)])
        for against in ("ft", "ft-upstream"):
            if against not in self.cfg["t1_vs"]:
                self.skipped["T1P/" + against] = "full `make bench` only"
                continue
            if CONFIGS[against][0] not in self.pythons:
                self.skipped["T1P/" + against] = "needs %s built" % against
                continue
            # t1_vs_ft.json, t1_vs_ft_clear.json, t1_vs_ft-upstream.json...
            for workload, suffix in (("pingpong", ""), ("clear", "_clear")):
                self.run_tool(workload + "/" + against, [
                    sys.executable, str(BENCH / "t1_vs_ft.py"),
                    "--workload", workload,
                    "--pairs", str(self.cfg.get("t1_vs_ft_pairs", 10)),
                    "--python", str(self.pythons[flavour]),
                    "--against", str(self.pythons[CONFIGS[against][0]]),
                    "--json", str(self.results / ("t1_vs_%s%s.json"
                                                  % (against, suffix)))])

    # -- main -------------------------------------------------------------

    def run(self):
        for flavour in FLAVOURS:
            if dist_python(flavour):
                self.pythons[flavour] = ensure_venv(flavour)
            else:
                self.skipped[flavour] = ("not built (%s/%s/bin/python3 "
                                         "missing; ./build.sh %s)"
                                         % (dist_dir(), flavour, flavour))
                log("skipping flavour %s: not built" % flavour)
        for sub in ("timelines", "burst"):
            (self.results / sub).mkdir(parents=True, exist_ok=True)
        self.check_knob()
        plan = [("M1", M1_CONFIGS), ("M2", M2_CONFIGS), ("T1", T1_CONFIGS),
                ("BURST", BURST_CONFIGS), ("T2", FLAVOUR_CONFIGS)]
        # Interleave: round r of every group before round r+1 of any.
        timed = [(g, c) for g, c in plan if g in self.groups]
        max_rounds = max([self.rounds(g) for g, _ in timed] or [0])
        for r in range(max_rounds):
            for group, configs in timed:
                if r >= self.rounds(group):
                    continue
                configs = self.available(configs)
                if not configs:
                    self.skipped[group] = "no interpreter built for it"
                    continue
                t = time.monotonic()
                k = r % len(configs)
                for config in configs[k:] + configs[:k]:
                    self.run_script(group, config, r)
                self.timings[group] = (self.timings.get(group, 0)
                                       + time.monotonic() - t)
        if "T1" in self.groups:
            t = time.monotonic()
            self.run_t1_paired()
            self.timings["T1"] = (self.timings.get("T1", 0)
                                  + time.monotonic() - t)
        for group, fn in (("CG", self.run_callgrind),
                          ("T2I", self.run_t2i),
                          ("PP", self.run_pyperformance),
                          ("TORCH", self.run_torch)):
            if group in self.groups:
                t = time.monotonic()
                fn()
                self.timings[group] = time.monotonic() - t


def machine_info():
    def sh(*cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True,
                                  cwd=str(ROOT)).stdout.strip()
        except OSError:
            return ""
    cpu = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = ""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal"):
                mem = "%.1f GiB" % (int(line.split()[1]) / 1048576)
    def series_hashes(series_file):
        """sha256 of a series file and its patches, and of each patch."""
        h = hashlib.sha256(series_file.read_bytes())
        per_patch = {}
        for line in series_file.read_text().splitlines():
            name = line.strip()
            if name and not name.startswith("#"):
                data = (series_file.parent / name).read_bytes()
                h.update(data)
                per_patch[name] = hashlib.sha256(data).hexdigest()[:12]
        return h.hexdigest(), per_patch

    patches = ROOT / "patches" / "3.14"
    series_sha, per_patch = series_hashes(patches / "series")
    compare = patches / "compare" / "upstream.series"
    info = {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "kernel": sh("uname", "-srm"),
        "memory": mem,
        "commit": sh("git", "rev-parse", "--short", "HEAD"),
        "dirty": bool(sh("git", "status", "--porcelain", "--",
                         "patches", "bench")),
        "series_sha256": series_sha,
        "patches": per_patch,
        # ft-upstream: the backport of upstream's fix
        "compare_patches": series_hashes(compare)[1] if compare.exists()
        else {},
        "flavours": {},
    }
    for flavour in FLAVOURS:
        py = dist_python(flavour)
        if not py:
            continue
        code = ("import sys, sysconfig; print(sys.version.replace('\\n',' '));"
                "print(sysconfig.get_config_var('CONFIG_ARGS'));"
                "print(sysconfig.get_config_var('CFLAGS_NODIST') or '')")
        out = subprocess.run([str(py), "-c", code], capture_output=True,
                             text=True, env=clean_env()).stdout.splitlines()
        key = dist_dir() / flavour / ".brc-merge-key"
        info["flavours"][flavour] = {
            "version": out[0] if out else "",
            "configure": out[1] if len(out) > 1 else "",
            "build_key_sha256": (hashlib.sha256(key.read_bytes()).hexdigest()[:16]
                                 if key.exists() else None),
        }
    return info


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=sorted(MODES), default="fast")
    ap.add_argument("--results", type=Path,
                    help="results dir (default: bench/results/fast for "
                         "fast, bench/results/<timestamp> for full)")
    ap.add_argument("--groups", help="comma-separated subset of "
                    + ",".join(GROUPS))
    ap.add_argument("--rounds", type=int, help="override rounds per group")
    ap.add_argument("--max-build-wait", type=int, default=3600,
                    help="seconds to wait for a running build (default 3600)")
    ap.add_argument("--ignore-builds", action="store_true",
                    help="do not wait for running builds (functional checks "
                         "only: the timings are then meaningless)")
    ap.add_argument("--line", choices=["3.14", "main"], default="3.14",
                    help="which line's flavours: 3.14 (gil ft ft-brc) or "
                         "main (main-ft main-ft-brc, named ft and ft-brc "
                         "in the report)")
    ap.add_argument("--torch-shapes", metavar="NAMES",
                    help="TORCH: comma-separated subset of "
                         + ",".join(n for n, _, _ in TORCH_PLAN))
    ap.add_argument("--torch-t0", action="store_true",
                    help="TORCH: also run the job shapes with ft-brc-t0 "
                         "(merging on behalf off in the same binary: "
                         "stock behaviour), a third more time")
    ap.add_argument("--report-only", type=Path, metavar="DIR",
                    help="only redo compare_to tables, plots and report.md")
    args = ap.parse_args()

    if args.report_only:
        report.write_report(args.report_only)
        return

    use_line(args.line)
    if args.torch_shapes:
        names = args.torch_shapes.split(",")
        unknown = set(names) - {n for n, _, _ in TORCH_PLAN}
        if unknown:
            ap.error("unknown torch shapes: %s (known: %s)"
                     % (", ".join(sorted(unknown)),
                        ", ".join(n for n, _, _ in TORCH_PLAN)))
        TORCH_PLAN[:] = [p for p in TORCH_PLAN if p[0] in names]
    if args.torch_t0:
        for _, _, configs in TORCH_PLAN:
            if "ft-brc-t0" not in configs:
                configs.append("ft-brc-t0")
    cfg = MODES[args.mode]
    groups = args.groups.split(",") if args.groups else cfg["groups"]
    unknown = set(groups) - set(GROUPS)
    if unknown:
        ap.error("unknown groups: %s" % ", ".join(sorted(unknown)))
    if args.results:
        results = args.results.resolve()
    elif args.mode == "fast":
        results = BENCH / "results" / "fast"
    else:
        results = BENCH / "results" / time.strftime("%Y%m%d-%H%M%S")
    if results.exists():
        shutil.rmtree(results)
    results.mkdir(parents=True)

    load_free = set(groups) <= LOAD_FREE_GROUPS
    if not args.ignore_builds and not load_free:
        wait_for_builds(args.max_build_wait)
    t0 = time.monotonic()
    b = Bench(args.mode, results, groups, args.rounds)
    b.info["line"] = args.line
    if load_free and running_builds():
        b.info["note"] = ("a build was running: not waited for, as %s only "
                          "count instructions (only the time taken is "
                          "longer)" % ",".join(groups))
        log(b.info["note"])
    elif args.ignore_builds and running_builds():
        b.info["warning"] = ("run with --ignore-builds while a build was "
                             "running: timings are meaningless")
    b.info["machine"] = machine_info()
    try:
        b.run()
    finally:
        b.info["elapsed_s"] = round(time.monotonic() - t0, 1)
        b.info["group_seconds"] = {k: round(v, 1) for k, v in b.timings.items()}
        b.info["skipped"] = b.skipped
        b.info["settings"] = {k: v for k, v in b.cfg.items()}
        (results / "info.json").write_text(json.dumps(b.info, indent=1))
    if running_builds() and "warning" not in b.info and not load_free:
        log("WARNING: a build started while benchmarking; timings are suspect")
        b.info["warning"] = "a build was running at the end of the benchmark"
        (results / "info.json").write_text(json.dumps(b.info, indent=1))
    report.write_report(results)
    log("done in %.0fs: %s" % (time.monotonic() - t0,
                               (results / "report.md").relative_to(ROOT)
                               if results.is_relative_to(ROOT) else results))


if __name__ == "__main__":
    main()
