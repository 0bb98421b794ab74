"""The harness's view of the machine: where the builds are, whether one is
running, clean environments, the per-flavour bench venvs, machine facts.
Runs in the host venv.

The tests import it too (tests/conftest.py): it is the one home of where
the builds are (dist_dir, dist_python), the environment a built
interpreter runs in (clean_env) and build.sh's table of flavours
(build_list).  So it imports nothing of the harness at module level.
"""

import functools
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent
ROOT = BENCH.parent
WORKLOADS = BENCH / "workloads"
HARNESS = BENCH / "harness"
VENVS = BENCH / ".venvs"
FLAVOUR_REQUIREMENTS = WORKLOADS / "requirements.txt"


def log(msg):
    print("[bench %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def dist_dir():
    return Path(os.environ.get("BRC_MERGE_DIST") or ROOT / "dist")


def dist_python(flavour):
    """dist/<flavour>/bin/python3, or None where that flavour is not built."""
    py = dist_dir() / flavour / "bin" / "python3"
    return py if py.exists() and os.access(py, os.X_OK) else None


def running_builds():
    """Command lines of running `make -jN` / build.sh processes (a CPython
    build on 2 cores would corrupt every timing)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        argv = [a.decode(errors="replace") for a in argv if a]
        if not argv:
            continue
        prog = os.path.basename(argv[0])
        if prog == "make" and any(a.startswith("-j") for a in argv[1:]):
            found.append(" ".join(argv))
        elif any(os.path.basename(a) == "build.sh" for a in argv[:2]) \
                and "--print-config" not in argv and "--help" not in argv:
            found.append(" ".join(argv))
    return found


def wait_for_builds(max_wait):
    start = time.monotonic()
    announced = False
    while True:
        builds = running_builds()
        if not builds:
            return
        if not announced:
            log("a build is running; waiting (timings would be "
                "meaningless):\n    " + "\n    ".join(builds[:3]))
            announced = True
        if time.monotonic() - start > max_wait:
            sys.exit("bench: a build is still running after %ds; giving up"
                     % max_wait)
        time.sleep(10)


def clean_env(extra=None, *, drop=(), write_bytecode=False):
    """os.environ for a child process, then `extra` (values made str).

    Without PYTHON* (PYTHON_GIL, PYTHONPATH, the knob...: they would change
    what a built interpreter does), the host venv's VIRTUAL_ENV, and the
    variables starting with a prefix in `drop` (e.g. the caller's
    BRC_MERGE_* for build.sh, TSAN_/ASAN_ for the sanitizer runs).
    PYTHONDONTWRITEBYTECODE=1 unless write_bytecode: no __pycache__ of each
    flavour in the repo; regrtest wants it unset (some tests skip with it).
    """
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", *drop)) and k != "VIRTUAL_ENV"}
    if not write_bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update({k: str(v) for k, v in (extra or {}).items()})
    return env


def ensure_venv(flavour):
    """bench/.venvs/<flavour> with pyperf; recreated when the interpreter
    changed (new build) or the requirements changed."""
    base = dist_python(flavour)
    venv = VENVS / flavour
    py = venv / "bin" / "python"
    stamp = venv / ".bench-stamp"
    ident = subprocess.run([str(base), "-VV"], capture_output=True,
                           text=True, check=True).stdout.strip()
    key_file = dist_dir() / flavour / ".brc-merge-key"
    want = "\n".join([
        ident, str(base.resolve()),
        key_file.read_text() if key_file.exists() else "",
        FLAVOUR_REQUIREMENTS.read_text()])
    if py.exists() and stamp.exists() and stamp.read_text() == want:
        return py
    log("creating %s (%s)" % (venv.relative_to(ROOT), ident.splitlines()[0]))
    subprocess.run([str(base), "-m", "venv", "--clear", str(venv)],
                   check=True, env=clean_env())
    subprocess.run([str(py), "-m", "pip", "install", "-q",
                    "--disable-pip-version-check", "-r",
                    str(FLAVOUR_REQUIREMENTS)], check=True, env=clean_env())
    stamp.write_text(want)
    return py


def machine_info(flavours):
    """The machine, the commit, the series and the given flavours' builds
    (those not built are left out)."""
    def sh(*cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True,
                                  cwd=str(ROOT)).stdout.strip()
        except OSError:
            return ""
    cpu = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = ""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal"):
                mem = "%.1f GiB" % (int(line.split()[1]) / 1048576)
    def series_hashes(series_file):
        """sha256 of a series file and its patches, and of each patch."""
        h = hashlib.sha256(series_file.read_bytes())
        per_patch = {}
        for line in series_file.read_text().splitlines():
            name = line.strip()
            if name and not name.startswith("#"):
                data = (series_file.parent / name).read_bytes()
                h.update(data)
                per_patch[name] = hashlib.sha256(data).hexdigest()[:12]
        return h.hexdigest(), per_patch

    patches = ROOT / "patches" / "3.14"
    series_sha, per_patch = series_hashes(patches / "series")
    compare = patches / "compare" / "upstream.series"
    info = {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "kernel": sh("uname", "-srm"),
        "memory": mem,
        "commit": sh("git", "rev-parse", "--short", "HEAD"),
        "dirty": bool(sh("git", "status", "--porcelain", "--",
                         "patches", "bench")),
        "series_sha256": series_sha,
        "patches": per_patch,
        # ft-upstream: the backport of upstream's fix
        "compare_patches": series_hashes(compare)[1] if compare.exists()
        else {},
        "flavours": {},
    }
    for flavour in flavours:
        py = dist_python(flavour)
        if not py:
            continue
        code = ("import sys, sysconfig; print(sys.version.replace('\\n',' '));"
                "print(sysconfig.get_config_var('CONFIG_ARGS'));"
                "print(sysconfig.get_config_var('CFLAGS_NODIST') or '')")
        out = subprocess.run([str(py), "-c", code], capture_output=True,
                             text=True, env=clean_env()).stdout.splitlines()
        key = dist_dir() / flavour / ".brc-merge-key"
        info["flavours"][flavour] = {
            "version": out[0] if out else "",
            "configure": out[1] if len(out) > 1 else "",
            "build_key_sha256": (hashlib.sha256(key.read_bytes()).hexdigest()[:16]
                                 if key.exists() else None),
        }
    return info


def build_list():
    """build.sh's table of flavours (`build.sh --list`): one dict a row, in
    its order; keys from its header (flavour line group gil description
    patches checking san), values as printed (strings)."""
    out = subprocess.run([str(ROOT / "build.sh"), "--list"], check=True,
                         capture_output=True, text=True,
                         timeout=60).stdout.splitlines()
    header = out[0].lstrip("# ").split("\t")
    return [dict(zip(header, row.split("\t"))) for row in out[1:]
            if row and not row.startswith("#")]


def flavours(line):
    """The line's flavours a benchmark compares: every non-checking build
    of the core, main and compare groups (gil, ft, ft-brc, ft-upstream)."""
    return [r["flavour"] for r in build_list() if r["line"] == line
            and r["checking"] == "0"
            and r["group"] in ("core", "main", "compare")]


@functools.lru_cache(maxsize=None)
def build_cache():
    """build.sh's cache directory (BRC_MERGE_CACHE or its default)."""
    out = subprocess.run([str(ROOT / "build.sh"), "--print-config"],
                         capture_output=True, text=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines()
                if "=" in line).get("BRC_MERGE_CACHE")


def source_tree(flavour):
    """The flavour's own patched source tree, which build.sh keeps in its
    cache, or None."""
    src = Path(build_cache() or "/nonexistent") / "build" / flavour / "src"
    return src if src.is_dir() else None
