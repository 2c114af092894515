"""CRC-32 on every kernel this CPU runs, against an oracle written here: the
definition (CRC-32/ISO-HDLC, the CRC of java.util.zip.CRC32 and zlib: the reflected
polynomial 0xEDB88320, initial value and final XOR 0xFFFFFFFF) as a bitwise loop, the
catalogue's published check values, and the bodyCrc32 that real Java 4.9.8 brokers
sent (Java's UtilAll.crc32: the CRC masked with 0x7FFFFFFF). The pure-Python
implementation ("py") uses zlib, so it is never compared with zlib."""

import array
import contextlib
import functools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from support import VECTOR_BY_FILE, load_compiled, load_fallback, split_frame, vector_bytes

# Both implementations by name (load_compiled / load_fallback): one pass covers them.
pytestmark = pytest.mark.once

KERNELS = ("vpclmulqdq", "pclmulqdq", "armv8", "table")

RNG = random.Random(20240917)
BUF = RNG.randbytes(4096 + 64 + 1024)

#: "py" is rmq.fallback (zlib); "c-NAME" is rmq._core forced to one kernel.
each_kernel = pytest.mark.parametrize("kernel", ["py"] + [f"c-{k}" for k in KERNELS])


# ---------------------------------------------------------------- the oracle

POLY = 0xEDB88320       # x^32 + x^26 + ... + 1, bit-reflected
MASK = 0xFFFFFFFF


def _shift_byte(crc):
    """Eight steps of the bitwise division: one byte's worth."""
    for _ in range(8):
        crc = (crc >> 1) ^ POLY if crc & 1 else crc >> 1
    return crc


def crc32_bitwise(data, value=0):
    """The definition, bit by bit: ``value`` is the CRC of what came before (0 for
    nothing), as in java.util.zip.CRC32 and zlib.crc32."""
    crc = value ^ MASK
    for byte in bytes(data):
        crc = _shift_byte(crc ^ byte)
    return crc ^ MASK


#: What eight bitwise steps do to each low byte: the same division, a byte at a time.
TABLE = [_shift_byte(i) for i in range(256)]


def reference_crc32(data, value=0):
    """crc32_bitwise, a byte per step (fast enough for megabytes)."""
    crc = value ^ MASK
    table = TABLE
    for byte in bytes(data):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ MASK


def java_body_crc32(data):
    """UtilAll.crc32(byte[]): new CRC32().update(...).getValue() & 0x7FFFFFFF."""
    return reference_crc32(data) & 0x7FFFFFFF


@functools.cache
def _prefix_crcs():
    """reference_crc32(BUF[:n]) for n in 0..4096, in one pass."""
    out, crc = [0], MASK
    for byte in BUF[:4096]:
        crc = TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
        out.append(crc ^ MASK)
    return out


@functools.cache
def _reference_of_slice(offset, n):
    return reference_crc32(BUF[offset:offset + n])


@functools.cache
def _large(n):
    data = random.Random(n).randbytes(n)
    return data, reference_crc32(data)


#: CRC-32/ISO-HDLC values published for these inputs (the CRC catalogue's check value,
#: and the vectors that CRC-32 test suites list), written down, not computed.
PUBLISHED = [
    (b"123456789", 0xCBF43926),
    (b"", 0x00000000),
    (b"a", 0xE8B7BE43),
    (b"abc", 0x352441C2),
    (b"message digest", 0x20159D7F),
    (b"abcdefghijklmnopqrstuvwxyz", 0x4C2750BD),
    (b"The quick brown fox jumps over the lazy dog", 0x414FA339),
    (b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", 0x1FC2E6D2),
    (b"1234567890" * 8, 0x7CA94A72),
    (bytes(32), 0x190A55AD),
    (b"\xff" * 32, 0xFF6CAB0B),
    (bytes(range(32)), 0x91267E8A),
    (bytes(range(31, -1, -1)), 0x9AB0EF72),
]

#: REGISTER_BROKER frames that real Java 4.9.8 brokers sent: their bodyCrc32 field is
#: UtilAll.crc32 of the body, computed by Java.
JAVA_BODY_CRC_FRAMES = ["103_register_broker_request.bin", "103_register_broker_rmq_request.bin"]


@pytest.mark.parametrize("data,expected", PUBLISHED, ids=lambda v: repr(v)[:24])
def test_the_oracle_gives_the_published_values(data, expected):
    assert crc32_bitwise(data) == expected
    assert reference_crc32(data) == expected


def test_the_oracle_table_is_the_published_table():
    # the first, second and last entries of the standard CRC-32 table
    assert TABLE[0] == 0 and TABLE[1] == 0x77073096 and TABLE[255] == 0x2D02EF8D
    assert TABLE[128] == POLY


@given(data=st.binary(max_size=200), value=st.integers(0, MASK))
def test_the_oracle_table_is_the_bitwise_definition(data, value):
    assert reference_crc32(data, value) == crc32_bitwise(data, value)


# ---------------------------------------------------------------- the kernels


@contextlib.contextmanager
def using(kernel):
    """The implementation with one CRC32 kernel selected, restored afterwards."""
    if kernel == "py":
        yield load_fallback()
        return
    core = load_compiled()
    name = kernel[2:]
    if name not in core.crc32_kernels_available():
        pytest.skip(f"this CPU cannot run the {name} kernel")
    original = core.CRC32_KERNEL
    try:
        assert core.crc32_set_kernel(name) == name
        assert core.CRC32_KERNEL == name
        yield core
    finally:
        core.crc32_set_kernel(original)
    assert core.CRC32_KERNEL == original


@each_kernel
def test_every_size_up_to_4096(kernel):
    mv = memoryview(BUF)
    expected = _prefix_crcs()
    assert len(expected) == 4097
    with using(kernel) as crc:
        for n in range(4097):
            assert crc.crc32(mv[:n]) == expected[n], n


@each_kernel
@pytest.mark.parametrize("n", [0, 1, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128,
                               129, 255, 256, 257, 511, 512, 513, 1000, 1024, 4096])
def test_alignments(kernel, n):
    mv = memoryview(BUF)
    with using(kernel) as crc:
        for offset in range(64):
            part = mv[offset:offset + n]
            assert len(part) == n
            assert crc.crc32(part) == _reference_of_slice(offset, n), (offset, n)


@each_kernel
@pytest.mark.parametrize("n", [(64 << 10) - 1, 64 << 10, (64 << 10) + 1,
                               RNG.randrange(1 << 20, 4 << 20),
                               RNG.randrange(4 << 20, 16 << 20), 16 << 20])
def test_large_sizes(kernel, n):
    data, expected = _large(n)
    with using(kernel) as crc:
        assert crc.crc32(data) == expected
        # an unaligned start, continuing from the CRC of the first three bytes
        assert crc.crc32(memoryview(data)[3:], reference_crc32(data[:3])) == expected
        assert crc.body_crc32(data) == expected & 0x7FFFFFFF


@each_kernel
@given(data=st.binary(max_size=300), value=st.integers(0, 0xFFFFFFFF))
def test_start_values(kernel, data, value):
    with using(kernel) as crc:
        assert crc.crc32(data, value) == reference_crc32(data, value)


@each_kernel
@given(a=st.binary(max_size=200), b=st.binary(max_size=200))
def test_chaining(kernel, a, b):
    with using(kernel) as crc:
        assert crc.crc32(b, crc.crc32(a)) == crc.crc32(a + b) == reference_crc32(a + b)


@each_kernel
@pytest.mark.parametrize("make", [bytes, bytearray, memoryview,
                                  lambda b: memoryview(bytearray(b))[5:-5],
                                  lambda b: array.array("I", b[:len(b) // 4 * 4])],
                         ids=["bytes", "bytearray", "memoryview", "view-slice", "array"])
def test_buffer_types(kernel, make):
    with using(kernel) as crc:
        for n in (0, 1, 100, 4096):
            buf = make(BUF[:n + 10])
            raw = bytes(buf)        # the buffer's bytes, in memory order
            assert crc.crc32(buf) == reference_crc32(raw)
            assert crc.body_crc32(buf) == java_body_crc32(raw)


@each_kernel
@pytest.mark.parametrize("data,expected", PUBLISHED, ids=lambda v: repr(v)[:24])
def test_published_check_values(kernel, data, expected):
    with using(kernel) as crc:
        assert crc.crc32(data) == expected
        assert crc.body_crc32(data) == expected & 0x7FFFFFFF


@each_kernel
def test_check_value(kernel):
    with using(kernel) as crc:
        assert crc.crc32(b"123456789") == 0xCBF43926       # CRC-32/ISO-HDLC check value
        assert crc.body_crc32(b"123456789") == 0x4BF43926  # its top bit cleared
        assert crc.crc32(b"") == 0
        assert crc.crc32(b"", 0xDEADBEEF) == 0xDEADBEEF
        # "123456789" after "1234": the start value is the CRC of what came before
        assert crc.crc32(b"56789", crc.crc32(b"1234")) == 0xCBF43926


@each_kernel
@pytest.mark.parametrize("name", JAVA_BODY_CRC_FRAMES)
def test_body_crc32_is_what_java_sent(kernel, name):
    header = VECTOR_BY_FILE[name]["header"]
    sent = int(header["extFields"]["bodyCrc32"])
    body = split_frame(vector_bytes(name))[2]
    assert len(body) == VECTOR_BY_FILE[name]["body_len"] > 0
    with using(kernel) as crc:
        assert crc.body_crc32(body) == sent


@each_kernel
@given(data=st.binary(max_size=1000))
def test_body_crc32_is_the_masked_crc(kernel, data):
    with using(kernel) as crc:
        value = crc.body_crc32(data)
        assert value == java_body_crc32(data)
        assert 0 <= value <= 0x7FFFFFFF


# ---------------------------------------------------------------- kernel selection


def test_kernel_name(impl):
    if impl.IMPLEMENTATION == "compiled":
        available = impl.crc32_kernels_available()
        assert impl.CRC32_KERNEL in available
        assert "table" in available
        assert set(available) <= set(KERNELS)
    else:
        assert impl.CRC32_KERNEL == "zlib"


def test_set_kernel_auto_picks_the_best(compiled):
    original = compiled.CRC32_KERNEL
    try:
        assert compiled.crc32_set_kernel("table") == "table"
        assert compiled.crc32_set_kernel("auto") == compiled.crc32_kernels_available()[0]
    finally:
        compiled.crc32_set_kernel(original)


def test_set_kernel_rejects_unknown_and_unsupported(compiled):
    original = compiled.CRC32_KERNEL
    unsupported = [k for k in KERNELS if k not in compiled.crc32_kernels_available()]
    for name in ["no-such-kernel", "zlib", *unsupported]:
        with pytest.raises(ValueError):
            compiled.crc32_set_kernel(name)
        assert compiled.CRC32_KERNEL == original
