"""Every relative link in README.md, DESIGN.md and docs/*.md names a file of the
repository (the benchmark records docs/benchmarks.md links among them), so a moved
or renamed file cannot leave a document pointing nowhere."""

import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
DOCUMENTS = [REPO / "README.md", REPO / "DESIGN.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def relative_links(doc):
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL, or a heading of the same document
        yield target.split("#", 1)[0]


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda d: d.relative_to(REPO).as_posix())
def test_every_relative_link_names_a_file(doc):
    missing = [t for t in relative_links(doc) if not (doc.parent / t).exists()]
    assert not missing, f"{doc.relative_to(REPO)} links to missing {missing}"


def test_the_newest_record_of_each_benchmark_is_linked():
    benchmarks = REPO / "docs" / "benchmarks.md"
    linked = {(benchmarks.parent / t).resolve() for t in relative_links(benchmarks)}
    records = sorted((REPO / "bench" / "results" / "records").glob("*/*.md"))
    assert records, "no records in bench/results/records"
    newest = {}
    for r in records:  # folders are NAME-YYYY-MM-DD: sorted, the newest comes last
        newest[r.parent.name.rsplit("-", 3)[0]] = r.resolve()
    assert set(newest.values()) <= linked, sorted(set(newest.values()) - linked)
