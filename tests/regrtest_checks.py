#!/usr/bin/env python3
"""Checking runs of CPython's own test suite on the built flavours.

Run by the project's venv python (make tsan / refleak / parity call it); the
interpreter under test is dist/<flavour>/bin/python3.

  tsan     CPython tests under ThreadSanitizer.  Every TSan report is written
           to a log file (TSAN_OPTIONS log_path) and counted; the run passes
           only with zero reports.  Suppressions: CPython's own list for the
           free-threaded build (Tools/tsan/suppressions_free_threading.txt of
           the flavour's source tree, what CPython's CI uses) plus
           tests/tsan/suppressions.txt, the project's list, where an entry is
           allowed only for a report that stock ft-tsan gives as well (each
           entry names that evidence).  Reports are symbolized with the
           flavour's own LLVM (llvm_symbolizer(); Debian package llvm-16), and
           a self-check proves it before the tests run.
  asan     CPython tests, then the stress run (tests/test_stress.py), under
           AddressSanitizer.  Every report is written to a log file
           (ASAN_OPTIONS log_path) and counted; the run passes only with zero
           reports.  ASan has no suppressions for memory-access reports, so
           the free-threaded build's deliberate reads of possibly freed
           objects are excluded at compile time by a checking-only patch
           (patches/3.14/checking/asan.series, applied to the -asan flavours
           only).  A self-check first proves that reports are produced (a
           heap-use-after-free, and a use after free of a mimalloc block,
           which only a build with MI_TRACK_ASAN reports) and symbolized;
           then tests/asan/optimistic_reads.py provokes those reads (it
           reports on a build without the checking patch).
  refleak  regrtest -R on a --with-pydebug build: no leaks, no assertion
           failures.
  parity   the same tests on two flavours (default ft and ft-brc); the sets
           of failing test cases (from regrtest's JUnit XML) must be equal.

Each command prints a short report and exits 0 on success, 1 on a failed
check, 2 on bad usage (e.g. a flavour that is not built).
"""

import argparse
import functools
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from conftest import ROOT, built_python, clean_env, dist_dir  # noqa: E402  (tests/ is this script's dir)

PROJECT_TSAN_SUPPRESSIONS = ROOT / "tests" / "tsan" / "suppressions.txt"
OPTIMISTIC_READS = ROOT / "tests" / "asan" / "optimistic_reads.py"

# The series' own tests, and the free-threading suite around them.
TSAN_TESTS = ["test_free_threading"]
ASAN_TESTS = TSAN_TESTS
REFLEAK_TESTS = ["test_free_threading.test_gc"]
# The stdlib subset of issue 7, with one slice of the multiprocessing suite
# (the "processes" start-method tests of forkserver: queues, pools, managers),
# and test_asyncio, whose Task deallocation patch 0005 changes.
PARITY_TESTS = ["test_free_threading", "test_capi", "test_threading", "test_gc",
                "test_weakref", "test_sys", "test_queue", "test_asyncio",
                "test_concurrent_futures",
                "test_multiprocessing_forkserver.test_processes"]


def python_of(flavour):
    py = built_python(flavour)
    if py is None:
        sys.exit(f"error: flavour {flavour} is not built (no bin/python3 in "
                 f"{dist_dir() / flavour}); build it with: ./build.sh {flavour}")
    return py


def cache_dir():
    """build.sh's cache directory, as build.sh itself resolves it."""
    out = subprocess.run([str(ROOT / "build.sh"), "--print-config"], check=True,
                         capture_output=True, text=True).stdout
    return Path(re.search(r"(?m)^BRC_MERGE_CACHE=(.*)$", out).group(1))


# ------------------------------------------------------- symbolization

# Sanitizer reports name functions only through an external llvm-symbolizer,
# and it must come from the LLVM of the clang that built the flavour (Debian's
# default llvm-symbolizer is LLVM 14's; the TSan runtime is clang-16's).  An
# unsymbolized report has `<null>` frames, and suppressions, which match
# function names, then match nothing.  BRC_MERGE_LLVM_SYMBOLIZER overrides
# the path.
SYMBOLIZER_ENV = "BRC_MERGE_LLVM_SYMBOLIZER"


@functools.lru_cache(maxsize=None)
def llvm_symbolizer(python):
    """/usr/lib/llvm-N/bin/llvm-symbolizer for the clang-N that built PYTHON;
    exits with the install command if it is missing or does not run."""
    cc = subprocess.run([str(python), "-c",
                         "import sysconfig; print(sysconfig.get_config_var('CC'))"],
                        capture_output=True, text=True, env=regrtest_env()).stdout.strip()
    m = re.match(r"(?:\S*/)?clang-(\d+)\b", cc)
    if not m:
        sys.exit(f"error: {python} was not built with a versioned clang (CC={cc!r}); "
                 "the sanitizer flavours are built with clang-N (build.sh)")
    version = m.group(1)
    path = os.environ.get(SYMBOLIZER_ENV) or f"/usr/lib/llvm-{version}/bin/llvm-symbolizer"
    sudo = "" if os.geteuid() == 0 else "sudo "
    fix = (f"install it with: {sudo}apt-get update && {sudo}apt-get install -y llvm-{version} "
           f"(build.sh installs it with the sanitizer flavours' other dependencies)")
    if os.environ.get(SYMBOLIZER_ENV):
        fix = f"{SYMBOLIZER_ENV}={path} is set; unset it or point it at LLVM {version}'s llvm-symbolizer"
    try:
        ok = subprocess.run([path, "--version"], capture_output=True,
                            timeout=60).returncode == 0
    except OSError:
        ok = False
    if not ok:
        sys.exit(f"error: {path} is missing or does not run. Sanitizer reports of "
                 f"{python} (built by {cc}) need LLVM {version}'s symbolizer: without it "
                 "they name no functions and no suppression matches.\n  " + fix)
    return path


def sanitizer_options(python, *options):
    """TSAN_OPTIONS / ASAN_OPTIONS value (the same syntax): OPTIONS plus the
    flavour's own llvm-symbolizer."""
    return " ".join([f"external_symbolizer_path={llvm_symbolizer(python)}", *options])


def regrtest_env(**extra):
    """clean_env() for these runs: the caller's sanitizer options go too (each
    run sets its own), and bytecode is written as in a plain regrtest run
    (PYTHONDONTWRITEBYTECODE makes some tests skip)."""
    return clean_env(extra, drop=("TSAN_", "ASAN_"), write_bytecode=True)


def log(msg):
    print(msg, flush=True)


def run_regrtest(python, args, env, timeout, logfile):
    """Run `python -m test ARGS`, tee-ing its output into LOGFILE."""
    cmd = [str(python), "-m", "test", *args]
    log(f"$ {' '.join(cmd)}")
    start = time.monotonic()
    with open(logfile, "w") as out:
        # In the results directory: regrtest -R writes reflog.txt to the cwd.
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True,
                                stdin=subprocess.DEVNULL,
                                cwd=Path(logfile).parent)
        try:
            for line in proc.stdout:
                out.write(line)
                if not QUIET:
                    sys.stdout.write("  | " + line)
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            out.write(f"\n*** killed after {timeout} s\n")
            log(f"error: regrtest did not finish in {timeout} s; log: {logfile}")
            return 124, time.monotonic() - start
    return proc.returncode, time.monotonic() - start


def tail(path, n=60):
    lines = Path(path).read_text(errors="replace").splitlines()
    return "\n".join(lines[-n:])


def symbolized_frame(reports, frame_pattern):
    """The first stack frame line, in sanitizer reports [(kind, frames,
    text)], that matches `#N <frame_pattern>`, or None: how the self-checks
    tell a symbolized report from one of bare addresses."""
    named = re.compile(rf"(?m)^\s+#\d+ {frame_pattern}.*$")
    return next((m.group(0).strip() for *_, text in reports
                 for m in [named.search(text)] if m), None)


def results_dir(name):
    d = Path(os.environ.get("BRC_MERGE_RESULTS") or ROOT / "tests" / "results") / name
    d.mkdir(parents=True, exist_ok=True)
    return d


# ---------------------------------------------------------------- tsan

TSAN_HEADER = re.compile(r"WARNING: ThreadSanitizer: (.*?)(?: \(pid=\d+\))?$")
FRAME = re.compile(r"^\s+#(\d+) (\S+) ")


def tsan_reports(logdir):
    """[(kind, top frames, text)] for every report in the TSan log files."""
    reports = []
    for f in sorted(Path(logdir).glob("tsan.*")):
        text = f.read_text(errors="replace")
        for block in re.split(r"(?m)^==================\n", text):
            lines = block.splitlines()
            head = next((TSAN_HEADER.search(l) for l in lines
                         if TSAN_HEADER.search(l)), None)
            if not head:
                continue
            frames = []
            for l in lines:
                m = FRAME.match(l)
                if m:
                    frames.append(m.group(2))
                    if len(frames) == 4:
                        break
            reports.append((head.group(1), tuple(frames), block))
    return reports


# The self-check's race must be reported in this function (a frame names it),
# which proves the reports are symbolized.
RACE_FUNCTION = "rangeiter_next"
RACE = """
import threading
it = iter(range(10**6))
def drain():
    for _ in it:
        pass
threads = [threading.Thread(target=drain) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""


def cmd_tsan(args):
    python = python_of(args.flavour)
    src = cache_dir() / "build" / args.flavour / "src"
    upstream = src / "Tools" / "tsan" / "suppressions_free_threading.txt"
    if not upstream.is_file():
        sys.exit(f"error: {upstream} is missing; rebuild with ./build.sh {args.flavour}")
    out = results_dir(f"tsan-{args.flavour}")
    logdir = out / "logs"
    shutil.rmtree(logdir, ignore_errors=True)
    logdir.mkdir()
    # One suppressions file: TSan takes a single path.
    supp = out / "suppressions.txt"
    supp.write_text(upstream.read_text() + "\n# --- tests/tsan/suppressions.txt\n"
                    + PROJECT_TSAN_SUPPRESSIONS.read_text())
    options = [f"log_path={logdir}/tsan", f"suppressions={supp}",
               "handle_segv=0", "second_deadlock_stack=1", "history_size=4"]
    env = regrtest_env(TSAN_OPTIONS=sanitizer_options(python, *options))
    # Self-check: a known data race (a range iterator shared by two threads,
    # gh-129068) must be reported with its function's name, or the interpreter
    # is not instrumented, the log path does not work, or reports are not
    # symbolized (then suppressions match nothing), and "zero reports" or any
    # other count would mean nothing.  No suppressions here: CPython's own
    # list suppresses this race.
    probe = out / "self-check"
    shutil.rmtree(probe, ignore_errors=True)
    probe.mkdir()
    p = subprocess.run([str(python), "-c", RACE], env=regrtest_env(
        TSAN_OPTIONS=sanitizer_options(python, f"log_path={probe}/tsan", "exitcode=0")),
        timeout=600, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    probe_reports = tsan_reports(probe)
    if not probe_reports:
        logs = "".join(f.read_text(errors="replace")[-2000:] for f in sorted(probe.glob("tsan.*")))
        log(f"error: {args.flavour} reported no data race for a known racy snippet "
            f"(exit {p.returncode}); is it built with --with-thread-sanitizer? "
            f"Its output and TSan log ({probe}):\n" + p.stderr[-2000:] + logs)
        return 1
    frame = symbolized_frame(probe_reports, rf"{RACE_FUNCTION}\b")
    if not frame:
        log(f"error: the self-check's known race was reported, but no frame names "
            f"{RACE_FUNCTION}: reports are not symbolized (symbolizer "
            f"{llvm_symbolizer(python)}), so suppressions would match nothing. "
            f"The first report's start ({probe}):\n"
            + "\n".join(probe_reports[0][2].splitlines()[:8]))
        return 1
    log(f"self-check: a known race is reported and symbolized "
        f"({len(probe_reports)} report(s); {frame})")
    tests = args.tests or TSAN_TESTS
    rc, secs = run_regrtest(python, ["-j", str(args.jobs), f"--timeout={args.timeout}",
                                     "--fail-env-changed", *tests],
                            env, args.timeout * 4, out / "regrtest.log")
    reports = tsan_reports(logdir)
    log(f"tsan {args.flavour}: {' '.join(tests)}: regrtest exit {rc} in {secs:.0f} s, "
        f"{len(reports)} ThreadSanitizer report(s); logs in {out}")
    seen = {}
    for kind, frames, _ in reports:
        seen.setdefault((kind, frames), 0)
        seen[(kind, frames)] += 1
    for (kind, frames), n in sorted(seen.items()):
        log(f"  {n:3d}x {kind}: {' <- '.join(frames)}")
    if reports:
        log("first report:\n" + reports[0][2])
    if rc != 0:
        log(tail(out / "regrtest.log"))
    mix_rc = 0
    if args.stress_seconds > 0:
        # the hazard mix (tests/test_stress.py::test_mix), reports counted alike
        (logdir / "mix").mkdir()
        cmd = [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-k", "test_mix",
               str(ROOT / "tests" / "test_stress.py")]
        env = dict(os.environ, BRC_MERGE_MIX_FLAVOURS=args.flavour,
                   BRC_MERGE_MIX_SECONDS=str(args.stress_seconds),
                   TSAN_OPTIONS=sanitizer_options(python, f"log_path={logdir}/mix/tsan",
                                                  *options[1:]))
        with open(out / "mix.log", "w") as f:
            mix_rc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL).returncode
        mix_reports = tsan_reports(logdir / "mix")
        log(f"tsan {args.flavour}: the mix ({args.stress_seconds} s): pytest exit {mix_rc}, "
            f"{len(mix_reports)} ThreadSanitizer report(s); log {out / 'mix.log'}")
        if mix_rc != 0:
            log(tail(out / "mix.log", 80))
        reports += mix_reports
    return 0 if rc == 0 and mix_rc == 0 and not reports else 1


# ---------------------------------------------------------------- asan

ASAN_HEADER = re.compile(r"ERROR: AddressSanitizer: (\S+)")
ASAN_FRAME = re.compile(r"^\s+#(\d+) 0x[0-9a-f]+ in (\S+)")
ASAN_RUNTIME_FRAME = re.compile(r"^(__asan_|__interceptor_|__sanitizer_|___interceptor_)")
ASAN_SEPARATOR = re.compile(r"(?m)^={20,}\n")


def asan_reports(logdir):
    """[(kind, top frames, text)] for every report in the ASan log files under
    LOGDIR (one file per process: asan.<pid>).  The frames are those of the
    faulting access, without the ASan runtime's own (__asan_memcpy ...)."""
    reports = []
    for f in sorted(Path(logdir).rglob("asan.*")):
        text = f.read_text(errors="replace")
        for block in ASAN_SEPARATOR.split(text):
            head = ASAN_HEADER.search(block)
            if not head:
                continue
            frames = []
            for l in block.splitlines()[1:]:
                if not l.strip() and frames:
                    break           # the end of the access's stack
                m = ASAN_FRAME.match(l)
                if m and not ASAN_RUNTIME_FRAME.match(m.group(2)):
                    frames.append(m.group(2))
                    if len(frames) == 4:
                        break
            reports.append((head.group(1), tuple(frames), f"{f.name}:\n{block}"))
    return reports


def report_summary(reports):
    """'  Nx kind: frame <- frame ...' lines, one per distinct report."""
    seen = {}
    for kind, frames, _ in reports:
        seen[(kind, frames)] = seen.get((kind, frames), 0) + 1
    return [f"  {n:3d}x {kind}: {' <- '.join(frames)}"
            for (kind, frames), n in sorted(seen.items())]


# The self-check: each snippet must be reported as KIND, in a report with a
# frame naming FUNCTION (ctypes.string_at() copies the freed block with
# PyBytes_FromStringAndSize(); _ctypes' string_at() itself is a tail call and
# has no frame), which proves the reports are symbolized.  The first is freed by
# libc's free() (ASan's own allocator: any ASan build reports it); the second
# by PyMem_Free(), i.e. mimalloc, which ASan sees only through MI_TRACK_ASAN.
USE_AFTER_FREE = """
import ctypes
lib = {lib}
lib.{malloc}.restype = ctypes.c_void_p
lib.{malloc}.argtypes = [ctypes.c_size_t]
lib.{free}.argtypes = [ctypes.c_void_p]
p = lib.{malloc}(64)
ctypes.memset(p, 0x5a, 64)
lib.{free}(p)
ctypes.string_at(p, 16)
"""
ASAN_SELF_CHECKS = [
    ("heap-use-after-free", "PyBytes_FromStringAndSize",
     USE_AFTER_FREE.format(lib="ctypes.CDLL(None)", malloc="malloc",
                           free="free")),
    ("use-after-poison", "PyBytes_FromStringAndSize",
     USE_AFTER_FREE.format(lib="ctypes.pythonapi", malloc="PyMem_Malloc",
                           free="PyMem_Free")),
]


def asan_options(python, logdir):
    # What CPython's ASan CI job sets (detect_leaks=0: CPython does not free
    # everything at exit, by design; allocator_may_return_null=1: tests that
    # allocate huge sizes expect MemoryError; handle_segv=0: faulthandler's),
    # plus a log file per process and halt_on_error=0 (the flavours are built
    # with -fsanitize-recover=address), so one run lists every report.
    return sanitizer_options(python, f"log_path={logdir}/asan", "detect_leaks=0",
                             "halt_on_error=0", "allocator_may_return_null=1",
                             "handle_segv=0")


def cmd_asan(args):
    python = python_of(args.flavour)
    cflags = subprocess.run([str(python), "-c",
                             "import sysconfig; print(sysconfig.get_config_var('CFLAGS'))"],
                            capture_output=True, text=True, env=regrtest_env()).stdout
    if "-fsanitize=address" not in cflags:
        sys.exit(f"error: {args.flavour} is not built with AddressSanitizer "
                 f"(CFLAGS {cflags.strip()!r}); use --flavour ft-brc-asan or ft-asan")
    for flag in ("-DMI_TRACK_ASAN=1", "-fsanitize-recover=address"):
        if flag not in cflags:
            sys.exit(f"error: {args.flavour} is not built with {flag}; rebuild it with build.sh")
    out = results_dir(f"asan-{args.flavour}")
    logdir = out / "logs"
    shutil.rmtree(logdir, ignore_errors=True)
    (logdir / "regrtest").mkdir(parents=True)
    (logdir / "stress").mkdir()
    (logdir / "optimistic").mkdir()
    # Self-check: known uses after free must be reported with their function's
    # name, or the interpreter is not instrumented (or mimalloc does not tell
    # ASan), the log path does not work, or reports are not symbolized, and
    # "zero reports" would mean nothing.
    probe = out / "self-check"
    shutil.rmtree(probe, ignore_errors=True)
    probe.mkdir()
    for i, (kind, function, code) in enumerate(ASAN_SELF_CHECKS):
        d = probe / str(i)
        d.mkdir()
        p = subprocess.run([str(python), "-c", code],
                           env=regrtest_env(ASAN_OPTIONS=asan_options(python, d)),
                           timeout=600, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        found = [r for r in asan_reports(d) if r[0] == kind]
        if not found:
            logs = "".join(f.read_text(errors="replace")[-2000:] for f in sorted(d.glob("asan.*")))
            log(f"error: {args.flavour} did not report a {kind} for a known one "
                f"(exit {p.returncode}); is it built with --with-address-sanitizer"
                + (" and -DMI_TRACK_ASAN=1 (mimalloc blocks)" if kind == "use-after-poison" else "")
                + f"? Its output and ASan log ({d}):\n" + p.stderr[-2000:] + logs)
            return 1
        frame = symbolized_frame(found, rf"0x[0-9a-f]+ in {function}\b")
        if not frame:
            log(f"error: the self-check's known {kind} was reported, but no frame names "
                f"{function}: reports are not symbolized (symbolizer "
                f"{llvm_symbolizer(python)}). The report's start ({d}):\n"
                + "\n".join(found[0][2].splitlines()[:10]))
            return 1
        log(f"self-check: a known {kind} is reported and symbolized ({frame})")

    # The free-threaded build's deliberate reads of possibly freed objects,
    # provoked: the checking patch must exempt them (and nothing is reported).
    p = subprocess.run([str(python), str(OPTIMISTIC_READS), str(args.optimistic_seconds)],
                       env=regrtest_env(ASAN_OPTIONS=asan_options(python, logdir / "optimistic")),
                       timeout=args.optimistic_seconds * 10 + 120, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True)
    optimistic_rc = p.returncode
    reports = asan_reports(logdir / "optimistic")
    log(f"asan {args.flavour}: {OPTIMISTIC_READS.name} ({args.optimistic_seconds} s): exit "
        f"{p.returncode}, {len(reports)} AddressSanitizer report(s)")
    if p.returncode != 0:
        log(p.stdout[-2000:] + p.stderr[-2000:])

    tests = args.tests or ASAN_TESTS
    rc, secs = run_regrtest(python, ["-j", str(args.jobs), f"--timeout={args.timeout}",
                                     "--fail-env-changed", *tests],
                            regrtest_env(ASAN_OPTIONS=asan_options(python, logdir / "regrtest")),
                            args.timeout * 4, out / "regrtest.log")
    regrtest_reports = asan_reports(logdir / "regrtest")
    reports += regrtest_reports
    log(f"asan {args.flavour}: {' '.join(tests)}: regrtest exit {rc} in {secs:.0f} s, "
        f"{len(regrtest_reports)} AddressSanitizer report(s)")
    if rc != 0:
        log(tail(out / "regrtest.log"))

    stress_rc, stress_secs = 0, 0.0
    if args.stress_seconds > 0:
        # tests/test_stress.py drives and judges the stress script; the ASan
        # options reach the interpreter under test (and its children) through
        # the environment.
        cmd = [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider",
               str(ROOT / "tests" / "test_stress.py")]
        log(f"$ {' '.join(cmd)}  ({args.flavour}, {args.stress_seconds} s)")
        start = time.monotonic()
        env = dict(os.environ, BRC_MERGE_STRESS_FLAVOURS=args.flavour,
                   BRC_MERGE_STRESS_SECONDS=str(args.stress_seconds),
                   BRC_MERGE_MIX_FLAVOURS=args.flavour,
                   BRC_MERGE_MIX_SECONDS=str(args.stress_seconds),
                   ASAN_OPTIONS=asan_options(python, logdir / "stress"))
        with open(out / "stress.log", "w") as f:
            stress_rc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, cwd=ROOT).returncode
        stress_secs = time.monotonic() - start
        stress_reports = asan_reports(logdir / "stress")
        log(f"asan {args.flavour}: stress run ({args.stress_seconds} s): pytest exit "
            f"{stress_rc} in {stress_secs:.0f} s, {len(stress_reports)} AddressSanitizer "
            f"report(s); log {out / 'stress.log'}")
        if stress_rc != 0:
            log(tail(out / "stress.log", 80))
        reports += stress_reports

    log(f"asan {args.flavour}: {len(reports)} AddressSanitizer report(s) in all; logs in {out}")
    for line in report_summary(reports):
        log(line)
    if reports:
        log("first report:\n" + reports[0][2])
    return 0 if rc == 0 and stress_rc == 0 and optimistic_rc == 0 and not reports else 1


# ------------------------------------------------------------- refleak

def cmd_refleak(args):
    python = python_of(args.flavour)
    check = subprocess.run([str(python), "-c",
                            "import sysconfig; print(sysconfig.get_config_var('Py_DEBUG'))"],
                           capture_output=True, text=True, env=regrtest_env())
    if check.stdout.strip() != "1":
        sys.exit(f"error: {args.flavour} is not a --with-pydebug build; "
                 "use --flavour ft-brc-debug")
    out = results_dir(f"refleak-{args.flavour}")
    tests = args.tests or REFLEAK_TESTS
    rc, secs = run_regrtest(python, ["-R", args.runs, f"--timeout={args.timeout}",
                                     "--fail-env-changed", *tests],
                            regrtest_env(), args.timeout * 4, out / "regrtest.log")
    text = (out / "regrtest.log").read_text(errors="replace")
    leaks = [l for l in text.splitlines() if re.search(r"\bleaked\b", l)]
    asserts = [l for l in text.splitlines()
               if "Assertion" in l or "Fatal Python error" in l]
    log(f"refleak {args.flavour} -R {args.runs}: {' '.join(tests)}: exit {rc} in "
        f"{secs:.0f} s; {len(leaks)} leak line(s), {len(asserts)} assertion/fatal line(s)")
    for l in leaks + asserts:
        log("  " + l)
    if rc != 0:
        log(tail(out / "regrtest.log"))
    return 0 if rc == 0 and not leaks and not asserts else 1


# -------------------------------------------------------------- parity

def junit_failures(path):
    """{test case id: 'failure'|'error'} and the number of cases, from JUnit XML."""
    failed, total = {}, 0
    if not Path(path).is_file():
        return None, 0
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        total += 1
        for tag in ("failure", "error"):
            if case.find(tag) is not None:
                failed[case.get("name")] = tag
    return failed, total


def summary_line(text, label):
    m = re.findall(rf"(?m)^(\d+ tests? {label}):?$", text)
    return m[-1] if m else ""


def cmd_parity(args):
    flavours = args.flavours.split(",")
    if len(flavours) != 2:
        sys.exit("error: --flavours takes two comma-separated flavours, e.g. ft,ft-brc")
    pythons = [python_of(f) for f in flavours]
    out = results_dir("parity")
    tests = args.tests or PARITY_TESTS
    rows = {}
    for flavour, python in zip(flavours, pythons):
        xml = out / f"{flavour}.xml"
        xml.unlink(missing_ok=True)
        rc, secs = run_regrtest(python, ["-j", str(args.jobs), f"--timeout={args.timeout}",
                                         "--junit-xml", str(xml), *tests],
                                regrtest_env(), args.timeout * 8, out / f"{flavour}.log")
        failed, total = junit_failures(xml)
        text = (out / f"{flavour}.log").read_text(errors="replace")
        result = re.findall(r"(?m)^Result: (.*)$", text)
        rows[flavour] = (rc, secs, failed, total, result[-1] if result else "?", text)
        log(f"parity {flavour}: exit {rc} in {secs:.0f} s, {total} test cases, "
            f"{'?' if failed is None else len(failed)} failing, regrtest result {rows[flavour][4]}")
    (a, b) = flavours
    fa, fb = rows[a][2], rows[b][2]
    if fa is None or fb is None:
        log("error: regrtest wrote no JUnit XML; see the logs in " + str(out))
        return 1
    only_a = sorted(set(fa) - set(fb))
    only_b = sorted(set(fb) - set(fa))
    both = sorted(set(fa) & set(fb))
    md = [f"# stdlib parity: {a} vs {b}", "",
          f"Tests: {' '.join(tests)}", "",
          "| flavour | regrtest result | exit | time | test cases | failing cases |",
          "|---|---|---|---|---|---|"]
    for f in flavours:
        rc, secs, failed, total, result, _ = rows[f]
        md.append(f"| {f} | {result} | {rc} | {secs:.0f} s | {total} | {len(failed)} |")
    md += ["", f"Failing in both ({len(both)}):"] + [f"- {t} ({fa[t]})" for t in both]
    md += ["", f"Failing only on {a} ({len(only_a)}):"] + [f"- {t}" for t in only_a]
    md += ["", f"Failing only on {b} ({len(only_b)}):"] + [f"- {t}" for t in only_b]
    for f in flavours:
        for label in ("failed", "failed when re-run", "altered the execution environment"):
            s = summary_line(rows[f][5], label)
            if s:
                md.append(f"- {f}: {s}")
    report = "\n".join(md) + "\n"
    (out / "report.md").write_text(report)
    log(report)
    log(f"report: {out / 'report.md'}")
    return 0 if not only_a and not only_b else 1


QUIET = False


def main():
    global QUIET
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quiet", action="store_true", help="do not echo regrtest's output")
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tsan", help="CPython tests under ThreadSanitizer, zero reports")
    t.add_argument("--flavour", default="ft-brc-tsan")
    t.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    t.add_argument("--timeout", type=int, default=1800, help="per test file, seconds")
    t.add_argument("--stress-seconds", type=int, default=0,
                   help="then the hazard mix for this long (tests/test_stress.py); 0 skips it")
    t.add_argument("tests", nargs="*", help=f"default: {' '.join(TSAN_TESTS)}")
    a = sub.add_parser("asan", help="CPython tests and the stress run under AddressSanitizer, "
                       "zero reports")
    a.add_argument("--flavour", default="ft-brc-asan")
    a.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    a.add_argument("--timeout", type=int, default=1800, help="per test file, seconds")
    a.add_argument("--stress-seconds", type=int, default=60,
                   help="stress run length (tests/test_stress.py); 0 skips it")
    a.add_argument("--optimistic-seconds", type=int, default=10,
                   help=f"run length of tests/asan/{OPTIMISTIC_READS.name}")
    a.add_argument("tests", nargs="*", help=f"default: {' '.join(ASAN_TESTS)}")
    r = sub.add_parser("refleak", help="regrtest -R on the debug build")
    r.add_argument("--flavour", default="ft-brc-debug")
    r.add_argument("--runs", default="3:3", help="regrtest -R warmups:runs (default 3:3)")
    r.add_argument("--timeout", type=int, default=1800)
    r.add_argument("tests", nargs="*", help=f"default: {' '.join(REFLEAK_TESTS)}")
    q = sub.add_parser("parity", help="same failures on two flavours")
    q.add_argument("--flavours", default="ft,ft-brc")
    q.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    q.add_argument("--timeout", type=int, default=900)
    q.add_argument("tests", nargs="*", help=f"default: {' '.join(PARITY_TESTS)}")
    args = p.parse_args()
    QUIET = args.quiet
    return {"tsan": cmd_tsan, "asan": cmd_asan, "refleak": cmd_refleak,
            "parity": cmd_parity}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
