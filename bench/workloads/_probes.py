"""Probes shared by the scripts that the interpreter under test runs: the
bench workloads here (through _util), tests/scenarios (through _harness)
and tests/stress/*.py; the tests' scripts find this folder from their own
__file__.  It lives under bench/ because the torch image checks mount
bench/ alone (image/build-torch.sh), without tests/.

Stdlib `sys` only, so that it imports on any flavour and in an isolated
subinterpreter (tests/stress/mix.py runs itself in one).  Programs handed
to a child with -c (brc_stress.py's shutdown child) and
image/test-in-container.py (piped into a container without tests/) keep
their own copies.
"""

import sys


def thread_state(native_id):
    """Kernel scheduling state of a thread of this process ('R', 'S', ...),
    or None if the thread no longer exists.  'S' means sleeping in the
    kernel; CPython detaches its thread state before any such blocking call.

    The state is the first field after the last ')' of
    /proc/self/task/<tid>/stat (the comm field in parentheses may itself
    contain spaces or parentheses).  Read as bytes: comm is a thread name
    cut to 15 bytes, possibly in the middle of a UTF-8 character.
    """
    try:
        with open("/proc/self/task/%d/stat" % native_id, "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return data[data.rindex(b")") + 2:].split()[0].decode()


def brc_stats():
    """sys._brc_stats() as a plain dict, or None where the interpreter has
    no such function (gil, stock ft)."""
    get = getattr(sys, "_brc_stats", None)
    return dict(get()) if get is not None else None
