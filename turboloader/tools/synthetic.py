"""Photograph-like JPEGs generated on the spot, for the demo and for tests.

Natural photographs have a power spectrum falling off roughly as 1/f^2 and
correlated colour channels; JPEGs of such images compress, and therefore decode,
like real ones. No file is downloaded and the output depends only on the seed.
"""

import io

import numpy as np

__all__ = ["synthetic_jpegs", "synthetic_image"]


def synthetic_image(rng, height, width):
    """Return a photograph-like (height, width, 3) uint8 image drawn from ``rng``.

    Args:
        rng: a ``numpy.random.Generator``.
        height, width: the image size in pixels.
    """
    fy = np.fft.fftfreq(height)[:, None]
    fx = np.fft.rfftfreq(width)[None, :]
    freq = np.hypot(fy, fx)
    freq[0, 0] = 1.0
    amplitude = freq ** -rng.uniform(0.8, 1.2)
    amplitude[0, 0] = 0.0
    channels = []
    for _ in range(3):
        phase = rng.uniform(0, 2 * np.pi, amplitude.shape)
        field = np.fft.irfft2(amplitude * np.exp(1j * phase), s=(height, width))
        channels.append(field / (field.std() + 1e-12))
    mix = rng.normal(0.0, 0.25, (3, 3)) + 1.2 * np.eye(3) + 0.6  # correlated colour channels
    img = np.tensordot(np.stack(channels, -1), mix, axes=([2], [1]))
    img = 128 + 22 * img + rng.uniform(-30, 30, 3)
    yy, xx = np.mgrid[0:height, 0:width]
    for _ in range(int(rng.integers(2, 6))):  # a few hard-edged objects
        cy, cx = rng.uniform(0, height), rng.uniform(0, width)
        ry, rx = rng.uniform(0.05, 0.3) * height, rng.uniform(0.05, 0.3) * width
        inside = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 < 1
        shade = 1 + 0.15 * np.sin(xx[inside] / rng.uniform(2, 12))
        img[inside] = rng.uniform(20, 235, 3) * shade[:, None]
    img += rng.normal(0, 4, img.shape)  # sensor noise
    return np.clip(img, 0, 255).astype(np.uint8)


def synthetic_jpegs(n, *, seed=0, short_side=(250, 500), quality=(75, 95), num_classes=10):
    """Return ``n`` ``(jpeg_bytes, label)`` pairs of photograph-like JPEGs.

    Sizes follow ImageNet's: short side uniform in ``short_side``, aspect ratio
    between 3:4 and 16:9 either way, JPEG quality uniform in ``quality``, 4:2:0.

    Example:
        >>> samples = synthetic_jpegs(4, seed=1)
        >>> len(samples), samples[0][0][:2]
        (4, b'\\xff\\xd8')
    """
    from PIL import Image

    rng = np.random.default_rng(seed)
    # Textures are the costly part (~0.1 s each at 704 px): draw a pool and cut varied
    # images from it, no larger than the longest side asked for can need (704 px, as
    # always, for ImageNet's sizes: the same images as before for those)
    longest = min(int(round(short_side[1] * 16 / 9)) + 1, 700)
    side = 704 if longest >= 700 else longest
    pool = [synthetic_image(rng, side, side) for _ in range(min(n, 12))]
    out = []
    for i in range(n):
        short = int(rng.integers(short_side[0], short_side[1] + 1))
        aspect = float(np.exp(rng.uniform(np.log(3 / 4), np.log(16 / 9))))
        long_ = min(int(round(short * max(aspect, 1 / aspect))), 700)
        h, w = (short, long_) if rng.random() < 0.7 else (long_, short)
        src = pool[i % len(pool)]
        y, x = int(rng.integers(0, src.shape[0] - h + 1)), int(rng.integers(0, src.shape[1] - w + 1))
        tile = src[y:y + h, x:x + w]
        if rng.random() < 0.5:
            tile = tile[:, ::-1]
        buf = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(tile)).save(
            buf, "JPEG", quality=int(rng.integers(quality[0], quality[1] + 1)), subsampling=2)
        out.append((buf.getvalue(), int(rng.integers(0, num_classes))))
    return out
