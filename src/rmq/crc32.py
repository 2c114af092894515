"""CRC-32 as zlib and java.util.zip.CRC32 compute it; ``CRC32_KERNEL`` names the
instruction set in use ("vpclmulqdq", "pclmulqdq", "armv8", "table"; "zlib" in
the pure-Python reference)."""

from rmq._impl import core

crc32 = core.crc32
body_crc32 = core.body_crc32
CRC32_KERNEL = core.CRC32_KERNEL

__all__ = ["crc32", "body_crc32", "CRC32_KERNEL"]
