"""RocketMQ remoting frames out of tcpdump captures (pcap and pcapng).

Each frame comes out as a trace record, the shape of rmq's own trace segments::

    (time_ns, conn, peer, direction, frame)

``time_ns`` is the capture time of the packet that completed the frame, ``conn`` a
small id per TCP connection (1, 2, ... in order of first appearance), ``peer`` the
client's "ip:port" ("[v6addr]:port"), ``direction`` IN (client to server) or OUT, and
``frame`` the whole frame, its 4-byte length prefix included.

The stages, each its own module: :mod:`.formats` (the capture file's packets),
:mod:`.dissect` (each packet's TCP segment), :mod:`.reassembly` (TCP streams rebuilt
and cut into frames; what cannot be placed with certainty is counted in
``PcapReader.stats``, never decoded); :class:`PcapReader` here runs them and puts the
records in time order. Pure Python (its speed is not measured yet).
"""

from __future__ import annotations

import heapq
import itertools
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import IO, TYPE_CHECKING, Any, NamedTuple

from rmq.protocol import DEFAULT_MAX_FRAME_LENGTH, IN, OUT
from rmq.trace.pcap.dissect import tcp_segment
from rmq.trace.pcap.formats import CAPTURE_MAGICS, PcapError, is_pcap, open_packets
from rmq.trace.pcap.reassembly import DEFAULT_MAX_REORDER_BYTES, TcpReassembler

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["IN", "OUT", "PcapError", "PcapReader", "PcapStats", "TraceRecord",
           "is_pcap", "read_pcap", "CAPTURE_MAGICS", "DEFAULT_MAX_REORDER_BYTES",
           "DEFAULT_SORT_WINDOW_NS"]

#: Default for ``sort_window_ns``: captures on several CPUs or interfaces jitter by
#: microseconds to milliseconds; records wait this long for earlier ones.
DEFAULT_SORT_WINDOW_NS = 1_000_000_000


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


class TraceRecord(NamedTuple):
    time_ns: int
    conn: int
    peer: str
    direction: int
    frame: bytes


def read_pcap(source: str | bytes | os.PathLike[str] | IO[bytes], **options: Any
              ) -> Iterator[TraceRecord]:
    """Trace records of the remoting frames in a capture (path or binary file);
    ``PcapReader`` (which takes the same ``options``) gives the same records and the
    stats."""
    with PcapReader(source, **options) as reader:
        yield from reader


class PcapReader:
    """Iterate over the trace records of a capture; ``stats`` counts as it goes.

    ``source`` is a path or a binary file (left open). ``server_ports``: connections
    with neither port in it are ignored; ``None`` follows every port (then only a SYN
    tells the client). ``max_frame_length`` as FrameDecoder's (the prefix counts): a
    length prefix below 4, or one making a longer frame, abandons that direction.
    ``max_reorder_bytes``: the out-of-order data one direction may hold before its
    gap is declared lost.
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
        self._tcp = TcpReassembler(self.stats, self._emit, server_ports, max_frame_length,
                                   max_reorder_bytes)
        self._sort_window_ns = sort_window_ns
        self._ready: list[tuple[int, int, TraceRecord]] = []  # heap of (time_ns, order, record)
        self._order = itertools.count()
        self._released_ns = -1 << 63
        if isinstance(source, (str, bytes, os.PathLike)):
            self._file: IO[bytes] = open(source, "rb")
            self._owns_file = True
        else:
            self._file, self._owns_file = source, False
        try:
            self._packets = open_packets(self._file, self.stats)
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

    # ------------------------------------------------------------ records

    def _iterate(self) -> Iterator[TraceRecord]:
        ready = self._ready
        window = self._sort_window_ns
        newest = -1 << 63
        stats = self.stats
        feed = self._tcp.segment
        try:
            for time_ns, linktype, data in self._packets:
                segment = tcp_segment(linktype, data, stats)
                if segment is not None:
                    feed(time_ns, *segment)
                if time_ns > newest:
                    newest = time_ns
                if ready and window is not None:
                    horizon = newest - window
                    while ready and ready[0][0] <= horizon:
                        record = heapq.heappop(ready)[2]
                        self._released_ns = record.time_ns
                        yield record
            self._tcp.finish()
            while ready:
                yield heapq.heappop(ready)[2]
        finally:
            self.close()

    def _emit(self, time_ns: int, conn: int, peer: str, direction: int, frame: bytes) -> None:
        if time_ns < self._released_ns:
            self.stats.late_records += 1
        heapq.heappush(self._ready, (time_ns, next(self._order),
                                     TraceRecord(time_ns, conn, peer, direction, frame)))
