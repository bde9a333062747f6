"""Create the separate virtual environments that some rows of ``benchmarks/run.py`` need.

Each third-party system whose package would clash with the dev environment gets its own venv
under ``benchmarks/.venv-<name>`` (git-ignored):

- ``simd``: pillow-simd built from source (with ``-mavx2`` where the CPU has AVX2). It installs
  the same ``PIL`` module as Pillow, so it can never share a venv with Pillow.
- ``turboloader-pypi``: the C++ TurboLoader from PyPI (``turboloader==2.39.0``), whose import
  name is the same as this project's.
- ``webdataset``: ``webdataset==1.0.2`` and its small dependencies.
- ``streaming``: MosaicML Streaming (``mosaicml-streaming==0.13.0``, with boto3 for its S3
  client), for the MDS rows of ``bench_remote.py``.
- ``spdl``: Meta's SPDL (``spdl``, which pulls ``spdl_io`` and ``spdl_core``).
- ``dali``: NVIDIA DALI (``nvidia-dali-cuda120``, pinned), whose CPU pipeline runs with
  ``device_id=None`` on a machine without a GPU.
- ``datago``: Photoroom's Rust loader (``datago==2026.10.1``, a binary wheel).


- ``torchcodec``: PyTorch's video decoder (``torchcodec==0.16.0``, the release its
  compatibility table pairs with torch 2.14). Its wheels do not carry FFmpeg: it loads the
  system's FFmpeg shared libraries (Debian: ``apt-get install ffmpeg``, FFmpeg 4 to 8).

torch and torchvision are large; by default every venv *shares* them (and NumPy) with the
interpreter running this script through a ``.pth`` file, so nothing multi-GB is downloaded
twice. The venv's own ``site-packages`` comes first on ``sys.path``, so a package installed
in the venv (pillow-simd's ``PIL``, PyPI's ``turboloader``) shadows the shared one.
``--no-share`` installs torch/torchvision into each venv instead. Every pip call uses a
constraints file pinning torch==2.14.1 and torchvision==0.29.1, so pip never resolves an
unpinned torch.

The script is idempotent: an env whose marker file records a successful install is skipped
(``--force`` redoes it). A failed install is recorded too (the last line of pip's error goes in
``benchmarks/.venv-<name>/FAILED``); ``run.py`` prints that line in the system's row.

Usage::

    python benchmarks/setup_envs.py                 # all envs
    python benchmarks/setup_envs.py simd spdl       # some
    python benchmarks/setup_envs.py --force --no-share
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONSTRAINTS = "torch==2.14.1\ntorchvision==0.29.1\n"

# name -> (pip arguments, extra environment, import check)
ENVS = {
    "simd": (["--no-binary", "pillow-simd", "pillow-simd"],
             "simd",
             "import PIL, PIL.features; assert 'post' in PIL.__version__, PIL.__version__; "
             "print('pillow-simd', PIL.__version__, PIL.features.version('jpg'))"),
    "turboloader-pypi": (["turboloader==2.39.0"], None,
                         "import turboloader, os; print('turboloader', turboloader.__version__, "
                         "os.path.dirname(turboloader.__file__))"),
    "webdataset": (["webdataset==1.0.2"], None,
                   "import webdataset; print('webdataset', webdataset.__version__)"),
    "streaming": (["mosaicml-streaming==0.13.0"], None,
                  "import streaming, boto3, importlib.metadata as m; "
                  "print('mosaicml-streaming', m.version('mosaicml-streaming'))"),
    "spdl": (["spdl"], None,
             "import spdl.io, spdl.pipeline; import importlib.metadata as m; "
             "print('spdl', m.version('spdl'))"),
    "dali": (["nvidia-dali-cuda120==2.4.0"], None,
             "import nvidia.dali as d, nvidia.dali.fn, nvidia.dali.types; "
             "print('nvidia-dali-cuda120', d.__version__)"),
    "datago": (["datago==2026.10.1"], None,
               "import datago, importlib.metadata as m; print('datago', m.version('datago'))"),


    "torchcodec": (["torchcodec==0.16.0"], None,
                   "import torchcodec, torchcodec.decoders; "
                   "print('torchcodec', torchcodec.__version__, 'ffmpeg', "
                   "torchcodec._core.get_ffmpeg_library_versions()['ffmpeg_version'])"),
}


def venv_dir(name: str) -> Path:
    return HERE / f".venv-{name}"


def venv_python(name: str) -> Path:
    return venv_dir(name) / "bin" / "python"


def status(name: str) -> tuple[str, str]:
    """('ok'|'failed'|'missing', detail) for one env, read from its marker files."""
    d = venv_dir(name)
    if (d / "OK").exists():
        return "ok", (d / "OK").read_text().strip()
    if (d / "FAILED").exists():
        return "failed", (d / "FAILED").read_text().strip()
    return "missing", f"run: python benchmarks/setup_envs.py {name}"


def _has_avx2() -> bool:
    try:
        return " avx2 " in Path("/proc/cpuinfo").read_text().replace("\n", " ")
    except OSError:
        return False


def _last_error_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):  # the real cause (e.g. "ModuleNotFoundError: ...") first
        if re.search(r"\b\w+(Error|Exception):", ln) and not ln.startswith("error:"):
            return ln[:300]
    for ln in reversed(lines):
        if ln.startswith("ERROR:") or "error:" in ln.lower():
            return ln[:300]
    return (lines[-1] if lines else "unknown error")[:300]


def create(name: str, *, share: bool, force: bool) -> bool:
    pip_args, extra, check = ENVS[name]
    d = venv_dir(name)
    if not force and (d / "OK").exists():
        print(f"[{name}] already set up: {(d / 'OK').read_text().strip()}")
        return True
    for marker in ("OK", "FAILED"):
        (d / marker).unlink(missing_ok=True)
    base = getattr(sys, "_base_executable", sys.executable)
    if not venv_python(name).exists():
        subprocess.run([base, "-m", "venv", str(d)], check=True)
    py = str(venv_python(name))
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    pth = Path(site) / "_shared_torch.pth"
    if share:
        pth.write_text(sysconfig.get_paths()["purelib"] + "\n")
    else:
        pth.unlink(missing_ok=True)
    cfile = d / "constraints.txt"
    cfile.write_text(CONSTRAINTS)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # never let this project's turboloader leak into a venv
    log = []
    cmds = [[py, "-m", "pip", "install", "-q", "-c", str(cfile), "pip", "setuptools", "wheel"]]
    if not share:
        cmds.append([py, "-m", "pip", "install", "-q", "-c", str(cfile), "torch==2.14.1",
                     "torchvision==0.29.1", "numpy"])
    if extra == "simd":
        # AVX2 build per pillow-simd's docs; its setup.py needs the libjpeg/zlib headers.
        if _has_avx2():
            env["CC"] = "cc -mavx2"
    cmds.append([py, "-m", "pip", "install", "-c", str(cfile), *pip_args])
    for cmd in cmds:
        print(f"[{name}] $ {' '.join(cmd)}" + (f"  (CC={env['CC']!r})" if "CC" in env else ""))
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        log.append(p.stdout + p.stderr)
        if p.returncode != 0:
            line = _last_error_line(p.stdout + p.stderr)
            (d / "FAILED").write_text(f"pip install {' '.join(pip_args)}: {line}\n")
            (d / "install.log").write_text("\n".join(log))
            print(f"[{name}] FAILED: {line}")
            return False
    # cwd=d: '' on sys.path must not be this repo (its turboloader would shadow PyPI's)
    p = subprocess.run([py, "-c", check], env=env, capture_output=True, text=True, cwd=d)
    (d / "install.log").write_text("\n".join(log) + p.stdout + p.stderr)
    if p.returncode != 0:
        line = _last_error_line(p.stderr)
        (d / "FAILED").write_text(f"installed but import fails: {line}\n")
        print(f"[{name}] FAILED: {line}")
        return False
    (d / "OK").write_text(p.stdout.strip() + (" (torch shared)" if share else "") + "\n")
    print(f"[{name}] ok: {p.stdout.strip()}")
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("envs", nargs="*", default=[],
                    help=f"which envs (default: all of {', '.join(ENVS)})")
    ap.add_argument("--force", action="store_true", help="recreate even if set up")
    ap.add_argument("--no-share", dest="share", action="store_false",
                    help="install torch/torchvision into each venv instead of sharing them")
    a = ap.parse_args(argv)
    if a.share:
        try:
            import torch  # noqa: F401
            import torchvision  # noqa: F401
        except ImportError:
            print("this interpreter has no torch/torchvision to share; using --no-share")
            a.share = False
    unknown = [e for e in a.envs if e not in ENVS]
    if unknown:
        ap.error(f"unknown env(s) {unknown}; choose from {list(ENVS)}")
    ok = True
    for name in a.envs or list(ENVS):
        ok &= create(name, share=a.share, force=a.force)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
