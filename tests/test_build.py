"""Tests for build.sh: its error paths (fast, on tiny fake trees in temp dirs) and
the smoke checks of every flavour that has been built into dist/.

The error tests never touch the real cache or dist/: each runs build.sh with a
temporary BRC_MERGE_CACHE and BRC_MERGE_DIST and BRC_MERGE_OFFLINE=1, and checks
both the message and that the (pre-populated) dist dir is left exactly as it was.
"""
import hashlib
import os
import re
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from conftest import COMPARE_FLAVOURS, EXTRA_FLAVOURS, FLAVOURS, MAIN_FLAVOURS, ROOT, clean_env, dist_python

pytestmark = pytest.mark.timeout(600)
HANG_GUARD = 240

BUILD_SH = ROOT / "build.sh"
REPO_PATCHES = ROOT / "patches" / "3.14"


def _base():
    vals = {}
    for line in (REPO_PATCHES / "base").read_text().splitlines():
        m = re.match(r"^([A-Z0-9_]+)=(.*)$", line.strip())
        if m:
            vals[m.group(1)] = m.group(2).strip("\"'")
    return vals


BASE = _base()
VERSION = BASE["PY_VERSION"]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_env(**extra):
    """clean_env() for build.sh and make: without the caller's BRC_MERGE_*
    (cache, dist, source...: each test sets its own), bytecode left alone."""
    return clean_env(extra, drop=("BRC_MERGE_",), write_bytecode=True)


@pytest.fixture
def sandbox(tmp_path):
    """Temp cache + a pre-populated temp dist; .run() calls build.sh against them."""
    return Sandbox(tmp_path)


class Sandbox:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.cache = tmp / "cache"
        self.dist = tmp / "dist"
        self.dist.mkdir()
        # Something a previous good build would have left: must survive any failure.
        (tmp / "old-install" / "bin").mkdir(parents=True)
        (self.dist / "ft-brc").symlink_to(tmp / "old-install")
        (self.dist / "gil").symlink_to(tmp / "old-install")
        (self.dist / "NOTE").write_text("pre-existing\n")
        self.before = self.snapshot()

    def snapshot(self):
        snap = {}
        for p in sorted(self.dist.rglob("*")):
            rel = str(p.relative_to(self.dist))
            if p.is_symlink():
                snap[rel] = ("link", os.readlink(p))
            elif p.is_file():
                snap[rel] = ("file", p.read_bytes())
            else:
                snap[rel] = ("dir", None)
        return snap

    def assert_dist_untouched(self):
        assert self.snapshot() == self.before, "build.sh modified dist/ although it failed"
        assert not (self.cache / "install").exists() or not any((self.cache / "install").iterdir())

    def run(self, *args, timeout=60, **env):
        e = build_env(BRC_MERGE_CACHE=self.cache, BRC_MERGE_DIST=self.dist, BRC_MERGE_OFFLINE=1, **env)
        t0 = time.monotonic()
        # A run takes about a second; `timeout` only turns a hang into a failure.
        # CI once saw a 1-s stage pass 60 s on a loaded machine, so the guard has
        # a floor, and a hang reports the stage logs.
        try:
            proc = subprocess.run([str(BUILD_SH), *map(str, args)], env=e, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=max(timeout, HANG_GUARD))
        except subprocess.TimeoutExpired as exc:
            out = exc.output or b""
            out = out.decode(errors="replace") if isinstance(out, bytes) else out
            pytest.fail(f"build.sh {' '.join(map(str, args))} still running after {exc.timeout} s\n"
                        f"{out}\n{self.stage_logs()}", pytrace=False)
        proc.elapsed = time.monotonic() - t0
        proc.out = proc.stdout + proc.stderr
        return proc

    def stage_logs(self):
        return "".join(f"--- {p.relative_to(self.cache)}\n{p.read_text(errors='replace')[-4000:]}\n"
                       for p in sorted(self.cache.glob("build/*/logs/*.log"))) or "(no stage logs)"


FAKE_CONFIGURE = "#!/bin/sh\necho 'fake configure: not a real CPython tree' >&2\nexit 1\n"


def make_tree(path: Path, version=VERSION) -> Path:
    """A tiny stand-in for a CPython tree: just what the source checks look at."""
    (path / "Include").mkdir(parents=True)
    (path / "Include" / "patchlevel.h").write_text(
        "/* fake */\n#define PY_MAJOR_VERSION 3\n"
        f'#define PY_VERSION              "{version}"\n')
    (path / "configure").write_text(FAKE_CONFIGURE)
    (path / "configure").chmod(0o755)
    (path / "Python").mkdir()
    (path / "Python" / "brc.c").write_text("/* fake brc.c */\nint x;\nint y;\n")
    return path


def make_patches(path: Path, tree: Path, patches=None) -> Path:
    """A patches dir: the repo's base, a series of `patches` {name: text}, and
    checksums of Include/patchlevel.h, configure and Python/brc.c in `tree`."""
    patches = patches or {}
    path.mkdir(parents=True)
    shutil.copy(REPO_PATCHES / "base", path / "base")
    (path / "series").write_text("# test series\n" + "".join(f"{n}\n" for n in patches))
    for name, text in patches.items():
        (path / name).write_text(text)
    lines = [f"{sha256(tree / f)}  {f}\n" for f in ("Include/patchlevel.h", "Python/brc.c", "configure")]
    (path / "checksums").write_text("".join(lines))
    return path


def make_tarball(path: Path, tree: Path) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        tar.add(tree, arcname=f"Python-{VERSION}")
    return path


# --------------------------------------------------------------------------- CLI


def test_help(sandbox):
    p = sandbox.run("--help")
    assert p.returncode == 0
    for word in ("gil", "ft-brc", "--source", "BRC_MERGE_SOURCE", "--offline", "--patches", "--update-checksums"):
        assert word in p.stdout


def test_checking_flavours_listed(sandbox):
    p = sandbox.run("--help")
    assert p.returncode == 0
    for flavour in ("ft-brc-debug", "ft-tsan", "ft-brc-tsan", "ft-asan", "ft-brc-asan"):
        assert re.search(rf"^  {flavour} ", p.stdout, re.M), p.stdout
    assert "--with-pydebug" in p.stdout and "ThreadSanitizer" in p.stdout
    assert "AddressSanitizer" in p.stdout


def test_unknown_flavour(sandbox):
    p = sandbox.run("gil", "nogil", "ft-brc")
    assert p.returncode == 2, p.out
    assert "unknown flavour" in p.stderr and "nogil" in p.stderr
    assert "gil ft ft-brc ft-brc-debug ft-tsan ft-brc-tsan ft-asan ft-brc-asan" in p.stderr   # lists the valid ones
    assert not sandbox.cache.exists()           # nothing touched at all
    sandbox.assert_dist_untouched()


def test_no_flavour(sandbox):
    p = sandbox.run()
    assert p.returncode == 2
    assert "no flavour" in p.stderr and "gil ft ft-brc" in p.stderr
    assert not sandbox.cache.exists()


def test_bad_jobs(sandbox):
    p = sandbox.run("--jobs", "many", "gil")
    assert p.returncode == 2 and "positive integer" in p.stderr


# The groups of build.sh's table as the Makefile, conftest, bench/ and image/ read them.
GROUPS = {
    "core": ("gil", "ft", "ft-brc"),
    "main": ("main-ft", "main-ft-brc"),
    "checking": ("ft-brc-debug", "ft-tsan", "ft-brc-tsan", "ft-asan", "ft-brc-asan"),
    "compare": ("ft-upstream", "main-ft-upstream", "ft-upstream-debug"),
}


def test_list(sandbox):
    """--list: a '#' line naming the columns, then one tab-separated row per
    flavour (flavour line group gil description first); it needs no source,
    patches or cache."""
    p = sandbox.run("--list", BRC_MERGE_PATCHES=sandbox.tmp / "no-patches")
    assert p.returncode == 0 and p.stderr == "", p.out
    header, *rows = p.stdout.splitlines()
    assert header.startswith("#")
    assert header.lstrip("# ").split("\t")[:5] == ["flavour", "line", "group", "gil", "description"]
    table = {r.split("\t")[0]: r.split("\t") for r in rows}
    assert len(table) == len(rows) and sorted(table) == sorted(sum(GROUPS.values(), ()))
    for name, (_, line, group, gil, desc, *_) in table.items():
        assert (line, gil) == ("main" if name.startswith("main-") else "3.14", str(name == "gil")), name
        assert group in GROUPS and desc, name
    assert {g: tuple(f for f in table if table[f][2] == g) for g in GROUPS} == GROUPS
    assert "ThreadSanitizer" in table["ft-brc-tsan"][4]
    assert not sandbox.cache.exists()


@pytest.mark.parametrize("group", GROUPS)
def test_list_group(sandbox, group):
    p = sandbox.run("--list", group)
    assert p.returncode == 0, p.out
    assert tuple(p.stdout.splitlines()) == GROUPS[group]


def test_list_groups_in_table_order(sandbox):
    p = sandbox.run("--list", "compare", "core")
    assert p.returncode == 0, p.out
    assert p.stdout.split() == ["gil", "ft", "ft-brc", "ft-upstream", "main-ft-upstream", "ft-upstream-debug"]


def test_list_unknown_group(sandbox):
    p = sandbox.run("--list", "core", "nosuch")
    assert p.returncode == 2 and p.stdout == "", p.out
    assert "unknown group 'nosuch'" in p.stderr and "core main checking compare" in p.stderr
    assert "--list" in sandbox.run("--help").stdout


def test_conftest_flavours_are_the_groups():
    assert (FLAVOURS, MAIN_FLAVOURS, EXTRA_FLAVOURS, COMPARE_FLAVOURS) == tuple(GROUPS.values())


def test_make_flavour_targets():
    """One Makefile rule builds each flavour of the table; make help lists them."""
    env = {k: v for k, v in build_env().items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    make = ["make", "-n", "--no-print-directory", "-C", str(ROOT)]
    for flavour in sum(GROUPS.values(), ()):
        p = subprocess.run([*make, flavour], env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and re.fullmatch(rf"\./build\.sh\s+{flavour}\n", p.stdout), p.stdout + p.stderr
    p = subprocess.run(make[:1] + make[2:] + ["help"], env=env, capture_output=True, text=True, timeout=60)
    for flavour in sum(GROUPS.values(), ()):
        assert re.search(rf"^  {flavour} +build dist/{flavour}: ", p.stdout, re.M), p.stdout


# --------------------------------------------------------------------------- source


def test_wrong_tarball_checksum(sandbox, tmp_path):
    tgz = make_tarball(tmp_path / f"Python-{VERSION}.tgz", make_tree(tmp_path / "t"))
    p = sandbox.run("--source", tgz, "gil", timeout=30)
    assert p.returncode == 1, p.out
    assert "wrong sha256" in p.stderr
    assert BASE["SHA256"] in p.stderr            # expected
    assert sha256(tgz) in p.stderr               # actual
    assert "fix:" in p.stderr
    assert not (sandbox.cache / "sources").exists()   # never unpacked
    sandbox.assert_dist_untouched()


def test_wrong_checksum_in_download_cache(sandbox, tmp_path):
    dl = sandbox.cache / "downloads" / f"Python-{VERSION}.tgz"
    dl.parent.mkdir(parents=True)
    make_tarball(dl, make_tree(tmp_path / "t"))
    p = sandbox.run("ft", timeout=30)
    assert p.returncode == 1, p.out
    assert "wrong sha256" in p.stderr and str(dl) in p.stderr and BASE["SHA256"] in p.stderr
    sandbox.assert_dist_untouched()


def test_missing_source(sandbox):
    p = sandbox.run("ft-brc", timeout=30)
    assert p.returncode == 1, p.out
    assert "no CPython" in p.stderr and "source found" in p.stderr
    # says exactly how to provide it
    for hint in ("BRC_MERGE_SOURCE", "--source",
                 str(sandbox.cache / "downloads" / f"Python-{VERSION}.tgz"),
                 str(sandbox.cache / "sources" / f"Python-{VERSION}")):
        assert hint in p.stderr, hint
    sandbox.assert_dist_untouched()


def test_source_path_does_not_exist(sandbox, tmp_path):
    p = sandbox.run("--source", tmp_path / "nope.tgz", "gil")
    assert p.returncode == 1 and "does not exist" in p.stderr
    sandbox.assert_dist_untouched()


def test_tree_of_another_version(sandbox, tmp_path):
    tree = make_tree(tmp_path / "Python-3.14.6", version="3.14.6")
    p = sandbox.run("--source", tree, "gil", timeout=30)
    assert p.returncode == 1, p.out
    assert f"is version 3.14.6, expected {VERSION}" in p.stderr
    sandbox.assert_dist_untouched()


def test_tree_with_modified_touched_file(sandbox, tmp_path):
    tree = make_tree(tmp_path / "tree")
    patches = make_patches(tmp_path / "patches", tree)
    with open(tree / "Python" / "brc.c", "a") as f:
        f.write("/* local change */\n")
    p = sandbox.run("--source", tree, "--patches", patches, "ft-brc", timeout=30)
    assert p.returncode == 1, p.out
    assert "Python/brc.c" in p.stderr and "refusing" in p.stderr
    assert "configure" not in p.stderr.split("refusing")[0].split("touches:")[-1]  # only the modified one
    sandbox.assert_dist_untouched()


def test_default_tree_location_is_verified(sandbox, tmp_path):
    tree = make_tree(sandbox.cache / "sources" / f"Python-{VERSION}")
    patches = make_patches(tmp_path / "patches", tree)
    (tree / "configure").write_text("#!/bin/sh\n# tampered\n")
    p = sandbox.run("--patches", patches, "gil", timeout=30)
    assert p.returncode == 1, p.out
    assert "configure" in p.stderr and "refusing" in p.stderr
    sandbox.assert_dist_untouched()


# --------------------------------------------------------------------------- patch


BAD_CONTEXT_PATCH = """\
From: test
Subject: [PATCH] does not apply

---
diff --git a/configure b/configure
index 1111111..2222222 100755
--- a/configure
+++ b/configure
@@ -1,3 +1,3 @@
 #!/bin/sh
-echo 'this line is not in the file'
+echo patched
 exit 1
"""

GOOD_PATCH = """\
diff --git a/Python/brc.c b/Python/brc.c
--- a/Python/brc.c
+++ b/Python/brc.c
@@ -1,3 +1,3 @@
 /* fake brc.c */
-int x;
+int x = 1;
 int y;
"""

MISSING_FILE_PATCH = """\
diff --git a/Python/no_such_file.c b/Python/no_such_file.c
--- a/Python/no_such_file.c
+++ b/Python/no_such_file.c
@@ -1,1 +1,1 @@
-a
+b
"""


def test_patch_that_does_not_apply(sandbox, tmp_path):
    tree = make_tree(tmp_path / "tree")
    patches = make_patches(tmp_path / "patches", tree, {
        "0001-good.patch": GOOD_PATCH,
        "0002-bogus.patch": BAD_CONTEXT_PATCH,
    })
    p = sandbox.run("--source", tree, "--patches", patches, "ft-brc", timeout=60)
    assert p.returncode == 1, p.out
    err = p.stderr
    assert "0002-bogus.patch" in err and "does not apply" in err
    assert "rejected file(s): configure" in err
    assert "0001-good.patch does not apply" not in err
    assert "patch ft-brc FAILED" in err
    assert not (sandbox.cache / "build" / "ft-brc" / "obj").exists()   # never configured
    sandbox.assert_dist_untouched()


def test_patch_for_missing_file(sandbox, tmp_path):
    tree = make_tree(tmp_path / "tree")
    patches = make_patches(tmp_path / "patches", tree, {"0001-ghost.patch": MISSING_FILE_PATCH})
    p = sandbox.run("--source", tree, "--patches", patches, "ft-brc", timeout=60)
    assert p.returncode == 1, p.out
    assert "0001-ghost.patch" in p.stderr and "Python/no_such_file.c" in p.stderr
    sandbox.assert_dist_untouched()


def test_series_names_missing_patch(sandbox, tmp_path):
    tree = make_tree(tmp_path / "tree")
    patches = make_patches(tmp_path / "patches", tree, {"0001-good.patch": GOOD_PATCH})
    with open(patches / "series", "a") as f:
        f.write("0002-not-there.patch  # comment\n")
    p = sandbox.run("--source", tree, "--patches", patches, "ft-brc", timeout=60)
    assert p.returncode == 1, p.out
    assert "0002-not-there.patch" in p.stderr and "does not exist" in p.stderr
    sandbox.assert_dist_untouched()


CHECKING_PATCH = """\
diff --git a/Include/patchlevel.h b/Include/patchlevel.h
--- a/Include/patchlevel.h
+++ b/Include/patchlevel.h
@@ -1,1 +1,1 @@
-/* fake */
+/* fake, checked */
"""


def add_checking_series(patches: Path, name="asan", files=None) -> Path:
    files = {"0001-asan-check.patch": CHECKING_PATCH} if files is None else files
    (patches / "checking").mkdir(exist_ok=True)
    (patches / "checking" / f"{name}.series").write_text(
        "# test checking series\n" + "".join(f"{n}\n" for n in files))
    for n, text in files.items():
        (patches / "checking" / n).write_text(text)
    return patches


# The patch stage's result, then the fake configure fails: no compiler runs.
@pytest.mark.parametrize("flavour,series,checking", [
    ("ft-asan", False, True),           # the checking series alone
    ("ft-brc-asan", True, True),        # the series, then the checking series
    ("ft-brc", True, False),            # never the checking series
])
def test_checking_series_only_for_its_flavours(sandbox, tmp_path, flavour, series, checking):
    tree = make_tree(tmp_path / "tree")
    patches = add_checking_series(make_patches(tmp_path / "patches", tree,
                                               {"0001-good.patch": GOOD_PATCH}))
    p = sandbox.run("--source", tree, "--patches", patches, "--no-deps", flavour, timeout=60)
    assert p.returncode == 1 and f"configure {flavour} FAILED" in p.stderr, p.out
    src = sandbox.cache / "build" / flavour / "src"
    assert ("int x = 1;" in (src / "Python" / "brc.c").read_text()) == series
    assert ("checked" in (src / "Include" / "patchlevel.h").read_text()) == checking
    if checking:
        assert "1 checking patch(es)" in p.stdout, p.out
    sandbox.assert_dist_untouched()


def test_release_is_optimised_in_a_cache_of_its_own(sandbox, tmp_path):
    """make release: PGO + LTO into CACHE/release (sharing CACHE's sources)
    and RELEASE_DIST; the dev builds and dist/ are left alone."""
    tree = make_tree(tmp_path / "tree")
    patches = make_patches(tmp_path / "patches", tree)
    rel = tmp_path / "release-dist"
    p = subprocess.run(["make", "-s", "--no-print-directory", "-C", str(ROOT), "release",
                        f"CACHE={sandbox.cache}", f"SOURCE={tree}", f"PATCHES={patches}",
                        f"RELEASE_DIST={rel}", "OFFLINE=1"],
                       env=build_env(BRC_MERGE_DIST=sandbox.dist, BRC_MERGE_NO_DEPS=1),
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=HANG_GUARD)
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "configure ft-brc FAILED" in out, out
    log = (sandbox.cache / "release" / "build" / "ft-brc" / "logs" / "configure.log").read_text()
    assert "--enable-optimizations" in log and "--with-lto" in log, log
    assert (sandbox.cache / "release" / "sources").resolve() == (sandbox.cache / "sources").resolve()
    assert not (sandbox.cache / "build").exists(), "a release build touched the dev builds"
    assert not rel.exists() or not any(rel.iterdir())
    sandbox.assert_dist_untouched()


def test_checking_series_missing(sandbox, tmp_path):
    tree = make_tree(tmp_path / "tree")
    patches = make_patches(tmp_path / "patches", tree)
    p = sandbox.run("--source", tree, "--patches", patches, "--no-deps", "ft-asan", timeout=60)
    assert p.returncode == 1, p.out
    assert "checking/asan.series" in p.stderr and "does not exist" in p.stderr
    sandbox.assert_dist_untouched()


# --------------------------------------------------------------------------- checksums


NEW_FILE_PATCH = """\
diff --git a/Python/brc_new.c b/Python/brc_new.c
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/Python/brc_new.c
@@ -0,0 +1 @@
+int z;
"""

PLAIN_DIFF = """\
--- a/Include/patchlevel.h\t2025-01-01 00:00:00
+++ b/Include/patchlevel.h\t2025-01-01 00:00:00
@@ -1,1 +1,1 @@
-/* fake */
+/* fake, patched */
"""


def test_update_checksums_empty_series(sandbox, tmp_path):
    tree = make_tree(tmp_path / "tree")
    patches = make_patches(tmp_path / "patches", tree)
    p = sandbox.run("--source", tree, "--patches", patches, "--update-checksums")
    assert p.returncode == 0, p.out
    assert (patches / "checksums").read_text() == (
        f"{sha256(tree / 'Include/patchlevel.h')}  Include/patchlevel.h\n"
        f"{sha256(tree / 'configure')}  configure\n")


def test_update_checksums_lists_touched_not_new_files(sandbox, tmp_path):
    tree = make_tree(tmp_path / "tree")
    patches = make_patches(tmp_path / "patches", tree, {
        "0001-brc.patch": GOOD_PATCH + NEW_FILE_PATCH,
        "0002-plain.patch": PLAIN_DIFF,
    })
    (patches / "checksums").write_text("")
    p = sandbox.run("--source", tree, "--patches", patches, "--update-checksums")
    assert p.returncode == 0, p.out
    lines = (patches / "checksums").read_text().splitlines()
    assert [ln.split("  ", 1)[1] for ln in lines] == ["Include/patchlevel.h", "Python/brc.c", "configure"]
    for ln in lines:
        digest, rel = ln.split("  ", 1)
        assert digest == sha256(tree / rel)
    # ...and the result is accepted by the source check (then the build goes on
    # to the patch stage, which succeeds, and on to deps/configure: stop there
    # by asking only whether it is up to date)
    p = sandbox.run("--source", tree, "--patches", patches, "--check", "ft-brc")
    assert p.returncode == 3 and "ft-brc needs a build" in p.stdout, p.out


def test_update_checksums_includes_checking_series(sandbox, tmp_path):
    tree = make_tree(tmp_path / "tree")
    (tree / "Include" / "pycore_object.h").write_text("/* fake */\nint a;\n")
    patches = add_checking_series(make_patches(tmp_path / "patches", tree), files={
        "0001-asan.patch": PLAIN_DIFF.replace("Include/patchlevel.h", "Include/pycore_object.h")})
    p = sandbox.run("--source", tree, "--patches", patches, "--update-checksums")
    assert p.returncode == 0, p.out
    lines = (patches / "checksums").read_text().splitlines()
    assert [ln.split("  ", 1)[1] for ln in lines] == [
        "Include/patchlevel.h", "Include/pycore_object.h", "configure"]


def test_update_checksums_checks_version_first(sandbox, tmp_path):
    tree = make_tree(tmp_path / "tree", version="3.13.9")
    patches = make_patches(tmp_path / "patches", tree)
    before = (patches / "checksums").read_text()
    p = sandbox.run("--source", tree, "--patches", patches, "--update-checksums")
    assert p.returncode == 1 and "is version 3.13.9" in p.stderr
    assert (patches / "checksums").read_text() == before


def test_repo_checksums_match_series(tmp_path):
    """patches/3.14/checksums is what --update-checksums computes (needs the real source)."""
    patches = tmp_path / "patches"
    shutil.copytree(REPO_PATCHES, patches)
    env = build_env(BRC_MERGE_OFFLINE=1, BRC_MERGE_PATCHES=patches,
                    BRC_MERGE_SOURCE=os.environ.get("BRC_MERGE_SOURCE", ""))
    env.pop("BRC_MERGE_CACHE", None)
    if os.environ.get("BRC_MERGE_CACHE"):
        env["BRC_MERGE_CACHE"] = os.environ["BRC_MERGE_CACHE"]
    p = subprocess.run([str(BUILD_SH), "--update-checksums"], env=env, capture_output=True,
                       text=True, timeout=120, stdin=subprocess.DEVNULL)
    if p.returncode != 0 and "no CPython" in p.stderr:
        pytest.skip("no local CPython source to compute checksums from")
    assert p.returncode == 0, p.stdout + p.stderr
    assert (patches / "checksums").read_text() == (REPO_PATCHES / "checksums").read_text(), \
        "patches/3.14/checksums is stale: run ./build.sh --update-checksums"


# --------------------------------------------------------------------------- whole pipeline, fake tree
# A tree whose `configure` writes a tiny Makefile that "installs" a shell-script
# python3 answering the smoke stage's questions: the full pipeline in seconds.

FAKE_BUILD_CONFIGURE = """\
#!/bin/sh
srcdir=$(cd "$(dirname "$0")" && pwd)
for a in "$@"; do case $a in --prefix=*) prefix=${a#--prefix=};; esac; done
printf '%s\\n' "$@" > configure-args.txt
{
  echo "PREFIX = $prefix"
  echo "all:"
  printf '\\t@echo fake build\\n'
  printf '\\t@echo "ASAN_OPTIONS=$$ASAN_OPTIONS" > build-env.txt\\n'
  echo "install:"
  printf '\\tmkdir -p $(DESTDIR)$(PREFIX)/bin\\n'
  printf '\\tcp %s/fake-python $(DESTDIR)$(PREFIX)/bin/python3.14\\n' "$srcdir"
  printf '\\tln -sf python3.14 $(DESTDIR)$(PREFIX)/bin/python3\\n'
} > Makefile
"""

FAKE_PYTHON = """\
#!/bin/sh
# answers build.sh's smoke checks like a free-threaded 3.14.7 would
case "$*" in
  *_is_gil_enabled*) echo False ;;
  *python_version*) echo 3.14.7 ;;
  *"-m pip --version"*) echo "pip 99 (fake)" ;;
esac
exit 0
"""

BREAK_PYTHON_PATCH = """\
diff --git a/fake-python b/fake-python
--- a/fake-python
+++ b/fake-python
@@ -1,3 +1,4 @@
 #!/bin/sh
+exit 1
 # answers build.sh's smoke checks like a free-threaded 3.14.7 would
 case "$*" in
"""


def make_buildable_tree(path: Path) -> Path:
    make_tree(path)
    (path / "configure").write_text(FAKE_BUILD_CONFIGURE)
    (path / "fake-python").write_text(FAKE_PYTHON)
    (path / "fake-python").chmod(0o755)
    return path


@pytest.fixture
def fake(sandbox, tmp_path):
    sandbox.tree = make_buildable_tree(tmp_path / "tree")
    sandbox.patches = make_patches(tmp_path / "patches", sandbox.tree)
    sandbox.build = lambda *a, **kw: sandbox.run(
        "--source", sandbox.tree, "--patches", sandbox.patches, "--no-deps", *a, **kw)
    return sandbox


def test_fake_build_installs_links_and_noops(fake):
    p = fake.build("ft", "ft-brc")
    assert p.returncode == 0, p.out
    for stage in ("patch", "deps", "configure", "make", "install", "smoke", "activate"):
        assert re.search(rf"\] {stage} ft-brc \.\.\. ok", p.stdout), (stage, p.stdout)
    for f in ("ft", "ft-brc"):
        prefix = fake.cache / "install" / f
        assert os.readlink(fake.dist / f) == str(prefix)
        assert (prefix / "bin" / "python3").exists()
        key = (prefix / ".brc-merge-key").read_text()
        assert f"flavour {f}\n" in key and "source-id tree-" in key
        assert (fake.cache / "build" / f / "logs" / "make.log").exists()
        args = (fake.cache / "build" / f / "obj" / "configure-args.txt").read_text().split("\n")
        assert f"--prefix={prefix}" in args and "--disable-gil" in args
        assert "--with-ensurepip=install" in args and "--enable-optimizations" not in args
    assert list((fake.cache / "tmp").iterdir()) == []      # staged installs cleaned up

    p = fake.build("ft", "ft-brc")                         # warm: no-op
    assert p.returncode == 0, p.out
    assert "ft up to date" in p.stdout and "ft-brc up to date" in p.stdout
    assert "configure" not in p.stdout and p.elapsed < 10
    assert not (fake.cache / "build" / "ft" / "staging").exists()

    (fake.dist / "ft").unlink()                            # e.g. a fresh clone
    p = fake.build("ft")
    assert p.returncode == 0 and "relinked" in p.stdout, p.out
    assert os.readlink(fake.dist / "ft") == str(fake.cache / "install" / "ft")


def test_fake_build_patch_change_rebuilds_only_what_changed(fake):
    (fake.patches / "0001-brc.patch").write_text(GOOD_PATCH)
    (fake.patches / "series").write_text("0001-brc.patch\n")
    assert fake.build("ft-brc").returncode == 0
    src = fake.cache / "build" / "ft-brc" / "src"
    assert "int x = 1;" in (src / "Python" / "brc.c").read_text()
    mtime_configure = (src / "configure").stat().st_mtime_ns
    mtime_brc = (src / "Python" / "brc.c").stat().st_mtime_ns
    time.sleep(1.1)

    (fake.patches / "0001-brc.patch").write_text(GOOD_PATCH.replace("int x = 1;", "int x = 2;"))
    p = fake.build("ft-brc")
    assert p.returncode == 0, p.out
    assert "int x = 2;" in (src / "Python" / "brc.c").read_text()
    assert (src / "Python" / "brc.c").stat().st_mtime_ns > mtime_brc      # changed file: new mtime
    assert (src / "configure").stat().st_mtime_ns == mtime_configure        # unchanged: kept
    assert re.search(r"configure ft-brc \.\.\. ok \(\d+s, unchanged", p.stdout), p.stdout
    assert "0001-brc.patch" in (fake.cache / "install" / "ft-brc" / ".brc-merge-key").read_text()


def test_fake_build_optimised_tree_change_trains_again(fake):
    """PGO trains once per obj dir: an optimised build of a changed tree
    starts from an empty one (gcc refuses a stale profile)."""
    (fake.patches / "0001-brc.patch").write_text(GOOD_PATCH)
    (fake.patches / "series").write_text("0001-brc.patch\n")
    assert fake.build("--optimize", "ft-brc").returncode == 0
    (fake.patches / "0001-brc.patch").write_text(GOOD_PATCH.replace("int x = 1;", "int x = 2;"))
    p = fake.build("--optimize", "ft-brc")
    assert p.returncode == 0, p.out
    log = (fake.cache / "build" / "ft-brc" / "logs" / "configure.log").read_text()
    assert "starting from an empty obj dir" in log, log


def test_fake_build_asan_flavour(fake):
    """ft-asan: its configure flags, CFLAGS, build environment and checking series
    are in its key; the other flavours' keys and environment do not change."""
    add_checking_series(fake.patches)
    p = fake.build("ft-asan", "ft")
    assert p.returncode == 0, p.out
    obj = fake.cache / "build" / "ft-asan" / "obj"
    args = (obj / "configure-args.txt").read_text().split("\n")
    for a in ("--disable-gil", "--with-address-sanitizer", "--with-pydebug", "CC=clang-16"):
        assert a in args, args
    cflags = next(a for a in args if a.startswith("CFLAGS="))
    assert "-DMI_TRACK_ASAN=1" in cflags and "-fsanitize-recover=address" in cflags
    assert (obj / "build-env.txt").read_text() == "ASAN_OPTIONS=detect_leaks=0\n"
    assert (fake.cache / "build" / "ft" / "obj" / "build-env.txt").read_text() == "ASAN_OPTIONS=\n"
    key = (fake.cache / "install" / "ft-asan" / ".brc-merge-key").read_text()
    assert "checking-series checking/asan.series " in key
    assert "checking-patch 0001-asan-check.patch\n" in key and "series none\n" in key
    assert "checking" not in (fake.cache / "install" / "ft" / ".brc-merge-key").read_text()
    # A changed checking patch rebuilds the -asan flavours only.
    (fake.patches / "checking" / "0001-asan-check.patch").write_text(
        CHECKING_PATCH.replace("checked", "checked again"))
    assert fake.build("--check", "ft").returncode == 0
    p = fake.build("--check", "ft-asan")
    assert p.returncode == 3 and "ft-asan needs a build" in p.stdout, p.out


def test_fake_build_smoke_failure_keeps_old_install(fake):
    assert fake.build("ft-brc").returncode == 0
    prefix = fake.cache / "install" / "ft-brc"
    old_key = (prefix / ".brc-merge-key").read_text()
    fake.before = fake.snapshot()

    (fake.patches / "0001-break.patch").write_text(BREAK_PYTHON_PATCH)
    (fake.patches / "series").write_text("0001-break.patch\n")
    p = fake.build("ft-brc")
    assert p.returncode == 1, p.out
    assert "smoke ft-brc FAILED" in p.stderr and "does not start" in p.stderr
    assert "smoke.log" in p.stderr
    assert (prefix / ".brc-merge-key").read_text() == old_key               # old install intact
    assert subprocess.run([str(prefix / "bin" / "python3"), "-c", "_is_gil_enabled"],
                          capture_output=True, text=True).stdout == "False\n"
    assert fake.snapshot() == fake.before                                   # dist untouched
    assert list((fake.cache / "tmp").iterdir()) == []                       # staging removed
    assert sorted(x.name for x in (fake.cache / "install").iterdir()) == ["ft-brc"]


def test_fake_build_tarball_source(fake, tmp_path):
    """A tarball matching the pinned sha256 is unpacked once and then used as a tree."""
    tgz = make_tarball(tmp_path / f"Python-{VERSION}.tgz", fake.tree)
    base = (fake.patches / "base").read_text()
    (fake.patches / "base").write_text(re.sub(r"SHA256=\w+", f"SHA256={sha256(tgz)}", base))
    p = fake.run("--source", tgz, "--patches", fake.patches, "--no-deps", "gil")
    assert p.returncode == 1, p.out                  # our fake python claims to be free-threaded...
    assert "expected True" in p.stderr               # ...so the gil smoke check must catch it
    unpacked = fake.cache / "sources" / f"Python-{VERSION}-{sha256(tgz)[:12]}"
    assert (unpacked / "configure").exists()
    key_src = (fake.cache / "build" / "logs" / "source.log").read_text()
    assert "tarball" in key_src
    p = fake.run("--source", tgz, "--patches", fake.patches, "--no-deps", "ft")
    assert p.returncode == 0, p.out
    assert f"source-id tarball-{sha256(tgz)}" in (fake.cache / "install" / "ft" / ".brc-merge-key").read_text()
    assert "reusing" in (fake.cache / "build" / "ft" / "logs" / "patch.log").read_text()



def test_fake_build_prefix(fake, tmp_path):
    """--prefix/BRC_MERGE_PREFIX installs the flavour there (configure --prefix, key,
    dist link), is a no-op when up to date, and never replaces a foreign directory."""
    prefix = tmp_path / "opt" / "py"
    p = fake.build("--prefix", prefix, "ft-brc")
    assert p.returncode == 0, p.out
    assert (prefix / "bin" / "python3").exists() and (prefix / ".brc-merge-key").exists()
    assert os.readlink(fake.dist / "ft-brc") == str(prefix)
    args = (fake.cache / "build" / "ft-brc" / "obj" / "configure-args.txt").read_text().split("\n")
    assert f"--prefix={prefix}" in args
    assert f"configure --prefix={prefix} " in (prefix / ".brc-merge-key").read_text()
    assert not (fake.cache / "install" / "ft-brc").exists()
    assert sorted(x.name for x in prefix.parent.iterdir()) == ["py"]    # no .py.old left

    p = fake.build("ft-brc", BRC_MERGE_PREFIX=prefix)                   # env form; warm: no-op
    assert p.returncode == 0 and "ft-brc up to date" in p.stdout, p.out
    assert "--prefix" in fake.build("--help").stdout
    assert f"BRC_MERGE_PREFIX={prefix}\n" in fake.build("--print-config", BRC_MERGE_PREFIX=prefix).stdout

    p = fake.build("--prefix", prefix, "ft", "ft-brc")                  # one flavour only
    assert p.returncode == 2 and "one flavour" in p.stderr, p.out

    foreign = tmp_path / "local"
    (foreign / "bin").mkdir(parents=True)
    (foreign / "bin" / "tool").write_text("someone else's\n")
    p = fake.build("--prefix", foreign, "ft")
    assert p.returncode == 1 and "refusing" in p.stderr and str(foreign) in p.stderr, p.out
    assert (foreign / "bin" / "tool").read_text() == "someone else's\n"
    assert not (foreign / "bin" / "python3").exists()

    empty = tmp_path / "empty"                                          # an empty dir is fine
    empty.mkdir()
    p = fake.build("--prefix", empty, "ft")
    assert p.returncode == 0 and (empty / "bin" / "python3").exists(), p.out


# --------------------------------------------------------------------------- built flavours


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_smoke(flavour):
    py = dist_python(flavour)
    code = ("import sys, platform, ssl, sqlite3, zlib, ctypes, venv;"
            "print(sys._is_gil_enabled(), platform.python_version())")
    p = subprocess.run([str(py), "-I", "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    gil, version = p.stdout.split()
    assert version == VERSION
    assert gil == ("True" if flavour == "gil" else "False")
    p = subprocess.run([str(py), "-I", "-m", "pip", "--version"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.startswith("pip "), p.stderr


def test_warm_noop_is_fast(tmp_path):
    """With the real cache: flavours already built are a no-op (< 30 s) that only
    (re)links a fresh dist dir, as in a fresh clone."""
    env = build_env(BRC_MERGE_OFFLINE=1, BRC_MERGE_DIST=tmp_path / "dist")
    for k in ("BRC_MERGE_CACHE", "BRC_MERGE_SOURCE"):
        if os.environ.get(k):
            env[k] = os.environ[k]
    p = subprocess.run([str(BUILD_SH), "--check", *FLAVOURS], env=env, capture_output=True,
                       text=True, timeout=120, stdin=subprocess.DEVNULL)
    ready = [f for f in FLAVOURS if f"{f} up to date" in p.stdout]
    if not ready:
        pytest.skip("no flavour is built and up to date in the real cache")
    t0 = time.monotonic()
    p = subprocess.run([str(BUILD_SH), *ready], env=env, capture_output=True, text=True,
                       timeout=120, stdin=subprocess.DEVNULL)
    elapsed = time.monotonic() - t0
    assert p.returncode == 0, p.stdout + p.stderr
    assert elapsed < 30, f"no-op run took {elapsed:.1f}s"
    for f in ready:
        assert re.search(rf"\] {re.escape(f)} up to date", p.stdout), p.stdout
        link = tmp_path / "dist" / f
        assert link.is_symlink() and (link / "bin" / "python3").exists()
    assert "configure" not in p.stdout and "make" not in p.stdout


def test_concurrent_builds_of_a_flavour_serialize(fake):
    """A second build.sh of the same flavour waits on $CACHE/build/<flavour>.lock."""
    import fcntl
    (fake.cache / "build").mkdir(parents=True)
    with open(fake.cache / "build" / "ft.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        e = build_env(BRC_MERGE_CACHE=fake.cache, BRC_MERGE_DIST=fake.dist, BRC_MERGE_OFFLINE=1)
        proc = subprocess.Popen([str(BUILD_SH), "--source", str(fake.tree), "--patches", str(fake.patches),
                                 "--no-deps", "ft"], env=e, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(2)
        assert proc.poll() is None, proc.stdout.read()            # still waiting
        assert not (fake.dist / "ft").exists()
    out, _ = proc.communicate(timeout=60)                          # lock released: it proceeds
    assert proc.returncode == 0, out
    assert "waiting for another build.sh" in out
    assert (fake.dist / "ft").is_symlink()


# --------------------------------------------------------------------------- the backport
def series_names(path):
    """Patch names of a series file, as build.sh reads them."""
    names = [ln.split("#")[0].strip() for ln in path.read_text().splitlines()]
    return [n for n in names if n]


@pytest.mark.parametrize("line", ["3.14", "main"])
def test_upstream_backport_applies_with_zero_fuzz(line):
    """patches/<line>/compare/upstream.series names one patch, the series'
    own first, the backport of gh-157838's fix (flavour ft-upstream), which
    applies to the pinned base exactly, without building anything."""
    env = build_env()
    for k in ("BRC_MERGE_CACHE", "BRC_MERGE_SOURCE"):
        if os.environ.get(k):
            env[k] = os.environ[k]
    conf = subprocess.run([str(BUILD_SH), "--line", line, "--print-config"], env=env,
                          capture_output=True, text=True, check=True).stdout
    cache = re.search(r"^BRC_MERGE_CACHE=(.*)$", conf, re.M).group(1)
    base = (ROOT / "patches" / line / "base").read_text()
    commit = re.search(r"^COMMIT=(\w+)", base, re.M)
    name = "cpython-" + commit.group(1) if commit else "Python-" + \
        re.search(r"^PY_VERSION=(\S+)", base, re.M).group(1)
    tree = Path(cache) / "sources" / name
    assert (tree / "Python" / "brc.c").is_file(), \
        f"no {line} source tree at {tree}: build a flavour of that line first (make test does)"
    series = ROOT / "patches" / line / "compare" / "upstream.series"
    names = series_names(series)
    assert len(names) == 1 and names[0].startswith("../0001-gh-157838-"), names
    shipped = series_names(ROOT / "patches" / line / "series")
    assert shipped[0] == names[0][3:], "not the series' first"
    text = (series.parent / names[0]).read_text()
    assert "\nOrigin: backport, python/cpython@17efa94" in text
    p = subprocess.run(["patch", "--dry-run", "-p1", "--fuzz=0", "-f", "-d", str(tree),
                        "-i", str(series.parent / names[0])],
                       capture_output=True, text=True)
    assert p.returncode == 0 and "offset" not in p.stdout and "fuzz" not in p.stdout, \
        p.stdout + p.stderr
