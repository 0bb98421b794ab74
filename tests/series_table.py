#!/usr/bin/env python3
"""The series' facts, computed from patches/ so that docs cannot drift.

    tests/series_table.py [LINE]      print LINE's table (default 3.14)
    tests/series_table.py --update    rewrite the marked places in README.md
                                      and docs/*.md  (make series-table)

A document marks a generated table with

    <!-- series-table LINE -->
    ...
    <!-- /series-table -->

and a single number with `<!-- series LINE FACT -->N<!-- /series -->`, FACT
one of the keys of facts() (patches, mechanism, probes, tests, a kind's
mechanism such as follow-up, or one patch's: mechanism-0004).  tests/test_patches.py fails when a marked place
differs from what this prints.

Net lines: added minus removed lines of each patch's diff, by file: Doc/,
Misc/ and Argument Clinic output are left out; Modules/_testinternalcapi.c is
probes; Lib/test/ is tests; everything else is mechanism.  Standard library
only: the tests import it, the Makefile runs it with the host python3.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATCHES = ROOT / "patches"
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
PARTS = ("mechanism", "probes", "tests")
# What Upstream-Status says -> the patch's kind, and the name of its
# mechanism total among the facts.
KINDS = (("Backport", "backport", "backport"),
         ("Pending [stock", "stock fix", "stock-fix"),
         ("Pending [follow-up", "follow-up", "follow-up"),
         ("Inappropriate", "distribution only", "distribution"))

BLOCK = re.compile(r"(<!-- series-table (\S+) -->\n)(.*?)(<!-- /series-table -->)", re.S)
VALUE = re.compile(r"(<!-- series (\S+) ([a-z0-9-]+) -->)([^<]*)(<!-- /series -->)")


def series(line):
    """The patch file names of patches/LINE/series, in order."""
    text = (PATCHES / line / "series").read_text()
    return [s for s in (x.split("#")[0].strip() for x in text.splitlines()) if s]


def header(text):
    """{field: value} of a format-patch file's message: Subject (its
    continuation lines joined) and the DEP-3 fields (first line of each)."""
    message = text.split("\n---\n", 1)[0]
    fields = {}
    m = re.search(r"^Subject: (.*(?:\n .*)*)", message, re.M)
    if m:
        fields["Subject"] = re.sub(r"\s*\n\s*", " ", m.group(1))
    for name, value in re.findall(r"^([A-Z][A-Za-z-]+): (.*)$", message, re.M):
        if name not in ("From", "Date", "Subject"):
            fields.setdefault(name, value.strip())
    return fields


def part_of(path):
    """The part a file of the tree belongs to, or None when not counted."""
    if path.startswith(("Doc/", "Misc/")) or "/clinic/" in path:
        return None
    if path.startswith("Modules/_testinternalcapi"):
        return "probes"
    if path.startswith("Lib/test/"):
        return "tests"
    return "mechanism"


def net_lines(text):
    """{part: net added lines} of a patch's diff, read hunk by hunk (a
    removed line may itself start with '--')."""
    counts = dict.fromkeys(PARTS, 0)
    lines = text.split("\n")
    i, part = 0, None
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            part = part_of(line.split()[2][2:])
        elif line.startswith("@@ "):
            m = re.match(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@", line)
            old = int(m.group(1) or 1)
            new = int(m.group(2) or 1)
            while old or new:
                i += 1
                body = lines[i]
                if body.startswith("\\"):     # "\ No newline at end of file"
                    continue
                tag = body[:1]
                if tag == "-":
                    old -= 1
                    if part:
                        counts[part] -= 1
                elif tag == "+":
                    new -= 1
                    if part:
                        counts[part] += 1
                else:
                    old -= 1
                    new -= 1
        i += 1
    return counts


def kind_of(status):
    for prefix, kind, _ in KINDS:
        if status.startswith(prefix):
            return kind
    return "?"


def patches(line):
    """[(order, file name, header, {part: net lines}, kind, hazard)] of
    LINE."""
    out = []
    for k, name in enumerate(series(line), 1):
        text = (PATCHES / line / name).read_text()
        fields = header(text)
        out.append((k, name, fields, net_lines(text),
                    kind_of(fields.get("Upstream-Status", "")), hazard(text)))
    return out


def facts(line):
    """The numbers docs may quote, by name."""
    rows = patches(line)
    f = {"patches": len(rows)}
    f.update((f"mechanism-{r[1][:4]}", r[3]["mechanism"]) for r in rows)
    for part in PARTS:
        f[part] = sum(r[3][part] for r in rows)
    for _, kind, key in KINDS:
        f[key] = sum(r[3]["mechanism"] for r in rows if r[4] == kind)
    return f


def hazard(text):
    """The hazard of part 1 (H1-H5) a follow-up's Description names."""
    m = re.search(r"^Description:.*\n?.*?\((H\d)\b", text, re.M)
    return m.group(1) if m else ""


def table(line):
    rows = patches(line)
    out = ["| order | patch | subject | kind | hazard | mechanism / probes / tests |",
           "|---|---|---|---|---|---|"]
    for k, name, fields, n, kind, h in rows:
        subject = re.sub(r"^\[PATCH[^\]]*\] ", "", fields.get("Subject", "?"))
        out.append(f"| {k} | `{name[:4]}` | {subject} | {kind} | {h} | "
                   + " / ".join(str(n[p]) for p in PARTS) + " |")
    f = facts(line)
    out.append("| | | total | | | " + " / ".join(str(f[p]) for p in PARTS) + " |")
    out.append("")
    out.append("Mechanism by kind: "
               + "; ".join(f"{kind} {f[key]}" for _, kind, key in KINDS) + ".")
    return "\n".join(out) + "\n"


def render(text):
    """TEXT with every marked table and value as the script computes them."""
    text = BLOCK.sub(lambda m: m.group(1) + table(m.group(2)) + m.group(4), text)
    return VALUE.sub(lambda m: m.group(1) + str(facts(m.group(2))[m.group(3)])
                     + m.group(5), text)


def main(argv):
    if argv[:1] == ["--update"]:
        for path in DOCS:
            text = path.read_text()
            new = render(text)
            if new != text:
                path.write_text(new)
                print(f"updated {path.relative_to(ROOT)}")
        return 0
    line = argv[0] if argv else "3.14"
    if not (PATCHES / line / "series").is_file():
        print(f"series_table: no patches/{line}/series", file=sys.stderr)
        return 2
    sys.stdout.write(table(line))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
