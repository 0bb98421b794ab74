"""`make compare`: gil, ft, ft-upstream and ft-brc side by side on
public-API scenarios, each cell with the outcome expected of that flavour.

ft-upstream is stock free-threaded CPython plus the backport of the fix
upstream shipped for gh-157838 (the series' 0001 alone): it has
no sys._brc_stats(), so every row here judges by weakref finalisers, the
thread they ran in, RSS and timing only.  `make test` does not collect this
file (its name does not start with test_); `make compare` names it.

Outcomes:
  frees          freed while the owner stays blocked, in every trial
  retains        freed only once the owner wakes (or a GC runs), every trial
  leaves behind  racy: some trials retain; reported as counts over the
                 trials, not asserted (only that nothing leaks)
Rows that measure something other than frees (where destructors run, the
cost of freeing asyncio Tasks off their thread) assert their expected value
where it is deterministic and report the rest.  The expected outcomes of
ft-brc are those of the series as it is (v5: the backport plus
follow-ups); the report, tests/results/compare-<line>.md, has every cell's numbers.  A
racy cell (leaves behind) may also show frees or retains in one run.
BRC_MERGE_COMPARE_LINE=main (`make compare-main`) runs CPython main's
flavours (no gil).  BRC_MERGE_COMPARE_TRIALS=N changes the racy rows' trials.
"""

import json
import os
import subprocess

import pytest

from conftest import ROOT, clean_env, dist_python
from test_scenarios import F, L, R, SCENARIO_DIR, SCENARIOS, TIMEOUT, expected, run_scenario

LINE = os.environ.get("BRC_MERGE_COMPARE_LINE", "3.14")
TRIALS = int(os.environ.get("BRC_MERGE_COMPARE_TRIALS", "10"))
PREFIX = "" if LINE == "3.14" else LINE + "-"
# The flavours compared, by their 3.14 names (main: main-<name>, no gil).
COMPARED = ("gil", "ft", "ft-upstream", "ft-brc")
COLUMNS = [f for f in COMPARED if PREFIX == "" or f != "gil"]
REPORT = ROOT / "tests" / "results" / f"compare-{LINE}.md"

# row -> (scenario arguments, trials, {flavour: expected}, why): the
# scenarios of test_scenarios.py, with their outcomes from its table; a row
# with a racy cell runs TRIALS times.
WHY = {"mp-queue": "a DataLoader-like feeder thread"}
WHY.update({row: "ft-upstream: a drop that lands while the owner spins attached is "
                 "left to it; ft-brc: the owner asks for help as it parks (0004)"
            for row in SCENARIOS if row.endswith("-nowait")})
BLOCKING = {}
for row, script in SCENARIOS.items():
    cells = {f: expected(row, f) for f in COMPARED}
    BLOCKING[row] = (script, TRIALS if L in cells.values() else 1, cells, WHY.get(row, ""))

# properties.py rows: (arguments, {flavour: expected}, why)
PROPERTIES = {
    "spin": (["--case", "spin"],
             {"gil": F, "ft": R, "ft-upstream": F, "ft-brc": F},
             "the dropper runs pure Python after the drop (the grace period "
             "of the v2 series was never noticed there: defect A)"),
    "chain": (["--case", "chain"],
              {"gil": F, "ft": R, "ft-upstream": F, "ft-brc": F},
              "a dead graph: each freed object drops the next one, also "
              "the blocked owner's"),
    "pauses": (["--case", "pauses", "--trials", str(2 * TRIALS)],
               {"gil": F, "ft": R, "ft-upstream": L, "ft-brc": F},
               "drops while another thread stops the world in a loop: an "
               "owner suspended by a pause is helped after it (defect C "
               "of the v2 series)"),
    "site": (["--case", "site", "--trials", "5"],
             {"gil": "dropper, at the drop", "ft": "owner, once awake",
              "ft-upstream": "dropper, at the drop",
              "ft-brc": "dropper, at the drop"},
             "where a dropped object's weakref callback runs (B): ft-brc "
             "(v5) runs it at the drop, as the backport does; v4 ran it at "
             "the dropper's next check, inside a `with lock:` taken after"),
    "tasks": (["--case", "tasks"],
              {"gil": F, "ft": R, "ft-upstream": F, "ft-brc": F},
              "20,000 finished asyncio Tasks freed off their thread (D): "
              "the cost against the owner's own is reported"),
    "upstream-test": (["--case", "upstream-test", "--trials", "5"],
                      {"gil": "passes", "ft": "fails",
                       "ft-upstream": "passes", "ft-brc": "passes"},
                      "gh-157838's own test (test_gc), restated: an object "
                      "of a parked owner is gone at the drop (v4 freed it "
                      "at the dropper's next check instead)"),
}
PROPERTIES["busy"] = (
    ["--case", "busy", "--trials", str(2 * TRIALS)],
    {"gil": F, "ft": R, "ft-upstream": L, "ft-brc": F},
    "review B: the dropper blocks right after a drop that landed while the "
    "owner spun; the newest thread is in a long C call, the main thread "
    "runs pure Python: who merges, and how long after the drop")
for kind, wait in (("event", "Event.wait()"), ("lock", "lock.acquire()")):
    PROPERTIES["handoff-" + kind] = (
        ["--case", "handoff-" + kind, "--trials", str(3 * TRIALS)],
        {"gil": F, "ft": R, "ft-upstream": L, "ft-brc": F},
        "the owner hands over and at once waits in %s: a drop while it "
        "spins attached before it parks is left to it" % wait)

# reentry.py rows: (key in its result, {flavour: expected}, why); one run of
# the script per flavour serves both rows.
ALL, LOSES, FREED = "runs every finalizer", "loses finalizers", "freed"
REENTRY = {
    "stream": ("stream", {"gil": ALL, "ft": LOSES, "ft-upstream": LOSES,
                          "ft-brc": ALL},
               "issue 46: 100,000 objects of an owner that runs Python, "
               "dropped one at a time, with a __del__ and with a weakref "
               "callback: stock and the fix enter the merge again inside "
               "each finalizer until RecursionError (timing-dependent: "
               "reported there, not asserted); ft-brc bounds it (0010)"),
    "wait": ("wait", {"ft": FREED, "ft-upstream": FREED, "ft-brc": FREED},
             "review 5's A: a destructor that its owner's merge runs waits "
             "(polling; a chain of two; a permit, a Lock, in short waits) for "
             "another object of the same owner, dropped meanwhile: freed at "
             "the owner's next check (v5 waited in vain); gil frees it in "
             "the dropping thread, not applicable"),
}
_REENTRY_RUNS = {}

RESULTS = {}   # (row, flavour) -> (expected, observed, details)


def blocking_outcome(r):
    """'freed' or 'retained' for one run of blocking.py / mp_queue.py."""
    assert r["owner_blocked_at_measure"], "void: the owner woke\n%s" % r
    assert r["freed_after_wake"] == r["total"], "leaked\n%s" % r
    freed = r["freed_while_blocked"]
    if r.get("no_wait"):
        # the owner may free its queue itself before it parks
        freed += r["freed_by_owner_before_measure"]
    return "freed" if freed == r["total"] else "retained"


def summarise(counts, trials):
    if counts.get("freed", 0) == trials:
        return F
    if counts.get("retained", 0) == trials:
        return R
    return L


def run_properties(python, args):
    cmd = [str(python), str(SCENARIO_DIR / "properties.py"), *args]
    p = subprocess.run(cmd, env=clean_env(), capture_output=True,
                       text=True, timeout=TIMEOUT * 3, cwd=str(ROOT))
    assert p.returncode == 0, "%s\n%s%s" % (" ".join(cmd), p.stdout, p.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1])


def property_outcome(row, r):
    """The observed outcome of a properties.py row and its details."""
    if row == "upstream-test":
        counts = r["freed_at_the_drop_of_100"]
        return ("passes" if all(counts) else "fails"), counts
    if row == "site":
        sites = r["sites"]
        return (next(iter(sites)) if len(sites) == 1 else "mixed"), sites
    if "trials_left_behind" in r:
        assert r["freed_after_wake"], "leaked\n%s" % r
        left, trials = r["trials_left_behind"], r["trials"] - r["void_trials"]
        counts = {"retained": left, "freed": trials - left,
                  "void": r["void_trials"]}
        for key in ("objects_left", "free_latency_ms_median",
                    "free_latency_ms_max"):
            if key in r:
                counts[key] = r[key]
        return summarise(counts, trials), counts
    assert r["owner_blocked_at_measure"], "void: the owner woke\n%s" % r
    assert r["freed_after_wake"] == r["total"], "leaked\n%s" % r
    details = {k: r.get(k) for k in ("freed_while_blocked", "all_freed_after_s",
                                     "own_free_s", "on_behalf_s", "ratio")
               if k in r}
    if r["freed_while_blocked"] == r["total"]:
        return F, details
    return (R if r["freed_while_blocked"] == 0 else L), details


def check(row, flavour, expected, observed, details):
    RESULTS[(row, flavour)] = (expected, observed, details)
    if expected is None or expected == L:
        return   # reported, not asserted
    assert observed == expected, "%s on %s: expected %s, got %s (%s)" % (
        row, flavour, expected, observed, details)


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    rows = list(BLOCKING) + list(PROPERTIES) + list(REENTRY)
    why = {**{k: v[3] for k, v in BLOCKING.items()},
           **{k: v[2] for k, v in PROPERTIES.items()},
           **{k: v[2] for k, v in REENTRY.items()}}
    lines = ["# make compare (%s line)" % LINE, "",
             "Cell: observed outcome (expected, if different or racy); "
             "details below the table.", "",
             "| row | " + " | ".join(PREFIX + f for f in COLUMNS) + " |",
             "|---" * (len(COLUMNS) + 1) + "|"]
    for row in rows:
        cells = []
        for f in COLUMNS:
            if (row, f) not in RESULTS:
                cells.append("-")
                continue
            exp, obs, _ = RESULTS[(row, f)]
            cells.append(obs if exp in (None, obs) else
                         "%s (expected %s)" % (obs, exp))
        lines.append("| %s | %s |" % (row, " | ".join(cells)))
    lines += ["", "## Details", ""]
    for row in rows:
        lines.append("- **%s**%s" % (row, ": " + why[row] if why[row] else ""))
        for f in COLUMNS:
            if (row, f) in RESULTS:
                lines.append("  - %s: %s" % (PREFIX + f, json.dumps(
                    RESULTS[(row, f)][2], sort_keys=True)))
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("flavour", COLUMNS)
@pytest.mark.parametrize("row", list(BLOCKING))
def test_blocking(row, flavour):
    script, trials, expect, _ = BLOCKING[row]
    python = dist_python(PREFIX + flavour)
    deadline = {F: 5.0, R: 0.5, L: 1.0}[expect[flavour]]
    counts = {}
    for _ in range(trials):
        r = run_scenario(python, script, [], {}, deadline)
        o = blocking_outcome(r)
        counts[o] = counts.get(o, 0) + 1
    check(row, flavour, expect[flavour], summarise(counts, trials), counts)


@pytest.mark.parametrize("flavour", COLUMNS)
@pytest.mark.parametrize("row", list(PROPERTIES))
def test_property(row, flavour):
    args, expect, _ = PROPERTIES[row]
    r = run_properties(dist_python(PREFIX + flavour), args)
    observed, details = property_outcome(row, r)
    check(row, flavour, expect[flavour], observed, details)


def reentry_outcome(row, r):
    """The observed outcome of a reentry.py row and its details."""
    if row == "stream":
        runs = r["stream_del"] + r["stream_callback"]
        assert all(x["ended"] for x in runs), "the owner never ended\n%s" % r
        details = {"runs_losing": sum(x["lost"] > 0 for x in runs),
                   "runs": len(runs), "lost_max": max(x["lost"] for x in runs),
                   "max_depth": max(x["max_depth"] for x in runs)}
        return (LOSES if details["runs_losing"] else ALL), details
    waits = {k: v for k, v in r.items() if k.startswith("wait_")}
    kept = sum(v["kept"] for v in waits.values())
    late = sorted(x for v in waits.values() for x in v["late_s"])
    details = {"kept": kept, "late_ms_median": round(late[len(late) // 2] * 1e3, 3),
               "late_ms_max": round(late[-1] * 1e3, 3)} if late else {"kept": kept}
    return (FREED if not kept else "waits in vain"), details


@pytest.mark.parametrize("flavour", COLUMNS)
@pytest.mark.parametrize("row", list(REENTRY))
def test_reentry(row, flavour):
    _, expect, _ = REENTRY[row]
    if flavour not in expect:
        pytest.skip("not applicable on %s" % flavour)
    if flavour not in _REENTRY_RUNS:
        cmd = [str(dist_python(PREFIX + flavour)), str(SCENARIO_DIR / "reentry.py"),
               "--objects", "100000", "--trials", str(max(TRIALS // 3, 1))]
        p = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True,
                           timeout=TIMEOUT * 5, cwd=str(ROOT))
        assert p.returncode == 0, "%s\n%s%s" % (" ".join(cmd), p.stdout, p.stderr)
        _REENTRY_RUNS[flavour] = json.loads(p.stdout.strip().splitlines()[-1])
    observed, details = reentry_outcome(row, _REENTRY_RUNS[flavour])
    # stock and the fix lose finalizers only when the two threads interleave
    check(row, flavour, None if expect[flavour] == LOSES else expect[flavour],
          observed, details)
