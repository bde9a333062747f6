"""turboloader's own Huffman decoder for sequential scans (jpeg_huffman.c) against
libjpeg-turbo's (the oracle, ``flags=STOCK_HUFFMAN``): the same pixels, warnings and errors on
every subsampling, restart interval (none: the ordinary file), Huffman table set, DCT scale
and window (jpeg_crop_scanline / jpeg_skip_scanlines), on the restart-interval window path and
the plain one; and on hostile data (misnumbered, missing, extra RST markers, bytes left over
or missing in an interval or before EOI, fill bytes, markers inside the data, bit flips,
truncation), where it hands the decode back to libjpeg's decoder."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from test_jpeg_restart import KINDS as RESTART_KINDS, encode, synth

from turboloader import DecodeError
from turboloader._native import _jpeg

STOCK = _jpeg.STOCK_HUFFMAN


# the restart-window tests' images (the file's seekable copies are made from them); a
# progressive source is transcoded to the same baseline scans as its sequential twin
KINDS = {k: v for k, v in RESTART_KINDS.items() if not k.startswith("progressive")}


def outcome(data, k=8, crop=None, restart=False, flags=0):
    """(pixels, n_warnings, first warning) of a decode, or (exception type, message)."""
    W, H = _jpeg.read_header(np.frombuffer(data, np.uint8))[:2]
    dw, dh = (W * k + 7) // 8, (H * k + 7) // 8
    x, y, w, h = crop or (0, 0, 0, 0)
    out = np.zeros((h or dh, w or dw, 3), np.uint8)
    try:
        warn = _jpeg.decode_into(np.frombuffer(data, np.uint8), out, scale_num=k, crop_x=x,
                                 crop_y=y, crop_w=w, crop_h=h, flags=flags, restart=restart)
    except (DecodeError, ValueError) as exc:
        return type(exc), str(exc)
    return out, warn


def assert_same(data, k=8, crop=None, restart=False, flags=0):
    ours = outcome(data, k, crop, restart, flags)
    stock = outcome(data, k, crop, restart, flags | STOCK)
    if isinstance(stock[0], np.ndarray):
        assert isinstance(ours[0], np.ndarray), ours
        np.testing.assert_array_equal(ours[0], stock[0])
        assert ours[1] == stock[1]
    else:
        assert ours == stock
    return stock


def windows(H, W, k):
    dw, dh = (W * k + 7) // 8, (H * k + 7) // 8
    return [None, (0, 0, min(40, dw), min(30, dh)), (dw // 3, dh // 4, dw // 3, dh // 2),
            (dw - min(25, dw), dh - min(20, dh), min(25, dw), min(20, dh)),
            (max(0, dw // 2 - 1), 0, 1, dh)]


@pytest.fixture(scope="module", params=[(kind, size, rst) for kind in KINDS
                                        for size in [(203, 317), (331, 517), (64, 48)]
                                        for rst in (None, 0, 1, 3, 5)],
                ids=lambda p: f"{p[0]}-{p[1][1]}x{p[1][0]}-rst{p[2]}")
def converted(request):
    # (64, 48) is below TL_HUFF_MIN_BLOCKS: libjpeg's decoder either way; the windows of the
    # larger sizes give sub-images above and below it
    kind, (h, w), rst = request.param
    kw, mode = KINDS[kind]
    orig = encode(synth(h, w), mode, **kw)
    if rst is None:       # the ordinary file, no restart markers
        return orig, h, w
    # rst 0: the automatic interval (what convert --seekable writes); 5: wraps rows
    return _jpeg.transcode_restart(orig, restart_mcus=rst)[0], h, w


@pytest.mark.parametrize("k", [8, 6, 4, 3, 2, 1])
def test_same_pixels_as_libjpeg_every_scale_and_window(converted, k):
    data, h, w = converted
    for crop in windows(h, w, k):
        for restart in (False, True):
            assert isinstance(assert_same(data, k, crop, restart)[0], np.ndarray)


def test_same_pixels_with_fast_dct_and_no_fancy_upsampling(converted):
    data, h, w = converted
    for flags in (_jpeg.FAST_DCT, _jpeg.NO_FANCY_UPSAMPLING, _jpeg.STRICT):
        for crop in windows(h, w, 8)[:3]:
            assert_same(data, 8, crop, True, flags)


def test_ordinary_files_take_turboloaders_decoder(converted):
    # the decoder really runs on the files above (else the oracle tests compare libjpeg with
    # itself): every sequential scan of >= 256 blocks, at every scale, unless switched off
    data, h, w = converted
    blocks = _jpeg.read_header(np.frombuffer(data, np.uint8))
    want = "libjpeg" if (h, w) == (64, 48) else "turboloader"
    for k in (8, 4, 1):
        assert _jpeg.huffman_decoder(data, scale_num=k) == want, blocks
    assert _jpeg.huffman_decoder(data, flags=STOCK) == "libjpeg"


def test_progressive_and_small_files_keep_libjpegs_decoder():
    big = synth(203, 317)
    assert _jpeg.huffman_decoder(encode(big, progressive=True)) == "libjpeg"
    assert _jpeg.huffman_decoder(encode(big[:32, :40])) == "libjpeg"
    with pytest.raises(DecodeError):
        _jpeg.huffman_decoder(b"\xff\xd8\xff\xe0 not a jpeg")


def _retable(data, shift=2):
    """The same file with its Huffman tables renumbered 0-1 -> 2-3 (DHT and SOS selectors):
    an extended sequential table set, which libjpeg accepts."""
    b = bytearray(data)
    i = 2
    while True:
        assert b[i] == 0xFF
        m, n = b[i + 1], int.from_bytes(b[i + 2:i + 4], "big")
        if m == 0xC4:
            j = i + 4
            while j < i + 2 + n:
                b[j] += shift                          # Tc << 4 | Th
                j += 17 + sum(b[j + 1:j + 17])
        if m == 0xDA:
            for c in range(b[i + 4]):
                b[i + 6 + 2 * c] += shift * 0x11       # Td << 4 | Ta
            return bytes(b)
        i += 2 + n


@pytest.mark.parametrize("kind", ["444", "420", "gray", "cmyk"])
def test_huffman_tables_2_and_3(kind):
    kw, mode = KINDS[kind]
    orig = encode(synth(203, 317), mode, **kw)
    for data in (_retable(orig), _retable(_jpeg.transcode_restart(orig, restart_mcus=3)[0])):
        assert _jpeg.huffman_decoder(data) == "turboloader"
        ref = outcome(orig, 8)[0]
        for k in (8, 3):
            for crop in windows(203, 317, k)[:3]:
                assert isinstance(assert_same(data, k, crop)[0], np.ndarray)
        np.testing.assert_array_equal(assert_same(data)[0], ref)


def test_unoptimized_tables_and_low_quality():
    # libjpeg's standard tables have long AC codes (the decoder's canonical path) and
    # quality 10 has long zero runs (ZRL) and large DC steps
    for q in (10, 50, 98):
        for opt in (False, True):
            orig = encode(synth(120, 150, seed=q), quality=q, subsampling=2, optimize=opt)
            data = _jpeg.transcode_restart(orig, restart_mcus=2, optimize=opt)[0]
            for k in (8, 2):
                assert isinstance(assert_same(data, k)[0], np.ndarray)
                assert isinstance(assert_same(orig, k)[0], np.ndarray)


@pytest.mark.parametrize("kind", ["444", "420", "gray"])
def test_two_symbols_per_lookup_at_the_blocks_end(kind):
    # fast_ac decodes two AC symbols per lookup; after a value at zig-zag position 62 a
    # pair's second symbol is still the block's, after one at 63 it is the next block's DC
    # code (the first alone, TL_FAST_PAIR's fallback). Noise at quality 100 puts values in
    # the last positions of most blocks; optimised tables (short codes) pair the most symbols
    # and an end of block after a value; quality 75 ends blocks early.
    kw, mode = KINDS[kind]
    noise = np.random.default_rng(7).integers(0, 256, (131, 197, 3), dtype=np.uint8)
    # (Pillow 13 cannot write optimised tables for noise above quality ~95: "Suspension not
    # allowed here"; the restart copies are written with optimised tables by the transcode)
    for arr, q, opt in ((noise, 100, False), (noise, 95, True), (synth(131, 197), 97, True),
                        (synth(131, 197), 75, True)):
        orig = encode(arr, mode, quality=q, optimize=opt, **kw)
        assert _jpeg.huffman_decoder(orig) == "turboloader"
        for data in (orig, _jpeg.transcode_restart(orig, restart_mcus=3, optimize=True)[0]):
            for k in (8, 4, 1):
                for crop in windows(131, 197, k)[:3]:
                    assert isinstance(assert_same(data, k, crop)[0], np.ndarray)


@pytest.mark.parametrize("kind", ["444", "422", "420", "gray", "cmyk"])
def test_mcus_outside_a_crop_window_decode_as_libjpeg(kind):
    # jpeg_crop_scanline's windows (libjpeg decodes every MCU of a row, runs the IDCT on the
    # window's iMCU columns only): every window offset and width near the iMCU boundaries,
    # every DCT scale's alignment, gives libjpeg's pixels
    kw, mode = KINDS[kind]
    data = encode(synth(121, 263, seed=3), mode, **kw)
    for k in (8, 5, 4, 2, 1):
        dw, dh = (263 * k + 7) // 8, (121 * k + 7) // 8
        for x in sorted({0, 1, 7, 8, 9, 15, 16, 17, 31, 33, dw // 2, dw - 9, dw - 2}):
            for w in (1, 9, 17, 40):
                if 0 <= x and x + w <= dw:
                    assert isinstance(assert_same(data, k, (x, dh // 5, w, dh // 2))[0],
                                      np.ndarray)


# -- hostile data: whatever libjpeg makes of it, so does the decode -------------------------


def _entropy_start(data):
    i = data.index(b"\xff\xda")
    return i + 2 + int.from_bytes(data[i + 2:i + 4], "big")


def _rsts(data):
    start = _entropy_start(data)
    return [i for i in range(start, len(data) - 1)
            if data[i] == 0xFF and 0xD0 <= data[i + 1] <= 0xD7]


@pytest.fixture(scope="module")
def seekable():
    orig = encode(synth(203, 317), subsampling=2)
    return _jpeg.transcode_restart(orig, restart_mcus=2)[0]


def hostile_cases(conv):
    rsts = _rsts(conv)
    assert len(rsts) > 40
    b = bytearray(conv)
    b[rsts[5] + 1] = 0xD0 + (b[rsts[5] + 1] - 0xD0 + 3) % 8
    yield "misnumbered", bytes(b)
    yield "missing", conv[:rsts[7]] + conv[rsts[7] + 2:]
    yield "one too many", conv[:rsts[9]] + b"\xff\xd3" + conv[rsts[9]:]
    yield "extra bytes before a marker", conv[:rsts[11]] + b"\x12\x34" + conv[rsts[11]:]
    yield "a byte short", conv[:rsts[13] - 1] + conv[rsts[13]:]
    yield "fill bytes before a marker", conv[:rsts[15]] + b"\xff\xff\xff" + conv[rsts[15]:]
    yield "empty interval", conv[:rsts[17] + 2] + conv[rsts[18]:]
    yield "garbage before EOI", conv[:-2] + b"\x00\x01\x02\xff\xd9"
    yield "RST before EOI", conv[:-2] + b"\xff\xd0\xff\xd9"
    yield "EOI early", conv[:rsts[20]] + b"\xff\xd9"
    yield "truncated", conv[:rsts[25] + 5]
    yield "no markers at all", conv[:_entropy_start(conv)] + bytes(
        v for i, v in enumerate(conv[_entropy_start(conv):], _entropy_start(conv))
        if not any(r <= i < r + 2 for r in rsts))
    big = bytearray(conv)
    big[rsts[3] + 4] = 0xFF                      # a marker-like byte inside an interval
    big[rsts[3] + 5] = 0xC4
    yield "DHT inside the data", bytes(big)


@pytest.mark.parametrize("flags", [0, _jpeg.STRICT], ids=["lenient", "strict"])
def test_hostile_restart_data_decodes_as_libjpeg_decodes_it(seekable, flags):
    crops = [None, (200, 120, 60, 50), (0, 0, 64, 64), (250, 150, 67, 53)]
    outcomes = set()
    for name, bad in hostile_cases(seekable):
        for crop in crops:
            for restart in (False, True):
                r = assert_same(bad, 8, crop, restart, flags)
                outcomes.add("pixels" if isinstance(r[0], np.ndarray) else r[0].__name__)
    # the cases reach both ends: decodes (with or without warnings) and errors
    assert "pixels" in outcomes and "DecodeError" in outcomes


@pytest.fixture(scope="module")
def ordinary():
    return encode(synth(203, 317), subsampling=2)


def ordinary_cases(orig):
    start = _entropy_start(orig)
    mid = (start + len(orig)) // 2
    while orig[mid - 1] == 0xFF or orig[mid] == 0xFF:
        mid += 1
    yield "garbage before EOI", orig[:-2] + b"\x00\x01\x02\xff\xd9"
    yield "one byte before EOI", orig[:-2] + b"\x5a\xff\xd9"
    yield "a byte short before EOI", orig[:-3] + b"\xff\xd9"
    yield "fill bytes before EOI", orig[:-2] + b"\xff\xff\xff\xd9"
    yield "RST before EOI", orig[:-2] + b"\xff\xd0\xff\xd9"
    yield "no EOI", orig[:-2]
    yield "EOI early", orig[:mid] + b"\xff\xd9"
    yield "RST inside the data", orig[:mid] + b"\xff\xd0" + orig[mid:]
    yield "DHT inside the data", orig[:mid] + b"\xff\xc4" + orig[mid:]
    yield "COM after the scan", orig[:-2] + b"\xff\xfe\x00\x04hi\xff\xd9"
    yield "second scan", orig[:-2] + orig[orig.index(b"\xff\xda"):]
    yield "stuffing dropped", orig[:start] + orig[start:].replace(b"\xff\x00", b"\xff", 1)
    yield "a byte dropped", orig[:mid] + orig[mid + 1:]
    yield "a byte doubled", orig[:mid] + orig[mid:mid + 1] + orig[mid:]
    for frac in (0.3, 0.9, 0.999):
        yield f"truncated at {frac}", orig[:start + int((len(orig) - start) * frac)]


@pytest.mark.parametrize("flags", [0, _jpeg.STRICT], ids=["lenient", "strict"])
def test_hostile_ordinary_data_decodes_as_libjpeg_decodes_it(ordinary, flags):
    crops = [None, (200, 120, 60, 50), (0, 0, 64, 64), (250, 150, 67, 53)]
    outcomes = set()
    for name, bad in ordinary_cases(ordinary):
        for crop in crops:
            for k in (8, 2):
                if k == 2 and crop is not None:
                    crop = (crop[0] // 4, crop[1] // 4, crop[2] // 4, crop[3] // 4)
                r = assert_same(bad, k, crop, False, flags)
                outcomes.add("pixels" if isinstance(r[0], np.ndarray) else r[0].__name__)
    assert "pixels" in outcomes and "DecodeError" in outcomes


@pytest.mark.parametrize("which", ["seekable", "ordinary"])
def test_bit_flips_decode_as_libjpeg_decodes_them(which, request):
    data = request.getfixturevalue(which)
    rng = np.random.default_rng(11)
    start = _entropy_start(data)
    for trial in range(80):
        b = bytearray(data)
        for _ in range(int(rng.integers(1, 4))):
            i = int(rng.integers(start, len(b) - 2))
            b[i] ^= 1 << int(rng.integers(0, 8))
        bad = bytes(b)
        crop = [None, (200, 120, 60, 50), (10, 150, 100, 40)][trial % 3]
        assert_same(bad, 8, crop, trial % 2 == 0, _jpeg.STRICT if trial % 4 == 1 else 0)


@pytest.mark.parametrize("which", ["seekable", "ordinary"])
def test_threads(which, request):
    data = request.getfixturevalue(which)
    ref = outcome(data, restart=False, flags=STOCK)[0]
    crops = [(x, y, 50, 40) for x in range(0, 260, 37) for y in range(0, 160, 41)]

    def one(crop):
        x, y, w, h = crop
        return np.array_equal(outcome(data, 8, crop, True)[0], ref[y:y + h, x:x + w])

    with ThreadPoolExecutor(4) as ex:
        assert all(ex.map(one, crops * 3))


# -- the scan's last restart intervals, and damage in the second interval of a pair ---------
# Decoding intervals two at a time (interval 2i + 1 alongside 2i, its blocks buffered) was
# tried and not kept (benchmarks/results/huffman-tuning.md); these cases are where such a
# decoder, or the per-interval one, can go wrong: the last interval alone (an odd count) or
# shorter than the others (DRI not dividing the MCU count), and damage in interval 2i + 1
# or in the marker before it.


def _intervals(data):
    return len(_rsts(data)) + 1


# (height, width, subsampling/kind, DRI): 4:2:0 320 x 208 is 20 x 13 = 260 MCUs
PAIR_ENDS = [
    ((208, 320), "420", 20, "13 whole-row intervals: the last one alone"),
    ((208, 320), "420", 4, "65 intervals: the last one alone"),
    ((208, 320), "420", 7, "38 intervals, the last (B of a pair) 1 MCU"),
    ((208, 320), "420", 6, "44 intervals, the last (B of a pair) 2 MCUs"),
    ((208, 320), "420", 9, "29 intervals: the last one alone and 8 MCUs"),
    ((203, 317), "444", 11, "odd size, 4:4:4"),
    ((203, 317), "422", 5, "odd size, 4:2:2, intervals wrapping rows"),
    ((97, 161), "gray", 13, "greyscale, one block an MCU"),
    ((97, 161), "cmyk", 3, "CMYK, four blocks an MCU"),
]


@pytest.fixture(scope="module", params=PAIR_ENDS, ids=lambda p: f"{p[1]}-rst{p[2]}")
def pair_ends(request):
    (h, w), kind, rst, _ = request.param
    kw, mode = KINDS[kind]
    data = _jpeg.transcode_restart(encode(synth(h, w, seed=rst), mode, **kw),
                                   restart_mcus=rst)[0]
    assert _jpeg.read_header(np.frombuffer(data, np.uint8))[:2] == (w, h)
    return data, h, w


def test_interval_pairs_at_the_scans_end_decode_as_libjpeg(pair_ends):
    data, h, w = pair_ends
    assert _intervals(data) > 2
    assert _jpeg.huffman_decoder(data) == "turboloader"
    for k in (8, 4, 1):
        for crop in windows(h, w, k):
            for restart in (False, True):
                assert_same(data, k, crop, restart)


def test_the_interval_counts_of_the_pair_cases():
    # the cases above really have an odd count, and a shorter last interval
    orig = encode(synth(208, 320), subsampling=2)
    counts = {rst: _intervals(_jpeg.transcode_restart(orig, restart_mcus=rst)[0])
              for rst in (20, 4, 7, 6, 9)}
    assert counts == {20: 13, 4: 65, 7: 38, 6: 44, 9: 29}


def pair_cases(conv):
    """Damage in interval B = 2i + 1 of a pair (A = 2i; _rsts(conv)[j] ends interval j), and
    in the marker between A and B."""
    rsts = _rsts(conv)
    assert len(rsts) > 30
    b = bytearray(conv)
    b[rsts[9] + 1] = 0xD0 + (b[rsts[9] + 1] - 0xD0 + 1) % 8
    yield "B's RST misnumbered", bytes(b)
    b = bytearray(conv)
    b[rsts[8] + 1] = 0xD0 + (b[rsts[8] + 1] - 0xD0 + 5) % 8
    yield "the RST between A and B misnumbered", bytes(b)
    yield "B's RST missing", conv[:rsts[11]] + conv[rsts[11] + 2:]
    yield "the RST between A and B missing", conv[:rsts[10]] + conv[rsts[10] + 2:]
    mid = (rsts[12] + rsts[13]) // 2
    yield "a DHT marker inside B", conv[:mid] + b"\xff\xc4" + conv[mid:]
    yield "EOI inside B", conv[:mid] + b"\xff\xd9" + conv[mid:]
    yield "RST inside B", conv[:mid] + bytes([0xFF, 0xD0 + 6]) + conv[mid:]
    yield "B a byte short", conv[:rsts[15] - 1] + conv[rsts[15]:]
    yield "B a byte long", conv[:rsts[15]] + b"\x5a" + conv[rsts[15]:]
    yield "truncated inside B", conv[:mid]
    yield "truncated inside B, EOI appended", conv[:mid] + b"\xff\xd9"
    yield "the last B empty", conv[:rsts[-1] + 2] + b"\xff\xd9"
    b = bytearray(conv)
    for i in range(rsts[12] + 3, rsts[13] - 2, 3):
        b[i] ^= 0x5A                             # B's data garbled (codes that match nothing)
    yield "B garbled", bytes(b)


@pytest.mark.parametrize("flags", [0, _jpeg.STRICT], ids=["lenient", "strict"])
def test_damage_in_the_second_interval_of_a_pair_decodes_as_libjpeg(seekable, flags):
    crops = [None, (200, 120, 60, 50), (0, 0, 64, 64), (100, 20, 90, 30)]
    outcomes = set()
    for name, bad in pair_cases(seekable):
        for crop in crops:
            for restart in (False, True):
                r = assert_same(bad, 8, crop, restart, flags)
                outcomes.add("pixels" if isinstance(r[0], np.ndarray) else r[0].__name__)
        for k in (4, 1):
            assert_same(bad, k, None, False, flags)
    assert "pixels" in outcomes and "DecodeError" in outcomes


def _cpu_has_bmi2():
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and "bmi2" in line.split() for line in f)
    except OSError:
        return None


def test_each_build_of_the_decoder_decodes_as_libjpeg(level):
    # the decoder's builds: plain x86-64 below the avx2 dispatch level, BMI2 at it where the
    # CPU has BMI2 (the same C body): every subsampling, ordinary and restart files, a whole
    # decode, windows and a reduced scale, each as libjpeg's decoder
    bmi2 = _jpeg.huffman_decoder(encode(synth(203, 317)), build=True) == "turboloader-bmi2"
    if level != "avx2":
        assert not bmi2
    elif _cpu_has_bmi2() is not None:
        assert bmi2 == _cpu_has_bmi2()
    # a caller's flag bit never asks for BMI2 (the level alone decides)
    assert (_jpeg.huffman_decoder(encode(synth(203, 317)), flags=16, build=True)
            == ("turboloader-bmi2" if bmi2 else "turboloader"))
    for kind, (kw, mode) in KINDS.items():
        orig = encode(synth(203, 317), mode, **kw)
        for data in (orig, _jpeg.transcode_restart(orig)[0],
                     _jpeg.transcode_restart(orig, restart_mcus=1)[0]):
            assert _jpeg.huffman_decoder(data) == "turboloader"
            for k in (8, 3):
                for crop in windows(203, 317, k)[:4]:
                    for restart in (False, True):
                        assert isinstance(assert_same(data, k, crop, restart)[0], np.ndarray)


# -- each thread's cache of built tables -----------------------------------------------------
# jpeg_huffman.c keeps the tables it built per thread, keyed by the bytes they are built from
# (a DHT table's code counts and symbols): the next file with the same bytes reuses them.


def _ac_tables(data):
    """[(offset of its symbols, code counts by length 1-16, symbols)] of data's AC tables."""
    out, i = [], 2
    while True:
        m, n = data[i + 1], int.from_bytes(data[i + 2:i + 4], "big")
        if m == 0xDA:
            return out
        if m == 0xC4:
            j = i + 4
            while j < i + 2 + n:
                counts = list(data[j + 1:j + 17])
                if data[j] >> 4 == 1:
                    out.append((j + 17, counts, list(data[j + 17:j + 17 + sum(counts)])))
                j += 17 + sum(counts)
        i += 2 + n


def _swapped_runs(data):
    """data with two symbols of its first AC table swapped: two codes of the same length whose
    values have the same size and different runs. The scan parses the same way (the same code
    and value bits), its coefficients land elsewhere (another picture), and the table's code
    counts are unchanged: only its symbols tell the two files apart."""
    at, counts, syms = _ac_tables(data)[0]
    k = 0
    for n in counts:
        group = range(k, k + n)
        for a in group:
            for b in group:
                if a < b and syms[a] & 15 and syms[a] & 15 == syms[b] & 15 and syms[a] != syms[b]:
                    out = bytearray(data)
                    out[at + a], out[at + b] = syms[b], syms[a]
                    return bytes(out)
        k += n
    raise AssertionError("no two same-length codes of values of one size")


def test_a_cached_table_serves_only_the_same_table_bytes():
    orig = encode(synth(203, 317), quality=90)
    other = _swapped_runs(orig)
    assert _ac_tables(other)[0][1] == _ac_tables(orig)[0][1]    # the same code counts
    a, b = outcome(orig)[0], outcome(other)[0]
    assert not np.array_equal(a, b)        # another picture: a table taken for the other's
    for _ in range(3):                     # would give the first file's pixels
        for data in (orig, other, other, orig):
            for crop, restart in ((None, False), ((40, 30, 120, 90), True)):
                assert isinstance(assert_same(data, 8, crop, restart)[0], np.ndarray)


def test_more_tables_than_a_thread_keeps_decode_as_libjpeg():
    # five files of optimised tables of their own (20 tables; a thread keeps 8), ordinary and
    # restart copies, in turn and twice in a row, on one thread and on three at once
    files = []
    for seed in range(5):
        orig = encode(synth(203, 317, seed=seed), quality=80 + 3 * seed, optimize=True)
        files += [orig, _jpeg.transcode_restart(orig)[0]]
    assert len({bytes(t[2]) for f in files for t in _ac_tables(f)}) >= 5
    ref = [outcome(f, flags=STOCK) for f in files]

    def run(order):
        for i in order:
            got = outcome(files[i])
            np.testing.assert_array_equal(got[0], ref[i][0])
            assert got[1] == ref[i][1]
        return True

    order = [i for r in range(2) for i in range(len(files))] + [3, 3, 0, 0, 7, 1, 7]
    assert run(order)
    with ThreadPoolExecutor(3) as ex:
        assert all(ex.map(run, [order, order[::-1], order[3:] + order[:3]] * 2))


# -- the switch -----------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["seekable", "ordinary"])
def test_environment_switch_selects_libjpegs_decoder_with_the_same_pixels(which, request,
                                                                          monkeypatch):
    import os
    import subprocess
    import sys

    import turboloader.decode.jpeg as tl_jpeg
    from turboloader.decode import decode_resized_crop

    code = "import turboloader.decode.jpeg as j; print(j._flags(), j._flags(True))"
    for value, want in (("1", STOCK), ("0", 0), ("", 0)):
        env = dict(os.environ, TURBOLOADER_STOCK_HUFFMAN=value)
        got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True).stdout.split()
        assert got == [str(want), str(want | _jpeg.STRICT)]
    data = request.getfixturevalue(which)
    ours = decode_resized_crop(data, 30, 200, 100, 90, 64)
    monkeypatch.setattr(tl_jpeg, "_STOCK_HUFFMAN", True)
    assert tl_jpeg._flags() == STOCK
    np.testing.assert_array_equal(decode_resized_crop(data, 30, 200, 100, 90, 64), ours)
