"""Every benchmark group, once: what runs, on which configurations, how often.

A *configuration* is a flavour plus environment (ft-brc-t0 is ft-brc with
merging on behalf off).  A group names the workload script it runs (in
bench/workloads/, run by the interpreter under test) and how that script
writes its results; bench/harness/run.py runs the groups whose runner is
"rounds" interleaved, round by round, and the others through their own
function in runners.py.  Adding a group: an entry here (and its settings
in MODES), its workload, its section in report/ (docs/benchmarks.md).
"""

from dataclasses import dataclass

KNOB = "PYTHON_BRC_MERGE_THRESHOLD"

# name -> (flavour, extra environment)
CONFIGS = {
    "gil": ("gil", {}),
    "ft": ("ft", {}),
    "ft-upstream": ("ft-upstream", {}),   # stock ft + upstream's fix
    "ft-brc": ("ft-brc", {}),             # default threshold (1)
    "ft-brc-t0": ("ft-brc", {KNOB: "0"}),
    "ft-brc-t2": ("ft-brc", {KNOB: "2"}),
    "ft-brc-t10": ("ft-brc", {KNOB: "10"}),
    "ft-brc-t100": ("ft-brc", {KNOB: "100"}),
}
# The flavours of the line being measured (run.py sets them from
# `build.sh --list`): the configurations' flavours that are built.
FLAVOURS = ("gil", "ft", "ft-brc", "ft-upstream")


@dataclass(frozen=True)
class Group:
    name: str
    what: str
    configs: tuple
    script: str = None      # bench/workloads/<script>
    # How the script writes: "pyperf" (a Runner appending to the
    # configuration's suite), "suite" (-o suite), "jsonl" (-o one file per
    # configuration); timeline: also --timeline FILE.
    output: str = "pyperf"
    timeline: bool = False
    runner: str = "rounds"  # or run_<runner>() in runners.py
    then: str = None        # run_<then>() in runners.py, after the rounds
    load_free: bool = False  # instruction counts: need not wait for builds


THREADED = ("gil", "ft", "ft-upstream", "ft-brc")
# T1 across thresholds of one ft-brc binary, then stock ft, the fix alone
# and gil: the floor, freeing on another thread with no BRC at all.
T1_CONFIGS = ("ft-brc-t0", "ft-brc", "ft-brc-t2", "ft-brc-t10",
              "ft-brc-t100", "ft", "ft-upstream", "gil")
GROUPS = {g.name: g for g in [
    Group("M1", "DataLoader-like producer memory", THREADED,
          "bm_m1_memory.py", "suite", timeline=True),
    Group("M2", "free latency with a blocked owner", THREADED,
          "bm_m2_latency.py", "suite"),
    # then: T1 paired in one process and against ft in pairs of processes
    Group("T1", "hand-off cost", T1_CONFIGS, "bm_t1_handoff.py",
          then="t1_paired"),
    Group("BURST", "a million objects of a blocked owner dropped at once",
          THREADED + ("ft-brc-t0",), "bm_burst.py", "jsonl"),
    Group("T2", "single-threaded workloads", ("gil", "ft", "ft-brc"),
          "bm_t2_single.py"),
    Group("PEER", "CPython's ftscalingbench and the detach path",
          ("ft", "ft-upstream", "ft-brc"), "bm_detach.py", runner="peer"),
    Group("CG", "callgrind of a tiny T1 workload", T1_CONFIGS[:-1],
          "bm_t1_handoff.py", runner="callgrind"),
    Group("T2I", "T2 in instructions (cachegrind, pyperformance)",
          ("ft", "ft-brc", "ft-brc-t0"), "_t2i_worker.py", runner="t2i",
          load_free=True),
    Group("PP", "pyperformance", ("gil", "ft", "ft-brc"),
          runner="pyperformance"),
    Group("TORCH", "torch DataLoader jobs", THREADED + ("ft-brc-t0",),
          "bm_torch_dataloader.py", "suite", runner="torch"),
]}

# The TORCH group: (name, bm_torch_dataloader.py arguments, configurations).
# ft-brc-t0 runs the repro too, for its sys._brc_stats(): what stays queued.
# The -stack variants use a user's collate_fn, so that the queue's feeder
# thread moves each batch to shared memory (see bm_torch_dataloader.py).
TORCH_PLAN = [
    ("repro", ["--shape", "repro"],
     ["gil", "ft", "ft-upstream", "ft-brc", "ft-brc-t0"]),
    ("repro-stack", ["--shape", "repro", "--collate", "stack", "--name",
                     "repro-stack"],
     ["gil", "ft", "ft-upstream", "ft-brc", "ft-brc-t0"]),
    ("current", ["--shape", "current"], ["gil", "ft", "ft-upstream", "ft-brc"]),
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


def group_args(steps, samples, timeout, pyperf, t2=None):
    """Each rounds group's arguments: M1's steps, M2's samples, BURST's
    timeout (stock ft keeps the burst until then every round), and the
    pyperf Runner's for T1, PEER and T2."""
    return {"M1": ["--steps", str(steps)], "M2": ["--samples", str(samples)],
            "BURST": ["--timeout", str(timeout)], "T1": pyperf,
            "PEER": pyperf, "T2": t2 or pyperf}


QUICK = ["M1", "M2", "T1", "BURST", "T2", "PEER"]
# Per-mode settings.  fast: about 5 minutes on 2 cores with warm venvs.
MODES = {
    "fast": {
        "groups": QUICK,
        "rounds": {"M1": 3, "M2": 3, "T1": 3, "BURST": 3, "T2": 4,
                   "PEER": 2},
        "args": group_args(8, 30, 1, ["-p", "1", "-n", "3", "-w", "1"]),
        "t1_paired_pairs": 60,
        "t1_vs_ft_pairs": 10,
        # against ft only (ft-upstream's ~45 s would take fast mode past
        # its budget; its per-round T1 ratios are there)
        "t1_vs": ["ft"],
        # ftscalingbench --scale (100: 10-130 ms a workload) and the calls
        # of each detach workload counted under cachegrind
        "ftscaling_scale": 100,
        "detach_calls": 50000,
    },
    "full": {
        "groups": QUICK + ["CG", "T2I", "PP", "TORCH"],
        "rounds": {"M1": 6, "M2": 4, "T1": 5, "BURST": 5, "T2": 3,
                   "PEER": 7, "TORCH": 3},
        "args": group_args(20, 60, 10, ["-p", "2", "-n", "5", "-w", "1"],
                           t2=["-p", "4", "-n", "4", "-w", "1"]),
        # T1 ping-pong and clear paired in one ft-brc process each, after
        # T1's rounds (~30 s and ~50 s for 300 pairs here) ...
        "t1_paired_pairs": 300,
        # ... and against ft and ft-upstream in pairs of processes (~40 s
        # and ~70 s for 40 pairs).
        "t1_vs_ft_pairs": 40,
        "t1_vs": ["ft", "ft-upstream"],
        "ftscaling_scale": 500,
        # ... and counted in instructions per unit of --scale: the whole
        # suite at scale S and 2S (12 cachegrind runs, ~3 minutes)
        "ftscaling_count_scale": 20,
        "detach_calls": 200000,
        "callgrind_n": 100,
        "callgrind_reps": 2,
        "pyperformance": ["nbody", "richards", "float", "deltablue",
                          "generators", "json_dumps"],
        # T2I: the pyperformance benchmarks but json_dumps (its
        # instructions per loop vary by up to 1.2 % between runs: json's
        # circular-reference check keys a dict by id(), and mimalloc
        # randomises addresses), with less work per loop; each run as one
        # pyperf worker under cachegrind with each number of `loops`, in
        # `layouts` memory layouts (_t2i_worker.py), `reps` times; up to
        # `max_layouts` for a benchmark whose ratio to ft is outside
        # [1/1.005, 1.005].
        "t2i": {"benchmarks": ["nbody", "richards", "float", "deltablue",
                               "generators"],
                "args": {"nbody": ["--iterations", "5000"]},
                "loops": [1, 2], "layouts": 2, "max_layouts": 5,
                "reps": 1},
    },
}


def use_line(line, flavours):
    """Point the configurations at a line's flavours (`build.sh --list`):
    main has main-ft, main-ft-brc and main-ft-upstream (no GIL build), so
    "ft" and "ft-brc" run CPython main under their usual names, and
    configurations whose flavour the line lacks are dropped."""
    global FLAVOURS
    FLAVOURS = tuple(flavours)
    prefix = "" if line == "3.14" else line + "-"
    for name, (flavour, extra) in list(CONFIGS.items()):
        if prefix + flavour in FLAVOURS:
            CONFIGS[name] = (prefix + flavour, extra)
        else:
            del CONFIGS[name]
    for name, g in list(GROUPS.items()):
        GROUPS[name] = Group(**{**g.__dict__, "configs": tuple(
            c for c in g.configs if c in CONFIGS)})

# smoke: every quick group once with the least work, for the test of the
# report's structure (tests/test_bench_report.py); numbers are meaningless.
MODES["smoke"] = dict(
    MODES["fast"], rounds={},
    args=group_args(2, 5, 1, ["-p", "1", "-n", "1", "-w", "0"]),
    t1_paired_pairs=2, t1_vs_ft_pairs=1, ftscaling_scale=5,
    detach_calls=0)     # no cachegrind
