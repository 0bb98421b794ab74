"""The patches' headers (DEP-3) and the facts docs quote about the series.

Every patch under patches/ is listed by a series file, carries Description,
Origin and Forwarded or Upstream-Status, names its bug when its subject does
(`gh-N: ...` -> `Bug: .../issues/N`), and is numbered n/N for its place in
that series.  Every table and number that README.md and docs/ mark as
generated is what tests/series_table.py prints (`make series-table` rewrites
them).  Reads files only.
"""

import re

import pytest

import series_table as st

PATCHES = st.PATCHES
SERIES_FILES = sorted(PATCHES.glob("*/series")) + sorted(PATCHES.glob("*/*/*series"))


def listed():
    """[(series file, position, count, patch path)] of every series."""
    out = []
    for sf in SERIES_FILES:
        names = [s for s in (x.split("#")[0].strip()
                             for x in sf.read_text().splitlines()) if s]
        # numbered in the series of its own folder (compare/upstream.series
        # reuses ../0001 of the main series)
        out += [(sf, k, len(names), sf.parent / n) for k, n in enumerate(names, 1)
                if "/" not in n]
    return out


LISTED = listed()


def test_every_patch_is_in_a_series():
    on_disk = set(PATCHES.rglob("*.patch"))
    assert on_disk, "no patches found"
    assert on_disk - {p for *_, p in LISTED} == set()
    for sf in SERIES_FILES:
        for name in sf.read_text().split():
            if name.endswith(".patch"):
                assert (sf.parent / name).is_file(), f"{sf}: {name} missing"


@pytest.mark.parametrize("sf,k,n,path", LISTED,
                         ids=[str(p.relative_to(PATCHES)) for *_, p in LISTED])
def test_dep3_header(sf, k, n, path):
    fields = st.header(path.read_text())
    missing = [f for f in ("Description", "Origin") if f not in fields]
    assert not missing, f"{path.name}: no {', '.join(missing)}"
    assert "Forwarded" in fields or "Upstream-Status" in fields
    subject = fields.get("Subject", "")
    m = re.match(r"\[PATCH (\d+)/(\d+)\] ", subject)
    assert m, f"{path.name}: subject not numbered n/N: {subject!r}"
    assert (int(m.group(1)), int(m.group(2))) == (k, n), \
        f"{path.name} is {k}/{n} in {sf.relative_to(PATCHES)}, its subject says {m.group(0)}"
    gh = re.match(r"gh-(\d+):", subject[m.end():])
    if gh:
        assert re.search(rf"/issues/{gh.group(1)}\b", fields.get("Bug", "")), \
            f"{path.name} names gh-{gh.group(1)} but has no Bug: field for it"


def test_kinds_are_known():
    for line in ("3.14", "main"):
        assert [r[1] for r in st.patches(line) if r[4] == "?"] == []


@pytest.mark.parametrize("doc", st.DOCS, ids=[d.name for d in st.DOCS])
def test_marked_facts_are_current(doc):
    text = doc.read_text()
    assert st.render(text) == text, \
        f"{doc.name} quotes series facts that patches/ no longer gives: run make series-table"


def test_some_doc_is_marked():
    """The check above must have something to check."""
    text = "".join(d.read_text() for d in st.DOCS)
    assert st.BLOCK.search(text) and st.VALUE.search(text)


def test_the_counter_counts():
    """net_lines on a made-up diff: a removed line starting with '--' and
    Doc/ and probe files are counted where they belong."""
    diff = ("diff --git a/Python/x.c b/Python/x.c\n@@ -1,3 +1,4 @@\n a\n"
            "--- old\n+new\n+more\n b\n"
            "diff --git a/Doc/x.rst b/Doc/x.rst\n@@ -1 +1,2 @@\n a\n+doc\n"
            "diff --git a/Modules/_testinternalcapi.c b/Modules/_testinternalcapi.c\n"
            "@@ -0,0 +1 @@\n+probe\n")
    assert st.net_lines(diff) == {"mechanism": 1, "probes": 1, "tests": 0}
