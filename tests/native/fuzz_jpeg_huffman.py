"""Mutation fuzz of turboloader's Huffman decoder (jpeg_huffman.c) against libjpeg-turbo's:
every mutated file decodes to the same pixels, warning count, first warning and error with
both (``flags=0`` vs ``STOCK_HUFFMAN``). Not collected by pytest (a script: long, random);
``test_jpeg_huffman.py`` holds the fixed cases.

    python tests/native/fuzz_jpeg_huffman.py --n 2000                 # photos, ordinary files
    python tests/native/fuzz_jpeg_huffman.py --n 2000 --seekable      # their restart copies
    PYTHONMALLOC=malloc valgrind python tests/native/fuzz_jpeg_huffman.py --n 40 --data DIR

Inputs: ImageNet-sized photographs from ``benchmarks/datasets.py`` (``make_jpegs``; falls back
to the tests' synthetic images when scikit-image is missing). Mutations: 1-4 bit flips in the
entropy-coded data, a random byte overwritten, bytes inserted or deleted, a truncation, a
0xFF/marker inserted, a flip anywhere (headers included). Each is decoded whole, at 1/4 scale,
and in a window (jpeg_crop_scanline + jpeg_skip_scanlines), lenient and strict. Prints the
counts; exits 1 on the first mismatch (with the seed to replay it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "benchmarks"))

from test_jpeg_huffman import STOCK, _entropy_start, outcome  # noqa: E402

from turboloader._native import _jpeg  # noqa: E402


def sources(n: int, seekable: bool, data: str | None = None) -> list[bytes]:
    if data:                  # JPEGs under a folder (an ImageFolder tree)
        files = [p.read_bytes() for p in sorted(Path(data).rglob("*.jpg"))[:n]]
        return [_jpeg.transcode_restart(d)[0] for d in files] if seekable else files
    try:
        from datasets import make_jpegs
        files = [d for d, _ in make_jpegs(n, seed=42)]
    except ImportError:       # no scikit-image: the tests' synthetic images
        from test_jpeg_restart import encode, synth
        files = [encode(synth(300 + 7 * i, 400 + 11 * i, seed=i), subsampling=i % 3)
                 for i in range(n)]
    if seekable:
        files = [_jpeg.transcode_restart(d)[0] for d in files]
    return files


def mutate(data: bytes, rng: np.random.Generator) -> tuple[str, bytes]:
    b = bytearray(data)
    start = _entropy_start(data)
    end = len(b) - 2
    kind = int(rng.integers(0, 7))
    pos = int(rng.integers(start, end))
    if kind == 0:
        for _ in range(int(rng.integers(1, 5))):
            b[int(rng.integers(start, end))] ^= 1 << int(rng.integers(0, 8))
        return "bitflip", bytes(b)
    if kind == 1:
        b[pos] = int(rng.integers(0, 256))
        return "byte", bytes(b)
    if kind == 2:
        return "insert", bytes(b[:pos] + rng.integers(0, 256, int(rng.integers(1, 4)),
                                                     dtype=np.uint8).tobytes() + b[pos:])
    if kind == 3:
        return "delete", bytes(b[:pos] + b[pos + int(rng.integers(1, 4)):])
    if kind == 4:
        return "truncate", bytes(b[:pos])
    if kind == 5:
        marker = [0x00, 0xD0 + int(rng.integers(0, 8)), 0xD9, 0xC4, 0xFF, 0xDA][
            int(rng.integers(0, 6))]
        return "marker", bytes(b[:pos] + bytes([0xFF, marker]) + b[pos:])
    i = int(rng.integers(2, len(b)))
    b[i] ^= 1 << int(rng.integers(0, 8))
    return "anywhere", bytes(b)


def decode(data, k, crop, flags):
    try:
        return outcome(data, k, crop, False, flags)
    except Exception as exc:  # a header the mutation broke: read_header's error
        return type(exc), str(exc)


def same(a, b) -> bool:
    if isinstance(a[0], np.ndarray) != isinstance(b[0], np.ndarray):
        return False
    if isinstance(a[0], np.ndarray):
        return a[0].shape == b[0].shape and np.array_equal(a[0], b[0]) and a[1] == b[1]
    return a == b


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="mutated files (default 1000)")
    ap.add_argument("--images", type=int, default=16, help="source photos (default 16)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seekable", action="store_true", help="fuzz the restart-marker copies")
    ap.add_argument("--data", help="take the photos from the *.jpg files under this folder")
    args = ap.parse_args(argv)
    files = sources(args.images, args.seekable, args.data)
    own = sum(_jpeg.huffman_decoder(d) == "turboloader" for d in files)
    rng = np.random.default_rng(args.seed)
    counts: dict[str, int] = {}
    results = {"pixels": 0, "warned": 0, "error": 0}
    cases = 0
    for i in range(args.n):
        src = files[i % len(files)]
        kind, bad = mutate(src, rng)
        counts[kind] = counts.get(kind, 0) + 1
        try:
            W, H = _jpeg.read_header(np.frombuffer(bad, np.uint8))[:2]
        except Exception:
            W, H = _jpeg.read_header(np.frombuffer(src, np.uint8))[:2]
        dw, dh = (W * 2 + 7) // 8, (H * 2 + 7) // 8
        for k, crop, flags in ((8, None, 0), (2, None, 0), (2, (dw // 4, dh // 3, dw // 2, dh // 3), 0),
                               (8, (W // 3, H // 2, W // 3, H // 4), _jpeg.STRICT)):
            ours = decode(bad, k, crop, flags)
            stock = decode(bad, k, crop, flags | STOCK)
            cases += 1
            if not same(ours, stock):
                print(f"MISMATCH case {i} ({kind}), k={k} crop={crop} flags={flags}: "
                      f"ours {ours[1:]!r} vs libjpeg {stock[1:]!r}; replay --seed {args.seed} "
                      f"--n {i + 1}", flush=True)
                return 1
            if isinstance(stock[0], np.ndarray):
                results["warned" if stock[1] else "pixels"] += 1
            else:
                results["error"] += 1
    print(f"{args.n} mutated files of {len(files)} photos ({own} on turboloader's decoder "
          f"unmutated; {'seekable' if args.seekable else 'ordinary'}), {cases} decodes "
          f"compared, all identical; mutations {counts}; libjpeg's outcomes {results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
