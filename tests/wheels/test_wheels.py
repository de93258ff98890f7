"""The wheels scripts/wheels.sh built (dist/, or LMCA_WHEEL_DIR), each installed as
a user would: into a fresh venv of its own Python, with no compiler on PATH and no
package index, then imported, a chunk put and got back against the test server, and
`lmcache-aerospike probe` run. And the sdist: it holds what a build needs.

scripts/test.sh builds the wheels and runs this module after the rest; with no
wheel there it fails, it does not skip.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DIST = Path(os.environ.get("LMCA_WHEEL_DIR", REPO / "dist"))
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
WHEELS = sorted(DIST.glob("lmcache_aerospike-*.whl"))
# The wheel's name: its CPython tag and its platform tags.
NAME = re.compile(r"lmcache_aerospike-[\d.]+-cp(\d)(\d+)-cp\d+-(.+)\.whl$")


def interpreter(version: str) -> str:
    """The CPython of that minor version that scripts/wheels.sh looks for."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for p in sorted(root.glob(f"{version}.*/bin/python{version}")) + [
            Path(shutil.which(f"python{version}") or "/nonexistent")]:
        if p.exists():
            return str(p)
    raise AssertionError(f"no CPython {version} to install the wheel into")


def test_there_is_a_manylinux_wheel_for_every_python():
    tags = {m.group(1) + "." + m.group(2): m.group(3)
            for m in map(NAME.match, (w.name for w in WHEELS)) if m}
    assert sorted(tags) == sorted(PYTHONS), f"wheels in {DIST}: {[w.name for w in WHEELS]}"
    for version, platform in tags.items():
        assert re.fullmatch(r"manylinux_2_\d+_x86_64(\.manylinux_2_\d+_x86_64)*", platform), (
            version, platform)


@pytest.mark.parametrize("wheel", WHEELS, ids=lambda w: w.name.split("-")[2])
def test_auditwheel_agrees_with_the_tag_and_bundles_the_rest(wheel):
    show = Path(str(wheel) + ".show.txt").read_text()
    platform = NAME.match(wheel.name).group(3).split(".")[0]
    assert f'consistent with the following platform tag: "{platform}"' in show, show
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    libs = [n for n in names if n.startswith("lmcache_aerospike.libs/")]
    # libaerospike is linked in statically; what it needs from the system and
    # manylinux does not allow is bundled.
    for lib in ("libssl", "libcrypto"):
        assert any(Path(n).name.startswith(lib) for n in libs), (lib, libs)
    assert any(re.fullmatch(r"lmcache_aerospike/_native\.cpython-3\d+-x86_64-linux-gnu\.so",
                            n) for n in names), names
    assert "lmcache_aerospike/testserver/server.py" in names  # the demo's stand-in


@pytest.fixture(scope="module")
def bare_path(tmp_path_factory):
    """A PATH with nothing on it: no compiler, no pip but the venv's."""
    empty = tmp_path_factory.mktemp("empty-path")
    for cc in ("cc", "gcc", "clang"):
        assert shutil.which(cc, path=str(empty)) is None
    return str(empty)


@pytest.mark.parametrize("wheel", WHEELS, ids=lambda w: w.name.split("-")[2])
def test_the_wheel_installs_with_no_compiler_and_no_index_and_works(
        wheel, aerospike_hosts, bare_path, tmp_path):
    m = NAME.match(wheel.name)
    version = f"{m.group(1)}.{m.group(2)}"
    venv = tmp_path / "venv"
    subprocess.run([interpreter(version), "-m", "venv", str(venv)], check=True)
    env = {"PATH": f"{venv / 'bin'}:{bare_path}", "HOME": str(tmp_path),
           "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                    "--no-index", "--no-cache-dir", str(wheel)],
                   check=True, env=env, cwd=tmp_path, timeout=300)
    code = f"""
import os, lmcache_aerospike, lmcache_aerospike._native as n
assert lmcache_aerospike.__file__.startswith({str(venv)!r}), lmcache_aerospike.__file__
c = n.Connector(hosts={aerospike_hosts!r}, set="lmca_wheel_{version.replace('.', '')}")
data = os.urandom(3 << 20)
c.put("wheel-smoke", data)
buf = bytearray(len(data))
assert c.get("wheel-smoke", buf) == len(data) and bytes(buf) == data
assert c.remove("wheel-smoke")
c.close()
print("round trip ok")
"""
    done = subprocess.run([str(venv / "bin" / "python"), "-c", code], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "round trip ok" in done.stdout, done.stderr
    probe = subprocess.run([str(venv / "bin" / "lmcache-aerospike"), "probe", "--hosts",
                            aerospike_hosts, "--json"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert probe.returncode in (0, 1), probe.stderr  # 1: problems found, reported
    doc = json.loads(probe.stdout)
    assert doc["seeds"] and all(s["reachable"] for s in doc["seeds"]), doc


def test_the_sdist_holds_what_a_build_needs():
    sdists = sorted(DIST.glob("lmcache_aerospike-*.tar.gz"))
    assert len(sdists) == 1, sdists
    with tarfile.open(sdists[0]) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    tracked = subprocess.run(["git", "ls-files", "src", "include", "scripts/deps.sh",
                              "setup.py", "pyproject.toml", "tests/server"],
                             cwd=REPO, capture_output=True, text=True, check=True).stdout
    needed = {n for n in tracked.split() if not n.startswith("tests/server/test_")}
    assert needed - names == set(), sorted(needed - names)


def test_the_sdist_builds_a_wheel_that_works(aerospike_hosts, tmp_path):
    """The source path: pip builds the sdist as a user without a wheel would (its
    build downloads and builds libaerospike, scripts/deps.sh), and the result
    imports and round-trips."""
    [sdist] = sorted(DIST.glob("lmcache_aerospike-*.tar.gz"))
    out = tmp_path / "built"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LMCA_AEROSPIKE_")}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--disable-pip-version-check", "-w", str(out), str(sdist)],
                   check=True, cwd=tmp_path, env=env, timeout=900)
    [wheel] = out.glob("*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index",
                    str(wheel)], check=True, timeout=300)
    code = (f"import lmcache_aerospike._native as n; c = n.Connector(hosts={aerospike_hosts!r}); "
            "c.put('sdist-smoke', b'x' * 1000); b = bytearray(1000); "
            "assert c.get('sdist-smoke', b) == 1000 and b == b'x' * 1000; c.remove('sdist-smoke')")
    subprocess.run([str(venv / "bin" / "python"), "-c", code], check=True, cwd=tmp_path,
                   timeout=120)

