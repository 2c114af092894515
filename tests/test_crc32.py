"""CRC-32 against zlib.crc32, the definition, on every kernel this CPU runs."""

import array
import contextlib
import random
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from support import load_compiled, load_fallback

# Both implementations by name (load_compiled / load_fallback): one pass covers them.
pytestmark = pytest.mark.once

KERNELS = ("vpclmulqdq", "pclmulqdq", "armv8", "table")

RNG = random.Random(20240917)
BUF = RNG.randbytes(4096 + 64 + 1024)

#: "py" is rmq.fallback (zlib); "c-NAME" is rmq._core forced to one kernel.
each_kernel = pytest.mark.parametrize("kernel", ["py"] + [f"c-{k}" for k in KERNELS])


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
    with using(kernel) as crc:
        for n in range(4097):
            assert crc.crc32(mv[:n]) == zlib.crc32(mv[:n]), n


@each_kernel
@pytest.mark.parametrize("n", [0, 1, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128,
                               129, 255, 256, 257, 511, 512, 513, 1000, 1024, 4096])
def test_alignments(kernel, n):
    mv = memoryview(BUF)
    with using(kernel) as crc:
        for offset in range(64):
            part = mv[offset:offset + n]
            assert crc.crc32(part) == zlib.crc32(part), (offset, n)


@each_kernel
@pytest.mark.parametrize("n", [(64 << 10) - 1, 64 << 10, (64 << 10) + 1,
                               RNG.randrange(1 << 20, 4 << 20),
                               RNG.randrange(4 << 20, 16 << 20), 16 << 20])
def test_large_sizes(kernel, n):
    data = random.Random(n).randbytes(n)
    with using(kernel) as crc:
        assert crc.crc32(data) == zlib.crc32(data)
        assert crc.crc32(memoryview(data)[3:]) == zlib.crc32(memoryview(data)[3:])
        assert crc.body_crc32(data) == zlib.crc32(data) & 0x7FFFFFFF


@each_kernel
@given(data=st.binary(max_size=300), value=st.integers(0, 0xFFFFFFFF))
def test_start_values(kernel, data, value):
    with using(kernel) as crc:
        assert crc.crc32(data, value) == zlib.crc32(data, value)


@each_kernel
@given(a=st.binary(max_size=200), b=st.binary(max_size=200))
def test_chaining(kernel, a, b):
    with using(kernel) as crc:
        assert crc.crc32(b, crc.crc32(a)) == crc.crc32(a + b) == zlib.crc32(a + b)


@each_kernel
@pytest.mark.parametrize("make", [bytes, bytearray, memoryview,
                                  lambda b: memoryview(bytearray(b))[5:-5],
                                  lambda b: array.array("I", b[:len(b) // 4 * 4])],
                         ids=["bytes", "bytearray", "memoryview", "view-slice", "array"])
def test_buffer_types(kernel, make):
    with using(kernel) as crc:
        for n in (0, 1, 100, 4096):
            buf = make(BUF[:n + 10])
            assert crc.crc32(buf) == zlib.crc32(buf)
            assert crc.body_crc32(buf) == zlib.crc32(buf) & 0x7FFFFFFF


@each_kernel
def test_check_value(kernel):
    with using(kernel) as crc:
        assert crc.crc32(b"123456789") == 0xCBF43926       # CRC-32/IEEE check value
        assert crc.crc32(b"") == 0
        assert crc.crc32(b"", 0xDEADBEEF) == 0xDEADBEEF


@each_kernel
@given(data=st.binary(max_size=1000))
def test_body_crc32_is_the_masked_crc(kernel, data):
    with using(kernel) as crc:
        value = crc.body_crc32(data)
        assert value == zlib.crc32(data) & 0x7FFFFFFF
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
