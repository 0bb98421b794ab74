"""Cross-flavour BRC scenarios.

Each scenario script under tests/scenarios/ is run by the interpreter under
test and prints one JSON line; see tests/scenarios/_harness.py for what the
fields mean.  In every scenario an owner thread creates two touched 64 MiB
mmap-backed payloads, hands them to another thread and blocks; the other
thread waits until the owner is really parked (sleeping in the kernel, hence
detached), drops the last references and looks whether the objects were
finalised -- and the memory returned -- while the owner is still blocked.

The "-nowait" scenarios drop as soon as the owner has gone past its last
eval breaker check before the blocking call, without waiting until it is
parked, so the drop often lands while the owner is still attached (spinning
on the lock before it parks); they then wait until the owner is parked and
judge the same way.  ft-brc must free these too: a drop that lands while
the owner spins attached sets its bit and tries again, and the owner, if it
then parks without a check, asks for help as it detaches (0004); or it
frees them itself at a check before it parks.  So there, objects freed by
the owner before the measurement count as freed (the owner is blocked at
the measurement and never woke up in between).

Expected outcomes: EXPECTED below, the one table of them per flavour and
knob setting; tests/compare/compare_scenarios.py (`make compare`, which
adds ft-upstream) reads it too.

"retains" is only claimed for a window of RETAIN_WINDOW seconds while the
owner is verifiably still blocked; afterwards the owner is released and
everything must be freed (held, not leaked).  On ft-brc the scenarios also
record sys._brc_stats() before the drop, at the measurement and at the end:
"frees" must show the dropped objects merged on behalf of the blocked owner
and nothing left queued; "retains" must show no merge on behalf, and with
threshold 5 the dropped objects still queued.  Interpreters that
are not built yet are skipped (conftest.dist_python).
"""

import json
import subprocess

import pytest

from conftest import FLAVOURS, MAIN_FLAVOURS, ROOT, clean_env, dist_python

SCENARIO_DIR = ROOT / "tests" / "scenarios"

MiB = 1 << 20
TIMEOUT = 120            # per subprocess; a scenario normally takes < 4 s
FREE_DEADLINE = 5.0      # "frees": finalisers must all run within this
RETAIN_WINDOW = 0.5      # "retains": measured this long after the drop
FREED_MARGIN = 16 * MiB  # RSS back within this of the pre-allocation baseline
RETAINED_MIN = 100 * MiB # 2 x 64 MiB payloads still resident

KNOB = "PYTHON_BRC_MERGE_THRESHOLD"

# The scenarios: id -> script in tests/scenarios and its arguments.
# blocking.py drops once the owner is parked; with --no-wait as soon as it
# is past its last eval breaker check, so the drop may land while it still
# spins attached before it parks.
BLOCKING_KINDS = ["event", "condition", "sleep", "lock", "select", "queue"]
NO_WAIT_KINDS = ["event", "condition", "lock", "queue"]
SCENARIOS = {kind: ["blocking.py", "--kind", kind] for kind in BLOCKING_KINDS}
SCENARIOS["mp-queue"] = ["mp_queue.py"]
SCENARIOS.update({kind + "-nowait": ["blocking.py", "--kind", kind, "--no-wait"]
                  for kind in NO_WAIT_KINDS})

F, R, L = "frees", "retains", "leaves behind"   # L: racy, some trials retain

# The expected outcome of every scenario on each configuration, the one
# table of them (compare/compare_scenarios.py reads it too, through
# expected()): (scenarios that drop once the owner is parked, -nowait ones).
# CPython main's configurations (main-ft, main-ft-brc-env0...) expect what
# their 3.14 namesakes do.
EXPECTED = {
    "gil": (F, F),           # plain refcounting
    "ft": (R, R),            # the BRC bug this project fixes
    # upstream's fix alone: a drop that lands while the owner spins
    # attached is left to it
    "ft-upstream": (F, L),
    "ft-brc": (F, F),        # the fix; the owner asks for help as it parks (0004)
    "ft-brc-env1": (F, F),   # threshold 1 is the default
    "ft-brc-env0": (R, R),   # threshold 0 turns the fix off
    # every scenario drops 4 objects: a queue below the threshold is left
    # to its owner, as in stock
    "ft-brc-env5": (R, R),
}


def expected(scenario, config):
    """EXPECTED's outcome of a scenario (a key of SCENARIOS) on a
    configuration (a key of EXPECTED, or main- and one)."""
    parked, no_wait = EXPECTED[config.removeprefix("main-")]
    return no_wait if scenario.endswith("-nowait") else parked


# The configurations run here: id -> (flavour, extra env).  The knob rows
# are ft-brc only: stock gil/ft builds silently ignore an unknown PYTHON_*
# variable, so such rows would prove nothing.
CONFIGS = {
    "gil": ("gil", {}),
    "ft": ("ft", {}),
    "ft-brc": ("ft-brc", {}),
    "ft-brc-env1": ("ft-brc", {KNOB: "1"}),
    "ft-brc-env0": ("ft-brc", {KNOB: "0"}),
    "ft-brc-env5": ("ft-brc", {KNOB: "5"}),
    # The same on CPython main: stock retains, the main series frees.
    "main-ft": ("main-ft", {}),
    "main-ft-brc": ("main-ft-brc", {}),
    "main-ft-brc-env0": ("main-ft-brc", {KNOB: "0"}),
}

# sys._brc_stats() counters of merges that do not need the owner to run
MERGED_FOR_BLOCKED = ("merged_on_behalf",)


def run_scenario(python, script, options, env, deadline):
    cmd = [str(python), *options, str(SCENARIO_DIR / script[0]), *script[1:],
           "--deadline", str(deadline)]
    # clean_env, not -I/-E: they would hide the knob
    proc = subprocess.run(cmd, env=clean_env(env), capture_output=True,
                          text=True, timeout=TIMEOUT, cwd=str(ROOT))
    assert proc.returncode == 0, (
        "%s exited %d\nstdout:\n%s\nstderr:\n%s"
        % (" ".join(cmd), proc.returncode, proc.stdout, proc.stderr))
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, "expected one JSON line, got:\n" + proc.stdout
    return json.loads(lines[0])


def mib(n):
    return "%.1f MiB" % (n / MiB)


def check_brc_stats(r, expect, below_threshold, no_wait, report):
    """ft-brc: the counters around the drop agree with the outcome."""
    for key in ("brc_stats_before", "brc_stats_after", "brc_stats_end"):
        assert key in r, "%s missing on ft-brc\n%s" % (key, report)
    before, after = r["brc_stats_before"], r["brc_stats_after"]
    merged = sum(after[k] - before[k] for k in MERGED_FOR_BLOCKED)
    if expect == F:
        if no_wait:
            # The owner may have merged them itself before it parked; then
            # the payloads' buffers go with their wrappers, unqueued: all
            # that was queued must be merged.
            merged += after["merged_by_owner"] - before["merged_by_owner"]
            enqueued = after["enqueued"] - before["enqueued"]
            assert enqueued > 0 and merged >= enqueued, (
                "%d objects queued, %d merged\n%s"
                % (enqueued, merged, report))
        else:
            assert merged >= r["total"], (
                "%s moved by %d only, %d objects dropped\n%s"
                % (" + ".join(MERGED_FOR_BLOCKED), merged, r["total"],
                   report))
        assert after["queue_length"] == 0, (
            "objects still queued while the owner was blocked\n" + report)
    else:
        assert merged == 0, (
            "merges for a blocked owner although the threshold is %s\n"
            % ("5" if below_threshold else "0") + report)
        if below_threshold:
            # (The payloads' buffers are freed with their wrappers: fewer
            # objects than "total" are queued.)
            assert after["queue_length"] > 0, (
                "the dropped objects are not queued to the blocked owner\n"
                + report)
    assert r["brc_stats_end"]["queue_length"] == 0, (
        "objects still queued at the end\n" + report)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("config", list(CONFIGS))
def test_scenario(config, scenario):
    flavour, env = CONFIGS[config]
    assert flavour in FLAVOURS + MAIN_FLAVOURS
    expect = expected(scenario, config)
    python = dist_python(flavour)
    deadline = FREE_DEADLINE if expect == F else RETAIN_WINDOW
    below_threshold = env.get(KNOB) == "5"
    r = run_scenario(python, SCENARIOS[scenario], [], env, deadline)
    report = json.dumps(r, indent=1, sort_keys=True)

    # the right kind of interpreter, and a measurement that is valid
    assert r["gil_enabled"] == (flavour == "gil"), report
    assert r["free_threaded_build"] == (flavour != "gil"), report
    assert r["total"] == 4, report  # 2 wrappers + 2 buffers
    assert r["rss_after_alloc"] - r["rss_before"] >= RETAINED_MIN, report

    # Finalisers are only counted when they ran outside the owner thread, so
    # the count is meaningful even if the owner woke up meanwhile; the RSS
    # reading is only meaningful while it is still blocked.
    held = r["rss_after_drop"] - r["rss_before"]
    no_wait = r.get("no_wait", False)
    if r["freed_by_owner_before_measure"]:
        # --no-wait on ft-brc: the drop landed while the owner was still
        # attached on its way to park, and it freed them at a check before
        # it parked.  Otherwise it should not happen: the owner is parked
        # when the objects are dropped.
        report += ("\nNOTE: %d objects were freed by the owner thread before"
                   " the measurement" % r["freed_by_owner_before_measure"])
    freed = r["freed_while_blocked"]
    if no_wait and expect == F:
        freed += r["freed_by_owner_before_measure"]
    if expect == F:
        assert freed == r["total"], (
            "objects not freed while the owner was blocked\n" + report)
    else:
        assert r["freed_while_blocked"] == 0, (
            "objects freed although the owner was blocked\n" + report)
    assert r["owner_blocked_at_measure"], (
        "owner was not blocked any more when measured -- void\n" + report)
    if expect == F:
        assert held <= FREED_MARGIN, (
            "RSS still %s above baseline after the drop\n%s"
            % (mib(held), report))
    else:
        assert held >= RETAINED_MIN, (
            "only %s held while the owner was blocked\n%s"
            % (mib(held), report))
        if not below_threshold:
            # (With threshold 5, objects that other threads queue to the
            # owner as it wakes can bring its queue to 5, and another
            # thread may then merge and free all of them on its behalf.)
            assert r["freed_by_owner"] == r["total"], (
                "expected the owner to free everything once awake\n"
                + report)

    # either way: once the owner has woken up, everything is gone
    assert r["freed_after_wake"] == r["total"], (
        "objects leaked (not freed even after the owner woke)\n" + report)
    after = r["rss_after_wake"] - r["rss_before"]
    assert after <= FREED_MARGIN, (
        "RSS still %s above baseline after wake\n%s" % (mib(after), report))

    if flavour in ("ft-brc", "main-ft-brc"):
        check_brc_stats(r, expect, below_threshold, no_wait, report)
    else:
        assert "brc_stats_after" not in r, report
