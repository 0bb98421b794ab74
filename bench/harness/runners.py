"""The groups that do not run in interleaved rounds: instruction counts
(CG, T2I), pyperformance (PP), torch jobs (TORCH) and T1's paired runs;
each is run_<runner>(bench) for its manifest entry's runner."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import env
import manifest
import report
from env import (HARNESS, ROOT, VENVS, WORKLOADS, clean_env, dist_python,
                 log, wait_for_builds)

TORCH_SPEC = os.environ.get("BENCH_TORCH_SPEC", "torch==2.14.1")
TORCH_CHECK = ("import torch, numpy; print('torch', torch.__version__, "
               "'numpy', numpy.__version__)")
TORCH_MIN_FREE_GB = 8
# cachegrind counting instructions only (1.7x faster than callgrind)
CACHEGRIND = ["--tool=cachegrind", "--cache-sim=no",
              "--cachegrind-out-file=/dev/null"]


# -- valgrind (CG, T2I) -----------------------------------------------

def find_valgrind(bench, group):
    """Path of valgrind, installed with apt-get if missing and we are
    root; None (and the group marked skipped) if there is none."""
    valgrind = shutil.which("valgrind")
    if not valgrind and os.geteuid() == 0 and shutil.which("apt-get"):
        log("installing valgrind")
        subprocess.run(["apt-get", "install", "-y", "-q", "valgrind"],
                       capture_output=True)
        valgrind = shutil.which("valgrind")
    if not valgrind:
        bench.skipped[group] = ("valgrind not installed (apt-get install "
                               "valgrind)")
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

def run_callgrind(bench):
    valgrind = find_valgrind(bench, "CG")
    if not valgrind:
        return
    configs = bench.available(manifest.GROUPS["CG"].configs)
    n = bench.cfg["callgrind_n"]
    jobs = []
    for config in configs:
        py = bench.pythons[manifest.CONFIGS[config][0]]
        for size in [0] + [n] * bench.cfg["callgrind_reps"]:
            cmd = [valgrind, "--tool=callgrind",
                   "--callgrind-out-file=/dev/null", "--fair-sched=yes",
                   str(py), str(WORKLOADS / "bm_t1_handoff.py"), "--fixed",
                   str(size)]
            jobs.append(((config, size), cmd, bench.env_for(config, 0)))
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
    bench.res.callgrind.write_text(json.dumps(result, indent=1))

# -- T2 in instructions -----------------------------------------------

def run_t2i(bench):
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
    settings = dict(manifest.MODES["full"]["t2i"])
    settings.update(bench.cfg.get("t2i") or {})
    valgrind = find_valgrind(bench, "T2I")
    if not valgrind:
        return
    try:
        import pyperformance
    except ImportError:
        bench.skipped["T2I"] = ("pyperformance is not installed in the "
                               "host venv (bench/harness/requirements.txt)")
        return
    bmdir = Path(pyperformance.__file__).parent / "data-files" / \
        "benchmarks"
    configs = bench.available(manifest.GROUPS["T2I"].configs)
    if "ft" not in configs or len(configs) < 2:
        bench.skipped["T2I"] = "needs ft and ft-brc built"
        return
    names = []
    for name in settings["benchmarks"]:
        if (bmdir / ("bm_" + name) / "run_benchmark.py").exists():
            names.append(name)
        else:
            bench.skipped["T2I/" + name] = ("no %s/bm_%s/run_benchmark.py"
                                           % (bmdir, name))
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
        flavour, extra = manifest.CONFIGS[config]
        # A fixed environment (the layout depends on its size), not
        # the caller's.
        env = {"HOME": os.environ.get("HOME", "/"), "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
               "BENCH_T2I_LAYOUT": "%d:%s" % (layout, "x" * (24 * layout))}
        env.update(extra)
        cmd = tool + [str(bench.pythons[flavour]),
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
    bench.res.t2i.write_text(
        json.dumps(result, indent=1))

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


def run_pyperformance(bench):
    names = bench.cfg["pyperformance"]
    pyperformance = Path(sys.executable).parent / "pyperformance"
    if not pyperformance.exists():
        bench.skipped["PP"] = "pyperformance is not installed in the host venv"
        return
    workdir = VENVS / "pyperformance"
    workdir.mkdir(parents=True, exist_ok=True)
    bench.res.pyperformance_dir.mkdir(exist_ok=True)
    for flavour in bench.available(manifest.GROUPS["PP"].configs):
        base = dist_python(flavour)
        out = bench.res.pyperformance(flavour)
        cmd = [str(pyperformance), "run", "--fast", "--timeout", "600",
               "--python", str(base),
               "-b", ",".join(names), "-o", str(out)]
        t = time.monotonic()
        p = subprocess.run(cmd, cwd=str(workdir), env=clean_env(),
                           capture_output=True, text=True)
        bench.res.pyperformance(flavour, "log").write_text(p.stdout
                                                          + p.stderr)
        log("PP    %-12s %5.1fs exit %d" % (flavour, time.monotonic() - t,
                                           p.returncode))
        if p.returncode != 0 or not out.exists():
            tail = "\n".join((p.stdout + p.stderr).splitlines()[-5:])
            bench.skipped["PP/" + flavour] = (
                "pyperformance failed (see pyperformance/%s.log): %s"
                % (flavour, tail))

# -- torch ------------------------------------------------------------

def torch_ready(bench, flavour):
    """Install TORCH_SPEC + numpy into the flavour's bench venv unless
    they import; returns None or why not."""
    py = bench.pythons[flavour]
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
    logfile = bench.res.torch_install_log(flavour)
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

def run_torch(bench):
    if os.environ.get("BENCH_TORCH") not in ("1", "yes", "true"):
        bench.skipped["TORCH"] = (
            "opt-in: `make bench-torch` or BENCH_TORCH=1 (installs %s "
            "into each flavour's bench venv, about 5 GB each; never in "
            "bench-fast/CI)" % TORCH_SPEC)
        return
    ok = []
    flavours = {manifest.CONFIGS[c][0]: None for _, _, configs in manifest.TORCH_PLAN
                for c in configs if c in manifest.CONFIGS}   # ordered, unique
    for flavour in [f for f in flavours if f in bench.pythons]:
        why = torch_ready(bench, flavour)
        if why:
            bench.skipped["TORCH/" + flavour] = why
            log("TORCH %s: skipped: %s" % (flavour, why))
        else:
            ok.append(flavour)
    if not ok:
        bench.skipped.setdefault("TORCH", "torch could not be installed "
                                "for any flavour")
        return
    wait_for_builds(3600)
    bench.info["torch_plan"] = [[n, a] for n, a, _ in manifest.TORCH_PLAN]
    rounds = bench.rounds("TORCH")
    log("TORCH: %d rounds of %s on %s (about 6 minutes per round on 2 "
        "cores)"
        % (rounds, ", ".join(n for n, _, _ in manifest.TORCH_PLAN), ", ".join(ok)))
    for r in range(rounds):
        for name, args, configs in manifest.TORCH_PLAN:
            configs = [c for c in configs
                       if c in manifest.CONFIGS and manifest.CONFIGS[c][0] in ok]
            if not configs:
                continue
            k = r % len(configs)
            for config in configs[k:] + configs[:k]:
                tl = bench.res.torch_timeline(name, config, r)
                bench.run_script("TORCH", config, r,
                                args + ["--timeline", str(tl)],
                                label="T:" + name)


def run_tool(bench, label, cmd):
    """Run one of bench/'s standalone measurements; log its output."""
    t = time.monotonic()
    proc = subprocess.run(cmd, env=clean_env(), cwd=str(bench.res.path),
                          capture_output=True, text=True)
    log("T1P   %-12s %5.1fs  %s" % (label, time.monotonic() - t,
                                    proc.stdout.strip()[:110]))
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit("bench: %s failed for %s (exit %d)"
                         % (Path(cmd[1]).name, label, proc.returncode))


def run_t1_paired(bench):
    """T1 ping-pong and clear, threshold 1 against 0 alternating in one
    ft-brc process (workloads/t1_paired.py), and ft-brc against stock ft
    and ft-upstream in alternating processes (t1_vs_ft.py): the rounds
    above move by +-30 % on this VM, more than the 2 % goal."""
    flavour = manifest.CONFIGS["ft-brc"][0]
    if flavour not in bench.pythons:
        bench.skipped["T1P"] = "needs ft-brc built"
        return
    pairs = bench.cfg.get("t1_paired_pairs", 60)
    # Blocks of 300 ping-pong round trips (~35 ms) or 40 clear rounds
    # (~85 ms).
    for workload, block in (("pingpong", 300), ("clear", 40)):
        run_tool(bench, workload, [
            str(bench.pythons[flavour]), str(WORKLOADS / "t1_paired.py"),
            "--workload", workload, "--round-trips", str(block),
            "--pairs", str(pairs), "--json", str(bench.res.t1_paired(workload))])
    for against in ("ft", "ft-upstream"):
        if against not in bench.cfg["t1_vs"]:
            bench.skipped["T1P/" + against] = "full `make bench` only"
            continue
        if manifest.CONFIGS[against][0] not in bench.pythons:
            bench.skipped["T1P/" + against] = "needs %s built" % against
            continue
        for workload in ("pingpong", "clear"):
            run_tool(bench, workload + "/" + against, [
                sys.executable, str(HARNESS / "t1_vs_ft.py"),
                "--workload", workload,
                "--pairs", str(bench.cfg.get("t1_vs_ft_pairs", 10)),
                "--python", str(bench.pythons[flavour]),
                "--against", str(bench.pythons[manifest.CONFIGS[against][0]]),
                "--json", str(bench.res.t1_vs(against, workload))])


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


def ftscaling(bench, config, script, threads, scale):
    """{workload: ms} of one ftscalingbench process."""
    cmd = [str(bench.pythons[manifest.CONFIGS[config][0]]), str(script)] \
        + ftscaling_args(threads, scale)
    try:
        p = subprocess.run(cmd, env=bench.env_for(config, 0),
                           capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        raise SystemExit("PEER: ftscalingbench timed out after 900 s for %s"
                         % config)
    times = {m[1]: float(m[2]) for m in FTSCALING_LINE.finditer(p.stdout)}
    if p.returncode != 0 or not times:
        raise SystemExit("PEER: ftscalingbench failed for %s:\n%s%s"
                         % (config, p.stdout[-1000:], p.stderr[-2000:]))
    return times


def ftscaling_instructions(bench, scripts):
    """{config: {threads: instructions per unit of --scale}} of the whole
    ftscalingbench under cachegrind, (I(2S) - I(S)) / S, on 1 and on 2
    threads (valgrind runs one thread at a time: extra work shows,
    cache-line contention does not).  Timing on this VM moves a workload
    by tens of per cent; a count does not.  One process counts every
    workload: a process a workload would take 20 times as long (start-up
    under valgrind is ~10 s)."""
    scale = bench.cfg.get("ftscaling_count_scale")
    valgrind = scale and find_valgrind(bench, "PEER/instructions")
    if not valgrind:
        return {}
    tool = [valgrind] + CACHEGRIND + ["--fair-sched=yes"]
    jobs = []
    for config, script in scripts.items():
        py = str(bench.pythons[manifest.CONFIGS[config][0]])
        for threads in (1, 2):
            for s in (scale, 2 * scale):
                cmd = tool + [py, str(script)] + ftscaling_args(threads, s)
                jobs.append(((config, threads, s), cmd,
                             bench.env_for(config, 0)))
    counts = {}
    for key, rc, out, err, sec in two_at_a_time(jobs):
        counts[key] = cachegrind_count(rc, out, err, "PEER %s" % (key,))
        log("PEER  %-12s %d thread(s) --scale %d: %d instructions %5.1fs"
            % (key + (counts[key], sec)))
    return {c: {str(t): (counts[c, t, 2 * scale] - counts[c, t, scale])
                / scale for t in (1, 2)} for c in scripts}


def detach_instructions(bench, configs):
    """{config: {workload: instructions per call}} of bm_detach.py --fixed,
    counted as T2I counts: (I(N calls) - I(0 calls)) / N, the same
    workload's setup in both."""
    n = bench.cfg["detach_calls"]
    valgrind = n and find_valgrind(bench, "PEER/instructions")
    if not valgrind:
        return {}
    tool = [valgrind] + CACHEGRIND
    jobs = []
    for config in configs:
        py = str(bench.pythons[manifest.CONFIGS[config][0]])
        for name in ("detach_sleep0", "detach_read"):
            for calls in (0, n):
                cmd = tool + [py, str(WORKLOADS / "bm_detach.py"),
                              "--fixed", str(calls), name]
                jobs.append(((config, name, calls), cmd,
                             bench.env_for(config, 0)))
    counts = {}
    for (config, name, calls), rc, out, err, _ in two_at_a_time(jobs):
        counts[config, name, calls] = cachegrind_count(
            rc, out, err, "PEER %s %s" % (config, name))
    return {c: {name: (counts[c, name, n] - counts[c, name, 0]) / n
                for name in ("detach_sleep0", "detach_read")}
            for c in configs}


def run_peer(bench):
    """PEER: CPython's own Tools/ftscalingbench (every workload, on 1 and
    2 threads), taken from each flavour's source tree, and the detach path
    (workloads/bm_detach.py: time per call in each round, instructions per
    call under cachegrind), on ft, ft-upstream and ft-brc, the order
    rotated every round.  -> peer.json and the configurations' suites."""
    configs = bench.available(manifest.GROUPS["PEER"].configs)
    if "ft" not in configs or "ft-brc" not in configs:
        bench.skipped["PEER"] = "needs ft and ft-brc built"
        return
    scripts = {c: ftscaling_script(manifest.CONFIGS[c][0]) for c in configs}
    for c in [c for c in configs if not scripts[c]]:
        bench.skipped["PEER/ftscalingbench/" + c] = (
            "no Tools/ftscalingbench in %s's source tree (build.sh keeps it "
            "in its cache's build/<flavour>/src: rebuild with ./build.sh %s)"
            % (c, manifest.CONFIGS[c][0]))
    scale = bench.cfg["ftscaling_scale"]
    peer = {"scale": scale, "threads": [1, 2],
            "scripts": {c: str(s) for c, s in scripts.items() if s},
            "ftscaling": {c: {"1": {}, "2": {}} for c in configs if scripts[c]}}
    for r in range(bench.rounds("PEER")):
        k = r % len(configs)
        for config in configs[k:] + configs[:k]:
            t = time.monotonic()
            for threads in (1, 2) if scripts[config] else ():
                for name, ms in ftscaling(bench, config, scripts[config],
                                          threads, scale).items():
                    peer["ftscaling"][config][str(threads)].setdefault(
                        name, []).append(ms)
            log("PEER  r%d %-12s %5.1fs  ftscalingbench --scale %d, 1 and 2 "
                "threads" % (r, config, time.monotonic() - t, scale))
            bench.run_script("PEER", config, r)
    peer["instructions"] = detach_instructions(bench, configs)
    peer["ftscaling_instructions"] = ftscaling_instructions(
        bench, {c: s for c, s in scripts.items() if s})
    peer["ftscaling_count_scale"] = bench.cfg.get("ftscaling_count_scale")
    peer["detach_calls"] = bench.cfg["detach_calls"]
    peer["rounds"] = bench.rounds("PEER")
    bench.res.peer.write_text(json.dumps(peer, indent=1))
