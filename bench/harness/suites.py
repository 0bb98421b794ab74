"""The pyperf suites of a results directory and what every reader of them
shares: the configurations' order (the manifest's) and labels, the
benchmarks' names, the values of each round and the ratios between rounds.
report/ and plots.py both read through here."""

import statistics
import sys

import pyperf

import manifest
from results import Results

MiB = 1 << 20


def order(group):
    """A group's configurations in the order its report tables list them:
    the manifest's."""
    return list(manifest.GROUPS[group].configs)


# The flavours, each in its plain configuration (ft-upstream: stock ft +
# the backport of upstream's fix).
FLAVOUR_ORDER = [c for c, (_, extra) in manifest.CONFIGS.items() if not extra]
LABEL = {"ft-brc": "ft-brc (default, =1)", "ft-brc-t0": "ft-brc t=0 (off)",
         "ft-brc-t2": "ft-brc t=2", "ft-brc-t10": "ft-brc t=10",
         "ft-brc-t100": "ft-brc t=100"}
T1_BENCHES = ["t1_pingpong_cpu", "t1_pingpong_wall", "t1_clear_cpu",
              "t1_clear_wall"]
T2_BENCHES = ["t2_nbody", "t2_dict_str", "t2_alloc", "t2_recursion"]
# The torch runs of the manifest's plan: the public thread's repro (and its
# variants), then the job shapes.
_TORCH_PLAN = manifest.GROUPS["TORCH"].plan
TORCH_REPROS = [n for n, args, _ in _TORCH_PLAN if args[:2] == ["--shape",
                                                                "repro"]]
TORCH_SHAPES = [n for n, _, _ in _TORCH_PLAN if n not in TORCH_REPROS]
TORCH_REPRO_CONFIGS = list(next(cs for n, _, cs in _TORCH_PLAN
                                if n in TORCH_REPROS))


def label(config):
    return LABEL.get(config, config)


def load_suites(results):
    suites = {}
    for config, f in Results(results).suites().items():
        try:
            suites[config] = pyperf.BenchmarkSuite.load(str(f))
        except Exception as exc:        # a half-written file: report it
            print("report: cannot load %s: %s" % (f, exc), file=sys.stderr)
    return suites


def get_bench(suites, config, name):
    suite = suites.get(config)
    if suite is None:
        return None
    try:
        return suite.get_benchmark(name)
    except KeyError:
        return None


def values_by_round(bench):
    """{round: [values]} using the bench_round metadata run.py sets."""
    out = {}
    for run in bench.get_runs():
        if not run.values:
            continue
        r = int(run.get_metadata().get("bench_round", 0))
        out.setdefault(r, []).extend(run.values)     # already per loop
    return out


def all_values(bench):
    return list(bench.get_values())


def pct(values, p):
    """The p-th percentile, interpolated as pyperf's Benchmark.percentile()."""
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def summary(values):
    return {
        "n": len(values),
        "median": statistics.median(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }


def round_ratios(bench, ref):
    """Per-round ratio of medians bench/ref over the rounds both have."""
    a = values_by_round(bench)
    b = values_by_round(ref)
    return [statistics.median(a[r]) / statistics.median(b[r])
            for r in sorted(set(a) & set(b))]
