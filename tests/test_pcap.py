"""rmq.trace.pcap: remoting frames out of pcap and pcapng captures, as trace records.

The captures are built here packet by packet (tests/pcapfiles.py) around real rmq
frames; one test captures a real session with tcpdump when it can."""

import io
import os
import signal
import subprocess
import threading
import time

import pytest

import parts

import rmq
from nameserver import Client, register_broker, running_namesrv
from pcapfiles import (ACK, ETHERNET, FIN, LINK_WRAPPERS, LOOP, NULL, PSH, RAW, RST, SLL, SLL2,
                       Connection, block, enhanced_packet, ethernet, fragment_header, hop_by_hop,
                       interface_description, ipv4, ipv6, pcap, pcapng, section_header,
                       tcp_segment, timed)
from rmq.errors import RmqError
from rmq.trace.pcap import (IN, OUT, PcapError, PcapReader, PcapStats, TraceRecord, is_pcap,
                            read_pcap)

T0 = 1_700_000_000_000_000_000
STEP = 1_000_000
PEER = "10.0.0.1:40000"


def route_request(topic="T"):
    return rmq.encode_frame(rmq.RemotingCommand.request(105, {"topic": topic}))


def answer(request_frame, code=0, body=b""):
    return rmq.encode_frame(rmq.decode_frame(request_frame).response(code, body=body))


def register_request(n_topics=60):
    """A REGISTER_BROKER frame of a few KiB: it needs several segments."""
    from rmq.bodies import encode_register_broker_body, register_broker_body, topic_config
    body = encode_register_broker_body(register_broker_body(
        [topic_config(f"Topic{i}", 8, 8) for i in range(n_topics)],
        {"counter": 1, "stateVersion": 0, "timestamp": 1700000000000}))
    return rmq.encode_frame(rmq.RemotingCommand.request(
        103, {"brokerName": "b", "brokerAddr": "10.0.0.2:10911", "clusterName": "c"}, body))


def read(capture, **options):
    reader = PcapReader(io.BytesIO(capture), **options)
    return list(reader), reader.stats


def at(i):
    """The capture time of packet i of ``timed()``."""
    return T0 + i * STEP


def counts(**nonzero):
    """Every stats counter: those named, and 0 for all the others."""
    return {**PcapStats().as_dict(), **nonzero}


def exchange(conn, request, response):
    """Handshake, one request and its answer, close: packets 3 and 4 carry the frames."""
    return conn.handshake() + [conn.packet("c", request), conn.packet("s", response)] + conn.close()


# ---------------------------------------------------------------- formats and link types

def _expected_time(time_ns, units_per_second):
    return time_ns * units_per_second // 1_000_000_000 * 1_000_000_000 // units_per_second


FORMATS = {
    "pcap-le-usec": (lambda p: pcap(p), 10 ** 6),
    "pcap-be-usec": (lambda p: pcap(p, order=">"), 10 ** 6),
    "pcap-le-nsec": (lambda p: pcap(p, nanoseconds=True), 10 ** 9),
    "pcap-be-nsec": (lambda p: pcap(p, order=">", nanoseconds=True), 10 ** 9),
    "pcapng-le-default-usec": (lambda p: pcapng(p), 10 ** 6),
    "pcapng-be-default-usec": (lambda p: pcapng(p, order=">"), 10 ** 6),
    "pcapng-le-nsec": (lambda p: pcapng(p, tsresol=9), 10 ** 9),
    "pcapng-be-msec": (lambda p: pcapng(p, order=">", tsresol=3), 10 ** 3),
    "pcapng-le-2^-20": (lambda p: pcapng(p, tsresol=0x80 | 20), 1 << 20),
    "pcapng-be-opb": (lambda p: pcapng(p, order=">", kinds=["opb"] * len(p)), 10 ** 6),
}


@pytest.mark.parametrize("fmt", FORMATS)
def test_formats_give_the_frames_and_capture_times(fmt):
    write, units = FORMATS[fmt]
    req = route_request()
    resp = answer(req, 17)
    packets = timed(exchange(Connection(), req, resp), start_ns=T0 + 123_456_789)
    records, stats = read(write(packets))
    assert records == [
        TraceRecord(_expected_time(packets[3][0], units), 1, PEER, IN, req),
        TraceRecord(_expected_time(packets[4][0], units), 1, PEER, OUT, resp),
    ]
    assert stats.as_dict() == counts(packets=8, tcp_packets=8, flows=1, frames=2)


def test_pcapng_simple_packet_blocks_take_the_last_known_time():
    req, req2 = route_request(), route_request("U")
    conn = Connection()
    ips = conn.handshake() + [conn.packet("c", req), conn.packet("c", req2)]
    packets = timed(ips)
    records, _ = read(pcapng(packets, kinds=["epb"] * 4 + ["spb"]))
    assert records == [TraceRecord(at(3), 1, PEER, IN, req), TraceRecord(at(3), 1, PEER, IN, req2)]


def test_pcapng_interface_time_offset_and_second_section():
    """if_tsoffset adds seconds; a second section (big-endian here) starts its own
    interface table."""
    req, resp = route_request(), None
    resp = answer(req)
    conn = Connection()
    ips = conn.handshake() + [conn.packet("c", req), conn.packet("s", resp)]
    first = section_header("<") + interface_description("<", tsresol=9, tsoffset=100)
    for i, ip in enumerate(ips[:4]):
        first += enhanced_packet("<", at(i), ethernet(ip), tsresol=9, tsoffset=100)
    second = section_header(">") + interface_description(">", linktype=RAW) + \
        enhanced_packet(">", at(4), ips[4])
    records, stats = read(first + second)
    assert records == [TraceRecord(at(3), 1, PEER, IN, req), TraceRecord(at(4), 1, PEER, OUT, resp)]
    assert stats.packets == 5


LINKS = {
    "ethernet": (ETHERNET, LINK_WRAPPERS[ETHERNET]),
    "ethernet-vlan": (ETHERNET, lambda ip: ethernet(ip, vlans=[(0x8100, 42)])),
    "ethernet-qinq": (ETHERNET, lambda ip: ethernet(ip, vlans=[(0x88A8, 7), (0x8100, 42)])),
    "sll": (SLL, LINK_WRAPPERS[SLL]),
    "sll2": (SLL2, LINK_WRAPPERS[SLL2]),
    "null": (NULL, LINK_WRAPPERS[NULL]),
    "loop": (LOOP, LINK_WRAPPERS[LOOP]),
    "raw": (RAW, LINK_WRAPPERS[RAW]),
}


@pytest.mark.parametrize("ip_version", [4, 6])
@pytest.mark.parametrize("link", LINKS)
def test_link_types(link, ip_version):
    linktype, wrap = LINKS[link]
    if ip_version == 4:
        conn, peer = Connection(), PEER
    else:
        conn = Connection(client=("2001:db8::1", 40000), server=("2001:db8::2", 9876))
        peer = "[2001:db8::1]:40000"
    req = route_request()
    resp = answer(req)
    packets = [(at(i), wrap(ip)) for i, ip in enumerate(exchange(conn, req, resp))]
    records, stats = read(pcap(packets, linktype))
    assert records == [TraceRecord(at(3), 1, peer, IN, req), TraceRecord(at(4), 1, peer, OUT, resp)]
    assert stats.tcp_packets == 8


def test_ipv4_options_and_ipv6_extension_headers():
    req = route_request()
    opts = ipv4("10.0.0.1", "10.0.0.2", tcp_segment(40000, 9876, 1001, 500001, PSH | ACK, req),
                options=b"\x01\x01\x01\x00")    # NOP, NOP, NOP, EOL: IHL 6
    conn = Connection()
    v4 = conn.handshake() + [opts]
    ext = [(0, hop_by_hop(1)), (60, hop_by_hop(0)), (44, fragment_header())]   # atomic fragment
    v6 = Connection(client=("2001:db8::1", 40001), server=("2001:db8::2", 9876))
    hs = v6.handshake()
    seg = tcp_segment(40001, 9876, v6.next_seq["c"], v6.next_seq["s"], PSH | ACK, req)
    records, stats = read(pcap(timed(v4 + hs + [ipv6("2001:db8::1", "2001:db8::2", seg, extensions=ext)])))
    assert records == [TraceRecord(at(3), 1, PEER, IN, req),
                       TraceRecord(at(7), 2, "[2001:db8::1]:40001", IN, req)]
    assert stats.ip_fragments == 0


def test_fragments_and_other_protocols_are_skipped():
    conn = Connection()
    req = route_request()
    seg = tcp_segment(40000, 9876, 1001, 500001, PSH | ACK, req)
    ips = conn.handshake() + [
        ipv4("10.0.0.1", "10.0.0.2", seg[:24], fragment=0x2000),          # first fragment
        ipv4("10.0.0.1", "10.0.0.2", seg[24:], fragment=3),               # the rest
        ipv6("2001:db8::1", "2001:db8::2", seg, extensions=[(44, fragment_header(0, more=True))]),
        ipv4("10.0.0.1", "10.0.0.2", b"\x00" * 12, protocol=17),          # UDP
    ]
    records, stats = read(pcap(timed(ips)))
    assert records == []
    assert stats.as_dict() == counts(packets=7, tcp_packets=3, flows=1, ip_fragments=3)


# ---------------------------------------------------------------- reassembly

def test_interleaved_connections_keep_their_ids_peers_and_time_order():
    a = Connection(client=("10.0.0.1", 40000))
    b = Connection(client=("10.0.0.3", 50000), client_isn=7)
    c = Connection(client=("2001:db8::7", 40000), server=("2001:db8::2", 9876))
    ra, rb, rc = route_request("A"), route_request("B"), route_request("C")
    ips = []
    for x, y, z in zip(a.handshake(), b.handshake(), c.handshake()):
        ips += [x, y, z]
    ips += [b.packet("c", rb), a.packet("c", ra), c.packet("c", rc),     # 9, 10, 11
            a.packet("s", answer(ra)), c.packet("s", answer(rc)), b.packet("s", answer(rb))]
    records, stats = read(pcap(timed(ips)))
    assert records == [
        TraceRecord(at(9), 2, "10.0.0.3:50000", IN, rb),
        TraceRecord(at(10), 1, PEER, IN, ra),
        TraceRecord(at(11), 3, "[2001:db8::7]:40000", IN, rc),
        TraceRecord(at(12), 1, PEER, OUT, answer(ra)),
        TraceRecord(at(13), 3, "[2001:db8::7]:40000", OUT, answer(rc)),
        TraceRecord(at(14), 2, "10.0.0.3:50000", OUT, answer(rb)),
    ]
    assert stats.flows == 3 and stats.frames == 6


def test_frame_split_over_many_segments_and_frames_sharing_segments():
    big = register_request()
    small = [route_request(str(i)) for i in range(4)]
    conn = Connection()
    ips = conn.handshake()
    cuts = [0, 1, 3, 7, 100, 1000, 2500, len(big)]     # 7 segments, some tiny
    ips += [conn.packet("c", big[i:j]) for i, j in zip(cuts, cuts[1:])]          # 3..9
    stream = small[0] + small[1] + small[2] + small[3]
    half = len(small[0]) + len(small[1]) + 5
    ips += [conn.packet("c", stream[:half]), conn.packet("c", stream[half:])]    # 10, 11
    records, stats = read(pcap(timed(ips)))
    assert len(big) > 3000
    assert records == [TraceRecord(at(9), 1, PEER, IN, big),
                       TraceRecord(at(10), 1, PEER, IN, small[0]),
                       TraceRecord(at(10), 1, PEER, IN, small[1]),
                       TraceRecord(at(11), 1, PEER, IN, small[2]),
                       TraceRecord(at(11), 1, PEER, IN, small[3])]
    assert stats.as_dict() == counts(packets=12, tcp_packets=12, flows=1, frames=5)


def test_retransmissions_do_not_duplicate_bytes():
    first, second = route_request("A"), route_request("B")
    conn = Connection()
    ips = conn.handshake()
    seq = conn.next_seq["s"]
    ips += [conn.packet("c", first),                                   # 3
            conn.packet("c", first, seq=1001),                         # 4: exact duplicate
            conn.packet("s", answer(first)[:10]),                      # 5
            conn.packet("s", answer(first)[:30], seq=seq),             # 6: 10 again, 20 new
            conn.packet("c", second[:20])]                             # 7
    ips += [conn.packet("c", first[-5:] + second, seq=1001 + len(first) - 5)]   # 8: overlaps 25
    conn.next_seq["s"] = seq + len(answer(first))
    ips += [conn.packet("s", answer(first)[30:], seq=seq + 30)]          # 9
    records, stats = read(pcap(timed(ips)))
    assert records == [TraceRecord(at(3), 1, PEER, IN, first),
                       TraceRecord(at(8), 1, PEER, IN, second),
                       TraceRecord(at(9), 1, PEER, OUT, answer(first))]
    assert stats.retransmitted_bytes == len(first) + 10 + 25
    assert stats.out_of_order_segments == 0


def test_out_of_order_segments_wait_for_the_gap():
    big = register_request()
    after = route_request("after")
    conn = Connection()
    ips = conn.handshake()
    pieces = [conn.packet("c", big[i:i + 1000]) for i in range(0, len(big), 1000)]
    tail = conn.packet("c", after)
    # capture order: 0, 2, 3, ..., then the duplicate of 3, then 1 (fills the gap), then tail
    ips += [pieces[0]] + pieces[2:] + [pieces[3], pieces[1], tail]
    records, stats = read(pcap(timed(ips)))
    fill = 3 + len(pieces)     # handshake, pieces 0 and 2.., the duplicate, then piece 1
    assert records == [TraceRecord(at(fill), 1, PEER, IN, big),
                       TraceRecord(at(fill + 1), 1, PEER, IN, after)]
    assert stats.out_of_order_segments == len(pieces) - 1      # pieces 2.. and the duplicate
    assert stats.retransmitted_bytes == 1000
    assert stats.lost_bytes == 0


def test_a_fin_ahead_of_missing_data_waits_for_it():
    req = register_request()
    conn = Connection()
    ips = conn.handshake()
    head, tail = conn.packet("c", req[:2000]), conn.packet("c", req[2000:], flags=FIN | ACK)
    ips += [tail, head, conn.packet("c", req, seq=1001)]     # then a retransmission after FIN
    records, stats = read(pcap(timed(ips)))
    assert records == [TraceRecord(at(4), 1, PEER, IN, req)]
    assert stats.out_of_order_segments == 1 and stats.retransmitted_bytes == len(req)
    assert stats.cut_at_close == stats.cut_at_end == 0


def test_a_lost_segment_ends_the_direction_and_counts_what_follows():
    a, b, c = route_request("A"), register_request(), route_request("C")
    conn = Connection()
    ips = conn.handshake() + [conn.packet("c", a)]
    pieces = [conn.packet("c", b[i:i + 1000]) for i in range(0, len(b), 1000)]
    ips += pieces[:1] + pieces[2:] + [conn.packet("c", c)]     # pieces[1] never captured
    ips += [pieces[3], conn.packet("c", b[2500:3500], seq=1001 + len(a) + 2500)]   # overlaps
    ips += [conn.packet("s", answer(a))]
    records, stats = read(pcap(timed(ips)))
    assert records == [TraceRecord(at(3), 1, PEER, IN, a),
                       TraceRecord(at(len(ips) - 1), 1, PEER, OUT, answer(a))]
    assert stats.gaps == 1
    assert stats.lost_bytes == len(b) - 1000 + len(c)   # all of b but the lost 1000, and c
    assert stats.retransmitted_bytes == 2000     # piece 3 again, one straddling pieces 2 and 3
    assert stats.cut_at_end == 0


def test_a_gap_is_declared_lost_when_too_much_waits_behind_it():
    a, b = route_request("A"), route_request("B")
    conn = Connection()
    ips = conn.handshake()
    gap = conn.packet("c", a)                      # never captured
    ips += [conn.packet("c", b), conn.packet("c", a)]     # 160+ bytes wait: over the limit
    ips += [gap, conn.packet("c", b)]              # too late, then more after the gap
    records, stats = read(pcap(timed(ips)), max_reorder_bytes=len(a) + 10)
    assert records == []
    assert stats.gaps == 1
    assert stats.lost_bytes == len(b) + len(a) + len(b)
    assert stats.retransmitted_bytes == len(a)     # the late segment, behind the lost data


def test_capture_started_mid_stream_aligns_on_the_next_frame():
    """No SYN: the client is the side not on a server port; the bytes before the first
    segment that starts a frame are unaligned and never decoded."""
    old, req = register_request(), route_request()
    resp = answer(req)
    conn = Connection(client=("10.0.0.9", 33333))
    conn.packet("c", old[:3000])                   # sent before the capture started
    ips = [conn.packet("c", old[3000:]),           # 0: the tail of a frame
           conn.packet("s", resp[7:]),             # 1: the tail of an answer
           conn.packet("c", req),                  # 2
           conn.packet("s", resp)]                 # 3
    records, stats = read(pcap(timed(ips)))
    assert records == [TraceRecord(at(2), 1, "10.0.0.9:33333", IN, req),
                       TraceRecord(at(3), 1, "10.0.0.9:33333", OUT, resp)]
    assert stats.as_dict() == counts(packets=4, tcp_packets=4, flows=1, frames=2,
                    unaligned_bytes=len(old) - 3000 + len(resp) - 7)


def test_client_from_the_syn_ack_when_it_comes_first():
    """A SYN-ACK says which side is the client; the SYN captured after it (several
    CPUs) or missing is the same connection."""
    req = route_request()
    conn = Connection(client=("10.0.0.1", 9876), server=("10.0.0.2", 40000))   # ports misleading
    syn, syn_ack, ack = conn.handshake()
    ips = [syn_ack, syn, ack, conn.packet("c", req), conn.packet("s", answer(req))]
    records, stats = read(pcap(timed(ips)), server_ports=None)
    assert records == [TraceRecord(at(3), 1, "10.0.0.1:9876", IN, req),
                       TraceRecord(at(4), 1, "10.0.0.1:9876", OUT, answer(req))]
    assert stats.flows == 1
    records, stats = read(pcap(timed(ips[:1] + ips[2:])), server_ports=None)
    assert [r[1:4] for r in records] == [(1, "10.0.0.1:9876", IN), (1, "10.0.0.1:9876", OUT)]


def test_mid_stream_alignment_needs_a_header_not_just_a_length():
    """A segment in the middle of a body that happens to start with a length in range
    is not a frame start; a binary (ROCKETMQ) header is."""
    body = bytes(100) + b"\x00\x00\x00\x40" + b"\x00\x00\x00\x10" + b"not a header" + bytes(200)
    old = rmq.encode_frame(rmq.RemotingCommand.request(103, {"a": "b"}, body))
    binary = rmq.encode_frame(rmq.RemotingCommand.request(105, {"topic": "T"},
                                                          serialize_type="ROCKETMQ"))
    cut = old.index(b"\x00\x00\x00\x40\x00\x00\x00\x10")
    conn = Connection()
    conn.packet("c", old[:cut])                    # before the capture
    ips = [conn.packet("c", old[cut:]), conn.packet("c", binary), conn.packet("c", binary)]
    records, stats = read(pcap(timed(ips)))
    assert records == [TraceRecord(at(1), 1, PEER, IN, binary), TraceRecord(at(2), 1, PEER, IN, binary)]
    assert stats.unaligned_bytes == len(old) - cut


def test_direction_from_the_syn_whatever_the_ports():
    req = route_request()
    conn = Connection(client=("10.0.0.1", 9876), server=("10.0.0.2", 9876))
    records, _ = read(pcap(timed(exchange(conn, req, answer(req)))))
    assert records == [TraceRecord(at(3), 1, "10.0.0.1:9876", IN, req),
                       TraceRecord(at(4), 1, "10.0.0.1:9876", OUT, answer(req))]


@pytest.mark.parametrize("server_ports, ports", [
    (None, (40000, 9876)),             # any port: only a SYN could tell
    ((9876,), (9876, 9876)),           # both ends on a server port
])
def test_without_syn_an_undecidable_client_is_not_guessed(server_ports, ports):
    req = route_request()
    conn = Connection(client=("10.0.0.1", ports[0]), server=("10.0.0.2", ports[1]))
    ips = [conn.packet("c", req), conn.packet("s", answer(req))]
    records, stats = read(pcap(timed(ips)), server_ports=server_ports)
    assert records == []
    assert stats.as_dict() == counts(packets=2, tcp_packets=2, flows=1, unknown_client_flows=1,
                    unaligned_bytes=len(req) + len(answer(req)))


def test_frame_cut_at_the_end_of_the_capture():
    req, resp = route_request(), None
    resp = answer(req)
    conn = Connection()
    ips = conn.handshake() + [conn.packet("c", req), conn.packet("s", resp[:20])]
    records, stats = read(pcap(timed(ips)))
    assert records == [TraceRecord(at(3), 1, PEER, IN, req)]
    assert stats.cut_at_end == 1 and stats.lost_bytes == 0


def test_sequence_numbers_wrap_around():
    big = register_request()
    req = route_request()
    conn = Connection(client_isn=0xFFFFFFFF - 1500, server_isn=0xFFFFFFFF)   # SYN-ACK at 2^32-1
    ips = conn.handshake()
    pieces = [big[i:i + 1000] for i in range(0, len(big), 1000)]
    seq = conn.next_seq["c"]
    ips += [conn.packet("c", p) for p in pieces]
    ips += [conn.packet("c", big[900:2100], seq=(seq + 900) & 0xFFFFFFFF)]   # a retransmission
    ips += [conn.packet("s", answer(req))]                                     # from seq 0
    records, stats = read(pcap(timed(ips)))
    assert records == [TraceRecord(at(3 + len(pieces) - 1), 1, PEER, IN, big),
                       TraceRecord(at(len(ips) - 1), 1, PEER, OUT, answer(req))]
    assert stats.retransmitted_bytes == 1200


def test_rst_ends_the_connection_and_a_new_syn_starts_the_next():
    req = route_request()
    first = Connection()
    ips = first.handshake() + [first.packet("c", req[:10]), first.packet("s", flags=RST | ACK)]
    ips += [first.packet("c", req[10:])]           # too late: the connection is over
    second = Connection(client_isn=77777)          # same addresses and ports
    ips += second.handshake() + [second.packet("c", req)]
    records, stats = read(pcap(timed(ips)))
    assert records == [TraceRecord(at(9), 2, PEER, IN, req)]
    assert stats.flows == 2 and stats.cut_at_close == 1


def test_fin_ends_a_direction_and_port_reuse_is_a_new_connection():
    a, b = route_request("A"), route_request("B")
    first = Connection()
    ips = exchange(first, a, answer(a))
    ips += [first.packet("c", a, seq=1001)]        # a late retransmission: no frame again
    second = Connection(client_isn=99)
    ips += exchange(second, b, answer(b))
    records, stats = read(pcap(timed(ips)))
    assert records == [TraceRecord(at(3), 1, PEER, IN, a), TraceRecord(at(4), 1, PEER, OUT, answer(a)),
                       TraceRecord(at(12), 2, PEER, IN, b), TraceRecord(at(13), 2, PEER, OUT, answer(b))]
    assert stats.retransmitted_bytes == len(a) and stats.cut_at_close == 0


def test_finished_connections_are_forgotten_after_they_linger():
    """A long capture of many short connections: every frame comes out, and only the
    connections finished within the last two minutes (capture time) are remembered."""
    from rmq.trace.pcap import reassembly as pcap_module
    a = route_request("A")
    ips = []
    for i in range(3000):       # 8 packets each, 100 ms apart: 40 minutes in all
        ips += exchange(Connection(client=("10.0.0.1", 20000 + i)), a, answer(a))
    step = 100_000_000
    reader = PcapReader(io.BytesIO(pcap(timed(ips, step_ns=step))))
    records = list(reader)
    assert len(records) == 6000 and reader.stats.flows == 3000
    assert [r.conn for r in records[::2]] == list(range(1, 3001))
    assert reader._tcp._live == {}
    linger_packets = pcap_module._LINGER_NS // step + pcap_module._SWEEP_EVERY
    assert len(reader._tcp._flows) <= 2 * (linger_packets // 8 + 1) < 2 * 3000


def test_a_late_packet_lingers_then_is_a_new_connection():
    from rmq.trace.pcap import reassembly as pcap_module
    a = route_request("A")
    conn = Connection()
    ips = exchange(conn, a, answer(a))
    late = conn.packet("c", a, seq=1001)            # the request, retransmitted
    filler = [tcp_segment(50000 + i, 9876, 1, flags=ACK) for i in range(pcap_module._SWEEP_EVERY)]
    within = timed(ips + [late])
    after = within[:-1] + [(within[-2][0] + pcap_module._LINGER_NS + 1 + i, ethernet(
        ipv4("10.0.0.9", "10.0.0.2", f))) for i, f in enumerate(filler)] + \
        [(within[-2][0] + 2 * pcap_module._LINGER_NS, within[-1][1])]
    records, stats = read(pcap(within))
    assert len(records) == 2 and stats.retransmitted_bytes == len(a) and stats.flows == 1
    # two minutes after its last packet the connection is forgotten: a packet on its
    # ports (TCP would not retransmit after both FINs) is a new connection's
    records, stats = read(pcap(after))
    assert stats.flows == 1 + len(filler) + 1 and stats.retransmitted_bytes == 0
    assert records[2] == TraceRecord(after[-1][0], stats.flows, PEER, IN, a)


def test_flows_off_the_server_ports_are_ignored():
    http = Connection(client=("10.0.0.1", 41000), server=("10.0.0.2", 80))
    req = route_request()
    ips = exchange(http, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"HTTP/1.1 200 OK\r\n\r\n")
    ips += exchange(Connection(), req, answer(req))
    records, stats = read(pcap(timed(ips)))
    assert records == [TraceRecord(at(11), 1, PEER, IN, req), TraceRecord(at(12), 1, PEER, OUT, answer(req))]
    assert stats.as_dict() == counts(packets=16, tcp_packets=16, flows=1, frames=2)


def test_any_port_follows_every_flow_and_abandons_what_is_not_remoting():
    http = Connection(client=("10.0.0.1", 41000), server=("10.0.0.2", 80))
    ips = exchange(http, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"HTTP/1.1 200 OK\r\n\r\n")
    records, stats = read(pcap(timed(ips)), server_ports=None)
    assert records == []
    assert stats.as_dict() == counts(packets=8, tcp_packets=8, flows=1, non_remoting=2)


@pytest.mark.parametrize("bad_length", [b"\xff\xff\xff\xff", b"\x00\x00\x00\x03", b"\x01\x00\x00\x00"])
def test_a_length_out_of_range_abandons_the_direction(bad_length):
    a, b = route_request("A"), route_request("B")
    conn = Connection()
    ips = conn.handshake() + [conn.packet("c", a + bad_length + b"junk"), conn.packet("c", b),
                              conn.packet("s", answer(a))]
    records, stats = read(pcap(timed(ips)))
    assert records == [TraceRecord(at(3), 1, PEER, IN, a), TraceRecord(at(5), 1, PEER, OUT, answer(a))]
    assert stats.non_remoting == 1


def test_max_frame_length_is_the_limit():
    big = register_request()
    conn = Connection()
    ips = conn.handshake() + [conn.packet("c", big)]
    assert read(pcap(timed(ips)), max_frame_length=len(big))[0] == [TraceRecord(at(3), 1, PEER, IN, big)]
    records, stats = read(pcap(timed(ips)), max_frame_length=len(big) - 1)
    assert records == [] and stats.non_remoting == 1


def test_records_come_out_in_time_order():
    """Packets whose capture times go back a little (several CPUs) are put in order;
    without a sort window they come in file order, counted as late."""
    a, b = route_request("A"), route_request("B")
    x, y = Connection(), Connection(client=("10.0.0.3", 50000))
    ips = x.handshake() + y.handshake() + [x.packet("c", a), y.packet("c", b)]
    packets = timed(ips)
    packets[6] = (at(7), packets[6][1])            # a's packet is stamped after b's
    packets[7] = (at(6), packets[7][1])
    expected = [TraceRecord(at(6), 2, "10.0.0.3:50000", IN, b), TraceRecord(at(7), 1, PEER, IN, a)]
    for capture in (pcap(packets), pcapng(packets)):
        assert read(capture)[0] == expected
        records, stats = read(capture, sort_window_ns=0)
        assert records == expected[::-1] and stats.late_records == 1
        assert read(capture, sort_window_ns=None)[0] == expected


def test_snapped_packets_leave_a_gap():
    a, b = route_request("A"), route_request("B")
    conn = Connection()
    ips = conn.handshake() + [conn.packet("c", a), conn.packet("c", b)]
    packets = timed(ips)
    short = packets[4][1][:-20]                    # captured with a short snap length
    packets[4] = (packets[4][0], short, len(packets[4][1]))
    packets.append(timed([conn.packet("c", a)], start_ns=at(5))[0])
    records, stats = read(pcap(packets))
    assert records == [TraceRecord(at(3), 1, PEER, IN, a)]
    assert stats.snapped_packets == 1 and stats.gaps == 1
    assert stats.lost_bytes == len(b) - 20 + len(a)


# ---------------------------------------------------------------- files and errors

def _session_capture():
    req = route_request()
    return pcap(timed(exchange(Connection(), req, answer(req)))), req


def test_read_pcap_from_a_path(tmp_path):
    capture, req = _session_capture()
    path = tmp_path / "s.pcap"
    path.write_bytes(capture)
    assert [r.frame for r in read_pcap(path)] == [req, answer(req)]
    assert [r.frame for r in read_pcap(str(path), server_ports={1})] == []
    with PcapReader(path) as reader:
        assert len(list(reader)) == 2 and reader.stats.frames == 2
    assert reader._file.closed


def test_truncated_last_record_ends_reading_cleanly():
    capture, req = _session_capture()
    for cut in (1, 8, 30):                         # in the record header, and in its data
        records, stats = read(capture[:-cut])
        assert [r.frame for r in records] == [req, answer(req)]
        assert stats.truncated_records == 1 and stats.packets == 7
    ng = pcapng(timed(exchange(Connection(), req, answer(req))))
    records, stats = read(ng[:-6])
    assert len(records) == 2 and stats.truncated_records == 1 and stats.packets == 7


@pytest.mark.parametrize("data, message", [
    (b"", "0 bytes"),
    (b"GET / HTTP/1.1\r\n", "magic 0x47455420"),
    (b"\xd4\xc3\xb2\xa1\x02\x00\x04\x00", "truncated pcap global header: 8 of 24 bytes"),
    (b"\x0a\x0d\x0d\x0a\x1c\x00\x00\x00", "truncated pcapng section header"),
    (b"\x0a\x0d\x0d\x0a\x1c\x00\x00\x00\x01\x02\x03\x04" + bytes(16), "byte-order magic 0x01020304"),
])
def test_not_a_capture_raises_a_typed_error(data, message):
    with pytest.raises(PcapError, match=message) as info:
        PcapReader(io.BytesIO(data))
    assert isinstance(info.value, RmqError) and isinstance(info.value, ValueError)


def test_corrupt_structure_raises():
    capture, _ = _session_capture()
    corrupt = capture[:24] + capture[24:32] + b"\xff\xff\xff\x7f" + capture[36:]
    with pytest.raises(PcapError, match="2147483647 bytes"):
        list(PcapReader(io.BytesIO(corrupt)))
    ng = section_header() + enhanced_packet("<", T0, b"x" * 40)     # no interface described
    with pytest.raises(PcapError, match="names interface 0"):
        list(PcapReader(io.BytesIO(ng)))


def test_is_pcap():
    capture, _ = _session_capture()
    assert is_pcap(capture[:4]) and is_pcap(capture)
    assert is_pcap(pcap([], order=">", nanoseconds=True)) and is_pcap(pcapng([], order=">"))
    assert not is_pcap(rmq.encode_frame(rmq.RemotingCommand.request(105, {"topic": "T"})))
    assert not is_pcap(b"") and not is_pcap(b"GET / HTTP/1.1\r\n")
    assert not is_pcap(b"\x0a\x0d\x0d\x0a\x1c\x00\x00\x00\x01\x02\x03\x04")   # no byte-order magic


# ---------------------------------------------------------------- a real tcpdump

def _start_tcpdump(path, port):
    """tcpdump capturing the loopback to ``path``, once it says it listens; a tcpdump
    without the right to capture is a missing part (parts.fail_or_skip)."""
    # As root tcpdump would drop to its own user, who cannot write into pytest's
    # private temporary directory.
    as_root = ["-Z", "root"] if os.geteuid() == 0 else []
    proc = subprocess.Popen(["tcpdump", "-i", "lo", "-w", str(path), "-U", "-s", "0",
                             "--immediate-mode", *as_root, "tcp", "port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = []

    def read_stderr():
        for line in proc.stderr:
            lines.append(line)

    threading.Thread(target=read_stderr, daemon=True).start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and proc.poll() is None:
        if any("listening on" in line for line in lines):
            return proc
        time.sleep(0.05)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    parts.fail_or_skip("tcpdump", f"it cannot capture on lo: {''.join(lines).strip() or 'no output'}")


@pytest.mark.requires("tcpdump")
def test_real_tcpdump_capture_of_a_session(tmp_path):
    """The capture decodes to the frames the NameServer's own recorder saw."""
    from rmq.trace.segments import TraceRecorder, read_records, segment_files
    path = tmp_path / "session.pcap"
    recorder = TraceRecorder(tmp_path / "trace")
    with running_namesrv(tmp_path, trace=recorder) as app:
        tcpdump = _start_tcpdump(path, app.port)
        try:
            sent = {}                                 # conn -> request frames, in order
            answers = {}                              # conn -> answers received, in order
            with Client(app.address) as kv, Client(app.address) as routes:
                for conn_id, client in ((1, kv), (2, routes)):
                    sent[conn_id], answers[conn_id] = [], []

                    def send(cmd, client=client, frames=sent[conn_id]):
                        frames.append(rmq.encode_frame(cmd))
                        client.sock.sendall(frames[-1])

                    client.send = send
                calls = [
                    (1, lambda: kv.request(100, {"namespace": "ns", "key": "k", "value": "v"})),
                    (2, lambda: routes.request(105, {"topic": "Missing"})),
                    (1, lambda: kv.request(101, {"namespace": "ns", "key": "k"})),
                    (2, lambda: register_broker(routes, "broker-a", "127.0.0.1:10911",
                                                topics=["T1", "T2", "T3"])),
                    (2, lambda: routes.request(105, {"topic": "T2"})),
                    (1, lambda: kv.request(101, {"namespace": "ns", "key": "nope"})),
                ]
                for conn_id, call in calls:
                    answers[conn_id].append(call())
            assert [a.code for a in answers[1]] == [0, 0, 22]
            assert [a.code for a in answers[2]] == [17, 0, 0]
            # tcpdump writes each packet as it comes (-U); wait until all are in.
            expected = sum(len(v) for v in sent.values()) * 2
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if path.exists() and sum(1 for _ in read_pcap(path, server_ports={app.port})) >= expected:
                    break
                time.sleep(0.1)
        finally:
            tcpdump.send_signal(signal.SIGINT)
            tcpdump.wait(10)
    recorder.close()
    reader = PcapReader(path, server_ports={app.port})
    records = list(reader)
    by_conn = {}
    for record in records:
        assert record.peer.startswith("127.0.0.1:") and not record.peer.endswith(f":{app.port}")
        by_conn.setdefault(record.conn, []).append(record)
    assert sorted(by_conn) == [1, 2]
    for conn_id, conn_records in by_conn.items():
        assert [r.frame for r in conn_records if r.direction == IN] == sent[conn_id]
        got = [rmq.decode_frame(r.frame) for r in conn_records if r.direction == OUT]
        assert [(c.opaque, c.code, c.flag) for c in got] == \
            [(a.opaque, a.code, a.flag) for a in answers[conn_id]]
        # request, answer, request, answer...: each answer after its request
        assert [r.direction for r in conn_records] == [IN, OUT] * len(sent[conn_id])
    assert [r.time_ns for r in records] == sorted(r.time_ns for r in records)
    stats = reader.stats
    assert (stats.flows, stats.frames) == (2, 12)
    # the same frames, connection by connection and direction by direction, as the
    # recorder inside the server saw them (its connection ids are its own)
    seen = [r for p in segment_files([tmp_path / "trace"]) for r in read_records(p)]
    assert recorder.dropped == 0 and len(seen) == len(records)

    def streams(recs):
        out = {}
        for t, conn, peer, direction, frame in recs:
            out.setdefault((peer, direction), []).append(frame)
        return out
    assert streams(records) == streams(seen)
    assert stats.unaligned_bytes == stats.lost_bytes == stats.cut_at_end == stats.non_remoting == 0


@pytest.mark.parametrize("btype, body_len", [(6, 4), (2, 16), (3, 0)])
def test_a_packet_block_shorter_than_its_fields_is_a_pcap_error(btype, body_len):
    data = section_header() + interface_description() + block("<", btype, bytes(body_len))
    with pytest.raises(PcapError, match="less than its fixed fields"):
        list(PcapReader(io.BytesIO(data)))
