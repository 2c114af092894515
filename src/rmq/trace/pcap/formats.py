"""Capture files: the packets of a pcap or pcapng file, as (time_ns, linktype, data).

Classic pcap in either byte order and resolution; pcapng with any number of sections
and interfaces (each its own link type and timestamp resolution and offset). A file
that is not a capture, or whose structure is broken, raises PcapError; a last record
cut by the end of the file ends the packets (counted).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING

from rmq.errors import RmqError

if TYPE_CHECKING:
    from rmq.trace.pcap import PcapStats

__all__ = ["CAPTURE_MAGICS", "PcapError", "is_pcap", "open_packets"]

#: (time_ns, linktype, data) of one captured packet
Packet = tuple[int, int, bytes]


class PcapError(RmqError, ValueError):
    """A file that is not a pcap or pcapng capture, or whose structure is broken."""


_PCAP_MAGIC = {  # first 4 bytes -> (struct byte order, nanoseconds per fraction unit)
    b"\xd4\xc3\xb2\xa1": ("<", 1000),
    b"\xa1\xb2\xc3\xd4": (">", 1000),
    b"\x4d\x3c\xb2\xa1": ("<", 1),
    b"\xa1\xb2\x3c\x4d": (">", 1),
}
_PCAP_HEADER_SIZE = 24
_PCAPNG_SHB = b"\x0a\x0d\x0d\x0a"      # a palindrome: the same in both byte orders
_PCAPNG_BYTE_ORDER = {b"\x4d\x3c\x2b\x1a": "<", b"\x1a\x2b\x3c\x4d": ">"}
#: The first 4 bytes of a capture file, pcap (either byte order and resolution) or pcapng.
CAPTURE_MAGICS = frozenset(_PCAP_MAGIC) | {_PCAPNG_SHB}
_BLOCK_IDB, _BLOCK_OPB, _BLOCK_SPB, _BLOCK_EPB = 1, 2, 3, 6
# block header and trailer (12 bytes) plus each packet block's fixed fields
_LEAST_BLOCK_LENGTH = {_BLOCK_EPB: 32, _BLOCK_OPB: 32, _BLOCK_SPB: 16}
_OPT_IF_TSRESOL, _OPT_IF_TSOFFSET = 9, 14

_CHUNK = 1 << 20
#: Far above any snap length (tcpdump's maximum is 256 KiB): a longer record is a
#: corrupt length, not a packet, and must not make us allocate it.
_MAX_RECORD = 64 << 20


def is_pcap(first_bytes: bytes | bytearray | memoryview) -> bool:
    """True when ``first_bytes`` (the start of a file, 4 bytes or more) is a pcap or
    pcapng header."""
    head = bytes(first_bytes[:4])
    if head in _PCAP_MAGIC:
        return True
    if head != _PCAPNG_SHB:
        return False
    return len(first_bytes) < 12 or bytes(first_bytes[8:12]) in _PCAPNG_BYTE_ORDER


class _ChunkReader:
    """Reads a file in large chunks; ``buf[pos:]`` is what is not consumed yet."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f = f
        self.buf = b""
        self.pos = 0
        self.offset = 0          # file offset of buf[0]

    def ensure(self, n: int) -> bool:
        """True when ``n`` bytes are available from ``pos`` (False at the end of the file)."""
        avail = len(self.buf) - self.pos
        if avail >= n:
            return True
        parts = [self.buf[self.pos:]]
        while avail < n:
            chunk = self.f.read(max(_CHUNK, n - avail))
            if not chunk:
                break
            parts.append(chunk)
            avail += len(chunk)
        self.offset += self.pos
        self.buf = b"".join(parts)
        self.pos = 0
        return avail >= n


def open_packets(file: IO[bytes], stats: PcapStats) -> Iterator[Packet]:
    """The packets of ``file``; its header is read at once (PcapError here when the
    file is not a capture)."""
    reader = _ChunkReader(file)
    reader.ensure(_PCAP_HEADER_SIZE)
    head = reader.buf[:4]
    if head in _PCAP_MAGIC:
        if len(reader.buf) < _PCAP_HEADER_SIZE:
            raise PcapError(f"truncated pcap global header: {len(reader.buf)} of "
                            f"{_PCAP_HEADER_SIZE} bytes")
        order, frac_ns = _PCAP_MAGIC[head]
        (linktype,) = struct.unpack_from(order + "I", reader.buf, 20)
        reader.pos = _PCAP_HEADER_SIZE
        # The top bits carry FCS information (libpcap's LT_LINKTYPE).
        return _pcap_packets(reader, stats, order, frac_ns, linktype & 0x03FFFFFF)
    if head == _PCAPNG_SHB:
        if len(reader.buf) < 12:
            raise PcapError(f"truncated pcapng section header: {len(reader.buf)} of 12 "
                            "bytes before its byte-order magic")
        if reader.buf[8:12] not in _PCAPNG_BYTE_ORDER:
            raise PcapError("pcapng section header with byte-order magic "
                            f"0x{reader.buf[8:12].hex()} (expected 1a2b3c4d in either order)")
        return _pcapng_packets(reader, stats)
    if len(head) < 4:
        raise PcapError(f"not a pcap or pcapng file: {len(head)} bytes, "
                        "shorter than a magic number")
    raise PcapError(f"not a pcap or pcapng file: magic 0x{head.hex()}")


def _pcap_packets(reader: _ChunkReader, stats: PcapStats, order: str, frac_ns: int,
                  linktype: int) -> Iterator[Packet]:
    """(time_ns, linktype, data) of each record of a classic pcap file."""
    header = struct.Struct(order + "IIII")
    while True:
        if len(reader.buf) - reader.pos < 16 and not reader.ensure(16):
            if len(reader.buf) > reader.pos:
                stats.truncated_records += 1
            return
        sec, frac, caplen, wirelen = header.unpack_from(reader.buf, reader.pos)
        start = reader.pos + 16
        if start + caplen > len(reader.buf):
            if caplen > _MAX_RECORD:
                raise PcapError(f"pcap record at offset {reader.offset + reader.pos} "
                                f"claims {caplen} bytes (corrupt length)")
            if not reader.ensure(16 + caplen):
                stats.truncated_records += 1
                return
            start = reader.pos + 16
        reader.pos = start + caplen
        stats.packets += 1
        if caplen < wirelen:
            stats.snapped_packets += 1
        yield sec * 1_000_000_000 + frac * frac_ns, linktype, reader.buf[start:start + caplen]


def _pcapng_packets(reader: _ChunkReader, stats: PcapStats) -> Iterator[Packet]:
    """(time_ns, linktype, data) of each packet block of a pcapng file."""
    last_time_ns = 0
    order = "<"
    block_header = struct.Struct("<II")
    interfaces: list[tuple[int, int, int, int]] = []  # per section: (linktype, mul, div, offset_ns)
    while True:
        if not reader.ensure(12):
            if len(reader.buf) > reader.pos:
                stats.truncated_records += 1
            return
        buf, pos = reader.buf, reader.pos
        if buf[pos:pos + 4] == _PCAPNG_SHB:
            # Each section sets its own byte order and interfaces.
            order = _PCAPNG_BYTE_ORDER.get(buf[pos + 8:pos + 12])  # type: ignore[assignment]
            if order is None:
                raise PcapError(f"pcapng section header at offset {reader.offset + pos} "
                                f"with byte-order magic 0x{buf[pos + 8:pos + 12].hex()}")
            block_header = struct.Struct(order + "II")
            interfaces = []
        btype, blen = block_header.unpack_from(buf, pos)
        if blen < 12 or blen % 4 or blen > _MAX_RECORD:
            raise PcapError(f"pcapng block of type 0x{btype:x} at offset "
                            f"{reader.offset + pos} has length {blen}")
        if not reader.ensure(blen):
            stats.truncated_records += 1
            return
        buf, pos = reader.buf, reader.pos
        reader.pos = pos + blen
        body, end = pos + 8, pos + blen - 4
        least = _LEAST_BLOCK_LENGTH.get(btype, 12)
        if blen < least:
            raise PcapError(f"pcapng block of type {btype:#x} at offset {reader.offset + pos} "
                            f"has length {blen}, less than its fixed fields' {least}")
        if btype == _BLOCK_EPB or btype == _BLOCK_OPB:
            if btype == _BLOCK_EPB:
                iface, high, low, caplen, wirelen = struct.unpack_from(order + "5I", buf, body)
            else:   # obsolete: 16-bit interface id and a drops count
                iface, high, low, caplen, wirelen = struct.unpack_from(order + "H2x4I", buf, body)
            data_start = body + 20
            if iface >= len(interfaces):
                raise PcapError(f"pcapng packet block at offset {reader.offset + pos} names "
                                f"interface {iface}; the section describes {len(interfaces)}")
            linktype, mul, div, offset_ns = interfaces[iface]
            time_ns = last_time_ns = ((high << 32 | low) * mul) // div + offset_ns
        elif btype == _BLOCK_SPB:
            (wirelen,) = struct.unpack_from(order + "I", buf, body)
            data_start = body + 4
            caplen = min(wirelen, end - data_start)
            if not interfaces:
                raise PcapError(f"pcapng simple packet block at offset {reader.offset + pos} "
                                "before any interface description")
            linktype = interfaces[0][0]
            time_ns = last_time_ns          # an SPB has no timestamp
        else:
            if btype == _BLOCK_IDB:
                interfaces.append(_interface(order, buf, body, end))
            continue
        if data_start + caplen > end:
            raise PcapError(f"pcapng packet block at offset {reader.offset + pos} claims "
                            f"{caplen} bytes of data in a {blen}-byte block")
        stats.packets += 1
        if caplen < wirelen:
            stats.snapped_packets += 1
        yield time_ns, linktype, buf[data_start:data_start + caplen]


def _interface(order: str, buf: bytes, body: int, end: int) -> tuple[int, int, int, int]:
    """(linktype, mul, div, offset_ns) of an interface description block:
    time_ns = timestamp * mul // div + offset_ns."""
    (linktype,) = struct.unpack_from(order + "H", buf, body)
    units_per_second, offset_ns = 1_000_000, 0
    option = struct.Struct(order + "HH")
    pos = body + 8
    while pos + 4 <= end:
        code, length = option.unpack_from(buf, pos)
        value = pos + 4
        if code == 0:
            break
        if code == _OPT_IF_TSRESOL and length >= 1:
            v = buf[value]
            units_per_second = 1 << (v & 0x7F) if v & 0x80 else 10 ** v
        elif code == _OPT_IF_TSOFFSET and length >= 8:
            offset_ns = struct.unpack_from(order + "q", buf, value)[0] * 1_000_000_000
        pos = value + ((length + 3) & ~3)
    if 1_000_000_000 % units_per_second == 0:
        return linktype, 1_000_000_000 // units_per_second, 1, offset_ns
    return linktype, 1_000_000_000, units_per_second, offset_ns
