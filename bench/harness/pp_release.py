"""Optimised against unoptimised builds on pyperformance (issue: release builds).

Runs `pyperformance run --fast` for a list of pure-Python benchmarks on
several interpreters, in rounds, rotating their order each round, then
reports per benchmark and as a geometric mean:

- optimised / unoptimised for each flavour built both ways (PGO + LTO's gain),
- ft-brc / ft in each mode (the series' cost).

A ratio is the median over rounds of the per-round ratio of the means, so
each ratio compares runs made side by side in one invocation.

    .venv/bin/python bench/harness/pp_release.py [--rounds 2] [--out DIR]
        [--python NAME=PATH ...] [-b nbody,richards,...]

Defaults: ft-brc and ft from dist/release (make release
RELEASE_FLAVOURS="ft-brc ft") and from dist/ (make flavours).
"""

import argparse
import json
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
DEFAULT_PYTHONS = {
    "ft-brc-opt": ROOT / "dist/release/ft-brc/bin/python3",
    "ft-opt": ROOT / "dist/release/ft/bin/python3",
    "ft-brc": ROOT / "dist/ft-brc/bin/python3",
    "ft": ROOT / "dist/ft/bin/python3",
}


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("-b", "--benchmarks", default=",".join(BENCHMARKS))
    ap.add_argument("--python", action="append", default=[], metavar="NAME=PATH")
    ap.add_argument("--out", type=Path,
                    default=ROOT / "bench/results" / ("pp-release-" + time.strftime("%Y%m%d-%H%M%S")))
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite OUT/report.md from OUT/means.json")
    args = ap.parse_args()
    pythons = dict(p.split("=", 1) for p in args.python) or DEFAULT_PYTHONS
    pythons = {k: Path(v) for k, v in pythons.items()}
    if args.report_only:
        report(args, pythons, json.loads((args.out / "means.json").read_text()))
        return
    missing = [f"{k} ({v})" for k, v in pythons.items() if not v.exists()]
    if missing:
        sys.exit("pp_release: not built: " + ", ".join(missing) +
                 "\n  build them: make release RELEASE_FLAVOURS='ft-brc ft' RELEASE_IMAGE=0; make flavours")
    pyperformance = Path(sys.executable).parent / "pyperformance"
    if not pyperformance.exists():
        sys.exit("pp_release: pyperformance is not in this venv: run make bench-venv")
    args.out.mkdir(parents=True, exist_ok=True)
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
    (args.out / "means.json").write_text(json.dumps(results, indent=1))
    report(args, pythons, results)


def report(args, pythons, results):
    benches = sorted({b for r in results for m in r.values() for b in m})
    cols = [(f"{b} opt / unopt", f"{b}-opt", b) for b in ("ft-brc", "ft")
            if f"{b}-opt" in pythons and b in pythons]
    cols += [(f"ft-brc / ft, {'optimised' if m else 'unoptimised'}", f"ft-brc{m}", f"ft{m}")
             for m in ("-opt", "")
             if f"ft-brc{m}" in pythons and f"ft{m}" in pythons]
    lines = [f"# pyperformance: optimised and unoptimised builds ({args.out.name})", "",
             f"{len(results)} rounds of `pyperformance run --fast`, order rotated each round; "
             "each cell is the median over rounds of the ratio of mean times "
             "(below 1: the first is faster).", "",
             "| benchmark | " + " | ".join(c[0] for c in cols) + " |",
             "|---|" + "---|" * len(cols)]
    table = {b: [ratio(results, a, c, b) for _, a, c in cols] for b in benches}
    for b in benches:
        lines.append(f"| {b} | " + " | ".join("-" if v is None else f"{v:.3f}" for v in table[b]) + " |")
    gm = [geomean([table[b][i] for b in benches]) for i in range(len(cols))]
    lines.append("| **geometric mean** | " + " | ".join("-" if v is None else f"**{v:.3f}**" for v in gm) + " |")
    per_round = [[geomean([r[a][b] / r[c][b] for b in benches if b in r[a] and b in r[c]])
                  for r in results] for _, a, c in cols]
    lines.append("| geometric mean, each round | " +
                 " | ".join(", ".join(f"{v:.3f}" for v in pr) for pr in per_round) + " |")
    lines += ["", "Interpreters: " + ", ".join(f"`{k}` = {v}" for k, v in pythons.items())]
    (args.out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
