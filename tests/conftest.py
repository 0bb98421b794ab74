"""Shared helpers for the brc-merge test suite (keep this small).

Other test modules may import from here:  from conftest import ROOT, FLAVOURS, dist_python

FLAVOURS are the three 3.14 flavours every build and test run covers
(test_build.py parametrizes over them and passes them to `build.sh --check`);
MAIN_FLAVOURS are the stock and patched free-threaded builds of CPython main
(`make test` builds them too); EXTRA_FLAVOURS are optional instrumented builds
and COMPARE_FLAVOURS stock plus the backport of upstream's fix, which
dist_python() also accepts. All come from build.sh's table of flavours
(`build.sh --list`: groups core, main, checking and compare), in its order.
"""
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _flavour_groups():
    """{group: (flavour, ...)} from `build.sh --list` (its columns: flavour line group gil description ...)."""
    table = subprocess.run([str(ROOT / "build.sh"), "--list"], capture_output=True, text=True,
                           check=True, timeout=60).stdout
    groups = {}
    for row in table.splitlines():
        if row and not row.startswith("#"):
            flavour, _line, group = row.split("\t")[:3]
            groups[group] = groups.get(group, ()) + (flavour,)
    return groups


FLAVOUR_GROUPS = _flavour_groups()
FLAVOURS = FLAVOUR_GROUPS["core"]
MAIN_FLAVOURS = FLAVOUR_GROUPS["main"]
EXTRA_FLAVOURS = FLAVOUR_GROUPS["checking"]
# Stock plus the backport of upstream's fix (patches/<line>/compare), for `make compare`.
COMPARE_FLAVOURS = FLAVOUR_GROUPS["compare"]


def dist_dir() -> Path:
    """The dist/ directory build.sh links the flavours into (BRC_MERGE_DIST wins)."""
    return Path(os.environ.get("BRC_MERGE_DIST") or ROOT / "dist")


def dist_python(flavour: str) -> Path:
    """dist/<flavour>/bin/python3; skips the calling test if that flavour is not built."""
    known = FLAVOURS + MAIN_FLAVOURS + EXTRA_FLAVOURS + COMPARE_FLAVOURS
    if flavour not in known:
        raise ValueError(f"unknown flavour {flavour!r}; expected one of {known}")
    py = dist_dir() / flavour / "bin" / "python3"
    if not (py.exists() and os.access(py, os.X_OK)):
        pytest.skip(f"flavour {flavour} is not built ({py} missing; run ./build.sh {flavour})")
    return py
