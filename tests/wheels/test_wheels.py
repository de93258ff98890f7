"""The wheels scripts/wheels.sh built (dist/, or LMCA_WHEEL_DIR), each checked as
the platform it names would see it:

- one manylinux_2_28 (or older) wheel per CPython 3.10-3.13 and architecture
  (x86_64, aarch64), `auditwheel show` agreeing with each tag, nothing bundled;
- the extension inside asks glibc for no symbol version newer than 2.28 and for
  nothing else but the interpreter's own API, read from its ELF symbol tables;
  and it loads under an older glibc than this machine's, Debian 11's 2.31 (Ubuntu
  20.04 has the same), run by that glibc's own dynamic loader;
- each wheel of this machine's architecture installed as a user would: into a
  fresh venv of its own Python, with no compiler on PATH and no package index,
  then imported, chunks of 256 KiB and 4 MiB put and got back against the test
  server, and `lmcache-aerospike probe --json` run;
- an aarch64 wheel the same way in an emulated arm64 Debian (qemu-user, the root
  scripts/arm64-root.sh makes): the wheel of that root's python3 (bookworm: 3.11;
  LMCA_ARM64_SUITE=trixie: 3.13);
- and the sdist: it holds what a build needs, and it builds a wheel that works.

scripts/test.sh builds the wheels and runs this module after the rest; with no
wheel there it fails, it does not skip. docs/install.md ("Testing the wheels beyond
CI") says how to run the emulated test for another Python, and the native ones on an
aarch64 machine.
"""

import hashlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import urllib.request
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DIST = Path(os.environ.get("LMCA_WHEEL_DIR", REPO / "dist"))
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
ARCHS = ("x86_64", "aarch64")
HOST = platform.machine()
GLIBC_FLOOR = (2, 28)  # scripts/cross-deps.sh's target: manylinux_2_28
WHEELS = sorted(DIST.glob("lmcache_aerospike-*.whl"))
# The wheel's name: its CPython tag and its platform tags.
NAME = re.compile(r"lmcache_aerospike-[\d.]+-cp(\d)(\d+)-cp\d+-(.+)\.whl$")
# What the extension may ask the system for: glibc's libraries (and loader), all
# of which manylinux allows.
SYSTEM_LIBS = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1",
               "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}
EM = {"x86_64": "EM_X86_64", "aarch64": "EM_AARCH64"}
# Debian 11's glibc 2.31, one .deb per architecture (pool/main: bullseye's point
# releases are over, so these stay).
OLD_GLIBC = {
    "x86_64": ("libc6_2.31-13+deb11u11_amd64.deb",
               "05f7264da867b37f4c5ce49266b558ea1e81e05a9464f623152fca70f3550282"),
    "aarch64": ("libc6_2.31-13+deb11u11_arm64.deb",
                "baaa9aa184e2f21738c5819055e6740cc5b22f198e3f416e33f82b40ff6933d8"),
}


def parsed(wheel: Path):
    m = NAME.match(wheel.name)
    version = f"{m.group(1)}.{m.group(2)}"
    plat = m.group(3).split(".")[0]
    arch = next(a for a in ARCHS if plat.endswith("_" + a))
    return version, plat, arch


def ids(wheel: Path) -> str:
    version, _, arch = parsed(wheel)
    return f"cp{version.replace('.', '')}-{arch}"


def interpreter(version: str) -> str:
    """The CPython of that minor version that scripts/wheels.sh looks for."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for p in sorted(root.glob(f"{version}.*/bin/python{version}")) + [
            Path(shutil.which(f"python{version}") or "/nonexistent")]:
        if p.exists():
            return str(p)
    raise AssertionError(f"no CPython {version} to install the wheel into")


def native(wheel: Path) -> tuple[str, bytes]:
    """The extension inside the wheel: its name and its bytes."""
    with zipfile.ZipFile(wheel) as z:
        [name] = [n for n in z.namelist() if re.fullmatch(r"lmcache_aerospike/_native\..*\.so", n)]
        return name, z.read(name)


def dynamic_symbols(so: bytes):
    """(machine, needed libraries, undefined symbols as (name, version or None,
    binding), defined exported names) of a shared object, from its dynamic
    section, .dynsym and GNU version tables (pyelftools, which auditwheel uses)."""
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(so))
    needed = [t.needed for t in elf.get_section_by_name(".dynamic").iter_tags()
              if t.entry.d_tag == "DT_NEEDED"]
    versions = {}  # version index -> name, from what the object needs
    verneed = elf.get_section_by_name(".gnu.version_r")
    if verneed is not None:
        for _, auxes in verneed.iter_versions():
            for aux in auxes:
                versions[aux["vna_other"]] = aux.name
    versym = elf.get_section_by_name(".gnu.version")
    undefined, exported = [], set()
    for i, sym in enumerate(elf.get_section_by_name(".dynsym").iter_symbols()):
        if not sym.name:
            continue
        if sym["st_shndx"] == "SHN_UNDEF":
            ndx = versym.get_symbol(i)["ndx"] if versym is not None else 0
            version = versions.get(ndx) if isinstance(ndx, int) else None
            undefined.append((sym.name, version, sym["st_info"]["bind"]))
        elif sym["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK"):
            exported.add(sym.name)
    return elf["e_machine"], needed, undefined, exported


def test_there_is_a_manylinux_wheel_for_every_python_and_architecture():
    found = {}
    for w in WHEELS:
        assert NAME.match(w.name), w.name
        version, plat, arch = parsed(w)
        found[version, arch] = plat
    assert sorted(found) == sorted((v, a) for v in PYTHONS for a in ARCHS), (
        f"wheels in {DIST}: {[w.name for w in WHEELS]}")
    for (version, arch), plat in found.items():
        m = re.fullmatch(rf"manylinux_2_(\d+)_{arch}", plat)
        assert m and (2, int(m.group(1))) <= GLIBC_FLOOR, (version, arch, plat)


@pytest.mark.parametrize("wheel", WHEELS, ids=ids)
def test_auditwheel_agrees_with_the_tag_and_nothing_is_bundled(wheel):
    version, plat, arch = parsed(wheel)
    show = Path(str(wheel) + ".show.txt").read_text()
    assert f'consistent with the following platform tag: "{plat}"' in show, show
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    # OpenSSL, libyaml, zlib and libaerospike are linked in statically.
    assert not [n for n in names if n.startswith("lmcache_aerospike.libs/")], names
    suffix = f"cpython-{version.replace('.', '')}-{arch}-linux-gnu.so"
    assert f"lmcache_aerospike/_native.{suffix}" in names, names
    assert "lmcache_aerospike/testserver/server.py" in names  # the demo's stand-in


@pytest.mark.parametrize("wheel", WHEELS, ids=ids)
def test_the_extension_asks_glibc_for_2_28_at_most_and_exports_only_its_init(wheel):
    _, _, arch = parsed(wheel)
    name, so = native(wheel)
    machine, needed, undefined, exported = dynamic_symbols(so)
    assert machine == EM[arch], (name, machine)
    assert set(needed) <= SYSTEM_LIBS, needed
    newest = (0, 0)
    for sym, version, bind in undefined:
        if version is None:
            # Unversioned: the interpreter's C API (the extension links no
            # libpython), or a weak reference that may stay unresolved.
            assert sym.startswith(("Py", "_Py")) or bind == "STB_WEAK", sym
            continue
        m = re.fullmatch(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?", version)
        assert m, (sym, version)
        assert (int(m.group(1)), int(m.group(2))) <= GLIBC_FLOOR, (sym, version)
        newest = max(newest, (int(m.group(1)), int(m.group(2))))
    assert newest > (2, 0)  # glibc symbols were found at all
    # The static libraries' symbols (OpenSSL's above all) stay inside: nothing
    # else in the process binds to them, nor they to another OpenSSL.
    assert exported == {"PyInit__native"}, sorted(exported)[:20]


@pytest.fixture(scope="module")
def zig_cc():
    """zig's C compiler (PyPI's ziglang, in requirements-wheels.txt), its cache in
    .deps as scripts/wheels.sh keeps it."""
    env = dict(os.environ, ZIG_GLOBAL_CACHE_DIR=str(REPO / ".deps" / "zig-cache"),
               ZIG_LOCAL_CACHE_DIR=str(REPO / ".deps" / "zig-cache"))
    return [sys.executable, "-m", "ziglang", "cc"], env


def fetch_pinned(file: str, sha256: str, url: str) -> Path:
    """A download kept in .deps/sources, its sha256 checked."""
    path = REPO / ".deps" / "sources" / file
    if not path.exists() or hashlib.sha256(path.read_bytes()).hexdigest() != sha256:
        path.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url, timeout=300) as r:
            data = r.read()
        assert hashlib.sha256(data).hexdigest() == sha256, f"{url}: sha256 mismatch"
        path.write_bytes(data)
    return path


@pytest.mark.parametrize("arch", ARCHS)
def test_the_extension_loads_under_an_older_glibc(arch, zig_cc, tmp_path):
    """Debian 11's glibc 2.31 (its libc6 .deb, unpacked: no root or chroot
    needed) loads the cp311 extension with its own dynamic loader, every symbol
    bound at once (RTLD_NOW). The program that asks it to is built for glibc 2.28
    and stands in for the interpreter: it defines the C API names the extension
    refers to (never called: only loading is checked)."""
    [wheel] = [w for w in WHEELS if parsed(w)[0] == "3.11" and parsed(w)[2] == arch]
    name, so = native(wheel)
    (tmp_path / "ext.so").write_bytes(so)
    _, _, undefined, _ = dynamic_symbols(so)
    stubs = sorted(s for s, version, _ in undefined if version is None and s.startswith(("Py", "_Py")))
    src = tmp_path / "loader.c"
    src.write_text(
        "#include <dlfcn.h>\n#include <stdio.h>\n#include <gnu/libc-version.h>\n"
        + "".join(f"__attribute__((visibility(\"default\"), aligned(16))) char {s}[256];\n"
                  for s in stubs)
        + """int main(int argc, char **argv) {
    (void)argc;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) { printf("dlopen: %s\\n", dlerror()); return 1; }
    printf("glibc %s: loaded, PyInit__native %s\\n", gnu_get_libc_version(),
           dlsym(h, "PyInit__native") ? "found" : "missing");
    return 0;
}
""")
    cc, env = zig_cc
    subprocess.run(cc + ["-target", f"{arch}-linux-gnu.2.28", "-O1", "-rdynamic", str(src),
                         "-ldl", "-o", str(tmp_path / "loader")],
                   check=True, env=env, timeout=300)
    deb, sha = OLD_GLIBC[arch]
    path = fetch_pinned(deb, sha, f"http://deb.debian.org/debian/pool/main/g/glibc/{deb}")
    libc = tmp_path / "libc6"
    subprocess.run(["dpkg-deb", "-x", str(path), str(libc)], check=True)
    libdir = libc / "lib" / f"{arch}-linux-gnu"
    [ld] = libdir.glob("ld-2.31.so")
    cmd = [str(ld), "--library-path", str(libdir), str(tmp_path / "loader"), str(tmp_path / "ext.so")]
    if arch != HOST:
        qemu = shutil.which(f"qemu-{arch}-static") or shutil.which(f"qemu-{arch}")
        assert qemu, f"no qemu-{arch}-static to run the {arch} loader (install-debian-deps.sh emulation)"
        cmd = [qemu] + cmd
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "glibc 2.31: loaded, PyInit__native found" in done.stdout, done.stdout


@pytest.fixture(scope="module")
def bare_path(tmp_path_factory):
    """A PATH with nothing on it: no compiler, no pip but the venv's."""
    empty = tmp_path_factory.mktemp("empty-path")
    for cc in ("cc", "gcc", "clang"):
        assert shutil.which(cc, path=str(empty)) is None
    return str(empty)


def round_trip(hosts: str, set_name: str, prefix: str) -> str:
    """Python that imports the installed package (from prefix), puts a chunk of
    256 KiB and one of 4 MiB (LMCache's usual chunk sizes) and gets them back."""
    return f"""
import os, platform, lmcache_aerospike, lmcache_aerospike._native as n
assert lmcache_aerospike.__file__.startswith({prefix!r}), lmcache_aerospike.__file__
c = n.Connector(hosts={hosts!r}, set={set_name!r})
for size in (256 << 10, 4 << 20):
    data = os.urandom(size)
    c.put(f"wheel-smoke-{{size}}", data)
    buf = bytearray(size)
    assert c.get(f"wheel-smoke-{{size}}", buf) == size and bytes(buf) == data, size
    assert c.remove(f"wheel-smoke-{{size}}")
c.close()
print("round trip ok on", platform.machine())
"""


def check_probe(done):
    assert done.returncode in (0, 1), done.stderr  # 1: problems found, reported
    doc = json.loads(done.stdout)
    assert doc["seeds"] and all(s["reachable"] for s in doc["seeds"]), doc


@pytest.mark.parametrize("wheel", [w for w in WHEELS if parsed(w)[2] == HOST], ids=ids)
def test_the_wheel_installs_with_no_compiler_and_no_index_and_works(
        wheel, aerospike_hosts, bare_path, tmp_path):
    version, _, _ = parsed(wheel)
    venv = tmp_path / "venv"
    subprocess.run([interpreter(version), "-m", "venv", str(venv)], check=True)
    env = {"PATH": f"{venv / 'bin'}:{bare_path}", "HOME": str(tmp_path),
           "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                    "--no-index", "--no-cache-dir", str(wheel)],
                   check=True, env=env, cwd=tmp_path, timeout=300)
    code = round_trip(aerospike_hosts, f"lmca_wheel_{version.replace('.', '')}", str(venv))
    done = subprocess.run([str(venv / "bin" / "python"), "-c", code], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "round trip ok" in done.stdout, done.stderr
    check_probe(subprocess.run([str(venv / "bin" / "lmcache-aerospike"), "probe", "--hosts",
                                aerospike_hosts, "--json"], env=env, cwd=tmp_path,
                               capture_output=True, text=True, timeout=120))


@pytest.fixture(scope="module")
def arm64_root():
    """The emulated arm64 Debian (scripts/arm64-root.sh: made once, about 3
    minutes, then cached in .deps)."""
    done = subprocess.run([str(REPO / "scripts" / "arm64-root.sh")], stdout=subprocess.PIPE,
                          text=True, timeout=1200)
    assert done.returncode == 0, "scripts/arm64-root.sh failed (its output is above)"
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(HOST == "aarch64", reason="on aarch64 the native test installs these")
def test_an_aarch64_wheel_installs_and_works_under_emulation(arm64_root, aerospike_hosts):
    """The root's own python3 makes a venv and installs the wheel of its version
    with no compiler in the root and no index; the test server runs on this
    machine, reached on loopback (a chroot shares the network)."""
    root = arm64_root
    version = subprocess.run(
        ["chroot", str(root), "/usr/bin/python3", "-c",
         "import sys, platform; assert platform.machine() == 'aarch64'; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True, check=True, timeout=120).stdout.strip()
    [wheel] = [w for w in WHEELS if parsed(w)[0] == version and parsed(w)[2] == "aarch64"]
    for cc in ("cc", "gcc", "clang"):
        for d in ("usr/bin", "bin", "usr/local/bin"):
            assert not (root / d / cc).exists(), f"{root}/{d}/{cc}: the root has a compiler"
    inside = Path("/tmp") / f"lmca-wheel-{os.getpid()}"
    work = root / inside.relative_to("/")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    shutil.copy(wheel, work)
    venv = inside / "venv"
    env = ["/usr/bin/env", "-i", f"PATH={venv}/bin:/usr/bin:/bin", f"HOME={inside}",
           "PIP_NO_INDEX=1", "PIP_DISABLE_PIP_VERSION_CHECK=1", "LC_ALL=C.UTF-8"]

    def run(*cmd, timeout=600):
        return subprocess.run(["chroot", str(root)] + env + list(cmd), capture_output=True,
                              text=True, timeout=timeout)

    try:
        done = run("/usr/bin/python3", "-m", "venv", str(venv))
        assert done.returncode == 0, done.stderr
        done = run(f"{venv}/bin/python", "-m", "pip", "install", "-q", "--no-index",
                   "--no-cache-dir", str(inside / wheel.name))
        assert done.returncode == 0, done.stderr
        done = run(f"{venv}/bin/python", "-c",
                   round_trip(aerospike_hosts, "lmca_wheel_arm64", str(venv)), timeout=300)
        assert done.returncode == 0 and "round trip ok on aarch64" in done.stdout, done.stderr
        check_probe(run(f"{venv}/bin/lmcache-aerospike", "probe", "--hosts", aerospike_hosts,
                        "--json", timeout=300))
    finally:
        shutil.rmtree(work, ignore_errors=True)


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
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LMCA_AEROSPIKE_") and k != "LMCA_NO_EXTENSION"}
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
