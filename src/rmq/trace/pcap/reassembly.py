"""TCP reassembly: the two streams of each connection rebuilt from sequence numbers
and cut into frames.

Nothing is guessed: bytes that cannot be placed in a stream with certainty are counted
in the stats and never decoded. A direction is aligned on frames by its SYN; without
one (the capture started mid-stream) it is aligned at the first segment whose payload
starts like a frame (length in range, a known serialize type, a JSON header opening
with ``{`` or a binary header with a known language) and the bytes before are counted
as unaligned. A gap that is never filled (a packet the capture lost) ends the
direction: the bytes after it are counted as lost. Frames are cut by the codec's
FrameSplitter, the length checks the server's.
"""

from __future__ import annotations

import heapq
import socket
import struct
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from rmq.codec import FrameSplitter
from rmq.errors import ProtocolError
from rmq.protocol import IN, LANGUAGES, OUT

if TYPE_CHECKING:
    from rmq.trace.pcap import PcapStats

__all__ = ["DEFAULT_MAX_REORDER_BYTES", "TcpReassembler"]

#: (src, sport, dst, dport) of a TCP segment
_FlowKey = tuple[bytes, int, bytes, int]
#: A flow's entry in TcpReassembler._flows: the flow, and the stream of the key's source
_FlowEntry = tuple["_Flow", "_Stream | None"]
#: What a frame is handed to: (time_ns, conn, peer, direction, frame)
Emit = Callable[[int, int, str, int, bytes], None]

#: Default for ``max_reorder_bytes``: above any real TCP window, so only a packet the
#: capture lost holds this much out-of-order data of one direction.
DEFAULT_MAX_REORDER_BYTES = 32 * 1024 * 1024
_FRAME_START = struct.Struct("!iI")     # length prefix, serialize type << 24 | header length

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

    __slots__ = ("flow", "direction", "state", "base", "next_off", "splitter", "pending",
                 "pending_bytes", "fin_off", "lost_high")

    def __init__(self, flow: _Flow, direction: int) -> None:
        self.flow = flow
        self.direction = direction
        self.state = _WAITING
        self.base: int | None = None  # sequence number of offset 0, once aligned
        self.next_off = 0        # next byte expected
        self.splitter: FrameSplitter | None = None  # once aligned: holds the frame in progress
        self.pending: list[tuple[int, bytes]] = []  # heap: (offset, payload) ahead of a gap
        self.pending_bytes = 0
        self.fin_off: int | None = None
        self.lost_high = 0       # in _LOST: the end of the highest byte seen

    def align(self, seq: int, max_frame_length: int) -> None:
        self.state = _OPEN
        self.base = seq
        self.splitter = FrameSplitter(max_frame_length)

    @property
    def buffered(self) -> int:
        """Delivered bytes of the frame in progress."""
        return self.splitter.buffered if self.splitter is not None else 0

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


class TcpReassembler:
    """Follows the TCP connections of a capture, segment by segment (:meth:`segment`),
    and hands each complete frame to ``emit``; :meth:`finish` at the end of the file.
    The options are PcapReader's."""

    def __init__(self, stats: PcapStats, emit: Emit, server_ports: Iterable[int] | None,
                 max_frame_length: int, max_reorder_bytes: int) -> None:
        self.stats = stats
        self._emit = emit
        self._server_ports = None if server_ports is None else frozenset(server_ports)
        self._max_frame_length = max_frame_length
        self._max_reorder_bytes = max_reorder_bytes
        # (src, sport, dst, dport) -> (flow, stream of src, or None)
        self._flows: dict[_FlowKey, _FlowEntry] = {}
        # conn -> flow, until it is finished (RST, or FIN both ways)
        self._live: dict[int, _Flow] = {}
        # finished flows, forgotten _LINGER_NS after their last packet
        self._finished: list[_Flow] = []
        self._segments = 0

    def finish(self) -> None:
        """End of the file: what is still waiting will never complete."""
        for flow in self._live.values():
            self._end_streams(flow, at_end=True)

    def segment(self, time_ns: int, src: bytes, sport: int, dst: bytes, dport: int, seq: int,
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
                stream.align(seq, self._max_frame_length)
        state = stream.state
        if state == _WAITING:
            if payload:
                if self._starts_frame(payload):
                    stream.align(seq, self._max_frame_length)
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
                if stream.buffered:
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
                elif stream.buffered:
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

    def _deliver(self, stream: _Stream, time_ns: int, data: bytes) -> None:
        """In-order bytes: complete frames are emitted, the rest waits in the splitter."""
        stream.next_off += len(data)
        try:
            frames = stream.splitter.feed(data)  # type: ignore[union-attr]  # aligned: it has one
            remoting = True
        except ProtocolError as e:      # a length out of range: not remoting traffic
            frames, remoting = e.decoded, False
        flow = stream.flow
        for frame in frames:
            if len(frame) < 8:          # a length prefix below 4: no room for a header length
                remoting = False
                break
            self.stats.frames += 1
            self._emit(time_ns, flow.conn, flow.peer, stream.direction, frame)  # type: ignore[arg-type]
        if not remoting:
            self.stats.non_remoting += 1
            self._drop(stream, _DONE)

    def _lose(self, stream: _Stream) -> None:
        """The gap before ``pending`` will not be filled: the frame in progress and
        every byte after the gap are lost."""
        lost, covered_to = stream.buffered, stream.next_off
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
        stream.splitter = None
        stream.pending = []
