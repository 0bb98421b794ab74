"""PGO + LTO builds on pyperformance: the series' cost against the
build-to-build spread (make bench-release).

Runs `pyperformance run --fast` for a list of pure-Python benchmarks on
every interpreter below that is built, in rounds, rotating their order each
round, then reports per benchmark and as a geometric mean:

- ft-brc / ft, ft-upstream / ft and ft-brc / ft-upstream between the optimised
  builds (first copies),
- the build-to-build spread: ft-b / ft-a and ft-brc-b / ft-brc-a, two
  independent optimised builds of one source each,
- ft-brc / ft over every pair of copies (min-max),
- PGO + LTO's gain (optimised / unoptimised) of ft and ft-brc,

and says whether ft-brc / ft (and ft-upstream / ft) lies inside the spread.
A ratio is the median over rounds of the per-round ratio of the means, so
each ratio compares runs made side by side in one invocation.

--cachegrind instead runs a few benchmarks once on each optimised binary
under cachegrind (cache and branch simulation), the same Python work on
each, and reports instructions, I1 misses and mispredicts: equal
instructions with more I1 misses is layout; more instructions is cost.

    .venv/bin/python bench/harness/pp_release.py [--rounds 3] [--out DIR]
        [--python NAME=PATH ...] [-b nbody,richards,...] [--cachegrind]
        [--report-only]

Defaults (INTERPRETERS): dist/release (make release), dist/release-b
(make release RELEASE_COPY=b) and dist/ (make flavours).
"""

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
# The PP group's six (manifest.py) and seven more.
BENCHMARKS = ["nbody", "richards", "float", "deltablue", "generators", "json_dumps",
              "go", "chaos", "raytrace", "spectral_norm", "unpack_sequence", "fannkuch",
              "hexiom"]
CG_BENCHMARKS = ["richards", "hexiom", "go", "nbody", "spectral_norm"]
# A small fixed workload: one pyperf worker value of CG_LOOPS loops (1 if
# not named), each benchmark's about 1.5e9 instructions, several times the
# ~0.35e9 of startup and importing pyperf.
CG_LOOPS = {"hexiom": 8, "nbody": 3, "richards": 2}
CG_ARGS = {"nbody": ["--iterations", "5000"]}
# The host's detected LL here is a bogus 256 MB direct-mapped cache: fix the
# geometry so that counts compare across machines.
CG_TOOL = ["--tool=cachegrind", "--cache-sim=yes", "--branch-sim=yes",
           "--I1=32768,8,64", "--D1=32768,8,64", "--LL=8388608,16,64"]
CG_EVENTS = ["Ir", "I1mr", "ILmr", "Bc", "Bcm", "Bi", "Bim"]

REL = "make release RELEASE_FLAVOURS='ft ft-brc ft-upstream' RELEASE_IMAGE=0"
REL_B = "make release RELEASE_FLAVOURS='ft ft-brc' RELEASE_COPY=b"
# name -> (build, how to make it); ft-opt and ft-brc-opt are required.
INTERPRETERS = {
    "ft-opt": ("dist/release/ft", REL),
    "ft-brc-opt": ("dist/release/ft-brc", REL),
    "ft-upstream-opt": ("dist/release/ft-upstream", REL),
    "ft-opt-b": ("dist/release-b/ft", REL_B),
    "ft-brc-opt-b": ("dist/release-b/ft-brc", REL_B),
    "ft": ("dist/ft", "make flavours"),
    "ft-brc": ("dist/ft-brc", "make flavours"),
}
REQUIRED = ("ft-opt", "ft-brc-opt")
OPTIMISED = ("ft-opt", "ft-brc-opt", "ft-upstream-opt", "ft-opt-b", "ft-brc-opt-b")
PAIRS = [(a, b) for a in ("ft-brc-opt", "ft-brc-opt-b") for b in ("ft-opt", "ft-opt-b")]
# (label, numerator, denominator); the numerator a list: min-max over pairs.
COLUMNS = [
    ("ft-brc / ft", "ft-brc-opt", "ft-opt"),
    ("ft-upstream / ft", "ft-upstream-opt", "ft-opt"),
    ("ft-brc / ft-upstream", "ft-brc-opt", "ft-upstream-opt"),
    ("spread: ft-b / ft-a", "ft-opt-b", "ft-opt"),
    ("spread: ft-brc-b / ft-brc-a", "ft-brc-opt-b", "ft-brc-opt"),
    ("ft-brc / ft, all copies (min-max)", PAIRS, None),
    ("ft opt / unopt", "ft-opt", "ft"),
    ("ft-brc opt / unopt", "ft-brc-opt", "ft-brc"),
    ("ft-brc / ft, unoptimised", "ft-brc", "ft"),
]
SPREADS = ("spread: ft-b / ft-a", "spread: ft-brc-b / ft-brc-a")


def python_of(build):
    return ROOT / build / "bin/python3"


def default_interpreters():
    """({name: python} of the built INTERPRETERS, {name: (python, make)} of
    the absent optional ones); exits naming the make command if a required
    one is absent."""
    pythons, absent = {}, {}
    for name, (build, make) in INTERPRETERS.items():
        py = python_of(build)
        if py.exists():
            pythons[name] = py
        else:
            absent[name] = (py, make)
    missing = [n for n in REQUIRED if n in absent]
    if missing:
        sys.exit("pp_release: not built: " + ", ".join(
            f"{n} ({absent[n][0]})" for n in missing) +
            f"\n  build them: {absent[missing[0]][1]}")
    return pythons, absent


def absent_message(absent):
    """The line that says which optional interpreters are not in the report."""
    if not absent:
        return None
    return "Not built, so not in this report: " + "; ".join(
        f"{n} ({py}: {make})" for n, (py, make) in absent.items())


def means(path):
    import pyperf
    suite = pyperf.BenchmarkSuite.load(str(path))
    return {b.get_name(): b.mean() for b in suite.get_benchmarks()}


def ratio(results, a, b, name):
    """Median over rounds of a/b for one benchmark (None if either is missing)."""
    per = [r[a][name] / r[b][name] for r in results
           if name in r.get(a, {}) and name in r.get(b, {})]
    return statistics.median(per) if per else None


def geomean(values):
    values = [v for v in values if v is not None]
    return statistics.geometric_mean(values) if values else None


def lnabs(v):
    return abs(math.log(v))


def fmt(v, bold=False):
    if v is None:
        return "-"
    s = f"{v[0]:.3f}–{v[1]:.3f}" if isinstance(v, tuple) else f"{v:.3f}"
    return f"**{s}**" if bold else s


def timing_table(results):
    """(benchmarks, [(label, {benchmark: value}, geomean, [per-round geomean])])
    for the COLUMNS whose interpreters were run; a value is a ratio, or a
    (min, max) over pairs of copies."""
    names = {n for r in results for n in r}
    benches = sorted({b for r in results for m in r.values() for b in m})
    cols = []
    for label, a, c in COLUMNS:
        pairs = [p for p in a if set(p) <= names] if isinstance(a, list) \
            else [(a, c)] if {a, c} <= names else []
        if not pairs or (isinstance(a, list) and len(pairs) < 2):
            continue
        def span(vs):
            vs = [v for v in vs if v is not None]
            return None if not vs else vs[0] if len(pairs) == 1 else (min(vs), max(vs))
        cells = {b: span([ratio(results, x, y, b) for x, y in pairs]) for b in benches}
        gm = span([geomean([ratio(results, x, y, b) for b in benches]) for x, y in pairs])
        per_round = [span([geomean([r[x][b] / r[y][b] for b in benches
                                    if b in r.get(x, {}) and b in r.get(y, {})])
                           for x, y in pairs]) for r in results]
        cols.append((label, cells, gm, per_round))
    return benches, cols


def spread_sentences(benches, cols):
    """Whether ft-brc / ft and ft-upstream / ft lie inside the build-to-build
    spread: |ln ratio| at most the largest |ln (copy b / copy a)|."""
    by = {label: (cells, gm) for label, cells, gm, _ in cols}
    rounds = {label: pr for label, _, _, pr in cols}
    spreads = [s for s in SPREADS if s in by]
    out = []
    for label in ("ft-brc / ft", "ft-upstream / ft"):
        if label not in by:
            continue
        cells, gm = by[label]
        if not spreads:
            out.append(f"{label} between the optimised builds is {fmt(gm)} (geometric "
                       "mean); no build-to-build spread to set it against: ft-opt-b "
                       f"and ft-brc-opt-b were not run ({REL_B}).")
            continue
        # Each round's spread, not the median's: rounds of one pair can
        # differ more than the medians of two builds do.
        width = max(lnabs(v) for s in spreads for v in [by[s][1], *rounds[s]] if v)
        where = "inside" if lnabs(gm) <= width else "outside"
        widths = {b: [cells.get(b)] + [by[s][0].get(b) for s in spreads] for b in benches}
        counted = [b for b, ws in widths.items() if None not in ws]
        inside = sum(lnabs(cells[b]) <= max(map(lnabs, widths[b][1:])) for b in counted)
        meaning = ("no larger than two builds of one source differ, so timing does "
                   "not tell it from build-to-build variation" if where == "inside"
                   else "larger than two builds of one source differ")
        out.append(
            f"{label} between the optimised builds is {fmt(gm)} (geometric mean), "
            f"**{where} the build-to-build spread** ("
            + ", ".join(f"{s.split(': ')[1]} {fmt(by[s][1])} (rounds "
                        f"{', '.join(fmt(v) for v in rounds[s])})" for s in spreads)
            + f": up to {100 * (math.exp(width) - 1):.1f} % apart): {meaning}; "
            f"per benchmark, inside in {inside} of {len(counted)}.")
    if "ft-brc / ft, all copies (min-max)" in by:
        out.append("Over every pair of copies, ft-brc / ft is "
                   f"{fmt(by['ft-brc / ft, all copies (min-max)'][1])} (geometric mean).")
    return out


def parse_cachegrind(text):
    """{event: total} from a cachegrind output file's `events:` and
    `summary:` lines, plus "desc": its cache descriptions."""
    events = re.search(r"^events:\s*(.+)$", text, re.M)
    summary = re.search(r"^summary:\s*(.+)$", text, re.M)
    if not events or not summary:
        raise ValueError("not a cachegrind output file (no events:/summary: line)")
    totals = dict(zip(events.group(1).split(), map(int, summary.group(1).split())))
    totals["desc"] = re.findall(r"^desc:\s*(.+)$", text, re.M)
    return totals


def cachegrind_section(cg):
    """The report's cachegrind section from cachegrind.json."""
    names = list(cg["binaries"])
    ref = "ft-opt" if "ft-opt" in names else names[0]
    lines = ["## Cachegrind: instructions, I1 misses, mispredicts", "",
             f"Each binary once per benchmark: {cg['workload']}; `{cg['tool']}`. "
             "Mispredicts are conditional plus indirect (Bcm + Bim). Equal "
             "instructions with more I1 misses is layout; more instructions is cost. "
             f"Ratios against {ref}.", ""]
    if cg.get("absent"):
        lines += [absent_message({n: tuple(v) for n, v in cg["absent"].items()}), ""]

    def mis(t):
        return t["Bcm"] + t["Bim"]
    summary = {n: {k: [] for k in ("Ir", "I1mr", "mis")} for n in names}
    for bench, counts in cg["counts"].items():
        lines += [f"### {bench}", "",
                  "| binary | Ir | I1 misses | mispredicts | Ir / ref | I1 misses / ref "
                  "| mispredicts / ref |", "|---|---|---|---|---|---|---|"]
        r = counts.get(ref)
        for n in names:
            t = counts.get(n)
            if t is None:
                continue
            rel = [t["Ir"] / r["Ir"], t["I1mr"] / max(r["I1mr"], 1), mis(t) / max(mis(r), 1)] \
                if r else [None] * 3
            for k, v in zip(("Ir", "I1mr", "mis"), rel):
                summary[n][k].append(v)
            lines.append(f"| {n} | {t['Ir']:,} | {t['I1mr']:,} | {mis(t):,} | "
                         + " | ".join(fmt(v) for v in rel) + " |")
        lines.append("")
    lines += ["### Geometric mean over the benchmarks", "",
              "| binary | Ir / ref | I1 misses / ref | mispredicts / ref |",
              "|---|---|---|---|"]
    for n in names:
        lines.append(f"| {n} | " + " | ".join(fmt(geomean(summary[n][k]))
                                              for k in ("Ir", "I1mr", "mis")) + " |")
    lines += ["", "Binaries: " + ", ".join(f"`{k}` = {v}" for k, v in cg["binaries"].items()),
              "Per-function counts: cachegrind/*.out (cg_annotate)."]
    return lines


def render(out, results, meta, cg=None):
    """report.md's text from means.json's rounds, interpreters.json and
    cachegrind.json (each may be absent)."""
    lines = [f"# pyperformance: PGO + LTO builds against their build-to-build spread "
             f"({out.name})", ""]
    if meta.get("absent"):
        lines += [absent_message({n: tuple(v) for n, v in meta["absent"].items()}), ""]
    if meta.get("warning"):
        lines += [f"**{meta['warning']}**", ""]
    if results:
        benches, cols = timing_table(results)
        lines += [f"{len(results)} round{'s'[:len(results) != 1]} of `pyperformance run --fast`, order rotated each "
                  "round; each cell is the median over rounds of the ratio of mean times "
                  "(below 1: the first is faster); copies a and b are two independent "
                  "optimised builds of one source.", "",
                  "| benchmark | " + " | ".join(c[0] for c in cols) + " |",
                  "|---|" + "---|" * len(cols)]
        for b in benches:
            lines.append(f"| {b} | " + " | ".join(fmt(c[1][b]) for c in cols) + " |")
        lines.append("| **geometric mean** | " + " | ".join(fmt(c[2], True) for c in cols) + " |")
        lines.append("| geometric mean, each round | " +
                     " | ".join(", ".join(fmt(v) for v in c[3]) for c in cols) + " |")
        lines += [""] + [s + "\n" for s in spread_sentences(benches, cols)]
        pythons = meta.get("pythons") or {n: str(python_of(INTERPRETERS[n][0]))
                                          for r in results for n in r if n in INTERPRETERS}
        lines += ["Interpreters: " + ", ".join(f"`{k}` = {v}" for k, v in pythons.items()), ""]
    if cg:
        lines += cachegrind_section(cg)
    return "\n".join(lines).rstrip("\n") + "\n"


def report(out):
    def load(name, default):
        p = out / name
        return json.loads(p.read_text()) if p.exists() else default
    text = render(out, load("means.json", []), load("interpreters.json", {}),
                  load("cachegrind.json", None))
    (out / "report.md").write_text(text)
    print(text)


def run_timing(args, pythons):
    pyperformance = Path(sys.executable).parent / "pyperformance"
    if not pyperformance.exists():
        sys.exit("pp_release: pyperformance is not in this venv: run make bench-venv")
    work = ROOT / "bench/.venvs/pyperformance"
    work.mkdir(parents=True, exist_ok=True)
    names = list(pythons)
    results = []
    for rnd in range(args.rounds):
        order = names[rnd % len(names):] + names[:rnd % len(names)]
        results.append({})
        for name in order:
            out = args.out / f"round{rnd}-{name}.json"
            out.unlink(missing_ok=True)
            t = time.monotonic()
            p = subprocess.run([str(pyperformance), "run", "--fast", "--timeout", "900",
                                "--python", str(pythons[name]), "-b", args.benchmarks,
                                "-o", str(out)], cwd=work, capture_output=True, text=True)
            (args.out / f"round{rnd}-{name}.log").write_text(p.stdout + p.stderr)
            print(f"round {rnd} {name}: exit {p.returncode} in {time.monotonic() - t:.0f} s",
                  flush=True)
            if p.returncode != 0 or not out.exists():
                sys.exit(f"pp_release: pyperformance failed on {name}; see {out.with_suffix('.log')}")
            results[-1][name] = means(out)
        # After each round, so that an interrupted run still reports.
        (args.out / "means.json").write_text(json.dumps(results, indent=1))


def run_cachegrind(args, pythons, absent):
    """Each binary once per benchmark under cachegrind -> OUT/cachegrind.json."""
    from types import SimpleNamespace
    import env
    import pyperformance
    from runners import find_valgrind, two_at_a_time
    ctx = SimpleNamespace(skipped={}, group="cachegrind")
    valgrind = find_valgrind(ctx)
    if not valgrind:
        sys.exit("pp_release: " + ctx.skipped["cachegrind"])
    bmdir = Path(pyperformance.__file__).parent / "data-files/benchmarks"
    # The same pyperf for every binary (all are 3.14t): the bench venv of ft's.
    site = subprocess.run([str(env.ensure_venv("ft")), "-c",
                           "import os, pyperf; print(os.path.dirname(os.path.dirname(pyperf.__file__)))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # A fixed environment, not the caller's; the cyclic GC off (_t2i_worker.py):
    # identical Python work on every binary.
    run_env = {"HOME": os.environ.get("HOME", "/"), "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "PYTHONPATH": site}
    loops = {b: args.cg_loops or CG_LOOPS.get(b, 1) for b in args.benchmarks.split(",")}
    worker = ["--worker", "--values", "1", "--warmups", "0"]
    outdir = args.out / "cachegrind"
    outdir.mkdir(exist_ok=True)
    benches = args.benchmarks.split(",")
    for b in benches:
        if not (bmdir / f"bm_{b}/run_benchmark.py").exists():
            sys.exit(f"pp_release: no {bmdir}/bm_{b}/run_benchmark.py")
    jobs = [((b, n), [valgrind, *CG_TOOL, f"--cachegrind-out-file={outdir}/{b}.{n}.out",
                      str(py), str(env.WORKLOADS / "_t2i_worker.py"),
                      str(bmdir / f"bm_{b}/run_benchmark.py"), *worker, "--loops", str(loops[b]),
                      *CG_ARGS.get(b, [])],
             run_env) for b in benches for n, py in pythons.items()]
    counts = {b: {} for b in benches}
    desc = []
    for (b, n), rc, out, err, sec in two_at_a_time(jobs, cwd=env.WORKLOADS):
        if rc != 0:
            sys.exit(f"pp_release: cachegrind failed on {n} {b}:\n{out[-1000:]}{err[-2000:]}")
        totals = parse_cachegrind((outdir / f"{b}.{n}.out").read_text())
        desc = totals.pop("desc")
        counts[b][n] = {k: totals[k] for k in CG_EVENTS}
        print(f"cachegrind {b} {n}: {totals['Ir']:,} Ir, {totals['I1mr']:,} I1mr "
              f"in {sec:.0f} s", flush=True)
    version = subprocess.run([valgrind, "--version"], capture_output=True,
                             text=True).stdout.strip()
    cg = {"tool": " ".join(["valgrind", *CG_TOOL]) + f" ({version})",
          "workload": f"bm_<name>/run_benchmark.py as one pyperf worker "
                      f"({' '.join(worker)} --loops N), cyclic GC off, PYTHONHASHSEED=0; "
                      + ", ".join(f"{b} --loops {loops[b]} {' '.join(CG_ARGS.get(b, []))}".rstrip()
                                  for b in benches),
          "loops": loops,
          "desc": desc, "binaries": {n: str(p) for n, p in pythons.items()},
          "counts": counts, "absent": {n: [str(p), m] for n, (p, m) in absent.items()}}
    (args.out / "cachegrind.json").write_text(json.dumps(cg, indent=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-b", "--benchmarks",
                    help=f"default {','.join(BENCHMARKS)}; with --cachegrind "
                         f"{','.join(CG_BENCHMARKS)}")
    ap.add_argument("--python", action="append", default=[], metavar="NAME=PATH",
                    help="instead of the default interpreters")
    ap.add_argument("--out", type=Path,
                    default=ROOT / "bench/results" / ("pp-release-" + time.strftime("%Y%m%d-%H%M%S")))
    ap.add_argument("--cachegrind", action="store_true",
                    help="count instructions, I1 misses and mispredicts on the optimised "
                         "binaries (or --python's) instead of timing -> OUT/cachegrind.json")
    ap.add_argument("--cg-loops", type=int, help="loops of every benchmark under "
                    f"cachegrind (default {CG_LOOPS}, others 1)")
    ap.add_argument("--ignore-builds", action="store_true",
                    help="time even while a build runs (plumbing checks only)")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite OUT/report.md from OUT/means.json, cachegrind.json")
    args = ap.parse_args()
    args.out = args.out.absolute()   # pyperformance writes from its own directory
    if args.report_only:
        report(args.out)
        return
    args.benchmarks = args.benchmarks or ",".join(
        CG_BENCHMARKS if args.cachegrind else BENCHMARKS)
    warning = None
    if not args.cachegrind:
        import env
        if not args.ignore_builds:
            # Before choosing the interpreters: a build running may add one.
            env.wait_for_builds(4 * 3600)
        elif env.running_builds():
            warning = "Run with --ignore-builds while a build was running: timings are meaningless."
    if args.python:
        # absolute: pyperformance runs in its own directory
        pythons = {k: Path(v).absolute() for k, v in (p.split("=", 1) for p in args.python)}
        absent = {}
        missing = [f"{k} ({v})" for k, v in pythons.items() if not v.exists()]
        if missing:
            sys.exit("pp_release: no such interpreter: " + ", ".join(missing))
    else:
        pythons, absent = default_interpreters()
        if args.cachegrind:
            pythons = {n: p for n, p in pythons.items() if n in OPTIMISED}
            absent = {n: a for n, a in absent.items() if n in OPTIMISED}
    if absent:
        print("pp_release: " + absent_message(absent), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.cachegrind:
        run_cachegrind(args, pythons, absent)
    else:
        meta = {"pythons": {n: str(p) for n, p in pythons.items()},
                "absent": {n: [str(p), m] for n, (p, m) in absent.items()},
                "benchmarks": args.benchmarks.split(","), "rounds": args.rounds}
        if warning:
            meta["warning"] = warning
        (args.out / "interpreters.json").write_text(json.dumps(meta, indent=1))
        run_timing(args, pythons)
    report(args.out)


if __name__ == "__main__":
    main()
