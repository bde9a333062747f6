"""Which JPEGs a device decoder (nvJPEG) gets, and how their bytes travel there.

Planning, plus one call to the device decoder, so that everything but that call runs (and is
tested) on a CPU: :func:`route` reads each header and says which files nvJPEG decodes and
why the others go to libjpeg-turbo on the CPU instead; :func:`groups` cuts the device rows
into calls of bounded decoded size; :func:`as_tensors` hands the bytes over without a copy;
:func:`decode_on_device` makes one batched call and, when it raises, one call per file, so a
file the device refuses costs only itself. The decoder is any callable
``decoder(list of 1-D uint8 CPU tensors) -> list of (3, H, W) uint8 tensors``:
:func:`nvjpeg_decoder` on a CUDA device, ``torchvision.io.decode_jpeg`` on the CPU as the
stand-in the tests use.

torch and torchvision are imported inside the functions that need them (the decode floor
imports neither at module level).
"""

import threading

import numpy as np

from turboloader._native import _jpeg
from turboloader.decode.jpeg import _as_buffer, _read_header
from turboloader.errors import DecodeError

__all__ = []

# torchvision's CUDA JPEG decoder is one object per process: the decode threads take turns
_NVJPEG = threading.Lock()

#: Decoded bytes (3 x H x W) one device decode call holds at most (a single larger image is
#: one call of its own): 64 ImageNet-sized photographs (~0.5 MB each) per call are far below
#: it; 256 high-resolution ones (~12 MP, 36 MB each) are cut into calls of ~7.
DEVICE_CALL_BYTES = 256 << 20

#: Files per device decode call at most.
DEVICE_CALL_FILES = 256

# nvJPEG decodes baseline and extended-sequential Huffman files with these layouts; the rest
# (progressive, CMYK / YCCK, Adobe RGB-coded, odd sampling factors) goes to libjpeg-turbo,
# which decodes them exactly as the CPU path does
_DEVICE_SPACES = ("ycbcr", "gray")
_DEVICE_SUBSAMPLING = ("4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1", "gray")

# how far from the end of a file its end-of-image marker may sit (some writers pad)
_EOI_TAIL = 64


def route(sources):
    """Per JPEG source: None when the device decoder gets it, else why it is decoded on the
    CPU instead. Also each header's ``(height, width)`` (``(0, 0)`` when unreadable).

    A file goes to the CPU when its header does not read (the CPU path then raises the
    typed :class:`~turboloader.errors.DecodeError` it always does), when it is progressive,
    has 4 components (CMYK, YCCK), is not YCbCr or gray, has sampling factors nvJPEG does
    not take, or has no end-of-image marker near its end (a truncated file: libjpeg-turbo
    decodes what is there and warns, as on the CPU path, where nvJPEG would fail or not say),
    or has restart markers and libjpeg-turbo warns about its data or refuses it. nvJPEG
    resynchronises at restart markers without a word; so each file with restart markers is
    entropy-decoded on the host first (a 1/8-scale decode: the Huffman data in full, no
    full-size IDCT), and one libjpeg recovers from (a misnumbered or missing marker, bytes
    before one, an interval cut short) goes to the CPU path, which gives its warning, or
    with ``strict`` its error, exactly as without ``decode="gpu"``.

    Args:
        sources: JPEG files (bytes, memoryview, 1-D uint8 array).

    Returns:
        ``(reasons, sizes)``: a list of ``str | None`` and a list of ``(height, width)``.

    Example:
        >>> route([baseline_jpeg, progressive_jpeg])[0]              # doctest: +SKIP
        [None, 'progressive']
    """
    reasons, sizes = [], []
    for src in sources:
        try:
            buf = _as_buffer(src)
            header = _read_header(buf)
        except (TypeError, ValueError) as exc:  # DecodeError is a ValueError
            reasons.append(f"header: {exc}")
            sizes.append((0, 0))
            continue
        sizes.append((header.height, header.width))
        reasons.append(_why_cpu(buf, header))
    return reasons, sizes


def _why_cpu(buf, header):
    if header.progressive:
        return "progressive"
    if header.components not in (1, 3):
        return f"{header.components} components ({header.color_space})"
    if header.color_space not in _DEVICE_SPACES:
        return f"colour space {header.color_space}"
    if header.subsampling not in _DEVICE_SUBSAMPLING:
        return f"subsampling {header.subsampling}"
    tail = bytes(buf[-_EOI_TAIL:])
    if b"\xff\xd9" not in tail:
        return "no end-of-image marker (truncated)"
    if _restart_interval(buf):
        out = np.empty(((header.height + 7) // 8, (header.width + 7) // 8, 3), np.uint8)
        try:
            n_warnings, _ = _jpeg.decode_into(buf, out, scale_num=1)
        except DecodeError:
            return "corrupt data (libjpeg refuses it)"
        if n_warnings:
            return "corrupt data (libjpeg warns)"
    return None


def _restart_interval(buf):
    """The restart interval a DRI segment before the first scan sets (0: none)."""
    pos, end = 2, len(buf)
    while pos + 4 <= end:
        if buf[pos] != 0xFF:
            return 0
        marker = buf[pos + 1]
        if marker == 0xFF:   # fill byte
            pos += 1
            continue
        if marker == 0xDA:   # the scan: no DRI before it
            return 0
        if marker == 0xDD:
            return (buf[pos + 4] << 8) | buf[pos + 5] if pos + 6 <= end else 0
        pos += 2 + ((buf[pos + 2] << 8) | buf[pos + 3])
    return 0


def groups(sizes, *, max_bytes=DEVICE_CALL_BYTES, max_files=DEVICE_CALL_FILES):
    """Cut the rows into device decode calls: consecutive runs of at most ``max_files``
    files and ``max_bytes`` decoded bytes (``3 * height * width`` each; a file larger than
    that alone is a call of its own).

    Args:
        sizes: ``(height, width)`` per file.
        max_bytes, max_files: the bounds of one call (positive).

    Returns:
        A list of lists of indices into ``sizes``, in order, covering each index once.

    Raises:
        ValueError: a bound is not positive.

    Example:
        >>> groups([(100, 100)] * 5, max_files=2)
        [[0, 1], [2, 3], [4]]
    """
    if max_bytes <= 0 or max_files <= 0:
        raise ValueError(f"max_bytes and max_files must be positive, got {max_bytes}, "
                         f"{max_files}")
    out, cur, total = [], [], 0
    for i, (h, w) in enumerate(sizes):
        nbytes = 3 * int(h) * int(w)
        if cur and (len(cur) == max_files or total + nbytes > max_bytes):
            out.append(cur)
            cur, total = [], 0
        cur.append(i)
        total += nbytes
    if cur:
        out.append(cur)
    return out


def as_tensors(sources):
    """Each JPEG file as a 1-D uint8 CPU tensor over its bytes (no copy; read-only sources
    such as ``bytes`` are shared, never written), as ``torchvision.io.decode_jpeg`` takes
    them.

    Raises:
        TypeError: a source is not a buffer.
    """
    import warnings

    import torch

    out = []
    with warnings.catch_warnings():
        # torch warns that a read-only buffer gives a tensor it must not write: none does
        warnings.simplefilter("ignore", UserWarning)
        for src in sources:
            buf = _as_buffer(src)
            out.append(torch.frombuffer(buf, dtype=torch.uint8) if len(buf)
                       else torch.empty(0, dtype=torch.uint8))
    return out


def nvjpeg_decoder(device):
    """The default device decoder: ``torchvision.io.decode_jpeg(files, device=device,
    mode=RGB)``, nvJPEG's batched decode on a CUDA device (libjpeg-turbo on the CPU), one
    call at a time in the process."""
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg

    device = torch.device(device)

    def decode(files):
        with _NVJPEG:
            return decode_jpeg(files, mode=ImageReadMode.RGB, device=device)

    return decode


def decode_on_device(files, decoder):
    """Decode ``files`` with ``decoder`` in one call; if that raises, each file alone, so
    one bad file costs only itself.

    Args:
        files: 1-D uint8 CPU tensors (:func:`as_tensors`).
        decoder: ``decoder(list) -> list of images``.

    Returns:
        ``(images, batch_error)``: per file its image or the exception its own call raised;
        and the exception of the batched call (None when it worked).
    """
    if not files:
        return [], None
    try:
        images = list(decoder(files))
        if len(images) != len(files):
            raise RuntimeError(f"the device decoder returned {len(images)} images for "
                               f"{len(files)} files")
        return images, None
    except Exception as exc:  # a file the device refuses: find it, one call per file
        batch_error = exc
    out = []
    for f in files:
        try:
            got = list(decoder([f]))
            if len(got) != 1:
                raise RuntimeError(f"the device decoder returned {len(got)} images for 1 file")
            out.append(got[0])
        except Exception as exc:
            out.append(exc)
    return out, batch_error
