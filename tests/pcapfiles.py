"""Capture files built by hand for the pcap tests: TCP segments in IPv4 or IPv6, in
Ethernet (with VLAN tags), Linux cooked (SLL, SLL2), BSD loopback or raw IP, written
as classic pcap (either byte order, micro- or nanosecond) or pcapng. Built with
``struct`` from the formats' specifications, independently of rmq.trace.pcap."""

import socket
import struct

# Link types
NULL, ETHERNET, RAW, LOOP, SLL, SLL2 = 0, 1, 101, 108, 113, 276

FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10


def _ip_bytes(addr):
    return socket.inet_pton(socket.AF_INET6 if ":" in addr else socket.AF_INET, addr)


def tcp_segment(sport, dport, seq, ack=0, flags=ACK, payload=b"", options=b""):
    """A TCP header (checksum 0: readers do not check it) and its payload."""
    assert len(options) % 4 == 0
    offset = (20 + len(options)) // 4
    return struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
                       offset << 4, flags, 65535, 0, 0) + options + payload


def ipv4(src, dst, l4, protocol=6, fragment=0, options=b""):
    """An IPv4 packet; ``fragment`` is the flags/offset word (0x2000: more fragments)."""
    assert len(options) % 4 == 0
    ihl = 5 + len(options) // 4
    return struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, ihl * 4 + len(l4), 0, fragment, 64,
                       protocol, 0, _ip_bytes(src), _ip_bytes(dst)) + options + l4


def ipv6(src, dst, l4, next_header=6, extensions=()):
    """An IPv6 packet; ``extensions`` are (type, bytes) headers whose first byte (the
    next header) is filled in here."""
    chain = b""
    types = [t for t, _ in extensions] + [next_header]
    for i, (_, body) in enumerate(extensions):
        chain += bytes([types[i + 1]]) + body[1:]
    first = types[0]
    return struct.pack("!IHBB16s16s", 6 << 28, len(chain) + len(l4), first, 64,
                       _ip_bytes(src), _ip_bytes(dst)) + chain + l4


def hop_by_hop(n_units=0):
    """A hop-by-hop or destination options header of (n_units + 1) * 8 bytes (PadN)."""
    pad = (n_units + 1) * 8 - 2
    return bytes([0, n_units]) + bytes([1, pad - 2]) + bytes(pad - 2)


def fragment_header(offset=0, more=False):
    return struct.pack("!BBHI", 0, 0, (offset << 3) | int(more), 1234)


def ethertype_of(ip):
    return 0x86DD if ip[0] >> 4 == 6 else 0x0800


def ethernet(ip, vlans=()):
    """Ethernet II with optional 802.1Q tags, padded to the 60-byte minimum as a NIC
    does (so a reader must trust the IP length, not the frame's)."""
    tags = b"".join(struct.pack("!HH", tpid, vid) for tpid, vid in vlans)
    frame = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + tags + \
        struct.pack("!H", ethertype_of(ip)) + ip
    return frame + bytes(max(0, 60 - len(frame)))


def sll(ip):
    return struct.pack("!HHH8sH", 0, 772, 6, bytes(8), ethertype_of(ip)) + ip


def sll2(ip):
    return struct.pack("!HHIHBB8s", ethertype_of(ip), 0, 1, 772, 0, 6, bytes(8)) + ip


def null(ip):
    """BSD loopback: the address family in the capturing host's (here little) byte order."""
    return struct.pack("<I", 30 if ip[0] >> 4 == 6 else 2) + ip


def loop(ip):
    """OpenBSD loopback: the address family in network byte order."""
    return struct.pack("!I", 24 if ip[0] >> 4 == 6 else 2) + ip


LINK_WRAPPERS = {ETHERNET: ethernet, SLL: sll, SLL2: sll2, NULL: null, LOOP: loop,
                 RAW: lambda ip: ip}


# ---------------------------------------------------------------- files

def pcap(packets, linktype=ETHERNET, *, order="<", nanoseconds=False, snaplen=262144):
    """A classic pcap file of ``packets``: (time_ns, link-layer bytes[, wire length])."""
    magic = 0xA1B23C4D if nanoseconds else 0xA1B2C3D4
    out = [struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)]
    for packet in packets:
        time_ns, data = packet[0], packet[1]
        wire = packet[2] if len(packet) > 2 else len(data)
        sec, rest = divmod(time_ns, 1_000_000_000)
        frac = rest if nanoseconds else rest // 1000
        out.append(struct.pack(order + "IIII", sec, frac, len(data), wire) + data)
    return b"".join(out)


def _options(order, options):
    out = b""
    for code, value in options:
        out += struct.pack(order + "HH", code, len(value)) + value + bytes(-len(value) % 4)
    return out + struct.pack(order + "HH", 0, 0) if options else b""


def block(order, btype, body):
    body += bytes(-len(body) % 4)
    length = len(body) + 12
    return struct.pack(order + "II", btype, length) + body + struct.pack(order + "I", length)


def section_header(order="<"):
    return block(order, 0x0A0D0D0A, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1) +
                 _options(order, [(4, b"rmq tests")]))


def interface_description(order="<", linktype=ETHERNET, tsresol=None, tsoffset=None):
    options = []
    if tsresol is not None:
        options.append((9, bytes([tsresol])))
    if tsoffset is not None:
        options.append((14, struct.pack(order + "q", tsoffset)))
    return block(order, 1, struct.pack(order + "HHI", linktype, 0, 262144) +
                 _options(order, options))


def units_of(tsresol):
    return 1 << (tsresol & 0x7F) if tsresol & 0x80 else 10 ** tsresol


def enhanced_packet(order, time_ns, data, *, interface=0, tsresol=6, tsoffset=0):
    ts = (time_ns - tsoffset * 1_000_000_000) * units_of(tsresol) // 1_000_000_000
    return block(order, 6, struct.pack(order + "IIIII", interface, ts >> 32, ts & 0xFFFFFFFF,
                                       len(data), len(data)) + data +
                 _options(order, [(1, b"a comment")]))


def obsolete_packet(order, time_ns, data, *, interface=0, tsresol=6):
    ts = time_ns * units_of(tsresol) // 1_000_000_000
    return block(order, 2, struct.pack(order + "HHIIII", interface, 0, ts >> 32,
                                       ts & 0xFFFFFFFF, len(data), len(data)) + data)


def simple_packet(order, data):
    return block(order, 3, struct.pack(order + "I", len(data)) + data)


def pcapng(packets, linktype=ETHERNET, *, order="<", tsresol=None, kinds=None):
    """A pcapng file: one section, one interface, each packet in an EPB (or the kind
    ``kinds[i]`` names: "epb", "opb", "spb"); an unknown block and a name resolution
    block in between, which a reader skips."""
    out = [section_header(order), interface_description(order, linktype, tsresol),
           block(order, 0x0BAD0BAD, b"not a known block"),
           block(order, 4, struct.pack(order + "HH", 0, 0))]
    resolution = 6 if tsresol is None else tsresol
    for i, (time_ns, data) in enumerate(packets):
        kind = kinds[i] if kinds else "epb"
        if kind == "epb":
            out.append(enhanced_packet(order, time_ns, data, tsresol=resolution))
        elif kind == "opb":
            out.append(obsolete_packet(order, time_ns, data, tsresol=resolution))
        else:
            out.append(simple_packet(order, data))
    return b"".join(out)


# ---------------------------------------------------------------- TCP connections

class Connection:
    """Both ends of one TCP connection: each call returns one IP packet and moves that
    side's sequence number on (unless ``seq`` is given, as for a retransmission)."""

    def __init__(self, client=("10.0.0.1", 40000), server=("10.0.0.2", 9876),
                 client_isn=1000, server_isn=500000):
        self.ends = {"c": client, "s": server}
        self.next_seq = {"c": client_isn, "s": server_isn}
        self.ipv6 = ":" in client[0]

    def packet(self, side, payload=b"", flags=PSH | ACK, *, seq=None):
        other = "s" if side == "c" else "c"
        (src, sport), (dst, dport) = self.ends[side], self.ends[other]
        if seq is None:
            seq = self.next_seq[side]
            self.next_seq[side] = (seq + len(payload) + bool(flags & (SYN | FIN))) & 0xFFFFFFFF
        ack = self.next_seq[other] if flags & ACK else 0
        segment = tcp_segment(sport, dport, seq, ack, flags, payload)
        return ipv6(src, dst, segment) if self.ipv6 else ipv4(src, dst, segment)

    def handshake(self):
        return [self.packet("c", flags=SYN), self.packet("s", flags=SYN | ACK),
                self.packet("c", flags=ACK)]

    def close(self):
        return [self.packet("c", flags=FIN | ACK), self.packet("s", flags=FIN | ACK),
                self.packet("c", flags=ACK)]


def timed(ip_packets, start_ns=1_700_000_000_000_000_000, step_ns=1_000_000, link=ETHERNET):
    """(time_ns, link-layer bytes) of IP packets, ``step_ns`` apart."""
    wrap = LINK_WRAPPERS[link]
    return [(start_ns + i * step_ns, wrap(ip)) for i, ip in enumerate(ip_packets)]
