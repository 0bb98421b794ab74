"""CPython's own regression tests, run by the patched interpreter.

The patch series carries its tests inside CPython's suite
(Lib/test/test_free_threading/test_gc.py, beside upstream's test of the
fix); this runs them, and the suites around the code the series touches, on
the installed ft-brc interpreters.
A failure prints regrtest's own report.
"""

import os
import subprocess

import pytest

from conftest import dist_python, table_flavours

# The suites next to what the series changes: biased refcounting and thread
# states (test_free_threading, test_threading), the C API and internal probes
# (test_capi), the GC that also merges queues (test_gc), finalisation
# (test_weakref), sys._brc_stats() and the -X option (test_sys, test_cmd_line).
SUITES = ["test_free_threading", "test_capi", "test_threading", "test_gc",
          "test_weakref", "test_sys", "test_cmd_line"]

TIMEOUT = 40 * 60


def regrtest(python, *args, env=None):
    cmd = [str(python), "-m", "test", "--fail-env-changed", "--timeout=900",
           f"-j{os.cpu_count() or 2}", *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT)
    return proc, proc.stdout[-6000:] + proc.stderr[-3000:]


# The patched flavour of each line, 3.14 and main (ft-brc, main-ft-brc),
# from build.sh's table: the series on a build without checking options.
PATCHED = table_flavours("core", "main", patches="series")


@pytest.mark.parametrize("flavour", PATCHED)
def test_brc_suite(flavour):
    """The series' own tests, alone first, so a failure names them."""
    proc, tail = regrtest(dist_python(flavour), "-v",
                          "test_free_threading.test_gc")
    assert proc.returncode == 0, tail
    assert "Tests result: SUCCESS" in proc.stdout, tail


@pytest.mark.parametrize("flavour", PATCHED)
def test_related_suites(flavour):
    proc, tail = regrtest(dist_python(flavour), *SUITES)
    assert proc.returncode == 0, tail
