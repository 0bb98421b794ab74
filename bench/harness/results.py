"""The one place that names the files of a results directory.

bench/harness/run.py writes them, report/ and plots.py read them; no other
module spells a file name.
"""

from pathlib import Path


class Results:
    def __init__(self, path):
        self.path = Path(path).resolve()

    def __truediv__(self, name):          # for what has no name here yet
        return self.path / name

    # written by the runner
    info = property(lambda self: self.path / "info.json")
    report = property(lambda self: self.path / "report.md")
    callgrind = property(lambda self: self.path / "callgrind.json")
    t2i = property(lambda self: self.path / "callgrind_t2.json")
    xfree_callgrind = property(lambda self: self.path
                               / "callgrind_xfree.json")
    peer = property(lambda self: self.path / "peer.json")
    pyperformance_dir = property(lambda self: self.path / "pyperformance")

    def suite(self, config):
        """pyperf JSON of every pyperf-style group for one configuration."""
        return self.path / (config + ".json")

    def suites(self):
        """configuration -> its suite file."""
        return {f.stem: f for f in sorted(self.path.glob("*.json"))
                if f.name != "info.json" and not f.name.startswith(
                    ("callgrind", "t1_", "peer"))}

    def jsonl(self, group, config):
        return self.path / group.lower() / (config + ".jsonl")

    def jsonls(self, group):
        return sorted((self.path / group.lower()).glob("*.jsonl"))

    def timeline(self, group, config):
        return self.path / "timelines" / ("%s_%s.json" % (group.lower(),
                                                          config))

    def torch_timeline(self, name, config, round_no):
        return self.path / "timelines" / ("torch_%s_%s_r%d.json"
                                          % (name, config, round_no))

    def torch_timelines(self, name, config):
        return sorted((self.path / "timelines").glob(
            "torch_%s_%s_r*.json" % (name, config)))

    def torch_install_log(self, flavour):
        return self.path / ("torch-install-%s.log" % flavour)

    def t1_paired(self, workload):
        return self.path / ("t1_paired%s.json"
                            % ("" if workload == "pingpong" else "_clear"))

    def t1_vs(self, against, workload):
        return self.path / ("t1_vs_%s%s.json"
                            % (against, "" if workload == "pingpong"
                               else "_clear"))

    def pyperformance(self, flavour, ext="json"):
        return self.pyperformance_dir / ("%s.%s" % (flavour, ext))

    def pyperformances(self):
        """flavour -> its pyperformance suite file."""
        return {f.stem: f
                for f in sorted(self.pyperformance_dir.glob("*.json"))}

    def plot(self, name):
        return self.path / (name + ".png")

    def mkdirs(self):
        # a jsonl group's folder: run.py makes it before the group's script
        # appends to it
        (self.path / "timelines").mkdir(parents=True, exist_ok=True)
