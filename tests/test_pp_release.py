"""make bench-release's report (bench/harness/pp_release.py) from synthetic
means and a cachegrind fixture: its columns, the spread sentence, the
absent-interpreter message, the cachegrind parser and table.  No build, no
pyperformance, no valgrind."""

import json
import sys

import pytest

import pp_release  # bench/harness, on sys.path through conftest

# Mean times (s) per interpreter: ft-brc / ft 1.01 inside a spread of ~2 %
# (ft-b / ft-a 1.02, ft-brc-b / ft-brc-a 0.98), ft-upstream / ft 1.10 outside.
BASE = {"ft-opt": 1.0, "ft-opt-b": 1.02, "ft-brc-opt": 1.01, "ft-brc-opt-b": 0.99,
        "ft-upstream-opt": 1.10, "ft": 1.25, "ft-brc": 1.25}
BENCHES = {"nbody": 1.0, "go": 2.0, "hexiom": 0.5}


def rounds(base=BASE, n=3, drift=0.0):
    """n rounds of means; round i scales ft-brc-opt by 1 + i * drift."""
    return [{name: {b: t * s * (1 + i * drift if name == "ft-brc-opt" else 1)
                    for b, s in BENCHES.items()}
             for name, t in base.items()} for i in range(n)]


def table_row(text, first):
    row = next(line for line in text.splitlines() if line.startswith(f"| {first} |"))
    return [c.strip() for c in row.strip("|").split("|")[1:]]


def header(text):
    row = next(line for line in text.splitlines() if line.startswith("| benchmark |"))
    return [c.strip() for c in row.strip("|").split("|")[1:]]


def test_columns_with_all_seven(tmp_path):
    text = pp_release.render(tmp_path, rounds(), {})
    assert header(text) == [c[0] for c in pp_release.COLUMNS]
    gm = dict(zip(header(text), table_row(text, "**geometric mean**")))
    assert gm["ft-brc / ft"] == "**1.010**"
    assert gm["ft-upstream / ft"] == "**1.100**"
    assert gm["ft-brc / ft-upstream"] == "**0.918**"
    assert gm["spread: ft-b / ft-a"] == "**1.020**"
    assert gm["spread: ft-brc-b / ft-brc-a"] == "**0.980**"
    # four pairs of copies: 0.99/1.02 .. 1.01/1.00
    assert gm["ft-brc / ft, all copies (min-max)"] == "**0.971–1.010**"
    assert gm["ft opt / unopt"] == "**0.800**"
    assert gm["ft-brc opt / unopt"] == "**0.808**"
    assert table_row(text, "go") == table_row(text, "nbody")


def test_spread_sentence_inside_and_outside(tmp_path):
    text = pp_release.render(tmp_path, rounds(), {})
    assert ("ft-brc / ft between the optimised builds is 1.010 (geometric mean), "
            "**inside the build-to-build spread** (ft-b / ft-a 1.020 (rounds 1.020, "
            "1.020, 1.020), ft-brc-b / ft-brc-a 0.980 (rounds 0.980, 0.980, 0.980): "
            "up to 2.0 % apart)") in text
    assert "per benchmark, inside in 3 of 3." in text
    assert ("ft-upstream / ft between the optimised builds is 1.100 (geometric mean), "
            "**outside the build-to-build spread**") in text
    assert "Over every pair of copies, ft-brc / ft is 0.971–1.010" in text


def test_spread_of_one_flavour_only(tmp_path):
    base = {k: v for k, v in BASE.items() if k != "ft-brc-opt-b"}
    text = pp_release.render(tmp_path, rounds(base), {})
    assert "spread: ft-brc-b / ft-brc-a" not in header(text)
    gm = dict(zip(header(text), table_row(text, "**geometric mean**")))
    assert gm["ft-brc / ft, all copies (min-max)"] == "**0.990–1.010**"   # two pairs
    assert ("**inside the build-to-build spread** (ft-b / ft-a 1.020 (rounds 1.020, 1.020, "
            "1.020): up to 2.0 % apart)") in text


def test_spread_is_the_widest_round(tmp_path):
    """A pair whose rounds swing by 10 % bounds what timing can tell, even
    when its median round is close to 1."""
    res = rounds()
    res[0]["ft-opt-b"] = {b: v * 1.08 for b, v in res[0]["ft-opt"].items()}
    res[2]["ft-opt-b"] = {b: v * 0.90 for b, v in res[2]["ft-opt"].items()}
    text = pp_release.render(tmp_path, res, {})
    assert "ft-upstream / ft between the optimised builds is 1.100" in text
    assert "**inside the build-to-build spread** (ft-b / ft-a 1.020 (rounds 1.080, 1.020, 0.900)" in text


def test_no_spread_says_so(tmp_path):
    # The previous run's four interpreters (means.json of 2026-12-03).
    base = {k: BASE[k] for k in ("ft-brc-opt", "ft-opt", "ft-brc", "ft")}
    text = pp_release.render(tmp_path, rounds(base), {})
    assert header(text) == ["ft-brc / ft", "ft opt / unopt", "ft-brc opt / unopt",
                            "ft-brc / ft, unoptimised"]
    assert "no build-to-build spread to set it against" in text
    assert "RELEASE_COPY=b" in text
    assert "ft-upstream / ft" not in text


def test_median_over_rounds_and_per_round_geomeans(tmp_path):
    text = pp_release.render(tmp_path, rounds(n=3, drift=0.1), {})
    gm = dict(zip(header(text), table_row(text, "**geometric mean**")))
    assert gm["ft-brc / ft"] == "**1.111**"         # the median round: 1.01 * 1.1
    each = dict(zip(header(text), table_row(text, "geometric mean, each round")))
    assert each["ft-brc / ft"] == "1.010, 1.111, 1.212"
    assert each["spread: ft-b / ft-a"] == "1.020, 1.020, 1.020"


def fake_builds(root, names):
    for name in names:
        py = pp_release.python_of(pp_release.INTERPRETERS[name][0])
        py.parent.mkdir(parents=True)
        py.write_text("")


def test_required_interpreter_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(pp_release, "ROOT", tmp_path)
    fake_builds(tmp_path, ["ft-opt", "ft", "ft-brc"])
    with pytest.raises(SystemExit) as e:
        pp_release.default_interpreters()
    assert "not built: ft-brc-opt" in str(e.value)
    assert "make release RELEASE_FLAVOURS=" in str(e.value)


def test_absent_optional_interpreters_are_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(pp_release, "ROOT", tmp_path)
    fake_builds(tmp_path, ["ft-opt", "ft-brc-opt", "ft", "ft-brc"])
    present = {"ft-opt", "ft-brc-opt", "ft", "ft-brc"}

    def run_timing(args, pythons):
        assert set(pythons) == present
        base = {k: v for k, v in BASE.items() if k in present}
        (args.out / "means.json").write_text(json.dumps(rounds(base)))
    monkeypatch.setattr(pp_release, "run_timing", run_timing)
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["pp_release.py", "--out", str(out), "--ignore-builds"])
    pp_release.main()
    stdout = capsys.readouterr().out
    line = next(x for x in stdout.splitlines() if x.startswith("pp_release: "))
    for name in ("ft-upstream-opt", "ft-opt-b", "ft-brc-opt-b"):
        assert name in line
    assert "RELEASE_COPY=b" in line
    assert "Not built, so not in this report: ft-upstream-opt" in (out / "report.md").read_text()
    assert json.loads((out / "interpreters.json").read_text())["rounds"] == 3


# A cachegrind output file (valgrind 3.19, --cache-sim=yes --branch-sim=yes), cut.
CG_OUT = """\
desc: I1 cache:         32768 B, 64 B, 8-way associative
desc: D1 cache:         32768 B, 64 B, 8-way associative
desc: LL cache:         8388608 B, 64 B, 16-way associative
cmd: /x/bin/python3 _t2i_worker.py run_benchmark.py --worker --loops 1
events: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw Bc Bcm Bi Bim
fl=???
fn=???
0 131 24 23 44 6 0 17 1 1 11 6 19 11
summary: 127651 1091 1072 29380 1227 1018 10265 344 312 25316 3163 279 150
"""


def test_parse_cachegrind():
    t = pp_release.parse_cachegrind(CG_OUT)
    assert {k: t[k] for k in pp_release.CG_EVENTS} == {
        "Ir": 127651, "I1mr": 1091, "ILmr": 1072, "Bc": 25316, "Bcm": 3163,
        "Bi": 279, "Bim": 150}
    assert t["desc"][0].startswith("I1 cache:")
    with pytest.raises(ValueError):
        pp_release.parse_cachegrind("==1== I   refs: 5\n")


def test_cachegrind_section(tmp_path):
    ft = {"Ir": 1000, "I1mr": 10, "ILmr": 1, "Bc": 100, "Bcm": 8, "Bi": 10, "Bim": 2}
    layout = dict(ft, I1mr=15)                 # same work, worse layout
    cost = dict(ft, Ir=1100)
    cg = {"tool": "valgrind --tool=cachegrind", "workload": "w", "desc": [],
          "binaries": {"ft-opt": "a", "ft-brc-opt": "b", "ft-upstream-opt": "c"},
          "counts": {"go": {"ft-opt": ft, "ft-brc-opt": layout, "ft-upstream-opt": cost}},
          "absent": {"ft-opt-b": ["dist/release-b/ft/bin/python3", "make x"]}}
    (tmp_path / "cachegrind.json").write_text(json.dumps(cg))
    pp_release.report(tmp_path)                 # --report-only: no means.json
    text = (tmp_path / "report.md").read_text()
    assert "## Cachegrind" in text and "| benchmark |" not in text
    assert "Not built, so not in this report: ft-opt-b" in text
    go = text.split("### go", 1)[1]
    assert table_row(go, "ft-opt") == ["1,000", "10", "10", "1.000", "1.000", "1.000"]
    assert table_row(go, "ft-brc-opt") == ["1,000", "15", "10", "1.000", "1.500", "1.000"]
    assert table_row(go, "ft-upstream-opt")[3] == "1.100"
    mean = text.split("### Geometric mean", 1)[1]
    assert table_row(mean, "ft-brc-opt") == ["1.000", "1.500", "1.000"]


# --------------------------------------------------------------------------- build_facts
MAKE_LOG = """\
gcc -c -O3 -flto -fprofile-use x.c
../src/Programs/_testembed.c:2744:1: warning: 'a.gcda' profile count data file not found [-Wmissing-profile]
../src/Modules/x.c:1:1: warning: 'r' may be used uninitialized [-Wmaybe-uninitialized]
./python -m test --pgo --timeout=
0:00:00 load avg: 2.72 [ 1/3] test_array
0:00:02 load avg: 2.58 [ 1/3] test_array passed
0:00:02 load avg: 2.58 [ 2/3] test_gc
0:00:09 load avg: 2.58 [ 2/3] test_gc failed (1 failure)
0:00:09 load avg: 2.58 [ 3/3] test_time
0:00:12 load avg: 2.58 [ 3/3] test_time skipped
Total duration: 12 sec
Total tests: run=30 failures=1 skipped=4
Result: FAILURE
"""


def test_build_facts_reads_the_training_run_and_diagnostics(tmp_path):
    import build_facts
    t = build_facts.training(MAKE_LOG)
    assert t["ran"] and t["tests"] == 3
    assert t["results"] == {"passed": 1, "failed": 1, "skipped": 1}
    assert t["not_passed"] == ["test_gc failed", "test_time skipped"]
    assert t["summary"] == ["Total duration: 12 sec", "Total tests: run=30 failures=1 skipped=4",
                            "Result: FAILURE"]
    assert build_facts.diagnostics(MAKE_LOG) == {"missing-profile": 1, "maybe-uninitialized": 1}
    assert build_facts.training("gcc -c x.c\n") == {"ran": False, "tests": 0, "results": {},
                                         "not_passed": [], "summary": []}
