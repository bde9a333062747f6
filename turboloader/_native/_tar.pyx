"""TAR indexing: one nogil pass over an in-memory archive (usually an ``mmap``).

The kernel ``_tar_scan`` fills caller-provided arrays (data offsets, sizes, and name
spans into a bytes arena) and returns a status code; ``index_tar`` owns the buffers,
grows them when the kernel reports them full, and turns error codes into
:class:`~turboloader.errors.TarFormatError`.

Semantics follow the standard library's ``tarfile`` (the test oracle), with these
deliberate differences, all of them stricter:

* ``tarfile`` silently stops at a bad header found after the first member (bad checksum,
  unparsable number, partial header block); we raise, naming the header's byte offset.
* A PAX ``size`` record that is not an integer makes ``tarfile`` use 0; we raise.
* GNU sparse members (type ``S`` or PAX ``GNU.sparse.*`` records) raise instead of
  being expanded: their stored bytes are not the member's contents.
* Only the checksum and size fields are parsed; ``tarfile`` also rejects (by stopping)
  headers whose mode/uid/gid/mtime/dev fields are not numbers, which we ignore.
* PAX global headers (type ``g``) are skipped: their records are not applied to
  the following members (``tarfile`` would apply e.g. a global ``path``).
"""

from libc.errno cimport EINTR, errno
from libc.stdint cimport INT32_MAX, INT64_MAX, int32_t, int64_t, uint8_t
from libc.string cimport memchr, memcmp, memcpy
from posix.types cimport off_t
from posix.unistd cimport pread

import numpy as np

from turboloader.errors import TarFormatError

__all__ = ["DONE", "FULL", "MORE", "TRUNCATED", "error_message", "group_samples", "index_tar",
           "pread_many", "pread_rows", "scan_pass"]


cdef enum:
    BLOCK = 512


cdef enum TarStatus:
    TAR_DONE = 0               # end-of-archive block or EOF at a block boundary
    TAR_FULL = 1               # an output array or the arena is full; resume at st.pos
    TAR_ERR_EMPTY = 2
    TAR_ERR_PARTIAL_HEADER = 3
    TAR_ERR_CHECKSUM = 4
    TAR_ERR_BAD_SIZE = 5       # size field is not a number
    TAR_ERR_SIZE_RANGE = 6     # negative size, or over INT64_MAX
    TAR_ERR_TRUNCATED = 7      # (padded) data runs past the end of the buffer
    TAR_ERR_SPARSE = 8
    TAR_ERR_DANGLING = 9       # an extended header (L/K/x/g) not followed by a member
    TAR_ERR_PAX = 10           # malformed PAX record (zero length, non-integer size)
    TAR_ERR_NAME_TOO_LONG = 11
    TAR_ERR_BAD_ARGS = 12
    TAR_MORE = 13              # partial scan: the buffer ends inside a header or member;
                               # resume at st.pos with at least st.err_value bytes from there


cdef struct TarScan:
    int64_t pos          # in: a header boundary to start at; out: resume point (FULL) or end (DONE)
    int64_t count        # in/out: members already written to the output arrays
    int64_t arena_used   # in/out: bytes of the name arena in use
    int64_t err_offset   # out: byte offset of the offending header
    int64_t err_value    # out: size involved (TRUNCATED, MORE), bytes of the name that did not fit (FULL)
    bint partial         # in: the buffer is a prefix of the archive (a stream read so far)


cdef inline bint _is_space(uint8_t c) noexcept nogil:
    # ASCII characters str.strip() removes
    return c == 32 or (9 <= c <= 13) or (28 <= c <= 31)


cdef inline int64_t _nts_len(const uint8_t* f, int64_t width) noexcept nogil:
    # tarfile.nts: a field ends at its first NUL
    cdef const uint8_t* z = <const uint8_t*>memchr(f, 0, <size_t>width)
    return width if z == NULL else z - f


cdef int _parse_number(const uint8_t* f, int width, int64_t* out) noexcept nogil:
    """tarfile.nti: 0 ok, 1 not a number, 2 negative or over INT64_MAX."""
    cdef int64_t n = 0
    cdef int i, end, digits = 0
    cdef bint neg = False
    if f[0] == 0x80:           # base-256, positive
        for i in range(1, width):
            if n > (INT64_MAX >> 8):
                return 2
            n = (n << 8) | f[i]
        out[0] = n
        return 0
    if f[0] == 0xff:           # base-256, negative
        return 2
    # octal text up to the first NUL, as int(s.strip() or "0", 8)
    end = <int>_nts_len(f, width)
    i = 0
    while i < end and _is_space(f[i]):
        i += 1
    while end > i and _is_space(f[end - 1]):
        end -= 1
    if i == end:
        out[0] = 0
        return 0
    if f[i] == b'+' or f[i] == b'-':
        neg = f[i] == b'-'
        i += 1
    if i + 1 < end and f[i] == b'0' and (f[i + 1] == b'o' or f[i + 1] == b'O'):
        i += 2
    while i < end:
        if f[i] < b'0' or f[i] > b'7':
            return 1
        if n > (INT64_MAX >> 3):
            return 2
        n = (n << 3) | (f[i] - 48)  # '0'
        digits += 1
        i += 1
    if digits == 0:
        return 1
    if neg and n != 0:
        return 2
    out[0] = n
    return 0


cdef int _parse_decimal(const uint8_t* f, int64_t length, int64_t* out) noexcept nogil:
    """int(value) for a PAX size record: 0 ok, 1 not an integer, 2 negative or too big."""
    cdef int64_t i = 0, end = length, n = 0, digits = 0
    cdef bint neg = False
    while i < end and _is_space(f[i]):
        i += 1
    while end > i and _is_space(f[end - 1]):
        end -= 1
    if i < end and (f[i] == b'+' or f[i] == b'-'):
        neg = f[i] == b'-'
        i += 1
    while i < end:
        if f[i] < b'0' or f[i] > b'9':
            return 1
        if n > (INT64_MAX - 9) // 10:
            return 2
        n = n * 10 + (f[i] - 48)  # '0'
        digits += 1
        i += 1
    if digits == 0:
        return 1
    if neg and n != 0:
        return 2
    out[0] = n
    return 0


cdef int _parse_pax(const uint8_t* p, int64_t length, int64_t* path_off, int64_t* path_len,
                    bint* has_path, int64_t* size, bint* has_size) noexcept nogil:
    """Scan PAX records "%d %s=%s\\n" in p[:length] (the padded data blocks, as tarfile reads).

    Keeps the last ``path`` and ``size`` record. Returns 0 or a TarStatus error.
    Mirrors tarfile's regex ``(\\d+) ([^=]+)=``: parsing stops silently where it fails to match.
    """
    cdef int64_t pos = 0, q, k, e, rec, vstart, vend
    cdef int rc
    while pos < length:
        q = pos
        rec = 0
        while q < length and b'0' <= p[q] <= b'9':
            if rec < (<int64_t>1 << 56):   # saturate: any larger length ends the scan anyway
                rec = rec * 10 + (p[q] - 48)  # '0'
            q += 1
        if q == pos or q >= length or p[q] != b' ':
            break
        k = q + 1
        e = k
        while e < length and p[e] != b'=':
            e += 1
        if e == k or e >= length:
            break
        if rec == 0:
            return TAR_ERR_PAX
        vstart = e + 1
        vend = pos + rec - 1
        if vend > length:
            vend = length
        if vend < vstart:
            vend = vstart
        if e - k == 4 and p[k] == b'p' and p[k + 1] == b'a' and p[k + 2] == b't' and p[k + 3] == b'h':
            while vend > vstart and p[vend - 1] == b'/':   # tarfile: value.rstrip("/")
                vend -= 1
            path_off[0] = vstart
            path_len[0] = vend - vstart
            has_path[0] = True
        elif e - k == 4 and p[k] == b's' and p[k + 1] == b'i' and p[k + 2] == b'z' and p[k + 3] == b'e':
            rc = _parse_decimal(p + vstart, vend - vstart, size)
            if rc == 1:
                return TAR_ERR_PAX
            if rc == 2:
                return TAR_ERR_SIZE_RANGE
            has_size[0] = True
        elif e - k >= 11 and p[k] == b'G' and p[k + 1] == b'N' and p[k + 2] == b'U' and p[k + 3] == b'.' and \
                p[k + 4] == b's' and p[k + 5] == b'p' and p[k + 6] == b'a' and p[k + 7] == b'r' and \
                p[k + 8] == b's' and p[k + 9] == b'e' and p[k + 10] == b'.':
            return TAR_ERR_SPARSE
        pos += rec
    return 0


cdef inline int _more(TarScan* st, int64_t resume, int64_t at, int64_t size, int64_t count,
                      int64_t used) noexcept nogil:
    """A partial scan stops: the members before ``resume`` (a header boundary) are written;
    the caller reads on and scans again from ``resume``, which needs at least
    ``err_offset`` bytes plus ``err_value`` rounded up to whole blocks."""
    st.pos = resume
    st.count = count
    st.arena_used = used
    st.err_offset = at - resume
    st.err_value = size
    return TAR_MORE


cdef int _tar_scan(const uint8_t[::1] buf, int64_t[::1] offsets, int64_t[::1] sizes,
                   int64_t[::1] name_start, int32_t[::1] name_len, uint8_t[::1] arena,
                   TarScan* st) noexcept nogil:
    """Index regular members from st.pos on into the output arrays; returns a TarStatus."""
    # Runs without the GIL. All five outputs are caller-owned and C-contiguous; the kernel
    # writes at most min(len(outputs)) entries and len(arena) name bytes, and re-checks
    # st's in/out fields against them before touching memory.
    cdef int64_t n = buf.shape[0]
    cdef int64_t cap = offsets.shape[0]
    cdef int64_t arena_cap = arena.shape[0]
    cdef int64_t pos = st.pos, count = st.count, used = st.arena_used
    cdef const uint8_t* b
    cdef const uint8_t* h
    cdef int64_t usum, ssum, chk, size, data, padded, nl, pl, ln
    cdef int i, rc
    cdef uint8_t typ
    cdef bint regular, skip, is_dir
    # pending state from extended headers (L/K/x/X/g) that precede the next member;
    # the first extended header to set a field wins, as in tarfile's recursion
    cdef int64_t ext_start = -1
    cdef bint have_name = False, have_size = False
    cdef int64_t xname_off = 0, xname_len = 0, xsize = 0
    cdef bint has_path, has_psize
    cdef int64_t path_off, path_len, psize

    if sizes.shape[0] < cap:
        cap = sizes.shape[0]
    if name_start.shape[0] < cap:
        cap = name_start.shape[0]
    if name_len.shape[0] < cap:
        cap = name_len.shape[0]
    st.err_offset = 0
    st.err_value = 0
    if n == 0:
        if st.partial:
            return _more(st, 0, 0, BLOCK, count, used)
        return TAR_ERR_EMPTY
    if pos < 0 or pos > n or pos % BLOCK or count < 0 or count > cap or used < 0 or used > arena_cap:
        return TAR_ERR_BAD_ARGS
    b = &buf[0]

    while True:
        if pos == n or n - pos < BLOCK:
            if st.partial:
                return _more(st, ext_start if ext_start >= 0 else pos, pos, BLOCK, count, used)
            if pos != n:
                st.err_offset = pos
                return TAR_ERR_PARTIAL_HEADER
            if ext_start >= 0:
                st.err_offset = ext_start
                return TAR_ERR_DANGLING
            break
        h = b + pos
        usum = 0
        ssum = 0
        for i in range(BLOCK):
            usum += h[i]
            ssum += <signed char>h[i]
        if usum == 0:                       # end-of-archive block
            if ext_start >= 0:
                st.err_offset = ext_start
                return TAR_ERR_DANGLING
            break
        # the checksum field counts as eight spaces
        for i in range(148, 156):
            usum -= h[i]
            ssum -= <signed char>h[i]
        usum += 256
        ssum += 256
        if _parse_number(h + 148, 8, &chk) != 0 or (chk != usum and chk != ssum):
            st.err_offset = pos
            return TAR_ERR_CHECKSUM
        rc = _parse_number(h + 124, 12, &size)
        if rc != 0:
            st.err_offset = pos
            return TAR_ERR_BAD_SIZE if rc == 1 else TAR_ERR_SIZE_RANGE
        typ = h[156]
        data = pos + BLOCK

        if typ == b'L' or typ == b'K' or typ == b'x' or typ == b'X' or typ == b'g':
            if size > n - data:
                if st.partial:
                    return _more(st, ext_start if ext_start >= 0 else pos, data, size, count, used)
                st.err_offset = pos
                st.err_value = size
                return TAR_ERR_TRUNCATED
            padded = (size + (BLOCK - 1)) & ~(<int64_t>(BLOCK - 1))
            if padded > n - data:
                if st.partial:
                    return _more(st, ext_start if ext_start >= 0 else pos, data, size, count, used)
                st.err_offset = pos
                st.err_value = size
                return TAR_ERR_TRUNCATED
            if ext_start < 0:
                ext_start = pos
            if typ == b'L' and not have_name:
                # tarfile: nts() over the padded data blocks
                xname_off = data
                xname_len = _nts_len(b + data, padded)
                have_name = True
            elif typ == b'x' or typ == b'X':
                has_path = False
                has_psize = False
                rc = _parse_pax(b + data, padded, &path_off, &path_len, &has_path, &psize, &has_psize)
                if rc != 0:
                    st.err_offset = pos
                    return rc
                if has_path and not have_name:
                    xname_off = data + path_off
                    xname_len = path_len
                    have_name = True
                if has_psize and not have_size:
                    xsize = psize
                    have_size = True
            pos = data + padded
            continue

        if typ == b'S':
            st.err_offset = pos
            return TAR_ERR_SPARSE
        if have_size:
            size = xsize
        nl = _nts_len(h, 100)
        # V7 tar marks a directory as an old-style regular file whose name ends in "/"
        is_dir = typ == b'5' or (typ == 0 and nl > 0 and h[nl - 1] == b'/')
        regular = not is_dir and (typ == b'0' or typ == 0 or typ == b'7')
        # tarfile skips data only for regular files and unknown types, not links/dirs/devices
        skip = regular or not (b'0' <= typ <= b'7' or typ == 0)
        padded = 0
        if skip:
            if size > n - data:
                if st.partial:
                    return _more(st, ext_start if ext_start >= 0 else pos, data, size, count, used)
                st.err_offset = pos
                st.err_value = size
                return TAR_ERR_TRUNCATED
            padded = (size + (BLOCK - 1)) & ~(<int64_t>(BLOCK - 1))
            if padded > n - data:
                if st.partial:
                    return _more(st, ext_start if ext_start >= 0 else pos, data, size, count, used)
                st.err_offset = pos
                st.err_value = size
                return TAR_ERR_TRUNCATED
        if regular:
            pl = 0
            if have_name:
                ln = xname_len
            else:
                pl = _nts_len(h + 345, 155)
                ln = nl + (pl + 1 if pl else 0)
            if ln > INT32_MAX:
                st.err_offset = pos
                return TAR_ERR_NAME_TOO_LONG
            if count >= cap or ln > arena_cap - used:
                # resume before any pending extended header so it is re-read
                st.pos = ext_start if ext_start >= 0 else pos
                st.count = count
                st.arena_used = used
                st.err_value = ln
                return TAR_FULL
            if have_name:
                memcpy(&arena[used], b + xname_off, <size_t>ln)
            elif pl:
                memcpy(&arena[used], h + 345, <size_t>pl)
                arena[used + pl] = 47  # '/'
                memcpy(&arena[used + pl + 1], h, <size_t>nl)
            elif nl:
                memcpy(&arena[used], h, <size_t>nl)
            offsets[count] = data
            sizes[count] = size
            name_start[count] = used
            name_len[count] = <int32_t>ln
            used += ln
            count += 1
        ext_start = -1
        have_name = False
        have_size = False
        pos = data + padded

    st.pos = pos
    st.count = count
    st.arena_used = used
    return TAR_DONE


cdef str _error_message(int status, int64_t off, int64_t value, int64_t n):
    if status == TAR_ERR_EMPTY:
        return "empty buffer (0 bytes) is not a TAR archive"
    if status == TAR_ERR_PARTIAL_HEADER:
        return (f"truncated header block at byte offset {off}: "
                f"{n - off} of {BLOCK} bytes before the end of the archive")
    if status == TAR_ERR_CHECKSUM:
        return f"bad header checksum at byte offset {off}"
    if status == TAR_ERR_BAD_SIZE:
        return f"size field is not a number in header at byte offset {off}"
    if status == TAR_ERR_SIZE_RANGE:
        return f"size is negative or too large in header at byte offset {off}"
    if status == TAR_ERR_TRUNCATED:
        return (f"truncated member: header at byte offset {off} declares {value} "
                f"data bytes (padded to {BLOCK}-byte blocks) but the archive ends "
                f"{n - off - BLOCK} bytes after the header")
    if status == TAR_ERR_SPARSE:
        return f"unsupported GNU sparse member at byte offset {off}"
    if status == TAR_ERR_DANGLING:
        return f"extended header at byte offset {off} is not followed by a member"
    if status == TAR_ERR_PAX:
        return f"malformed PAX extended header at byte offset {off}"
    if status == TAR_ERR_NAME_TOO_LONG:
        return f"member name over 2 GiB in header at byte offset {off}"
    return f"internal error: TAR scan status {status} at byte offset {off}"


def _scan_pass(const uint8_t[::1] buf not None, int64_t[::1] offsets not None,
               int64_t[::1] sizes not None, int64_t[::1] name_start not None,
               int32_t[::1] name_len not None, uint8_t[::1] arena not None, /,
               int64_t pos=0, int64_t count=0, int64_t arena_used=0, bint partial=False):
    """One kernel pass into caller-owned arrays (index_tar and io.tar's stream scanner drive
    it; tests call it).

    Returns ``(status, pos, count, arena_used, err_offset, err_value)``; see ``TarScan``.
    ``partial``: ``buf`` is the start of an archive still being read; a header or member
    that runs past its end stops the pass with ``MORE`` instead of an error.
    """
    cdef TarScan st
    cdef int status
    st.pos = pos
    st.count = count
    st.arena_used = arena_used
    st.partial = partial
    with nogil:
        status = _tar_scan(buf, offsets, sizes, name_start, name_len, arena, &st)
    return status, st.pos, st.count, st.arena_used, st.err_offset, st.err_value


_DONE = TAR_DONE
_FULL = TAR_FULL

#: statuses of :func:`scan_pass` (public names of the kernel's results)
DONE, FULL, MORE, TRUNCATED = TAR_DONE, TAR_FULL, TAR_MORE, TAR_ERR_TRUNCATED
scan_pass = _scan_pass


def error_message(int status, int64_t offset, int64_t value, int64_t n, /):
    """The text of a :func:`scan_pass` error status (``offset``: the header's byte
    offset, ``value``: the pass's ``err_value``, ``n``: bytes of archive scanned)."""
    return _error_message(status, offset, value, n)


cdef bint _pread_whole(int fd, uint8_t* out, int64_t size, int64_t start) noexcept nogil:
    # size bytes at start of fd into out; False at a short read (end of file) or an error
    cdef int64_t done = 0
    cdef ssize_t got
    while done < size:
        got = pread(fd, out + done, <size_t>(size - done), <off_t>(start + done))
        if got < 0 and errno == EINTR:
            continue
        if got <= 0:
            return False
        done += got
    return True


def pread_many(int fd, const int64_t[::1] starts not None, const int64_t[::1] sizes not None,
               uint8_t[::1] out not None, /):
    """Read ``sizes[k]`` bytes at byte ``starts[k]`` of the open file ``fd``, for every k,
    back to back into ``out``, in one call without the GIL (a batch's images: one ``pread``
    each, no per-read Python).

    Returns:
        How many extents were read whole, in order: ``len(starts)``, or the position of the
        first that the file ended (or failed) before.

    Raises:
        ValueError: ``starts`` and ``sizes`` differ in length, a negative entry, or ``out``
            smaller than the sum of ``sizes``.
    """
    if fd < 0:
        raise ValueError(f"negative file descriptor {fd}")
    return pread_rows(np.full(starts.shape[0], fd, np.int32), starts, sizes, out)


def pread_rows(const int32_t[::1] fds not None, const int64_t[::1] starts not None,
               const int64_t[::1] sizes not None, uint8_t[::1] out not None, /):
    """Read ``sizes[k]`` bytes at byte ``starts[k]`` of the open file ``fds[k]``, for every
    k, back to back into ``out``, in one call without the GIL: :func:`pread_many` over
    several files (a chunk's images from every shard it spans, in the chunk's order).

    Returns:
        How many extents were read whole, in order: ``len(starts)``, or the position of the
        first that its file ended (or failed) before.

    Raises:
        ValueError: ``fds``, ``starts`` and ``sizes`` differ in length, a negative entry,
            or ``out`` smaller than the sum of ``sizes``.
    """
    cdef Py_ssize_t n = starts.shape[0], k, got
    cdef int64_t total = 0
    if sizes.shape[0] != n or fds.shape[0] != n:
        raise ValueError(f"starts has {n} entries, sizes {sizes.shape[0]}, fds {fds.shape[0]}")
    for k in range(n):
        if starts[k] < 0 or sizes[k] < 0 or fds[k] < 0:
            raise ValueError(f"extent {k}: negative file, start or size")
        total += sizes[k]
    if total > out.shape[0]:
        raise ValueError(f"out holds {out.shape[0]} bytes, the extents need {total}")
    if n == 0 or total == 0:
        return n
    with nogil:
        got = _pread_rows(fds, starts, sizes, &out[0])
    return got


cdef Py_ssize_t _pread_rows(const int32_t[::1] fds, const int64_t[::1] starts,
                            const int64_t[::1] sizes, uint8_t* out) noexcept nogil:
    # the extents read whole, in order; stops at the first short read or error
    cdef Py_ssize_t k, n = starts.shape[0]
    cdef int64_t at = 0
    for k in range(n):
        if not _pread_whole(fds[k], out + at, sizes[k], starts[k]):
            return k
        at += sizes[k]
    return n


def index_tar(const uint8_t[::1] buf not None, /, *, capacity=None, with_end=False):
    """Index the regular members of an in-memory TAR archive.

    One pass, without the GIL, over ``buf`` (bytes, bytearray, a read-only ``mmap``, any
    C-contiguous byte buffer). Regular members are types ``0``, ``\\0`` and ``7``;
    directories, links, devices and FIFOs are skipped. ustar ``prefix``, GNU ``L`` long
    names and PAX ``path``/``size`` records are applied.

    Args:
        buf: the whole archive.
        capacity: initial number of member slots, a hint (the arrays double as needed);
            by default one per 8 KiB of archive, plus 64.
        with_end: also return where the scan stopped: the offset of the end-of-archive
            (zero) block, or ``len(buf)`` when the archive ends without one (cut at a
            member boundary).

    Returns:
        ``(offsets, sizes, name_start, name_len, arena)``: int64 arrays of data offsets
        and sizes, int64/int32 arrays locating each member's raw (undecoded) name in
        ``arena`` (bytes); with ``with_end``, the end offset as a sixth item.

    Raises:
        TarFormatError: bad header checksum, partial header block, member data running
            past the end of ``buf``, unsupported GNU sparse member, malformed PAX header,
            or an empty buffer. The message names the byte offset of the header.
        ValueError: ``capacity`` is less than 1.

    Example:
        >>> offsets, sizes, starts, lens, arena = index_tar(open("shard.tar", "rb").read())
    """
    cdef int64_t n = buf.shape[0]
    cdef int64_t cap, arena_cap, count = 0, used = 0, pos = 0, err_offset, err_value
    cdef int status
    if n == 0:
        raise TarFormatError("empty buffer (0 bytes) is not a TAR archive")
    if capacity is None:
        # a guess, not a bound: typical shards hold members of a few KiB
        cap = n // 8192 + 64
    else:
        cap = capacity
        if cap < 1:
            raise ValueError(f"capacity must be at least 1, got {cap}")
    arena_cap = cap * 48
    offsets = np.empty(cap, np.int64)
    sizes = np.empty(cap, np.int64)
    name_start = np.empty(cap, np.int64)
    name_len = np.empty(cap, np.int32)
    arena = np.empty(arena_cap, np.uint8)
    while True:
        status, pos, count, used, err_offset, err_value = _scan_pass(
            buf, offsets, sizes, name_start, name_len, arena, pos, count, used)
        if status == TAR_DONE:
            break
        if status != TAR_FULL:
            raise TarFormatError(_error_message(status, err_offset, err_value, n))
        if count >= cap:
            cap *= 2
            offsets = np.concatenate([offsets[:count], np.empty(cap - count, np.int64)])
            sizes = np.concatenate([sizes[:count], np.empty(cap - count, np.int64)])
            name_start = np.concatenate([name_start[:count], np.empty(cap - count, np.int64)])
            name_len = np.concatenate([name_len[:count], np.empty(cap - count, np.int32)])
        if err_value > arena_cap - used:   # err_value: bytes of the name that did not fit
            arena_cap = max(arena_cap * 2, used + err_value)
            arena = np.concatenate([arena[:used], np.empty(arena_cap - used, np.uint8)])
    result = (offsets[:count].copy(), sizes[:count].copy(), name_start[:count].copy(),
              name_len[:count].copy(), arena[:used].tobytes())
    return result + (pos,) if with_end else result


cdef enum:
    GROUP_MAX_MEMBERS = 64     # members of one sample the native grouping handles
    GROUP_MAX_EXTS = 16        # candidate extensions (image + label) it compares


cdef inline uint8_t _lower(uint8_t c) noexcept nogil:
    return c + 32 if 65 <= c <= 90 else c


cdef inline bint _same_ext(const uint8_t* a, const uint8_t* b, int64_t n) noexcept nogil:
    """Whether two ASCII extensions of ``n`` bytes are equal once lower-cased."""
    cdef int64_t i
    for i in range(n):
        if _lower(a[i]) != _lower(b[i]):
            return False
    return True


cdef inline bint _is_ext(const uint8_t* want, const uint8_t* e, int64_t n) noexcept nogil:
    """Whether extension ``e`` lower-cased is ``want`` (as given: ``str.lower()`` of the
    member's extension is compared with it)."""
    cdef int64_t i
    for i in range(n):
        if _lower(e[i]) != want[i]:
            return False
    return True


def group_samples(const uint8_t[::1] arena not None, const int64_t[::1] name_start not None,
                  const int32_t[::1] name_len not None, tuple image_exts not None,
                  tuple label_exts not None, /):
    """The members of an indexed archive grouped into samples, webdataset's way (the
    Python definition: ``io.shards.split_key`` and ``_group``, which this matches), in one
    pass without the GIL.

    A member's key is its name up to the first dot after the last ``/``; consecutive
    members with the same key form a sample; a name without such a dot (or a hidden file's)
    belongs to no sample. Per sample: its first member, and the member (and the position
    in ``image_exts`` / ``label_exts``, lower-case ASCII strings in order of preference)
    of its image and its label; extensions compare case-insensitively.

    Returns ``(first, image, image_which, label, label_which, key_start, key_len)``, int64
    arrays of one entry per sample (-1: none), the key a span of ``arena``; or None when
    the Python definition must decide: a name with a non-ASCII byte, a sample with two
    members of one extension (a problem its message names) or with more than 64 members,
    a name span outside ``arena``, a non-ASCII or non-str extension, more than 16 of them.

    Raises:
        ValueError: ``name_start`` and ``name_len`` differ in length.
    """
    cdef Py_ssize_t m = name_start.shape[0], pos, ns = 0
    cdef int64_t s, l, i, slash, dot, elen, kpos = 0, klen = -1, nmem = 0
    cdef int k, n_img = len(image_exts), n_lab = len(label_exts), ncand, bad = 0
    cdef const uint8_t* a
    cdef const uint8_t* p
    cdef const uint8_t* e
    cdef int64_t mem_s[GROUP_MAX_MEMBERS]
    cdef int64_t mem_l[GROUP_MAX_MEMBERS]
    cdef const uint8_t* cand_p[GROUP_MAX_EXTS]
    cdef int64_t cand_l[GROUP_MAX_EXTS]
    if name_len.shape[0] != m:
        raise ValueError("name_start and name_len differ in length")
    ncand = n_img + n_lab
    if ncand > GROUP_MAX_EXTS:
        return None
    try:
        cands = [x.encode("ascii") for x in image_exts + label_exts]
    except (UnicodeEncodeError, AttributeError):
        return None
    for k in range(ncand):
        cand_p[k] = <const uint8_t*><char*>cands[k]
        cand_l[k] = len(cands[k])
    first_a = np.empty(m, np.int64)
    image_a = np.full(m, -1, np.int64)
    iw_a = np.full(m, -1, np.int64)
    label_a = np.full(m, -1, np.int64)
    lw_a = np.full(m, -1, np.int64)
    ks_a = np.empty(m, np.int64)
    kl_a = np.empty(m, np.int64)
    cdef int64_t[::1] first = first_a, image = image_a, iw = iw_a, label = label_a, lw = lw_a
    cdef int64_t[::1] ks = ks_a, kl = kl_a
    if m == 0:
        return first_a, image_a, iw_a, label_a, lw_a, ks_a, kl_a
    a = &arena[0] if arena.shape[0] else NULL
    with nogil:
        for pos in range(m):
            s = name_start[pos]
            l = name_len[pos]
            if s < 0 or l < 0 or s + l > arena.shape[0]:
                bad = 1
                break
            p = a + s
            slash = 0
            for i in range(l):
                if p[i] >= 0x80:
                    bad = 1
                    break
                if p[i] == 47:  # '/'
                    slash = i + 1
            if bad:
                break
            dot = -1
            for i in range(slash, l):
                if p[i] == 46:  # '.'
                    dot = i
                    break
            if dot <= slash:    # no extension, or a hidden file: no sample
                continue
            if ns == 0 or dot != klen or memcmp(p, a + kpos, <size_t>dot) != 0:
                first[ns] = pos
                ks[ns] = s
                kl[ns] = dot
                kpos, klen = s, dot
                ns += 1
                nmem = 0
            e = p + dot + 1
            elen = l - dot - 1
            for i in range(nmem):
                if mem_l[i] == elen and _same_ext(a + mem_s[i], e, elen):
                    bad = 1     # a duplicate member: the Python definition names it
                    break
            if bad or nmem == GROUP_MAX_MEMBERS:
                bad = 1
                break
            mem_s[nmem] = s + dot + 1
            mem_l[nmem] = elen
            nmem += 1
            for k in range(n_img):
                if cand_l[k] == elen and _is_ext(cand_p[k], e, elen):
                    if iw[ns - 1] < 0 or k < iw[ns - 1]:
                        iw[ns - 1] = k
                        image[ns - 1] = pos
                    break
            for k in range(n_lab):
                if cand_l[n_img + k] == elen and _is_ext(cand_p[n_img + k], e, elen):
                    if lw[ns - 1] < 0 or k < lw[ns - 1]:
                        lw[ns - 1] = k
                        label[ns - 1] = pos
                    break
    if bad:
        return None
    return (first_a[:ns], image_a[:ns], iw_a[:ns], label_a[:ns], lw_a[:ns], ks_a[:ns],
            kl_a[:ns])
