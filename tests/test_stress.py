"""Stress run: tests/stress/brc_stress.py under the interpreter under test.

The script (see its docstring) runs worker, native (pthread + PyGILState),
short-lived and forked threads that hand objects to each other while their
owners block in many ways, runs child interpreters that exit with owners
blocked and queues full, and then checks that every object it created was
finalised exactly once.  It prints one JSON line (--json); this test judges
it.

test_mix runs tests/stress/mix.py (see its docstring): a seeded mix of
drops, pauses, forks, exits, asyncio Tasks and subinterpreters, one process
per part, each with a deadline; a failure names its seed and the command
that replays it.  On a patched flavour (sys._brc_stats()) the threshold-1
run must also free a blocked owner's objects dropped during pauses
(--expect-prompt); stock ft and ft-upstream are held only to what they have:
finalizers they lose to a re-entered merge (RecursionError; 0010 fixes it)
are reported with their count, not judged.

Environment:
  BRC_MERGE_STRESS_SECONDS   duration of the run (default 60)
  BRC_MERGE_STRESS_FLAVOURS  comma list of flavours to run (default
                             "ft-brc,main-ft-brc": the patched build of each line;
                             e.g. "ft-brc,ft-brc-debug,ft,gil")
  BRC_MERGE_MIX_SECONDS      the mix's budget (default 30: about 45 s a flavour)
  BRC_MERGE_MIX_FLAVOURS     its flavours (default ft-brc; make stress: ft, ft-upstream, ft-brc)
  BRC_MERGE_MIX_SEED         its seed (default: a new one, printed on failure)
Flavours that are not built are skipped (conftest.dist_python).
"""

import json
import os
import subprocess

import pytest

from conftest import ROOT, dist_python

STRESS = ROOT / "tests" / "stress" / "brc_stress.py"
SECONDS = float(os.environ.get("BRC_MERGE_STRESS_SECONDS") or 60)
STRESS_FLAVOURS = tuple(
    f.strip() for f in (os.environ.get("BRC_MERGE_STRESS_FLAVOURS") or "ft-brc,main-ft-brc").split(",")
    if f.strip())
MIX = ROOT / "tests" / "stress" / "mix.py"
MIX_SECONDS = float(os.environ.get("BRC_MERGE_MIX_SECONDS") or 30)
MIX_FLAVOURS = tuple(
    f.strip() for f in (os.environ.get("BRC_MERGE_MIX_FLAVOURS") or "ft-brc").split(",")
    if f.strip())
# Longer than the script's own watchdog (duration*3+60), which dumps every
# thread's traceback on a hang; this only catches a hang of the watchdog.
SUBPROCESS_TIMEOUT = SECONDS * 4 + 120


def _text(data):
    if data is None:
        return ""
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return data


def _tail(text, lines=120):
    return "\n".join(_text(text).splitlines()[-lines:])


def _report(cmd, returncode, stdout, stderr):
    return ("command: %s\nreturncode: %r\n--- stderr (tail) ---\n%s\n--- stdout (tail) ---\n%s"
            % (" ".join(cmd), returncode, _tail(stderr), _tail(stdout, 5)[-4000:]))


def _summary(r):
    """The result in a few lines: what failed first, then the counts."""
    forks = [{k: f.get(k) for k in ("n", "exitcode", "timed_out", "report")} for f in r["forks"]]
    runs = [{k: s.get(k) for k in ("n", "returncode", "ok", "threshold", "timed_out", "report")}
            for s in r["shutdown_runs"]]
    lines = ["failures:"] + ["  - " + f.replace("\n", "\n    ")[:3000] for f in r["failures"]]
    for key in ("seed", "created", "finalised", "double_finalised", "leaked", "leaked_sample",
                "native_threads", "short_lived_threads", "blocks", "brc_stats_delta",
                "brc_accounting", "hung_threads"):
        lines.append("%s: %s" % (key, json.dumps(r.get(key), sort_keys=True)))
    lines.append("forks: %s" % json.dumps(forks, sort_keys=True))
    lines.append("shutdown_runs: %s" % json.dumps(runs, sort_keys=True))
    return "\n".join(lines)


@pytest.mark.timeout(SUBPROCESS_TIMEOUT + 120)
@pytest.mark.parametrize("flavour", STRESS_FLAVOURS)
def test_stress(flavour):
    python = dist_python(flavour)
    seconds = ("%g" % SECONDS)
    cmd = [str(python), str(STRESS), "--duration", seconds, "--json"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT,
                           stdin=subprocess.DEVNULL, cwd=str(ROOT))
    except subprocess.TimeoutExpired as exc:
        pytest.fail("stress run did not finish within %.0f s\n%s" % (
            SUBPROCESS_TIMEOUT, _report(cmd, None, exc.stdout, exc.stderr)))
    report = _report(cmd, p.returncode, p.stdout, p.stderr)

    lines = [line for line in p.stdout.splitlines() if line.strip()]
    if len(lines) != 1:
        pytest.fail("expected exactly one JSON line on stdout, got %d\n%s" % (len(lines), report))
    try:
        r = json.loads(lines[0])
    except ValueError:
        pytest.fail("stdout is not JSON\n" + report)
    report = "--- result ---\n%s\n%s" % (_summary(r), report)

    if p.returncode != 0 or not r["ok"]:
        pytest.fail("stress run failed (exit %r)\n%s" % (p.returncode, report))

    # the right interpreter, and a run that really did something
    info = r["interpreter"]
    assert info["gil_enabled"] == (flavour == "gil"), report
    # (the sanitizer flavours are --with-pydebug builds too)
    assert info["py_debug"] == flavour.endswith(("-debug", "-tsan", "-asan")), report
    assert r["created"] > 0 and r["blocks"], report
    # every kind of blocking the run listed ran, a few times at least; the
    # series' builds list the second thread state (0009's hazard)
    assert set(r["kinds"]) <= set(r["blocks"]), report
    assert all(r["blocks"][k] >= 3 for k in r["kinds"]), report
    if info["has_brc_stats"]:
        assert "new_tstate" in r["kinds"], report
    assert "detach_attach" in r["kinds"], report
    assert r["short_lived_threads"] > 0, report
    if info["ctypes_libc"] and not info.get("tsan"):      # (TSan: no native threads)
        assert r["native_threads"] > 0, report

    # every object finalised exactly once
    assert r["created"] == r["finalised"], report
    assert r["double_finalised"] == 0, report
    assert r["leaked"] == 0, report

    # forks: all requested forks happened and every child exited 0 (TSan: no forks)
    assert len(r["forks"]) == r["forks_requested"], report
    if not info.get("tsan"):
        assert r["forks_requested"] > 0, report
    for fork in r["forks"]:
        assert fork["exitcode"] == 0 and fork["ok"], report

    # shutdown with owners blocked: every child interpreter exited cleanly
    assert r["shutdown_runs"], report
    for run in r["shutdown_runs"]:
        assert run["returncode"] == 0 and run["ok"], report

    # on patched builds: merges for blocked owners really happened
    if info["has_brc_stats"]:
        delta = r["brc_stats_delta"]
        assert delta["merged_on_behalf"] > 0, "no merge on behalf of a blocked owner\n" + report
        assert r["brc_accounting"]["ok"], report
        assert delta["queue_length"] == 0, report


def _mix_summary(r):
    lines = ["seed %s" % r["seed"]]
    for run in r["runs"]:
        lines.append("%-8s seed %-10s threshold %-4s %6.1f s  %s%s" % (
            run["kind"], run["seed"], run["threshold"], run["seconds"],
            ("ok" if not run.get("known_defects") else
             "not judged, a known stock/upstream defect: %s" % run["known_defects"])
            if run["ok"] else "FAILED %s\n    replay: %s\n    stderr: %s" % (
                run["failures"], run["replay"], run.get("stderr_file")),
            "" if run["ok"] else "\n" + run.get("stderr_tail", "")[-3000:]))
        if run.get("held") or run.get("seen_late"):
            lines.append("         sentinel: %d rounds held stopped (not counted), up to %.2f s;"
                         " %d freed in time, seen late" % (len(run.get("held") or []),
                                                          max(run.get("held") or [0]),
                                                          run.get("seen_late", 0)))
    return "\n".join(lines)


@pytest.mark.timeout(MIX_SECONDS * 5 + 400)
@pytest.mark.parametrize("flavour", MIX_FLAVOURS)
def test_mix(flavour):
    python = dist_python(flavour)
    patched = subprocess.run([str(python), "-c", "import sys; print(hasattr(sys, '_brc_stats'))"],
                             capture_output=True, text=True).stdout.strip() == "True"
    cmd = [str(python), str(MIX), "--seconds", "%g" % MIX_SECONDS, "--json"]
    if patched:
        cmd.append("--expect-prompt")
    if os.environ.get("BRC_MERGE_MIX_SEED"):
        cmd += ["--seed", os.environ["BRC_MERGE_MIX_SEED"]]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=MIX_SECONDS * 5 + 300,
                           stdin=subprocess.DEVNULL, cwd=str(ROOT))
    except subprocess.TimeoutExpired as exc:
        pytest.fail("the mix's supervisor did not finish\n" + _report(cmd, None, exc.stdout,
                                                                      exc.stderr))
    lines = [line for line in p.stdout.splitlines() if line.strip()]
    try:
        r = json.loads(lines[-1])
    except (IndexError, ValueError):
        pytest.fail("no JSON result\n" + _report(cmd, p.returncode, p.stdout, p.stderr))
    report = _mix_summary(r)
    print(report)       # held and seen-late rounds of a passing run, under -rA
    if not r["ok"]:     # the supervisor's own stderr has the stacks of a hung part
        report += "\n--- the supervisor's stderr (tail) ---\n" + _tail(p.stderr)
    assert r["ok"] and p.returncode == 0, report
    # the re-entered merge's shapes ran (judged inside; on ft and
    # ft-upstream the stream's lost finalizers are reported, not judged)
    reentry = [run for run in r["runs"] if run["kind"] == "reentry"]
    assert len(reentry) == 1 and len(reentry[0]["shapes"]) == 5, report
    if patched:
        assert not reentry[0]["known_defects"], report
    # the second-thread-state shapes ran: both where the series' probe is,
    # the reused id everywhere (ft-upstream's abort there is not judged)
    twins = [run for run in r["runs"] if run["kind"] == "twins"]
    assert len(twins) == 1, report
    if patched:
        shapes = twins[0]["shapes"]
        assert all(shapes[s]["run"] and shapes[s]["trials"] > 0
                   for s in ("swapped", "reused-id")), report
    mains = [run for run in r["runs"] if run["kind"] == "main"]
    assert mains and all(run["created"] > 0 and run["sentinel_rounds"] > 0 for run in mains), report
    if patched:
        first = mains[0]
        assert first["threshold"] == 1 and first["left_behind"] == 0, report
        assert first["brc_stats"]["merged_on_behalf"] > 0, report


# A leak of plain objects, that no finalizer counts: the owners keep every
# container's payload list.  The memory check must fail on it, and pass without it.
LEAK = """
import runpy, sys
mix = runpy.run_path(sys.argv[1], run_name="mix_leak")
kept, make = [], mix["Mix"].make_batch
def leaky(self, rng, loop, refs):
    batch = make(self, rng, loop, refs)
    if isinstance(batch, list) and batch and isinstance(batch[0], mix["Obj"]):
        kept.append(batch[0].payload)
    return batch
if sys.argv[2] == "leak":
    mix["Mix"].make_batch = leaky
r = mix["child_main"](404, 4, False, forks=False)
print(r["blocks_left"], r["failures"])
"""


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", ["leak", "none"])
def test_mix_memory_check(mode):
    python = dist_python(MIX_FLAVOURS[0])
    counted = subprocess.run([str(python), "-c", "import sys; print(sys.getallocatedblocks())"],
                             capture_output=True, text=True).stdout.strip()
    if counted == "0":
        pytest.skip("%s allocates with malloc (ASan), which counts no blocks: the mix"
                    " does not judge memory there" % MIX_FLAVOURS[0])
    cmd = [str(python), "-c", LEAK, str(MIX), mode]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=150,
                       stdin=subprocess.DEVNULL, cwd=str(ROOT))
    report = _report(cmd, p.returncode, p.stdout, p.stderr)
    assert p.returncode == 0 and p.stdout.strip(), report
    left, failures = p.stdout.strip().splitlines()[-1].split(" ", 1)
    if mode == "leak":
        assert "live blocks at the end" in failures, report
        assert int(left) > 100_000, report
    else:
        assert failures == "[]", report
