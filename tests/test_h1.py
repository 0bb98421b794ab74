"""H1 (docs/upstream.md): a design that frees a blocked owner's queue inside
the Py_DECREF that queues to it runs finalizers inside instructions the
cases generator treats as non-escaping (BINARY_OP_ADD_FLOAT), whose frame's
stack pointer is stale there.  tests/scenarios/h1_decref.py provokes it.

  ft-upstream        finalizers inside BINARY_OP_ADD_FLOAT
  ft-upstream-debug  aborts on CPython's assertion in _PyEval_EvalFrameDefault
  ft-brc(-debug)     none there: the backport plus the follow-up (0002)
                     that frees only the dropped object inside the decref
                     and the rest of the queue at the next check

ft-upstream and the debug flavours are built on demand (`make exhibit-h1`);
`make test` runs the rows whose flavours are built.
"""

import json
import signal
import subprocess

import pytest

from conftest import clean_env, dist_python
from test_scenarios import SCENARIO_DIR

SCRIPT = str(SCENARIO_DIR / "h1_decref.py")
INSIDE = "MainThread at BINARY_OP_ADD_FLOAT"


def run(flavour):
    return subprocess.run([str(dist_python(flavour)), SCRIPT],
                          env=clean_env(), capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("flavour", ["ft-brc", "ft-brc-debug"])
def test_no_finalizer_inside_a_non_escaping_decref(flavour):
    p = run(flavour)
    assert p.returncode == 0, p.stderr
    where = json.loads(p.stdout)["finalizers"]
    assert sum(where.values()) == 200, where
    assert INSIDE not in where, where


def test_upstream_runs_finalizers_inside_the_decref():
    p = run("ft-upstream")
    assert p.returncode == 0, p.stderr
    where = json.loads(p.stdout)["finalizers"]
    assert where.get(INSIDE, 0) > 0, where


def test_upstream_debug_build_aborts():
    p = run("ft-upstream-debug")
    assert p.returncode == -signal.SIGABRT, (p.returncode, p.stdout, p.stderr)
    assert "Assertion" in p.stderr and "_PyEval_EvalFrameDefault" in p.stderr, \
        p.stderr[-2000:]
