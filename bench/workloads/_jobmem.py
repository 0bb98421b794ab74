"""The memory of a job (a process and all its descendants) as an operator
sees it: what the machine, or the container's cgroup, has to provide.

    python _jobmem.py ROOT_PID OUT.json [--interval S]

samples the process tree under ROOT_PID every S seconds (default 0.2) until
its stdin is closed or ROOT_PID exits, then writes OUT.json.  Also imported
by the torch benchmarks for one-off snapshots (snapshot(), torch_mapped()).

Per sample:

  pss   sum over the processes of Pss - Pss_Shmem (/proc/<pid>/smaps_rollup):
        private pages in full, pages shared between processes (the torch
        libraries, copy-on-write pages) split between them, i.e. every page
        once;
  shm   the shared-memory objects (/dev/shm files, memfds) the job holds,
        each once (distinct inode; its allocated blocks), whether mapped or
        only open: torch's file_descriptor strategy unlinks /dev/shm/torch_*
        at once, and a batch in transit is held only by a descriptor (the
        sender's resource sharer).  Counting shm here rather than through
        Pss_Shmem counts a batch mapped by a worker and by the main process
        once, and one held by no mapping at all;
  job   pss + shm;
  anon  sum of Pss_Anon + shm: job without the pages of files (the
        libraries), whose resident share depends on the page cache (each
        flavour's venv has its own copy of torch's libraries, read in and
        cached differently), not on the interpreter.

Stdlib only; run under any of the interpreters.
"""

import json
import os
import select
import sys
import time

SHM_PREFIXES = ("/dev/shm/", "/memfd:")


def children(pid):
    out = []
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for tid in tasks:
        try:
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


def tree(root, exclude=()):
    """root and all its descendants, minus `exclude` (and their subtrees)."""
    seen = []
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in exclude or pid in seen:
            continue
        seen.append(pid)
        todo += children(pid)
    return seen


def rollup(pid):
    """{field: bytes} from /proc/<pid>/smaps_rollup, or None if it is gone."""
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            text = f.read()
    except OSError:
        return None
    out = {}
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 2 and parts[0].endswith(":"):
            out[parts[0][:-1]] = int(parts[1]) * 1024
    return out


def shm_objects(pid):
    """{(dev, ino): (allocated bytes, path, mapped)} of the shared-memory
    objects pid maps or holds open."""
    found = {}
    try:
        with open("/proc/%d/maps" % pid) as f:
            lines = [l for l in f if "/dev/shm/" in l or "/memfd:" in l]
    except OSError:
        return found
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith(SHM_PREFIXES):
            continue
        path = parts[5].rstrip("\n")
        try:
            st = os.stat("/proc/%d/map_files/%s" % (pid, parts[0]))
            key, size = (st.st_dev, st.st_ino), st.st_blocks * 512
        except OSError:
            # map_files needs CAP_SYS_ADMIN, which a container's root lacks:
            # take the device and inode from maps, the mapping's length as
            # the size (torch maps its shared-memory files whole)
            major, minor = (int(x, 16) for x in parts[3].split(":"))
            start, end = (int(x, 16) for x in parts[0].split("-"))
            key, size = (os.makedev(major, minor), int(parts[4])), end - start
            if key in found:
                size = max(size, found[key][0])
        found[key] = (size, path, True)
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return found
    for fd in fds:
        path = "/proc/%d/fd/%s" % (pid, fd)
        try:
            target = os.readlink(path)
            if not target.startswith(SHM_PREFIXES):
                continue
            st = os.stat(path)
        except OSError:
            continue
        key = (st.st_dev, st.st_ino)
        if key not in found:
            found[key] = (st.st_blocks * 512, target, False)
    return found


def snapshot(root, exclude=()):
    """One sample: {'pss', 'shm', 'job', 'procs': {pid: {...}}}."""
    pss = 0
    anon = 0
    shm = {}
    procs = {}
    for pid in tree(root, exclude):
        r = rollup(pid)
        if r is None:
            continue
        own = r.get("Pss", 0) - r.get("Pss_Shmem", 0)
        objs = shm_objects(pid)
        pss += own
        anon += r.get("Pss_Anon", 0)
        shm.update(objs)
        procs[pid] = {"pss": own, "rss": r.get("Rss", 0),
                      "torch_mapped": sum(size for size, path, mapped
                                          in objs.values()
                                          if mapped and "/torch_" in path)}
    total = sum(size for size, _, _ in shm.values())
    return {"pss": pss, "shm": total, "job": pss + total,
            "anon": anon + total, "procs": procs}


def torch_mapped(root, exclude=()):
    """Bytes of /dev/shm/torch_* mapped per process of the tree."""
    return {pid: p["torch_mapped"]
            for pid, p in snapshot(root, exclude)["procs"].items()}


def main():
    root = int(sys.argv[1])
    out = sys.argv[2]
    interval = float(sys.argv[4]) if sys.argv[3:4] == ["--interval"] else 0.2
    me = os.getpid()
    samples = []            # [t, job, pss, shm, root's pss, nprocs, anon]
    try:
        os.nice(5)                   # the job comes first
    except OSError:
        pass
    while os.path.exists("/proc/%d" % root):
        t = time.monotonic()
        s = snapshot(root, exclude=(me,))
        samples.append([round(t, 4), s["job"], s["pss"], s["shm"],
                        s["procs"].get(root, {}).get("pss", 0),
                        len(s["procs"]), s["anon"]])
        r, _, _ = select.select([sys.stdin], [], [],
                                max(0.0, interval - (time.monotonic() - t)))
        if r and not sys.stdin.buffer.read1(4096):
            break                    # EOF: the job asked us to stop
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"interval": interval, "clock": "time.monotonic",
                   "columns": ["t", "job", "pss", "shm", "root_pss",
                               "nprocs", "anon"],
                   "samples": samples}, f)
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
