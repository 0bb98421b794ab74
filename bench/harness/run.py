#!/usr/bin/env python3
"""Benchmark orchestrator: `make bench` / `make bench-fast` run this.

Runs under the host venv (.venv with bench/harness/requirements.txt).  For
every flavour in dist/ it makes a venv bench/.venvs/<flavour> (pyperf, from
bench/workloads/requirements.txt) and runs bench/workloads/ scripts with it.
manifest.py lists the groups, their configurations and their settings per
mode (for_line(): those of a line, flavours from `build.sh --list`);
results.py names every file of a results directory.

The groups whose runner is "rounds" are interleaved: round r of every such
group, each configuration in an order rotated every round, before round
r+1 of any, so that slow drifts of a noisy machine hit every configuration
alike; ratios are per round, summarised as median [min-max].  The other
groups run after them, each through runners.run_<runner>(ctx), ctx a
runners.Context: the group's configurations, settings and output paths.

    bench/harness/run.py --mode fast|full [--results DIR] [--groups M1,...]
    bench/harness/run.py --report-only DIR     # redo tables, plots, report
    bench/harness/run.py --dry-run ...         # the plan; nothing runs
"""

import argparse
import dataclasses
import datetime
import functools
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import env
import manifest
import report
import runners
from env import clean_env, log
from results import Results


class Bench:
    def __init__(self, mode, results, m, groups, rounds_override=None):
        self.mode = mode
        self.m = m                 # the line's manifest.Manifest
        self.res = Results(results)
        self.groups = groups
        self.rounds_override = rounds_override
        self.pythons = {}          # flavour -> its bench venv's python
        self.skipped = {}          # group/config -> reason
        self.timings = {}          # group -> seconds
        self.info = {"mode": mode, "groups": groups, "started":
                     datetime.datetime.now().isoformat(timespec="seconds")}

    def settings(self, group):
        return self.m.groups[group].settings(self.mode)

    def rounds(self, group):
        return self.rounds_override or self.settings(group).get("rounds", 1)

    def available(self, configs):
        return [c for c in configs if self.m.configs.get(c, (None,))[0]
                in self.pythons]

    def env_for(self, config, round_no):
        env = clean_env(self.m.configs[config][1])
        env["BENCH_FLAVOUR"] = config
        env["BENCH_ROUND"] = str(round_no)
        return env

    def script_cmd(self, group, config, extra=()):
        """The command of one run of a group's workload, its outputs named
        by Results as the manifest's `output` says."""
        g = self.m.groups[group]
        cmd = [str(self.pythons[self.m.configs[config][0]]),
               str(env.WORKLOADS / g.script)]
        if g.output == "pyperf":
            cmd += ["--append", str(self.res.suite(config)), "--loops", "1",
                    "--quiet", "--inherit-environ",
                    ",".join([manifest.KNOB, "BENCH_FLAVOUR", "BENCH_ROUND"])]
        elif g.output == "jsonl":
            cmd += ["-o", str(self.res.jsonl(group, config))]
        else:
            cmd += ["-o", str(self.res.suite(config))]
        if g.timeline:
            cmd += ["--timeline", str(self.res.timeline(group, config))]
        return cmd + self.settings(group).get("args", []) + list(extra)

    def run_script(self, group, config, round_no, extra=(), label=None):
        cmd = self.script_cmd(group, config, extra)
        g = self.m.groups[group]
        if g.output == "jsonl":     # the script appends to a file there
            self.res.jsonl(group, config).parent.mkdir(exist_ok=True)
        timeout = g.timeout
        t = time.monotonic()
        try:
            proc = subprocess.run(cmd, env=self.env_for(config, round_no),
                                  cwd=str(self.res.path), capture_output=True,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise SystemExit("bench: %s timed out after %d s for %s"
                             % (Path(cmd[1]).name, timeout, config))
        lines = proc.stdout.rstrip("\n").split("\n")
        if lines[-1].startswith("{"):   # a JSON summary: not for the log
            lines = lines[:-1]
        summary = " ".join(lines[-3:]).strip()
        log("%-5s r%d %-12s %5.1fs  %s" % (label or group, round_no, config,
                                           time.monotonic() - t,
                                           summary[:110]))
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout + proc.stderr)
            raise SystemExit("bench: %s failed for %s (exit %d)"
                             % (Path(cmd[1]).name, config, proc.returncode))
        return proc.stdout

    def context(self, group):
        """What a runner of the group gets (runners.Context)."""
        g = self.m.groups[group]
        configs = self.available(g.configs)
        return runners.Context(
            group=group, configs=configs,
            flavours={c: self.m.configs[c][0] for c in configs},
            extra={c: self.m.configs[c][1] for c in configs},
            pythons={c: self.pythons[self.m.configs[c][0]] for c in configs},
            settings=self.settings(group), rounds=self.rounds(group),
            plan=g.plan, res=self.res,
            run_script=functools.partial(self.run_script, group),
            env=self.env_for, skipped=self.skipped, info=self.info)

    def check_knob(self):
        """Ask each ft-brc configuration which threshold it really runs
        with (_testinternalcapi probes from the patch series)."""
        seen = {}
        for config, (flavour, _) in self.m.configs.items():
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

    def timed(self, group, fn, *args):
        t = time.monotonic()
        fn(*args)
        self.timings[group] = (self.timings.get(group, 0)
                               + time.monotonic() - t)

    def run_round(self, group, r):
        configs = self.available(self.m.groups[group].configs)
        if not configs:
            self.skipped[group] = "no interpreter built for it"
            return
        k = r % len(configs)
        for config in configs[k:] + configs[:k]:
            self.run_script(group, config, r)

    def run(self):
        for flavour in self.m.flavours:
            if env.dist_python(flavour):
                self.pythons[flavour] = env.ensure_venv(flavour)
            else:
                self.skipped[flavour] = ("not built (%s/%s/bin/python3 "
                                         "missing; ./build.sh %s)"
                                         % (env.dist_dir(), flavour, flavour))
                log("skipping flavour %s: not built" % flavour)
        self.res.mkdirs()
        self.check_knob()
        groups = [g for g in self.m.groups.values() if g.name in self.groups]
        timed = [g.name for g in groups if g.runner == "rounds"]
        for r in range(max([self.rounds(g) for g in timed] or [0])):
            for group in timed:
                if r < self.rounds(group):
                    self.timed(group, self.run_round, group, r)
        for g in groups:
            if g.then:
                self.timed(g.name, getattr(runners, "run_" + g.then),
                           self.context(g.name))
            if g.runner != "rounds":
                self.timed(g.name, getattr(runners, "run_" + g.runner),
                           self.context(g.name))


def dry_run(args, m, groups):
    """Print what a run would do: per group its configurations (those
    built), rounds and the first round's commands; nothing is run."""
    b = Bench(args.mode, results_dir(args), m, groups, args.rounds)
    b.pythons = {f: env.VENVS / f / "bin" / "python" for f in m.flavours
                 if env.dist_python(f)}
    print("results: %s" % b.res.path)
    for f in m.flavours:
        if f not in b.pythons:
            print("not built, skipped: %s" % f)
    for g in [g for g in m.groups.values() if g.name in groups]:
        configs = b.available(g.configs)
        print("%s (%s): %s; %d round(s); runner %s%s" % (
            g.name, g.what, ", ".join(configs) or "nothing built",
            b.rounds(g.name), g.runner, ", then " + g.then if g.then else ""))
        if not g.output:
            continue
        for _, extra, cs in g.plan or [(None, [], g.configs)]:
            for config in b.available(cs):
                print("    " + " ".join(b.script_cmd(g.name, config,
                                                     extra)))


def results_dir(args):
    if args.results:
        return args.results.resolve()
    name = "fast" if args.mode == "fast" else time.strftime("%Y%m%d-%H%M%S")
    return env.BENCH / "results" / name


def select_torch(m, shapes, t0):
    """The manifest with --torch-shapes and --torch-t0 applied to TORCH's
    plan."""
    g = m.groups.get("TORCH")
    if g is None or not (shapes or t0):
        return m
    extra = ("ft-brc-t0",) if t0 and "ft-brc-t0" in m.configs else ()
    return m.with_group(dataclasses.replace(g, plan=tuple(
        (name, args, configs + tuple(c for c in extra if c not in configs))
        for name, args, configs in g.plan
        if not shapes or name in shapes)))


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=sorted(manifest.MODES), default="fast")
    ap.add_argument("--results", type=Path,
                    help="results dir (default: bench/results/fast for "
                         "fast, bench/results/<timestamp> for full)")
    ap.add_argument("--groups", help="comma-separated subset of "
                    + ",".join(manifest.GROUPS))
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
    torch_plan = manifest.GROUPS["TORCH"].plan
    ap.add_argument("--torch-shapes", metavar="NAMES",
                    help="TORCH: comma-separated subset of "
                         + ",".join(n for n, _, _ in torch_plan))
    ap.add_argument("--torch-t0", action="store_true",
                    help="TORCH: also run the job shapes with ft-brc-t0 "
                         "(merging on behalf off in the same binary: "
                         "stock behaviour), a third more time")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the plan (groups, configurations, rounds, "
                         "commands) and run nothing")
    ap.add_argument("--report-only", type=Path, metavar="DIR",
                    help="only redo compare_to tables, plots and report.md")
    args = ap.parse_args()
    args.torch_shapes = (args.torch_shapes.split(",") if args.torch_shapes
                         else [])
    unknown = set(args.torch_shapes) - {n for n, _, _ in torch_plan}
    if unknown:
        ap.error("unknown torch shapes: %s (known: %s)"
                 % (", ".join(sorted(unknown)),
                    ", ".join(n for n, _, _ in torch_plan)))
    args.groups = args.groups.split(",") if args.groups else []
    unknown = set(args.groups) - set(manifest.GROUPS)
    off = [g for g in args.groups if g in manifest.GROUPS
           and args.line not in manifest.GROUPS[g].lines]
    if unknown or off:
        ap.error("unknown groups: %s" % ", ".join(sorted(unknown)) if unknown
                 else "not run on the %s line: %s" % (args.line,
                                                      ", ".join(off)))
    return args


def main():
    args = parse_args()
    if args.report_only:
        report.write_report(args.report_only)
        return
    m = select_torch(manifest.for_line(args.line), args.torch_shapes,
                     args.torch_t0)
    groups = args.groups or manifest.mode_groups(args.mode, m.groups)
    if args.dry_run:
        return dry_run(args, m, groups)
    results = results_dir(args)
    if results.exists():
        shutil.rmtree(results)
    results.mkdir(parents=True)

    load_free = all(m.groups[g].load_free for g in groups)
    if not args.ignore_builds and not load_free:
        env.wait_for_builds(args.max_build_wait)
    t0 = time.monotonic()
    b = Bench(args.mode, results, m, groups, args.rounds)
    b.info["line"] = args.line
    if load_free and env.running_builds():
        b.info["note"] = ("a build was running: not waited for, as %s only "
                          "count instructions (only the time taken is "
                          "longer)" % ",".join(groups))
        log(b.info["note"])
    elif args.ignore_builds and env.running_builds():
        b.info["warning"] = ("run with --ignore-builds while a build was "
                             "running: timings are meaningless")
    b.info["machine"] = env.machine_info(m.flavours)
    try:
        b.run()
    finally:
        b.info["elapsed_s"] = round(time.monotonic() - t0, 1)
        b.info["group_seconds"] = {k: round(v, 1)
                                   for k, v in b.timings.items()}
        b.info["skipped"] = b.skipped
        b.info["settings"] = {g: b.settings(g) for g in groups}
        b.res.info.write_text(json.dumps(b.info, indent=1))
    if env.running_builds() and "warning" not in b.info and not load_free:
        log("WARNING: a build started while benchmarking; timings are suspect")
        b.info["warning"] = "a build was running at the end of the benchmark"
        b.res.info.write_text(json.dumps(b.info, indent=1))
    report.write_report(results)
    log("done in %.0fs: %s" % (time.monotonic() - t0,
                               b.res.report.relative_to(env.ROOT)
                               if results.is_relative_to(env.ROOT)
                               else b.res.report))


if __name__ == "__main__":
    main()
