"""Every benchmark group, once: what runs, on which configurations, in
which modes and how often, and which section of the report shows it.

A *configuration* is a flavour plus environment (ft-brc-t0 is ft-brc with
merging on behalf off).  A group names the workload script it runs (in
bench/workloads/, run by the interpreter under test), how that script
writes its results, its settings in each mode that runs it, and its report
section: bench/harness/report/<section>.py, whose SECTION names its
headings and goal rows.  Everything else is derived from GROUPS: the
groups of a mode, the order of a group's configurations in the report
(its `configs`), the order of the report's sections (the groups' order
here, a section where its first group stands).  bench/harness/run.py runs
the groups whose runner is "rounds" interleaved, round by round, and the
others through their run_<runner>(ctx) in runners.py.

Adding a group: its entry here, its workload in bench/workloads/, its
section in bench/harness/report/ (docs/benchmarks.md).

The flavours come only from `build.sh --list`: for_line() returns the
manifest of one line, its configurations pointed at that line's builds.
"""

from dataclasses import dataclass, field, replace

import env

KNOB = "PYTHON_BRC_MERGE_THRESHOLD"

# name -> (flavour, extra environment); flavours by their 3.14 names
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


@dataclass(frozen=True)
class Group:
    name: str
    what: str
    configs: tuple          # in the order the report shows them
    script: str = None      # bench/workloads/<script>
    # How run.py runs the script and where it writes: "pyperf" (a Runner
    # appending to the configuration's suite), "suite" (-o suite), "jsonl"
    # (-o one file per configuration); None: the runner runs what it runs.
    # timeline: also --timeline FILE.
    output: str = None
    timeline: bool = False
    # mode -> the group's settings in it: "rounds" (default 1), "args" (the
    # script's arguments) and what its runner reads.  A mode runs the
    # groups that name it.
    modes: dict = field(default_factory=dict)
    section: str = None     # report/<section>.py
    runner: str = "rounds"  # or run_<runner>() in runners.py
    then: str = None        # run_<then>() in runners.py, after the rounds
    load_free: bool = False  # instruction counts: need not wait for builds
    lines: tuple = ("3.14", "main")     # the lines it runs on
    timeout: int = None     # seconds one run of the script may take
    # several runs of the script a round: (name, extra arguments,
    # configurations)
    plan: tuple = ()

    def settings(self, mode):
        """Its settings in `mode`; a group named with --groups in a mode
        that does not run it takes its full settings."""
        return self.modes.get(mode, self.modes.get("full", {}))


# The pyperf Runner's arguments (processes, values, warm-ups) per mode.
PYPERF = {"smoke": ["-p", "1", "-n", "1", "-w", "0"],
          "fast": ["-p", "1", "-n", "3", "-w", "1"],
          "full": ["-p", "2", "-n", "5", "-w", "1"]}


def quick(fast, full, args=None, **settings):
    """A quick group's modes: smoke (one round, the least work: for the
    test of the report's structure, tests/test_bench_report.py; numbers
    are meaningless), fast (about 5 minutes for them all on 2 cores with
    warm venvs, CI) and full, with `fast` and `full` rounds.  args: the
    script's arguments per mode (default: PYPERF's); settings: a runner's
    own, each {mode: value}."""
    args = args or PYPERF
    out = {"smoke": {"args": args["smoke"]},
           "fast": {"rounds": fast, "args": args["fast"]},
           "full": {"rounds": full, "args": args["full"]}}
    for key, per_mode in settings.items():
        for mode, value in per_mode.items():
            out[mode][key] = value
    return out


THREADED = ("gil", "ft", "ft-upstream", "ft-brc")
# T1 across thresholds of one ft-brc binary, then stock ft, the fix alone
# and gil: the floor, freeing on another thread with no BRC at all.
T1_CONFIGS = ("ft-brc-t0", "ft-brc", "ft-brc-t2", "ft-brc-t10",
              "ft-brc-t100", "ft", "ft-upstream", "gil")

# The TORCH group's runs: (name, bm_torch_dataloader.py arguments,
# configurations).  ft-brc-t0 runs the repro too, for its
# sys._brc_stats(): what stays queued.  The -stack variants use a user's
# collate_fn, so that the queue's feeder thread moves each batch to shared
# memory (see bm_torch_dataloader.py).
TORCH_PLAN = (
    ("repro", ["--shape", "repro"],
     ("gil", "ft", "ft-upstream", "ft-brc", "ft-brc-t0")),
    ("repro-stack", ["--shape", "repro", "--collate", "stack", "--name",
                     "repro-stack"],
     ("gil", "ft", "ft-upstream", "ft-brc", "ft-brc-t0")),
    ("current", ["--shape", "current"], THREADED),
    ("cam4", ["--shape", "cameras", "--workers", "4", "--name", "cam4"],
     THREADED),
    ("cam8", ["--shape", "cameras", "--workers", "8", "--name", "cam8"],
     THREADED),
    ("cam4-stack", ["--shape", "cameras", "--workers", "4", "--collate",
                    "stack", "--name", "cam4-stack"], THREADED),
    # torchrun, 2 DDP ranks (gloo) with 2 persistent workers each
    ("ddp", ["--shape", "ddp"], THREADED),
)

GROUPS = {g.name: g for g in [
    Group("M1", "DataLoader-like producer memory", THREADED,
          "bm_m1_memory.py", "suite", timeline=True, section="memory",
          modes=quick(3, 6, {"smoke": ["--steps", "2"],
                             "fast": ["--steps", "8"],
                             "full": ["--steps", "20"]})),
    Group("M2", "free latency with a blocked owner", THREADED,
          "bm_m2_latency.py", "suite", section="memory",
          modes=quick(3, 4, {"smoke": ["--samples", "5"],
                             "fast": ["--samples", "30"],
                             "full": ["--samples", "60"]})),
    # then: T1 paired in one ft-brc process (t1_paired_pairs pairs), and
    # against the t1_vs builds in pairs of processes (t1_vs_ft_pairs):
    # fast against ft only (ft-upstream's ~45 s would take fast mode past
    # its budget; its per-round T1 ratios are there); full ~30 s and
    # ~50 s for 300 pairs in one process, ~40 s and ~70 s for 40 pairs of
    # processes.
    Group("T1", "hand-off cost", T1_CONFIGS, "bm_t1_handoff.py", "pyperf",
          section="t1", then="t1_paired",
          modes=quick(3, 5, t1_paired_pairs={"smoke": 2, "fast": 60,
                                             "full": 300},
                      t1_vs_ft_pairs={"smoke": 1, "fast": 10, "full": 40},
                      t1_vs={"smoke": ["ft"], "fast": ["ft"],
                             "full": ["ft", "ft-upstream"]})),
    # --timeout: stock ft keeps the burst until then every round
    Group("BURST", "a million objects of a blocked owner dropped at once",
          THREADED + ("ft-brc-t0",), "bm_burst.py", "jsonl",
          section="burst",
          modes=quick(3, 5, {"smoke": ["--timeout", "1"],
                             "fast": ["--timeout", "1"],
                             "full": ["--timeout", "10"]})),
    # then: the drops counted under callgrind (full: callgrind_objects
    # lists per owner, ~2.5 minutes for the four flavours)
    Group("XFREE", "cross-thread frees, owners blocked or running",
          THREADED, "bm_xfree.py", "pyperf", section="xfree",
          then="xfree_callgrind",
          modes=quick(3, 5, callgrind_objects={"full": 3000})),
    # ftscalingbench --scale (fast 100: 10-130 ms a workload), counted in
    # instructions at --scale S and 2S (full: 12 cachegrind runs, ~3
    # minutes), and the calls of each detach workload counted under
    # cachegrind (0: not counted)
    Group("PEER", "CPython's ftscalingbench and the detach path",
          ("ft", "ft-upstream", "ft-brc"), "bm_detach.py", "pyperf",
          section="peer", runner="peer",
          modes=quick(2, 7, ftscaling_scale={"smoke": 5, "fast": 100,
                                             "full": 500},
                      ftscaling_count_scale={"full": 20},
                      detach_calls={"smoke": 0, "fast": 50000,
                                    "full": 200000})),
    Group("T2", "single-threaded workloads", ("gil", "ft", "ft-brc"),
          "bm_t2_single.py", "pyperf", section="single",
          modes=quick(4, 3, dict(PYPERF, full=["-p", "4", "-n", "4", "-w",
                                               "1"]))),
    Group("CG", "callgrind of a tiny T1 workload", T1_CONFIGS[:-1],
          "bm_t1_handoff.py", section="t1", runner="callgrind",
          modes={"full": {"callgrind_n": 100, "callgrind_reps": 2}}),
    # T2I: the pyperformance benchmarks but json_dumps (its instructions
    # per loop vary by up to 1.2 % between runs: json's circular-reference
    # check keys a dict by id(), and mimalloc randomises addresses), with
    # less work per loop; each run as one pyperf worker under cachegrind
    # with each number of `loops`, in `layouts` memory layouts
    # (_t2i_worker.py), `reps` times; up to `max_layouts` for a benchmark
    # whose ratio to ft is outside [1/1.005, 1.005].
    Group("T2I", "T2 in instructions (cachegrind, pyperformance)",
          ("ft", "ft-brc", "ft-brc-t0"), "_t2i_worker.py", section="single",
          runner="t2i", load_free=True, lines=("3.14",),
          modes={"full": {"t2i": {
              "benchmarks": ["nbody", "richards", "float", "deltablue",
                             "generators"],
              "args": {"nbody": ["--iterations", "5000"]},
              "loops": [1, 2], "layouts": 2, "max_layouts": 5,
              "reps": 1}}}),
    Group("PP", "pyperformance", ("gil", "ft", "ft-brc"), section="single",
          runner="pyperformance", lines=("3.14",),
          modes={"full": {"pyperformance": [
              "nbody", "richards", "float", "deltablue", "generators",
              "json_dumps"]}}),
    # a DataLoader can hang (a worker killed by the OOM killer...)
    Group("TORCH", "torch DataLoader jobs", THREADED + ("ft-brc-t0",),
          "bm_torch_dataloader.py", "suite", section="torchjob",
          runner="torch", lines=("3.14",), timeout=600, plan=TORCH_PLAN,
          modes={"full": {"rounds": 3}}),
]}

MODES = tuple(dict.fromkeys(m for g in GROUPS.values() for m in g.modes))


def mode_groups(mode, groups=None):
    """The groups a mode runs, in the manifest's order."""
    return [n for n, g in (GROUPS if groups is None else groups).items()
            if mode in g.modes]


@dataclass(frozen=True)
class Manifest:
    """The groups and configurations of one line: what a run reads."""
    line: str
    flavours: tuple         # the line's flavours (`build.sh --list`)
    configs: dict           # config -> (the line's flavour, extra env)
    groups: dict            # the line's groups, configs cut to the line's

    def with_group(self, group):
        return replace(self, groups={**self.groups, group.name: group})


def for_line(line, flavours=None):
    """The manifest of a line, its flavours from `build.sh --list` unless
    given: main has main-ft, main-ft-brc and main-ft-upstream (no GIL
    build), so "ft" and "ft-brc" run CPython main under their usual names;
    configurations whose flavour the line lacks are dropped, and groups
    that do not run on the line."""
    flavours = tuple(env.flavours(line) if flavours is None else flavours)
    prefix = "" if line == "3.14" else line + "-"
    configs = {name: (prefix + flavour, extra)
               for name, (flavour, extra) in CONFIGS.items()
               if prefix + flavour in flavours}

    def cut(names):
        return tuple(c for c in names if c in configs)
    groups = {name: replace(g, configs=cut(g.configs),
                            plan=tuple((n, a, cut(cs)) for n, a, cs in g.plan))
              for name, g in GROUPS.items() if line in g.lines}
    return Manifest(line, flavours, configs, groups)

