"""The README's command lines, with their continuation lines joined. tests/docs/test_readme_commands.py and
tests/sglang/test_readme_command.py run each against the test server (or check it
the one way it can be: `make test` is the test run itself)."""

import pathlib
import re
import shlex

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def commands():
    """[str]: each command of the README, as one line: the indented blocks, and the
    fenced blocks without a language that start as a command line does."""
    fenced = [b for lang, b in fences() if not lang]
    text = re.sub(r"^```.*?^```", "", README.read_text(), flags=re.S | re.M)
    # A fenced command is one command (its JSON spans lines without a backslash).
    out = [" ".join(ln.strip().rstrip("\\").strip() for ln in block.splitlines())
           for block in fenced if block.startswith(("lmcache ", "--l2-adapter "))]
    current = ""
    for line in text.splitlines():
        if not line.startswith("    "):
            current = ""
            continue
        current += line.strip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        out.append(current)
        current = ""
    return out


def fences():
    """[(language, text)] of the README's fenced blocks."""
    return re.findall(r"^```(\w*)\n(.*?)^```", README.read_text(), re.S | re.M)


def argv(command):
    return shlex.split(command)


def sample_output():
    """The demo's output as the README shows it: the fenced block without a language
    right after the two commands."""
    return [b for lang, b in fences() if not lang][0].splitlines()
