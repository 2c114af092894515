"""Traces: remoting traffic recorded frame by frame.

A trace is a directory of segment files (``*.rmqtrace``), each a stream of msgpack
objects: a header map ``{"rmq-trace": 1, "created_ns": ..., "host": ..., "pid": ...}``,
then one array per frame::

    [time_ns, conn, peer, direction, frame]

``time_ns`` is when the frame was read or written (ns since the epoch), ``conn`` the
connection's id in that process, ``peer`` the client's "ip:port", ``direction`` IN
(0: towards the NameServer) or OUT (1: from it), and ``frame`` the whole frame
(length prefix included). The same tuples come out of :func:`read_records` for a
segment, and out of :mod:`rmq.trace.pcap` for a tcpdump capture.

Segments are size-bounded and written by one thread fed through a bounded queue
(:class:`TraceRecorder`): the server only splits its bytes into frames and appends
them; when the queue is full the frame is dropped and counted, never waited for.
A segment cut by a crash reads back up to its last complete record.

The rest of the pipeline is in the package's other modules (rmq.trace).
"""

from __future__ import annotations

import collections
import io
import logging
import os
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from typing import IO, TYPE_CHECKING, Any

import msgpack

from rmq.codec import FrameSplitter, decode_frame
from rmq.errors import ProtocolError, TraceError
from rmq.protocol import DEFAULT_MAX_FRAME_LENGTH, IN, OUT
from rmq.trace.rows import RecordRows

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from rmq import _core

log = logging.getLogger(__name__)

__all__ = ["IN", "OUT", "SegmentWriter", "TraceRecorder", "ConnectionTrace", "read_records",
           "segment_rows", "is_capture", "segment_files", "TraceError", "SEGMENT_SUFFIX"]

SEGMENT_SUFFIX = ".rmqtrace"
#: What segment_files picks from a directory: segments and captures.
INPUT_SUFFIXES = (SEGMENT_SUFFIX, ".pcap", ".pcapng")
FORMAT_VERSION = 1
#: Segment files are closed and a new one begun past this size.
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
#: Frames, and their bytes, waiting for the writer thread; more are dropped (and counted).
DEFAULT_QUEUE_FRAMES = 100_000
DEFAULT_QUEUE_BYTES = 256 * 1024 * 1024


class SegmentWriter:
    """Writes records into rotating segment files under ``directory``. Not
    thread-safe: one writer (the recorder's thread, or a synthesizer)."""

    def __init__(self, directory: str | os.PathLike[str], *, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 prefix: str = "trace") -> None:
        if segment_bytes < 1024:
            raise ValueError(f"segment_bytes must be at least 1024, got {segment_bytes}")
        self.directory = os.fspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self.segment_bytes = segment_bytes
        self.prefix = prefix
        self.files: list[str] = []
        self.records = 0
        self._file: IO[bytes] | None = None
        self._size = 0
        self._packer = msgpack.Packer(use_bin_type=True, autoreset=True)
        # Names sort in time order, and two writers (processes, or two writers of one
        # process in the same second) never pick the same one.
        self._stamp = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{time.time_ns() % 10**9:09d}"

    def _open(self) -> None:
        path = os.path.join(self.directory, f"{self.prefix}-{self._stamp}-"
                                            f"{len(self.files):06d}{SEGMENT_SUFFIX}")
        self._file = open(path, "xb", buffering=1 << 20)
        self.files.append(path)
        self._size = self._file.write(self._packer.pack({
            "rmq-trace": FORMAT_VERSION, "created_ns": time.time_ns(),
            "host": socket.gethostname(), "pid": os.getpid()}))

    def write(self, time_ns: int, conn: int, peer: str, direction: int, frame: bytes) -> None:
        self.write_packed(self._packer.pack((time_ns, conn, peer, direction, frame)), 1)

    def write_packed(self, data: bytes, records: int) -> None:
        """Append already-packed records (``records`` of them): for synthesizers."""
        if self._file is None or self._size >= self.segment_bytes:
            self._rotate()
        self._size += self._file.write(data)  # type: ignore[union-attr]  # _rotate opened it
        self.records += records

    def _rotate(self) -> None:
        self.close()
        self._open()

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class TraceRecorder:
    """Records frames off the hot path: :meth:`record` appends to a bounded queue
    (dropping and counting when it is full) and one thread writes the segments.

    ``dropped``: frames lost to a full queue (``queue_frames`` frames or
    ``queue_bytes`` bytes waiting) or to a failed write; ``recorded``: frames
    written; ``unframed_bytes``: bytes of streams that stopped being frames (a bad
    length: the server closes such a connection); ``error``: the write error that
    stopped the recording (a full disk...), None while it goes on."""

    def __init__(self, directory: str | os.PathLike[str], *, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 queue_frames: int = DEFAULT_QUEUE_FRAMES, queue_bytes: int = DEFAULT_QUEUE_BYTES,
                 max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH) -> None:
        self.writer = SegmentWriter(directory, segment_bytes=segment_bytes)
        self.max_frame_length = max_frame_length
        self.queue_frames = queue_frames
        self.queue_bytes = queue_bytes
        self.unframed_bytes = 0
        self.error: OSError | None = None
        # Each counter has one writer thread, so no update is lost without a lock:
        # the recording thread (record) and the writer thread (_run).
        self._bytes_queued = 0          # record
        self._bytes_taken = 0           # _run
        self._dropped_full = 0          # record
        self._dropped_failed = 0        # _run
        self._queue: collections.deque[tuple[int, int, str, int, bytes]] = collections.deque()
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="rmq-trace", daemon=True)
        self._thread.start()

    @property
    def dropped(self) -> int:
        return self._dropped_full + self._dropped_failed

    @property
    def queued_bytes(self) -> int:
        """Bytes of the frames waiting for the writer thread."""
        return self._bytes_queued - self._bytes_taken

    @property
    def recorded(self) -> int:
        return self.writer.records

    @property
    def files(self) -> list[str]:
        return list(self.writer.files)

    def record(self, conn: int, peer: str, direction: int, frame: bytes,
               time_ns: int | None = None) -> None:
        """Queue one frame; never blocks."""
        if (len(self._queue) >= self.queue_frames or self.error is not None
                or self.queued_bytes + len(frame) > self.queue_bytes):
            self._dropped_full += 1
            return
        self._bytes_queued += len(frame)
        self._queue.append((time.time_ns() if time_ns is None else time_ns, conn, peer,
                            direction, frame))
        if not self._wake.is_set():
            self._wake.set()

    def connection(self, conn: int, peer: str) -> ConnectionTrace:
        """A :class:`ConnectionTrace` for one connection's two streams."""
        return ConnectionTrace(self, conn, peer)

    def _run(self) -> None:
        queue = self._queue
        while True:
            self._wake.wait(0.2)
            self._wake.clear()
            try:
                while queue:
                    rec = queue.popleft()
                    self._bytes_taken += len(rec[4])
                    self.writer.write(*rec)
                self.writer.flush()     # what is recorded survives a crash of the process
            except OSError as e:        # a full disk, a removed directory: stop recording,
                self.error = e          # not the server; what was queued is dropped
                self._dropped_failed += 1
                while queue:
                    self._bytes_taken += len(queue.popleft()[4])
                    self._dropped_failed += 1
                log.error(
                    "trace recording stopped: %s (%d frames recorded)", e, self.recorded)
                return
            if self._stop and not queue:
                return

    def close(self) -> None:
        """Write what is queued, close the segment."""
        self._stop = True
        self._wake.set()
        self._thread.join()
        try:
            self.writer.close()
        except OSError as e:
            self.error = self.error or e


class ConnectionTrace:
    """Splits one connection's bytes, each direction on its own, into frames for
    the recorder."""

    __slots__ = ("recorder", "conn", "peer", "_in", "_out")

    def __init__(self, recorder: TraceRecorder, conn: int, peer: str) -> None:
        self.recorder = recorder
        self.conn = conn
        self.peer = peer
        self._in = FrameSplitter(recorder.max_frame_length)
        self._out = FrameSplitter(recorder.max_frame_length)

    def incoming(self, data: Buffer) -> None:
        self._record(self._in, IN, data)

    def outgoing(self, data: Buffer) -> None:
        self._record(self._out, OUT, data)

    def _record(self, splitter: FrameSplitter, direction: int, data: Buffer) -> None:
        t = time.time_ns()
        try:
            frames = splitter.feed(data)
        except ProtocolError as e:
            frames = e.decoded  # type: ignore[assignment]  # the splitter's frames
            self.recorder.unframed_bytes += len(data)  # type: ignore[arg-type]
        record = self.recorder.record
        for frame in frames:
            record(self.conn, self.peer, direction, frame, t)


# ---------------------------------------------------------------- reading

def segment_files(paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    """The trace inputs under ``paths`` (files, or directories searched for
    segments and captures), sorted by name."""
    out: list[str] = []
    for p in paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            for name in sorted(os.listdir(p)):
                if name.endswith(INPUT_SUFFIXES):
                    out.append(os.path.join(p, name))
        else:
            out.append(p)
    return out


class SegmentReader:
    """The records of one segment (bytes or a path), in order. A cut last record
    (a crash while writing) ends the reading: ``stats["truncated_bytes"]`` says how
    much was left over."""

    def __init__(self, source: str | os.PathLike[str] | Buffer) -> None:
        if not isinstance(source, (str, os.PathLike)):
            self.data = bytes(source)
            self.name = "<bytes>"
        else:
            self.name = os.fspath(source)
            with open(self.name, "rb") as f:
                self.data = f.read()
        self.header: dict[str, Any] | None = None
        self.stats: dict[str, int] = {"records": 0, "truncated_bytes": 0}

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        # use_list=False: records come out as the tuples they are read as, no copy
        unpacker = msgpack.Unpacker(raw=False, max_buffer_size=0, strict_map_key=False,
                                    use_list=False)
        unpacker.feed(self.data)
        self.header = _read_header(unpacker, self.name)
        n = 0
        end = unpacker.tell()       # after the last complete object
        tell = unpacker.tell
        try:
            for rec in unpacker:
                n += 1
                end = tell()
                yield rec
        except (ValueError, msgpack.FormatError, msgpack.StackError) as e:
            raise TraceError(f"{self.name}: corrupt record after {n} records ({e})") from None
        finally:
            self.stats["records"] = n
            self.stats["truncated_bytes"] = len(self.data) - end


def _read_header(unpacker: Any, name: str) -> dict[str, Any]:
    try:
        header = next(unpacker)
    except StopIteration:
        raise TraceError(f"{name}: empty or cut before its header") from None
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as e:
        raise TraceError(f"{name}: not a trace segment ({e})") from None
    if not isinstance(header, dict) or "rmq-trace" not in header:
        raise TraceError(f"{name}: not a trace segment (header {header!r:.80})")
    if header["rmq-trace"] != FORMAT_VERSION:
        raise TraceError(f"{name}: trace format {header['rmq-trace']!r}, "
                         f"this rmq reads {FORMAT_VERSION}")
    return header


def segment_rows(data: Buffer, file: str, file_index: Any, conn_base: int = 0,
                 max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
                 stats: dict[str, int] | None = None) -> Iterator[tuple[Any, ...]]:
    """The frames of one segment (bytes-like) as rows with their headers decoded
    (``rmq.trace.rows.TRACE_ROW_FIELDS`` tuples), by the compiled core when it is
    loaded. A cut last record ends the rows; ``stats`` (a dict), when given, gets
    "records" and "truncated_bytes" once they are read."""
    from rmq._impl import core

    rows: _core.TraceRows | RecordRows = core.TraceRows(
        data, segment_start(data, file), file, file_index, conn_base, 0, max_frame_length)
    try:
        yield from rows
        if rows.stopped == "other":     # a record in a form the compiled reader leaves to it
            rows = core_record_rows(data, rows.offset, file, conn_base, rows.records,
                                    max_frame_length, file_index)
            yield from rows
    finally:
        if stats is not None:
            stats["records"] = rows.records
            with memoryview(data) as view:
                stats["truncated_bytes"] = view.nbytes - rows.offset if rows.stopped else 0


def segment_start(data: Buffer, file: str) -> int:
    """Where the records of a segment (bytes-like) begin, after its header; raises
    TraceError when ``data`` is not a segment ``file`` of this format."""
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=0, strict_map_key=False)
    # the header is small: the first 64 KiB hold it, or the segment is not one
    unpacker.feed(memoryview(data)[:65536])
    _read_header(unpacker, file)
    return int(unpacker.tell())


def core_record_rows(data: Buffer, start: int, file: str, conn_base: int, first_record: int,
                     max_frame_length: int, file_index: Any = None) -> RecordRows:
    """The rows of the records from ``start`` on, read by the reference's reader
    (every form) with the active core's frame decoder: for the records the compiled
    readers leave (``stopped == "other"``)."""
    return _CoreRecordRows(data, start, file, file_index, conn_base, first_record,
                           max_frame_length)


def read_records(source: str | os.PathLike[str] | Buffer, **pcap_options: Any
                 ) -> Iterator[tuple[Any, ...]]:
    """The records of one trace input (a path, or its bytes: any bytes-like object):
    a segment, or a pcap/pcapng capture (then ``pcap_options`` go to
    rmq.trace.pcap.PcapReader, e.g. server_ports)."""
    in_memory = not isinstance(source, (str, os.PathLike))
    # in_memory tells the two kinds of source apart (mypy cannot follow it)
    if is_capture(source if in_memory else _head(source)):  # type: ignore[arg-type]
        from rmq.trace import pcap
        if in_memory:
            source = io.BytesIO(source)  # type: ignore[arg-type, assignment]
        return iter(pcap.PcapReader(source, **pcap_options))  # type: ignore[arg-type]
    return iter(SegmentReader(source))


def is_capture(data: Buffer) -> bool:
    """Whether ``data`` (a bytes-like file content, or its first bytes) begins like a
    pcap or pcapng capture rather than a trace segment."""
    from rmq.trace.pcap.formats import CAPTURE_MAGICS     # the capture reader only when needed
    with memoryview(data) as view:
        return bytes(view[:4]) in CAPTURE_MAGICS


def _head(path: str | os.PathLike[str]) -> bytes:
    with open(path, "rb") as f:
        return f.read(4)


class _CoreRecordRows(RecordRows):
    """The records the compiled reader leaves (rare forms), their frames decoded by
    the active core's decode_frame."""

    _decode = staticmethod(decode_frame)
