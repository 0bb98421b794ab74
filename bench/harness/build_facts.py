"""What configure, the PGO training run and the compiler did for each
optimised build: differences there are defects, not noise (issue 49).

    .venv/bin/python bench/harness/build_facts.py [--out FILE]

For every optimised interpreter of pp_release.INTERPRETERS that is built:
its sysconfig flags, its training run (from the build's make.log: tests,
results, duration), the compiler's diagnostics by -W option, and which
objects got profile data (.gcda files left in its obj dir).
"""

import argparse
import collections
import json
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pp_release  # noqa: E402
from env import clean_env  # noqa: E402

ROOT = pp_release.ROOT
VARS = ["CONFIG_ARGS", "CC", "CFLAGS", "PY_CFLAGS_NODIST", "PY_LDFLAGS_NODIST",
        "PGO_PROF_GEN_FLAG", "PROFILE_TASK"]


def build_dirs(dist_path):
    """(build dir, install prefix) of an install made by build.sh."""
    prefix = Path(dist_path).resolve()
    return prefix.parent.parent / "build" / prefix.name, prefix


def sysconfig_vars(python, prefix, cache):
    code = ("import json, sysconfig; print(json.dumps({v: sysconfig.get_config_var(v) "
            f"for v in {VARS!r}}}))")
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                         env=clean_env(), check=True).stdout
    # The prefix and cache differ by build by design: name them alike.
    return {k: None if v is None else
            str(v).replace(str(prefix), "PREFIX").replace(str(cache), "CACHE")
            for k, v in json.loads(out).items()}


def training(text):
    """The PGO task's regrtest summary lines and the tests not passed, from
    make.log's text."""
    start = text.find("-m test --pgo")
    run = text[start:] if start >= 0 else ""
    results = re.findall(r"\[\s*\d+/\d+\] (test_\w+) (\w[\w ]*?)(?: \(|$)", run, re.M)
    counts = collections.Counter(r for _, r in results)
    summary = [line.strip() for line in run.splitlines()
               if re.match(r"\s*(Total duration|Total tests|Result|== Tests result)", line)]
    return {"ran": start >= 0, "tests": len(results), "results": dict(counts),
            "not_passed": sorted(f"{t} {r}" for t, r in results if r != "passed"),
            "summary": summary}


def diagnostics(text):
    return dict(collections.Counter(re.findall(r"\[-W([\w=-]+)\]", text)).most_common())


def profiled_objects(obj):
    return sorted(str(p.relative_to(obj).with_suffix(".o"))
                  for p in obj.rglob("*.gcda"))


def facts(name, dist_path):
    build, prefix = build_dirs(ROOT / dist_path)
    python = pp_release.python_of(dist_path)
    log = build / "logs" / "make.log"
    if not python.exists() or not log.exists():
        return None
    text = log.read_text(errors="replace")
    return {"interpreter": name, "build": str(build),
            "vars": sysconfig_vars(python, prefix, prefix.parent.parent),
            "training": training(text), "diagnostics": diagnostics(text),
            "profiled": profiled_objects(build / "obj")}


def report(all_facts):
    names = [f["interpreter"] for f in all_facts]
    lines = ["# Optimised builds: what configure, the training run and the compiler did",
             "", "| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for v in VARS:
        vals = [f["vars"][v] for f in all_facts]
        same = len(set(vals)) == 1
        lines.append(f"| `{v}` | " + (f"same in all: `{vals[0]}`" if same else
                                      " | ".join(f"`{x}`" for x in vals)) + " |")
    for label, get in [
            ("training: tests run", lambda f: f["training"]["tests"]),
            ("training: results", lambda f: ", ".join(
                f"{k} {n}" for k, n in sorted(f["training"]["results"].items()))),
            ("training: not passed", lambda f: ", ".join(f["training"]["not_passed"]) or "none"),
            ("training: summary", lambda f: "; ".join(f["training"]["summary"])),
            ("objects with profile data", lambda f: len(f["profiled"])),
            ("profile diagnostics", lambda f: ", ".join(
                f"{k} {n}" for k, n in f["diagnostics"].items()
                if "profile" in k or "coverage" in k) or "none"),
            ("all diagnostics", lambda f: ", ".join(
                f"{k} {n}" for k, n in f["diagnostics"].items()))]:
        lines.append(f"| {label} | " + " | ".join(str(get(f)) for f in all_facts) + " |")
    base = set(all_facts[0]["profiled"])
    for f in all_facts[1:]:
        extra, missing = set(f["profiled"]) - base, base - set(f["profiled"])
        lines.append("")
        lines.append(f"Profiled objects, {f['interpreter']} against {names[0]}: "
                     f"{len(extra)} more ({', '.join(sorted(extra)) or '-'}), "
                     f"{len(missing)} fewer ({', '.join(sorted(missing)) or '-'}).")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="also write the report (and FILE.json) here")
    args = ap.parse_args()
    all_facts = [f for name in pp_release.OPTIMISED
                 if (f := facts(name, pp_release.INTERPRETERS[name][0]))]
    absent = [n for n in pp_release.OPTIMISED if n not in {f["interpreter"] for f in all_facts}]
    if not all_facts:
        sys.exit(f"build_facts: no optimised build found; build them: {pp_release.REL}")
    text = report(all_facts)
    if absent:
        text += "\nNot built, so not here: " + ", ".join(absent) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps(all_facts, indent=1))


if __name__ == "__main__":
    main()
