"""Makes a platform wheel from the pure one and a built extension:

    python scripts/pack_wheel.py BASE.whl NATIVE.so TAG OUTDIR

BASE.whl is the package without its extension (setup.py with
LMCA_NO_EXTENSION=1: the Python code, the test server, the metadata and entry
points); NATIVE.so is lmcache_aerospike/_native.<suffix> as scripts/wheels.sh
cross-built it; TAG is the wheel tag, e.g. cp311-cp311-manylinux_2_28_aarch64.
The result is BASE with the extension added, its WHEEL file saying the tag and
Root-Is-Purelib: false, and its RECORD written anew. Prints the wheel's path.

scripts/wheels.sh builds the extension itself (zig cc, one toolchain for both
architectures) rather than through setuptools, which takes the compiler, the
headers and the extension's suffix from the interpreter that runs it: an
x86_64 one here, for aarch64 wheels too.
"""

import base64
import hashlib
import os
import sys
import zipfile


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def main(base: str, native: str, tag: str, outdir: str) -> str:
    dist, version = os.path.basename(base).split("-")[:2]
    info = f"{dist}-{version}.dist-info"
    out = os.path.join(outdir, f"{dist}-{version}-{tag}.whl")
    with open(native, "rb") as f:
        so = f.read()
    members = [(f"lmcache_aerospike/{os.path.basename(native)}", so, 0o755)]
    with zipfile.ZipFile(base) as z:
        for item in z.infolist():
            if item.filename in (f"{info}/RECORD", f"{info}/WHEEL"):
                continue
            assert not item.filename.endswith(".so"), f"{base} already holds {item.filename}"
            members.append((item.filename, z.read(item), (item.external_attr >> 16) & 0o777))
        wheel = z.read(f"{info}/WHEEL").decode()
    lines = [line for line in wheel.splitlines()
             if line and not line.startswith(("Tag:", "Root-Is-Purelib:"))]
    lines += ["Root-Is-Purelib: false", f"Tag: {tag}"]
    members.append((f"{info}/WHEEL", ("\n".join(lines) + "\n").encode(), 0o644))
    record = [record_line(name, data) for name, data, _ in members]
    record.append(f"{info}/RECORD,,")
    members.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode(), 0o644))
    os.makedirs(outdir, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data, mode in members:
            # A fixed date: the same inputs make the same wheel.
            item = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            item.external_attr = (mode or 0o644) << 16
            item.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(item, data)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    print(main(*sys.argv[1:]))
