"""Pure-Python reference of the CRC32 functions: zlib's, which is the definition."""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ["crc32", "body_crc32", "CRC32_KERNEL"]

CRC32_KERNEL = "zlib"


def crc32(data: Buffer, value: int = 0) -> int:
    """CRC-32/IEEE of ``data`` continuing from ``value``, as zlib.crc32."""
    return zlib.crc32(data, value)


def body_crc32(data: Buffer) -> int:
    """Java's UtilAll.crc32: the CRC-32 masked to a non-negative int."""
    return zlib.crc32(data) & 0x7FFFFFFF
