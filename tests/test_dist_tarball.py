"""make dist-tarball: the relocatable tarball of a built flavour.

The ft-brc tarball is made once (into a temp dir), checked against its
.sha256 and its BUILD-INFO.json, unpacked under another path than the one
it was built for, and used as a user of uv would: `uv venv --python
<unpacked>/python/bin/python3`, pyperf (and its psutil, a C extension) from
PyPI into that venv, and a scenario of tests/scenarios run there, which must
free everything while the owner is blocked, with sys._brc_stats() showing the
merges on its behalf. The uv downloads list written beside it installs it
with `uv python install --python-downloads-json-url` into a temp
UV_PYTHON_INSTALL_DIR, where `uv python list` and `uv python find` see it and
the same scenario frees everything; a list with a wrong sha256 or a missing
tarball fails in uv and installs nothing. The bad inputs (a flavour that is
not built, a checking or comparison flavour, a failure once the staging has
begun) must fail with a message naming the fix and leave nothing in the
output dir.

uv comes from .venv (tests/requirements.txt, `make venv`); every file made
here is removed at the end, the uv cache included. About 30 s.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from datetime import datetime
from pathlib import Path

import pytest

from conftest import ROOT, clean_env, dist_dir, dist_python
from test_scenarios import FREED_MARGIN, FREE_DEADLINE, check_brc_stats, run_scenario

pytestmark = pytest.mark.timeout(300)

UV_KEY = re.compile(r"^cpython-(?P<version>[0-9][0-9a-z.]*)\+freethreaded-linux-(?P<arch>[a-z0-9_]+)-gnu$")
NAME = re.compile(r"^brc-merge-(?P<version>[0-9][0-9a-z.]*)-(?P<series>[0-9a-f]{12}|stock)"
                  r"-(?P<flavour>[a-z-]+?)-(?P<arch>[a-z0-9_]+)-linux-gnu\.tar\.gz$")


def make_env():
    # Not the outer make's jobserver and flags (make test runs pytest), nor
    # BRC_MERGE_DIST: DIST= says where the flavours are.
    return {k: v for k, v in os.environ.items()
            if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL") and not k.startswith("BRC_MERGE_")}


def dist_tarball(out, flavour="ft-brc", dist=None):
    cmd = ["make", "-s", "--no-print-directory", "-C", str(ROOT), "dist-tarball",
           "FLAVOUR=" + flavour, "TARBALL_DIR=" + str(out), "DIST=" + str(dist or dist_dir())]
    return subprocess.run(cmd, env=make_env(), capture_output=True, text=True, timeout=240)


def key_of(flavour):
    key = {}
    for line in (dist_dir() / flavour / ".brc-merge-key").read_text().splitlines():
        name, _, value = line.partition(" ")
        key.setdefault(name, value)
    return key


@pytest.fixture(scope="module")
def work():
    d = Path(tempfile.mkdtemp(prefix="brc-dist-tarball-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def scratch():
    """A temp dir of one test, removed after it (not kept as tmp_path's are)."""
    d = Path(tempfile.mkdtemp(prefix="brc-dist-tarball-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def tarball(work):
    """make dist-tarball FLAVOUR=ft-brc into a fresh dir: the tarball's path."""
    dist_python("ft-brc")
    out = work / "out"
    proc = dist_tarball(out)
    assert proc.returncode == 0, "make dist-tarball failed:\n" + proc.stdout + proc.stderr
    files = sorted(p.name for p in out.iterdir())
    stem = files[0][:-len(".tar.gz")]
    assert files == [stem + ".tar.gz", stem + ".tar.gz.sha256", stem + ".uv.json"], (
        "expected the tarball, its .sha256 and its uv list, nothing else: %s" % files)
    return out / files[0]


def uv(*args, env, cwd=None, timeout=180):
    return subprocess.run([sys.executable, "-m", "uv", *args], env=env, capture_output=True,
                          text=True, cwd=cwd, timeout=timeout)


def require_uv(env):
    if uv("--version", env=env).returncode:
        pytest.fail("uv is not installed in %s: run make venv (tests/requirements.txt)"
                    % sys.prefix)


def uv_env(cache, home):
    """uv's managed Pythons (and their links) under home, nothing from the caller's."""
    env = clean_env(dict(UV_CACHE_DIR=cache, UV_PYTHON_INSTALL_DIR=home / "pythons",
                         UV_PYTHON_BIN_DIR=home / "bin", UV_NO_CONFIG=1),
                    drop=("UV_",), write_bytecode=True)
    require_uv(env)
    return env


def check_frees(python):
    """A scenario that frees everything on ft-brc while the owner is blocked."""
    r = run_scenario(python, ["blocking.py", "--kind", "event"], [], {}, FREE_DEADLINE)
    report = json.dumps(r, indent=1, sort_keys=True)
    assert r["free_threaded_build"] and not r["gil_enabled"], report
    assert r["owner_blocked_at_measure"], report
    assert r["freed_while_blocked"] == r["total"] == 4, report
    assert r["rss_after_drop"] - r["rss_before"] <= FREED_MARGIN, report
    assert r["freed_after_wake"] == r["total"], report
    check_brc_stats(r, "frees", False, False, report)
    before, after = r["brc_stats_before"], r["brc_stats_after"]
    assert after["merged_on_behalf"] - before["merged_on_behalf"] >= r["total"], report


@pytest.fixture(scope="module")
def unpacked(work, tarball):
    """The tarball unpacked under another path, as a user would (tar -xzf)."""
    dest = work / "some other place" / "opt"
    dest.mkdir(parents=True)
    subprocess.run(["tar", "-xzf", str(tarball), "-C", str(dest)], check=True)
    return dest / "python"


def test_name_and_checksum(tarball):
    m = NAME.match(tarball.name)
    assert m, tarball.name
    key = key_of("ft-brc")
    assert m["version"] == key["python"]
    assert m["series"] == key["series"][:12]
    assert m["flavour"] == "ft-brc"
    assert m["arch"] == os.uname().machine
    # sha256sum format, checked by sha256sum itself and by hand
    sums = tarball.parent / (tarball.name + ".sha256")
    assert subprocess.run(["sha256sum", "--check", "--strict", sums.name], cwd=tarball.parent,
                          capture_output=True).returncode == 0
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    assert sums.read_text() == "%s  %s\n" % (digest, tarball.name)
    # install-only layout: everything under python/, python/bin/python3 at the top
    with tarfile.open(tarball) as t:
        names = t.getnames()
        assert all(n == "python" or n.startswith("python/") for n in names), names[:5]
        assert not [n for n in names if ".." in n.split("/")]
        assert "python/bin/python3" in names and "python/BUILD-INFO.json" in names
        assert not [n for n in names if "/test/" in n or n.endswith(".a")], "not slimmed"


def test_build_info(unpacked):
    info = json.loads((unpacked / "BUILD-INFO.json").read_text())
    key = key_of("ft-brc")
    py = dist_python("ft-brc")
    config_args = subprocess.run(
        [str(py), "-I", "-c", "import sysconfig; print(sysconfig.get_config_var('CONFIG_ARGS'))"],
        capture_output=True, text=True, check=True).stdout.rstrip("\n")
    assert info["version"] == key["python"]
    assert info["flavour"] == "ft-brc" and info["free_threaded"] is True
    assert info["series_sha256"] == key["series"] and info["series"] == "patches/3.14/series"
    assert info["configure_args"] == config_args and "--disable-gil" in info["configure_args_list"]
    optimized = key["optimize"] == "1"
    assert info["optimize"] is info["pgo"] is info["lto"] is optimized
    datetime.fromisoformat(info["build_date"].replace("Z", "+00:00"))
    host_glibc = os.confstr("CS_GNU_LIBC_VERSION").split()[1]
    assert info["glibc"]["built_with"] == host_glibc
    need = tuple(map(int, info["glibc"]["requires"].split(".")))
    assert (2, 17) <= need <= tuple(map(int, host_glibc.split(".")))
    pkgs = info["debian_packages"]
    assert pkgs["libc6"]["interpreter"] and "libc.so.6" in pkgs["libc6"]["libraries"]
    assert [n for n in pkgs["libssl3"]["needed_by"] if "/_ssl." in n]
    assert all(p["version"] for p in pkgs.values()), pkgs
    # only libc6 is needed to start the interpreter: libpython is static
    assert [n for n, p in pkgs.items() if p["interpreter"]] == ["libc6"]
    assert info["unpackaged_libraries"] == []


def test_runs_elsewhere_with_uv(work, unpacked):
    env = clean_env(dict(UV_CACHE_DIR=work / "uv-cache", UV_PYTHON_DOWNLOADS="never"),
                    write_bytecode=True)
    require_uv(env)
    python = unpacked / "bin" / "python3"

    # the rewritten script shebangs work from here too
    pip = subprocess.run([str(unpacked / "bin" / "pip3"), "--version"], env=env,
                         capture_output=True, text=True)
    assert pip.returncode == 0 and str(unpacked) in pip.stdout, pip.stdout + pip.stderr

    venv = work / "venv"
    proc = uv("venv", "--python", str(python), str(venv), env=env, cwd=work, timeout=None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    vpy = venv / "bin" / "python"
    proc = uv("pip", "install", "--python", str(vpy), "pyperf", env=env, cwd=work, timeout=None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    probe = subprocess.run([str(vpy), "-c", """if 1:
        import json, sys, pyperf, psutil
        print(json.dumps({"prefix": sys.prefix, "base_prefix": sys.base_prefix,
                          "gil": sys._is_gil_enabled(), "brc": sys._brc_stats(),
                          "pyperf": pyperf.__version__}))"""],
        env=env, capture_output=True, text=True, cwd=work)
    assert probe.returncode == 0, probe.stderr
    p = json.loads(probe.stdout)
    assert Path(p["prefix"]) == venv
    assert Path(p["base_prefix"]).resolve() == unpacked.resolve()
    assert p["gil"] is False and "merged_on_behalf" in p["brc"]

    check_frees(vpy)


def uv_list_of(tarball):
    return tarball.with_name(tarball.name[:-len(".tar.gz")] + ".uv.json")


def test_uv_python_install(work, tarball):
    listing = uv_list_of(tarball)
    (key, entry), = json.loads(listing.read_text()).items()
    m = UV_KEY.match(key)
    assert m and m["version"] == key_of("ft-brc")["python"] and m["arch"] == os.uname().machine
    assert entry["url"] == tarball.as_uri() and entry["variant"] == "freethreaded"
    assert entry["sha256"] == hashlib.sha256(tarball.read_bytes()).hexdigest()

    home = work / "uv-home"
    env = uv_env(work / "uv-cache", home)
    url = ["--python-downloads-json-url", str(listing)]
    proc = uv("python", "install", *url, key, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = uv("python", "list", "--only-installed", *url, env=env)
    assert proc.returncode == 0 and key in proc.stdout, proc.stdout + proc.stderr
    proc = uv("python", "find", "--managed-python", key, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    python = Path(proc.stdout.strip())
    assert python.resolve().is_relative_to((home / "pythons").resolve()), python
    check_frees(python)


@pytest.mark.parametrize("bad,words", [
    pytest.param("sha256", ("Hash mismatch",), id="wrong-sha256"),
    pytest.param("url", ("No such file",), id="missing-tarball"),
])
def test_uv_bad_list_installs_nothing(work, scratch, tarball, bad, words):
    (key, entry), = json.loads(uv_list_of(tarball).read_text()).items()
    if bad == "sha256":
        entry["sha256"] = "0" * 64
    else:
        entry["url"] = (scratch / tarball.name).as_uri()
    listing = scratch / "bad.uv.json"
    listing.write_text(json.dumps({key: entry}))
    env = uv_env(scratch / "uv-cache", scratch)
    proc = uv("python", "install", "--python-downloads-json-url", str(listing), key, env=env)
    assert proc.returncode != 0, proc.stdout
    for w in words:
        assert w in proc.stderr, proc.stderr
    pythons = scratch / "pythons"
    assert not [p for p in pythons.glob("*") if not p.name.startswith(".")], list(pythons.iterdir())
    assert not (scratch / "bin").exists() or not list((scratch / "bin").iterdir())


@pytest.mark.parametrize("flavour,dist,rc,words", [
    pytest.param("ft-brc", "missing", 1, ("ft-brc is not built", "make ft-brc"), id="not-built"),
    pytest.param("nosuch", None, 2, ("unknown flavour", "ft-brc"), id="unknown"),
    pytest.param("ft-brc-tsan", None, 2, ("checking flavour", "FLAVOUR=ft-brc"), id="checking"),
    pytest.param("ft-brc-debug", None, 2, ("checking flavour",), id="checking-debug"),
    pytest.param("ft-upstream", None, 2, ("comparison only",), id="comparison"),
])
def test_bad_input_leaves_nothing(scratch, flavour, dist, rc, words):
    out = scratch / "out"
    proc = dist_tarball(out, flavour, scratch / "no-dist" if dist else None)
    assert proc.returncode != 0
    assert ("Error %d" % rc) in proc.stderr, proc.stderr
    for w in words:
        assert w in proc.stderr, proc.stderr
    assert not out.exists() or not list(out.iterdir())


def test_failure_after_staging_leaves_nothing(scratch):
    """An install whose interpreter does not run (here /bin/false): the staged
    copy fails its checks; the temp dir and names are gone."""
    fake = scratch / "install"
    (fake / "bin").mkdir(parents=True)
    (fake / "lib" / "pkgconfig").mkdir(parents=True)
    (fake / "lib" / "pkgconfig" / "python-3.14t.pc").write_text("prefix=%s\n" % fake)
    shutil.copy("/bin/false", fake / "bin" / "python3.14t")
    (fake / "bin" / "python3").symlink_to("python3.14t")
    (fake / ".brc-merge-key").write_text(
        "flavour ft-brc\npython 3.14.7\nseries %s\nconfigure --prefix=%s --disable-gil\n"
        % ("0" * 64, fake))
    dist = scratch / "dist"
    dist.mkdir()
    (dist / "ft-brc").symlink_to(fake)
    out = scratch / "out"
    out.mkdir()
    (out / "keep.txt").write_text("a file that was there before\n")
    proc = dist_tarball(out, "ft-brc", dist)
    assert proc.returncode != 0, proc.stdout
    assert "removing the partial output" in proc.stderr, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    assert (fake / "bin" / "python3.14t").read_bytes() == Path("/bin/false").read_bytes()
