"""CRC-32: rmq's dispatched kernel vs isal (ISA-L) vs zlib, side by side."""

import os
import zlib

import pytest

import rmq._core as compiled

try:
    from isal import isal_zlib
except ImportError:  # isal is a bench extra
    isal_zlib = None

BIG = os.urandom(16 * 1024 * 1024)
SMALL = os.urandom(200)
EXPECTED_BIG = zlib.crc32(BIG)

IMPLS = [pytest.param(compiled.crc32, id="rmq"),
         pytest.param(isal_zlib.crc32 if isal_zlib else None, id="isal",
                      marks=pytest.mark.skipif(isal_zlib is None, reason="isal not installed")),
         pytest.param(zlib.crc32, id="zlib")]


def _name(func):
    return {compiled.crc32: "rmq", zlib.crc32: "zlib"}.get(func, "isal")


@pytest.mark.parametrize("func", IMPLS)
def test_crc32_16mib(benchmark, figure, func):
    assert benchmark(func, BIG) == EXPECTED_BIG
    figure(benchmark, f"crc32 16MiB {_name(func)}", len(BIG), "bytes/s")


@pytest.mark.parametrize("func", IMPLS)
def test_crc32_200b(benchmark, figure, func):
    # A call is ~50 ns: time 100,000 calls per round, or the timer's own
    # resolution and overhead would be what is measured.
    result = benchmark.pedantic(func, (SMALL,), iterations=100_000, rounds=15, warmup_rounds=1)
    assert result == zlib.crc32(SMALL)
    figure(benchmark, f"crc32 200B {_name(func)}", 1, "ns/call")


@pytest.mark.parametrize("kernel", compiled.crc32_kernels_available())
def test_crc32_16mib_each_kernel(benchmark, figure, kernel):
    before = compiled.CRC32_KERNEL
    compiled.crc32_set_kernel(kernel)
    try:
        assert benchmark(compiled.crc32, BIG) == EXPECTED_BIG
    finally:
        compiled.crc32_set_kernel(before)
    figure(benchmark, f"crc32 16MiB kernel {kernel}", len(BIG), "bytes/s")
