"""Probes shared by the scripts that the interpreter under test runs: the
scenarios here (through _harness) and tests/stress/*.py, which find this
folder from their own __file__.

Stdlib `sys` only, so that it imports on any flavour and in an isolated
subinterpreter (tests/stress/mix.py runs itself in one).  Programs handed
to a child with -c (brc_stress.py's shutdown child) and
image/test-in-container.py (piped into a container without tests/) keep
their own copies.
"""

import sys


def thread_state(native_id):
    """Kernel scheduling state of a thread of this process ('R', 'S', ...).

    Returns None if the thread no longer exists.  The state is the first
    field after the last ')' of /proc/self/task/<tid>/stat (the comm field
    in parentheses may itself contain spaces or parentheses).
    """
    try:
        with open("/proc/self/task/%d/stat" % native_id) as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return data[data.rindex(")") + 2:].split()[0]


def brc_stats():
    """sys._brc_stats() as a plain dict, or None where the interpreter has
    no such function (gil, stock ft)."""
    get = getattr(sys, "_brc_stats", None)
    return dict(get()) if get is not None else None
