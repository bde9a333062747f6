"""Adds the licence of a statically linked library to a wheel, in place:
``<dist-info>/licenses/<name>/<file>`` plus its RECORD line (stdlib only, so it runs in any
build environment: tools/build_wheel.sh and cibuildwheel's repair step).

    python tools/wheel_licenses.py WHEEL NAME FILE [FILE ...]
"""
import base64
import hashlib
import os
import sys
import tempfile
import zipfile


def add_licenses(wheel, name, files):
    with zipfile.ZipFile(wheel) as src:
        infos = src.infolist()
        (record,) = [i.filename for i in infos if i.filename.endswith(".dist-info/RECORD")]
        dist_info = record.rsplit("/", 1)[0]
        blobs = {i.filename: src.read(i) for i in infos}
    added = {}
    for path in files:
        with open(path, "rb") as f:
            added[f"{dist_info}/licenses/{name}/{os.path.basename(path)}"] = f.read()
    lines = [ln for ln in blobs[record].decode().splitlines()
             if ln and ln.split(",")[0] not in added and ln.split(",")[0] != record]
    for arc, data in added.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{arc},sha256={digest},{len(data)}")
    lines.append(f"{record},,")
    blobs.update(added)
    blobs[record] = ("\n".join(lines) + "\n").encode()
    fd, tmp = tempfile.mkstemp(suffix=".whl", dir=os.path.dirname(os.path.abspath(wheel)))
    os.close(fd)
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
        keep = {i.filename: i for i in infos if i.filename not in added}  # modes, dates
        names = list(keep) + list(added)
        for n in sorted(names, key=lambda n: (n == record, n.startswith(dist_info), n)):
            out.writestr(keep.get(n, n), blobs[n], zipfile.ZIP_DEFLATED)
    os.replace(tmp, wheel)


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    add_licenses(sys.argv[1], sys.argv[2], sys.argv[3:])
