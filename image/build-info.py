"""image/build-info.py STAGED_PREFIX TARBALL_NAME: write STAGED_PREFIX/BUILD-INFO.json
for the relocatable tarball (image/dist-tarball.sh runs it with the staged
interpreter itself, -I: stdlib only), after checking that nothing the install
loads comes from the install's own prefix (the tarball would need an $ORIGIN
rpath then).

What it records: the version, flavour and series checksum from the install's
.brc-merge-key (the record build.sh wrote when it built it), sysconfig's
CONFIG_ARGS, the build date (the key's mtime: when build.sh activated the
install), the glibc it was built with and the newest GLIBC_x.y symbol version
any of its ELF files needs, and the Debian packages owning the shared
libraries they link (ldd + dpkg-query --search), each with its version and the
files that need it.
"""

import datetime
import glob
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import sysconfig

prefix, tarball = sys.argv[1], sys.argv[2]
prefix = os.path.realpath(prefix)


def fail(msg):
    print("build-info.py: " + msg, file=sys.stderr)
    sys.exit(1)


def run(*cmd, check=True):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if check and proc.returncode:
        fail("%s exited %d: %s" % (" ".join(cmd), proc.returncode, proc.stderr.strip()))
    return proc.stdout


def utc(ts):
    return (datetime.datetime.fromtimestamp(ts, datetime.timezone.utc)
            .replace(microsecond=0).isoformat().replace("+00:00", "Z"))


key_path = os.path.join(prefix, ".brc-merge-key")
key = {}
patches = []
for line in open(key_path):
    name, _, value = line.rstrip("\n").partition(" ")
    if name == "patch":
        patches.append(value)
    else:
        key[name] = value
flavour = key["flavour"]
series = key.get("series", "none")
build_prefix = re.match(r"--prefix=(\S+)", key.get("configure", "")).group(1)
line = "main" if flavour.startswith("main-") else "3.14"

# Every ELF file of the install (the interpreter, the extension modules).
elves = []
for d, dirs, files in os.walk(prefix):
    dirs.sort()
    for f in sorted(files):
        p = os.path.join(d, f)
        if os.path.islink(p) or not os.path.isfile(p):
            continue
        with open(p, "rb") as fh:
            if fh.read(4) == b"\x7fELF":
                elves.append(p)
interpreter = os.path.realpath(os.path.join(prefix, "bin", "python3"))


def rel(p):
    return os.path.relpath(p, prefix)


def per_file(text, header):
    """Split the output of a tool run on all the ELF files at once into
    {file: its part}; header matches the line that starts each part (a
    single file gets none)."""
    if len(elves) == 1:
        return {elves[0]: text}
    parts, cur = {}, None
    for raw in text.splitlines():
        m = re.match(header, raw)
        if m and m.group(1) in elf_set:
            cur = m.group(1)
            parts[cur] = ""
        elif cur:
            parts[cur] += raw + "\n"
    return parts


elf_set = set(elves)
# What each one loads, as the dynamic loader resolves it on this host; its
# rpaths; the GLIBC_x.y versions it needs. One run of each tool.
ldd_out = per_file(run("ldd", *elves, check=False), r"^(/.*):$")
dyn_out = per_file(run("readelf", "-d", "-V", "-W", *elves), r"^File: (.*)$")
loads = {}            # library path -> set of files needing it
missing = []
inside = []
for elf in elves:
    for raw in ldd_out.get(elf, "").splitlines():
        raw = raw.strip()
        if "not found" in raw:
            missing.append("%s: %s" % (rel(elf), raw))
            continue
        m = re.match(r"(?:\S+ => )?(/\S+) \(0x", raw)
        if not m:
            continue        # linux-vdso, "statically linked"
        lib = m.group(1)
        real = os.path.realpath(lib)
        if real.startswith(prefix + "/") or lib.startswith(build_prefix + "/"):
            inside.append("%s loads %s" % (rel(elf), lib))
        loads.setdefault(lib, set()).add(rel(elf))
    for m in re.finditer(r"\((?:RPATH|RUNPATH)\).*\[(.*)\]", dyn_out.get(elf, "")):
        if build_prefix in m.group(1) or "$ORIGIN" not in m.group(1):
            inside.append("%s has an rpath %s" % (rel(elf), m.group(1)))
if missing:
    fail("libraries not found on this host:\n  " + "\n  ".join(missing))
if inside:
    fail("this install loads libraries from its own prefix or has an absolute rpath,"
         " so an unpacked copy would not find them:\n  " + "\n  ".join(inside) +
         "\n  a tarball would need a relative rpath ($ORIGIN/../lib: apt-get install patchelf"
         " and patchelf --set-rpath); build.sh links libpython statically, so an install"
         " it made has none of these")


def glibc_needed(files):
    best = (0,)
    for f in files:
        for v in re.findall(r"Name: GLIBC_([0-9.]+)", dyn_out.get(f, "")):
            best = max(best, tuple(int(x) for x in v.split(".")))
    return ".".join(map(str, best)) if best != (0,) else None


# Debian packages. dpkg knows files by their unmerged path (/lib/... or
# /usr/lib/...), hence a pattern without the /usr.
def unmerged(p):
    return re.sub(r"^/usr(?=/)", "", p)


owners = {}          # unmerged path -> [packages]
patterns = sorted({"*" + unmerged(lib) for lib in loads})
if patterns:
    out = run("dpkg-query", "--search", *patterns, check=False)
    for raw in out.splitlines():
        pkgs, sep, path = raw.rpartition(": ")
        if not sep or "diversion" in raw:
            continue
        names = [p.strip().split(":")[0] for p in pkgs.split(",")]
        owners.setdefault(unmerged(path.strip()), []).extend(names)
packages = {}
unpackaged = []
for lib, needers in sorted(loads.items()):
    names = owners.get(unmerged(lib)) or owners.get(unmerged(os.path.realpath(lib)))
    if not names:
        unpackaged.append(lib)
        continue
    for name in sorted(set(names)):
        entry = packages.setdefault(name, {"libraries": set(), "needed_by": set()})
        entry["libraries"].add(os.path.basename(lib))
        entry["needed_by"] |= needers
versions = {}
if packages:
    out = run("dpkg-query", "-W", "-f", "${Package}\t${Version}\n", *packages, check=False)
    for raw in out.splitlines():
        name, _, version = raw.partition("\t")
        versions[name] = version
needed_by_interpreter = {rel(interpreter)}
debian_packages = {
    name: {
        "version": versions.get(name),
        "interpreter": bool(entry["needed_by"] & needed_by_interpreter),
        "libraries": sorted(entry["libraries"]),
        "needed_by": sorted(entry["needed_by"]),
    }
    for name, entry in sorted(packages.items())
}

config_args = sysconfig.get_config_var("CONFIG_ARGS") or ""
try:
    debian_release = open("/etc/debian_version").read().strip()
except OSError:
    debian_release = None
info = {
    "name": "brc-merge",
    "tarball": tarball,
    "version": key.get("python") or platform.python_version(),
    "flavour": flavour,
    "free_threaded": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
    "series": None if series == "none" else "patches/%s/series" % line,
    "series_sha256": None if series == "none" else series,
    "patches": patches,
    "source_id": key.get("source-id"),
    "configure_args": config_args,
    "configure_args_list": shlex.split(config_args),
    "compiler": key.get("cc"),
    "optimize": key.get("optimize") == "1",
    "pgo": "--enable-optimizations" in shlex.split(config_args),
    "lto": any(a.split("=")[0] == "--with-lto" for a in shlex.split(config_args)),
    "build_prefix": build_prefix,
    "build_date": utc(os.stat(key_path).st_mtime),
    "packaged_date": utc(datetime.datetime.now().timestamp()),
    "platform": {"machine": platform.machine(),
                 "multiarch": sysconfig.get_config_var("MULTIARCH")},
    "glibc": {
        "built_with": platform.libc_ver()[1] or None,
        "requires": glibc_needed(elves),
        "requires_interpreter": glibc_needed([interpreter]),
    },
    "debian_release": debian_release,
    "debian_packages": debian_packages,
    "unpackaged_libraries": unpackaged,
    "removed": ["test suites (test/, tests/, idle_test/)", "static libraries (*.a, python.o)",
                "-O/-OO byte code (.opt-1.pyc, .opt-2.pyc)", "DWARF debug info (strip --strip-debug)"],
}
with open(os.path.join(prefix, "BUILD-INFO.json"), "w") as f:
    json.dump(info, f, indent=2)
    f.write("\n")
print("BUILD-INFO.json: %s %s, series %s, glibc >= %s, Debian packages: %s" % (
    info["version"], flavour, series[:12], info["glibc"]["requires"],
    " ".join(debian_packages)))
