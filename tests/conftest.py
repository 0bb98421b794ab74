"""Shared helpers for the brc-merge test suite (keep this small).

Other test modules may import from here:  from conftest import ROOT, FLAVOURS, dist_python

FLAVOURS are the three 3.14 flavours every build and test run covers
(test_build.py parametrizes over them and passes them to `build.sh --check`);
MAIN_FLAVOURS are the stock and patched free-threaded builds of CPython main
(`make test` builds them too); EXTRA_FLAVOURS are optional instrumented builds
and COMPARE_FLAVOURS stock plus the backport of upstream's fix, which
dist_python() also accepts.
"""
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FLAVOURS = ("gil", "ft", "ft-brc")
MAIN_FLAVOURS = ("main-ft", "main-ft-brc")
EXTRA_FLAVOURS = ("ft-brc-debug", "ft-tsan", "ft-brc-tsan", "ft-asan", "ft-brc-asan")
# Stock plus the backport of upstream's fix (patches/<line>/compare), for `make compare`.
COMPARE_FLAVOURS = ("ft-upstream", "main-ft-upstream", "ft-upstream-debug")


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
