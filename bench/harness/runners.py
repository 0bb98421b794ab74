"""The groups that do not run in interleaved rounds: instruction counts
(CG, T2I), pyperformance (PP), torch jobs (TORCH) and T1's paired runs;
each is run_<runner>(ctx) for its manifest entry's runner, ctx a Context:
the group's configurations, its settings in the mode, where results go."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import env
import report
from env import (HARNESS, ROOT, VENVS, WORKLOADS, clean_env, dist_python,
                 log, wait_for_builds)
from results import Results

TORCH_SPEC = os.environ.get("BENCH_TORCH_SPEC", "torch==2.14.1")
TORCH_CHECK = ("import torch, numpy; print('torch', torch.__version__, "
               "'numpy', numpy.__version__)")
TORCH_MIN_FREE_GB = 8
# cachegrind counting instructions only (1.7x faster than callgrind)
CACHEGRIND = ["--tool=cachegrind", "--cache-sim=no",
              "--cachegrind-out-file=/dev/null"]


@dataclass(frozen=True)
class Context:
    """What a runner gets (run.py makes one a group): no more of the run
    than that group needs."""
    group: str
    configs: list           # the group's configurations that are built
    flavours: dict          # config -> the flavour it runs (dist/ name)
    extra: dict             # config -> its extra environment (the knob)
    pythons: dict           # config -> its flavour's bench venv python
    settings: dict          # the group's settings in this mode
    rounds: int
    plan: tuple             # the manifest's (name, args, configs) runs
    res: Results            # the results directory's file names
    # run_script(config, round, extra=(), label=None) -> stdout: one run
    # of the group's workload, as the manifest's `output` says
    run_script: Callable
    env: Callable           # env(config, round) -> environment
    skipped: dict           # the run's: key -> why not run
    info: dict              # the run's info.json


# -- valgrind (CG, T2I) -----------------------------------------------

def find_valgrind(ctx, what=None):
    """Path of valgrind, installed with apt-get if missing and we are
    root; None (and `what`, by default the group, marked skipped) if
    there is none."""
    valgrind = shutil.which("valgrind")
    if not valgrind and os.geteuid() == 0 and shutil.which("apt-get"):
        log("installing valgrind")
        subprocess.run(["apt-get", "install", "-y", "-q", "valgrind"],
                       capture_output=True)
        valgrind = shutil.which("valgrind")
    if not valgrind:
        ctx.skipped[what or ctx.group] = ("valgrind not installed "
                                          "(apt-get install valgrind)")
    return valgrind

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

def run_callgrind(ctx):
    valgrind = find_valgrind(ctx)
    if not valgrind:
        return
    n = ctx.settings["callgrind_n"]
    jobs = []
    for config in ctx.configs:
        py = ctx.pythons[config]
        for size in [0] + [n] * ctx.settings["callgrind_reps"]:
            cmd = [valgrind, "--tool=callgrind",
                   "--callgrind-out-file=/dev/null", "--fair-sched=yes",
                   str(py), str(WORKLOADS / "bm_t1_handoff.py"), "--fixed",
                   str(size)]
            jobs.append(((config, size), cmd, ctx.env(config, 0)))
    counts = {}
    stats = {}
    for (config, size), rc, out, err, _ in two_at_a_time(jobs):
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
    ctx.res.callgrind.write_text(json.dumps(result, indent=1))


def run_xfree_callgrind(ctx):
    """XFREE counted: bm_xfree.py --callgrind on each configuration, per
    dropped object the dropping thread's instructions and atomics (by
    function group) and the owners' merging.  One valgrind at a time:
    about 45 s a free-threaded configuration, 20 s gil.
    -> callgrind_xfree.json"""
    objects = ctx.settings.get("callgrind_objects")
    if not objects:
        ctx.skipped[ctx.group + "/callgrind"] = "full `make bench` only"
        return
    valgrind = find_valgrind(ctx, ctx.group + "/callgrind")
    if not valgrind:
        return
    result = {"objects_per_owner": objects, "configs": {}}
    for config in ctx.configs:
        cmd = [str(ctx.pythons[config]), str(WORKLOADS / "bm_xfree.py"),
               "--callgrind", "--valgrind", valgrind, "--objects",
               str(objects)]
        t = time.monotonic()
        p = subprocess.run(cmd, env=ctx.env(config, 0), capture_output=True,
                           text=True)
        if p.returncode != 0:
            raise SystemExit("XFREE --callgrind failed for %s:\n%s%s"
                             % (config, p.stdout[-1000:], p.stderr[-2000:]))
        out = result["configs"][config] = json.loads(
            p.stdout.strip().splitlines()[-1])
        log("XFREE %-12s %5.1fs  callgrind, instructions per object: %s"
            % (config, time.monotonic() - t, ", ".join(
                "%s %s" % (s, v["instructions"])
                for s, v in out["scenarios"].items())))
    ctx.res.xfree_callgrind.write_text(json.dumps(result, indent=1))

# -- T2 in instructions -----------------------------------------------

def run_t2i(ctx):
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
    runs get a fixed environment, not the caller's, and run in
    bench/workloads/, so that a layout is the same from one invocation to
    the next.
    -> callgrind_t2.json
    """
    settings = ctx.settings["t2i"]
    valgrind = find_valgrind(ctx)
    if not valgrind:
        return
    try:
        import pyperformance
    except ImportError:
        ctx.skipped[ctx.group] = ("pyperformance is not installed in the "
                                  "host venv (bench/harness/requirements.txt)")
        return
    bmdir = Path(pyperformance.__file__).parent / "data-files" / \
        "benchmarks"
    configs = ctx.configs
    if "ft" not in configs or len(configs) < 2:
        ctx.skipped[ctx.group] = "needs ft and ft-brc built"
        return
    names = []
    for name in settings["benchmarks"]:
        if (bmdir / ("bm_" + name) / "run_benchmark.py").exists():
            names.append(name)
        else:
            ctx.skipped[ctx.group + "/" + name] = (
                "no %s/bm_%s/run_benchmark.py" % (bmdir, name))
    loops, reps = settings["loops"], settings["reps"]
    version = subprocess.run([valgrind, "--version"], capture_output=True,
                             text=True).stdout.strip()
    tool = [valgrind] + CACHEGRIND
    worker = ["--worker", "--loops", "{loops}", "--values", "1",
              "--warmups", "0"]
    runs = {name: [] for name in names}     # name -> [{layout, rep}]
    counts = {c: {name: {str(n): [] for n in loops} for name in names}
              for c in configs}
    result = {
        "workload": "pyperformance bm_<name>/run_benchmark.py as one "
                    "pyperf worker process, cyclic GC disabled "
                    "(bench/workloads/_t2i_worker.py); instructions per loop = "
                    "(I(loops=%d) - I(loops=%d)) / %d, per run"
                    % (loops[1], loops[0], loops[1] - loops[0]),
        "tool": "%s (%s)" % (" ".join(["valgrind"] + tool[1:]), version),
        "command": "python _t2i_worker.py run_benchmark.py "
                   + " ".join(worker),
        "args": {k: v for k, v in settings["args"].items()
                 if k in names},
        "env": "only HOME, LANG=C.UTF-8, PYTHONDONTWRITEBYTECODE=1, "
               "PYTHONHASHSEED=0, BENCH_T2I_LAYOUT=i:<24*i x's> and the "
               "configuration's threshold; cwd bench/workloads/",
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
        # A fixed environment (the layout depends on its size), not
        # the caller's.
        env = {"HOME": os.environ.get("HOME", "/"), "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
               "BENCH_T2I_LAYOUT": "%d:%s" % (layout, "x" * (24 * layout))}
        env.update(ctx.extra[config])
        cmd = tool + [str(ctx.pythons[config]),
                      str(WORKLOADS / "_t2i_worker.py"),
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
                two_at_a_time(jobs, cwd=WORKLOADS):
            count = cachegrind_count(rc, out, err, "T2I %s %s" % (config,
                                                                 name))
            counts[config][name][str(n)][i] = count
            seconds.setdefault(config, {}).setdefault(name, 0.0)
            seconds[config][name] += sec
            log("T2I   %-10s %-11s loops=%d layout=%d rep=%d %14d "
                "instructions %5.1fs" % (
                    config, name, n, runs[name][i]["layout"],
                    runs[name][i]["rep"], count, sec))
        todo = t2i_more_layouts(result, settings["max_layouts"])
    result["seconds"] = {c: {k: round(v, 1) for k, v in d.items()}
                         for c, d in seconds.items()}
    result["wall_s"] = round(time.monotonic() - t0, 1)
    ctx.res.t2i.write_text(json.dumps(result, indent=1))

# -- pyperformance ----------------------------------------------------

def cachegrind_count(rc, out, err, what):
    """The instruction count of a cachegrind run, or exit naming it."""
    m = re.search(r"I\s+refs:\s*([\d,]+)", err)
    if rc != 0 or not m:
        raise SystemExit("%s: cachegrind failed:\n%s%s"
                         % (what, out[-1000:], err[-2000:]))
    return int(m.group(1).replace(",", ""))


def t2i_more_layouts(result, max_layouts):
    """{name: [next layout]} for each benchmark whose gated ratio (smallest
    counts) is outside [1/goal, goal] in some configuration: one more
    layout confirms that it is not one unlucky layout."""
    todo = {}
    runs, goal = result["runs"], report.GOAL_T2I
    for name in result["benchmarks"]:
        ref = min(report.t2i_per_loop(result, "ft", name))
        out = [c for c in result["configs"] if c != "ft" and not (
            1 / goal <= min(report.t2i_per_loop(result, c, name)) / ref
            <= goal)]
        done = len({x["layout"] for x in runs[name]})
        if out and done < max_layouts:
            todo[name] = [done]
            log("T2I   %s: %s outside [%.4f, %.4f] x ft: one more layout"
                % (name, ", ".join(out), 1 / goal, goal))
    return todo


def run_pyperformance(ctx):
    names = ctx.settings["pyperformance"]
    pyperformance = Path(sys.executable).parent / "pyperformance"
    if not pyperformance.exists():
        ctx.skipped[ctx.group] = ("pyperformance is not installed in the "
                                  "host venv")
        return
    workdir = VENVS / "pyperformance"
    workdir.mkdir(parents=True, exist_ok=True)
    ctx.res.pyperformance_dir.mkdir(exist_ok=True)
    for config in ctx.configs:
        base = dist_python(ctx.flavours[config])
        out = ctx.res.pyperformance(config)
        cmd = [str(pyperformance), "run", "--fast", "--timeout", "600",
               "--python", str(base),
               "-b", ",".join(names), "-o", str(out)]
        t = time.monotonic()
        p = subprocess.run(cmd, cwd=str(workdir), env=clean_env(),
                           capture_output=True, text=True)
        ctx.res.pyperformance(config, "log").write_text(p.stdout
                                                       + p.stderr)
        log("PP    %-12s %5.1fs exit %d" % (config, time.monotonic() - t,
                                           p.returncode))
        if p.returncode != 0 or not out.exists():
            tail = "\n".join((p.stdout + p.stderr).splitlines()[-5:])
            ctx.skipped[ctx.group + "/" + config] = (
                "pyperformance failed (see pyperformance/%s.log): %s"
                % (config, tail))

# -- torch ------------------------------------------------------------

def torch_ready(ctx, config):
    """Install TORCH_SPEC + numpy into the configuration's flavour's bench
    venv unless they import; returns None or why not."""
    flavour, py = ctx.flavours[config], ctx.pythons[config]
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
    logfile = ctx.res.torch_install_log(flavour)
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

def run_torch(ctx):
    if os.environ.get("BENCH_TORCH") not in ("1", "yes", "true"):
        ctx.skipped[ctx.group] = (
            "opt-in: `make bench-torch` or BENCH_TORCH=1 (installs %s "
            "into each flavour's bench venv, about 5 GB each; never in "
            "bench-fast/CI)" % TORCH_SPEC)
        return
    # a configuration of each flavour the plan runs, in its order
    first = {}
    for _, _, configs in ctx.plan:
        for c in configs:
            if c in ctx.pythons:
                first.setdefault(ctx.flavours[c], c)
    ok = []
    for flavour, config in first.items():
        why = torch_ready(ctx, config)
        if why:
            ctx.skipped[ctx.group + "/" + flavour] = why
            log("TORCH %s: skipped: %s" % (flavour, why))
        else:
            ok.append(flavour)
    if not ok:
        ctx.skipped.setdefault(ctx.group, "torch could not be installed "
                               "for any flavour")
        return
    wait_for_builds(3600)
    ctx.info["torch_plan"] = [[n, list(a)] for n, a, _ in ctx.plan]
    log("TORCH: %d rounds of %s on %s (about 6 minutes per round on 2 "
        "cores)" % (ctx.rounds, ", ".join(n for n, _, _ in ctx.plan),
                    ", ".join(ok)))
    for r in range(ctx.rounds):
        for name, args, configs in ctx.plan:
            configs = [c for c in configs
                       if c in ctx.flavours and ctx.flavours[c] in ok]
            if not configs:
                continue
            k = r % len(configs)
            for config in configs[k:] + configs[:k]:
                tl = ctx.res.torch_timeline(name, config, r)
                ctx.run_script(config, r, list(args) + ["--timeline",
                                                        str(tl)],
                               label="T:" + name)


def run_tool(ctx, label, cmd):
    """Run one of bench/'s standalone measurements; log its output."""
    t = time.monotonic()
    proc = subprocess.run(cmd, env=clean_env(), cwd=str(ctx.res.path),
                          capture_output=True, text=True)
    log("T1P   %-12s %5.1fs  %s" % (label, time.monotonic() - t,
                                    proc.stdout.strip()[:110]))
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit("bench: %s failed for %s (exit %d)"
                         % (Path(cmd[1]).name, label, proc.returncode))


def run_t1_paired(ctx):
    """T1 ping-pong and clear, threshold 1 against 0 alternating in one
    ft-brc process (workloads/t1_paired.py), and ft-brc against stock ft
    and ft-upstream in alternating processes (t1_vs_ft.py): the rounds
    above move by +-30 % on this VM, more than the 2 % goal."""
    if "ft-brc" not in ctx.pythons:
        ctx.skipped["T1P"] = "needs ft-brc built"
        return
    brc = str(ctx.pythons["ft-brc"])
    pairs = ctx.settings.get("t1_paired_pairs", 60)
    # Blocks of 300 ping-pong round trips (~35 ms) or 40 clear rounds
    # (~85 ms).
    for workload, block in (("pingpong", 300), ("clear", 40)):
        run_tool(ctx, workload, [
            brc, str(WORKLOADS / "t1_paired.py"),
            "--workload", workload, "--round-trips", str(block),
            "--pairs", str(pairs), "--json", str(ctx.res.t1_paired(workload))])
    for against in ("ft", "ft-upstream"):
        if against not in ctx.settings.get("t1_vs", []):
            ctx.skipped["T1P/" + against] = "full `make bench` only"
            continue
        if against not in ctx.pythons:
            ctx.skipped["T1P/" + against] = "needs %s built" % against
            continue
        for workload in ("pingpong", "clear"):
            run_tool(ctx, workload + "/" + against, [
                sys.executable, str(HARNESS / "t1_vs_ft.py"),
                "--workload", workload,
                "--pairs", str(ctx.settings.get("t1_vs_ft_pairs", 10)),
                "--python", brc, "--against", str(ctx.pythons[against]),
                "--json", str(ctx.res.t1_vs(against, workload))])


# -- PEER ---------------------------------------------------------------

FTSCALING_LINE = re.compile(r"^(\w+)\s+([\d.]+) ms$", re.M)


def ftscaling_script(flavour):
    """Tools/ftscalingbench/ftscalingbench.py of the flavour's own tree."""
    src = env.source_tree(flavour)
    script = src / "Tools" / "ftscalingbench" / "ftscalingbench.py" \
        if src else None
    return script if script and script.exists() else None


def ftscaling_args(threads, scale):
    """Every workload on the main thread (1) or on `threads` at once."""
    return ["--scale", str(scale)] + (
        ["--baseline-only"] if threads == 1 else
        ["--parallel-only", "-t", str(threads)])


def ftscaling(ctx, config, script, threads, scale):
    """{workload: ms} of one ftscalingbench process."""
    cmd = [str(ctx.pythons[config]), str(script)] \
        + ftscaling_args(threads, scale)
    try:
        p = subprocess.run(cmd, env=ctx.env(config, 0),
                           capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        raise SystemExit("PEER: ftscalingbench timed out after 900 s for %s"
                         % config)
    times = {m[1]: float(m[2]) for m in FTSCALING_LINE.finditer(p.stdout)}
    if p.returncode != 0 or not times:
        raise SystemExit("PEER: ftscalingbench failed for %s:\n%s%s"
                         % (config, p.stdout[-1000:], p.stderr[-2000:]))
    return times


def ftscaling_instructions(ctx, scripts):
    """{config: {threads: instructions per unit of --scale}} of the whole
    ftscalingbench under cachegrind, (I(2S) - I(S)) / S, on 1 and on 2
    threads (valgrind runs one thread at a time: extra work shows,
    cache-line contention does not).  Timing on this VM moves a workload
    by tens of per cent; a count does not.  One process counts every
    workload: a process a workload would take 20 times as long (start-up
    under valgrind is ~10 s)."""
    scale = ctx.settings.get("ftscaling_count_scale")
    valgrind = scale and find_valgrind(ctx, ctx.group + "/instructions")
    if not valgrind:
        return {}
    tool = [valgrind] + CACHEGRIND + ["--fair-sched=yes"]
    jobs = []
    for config, script in scripts.items():
        py = str(ctx.pythons[config])
        for threads in (1, 2):
            for s in (scale, 2 * scale):
                cmd = tool + [py, str(script)] + ftscaling_args(threads, s)
                jobs.append(((config, threads, s), cmd, ctx.env(config, 0)))
    counts = {}
    for key, rc, out, err, sec in two_at_a_time(jobs):
        counts[key] = cachegrind_count(rc, out, err, "PEER %s" % (key,))
        log("PEER  %-12s %d thread(s) --scale %d: %d instructions %5.1fs"
            % (key + (counts[key], sec)))
    return {c: {str(t): (counts[c, t, 2 * scale] - counts[c, t, scale])
                / scale for t in (1, 2)} for c in scripts}


def detach_instructions(ctx, configs):
    """{config: {workload: instructions per call}} of bm_detach.py --fixed,
    counted as T2I counts: (I(N calls) - I(0 calls)) / N, the same
    workload's setup in both."""
    n = ctx.settings["detach_calls"]
    valgrind = n and find_valgrind(ctx, ctx.group + "/instructions")
    if not valgrind:
        return {}
    tool = [valgrind] + CACHEGRIND
    jobs = []
    for config in configs:
        py = str(ctx.pythons[config])
        for name in ("detach_sleep0", "detach_read"):
            for calls in (0, n):
                cmd = tool + [py, str(WORKLOADS / "bm_detach.py"),
                              "--fixed", str(calls), name]
                jobs.append(((config, name, calls), cmd,
                             ctx.env(config, 0)))
    counts = {}
    for (config, name, calls), rc, out, err, _ in two_at_a_time(jobs):
        counts[config, name, calls] = cachegrind_count(
            rc, out, err, "PEER %s %s" % (config, name))
    return {c: {name: (counts[c, name, n] - counts[c, name, 0]) / n
                for name in ("detach_sleep0", "detach_read")}
            for c in configs}


def run_peer(ctx):
    """PEER: CPython's own Tools/ftscalingbench (every workload, on 1 and
    2 threads), taken from each flavour's source tree, and the detach path
    (workloads/bm_detach.py: time per call in each round, instructions per
    call under cachegrind), on ft, ft-upstream and ft-brc, the order
    rotated every round.  -> peer.json and the configurations' suites."""
    configs = ctx.configs
    if "ft" not in configs or "ft-brc" not in configs:
        ctx.skipped[ctx.group] = "needs ft and ft-brc built"
        return
    scripts = {c: ftscaling_script(ctx.flavours[c]) for c in configs}
    for c in [c for c in configs if not scripts[c]]:
        ctx.skipped[ctx.group + "/ftscalingbench/" + c] = (
            "no Tools/ftscalingbench in %s's source tree (build.sh keeps it "
            "in its cache's build/<flavour>/src: rebuild with ./build.sh %s)"
            % (c, ctx.flavours[c]))
    scale = ctx.settings["ftscaling_scale"]
    peer = {"scale": scale, "threads": [1, 2],
            "scripts": {c: str(s) for c, s in scripts.items() if s},
            "ftscaling": {c: {"1": {}, "2": {}} for c in configs if scripts[c]}}
    for r in range(ctx.rounds):
        k = r % len(configs)
        for config in configs[k:] + configs[:k]:
            t = time.monotonic()
            for threads in (1, 2) if scripts[config] else ():
                for name, ms in ftscaling(ctx, config, scripts[config],
                                          threads, scale).items():
                    peer["ftscaling"][config][str(threads)].setdefault(
                        name, []).append(ms)
            log("PEER  r%d %-12s %5.1fs  ftscalingbench --scale %d, 1 and 2 "
                "threads" % (r, config, time.monotonic() - t, scale))
            ctx.run_script(config, r)
    peer["instructions"] = detach_instructions(ctx, configs)
    peer["ftscaling_instructions"] = ftscaling_instructions(
        ctx, {c: s for c, s in scripts.items() if s})
    peer["ftscaling_count_scale"] = ctx.settings.get("ftscaling_count_scale")
    peer["detach_calls"] = ctx.settings["detach_calls"]
    peer["rounds"] = ctx.rounds
    ctx.res.peer.write_text(json.dumps(peer, indent=1))
