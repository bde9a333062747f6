#!/usr/bin/env bash
# The GPU device check (issue #34), one script: on a CUDA machine with Python 3.12, torch,
# torchvision, Cython, CMake and no network it
#   1. checks what it needs and stops at once, saying what to carry, when something is missing
#      (the cheap checks first: a C compiler and, when a build is due, libjpeg-turbo's headers
#      or a carry, then the Python packages, whose imports are seconds of CPU);
#   2. builds turboloader's extensions in place (libjpeg-turbo from the system or from
#      .gpu_carry/, see --prepare);
#   3. runs the CUDA-marked tests and the CPU-side tests of the GPU path;
#   4. measures, in the same run, the CPU thread backend + PrefetchLoader and decode="gpu",
#      alone and feeding a ResNet-50 training step (benchmarks/bench_gpu.py), and prints a table.
# It prints each phase's time; the whole is meant to end well inside 8 minutes on 16 cores.
#
# Usage (from the repository root):
#   benchmarks/gpu_check.sh --prepare    # here, with network: .gpu_carry/ gets the libjpeg-turbo
#                                        # .debs (runtime + headers) the GPU machine may lack
#   bash benchmarks/gpu_check.sh         # on the GPU machine (the device tool: carry .gpu_carry)
#   benchmarks/gpu_check.sh --dry-run    # anywhere: the same steps on the CPU with the CPU
#                                        # stand-in decoder and tiny sizes (checks the script)
# Options: --skip-tests, --build (rebuild even if the extensions import), -- ARGS (passed to
# bench_gpu.py, e.g. -- --n 4096 --batch 256). Environment: PYTHON (default python3, or the
# repository's .venv), GPU_CHECK_CARRY (default .gpu_carry), GPU_CHECK_JPEG_SEARCH (include
# folders searched for jpeglib.h, default "/usr/include /usr/local/include"), OUT (a folder:
# the log and the table are also written there).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CARRY="${GPU_CHECK_CARRY:-$ROOT/.gpu_carry}"
SEARCH="${GPU_CHECK_JPEG_SEARCH:-/usr/include /usr/local/include}"
DRY=0 TESTS=1 BUILD=0 PREPARE=0
BENCH_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --skip-tests) TESTS=0 ;;
    --build) BUILD=1 ;;
    --prepare) PREPARE=1 ;;
    --) shift; BENCH_ARGS=("$@"); break ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

T0=$(date +%s)
phase() { echo; echo "== [$(( $(date +%s) - T0 )) s] $*"; }
die() { echo "gpu_check: FAILED: $1" >&2; exit "${2:-3}"; }

if [ "$PREPARE" = 1 ]; then
  # Debian's libjpeg62-turbo or Ubuntu's libjpeg-turbo8: either runs on the GPU machine's
  # Ubuntu (they need only libc); the headers must match the library, so both come together
  mkdir -p "$CARRY"
  ( cd "$CARRY" && { apt-get download libjpeg62-turbo libjpeg62-turbo-dev 2>/dev/null ||
                     apt-get download libjpeg-turbo8 libjpeg-turbo8-dev libjpeg8 libjpeg8-dev; } ) ||
    die "apt-get download of libjpeg-turbo's packages failed (needs apt and network)"
  echo "gpu_check: $CARRY holds:"; ls -l "$CARRY"
  echo "carry it to the GPU machine (device tool: carry [\".gpu_carry\"]) and run:"
  echo "  bash benchmarks/gpu_check.sh"
  exit 0
fi

if [ -z "${PYTHON:-}" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
LOG=/dev/null
if [ -n "${OUT:-}" ]; then mkdir -p "$OUT"; LOG="$OUT/gpu_check.log"; fi
exec > >(tee -a "$LOG") 2>&1

phase "what the run needs"
command -v cc >/dev/null || command -v gcc >/dev/null || die "no C compiler (cc/gcc) on the PATH"
# a build is due (--build, or the extensions do not import): libjpeg-turbo's headers or the
# carried .debs must be there, checked before the Python packages' imports
NEED_BUILD=1
if [ "$BUILD" = 0 ] && "$PYTHON" -c "import turboloader._native._fused, turboloader._native._jpeg" 2>/dev/null; then
  NEED_BUILD=0
fi
header="" debs=""
if [ "$NEED_BUILD" = 1 ]; then
  for d in $SEARCH; do
    if [ -f "$d/jpeglib.h" ] && grep -q jpeg_crop_scanline "$d/jpeglib.h"; then header="$d"; break; fi
  done
  if [ -z "$header" ]; then
    debs=$(ls "$CARRY"/*.deb 2>/dev/null || true)
    [ -n "$debs" ] || die "libjpeg-turbo's headers (jpeglib.h with jpeg_crop_scanline) are not in \
$SEARCH and $CARRY holds no .deb. On a machine with network, from the repository root, run
    benchmarks/gpu_check.sh --prepare
and carry .gpu_carry to this machine (device tool: carry [\".gpu_carry\"])." 3
  fi
fi
"$PYTHON" - "$DRY" <<'EOF' || die "a Python package is missing (above): carry it as a wheel (see /work/.library/device/README.md, or pip download --only-binary=:all: --python-version 3.12 ...)"
import importlib, platform, sys
dry = sys.argv[1] == "1"
need = ["numpy", "PIL", "torch", "torchvision", "Cython", "setuptools", "pytest",
        "skimage", "sklearn"]   # the last two: the photographs the benchmark data are made of
missing = []
for name in need:
    try:
        importlib.import_module(name)
    except Exception as exc:
        missing.append(f"{name} ({type(exc).__name__}: {exc})")
print(f"python {platform.python_version()} at {sys.executable}")
if missing:
    print("missing: " + "; ".join(missing))
    sys.exit(1)
import torch, torchvision
print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, "
      f"CUDA available: {torch.cuda.is_available()}")
if torch.cuda.is_available():
    print(f"GPU: {torch.cuda.get_device_name(0)}")
elif not dry:
    print("torch sees no CUDA device: this is the GPU check (use --dry-run on a CPU)")
    sys.exit(1)
EOF

phase "libjpeg-turbo and the build"
if [ "$NEED_BUILD" = 0 ]; then
  echo "the extensions import already: no build (--build forces one)"
else
  if [ -z "$header" ]; then
    JPEG="$(mktemp -d)/jpeg"
    mkdir -p "$JPEG"
    for f in $debs; do dpkg -x "$f" "$JPEG" || die "dpkg -x $f failed"; done
    inc="$JPEG/usr/include"
    lib=$(dirname "$(ls "$JPEG"/usr/lib/*/libjpeg.so* "$JPEG"/usr/lib/libjpeg.so* 2>/dev/null | head -1)")
    [ -f "$inc/jpeglib.h" ] && [ -n "$lib" ] || die "the carried .debs hold no jpeglib.h / libjpeg.so"
    export TURBOLOADER_JPEG_INCLUDE="$inc" TURBOLOADER_JPEG_LIB="$lib"
    # jconfig.h sits in the multiarch folder on Debian and Ubuntu
    export CPATH="$(ls -d "$inc"/*-linux-gnu 2>/dev/null | head -1)${CPATH:+:$CPATH}"
    export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "libjpeg-turbo from the carried .debs: $inc, $lib"
  else
    echo "libjpeg-turbo headers: $header"
  fi
  jobs=$(nproc 2>/dev/null || echo 4)
  "$PYTHON" setup.py build_ext --inplace -j "$jobs" >"${OUT:-/tmp}/gpu_check_build.log" 2>&1 ||
    { tail -30 "${OUT:-/tmp}/gpu_check_build.log"; die "the build failed (log above)"; }
  "$PYTHON" -c "import turboloader._native._fused, turboloader._native._jpeg" ||
    die "the extensions built but do not import"
  echo "built"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

STATUS=0
if [ "$TESTS" = 1 ]; then
  phase "tests: the CUDA-marked ones and the GPU path's CPU-side ones"
  "$PYTHON" -m pytest -p no:cacheprovider -q -rs \
      tests/loader/test_cuda.py tests/loader/test_prefetch.py \
      tests/transforms/test_device_decode.py tests/loader/test_decode_gpu.py || STATUS=1
fi

phase "measurements (benchmarks/bench_gpu.py)"
args=()
[ "$DRY" = 1 ] && args+=(--dry-run)
[ -n "${OUT:-}" ] && args+=(--out "$OUT/gpu_table.md")
"$PYTHON" benchmarks/bench_gpu.py "${args[@]}" "${BENCH_ARGS[@]}" || STATUS=1

phase "done: $([ $STATUS = 0 ] && echo 'all passed' || echo 'SOMETHING FAILED (above)')"
exit $STATUS
