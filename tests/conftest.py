"""Shared helpers for the brc-merge test suite (keep this small).

Other test modules may import from here:  from conftest import ROOT, FLAVOURS, dist_python

Where the builds are, the environment a built interpreter runs in
(clean_env) and build.sh's table of flavours have one home, the bench
harness's env module (bench/harness/env.py); this re-exports them.

FLAVOURS are the three 3.14 flavours every build and test run covers
(test_build.py parametrizes over them and passes them to `build.sh --check`);
MAIN_FLAVOURS are the stock and patched free-threaded builds of CPython main
(`make test` builds them too); EXTRA_FLAVOURS are optional instrumented builds
and COMPARE_FLAVOURS stock plus the backport of upstream's fix, which
dist_python() also accepts. All come from build.sh's table of flavours
(`build.sh --list`: groups core, main, checking and compare), in its order;
FLAVOUR_TABLE is that table, one dict a row; table_flavours() selects from it.
"""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Appended: it shadows nothing.  Scripts that import conftest (regrtest_checks.py) get it too.
sys.path.append(str(ROOT / "bench" / "harness"))
from env import build_list, clean_env, dist_dir  # noqa: E402,F401  (re-exported)
# None where the flavour is not built; dist_python() below skips the test instead.
from env import dist_python as built_python  # noqa: E402

FLAVOUR_TABLE = build_list()


def table_flavours(*groups, **columns):
    """The flavours of FLAVOUR_TABLE in one of `groups` whose `columns` have
    those values, as build.sh prints them (gil="False"), in its order."""
    return tuple(r["flavour"] for r in FLAVOUR_TABLE
                 if r["group"] in groups and all(r[k] == v for k, v in columns.items()))


FLAVOUR_GROUPS = {group: table_flavours(group)
                  for group in dict.fromkeys(r["group"] for r in FLAVOUR_TABLE)}
FLAVOURS = FLAVOUR_GROUPS["core"]
MAIN_FLAVOURS = FLAVOUR_GROUPS["main"]
EXTRA_FLAVOURS = FLAVOUR_GROUPS["checking"]
# Stock plus the backport of upstream's fix (patches/<line>/compare), for `make compare`.
COMPARE_FLAVOURS = FLAVOUR_GROUPS["compare"]


def dist_python(flavour: str) -> Path:
    """dist/<flavour>/bin/python3; skips the calling test if that flavour is not built."""
    known = FLAVOURS + MAIN_FLAVOURS + EXTRA_FLAVOURS + COMPARE_FLAVOURS
    if flavour not in known:
        raise ValueError(f"unknown flavour {flavour!r}; expected one of {known}")
    py = built_python(flavour)
    if py is None:
        pytest.skip(f"flavour {flavour} is not built (no bin/python3 in {dist_dir() / flavour}; "
                    f"run ./build.sh {flavour})")
    return py
