"""README.md and docs/*.md against the code they describe.

Every `make` target they name is a target of the Makefile; every PYTHON_* and
BRC_MERGE_* variable they name is used by the project's code (the Makefile,
build.sh, the images, bench/, tests/ or the patches); every relative link or
image resolves; README.md stays at most 200 lines and shows its first
command within 30; `make help` has one line
per target and no issue numbers.  Reads files only (and, through conftest,
`build.sh --list`): no build, no git, well under a second.
"""

import os
import re
from pathlib import Path

import pytest

from conftest import FLAVOUR_GROUPS, ROOT

README = ROOT / "README.md"
DOCS = [README] + sorted((ROOT / "docs").glob("*.md"))
MAX_README_LINES = 200
# A reader reaches the first command (a fenced block) within this many lines.
FIRST_COMMAND_BY = 30

# Where a variable must occur for a document to name it.
CODE = ["Makefile", "build.sh", "Dockerfile", ".ci", "image", "bench", "tests",
        "patches"]
# Not code: flavour venvs (GBs), run results, byte code.
SKIP_DIRS = {".venvs", "results", "__pycache__"}
# CPython's own make targets, which docs/building.md names where it says what
# build.sh's stages run; they are not targets of our Makefile.
CPYTHON_TARGETS = {"install"}

VARIABLE = re.compile(r"\b(?:PYTHON|BRC_MERGE)_[A-Z0-9_]*[A-Z0-9]\b")
# `make [VAR=value ...] target` inside code
MAKE = re.compile(r"(?<![\w./$-])make"
                  r"((?:[ \t]+[A-Z_]+=(?:\"[^\"]*\"|'[^']*'|\S+))*)"
                  r"[ \t]+([a-z][a-z0-9-]*)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
RULE = re.compile(r"^([^\s#:=][^:=\n]*?)[ \t]*:(?!=)", re.M)
# The Makefile's flavour lists: `$(shell $(BUILD) --list GROUP...)`.
LIST = re.compile(r"\$\(shell \$\(BUILD\) --list ([a-z ]+)\)")


def code_of(text):
    """The fenced blocks and inline code spans of a Markdown text: where a
    document names commands (prose says "make sure" too)."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)
    rest = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.M | re.S)
    return blocks + re.findall(r"`([^`\n]+)`", rest)


def makefile_rules():
    """{target: its rule line} of the Makefile, $(VAR) target lists
    expanded (the flavour lists as `build.sh --list` gave them to conftest)."""
    text = (ROOT / "Makefile").read_text()
    lists = {name: LIST.sub(lambda m: " ".join(f for g in m.group(1).split()
                                              for f in FLAVOUR_GROUPS[g]), value)
             for name, value in re.findall(r"^([A-Z_]+)[ \t]*:?=[ \t]*(.*)$", text, re.M)}
    rules = {}
    for m in RULE.finditer(text):
        line = text[m.start():text.index("\n", m.start())]
        for word in m.group(1).split():
            names = re.fullmatch(r"\$\(([A-Z_]+)\)", word)
            for name in (lists.get(names.group(1), "").split() if names
                         else [word]):
                if not name.startswith("."):
                    rules[name] = line
    return rules


def code_files():
    for top in CODE:
        path = ROOT / top
        if path.is_file():
            yield path
            continue
        for d, dirs, files in os.walk(path):
            dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS)
            for f in sorted(files):
                yield Path(d) / f


def code_corpus():
    here = Path(__file__).resolve()
    return "\n".join(f.read_text(errors="replace") for f in code_files()
                     if f.resolve() != here)


@pytest.fixture(scope="module")
def corpus():
    return code_corpus()


def doc_id(path):
    return str(path.relative_to(ROOT))


def test_docs_exist():
    names = {p.name for p in DOCS}
    for topic in ("design", "benchmarks", "reliability", "torch", "upstream"):
        assert topic + ".md" in names, "docs/%s.md is missing" % topic


def test_readme_is_short():
    n = len(README.read_text().splitlines())
    assert n <= MAX_README_LINES, (
        "README.md has %d lines (at most %d): move detail to docs/"
        % (n, MAX_README_LINES))


def test_readme_starts_with_the_commands():
    lines = README.read_text().splitlines()
    first = next((i for i, line in enumerate(lines, 1) if line.startswith("```")), None)
    assert first is not None and first <= FIRST_COMMAND_BY, (
        "README.md's first command block is at line %s (at most %d)"
        % (first, FIRST_COMMAND_BY))


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_make_targets_exist(doc):
    rules = makefile_rules()
    named = {m.group(2) for code in code_of(doc.read_text())
             for m in MAKE.finditer(code)}
    missing = sorted(named - set(rules) - CPYTHON_TARGETS)
    assert not missing, "%s names make targets the Makefile lacks: %s" % (
        doc_id(doc), ", ".join(missing))


# Variables the docs name as removed: they must be gone from the code.
REMOVED = {"PYTHON_BRC_MERGE_DELAY"}


def test_removed_variables_are_gone(corpus):
    for v in REMOVED:
        assert not re.search(r"\b%s\b" % re.escape(v), corpus), v


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_variables_exist(doc, corpus):
    named = set(VARIABLE.findall(doc.read_text())) - REMOVED
    missing = sorted(v for v in named
                     if not re.search(r"\b%s\b" % re.escape(v), corpus))
    assert not missing, (
        "%s names variables no code uses (Makefile, build.sh, image/, "
        "bench/, tests/, patches/): %s" % (doc_id(doc), ", ".join(missing)))


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_links_resolve(doc):
    broken = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue        # a URL or an anchor in the same page
        if not (doc.parent / target.split("#")[0]).exists():
            broken.append(target)
    assert not broken, "%s links to missing files: %s" % (
        doc_id(doc), ", ".join(broken))


def test_make_help_one_line_per_target_in_users_words():
    rules = makefile_rules()
    silent = sorted(t for t, line in rules.items() if "## " not in line)
    assert not silent, "targets make help does not list: %s" % (
        ", ".join(silent))
    numbered = sorted(t for t, line in rules.items()
                      if re.search(r"\bissues?\s+\d|#\d", line.split("## ")[-1]))
    assert not numbered, "make help names issue numbers for: %s" % (
        ", ".join(numbered))


def test_the_checks_see_what_they_check():
    """The patterns find what the documents do name, so that a passing run
    is not a pattern that matches nothing."""
    text = README.read_text()
    assert {"test", "compare"} <= {m.group(2) for c in code_of(text)
                                  for m in MAKE.finditer(c)}
    assert "PYTHON_BRC_MERGE_THRESHOLD" in VARIABLE.findall(text)
    assert MAKE.search('make bench BENCH_ARGS="--groups M1,M2"').group(2) \
        == "bench"
    assert MAKE.search("make image PREBUILT=1").group(2) == "image"
    assert {"test", "ft-brc", "compare"} <= set(makefile_rules())
    assert set(makefile_rules()) >= {f for g in FLAVOUR_GROUPS.values() for f in g}
