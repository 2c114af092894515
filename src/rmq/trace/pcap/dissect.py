"""Packet dissection: the TCP segment in a captured packet, under its link layer
(Ethernet with VLAN tags, Linux cooked v1/v2, BSD loopback, raw IP) and IPv4 or IPv6
(extension headers skipped). IP fragments are counted and skipped: never reassembled.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rmq.trace.pcap import PcapStats

__all__ = ["Segment", "tcp_segment"]

#: (src, sport, dst, dport, seq, ack, flags, payload) of a TCP segment
Segment = tuple[bytes, int, bytes, int, int, int, int, bytes]

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

_IPPROTO_TCP = 6
_IPV6_SKIPPED = frozenset((0, 43, 60))  # hop-by-hop, routing, destination options
_IPV6_FRAGMENT, _IPV6_AH = 44, 51


def tcp_segment(linktype: int, data: bytes, stats: PcapStats) -> Segment | None:
    """The TCP segment in one captured packet: the IPv4 or IPv6 header found under
    the link layer, then the TCP header; None for anything else."""
    if linktype == _LINK_ETHERNET:
        if len(data) < 14:
            return None
        ethertype = data[12] << 8 | data[13]
        off = 14
        while ethertype in _ETHERTYPE_VLAN:
            if len(data) < off + 4:
                return None
            ethertype = data[off + 2] << 8 | data[off + 3]
            off += 4
        if ethertype != _ETHERTYPE_IPV4 and ethertype != _ETHERTYPE_IPV6:
            return None
    elif linktype == _LINK_SLL:
        if len(data) < 16 or data[14] << 8 | data[15] not in (_ETHERTYPE_IPV4, _ETHERTYPE_IPV6):
            return None
        off = 16
    elif linktype == _LINK_SLL2:
        if len(data) < 20 or data[0] << 8 | data[1] not in (_ETHERTYPE_IPV4, _ETHERTYPE_IPV6):
            return None
        off = 20
    elif linktype == _LINK_NULL or linktype == _LINK_LOOP:
        off = 4              # the address family; the IP version nibble says the same
    elif linktype in _LINK_RAW:
        off = 0
    else:
        stats.unsupported_link_packets += 1
        return None
    size = len(data)
    if size < off + 20:
        return None
    version = data[off] >> 4
    if version == 4:
        version_ihl, total, fragment, protocol = _IPV4.unpack_from(data, off)
        ihl = (version_ihl & 0x0F) * 4
        if fragment & 0x3FFF:    # more-fragments flag or an offset: part of a datagram
            stats.ip_fragments += 1
            return None
        if protocol != _IPPROTO_TCP or ihl < 20:
            return None
        # The IP length drops Ethernet padding; 0 is a TSO packet captured before
        # segmentation: its end is the capture's.
        end = min(off + total, size) if total else size
        src, dst = data[off + 12:off + 16], data[off + 16:off + 20]
        tcp = off + ihl
    elif version == 6:
        if size < off + 40:
            return None
        (payload_length,) = _IPV6_PAYLOAD.unpack_from(data, off + 4)
        next_header = data[off + 6]
        src, dst = data[off + 8:off + 24], data[off + 24:off + 40]
        end = min(off + 40 + payload_length, size) if payload_length else size
        tcp = off + 40
        while next_header != _IPPROTO_TCP:
            if tcp + 8 > end:
                return None
            if next_header in _IPV6_SKIPPED:
                next_header, tcp = data[tcp], tcp + (data[tcp + 1] + 1) * 8
            elif next_header == _IPV6_FRAGMENT:
                if _U16.unpack_from(data, tcp + 2)[0] & 0xFFF9:   # offset or M flag
                    stats.ip_fragments += 1
                    return None
                next_header, tcp = data[tcp], tcp + 8   # an atomic fragment is whole
            elif next_header == _IPV6_AH:
                next_header, tcp = data[tcp], tcp + (data[tcp + 1] + 2) * 4
            else:
                return None
    else:
        return None
    if end - tcp < 20:
        return None
    sport, dport, seq, ack, offset_flags = _TCP.unpack_from(data, tcp)
    stats.tcp_packets += 1
    header_length = (offset_flags >> 12) * 4
    if header_length < 20:
        return None
    payload_start = tcp + header_length
    payload = data[payload_start:end] if payload_start < end else b""
    return src, sport, dst, dport, seq, ack, offset_flags & 0xFF, payload
