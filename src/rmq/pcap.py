"""RocketMQ remoting frames out of tcpdump captures (pcap and pcapng).

Each frame comes out as a trace record, the shape of rmq's own trace segments::

    (time_ns, conn, peer, direction, frame)

``time_ns`` is the capture time of the packet that completed the frame, ``conn`` a
small id per TCP connection (1, 2, ... in order of first appearance), ``peer`` the
client's "ip:port" ("[v6addr]:port"), ``direction`` IN (client to server) or OUT, and
``frame`` the whole frame, its 4-byte length prefix included.

TCP is reassembled per connection and direction from sequence numbers. Nothing is
guessed: bytes that cannot be placed in a stream with certainty are counted in
``PcapReader.stats`` and never decoded. A direction is aligned on frames by its SYN;
without one (the capture started mid-stream) it is aligned at the first segment
whose payload starts like a frame (length in range, a known serialize type, a JSON
header opening with ``{`` or a binary header with a known language) and the bytes
before are counted as unaligned. A gap that is never filled (a packet the capture
lost) ends the direction: the bytes after it are counted as lost.

Pure Python: reading a 100 MB capture takes seconds.
"""

from __future__ import annotations

import heapq
import itertools
import os
import socket
import struct
from dataclasses import asdict, dataclass
from collections.abc import Iterable, Iterator
from typing import IO, TYPE_CHECKING, Any, NamedTuple

from rmq.errors import RmqError
from rmq.protocol import DEFAULT_MAX_FRAME_LENGTH, IN, OUT, LANGUAGES

if TYPE_CHECKING:
    from typing_extensions import Self

#: (time_ns, linktype, data) of one captured packet
_Packet = tuple[int, int, bytes]
#: (src, sport, dst, dport) of a TCP segment
_FlowKey = tuple[bytes, int, bytes, int]
#: A flow's entry in PcapReader._flows: the flow, and the stream of the key's source
_FlowEntry = tuple["_Flow", "_Stream | None"]

__all__ = ["IN", "OUT", "PcapError", "PcapReader", "PcapStats", "TraceRecord",
           "is_pcap", "read_pcap"]

#: Default for ``max_reorder_bytes``: above any real TCP window, so only a packet the
#: capture lost holds this much out-of-order data of one direction.
DEFAULT_MAX_REORDER_BYTES = 32 * 1024 * 1024
#: Default for ``sort_window_ns``: captures on several CPUs or interfaces jitter by
#: microseconds to milliseconds; records wait this long for earlier ones.
DEFAULT_SORT_WINDOW_NS = 1_000_000_000


class PcapError(RmqError, ValueError):
    """A file that is not a pcap or pcapng capture, or whose structure is broken."""


class TraceRecord(NamedTuple):
    time_ns: int
    conn: int
    peer: str
    direction: int
    frame: bytes


@dataclass
class PcapStats:
    """What reading a capture found; bytes and frames that did not come out are here."""

    packets: int = 0                # packet records read
    truncated_records: int = 0      # a last record cut by the end of the file (reading ends there)
    snapped_packets: int = 0        # packets captured shorter than they were on the wire
    unsupported_link_packets: int = 0   # packets of a link type this reader does not dissect
    ip_fragments: int = 0           # IPv4 and IPv6 fragments (skipped: never reassembled)
    tcp_packets: int = 0            # TCP segments, on any port
    flows: int = 0                  # TCP connections followed (a server port, or any port)
    unknown_client_flows: int = 0   # connections without SYN where server_ports cannot tell
    frames: int = 0                 # records produced
    retransmitted_bytes: int = 0    # payload bytes already had (duplicates and overlaps)
    out_of_order_segments: int = 0  # segments that arrived ahead of a gap and waited
    unaligned_bytes: int = 0        # bytes before the first frame boundary known for sure
    gaps: int = 0                   # directions ended by data the capture lost
    lost_bytes: int = 0             # bytes that cannot be framed because of such a gap
    cut_at_end: int = 0             # frames still incomplete at the end of the file
    cut_at_close: int = 0           # frames still incomplete when FIN or RST ended them
    non_remoting: int = 0           # directions abandoned at a length prefix out of range
    late_records: int = 0           # records later than sort_window_ns behind (out of time order)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def is_pcap(first_bytes: bytes | bytearray | memoryview) -> bool:
    """True when ``first_bytes`` (the start of a file, 4 bytes or more) is a pcap or
    pcapng header."""
    head = bytes(first_bytes[:4])
    if head in _PCAP_MAGIC:
        return True
    if head != _PCAPNG_SHB:
        return False
    return len(first_bytes) < 12 or bytes(first_bytes[8:12]) in _PCAPNG_BYTE_ORDER


def read_pcap(source: str | bytes | os.PathLike[str] | IO[bytes], **options: Any
              ) -> Iterator[TraceRecord]:
    """Trace records of the remoting frames in a capture (path or binary file);
    ``PcapReader`` (which takes the same ``options``) gives the same records and the
    stats."""
    with PcapReader(source, **options) as reader:
        yield from reader


# ---------------------------------------------------------------- formats

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

# Link types (https://www.tcpdump.org/linktypes.html)
_LINK_NULL, _LINK_ETHERNET, _LINK_LOOP = 0, 1, 108
_LINK_SLL, _LINK_SLL2 = 113, 276
_LINK_RAW = frozenset((101, 12, 14, 228, 229))   # raw IP (12 and 14 are BSD DLT_RAW values)
_ETHERTYPE_IPV4, _ETHERTYPE_IPV6 = 0x0800, 0x86DD
_ETHERTYPE_VLAN = frozenset((0x8100, 0x88A8, 0x9100))   # 802.1Q, 802.1ad (QinQ)

_U16 = struct.Struct("!H")
_IPV4 = struct.Struct("!BxHxxHxB")      # version/IHL, total length, flags/fragment, protocol
_IPV6_PAYLOAD = struct.Struct("!H")     # at offset 4; the next header byte follows it
_TCP = struct.Struct("!HHIIH")          # ports, seq, ack, data offset/flags
_FRAME_START = struct.Struct("!iI")     # length prefix, serialize type << 24 | header length
_INT32 = struct.Struct("!i")

_IPPROTO_TCP = 6
_IPV6_SKIPPED = frozenset((0, 43, 60))  # hop-by-hop, routing, destination options
_IPV6_FRAGMENT, _IPV6_AH = 44, 51

_FIN, _SYN, _RST, _ACK = 0x01, 0x02, 0x04, 0x10
_MASK32, _HALF32 = 0xFFFFFFFF, 0x80000000

# Direction states.
_WAITING = 0   # no frame boundary known yet (no SYN seen)
_OPEN = 1      # aligned: bytes are framed
_LOST = 2      # a gap never filled: what follows is counted as lost
_DONE = 3      # ended by FIN, RST or a bad length: nothing more is decoded

#: A finished connection (RST, or FIN both ways) is remembered this long after its
#: last packet (capture time), for its late retransmissions; then forgotten.
_LINGER_NS = 120 * 1_000_000_000
_SWEEP_EVERY = 4096     # segments between two looks for flows to forget


class _Stream:
    """One direction of a TCP connection: offsets count bytes from the alignment
    point (the byte after the SYN, or the start of the first frame found)."""

    __slots__ = ("flow", "direction", "state", "base", "next_off", "buf", "pending",
                 "pending_bytes", "fin_off", "lost_high")

    def __init__(self, flow: _Flow, direction: int) -> None:
        self.flow = flow
        self.direction = direction
        self.state = _WAITING
        self.base: int | None = None  # sequence number of offset 0, once aligned
        self.next_off = 0        # next byte expected
        self.buf = bytearray()   # delivered bytes of the frame in progress
        self.pending: list[tuple[int, bytes]] = []  # heap: (offset, payload) ahead of a gap
        self.pending_bytes = 0
        self.fin_off: int | None = None
        self.lost_high = 0       # in _LOST: the end of the highest byte seen

    def align(self, seq: int) -> None:
        self.state = _OPEN
        self.base = seq

    def offset(self, seq: int, reference: int) -> int:
        """The offset of ``seq``, taken as the nearest one to ``reference`` (32-bit
        sequence numbers wrap; offsets do not)."""
        delta = ((seq - self.base - reference + _HALF32) & _MASK32) - _HALF32  # type: ignore[operator]
        return reference + delta


class _Flow:
    __slots__ = ("conn", "peer", "client_isn", "streams", "keys", "fins", "last_ns")

    def __init__(self, conn: int, peer: str | None, client_isn: int | None,
                 keys: tuple[_FlowKey, _FlowKey]) -> None:
        self.conn = conn
        self.peer = peer
        self.client_isn = client_isn
        self.streams: tuple[_Stream, ...] = (_Stream(self, IN), _Stream(self, OUT)) if peer else ()
        self.keys = keys            # its two (src, sport, dst, dport) in self._flows
        self.fins = 0               # bit 0: FIN from keys[0]'s source, bit 1: from the other
        self.last_ns = 0


def _address(ip: bytes, port: int) -> str:
    if len(ip) == 4:
        return f"{socket.inet_ntoa(ip)}:{port}"
    return f"[{socket.inet_ntop(socket.AF_INET6, ip)}]:{port}"


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


class PcapReader:
    """Iterate over the trace records of a capture; ``stats`` counts as it goes.

    ``source`` is a path or a binary file (left open). ``server_ports``: connections
    with neither port in it are ignored; ``None`` follows every port (then only a SYN
    tells the client). ``max_frame_length`` as FrameDecoder's (the prefix counts): a
    length prefix below 4, or one making a longer frame, abandons that direction. ``max_reorder_bytes``: the
    out-of-order data one direction may hold before its gap is declared lost.
    ``sort_window_ns``: records come out in time order, each waiting until a packet
    this much later has been read (``None``: sort the whole file).

    The header is read at once: a file that is not a capture raises PcapError here.
    """

    def __init__(self, source: str | bytes | os.PathLike[str] | IO[bytes], *,
                 server_ports: Iterable[int] | None = (9876,),
                 max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
                 max_reorder_bytes: int = DEFAULT_MAX_REORDER_BYTES,
                 sort_window_ns: int | None = DEFAULT_SORT_WINDOW_NS) -> None:
        self.stats = PcapStats()
        self._server_ports = None if server_ports is None else frozenset(server_ports)
        self._max_frame_length = max_frame_length
        self._max_reorder_bytes = max_reorder_bytes
        self._sort_window_ns = sort_window_ns
        # (src, sport, dst, dport) -> (flow, stream of src, or None)
        self._flows: dict[_FlowKey, _FlowEntry] = {}
        # conn -> flow, until it is finished (RST, or FIN both ways)
        self._live: dict[int, _Flow] = {}
        # finished flows, forgotten _LINGER_NS after their last packet
        self._finished: list[_Flow] = []
        self._segments = 0
        self._ready: list[tuple[int, int, TraceRecord]] = []  # heap of (time_ns, order, record)
        self._order = itertools.count()
        self._released_ns = -1 << 63
        if isinstance(source, (str, bytes, os.PathLike)):
            self._file: IO[bytes] = open(source, "rb")
            self._owns_file = True
        else:
            self._file, self._owns_file = source, False
        try:
            self._packets = self._open()
        except BaseException:
            self.close()
            raise
        self._records = self._iterate()

    def __iter__(self) -> Iterator[TraceRecord]:
        return self._records

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owns_file:
            self._file.close()

    # ------------------------------------------------------------ capture files

    def _open(self) -> Iterator[_Packet]:
        reader = _ChunkReader(self._file)
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
            return self._pcap_packets(reader, order, frac_ns, linktype & 0x03FFFFFF)
        if head == _PCAPNG_SHB:
            if len(reader.buf) < 12:
                raise PcapError(f"truncated pcapng section header: {len(reader.buf)} of 12 "
                                "bytes before its byte-order magic")
            if reader.buf[8:12] not in _PCAPNG_BYTE_ORDER:
                raise PcapError("pcapng section header with byte-order magic "
                                f"0x{reader.buf[8:12].hex()} (expected 1a2b3c4d in either order)")
            return self._pcapng_packets(reader)
        if len(head) < 4:
            raise PcapError(f"not a pcap or pcapng file: {len(head)} bytes, "
                            "shorter than a magic number")
        raise PcapError(f"not a pcap or pcapng file: magic 0x{head.hex()}")

    def _pcap_packets(self, reader: _ChunkReader, order: str, frac_ns: int,
                      linktype: int) -> Iterator[_Packet]:
        """(time_ns, linktype, data) of each record of a classic pcap file."""
        header = struct.Struct(order + "IIII")
        stats = self.stats
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

    def _pcapng_packets(self, reader: _ChunkReader) -> Iterator[_Packet]:
        """(time_ns, linktype, data) of each packet block of a pcapng file."""
        stats = self.stats
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
                    interfaces.append(self._interface(order, buf, body, end))
                continue
            if data_start + caplen > end:
                raise PcapError(f"pcapng packet block at offset {reader.offset + pos} claims "
                                f"{caplen} bytes of data in a {blen}-byte block")
            stats.packets += 1
            if caplen < wirelen:
                stats.snapped_packets += 1
            yield time_ns, linktype, buf[data_start:data_start + caplen]

    @staticmethod
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

    # ------------------------------------------------------------ records

    def _iterate(self) -> Iterator[TraceRecord]:
        ready = self._ready
        window = self._sort_window_ns
        newest = -1 << 63
        try:
            for time_ns, linktype, data in self._packets:
                self._packet(time_ns, linktype, data)
                if time_ns > newest:
                    newest = time_ns
                if ready and window is not None:
                    horizon = newest - window
                    while ready and ready[0][0] <= horizon:
                        record = heapq.heappop(ready)[2]
                        self._released_ns = record.time_ns
                        yield record
            self._finish()
            while ready:
                yield heapq.heappop(ready)[2]
        finally:
            self.close()

    def _emit(self, time_ns: int, stream: _Stream, frame: bytes) -> None:
        self.stats.frames += 1
        if time_ns < self._released_ns:
            self.stats.late_records += 1
        flow = stream.flow
        heapq.heappush(self._ready, (time_ns, next(self._order),
                                     TraceRecord(time_ns, flow.conn, flow.peer,  # type: ignore[arg-type]
                                                 stream.direction,
                                                 frame)))

    def _finish(self) -> None:
        """End of the file: what is still waiting will never complete."""
        for flow in self._live.values():
            self._end_streams(flow, at_end=True)

    # ------------------------------------------------------------ dissection

    def _packet(self, time_ns: int, linktype: int, data: bytes) -> None:
        """Find the IPv4 or IPv6 header under the link layer, then the TCP segment."""
        if linktype == _LINK_ETHERNET:
            if len(data) < 14:
                return
            ethertype = data[12] << 8 | data[13]
            off = 14
            while ethertype in _ETHERTYPE_VLAN:
                if len(data) < off + 4:
                    return
                ethertype = data[off + 2] << 8 | data[off + 3]
                off += 4
            if ethertype != _ETHERTYPE_IPV4 and ethertype != _ETHERTYPE_IPV6:
                return
        elif linktype == _LINK_SLL:
            if len(data) < 16 or data[14] << 8 | data[15] not in (_ETHERTYPE_IPV4, _ETHERTYPE_IPV6):
                return
            off = 16
        elif linktype == _LINK_SLL2:
            if len(data) < 20 or data[0] << 8 | data[1] not in (_ETHERTYPE_IPV4, _ETHERTYPE_IPV6):
                return
            off = 20
        elif linktype == _LINK_NULL or linktype == _LINK_LOOP:
            off = 4              # the address family; the IP version nibble says the same
        elif linktype in _LINK_RAW:
            off = 0
        else:
            self.stats.unsupported_link_packets += 1
            return
        size = len(data)
        if size < off + 20:
            return
        version = data[off] >> 4
        if version == 4:
            version_ihl, total, fragment, protocol = _IPV4.unpack_from(data, off)
            ihl = (version_ihl & 0x0F) * 4
            if fragment & 0x3FFF:    # more-fragments flag or an offset: part of a datagram
                self.stats.ip_fragments += 1
                return
            if protocol != _IPPROTO_TCP or ihl < 20:
                return
            # The IP length drops Ethernet padding; 0 is a TSO packet captured before
            # segmentation: its end is the capture's.
            end = min(off + total, size) if total else size
            src, dst = data[off + 12:off + 16], data[off + 16:off + 20]
            tcp = off + ihl
        elif version == 6:
            if size < off + 40:
                return
            (payload_length,) = _IPV6_PAYLOAD.unpack_from(data, off + 4)
            next_header = data[off + 6]
            src, dst = data[off + 8:off + 24], data[off + 24:off + 40]
            end = min(off + 40 + payload_length, size) if payload_length else size
            tcp = off + 40
            while next_header != _IPPROTO_TCP:
                if tcp + 8 > end:
                    return
                if next_header in _IPV6_SKIPPED:
                    next_header, tcp = data[tcp], tcp + (data[tcp + 1] + 1) * 8
                elif next_header == _IPV6_FRAGMENT:
                    if _U16.unpack_from(data, tcp + 2)[0] & 0xFFF9:   # offset or M flag
                        self.stats.ip_fragments += 1
                        return
                    next_header, tcp = data[tcp], tcp + 8   # an atomic fragment is whole
                elif next_header == _IPV6_AH:
                    next_header, tcp = data[tcp], tcp + (data[tcp + 1] + 2) * 4
                else:
                    return
        else:
            return
        if end - tcp < 20:
            return
        sport, dport, seq, ack, offset_flags = _TCP.unpack_from(data, tcp)
        self.stats.tcp_packets += 1
        header_length = (offset_flags >> 12) * 4
        if header_length < 20:
            return
        payload_start = tcp + header_length
        payload = data[payload_start:end] if payload_start < end else b""
        self._segment(time_ns, src, sport, dst, dport, seq, ack, offset_flags & 0xFF, payload)

    # ------------------------------------------------------------ TCP

    def _segment(self, time_ns: int, src: bytes, sport: int, dst: bytes, dport: int, seq: int,
                 ack: int, flags: int, payload: bytes) -> None:
        key = (src, sport, dst, dport)
        entry = self._flows.get(key)
        # A SYN that is not the connection's own (retransmitted) SYN starts a new one
        # on the same addresses and ports.
        if entry is None or (flags & (_SYN | _ACK) == _SYN and entry[0].client_isn != seq):
            ports = self._server_ports
            if ports is not None and sport not in ports and dport not in ports:
                return
            if entry is not None:
                self._end_flow(entry[0])
            entry = self._new_flow(src, sport, dst, dport, seq, ack, flags)
        flow, stream = entry
        flow.last_ns = time_ns
        self._segments += 1
        if self._segments % _SWEEP_EVERY == 0:
            self._forget(time_ns - _LINGER_NS)
        if flags & _RST:
            if stream is None:
                self.stats.unaligned_bytes += len(payload)
            self._end_flow(flow)
            return
        if flags & _FIN:
            flow.fins |= 1 if key == flow.keys[0] else 2
        self._follow(time_ns, stream, seq, flags, payload)
        if flow.fins == 3 and all(s.state != _OPEN for s in flow.streams):
            self._mark_finished(flow)

    def _mark_finished(self, flow: _Flow) -> None:
        """RST, or FIN both ways with nothing left to reassemble: no longer live."""
        if self._live.pop(flow.conn, None) is not None:
            self._finished.append(flow)

    def _forget(self, horizon_ns: int) -> None:
        """Drop the finished flows silent since ``horizon_ns``, as TCP's TIME_WAIT
        ends: a capture of many connections keeps only the recent ones. A packet of a
        forgotten flow is taken as a new connection's."""
        keep = []
        for flow in self._finished:
            if flow.last_ns >= horizon_ns:
                keep.append(flow)
                continue
            for key in flow.keys:
                entry = self._flows.get(key)
                if entry is not None and entry[0] is flow:
                    del self._flows[key]
        self._finished = keep

    def _follow(self, time_ns: int, stream: _Stream | None, seq: int, flags: int,
                payload: bytes) -> None:
        if stream is None:
            self.stats.unaligned_bytes += len(payload)
            return
        if flags & _SYN:
            seq = (seq + 1) & _MASK32    # the SYN takes one sequence number
            if stream.state == _WAITING:
                stream.align(seq)
        state = stream.state
        if state == _WAITING:
            if payload:
                if self._starts_frame(payload):
                    stream.align(seq)
                    state = _OPEN
                else:
                    self.stats.unaligned_bytes += len(payload)
            if state == _WAITING:
                if flags & _FIN:
                    stream.state = _DONE
                return
        if state == _OPEN:
            start = stream.offset(seq, stream.next_off)
            if payload:
                self._place(stream, time_ns, start, payload)
            if flags & _FIN:
                stream.fin_off = start + len(payload)
            if stream.fin_off is not None and stream.state == _OPEN \
                    and stream.next_off >= stream.fin_off:
                if stream.buf:
                    self.stats.cut_at_close += 1
                self._drop(stream, _DONE)
        elif state == _LOST:
            high = stream.lost_high
            start = stream.offset(seq, high)
            end = start + len(payload)
            new = max(0, end - max(start, high))
            self.stats.lost_bytes += new
            self.stats.retransmitted_bytes += len(payload) - new
            if end > high:
                stream.lost_high = end
        elif payload:    # _DONE: only retransmissions of what came before the end count
            if stream.base is None:
                self.stats.unaligned_bytes += len(payload)
            else:
                start = stream.offset(seq, stream.next_off)
                self.stats.retransmitted_bytes += max(0, min(len(payload), stream.next_off - start))

    def _new_flow(self, src: bytes, sport: int, dst: bytes, dport: int, seq: int, ack: int,
                  flags: int) -> _FlowEntry:
        if flags & _SYN:
            client_is_src = not flags & _ACK
        elif self._server_ports is None:
            client_is_src = None
        else:
            to_server = dport in self._server_ports
            from_server = sport in self._server_ports
            client_is_src = to_server if to_server != from_server else None
        stats = self.stats
        stats.flows += 1
        keys = ((src, sport, dst, dport), (dst, dport, src, sport))
        forward: _FlowEntry
        backward: _FlowEntry
        if client_is_src is None:
            stats.unknown_client_flows += 1
            flow = _Flow(stats.flows, None, None, keys)
            forward = backward = (flow, None)
        else:
            # The SYN-ACK acknowledges the client's SYN: its ISN is known either way.
            if flags & _SYN:
                client_isn = seq if client_is_src else (ack - 1) & _MASK32
            else:
                client_isn = None
            peer = _address(src, sport) if client_is_src else _address(dst, dport)
            flow = _Flow(stats.flows, peer, client_isn, keys)
            inbound, outbound = flow.streams
            forward = (flow, inbound if client_is_src else outbound)
            backward = (flow, outbound if client_is_src else inbound)
        self._flows[keys[0]] = forward
        self._flows[keys[1]] = backward
        self._live[flow.conn] = flow
        return forward

    def _end_flow(self, flow: _Flow) -> None:
        """RST (or a new connection on the same ports): both directions end here."""
        self._mark_finished(flow)
        self._end_streams(flow, at_end=False)

    def _end_streams(self, flow: _Flow, at_end: bool) -> None:
        """What is still waiting in ``flow`` will never complete: lost behind a gap,
        or a frame cut by the end of the file or the connection."""
        for stream in flow.streams:
            if stream.state == _OPEN:
                if stream.pending:
                    self._lose(stream)
                elif stream.buf:
                    if at_end:
                        self.stats.cut_at_end += 1
                    else:
                        self.stats.cut_at_close += 1
            self._drop(stream, _DONE)

    def _starts_frame(self, payload: bytes) -> bool:
        """Whether a segment (of a direction whose SYN we missed) starts like a frame."""
        if len(payload) < 9:
            return False
        length, word = _FRAME_START.unpack_from(payload)
        header_length = word & 0xFFFFFF
        if length < 4 or length + 4 > self._max_frame_length or header_length > length - 4:
            return False
        serialize_type = word >> 24
        if serialize_type == 0:
            return header_length >= 2 and payload[8] == 0x7B          # "{"
        # ROCKETMQ: code (2 bytes), then the language byte; the fixed part is 21 bytes.
        return (serialize_type == 1 and header_length >= 21 and len(payload) > 10
                and payload[10] < len(LANGUAGES))

    def _place(self, stream: _Stream, time_ns: int, start: int, payload: bytes) -> None:
        if start > stream.next_off:
            self.stats.out_of_order_segments += 1
            heapq.heappush(stream.pending, (start, payload))
            stream.pending_bytes += len(payload)
            if stream.pending_bytes > self._max_reorder_bytes:
                self._lose(stream)
            return
        self._take(stream, time_ns, start, payload)
        pending = stream.pending
        while pending and pending[0][0] <= stream.next_off and stream.state == _OPEN:
            start, payload = heapq.heappop(pending)
            stream.pending_bytes -= len(payload)
            self._take(stream, time_ns, start, payload)

    def _take(self, stream: _Stream, time_ns: int, start: int, payload: bytes) -> None:
        """Data starting at or before ``next_off``: the part already had is counted,
        the rest delivered."""
        next_off = stream.next_off
        if start < next_off:
            old_end = min(start + len(payload), next_off)
            # Below offset 0 is before the alignment point: never had, never decoded.
            before = min(old_end, 0) - start if start < 0 else 0
            self.stats.unaligned_bytes += before
            self.stats.retransmitted_bytes += old_end - start - before
            payload = payload[old_end - start:]
            if not payload:
                return
        self._deliver(stream, time_ns, payload)

    def _deliver(self, stream: _Stream, time_ns: int, data: bytes | bytearray) -> None:
        """In-order bytes: complete frames are emitted, the rest waits in ``buf``."""
        stream.next_off += len(data)
        buf = stream.buf
        if buf:
            buf += data
            data = buf
        pos, size = 0, len(data)
        while size - pos >= 4:
            (length,) = _INT32.unpack_from(data, pos)
            if length < 4 or length + 4 > self._max_frame_length:
                self.stats.non_remoting += 1
                self._drop(stream, _DONE)
                return
            end = pos + 4 + length
            if end > size:
                break
            frame = data if pos == 0 and end == size else data[pos:end]
            self._emit(time_ns, stream, bytes(frame))
            pos = end
        if data is buf:
            del buf[:pos]
        elif pos < size:
            buf += memoryview(data)[pos:]

    def _lose(self, stream: _Stream) -> None:
        """The gap before ``pending`` will not be filled: the frame in progress and
        every byte after the gap are lost."""
        lost, covered_to = len(stream.buf), stream.next_off
        for start, payload in sorted(stream.pending):
            end = start + len(payload)
            new = max(0, end - max(start, covered_to))
            lost += new
            self.stats.retransmitted_bytes += len(payload) - new
            covered_to = max(covered_to, end)
        self.stats.gaps += 1
        self.stats.lost_bytes += lost
        self._drop(stream, _LOST)
        stream.lost_high = covered_to

    @staticmethod
    def _drop(stream: _Stream, state: int) -> None:
        stream.state = state
        stream.buf = bytearray()
        stream.pending = []
        stream.pending_bytes = 0
