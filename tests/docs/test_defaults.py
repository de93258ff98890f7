"""Every default the documents name is the code's: where README.md, DESIGN.md or
docs/*.md write a setting with its default (`` `max_put_wait_ms` (2000) ``,
`` `touch_on_hit`, default on ``, `` `x` defaults to -1 ``), the value is the one
`Settings` (python/lmcache_aerospike/config.py) gives it."""

import dataclasses
import pathlib
import re

import pytest

from lmcache_aerospike.config import Settings

REPO = pathlib.Path(__file__).resolve().parents[2]
DOCUMENTS = [REPO / "README.md", REPO / "DESIGN.md", *sorted((REPO / "docs").glob("*.md"))]
DEFAULTS = {f.name: f.default for f in dataclasses.fields(Settings)
            if f.default is not dataclasses.MISSING}

# A value as the documents write it: a number with its unit, if any (86,400;
# -1; 128 KiB; 1 s), a word (on, off, true, false, all) or a quoted word.
VALUE = (r"(?P<value>-?[0-9][0-9,]*(?:\.[0-9]+)?(?: ?(?P<unit>KiB|MiB|GiB|ms|s)\b)?"
         r"|on\b|off\b|true\b|false\b|'[^' ]*'|\"[^\" ]*\"|[a-z_]+\b)")
PATTERNS = [
    # `name` (VALUE) / `name` (VALUE; ...) / `name`, VALUE)
    re.compile(r"`(?P<name>[a-z_]+)`(?: \(|, )" + VALUE + r"(?=[);,:])"),
    # `name`, default VALUE / `name` (default VALUE / `name` (now) defaults to VALUE
    re.compile(r"`(?P<name>[a-z_]+)`,? \(?(?:now )?default(?:s to)? " + VALUE),
    # `name` VALUE (the default)
    re.compile(r"`(?P<name>[a-z_]+)` " + VALUE + r" \(the default\)"),
]
SCALE = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def normal(name, value, unit=None):
    """The code's default and the document's words, compared as text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value).strip("'\"").replace(",", "").lower()
    if unit:
        text = text[:-len(unit)].strip()
    if unit in SCALE:
        return str(int(float(text) * SCALE[unit]))
    if unit == "s" and name.endswith("_ms"):
        return str(int(float(text) * 1000))
    return {"on": "true", "off": "false"}.get(text, text)


def named_defaults():
    """(document, line, setting, value written, unit) for each default a document
    names. A paragraph is one line to the patterns: a sentence may wrap anywhere."""
    found = []
    for path in DOCUMENTS:
        text = path.read_text()
        flat = re.sub(r"\s*\n\s*", " ", text)
        # Each flat offset back to its line: count the newlines the flattening ate.
        starts, line = [], 1
        for m in re.finditer(r"\s*\n\s*|[^\n]", text):
            line += m.group().count("\n")
            starts.append(line)
        for pattern in PATTERNS:
            for m in pattern.finditer(flat):
                if m["name"] in DEFAULTS:
                    found.append((path.relative_to(REPO).as_posix(), starts[m.start()],
                                  m["name"], m["value"], m["unit"]))
    return sorted(found)


def test_the_documents_name_defaults():
    """The patterns find what the documents say (a test that matched nothing would
    check nothing)."""
    names = {name for _, _, name, _, _ in named_defaults()}
    assert {"max_put_wait_ms", "backpressure_ms", "default_ttl_seconds", "shared_clock",
            "touch_on_hit", "fast_path"} <= names, names


@pytest.mark.parametrize("where,line,name,value,unit", named_defaults(),
                         ids=lambda v: v if isinstance(v, str) else None)
def test_a_default_the_documents_name_is_the_codes(where, line, name, value, unit):
    assert normal(name, value, unit) == normal(name, DEFAULTS[name]), \
        f"{where}:{line} says {name} defaults to {value} {unit or ''}; " \
        f"config.py says {DEFAULTS[name]!r}"
