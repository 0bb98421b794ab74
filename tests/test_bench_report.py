"""The benchmark report's structure: its sections, goal rows and flavours,
never its numbers.

By default a smoke run of every quick group (bench/harness/run.py --mode
smoke: one round, the least work, about 90 s) writes the report
checked here; with BRC_MERGE_BENCH_REPORT=FILE the test checks that report
instead (.ci/run passes `make bench-fast`'s), so that the quick report keeps
the same groups and goal rows from one change of bench/ to the next.  The
sections and goal rows expected are those the report's sections declare
(bench/harness/report: each module's SECTION), in the manifest's order.
"""

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, built_python
# bench/harness/report/, on sys.path through conftest
from report import sections as report_sections

pytestmark = pytest.mark.timeout(900)

# The sections in the manifest's order, and the goal rows each one names
# for a quick report, every number as N; {stock} rows once per stock flavour
# built.  A new group's section is checked without a change here.
SECTIONS = ["## Goals"] + [h for section in report_sections()
                           for h in section.headings]
GOALS = [g for section in report_sections() for g in section.goals]
STOCK_NAMES = {"ft": "stock ft", "ft-upstream": "ft-upstream"}


def built(flavours):
    """Those of the flavours that are built (dist_python() would skip)."""
    return [f for f in flavours if built_python(f)]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    given = os.environ.get("BRC_MERGE_BENCH_REPORT")
    if given:
        return open(given).read()
    if len(built(["gil", "ft", "ft-brc"])) < 3:
        pytest.skip("needs gil, ft and ft-brc built (make flavours)")
    out = tmp_path_factory.mktemp("bench") / "smoke"
    p = subprocess.run(
        [sys.executable, str(ROOT / "bench/harness/run.py"), "--mode", "smoke",
         "--ignore-builds", "--results", str(out)],
        capture_output=True, text=True, timeout=840)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return (out / "report.md").read_text()


def goal_rows(text):
    goals = text.split("## Goals", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1].strip() for line in goals.splitlines()
            if line.startswith("| ") and not line.startswith("| goal ")]
    return [re.sub(r"\d+(\.\d+)?", "N", row) for row in rows]


def expected_goals(text):
    stock = built(["ft", "ft-upstream"])
    fast = "; few rounds in fast mode" if "benchmarks (fast)" in text else ""
    out = []
    for g in GOALS:
        if "{stock}" in g:
            out += [g.format(stock=STOCK_NAMES[s]) for s in stock]
        else:
            out.append(g.format(beside="ft, ft-upstream", fast=fast))
    return out


def test_sections_in_order(report):
    at = [report.find("\n" + s) for s in SECTIONS]
    assert -1 not in at, [s for s, i in zip(SECTIONS, at) if i == -1]
    assert at == sorted(at), "sections out of order"


def test_goal_rows(report):
    assert goal_rows(report) == expected_goals(report)


def test_every_built_flavour_in_the_tables(report):
    unbuilt = set()
    for section, flavours in (("## M1", ["gil", "ft", "ft-upstream",
                                          "ft-brc (default, =1)"]),
                              ("## T1", ["gil", "ft", "ft-upstream",
                                         "ft-brc (default, =1)",
                                         "ft-brc t=0 (off)"]),
                              ("## PEER", ["ft", "ft-upstream / ft",
                                           "ft-brc / ft"])):
        text = report.split("\n" + section, 1)[1].split("\n## ", 1)[0]
        for f in flavours:
            if built([f.split(" ")[0]]):
                assert re.search(r"\| %s \|" % re.escape(f), text), (section,
                                                                    f)
            else:
                unbuilt.add(f.split(" ")[0])
    if unbuilt:     # the others were checked; these could not be
        pytest.skip("not built, so not looked for: %s" % ", ".join(sorted(unbuilt)))


def test_xfree_counted_table(tmp_path):
    """The XFREE section renders a full run's callgrind_xfree.json (no
    timings here): instructions with their ratios to gil and ft-upstream,
    and the groups table, from a small fixture."""
    import json
    from report.common import Context
    from results import Results

    def run(instructions, owners):
        return {"instructions": instructions, "atomics": 2.0,
                "owner_instructions": owners,
                "groups": {"drop loop": 10.0, "other": instructions - 10}}

    def config(instructions, owners):
        return {"owners": 4, "objects": 12000, "tool": "valgrind-3.19.0",
                "dropper": {"clear": "py_list_clear", "pop": "builtin_all"},
                "owner_merge": "_Py_brc_merge_refcounts",
                "groups": ["drop loop", "other"],
                "scenarios": {"clear_blocked": run(instructions, owners)}}
    Results(tmp_path).xfree_callgrind.write_text(json.dumps({"configs": {
        "gil": config(200.0, None), "ft-upstream": config(400.0, 100.0)}}))
    section = next(s for s in report_sections()
                   if s.headings[0].startswith("## XFREE"))
    text = "\n".join(section.write(Context(tmp_path, {}, {})))
    assert ("| clear, owners blocked | gil | 200.0 | 1.00x | 0.50x | 2.0 | – "
            "| 200.0 | 1.00x | 0.40x |") in text, text
    assert ("| clear, owners blocked | ft-upstream | 400.0 | 2.00x | 1.00x | "
            "2.0 | 100.0 | 500.0 | 2.50x | 1.00x |") in text, text
    assert "| clear, owners blocked | ft-upstream | 10.0 | 390.0 |" in text
