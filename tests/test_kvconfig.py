"""rmq.namesrv.kvconfig: the KV table of Java's KVConfigManager: Java's kvConfig.json
rewritten on every change while the table is small, else changes journaled and
compacted into it."""

import json
import os
import random
import signal
import stat
import struct
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest

import rmq
from rmq import bodies
from rmq.javaorder import java_hash_order
from rmq.namesrv import kvconfig
from rmq.errors import RmqError
from rmq.namesrv.kvconfig import (
    KVConfig,
    KVConfigError,
    KVEncodingError,
    KVLimitError,
    journal_path,
    read_table,
)

# rmq.namesrv.kvconfig is Python whichever core is selected.
pytestmark = pytest.mark.once

# The package under test for the children, whether it runs from src/ or installed.
PKG_PARENT = str(Path(rmq.__file__).resolve().parent.parent)


def read_json(path):
    return json.loads(Path(path).read_text("utf-8"))


def journaled(path, **kwargs):
    """A KVConfig that journals every change, whatever the table's size."""
    return KVConfig(path, rewrite_max_table_bytes=0, **kwargs)


def crash(kv):
    """Leave ``kv`` as a killed process would: journal fd closed, no compaction."""
    if kv._journal is not None:
        kv._journal.close()
    kv._closed = True
    kvconfig._OPEN.discard(kv)


def journals(directory):
    return sorted(p.name for p in Path(directory).iterdir() if ".journal." in p.name)


def records(jpath):
    """The decoded records of a journal file (its format checked on the way)."""
    data = Path(jpath).read_bytes()
    assert data[:8] == kvconfig.JOURNAL_MAGIC
    pos, out = 8, []
    while pos < len(data):
        length, crc = struct.unpack_from("<II", data, pos)
        payload = data[pos + 8:pos + 8 + length]
        assert len(payload) == length
        assert zlib.crc32(payload, zlib.crc32(data[pos:pos + 4])) == crc
        out.append(json.loads(payload))
        pos += 8 + length
    return out


# ---------------------------------------------------------------- table semantics

def test_round_trip_in_memory():
    kv = KVConfig(None)
    assert kv.get("ns", "k") is None
    assert kv.namespace("ns") is None
    assert kv.namespaces() == []
    kv.put("ns", "k", "v")
    kv.put("ns", "k2", "v2")
    kv.put("other", "k", "")
    assert kv.get("ns", "k") == "v"
    assert kv.get("other", "k") == ""
    assert kv.get("ns", "missing") is None
    assert kv.namespace("ns") == {"k": "v", "k2": "v2"}
    assert sorted(kv.namespaces()) == ["ns", "other"]
    kv.put("ns", "k", "v3")
    assert kv.get("ns", "k") == "v3"
    kv.delete("ns", "k")
    assert kv.get("ns", "k") is None
    assert kv.namespace("ns") == {"k2": "v2"}


def test_namespace_is_a_copy():
    kv = KVConfig(None)
    kv.put("ns", "k", "v")
    table = kv.namespace("ns")
    table["k"] = "changed"
    table["new"] = "x"
    assert kv.namespace("ns") == {"k": "v"}


def test_kv_list_is_the_5_0_0_answer():
    """GET_KVLIST_BY_NAMESPACE (219) in Java 5.0.0's order, byte for byte (its vector,
    seq 466): KVConfigManager keeps a namespace in a HashMap, KVTable writes it in its
    iteration order (bucket, then insertion), not in the order of the puts."""
    vectors = Path(__file__).resolve().parent / "vectors" / "java-5.0.0"
    java = rmq.decode_frame((vectors / "219_get_kvlist_by_namespace_response.bin").read_bytes())
    kv = KVConfig(None)
    kv.put("peer_ns", "peer_key", "peer_value")          # seq 439
    kv.put("peer_ns", "peer_key2", "peer_value2")        # (not among the vectors)
    assert bodies.encode_kv_table(kv.namespace("peer_ns")) == bytes(java.body)
    assert list(kv.namespace("peer_ns")) == ["peer_key2", "peer_key"]


def test_kv_list_order_follows_the_hash_maps_history():
    """A HashMap never shrinks: once 13 keys made its table 32 buckets, what is left
    comes in the order of 32 buckets (16 for a namespace that never held more than 12),
    a JDK fact checked in test_javaorder."""
    kv = KVConfig(None)
    for i in range(13):
        kv.put("ns", f"key-{i}", "v")
    for i in range(3, 13):
        kv.delete("ns", f"key-{i}")
    for k in ("a", "b", "kv-1", "kv-2", "kv-3"):
        kv.put("ns", k, "v")
        kv.put("fresh", k, "v")
    assert list(kv.namespace("ns")) == java_hash_order(kv.namespace("ns"), 32)
    assert list(kv.namespace("fresh")) == java_hash_order(kv.namespace("fresh"), 16)
    assert list(kv.namespace("ns")) != java_hash_order(kv.namespace("ns"), 16)


def test_deleting_the_last_key_keeps_the_namespace_empty():
    # Java deleteKVConfig removes the key only: getKVListByNamespace then answers
    # {"table":{}} rather than QUERY_NOT_FOUND.
    kv = KVConfig(None)
    kv.put("ns", "k", "v")
    kv.delete("ns", "k")
    assert kv.namespace("ns") == {}
    assert "ns" in kv.namespaces()


def test_delete_of_absent_things_is_harmless():
    kv = KVConfig(None)
    kv.delete("nope", "k")
    kv.put("ns", "k", "v")
    kv.delete("ns", "other")
    assert kv.namespace("ns") == {"k": "v"}
    assert kv.namespace("nope") is None


def test_non_str_arguments_are_refused():
    kv = KVConfig(None)
    with pytest.raises(TypeError):
        kv.put("ns", "k", None)
    with pytest.raises(TypeError):
        kv.put("ns", 1, "v")
    with pytest.raises(TypeError):
        kv.delete(None, "k")


def test_non_ascii_round_trip(tmp_path):
    path = tmp_path / "kvConfig.json"
    kv = journaled(path)
    kv.put("命名空间", "ключ", "valeur é 😀")
    assert journaled(path).get("命名空间", "ключ") == "valeur é 😀"   # from the journal
    kv.close()
    assert journaled(path).get("命名空间", "ключ") == "valeur é 😀"   # from the file
    # written as UTF-8 characters, not \u escapes, as fastjson writes them
    assert "😀" in path.read_text("utf-8")


# ---------------------------------------------------------------- file format

def test_file_format_is_javas_compact_json(tmp_path):
    path = tmp_path / "kvConfig.json"
    kv = KVConfig(path)
    kv.put("ORDER_TOPIC_CONFIG", "TopicA", "broker-a:4;broker-b:4")
    kv.close()
    text = path.read_text("utf-8")
    assert text == '{"configTable":{"ORDER_TOPIC_CONFIG":{"TopicA":"broker-a:4;broker-b:4"}}}'


def test_reads_a_java_written_file(tmp_path):
    # As Java 4.9.8 writes it: fastjson compact, HashMap order, UTF-8.
    path = tmp_path / "kvConfig.json"
    path.write_bytes(
        '{"configTable":{"ORDER_TOPIC_CONFIG":{"TopicB":"broker-b:8","TopicA":'
        '"broker-a:4;broker-b:4"},"rmq":{"k":"v","ü":"é"}}}'.encode())
    kv = KVConfig(path)
    assert kv.get("ORDER_TOPIC_CONFIG", "TopicA") == "broker-a:4;broker-b:4"
    assert kv.namespace("ORDER_TOPIC_CONFIG") == {"TopicB": "broker-b:8",
                                                  "TopicA": "broker-a:4;broker-b:4"}
    assert kv.get("rmq", "ü") == "é"


def test_reads_pretty_printed_and_loose_scalars(tmp_path):
    # fastjson's pretty form, and scalars fastjson would turn into strings.
    path = tmp_path / "kvConfig.json"
    path.write_text(json.dumps({"configTable": {"ns": {"n": 4, "b": True, "z": None,
                                                       "s": "x"}, "empty": None}},
                               indent="\t"), "utf-8")
    kv = KVConfig(path)
    assert kv.namespace("ns") == {"n": "4", "b": "true", "s": "x"}
    assert kv.namespace("empty") is None


@pytest.mark.parametrize("content", ["", "  \n", "null", "{}", '{"configTable":null}',
                                     '{"configTable":{}}'])
def test_empty_forms_load_as_an_empty_table(tmp_path, content):
    path = tmp_path / "kvConfig.json"
    path.write_text(content, "utf-8")
    assert KVConfig(path).namespaces() == []


def test_missing_file_is_empty_and_not_created_until_a_change(tmp_path):
    path = tmp_path / "sub" / "dir" / "kvConfig.json"
    kv = journaled(path)
    assert kv.namespaces() == []
    assert not path.exists()
    kv.put("ns", "k", "v")  # parent directories are created, as Java's mkdirs
    assert journals(path.parent) == ["kvConfig.json.journal.1"]
    assert read_table(path) == {"ns": {"k": "v"}}
    kv.close()
    assert read_json(path) == {"configTable": {"ns": {"k": "v"}}}
    assert journals(path.parent) == []


def test_close_without_a_change_writes_nothing(tmp_path):
    path = tmp_path / "kvConfig.json"
    KVConfig(path).close()
    assert not path.exists()
    java = '{"configTable":{"b":{"k":"v"},"a":{}}}'    # Java's HashMap order: kept
    path.write_text(java, "utf-8")
    kv = KVConfig(path)
    kv.put("a", "k", "v")
    kv.delete("a", "k")
    kv.close()
    assert path.read_text("utf-8") == '{"configTable":{"a":{},"b":{"k":"v"}}}'
    KVConfig(path).close()
    assert path.read_text("utf-8") == '{"configTable":{"a":{},"b":{"k":"v"}}}'


@pytest.mark.parametrize("content", [
    "{not json", '{"configTable":', "[1,2]", '"text"', '{"configTable":[]}',
    '{"configTable":{"ns":"v"}}', '{"configTable":{"ns":{"k":{"nested":1}}}}',
])
def test_corrupt_file_raises_a_typed_error_naming_the_path(tmp_path, content):
    path = tmp_path / "kvConfig.json"
    path.write_text(content, "utf-8")
    with pytest.raises(KVConfigError) as info:
        KVConfig(path)
    assert str(path) in str(info.value)
    assert info.value.path == str(path)
    assert isinstance(info.value, RmqError) and isinstance(info.value, ValueError)


def test_invalid_utf8_raises(tmp_path):
    path = tmp_path / "kvConfig.json"
    path.write_bytes(b'{"configTable":{"ns":{"k":"\xff"}}}')
    with pytest.raises(KVConfigError, match="kvConfig.json"):
        KVConfig(path)


def test_unreadable_path_raises(tmp_path):
    path = tmp_path / "kvConfig.json"
    path.mkdir()  # a directory where the file should be
    with pytest.raises(KVConfigError, match="kvConfig.json"):
        KVConfig(path)


# ---------------------------------------------------------------- persistence

def test_persistence_across_instances(tmp_path):
    path = tmp_path / "kvConfig.json"
    kv = KVConfig(path)
    for i in range(20):
        kv.put(f"ns{i % 3}", f"k{i}", f"v{i}")
    kv.delete("ns0", "k0")
    again = KVConfig(path)
    assert again.snapshot() == kv.snapshot()
    assert again.get("ns0", "k0") is None
    assert again.get("ns1", "k19") == "v19"
    crash(again)
    kv.close()
    assert read_json(path)["configTable"] == kv.snapshot()
    assert KVConfig(path).snapshot() == kv.snapshot()


def test_every_change_appends_one_fsynced_record_and_rewrites_nothing(tmp_path,
                                                                      monkeypatch):
    # Java rewrites kvConfig.json on every put and delete; rmq appends one journal
    # record and fsyncs it, and writes nothing for a change that changes nothing.
    path = tmp_path / "kvConfig.json"
    syncs, rewrites = [], []
    real_sync, real_write = kvconfig._sync, kvconfig._atomic_write
    monkeypatch.setattr(kvconfig, "_sync", lambda fd: (syncs.append(fd), real_sync(fd)))
    monkeypatch.setattr(kvconfig, "_atomic_write",
                        lambda *a, **k: (rewrites.append(a), real_write(*a, **k))[1])
    kv = journaled(path)
    kv.put("ns", "k", "v")
    assert len(syncs) == 2                       # the new journal's header, the record
    kv.put("ns", "k", "v")                       # unchanged value: already on disk
    kv.delete("ns", "absent")                    # absent key: nothing to record
    kv.delete("nope", "k")
    assert len(syncs) == 2
    kv.put("ns", "k2", "w")
    kv.delete("ns", "k")
    assert len(syncs) == 4
    assert records(journal_path(path, 1)) == [["put", "ns", "k", "v"],
                                              ["put", "ns", "k2", "w"], ["del", "ns", "k"]]
    assert rewrites == [] and not path.exists()
    assert KVConfig(None).put("a", "b", "c") is None  # memory only: no file at all
    assert os.listdir(tmp_path) == ["kvConfig.json.journal.1"]


@pytest.mark.parametrize("where", ["write", "partial write", "fsync"])
def test_failed_append_raises_and_changes_nothing(tmp_path, monkeypatch, where):
    path = tmp_path / "kvConfig.json"
    jpath = journal_path(path, 1)
    kv = journaled(path)
    kv.put("ns", "k", "old")
    size = os.path.getsize(jpath)
    real_write = kvconfig._write_all

    def fail_write(fd, data):
        if where == "partial write":
            real_write(fd, data[:len(data) // 2])
        raise OSError(28, "No space left on device")

    def fail_sync(fd):
        raise OSError(28, "No space left on device")

    if where == "fsync":
        monkeypatch.setattr(kvconfig, "_sync", fail_sync)
    else:
        monkeypatch.setattr(kvconfig, "_write_all", fail_write)
    with pytest.raises(KVConfigError, match="No space left") as info:
        kv.put("ns", "k", "new")
    assert info.value.path == str(path)
    with pytest.raises(KVConfigError):
        kv.delete("ns", "k")
    assert kv.get("ns", "k") == "old"  # memory never claims what the disk lacks
    assert kv.table_bytes == len("nskold")
    monkeypatch.undo()
    assert read_table(path) == {"ns": {"k": "old"}}
    if where != "fsync":               # cut back to the last whole record
        assert os.path.getsize(jpath) == size
    kv.put("ns", "k2", "later")        # the journal goes on
    assert journaled(path).snapshot() == {"ns": {"k": "old", "k2": "later"}}


def test_failed_compaction_keeps_the_journals_and_a_later_one_succeeds(tmp_path,
                                                                       monkeypatch):
    path = tmp_path / "kvConfig.json"
    kv = journaled(path)
    kv.put("ns", "k", "v1")

    def crash_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(kvconfig.os, "replace", crash_replace)
    with pytest.raises(KVConfigError, match="No space left"):
        kv.compact()
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["kvConfig.json.journal.1"]  # no temp
    kv.put("ns", "k", "v2")                     # after the rotation: generation 2
    assert journals(tmp_path) == ["kvConfig.json.journal.1", "kvConfig.json.journal.2"]
    assert read_table(path) == {"ns": {"k": "v2"}}
    assert kv.compact() is True
    assert os.listdir(tmp_path) == ["kvConfig.json"]
    assert read_json(path) == {"configTable": {"ns": {"k": "v2"}}}


def test_crash_before_rename_leaves_the_old_file_and_a_temp_that_is_cleaned(tmp_path,
                                                                            monkeypatch):
    path = tmp_path / "kvConfig.json"
    KVConfig(path).put("ns", "k", "old")
    stale = tmp_path / ".kvConfig.json.999.deadbeef.tmp"
    stale.write_text('{"configTable":{"ns":{"k":"ha', "utf-8")  # a torn temporary
    kv = KVConfig(path)
    assert kv.get("ns", "k") == "old"
    assert not stale.exists()


def test_file_mode_is_kept(tmp_path):
    path = tmp_path / "kvConfig.json"
    kv = journaled(path)
    kv.put("ns", "k", "v")
    kv.compact()
    os.chmod(path, 0o600)
    kv.put("ns", "k", "w")             # a new journal, with the file's mode
    assert stat.S_IMODE(os.stat(journal_path(path, 2)).st_mode) == 0o600
    kv.close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_concurrent_writers_and_readers(tmp_path):
    path = tmp_path / "kvConfig.json"
    kv = KVConfig(path)
    errors = []
    stop = threading.Event()

    def writer(t):
        try:
            for i in range(40):
                kv.put(f"ns{t}", f"k{i}", f"{t}-{i}")
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    def reader():
        try:
            while not stop.is_set():
                for ns in kv.namespaces():
                    table = kv.namespace(ns)
                    assert table is not None
                    for k, v in table.items():
                        assert v.startswith(ns[2:] + "-")
                time.sleep(0.0005)  # let the writers have the GIL between fsyncs
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    readers = [threading.Thread(target=reader) for _ in range(2)]
    writers = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for th in readers + writers:
        th.start()
    for th in writers:
        th.join()
    stop.set()
    for th in readers:
        th.join()
    assert not errors
    expected = {f"ns{t}": {f"k{i}": f"{t}-{i}" for i in range(40)} for t in range(4)}
    assert kv.snapshot() == expected
    assert read_table(path) == expected
    kv.close()
    assert read_json(path)["configTable"] == expected


# ---------------------------------------------------------------- kill -9

CHILD = r"""
import sys
from rmq.namesrv.kvconfig import KVConfig
kv = KVConfig(sys.argv[1])
i = int(sys.argv[2])
pad = "x" * 3000
while True:
    key = "k%d" % (i % 150)
    kv.put("ns%d" % (i % 3), key, "%d:%s" % (i, pad))
    sys.stdout.write("%d\n" % i)
    sys.stdout.flush()
    i += 1
"""


def killed_child(script, path, start, env, after, lines=1):
    """Run ``script`` (which prints each index once its change returned) from index
    ``start``; SIGKILL it ``after`` seconds past its ``lines``-th line (counted in
    changes, not seconds, so that a loaded machine does not kill it before it got
    anywhere). The indexes it reported done (a torn last line is not done)."""
    proc = subprocess.Popen([sys.executable, "-c", script, str(path), str(start)],
                            stdout=subprocess.PIPE, env=env)
    try:
        first = b"".join(proc.stdout.readline() for _ in range(lines))
        assert first.count(b"\n") == lines, "child died before its first changes"
        time.sleep(after)
        os.kill(proc.pid, signal.SIGKILL)
        rest = proc.stdout.read()
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    return [int(line) for line in (first + rest).decode("ascii").split("\n")[:-1]]


def test_kill_9_at_random_moments_never_tears_the_file(tmp_path):
    """A child puts in a loop and prints each index once put() returned; SIGKILL at a
    random moment; the file must parse and hold every reported put (or a later one)."""
    path = tmp_path / "kvConfig.json"
    env = dict(os.environ, PYTHONPATH=PKG_PARENT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rng = random.Random(0x5EED)
    start = 0
    latest = {}  # (ns, key) -> highest index reported done
    kills = 0
    deadline = time.monotonic() + 8
    while kills < 8 and time.monotonic() < deadline:
        done = killed_child(CHILD, path, start, env, rng.uniform(0.0, 0.25))
        kills += 1
        assert done and done == list(range(start, start + len(done)))
        for i in done:
            latest[(f"ns{i % 3}", f"k{i % 150}")] = i
        table = read_table(path)                  # never torn, never corrupt
        for (ns, key), i in latest.items():
            stored = int(table[ns][key].split(":", 1)[0])
            assert stored >= i, f"{ns}/{key}: put {i} reported done, file holds {stored}"
        start = done[-1] + 1 + 1000  # later puts may have landed unreported: skip ahead
        assert not [p for p in tmp_path.iterdir() if not ours(p.name)]
    assert kills >= 3
    kv = KVConfig(path)  # loads what the last child left, removes its temporaries
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(kv.snapshot()["ns0"]) > 0
    kv.close()
    assert [p.name for p in tmp_path.iterdir()] == ["kvConfig.json"]


def ours(name):
    return (name == "kvConfig.json" or name.startswith("kvConfig.json.journal.")
            or (name.startswith(".kvConfig.json.") and name.endswith(".tmp")))


def test_temporaries_left_before_the_first_file_are_cleaned(tmp_path):
    stale = tmp_path / ".kvConfig.json.1.cafe.tmp"
    stale.write_text("{", "utf-8")
    other = tmp_path / ".other.json.1.cafe.tmp"  # not ours
    other.write_text("{", "utf-8")
    assert KVConfig(tmp_path / "kvConfig.json").namespaces() == []
    assert not stale.exists() and other.exists()


# ---------------------------------------------------------------- journal replay

def random_ops(rng, n, namespaces=4, keys=30):
    ops = []
    for i in range(n):
        ns, key = f"ns{rng.randrange(namespaces)}", f"k{rng.randrange(keys)} é"
        if rng.random() < 0.25:
            ops.append(("del", ns, key))
        else:
            ops.append(("put", ns, key, f"{i} 😀 \"q\" \\ \n" + "x" * rng.randrange(200)))
    return ops


def run_ops(kv, ops):
    for op in ops:
        if op[0] == "put":
            kv.put(*op[1:])
        else:
            kv.delete(*op[1:])


def table_size(table):
    return sum(len(ns.encode()) + sum(len(k.encode()) + len(v.encode())
                                      for k, v in kv.items()) for ns, kv in table.items())


@pytest.mark.parametrize("seed", range(5))
def test_reload_after_journal_replay_equals_the_table_in_memory(tmp_path, seed):
    rng = random.Random(seed)
    path = tmp_path / "kvConfig.json"
    kv = journaled(path)
    for round_no in range(4):
        run_ops(kv, random_ops(rng, 150))
        if round_no == 1:
            kv.compact()                 # a snapshot and a journal over it
        again = journaled(path)
        assert again.snapshot() == kv.snapshot() == read_table(path)
        assert again.table_bytes == kv.table_bytes == table_size(kv.snapshot())
        crash(again)
    kv.close()
    assert path.read_bytes() == kvconfig._dumps(kv.snapshot()).encode("utf-8")
    assert journaled(path).snapshot() == kv.snapshot()


def test_appends_go_on_in_the_last_journal_after_a_restart(tmp_path):
    path = tmp_path / "kvConfig.json"
    kv = journaled(path)
    kv.put("ns", "a", "1")
    crash(kv)
    kv = journaled(path)
    kv.put("ns", "b", "2")
    crash(kv)
    assert journals(tmp_path) == ["kvConfig.json.journal.1"]
    assert records(journal_path(path, 1)) == [["put", "ns", "a", "1"], ["put", "ns", "b", "2"]]


def test_journals_are_replayed_in_generation_order(tmp_path):
    path = tmp_path / "kvConfig.json"
    path.write_text('{"configTable":{"ns":{"k":"file","f":"x"}}}', "utf-8")
    for gen, ops in [(9, [["put", "ns", "k", "nine"]]),
                     (10, [["put", "ns", "k", "ten"], ["del", "ns", "f"]]),
                     (2, [["put", "ns", "k", "two"], ["put", "ns", "t", "2"]])]:
        Path(journal_path(path, gen)).write_bytes(
            kvconfig.JOURNAL_MAGIC + b"".join(kvconfig._record(op) for op in ops))
    assert read_table(path) == {"ns": {"k": "ten", "t": "2"}}
    kv = journaled(path)
    kv.put("ns", "n", "new")
    assert records(journal_path(path, 10))[-1] == ["put", "ns", "n", "new"]
    kv.close()
    assert os.listdir(tmp_path) == ["kvConfig.json"]
    assert read_json(path) == {"configTable": {"ns": {"k": "ten", "n": "new", "t": "2"}}}


def test_a_torn_tail_is_ignored_then_cut_off(tmp_path):
    path = tmp_path / "kvConfig.json"
    jpath = Path(journal_path(path, 1))
    kv = journaled(path)
    kv.put("ns", "a", "1")
    kv.put("ns", "b", "2")
    crash(kv)
    whole = jpath.read_bytes()
    last = kvconfig._record(["put", "ns", "c", "3 " + "z" * 50])
    # every cut of the last append, and garbage or zeros where its bytes should be
    tails = [last[:n] for n in range(1, len(last))]
    tails += [last[:-1] + bytes([last[-1] ^ 1]), b"\0" * 100, b"\0" * 3,
              last[:8] + b"\0" * (len(last) - 8)]
    for tail in tails:
        jpath.write_bytes(whole + tail)
        assert read_table(path) == {"ns": {"a": "1", "b": "2"}}
        assert jpath.read_bytes() == whole + tail       # read_table changes nothing
        kv = journaled(path)
        assert kv.snapshot() == {"ns": {"a": "1", "b": "2"}}
        assert jpath.read_bytes() == whole              # cut back to the whole records
        kv.put("ns", "d", "4")                          # appends after them
        assert journaled(path).snapshot() == {"ns": {"a": "1", "b": "2", "d": "4"}}
        crash(kv)
        jpath.write_bytes(whole)


def test_a_journal_torn_while_being_created(tmp_path):
    path = tmp_path / "kvConfig.json"
    path.write_text('{"configTable":{"ns":{"k":"v"}}}', "utf-8")
    jpath = Path(journal_path(path, 1))
    for torn in [b"", b"RMQ", b"\0\0\0\0\0"]:
        jpath.write_bytes(torn)
        kv = journaled(path)
        assert kv.snapshot() == {"ns": {"k": "v"}}
        kv.put("ns", "k2", "v2")
        assert read_table(path) == {"ns": {"k": "v", "k2": "v2"}}
        crash(kv)
        jpath.unlink()


@pytest.mark.parametrize("damage", ["payload", "crc", "length", "zero length", "magic",
                                    "json", "shape"])
def test_a_corrupt_record_in_the_middle_raises_naming_the_journal(tmp_path, damage):
    path = tmp_path / "kvConfig.json"
    jpath = Path(journal_path(path, 1))
    kv = journaled(path)
    for i in range(3):
        kv.put("ns", f"k{i}", f"value {i}")
    crash(kv)
    data = bytearray(jpath.read_bytes())
    first = 8                                        # the first record, two follow it
    if damage == "payload":
        data[first + 12] ^= 0x40
    elif damage == "crc":
        data[first + 4] ^= 1
    elif damage == "length":
        data[first] += 1                             # still inside the file
    elif damage == "zero length":
        data[first:first + 4] = b"\0\0\0\0"
    elif damage == "magic":
        data[0:8] = b"NOTAJRNL"
    else:
        payload = b'{"op":"put"}' if damage == "shape" else b'["put","ns",'
        rec = struct.pack("<I", len(payload))
        rec += struct.pack("<I", zlib.crc32(payload, zlib.crc32(rec))) + payload
        data[first:first] = rec
    jpath.write_bytes(bytes(data))
    for load in (KVConfig, read_table):
        with pytest.raises(KVConfigError) as info:
            load(path)
        assert str(jpath) in str(info.value)
        assert info.value.path == str(jpath)
    assert jpath.read_bytes() == bytes(data)          # nothing cut: it is not a torn tail


# ---------------------------------------------------------------- compaction

def test_compaction_leaves_kvconfig_json_alone_in_javas_bytes(tmp_path):
    path = tmp_path / "kvConfig.json"
    kv = journaled(path)
    run_ops(kv, random_ops(random.Random(7), 300))
    kv.put("empty", "k", "v")
    kv.delete("empty", "k")
    assert kv.compact() is True
    assert os.listdir(tmp_path) == ["kvConfig.json"]
    assert path.read_bytes() == kvconfig._dumps(kv.snapshot()).encode("utf-8")
    assert read_json(path) == {"configTable": kv.snapshot()} and kv.snapshot()["ns0"]
    assert kv.compact() is False                     # nothing new
    kv.put("ns0", "after", "compaction")
    assert journals(tmp_path) == ["kvConfig.json.journal.2"]
    kv.close()
    kv.close()                                       # idempotent
    assert os.listdir(tmp_path) == ["kvConfig.json"]
    assert path.read_bytes() == kvconfig._dumps(kv.snapshot()).encode("utf-8")
    assert '"empty":{}' in path.read_text("utf-8")
    assert kv.get("ns0", "after") == "compaction"    # reads go on after close
    with pytest.raises(KVConfigError, match="closed"):
        kv.put("ns", "k", "v")
    with pytest.raises(KVConfigError, match="closed"):
        kv.delete("ns0", "after")
    assert kv.compact() is False


def test_persist_writes_the_file_now(tmp_path):
    path = tmp_path / "new" / "kvConfig.json"
    kv = KVConfig(path)
    kv.persist()                                     # as before: the file, even empty
    assert path.read_text("utf-8") == '{"configTable":{}}'
    kv.put("ns", "k", "v")
    kv.persist()
    assert os.listdir(path.parent) == ["kvConfig.json"]
    assert read_json(path) == {"configTable": {"ns": {"k": "v"}}}
    KVConfig(None).persist()


@pytest.mark.parametrize("seed", range(4))
def test_chunked_snapshot_text_is_dumps_text(monkeypatch, seed):
    rng = random.Random(seed)
    monkeypatch.setattr(kvconfig, "_CHUNK_CHARS", rng.choice([1, 50, 1000]))
    monkeypatch.setattr(kvconfig, "_CHUNK_ITEMS", rng.choice([1, 3, 100]))
    monkeypatch.setattr(kvconfig, "_SORT_RUN", rng.choice([2, 7, 1000]))
    alphabet = "aZ09 é\"\\/\n\t\x00\x1f\u2028😀"
    word = lambda: "".join(rng.choice(alphabet) for _ in range(rng.randrange(6)))
    table = {word(): {word(): word() for _ in range(rng.randrange(40))}
             for _ in range(rng.randrange(1, 8))}
    pauses = []
    text = b"".join(kvconfig._snapshot_chunks(table, lambda: pauses.append(1)))
    assert text == kvconfig._dumps(table).encode("utf-8")
    assert json.loads(text) == {"configTable": table}
    assert b"".join(kvconfig._snapshot_chunks({})) == b'{"configTable":{}}'


def test_the_snapshot_writer_gives_the_gil_away_between_chunks(monkeypatch):
    table = {f"ns{n}": {f"k{i}": "v" * 1024 for i in range(2000)} for n in range(4)}
    pauses = []
    chunks = list(kvconfig._snapshot_chunks(table, lambda: pauses.append(1)))
    assert max(len(c) for c in chunks) < 2 * kvconfig._CHUNK_CHARS
    assert len(pauses) >= 8 * 1024 * 1024 // kvconfig._CHUNK_CHARS - 1


def test_a_fuzzy_snapshot_with_every_journal_left_replays_exactly(tmp_path, monkeypatch):
    """Changes made while the snapshot is being written (between its chunks), then a
    crash at each step of the compaction: the state loads exactly."""
    path = tmp_path / "kvConfig.json"
    monkeypatch.setattr(kvconfig, "_CHUNK_ITEMS", 5)
    rng = random.Random(3)
    kv = journaled(path)
    run_ops(kv, random_ops(rng, 300, namespaces=3, keys=40))
    saved = {name: (tmp_path / name).read_bytes() for name in journals(tmp_path)}
    during = random_ops(rng, 400, namespaces=4, keys=40)
    monkeypatch.setattr(kvconfig, "_yield_gil", lambda: during and run_ops(kv, [during.pop()]))
    assert kv.compact() is True
    assert not during or len(during) < 400
    final = kv.snapshot()
    assert read_table(path) == final
    assert journals(tmp_path) == ["kvConfig.json.journal.2"]
    # the crash came after the replace, before the old journal was deleted
    for name, data in saved.items():
        (tmp_path / name).write_bytes(data)
    assert read_table(path) == final
    assert journaled(path).snapshot() == final


def test_background_compaction_starts_past_the_threshold(tmp_path):
    path = tmp_path / "kvConfig.json"
    kv = journaled(path, compact_journal_bytes=20_000)
    for i in range(200):
        kv.put("ns", f"k{i % 10}", f"{i}:" + "x" * 500)
    deadline = time.monotonic() + 10
    while (kv._compactor is not None or not path.exists()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert path.exists()
    # the threshold is max(compact_journal_bytes, size of the last snapshot)
    assert kv.journal_bytes <= 20_000 + 600
    assert read_table(path) == kv.snapshot()
    kv.close()
    assert os.listdir(tmp_path) == ["kvConfig.json"]


def test_a_failed_background_compaction_is_logged_and_retried_later(tmp_path, monkeypatch,
                                                                   caplog):
    path = tmp_path / "kvConfig.json"
    kv = journaled(path, compact_journal_bytes=2_000)

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(kvconfig, "_atomic_write", full)
    for i in range(10):
        kv.put("ns", f"k{i}", "x" * 300)
    deadline = time.monotonic() + 10
    while kv._compactor is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "background compaction failed: cannot write" in caplog.text
    assert kv._compact_after > time.monotonic()          # no retry storm
    for i in range(10):
        kv.put("ns", f"more{i}", "y" * 300)               # changes go on, journaled
    assert kv._compactor is None
    monkeypatch.undo()
    assert read_table(path) == kv.snapshot()
    kv.close()
    assert os.listdir(tmp_path) == ["kvConfig.json"]


def writers_compactor_and_reader(kv, writer, *, writers=3, snapshots=False):
    """``writer(t)`` in ``writers`` threads while one thread compacts ``kv`` every 2 ms
    and one reads it (each value starts with its writer's number; ``snapshots``: and
    takes a snapshot each time), until the writers are done. Returns the errors the
    threads met and each compaction's result."""
    errors, stop = [], threading.Event()
    compactions = []

    def guarded(target, *args):
        try:
            target(*args)
        except Exception as e:  # pragma: no cover - reported by the caller
            errors.append(e)

    def compactor():
        while not stop.is_set():
            compactions.append(kv.compact())
            time.sleep(0.002)

    def reader():
        while not stop.is_set():
            for ns in kv.namespaces():
                for v in kv.namespace(ns).values():
                    assert v.startswith(ns[2:] + "-")
            if snapshots:
                kv.snapshot()
            time.sleep(0.0005)

    threads = [threading.Thread(target=guarded, args=(writer, t)) for t in range(writers)]
    others = [threading.Thread(target=guarded, args=(f,)) for f in (compactor, reader)]
    for th in threads + others:
        th.start()
    for th in threads:
        th.join()
    stop.set()
    for th in others:
        th.join()
    return errors, compactions


def test_compaction_concurrent_with_writers_and_readers_loses_nothing(tmp_path):
    path = tmp_path / "kvConfig.json"
    kv = journaled(path, compact_journal_bytes=30_000)

    def writer(t):
        for i in range(300):
            kv.put(f"ns{t}", f"k{i % 50}", f"{t}-{i}-" + "y" * 200)
            if i % 5 == 0:
                kv.delete(f"ns{t}", f"k{(i * 7) % 50}")

    errors, compactions = writers_compactor_and_reader(kv, writer, snapshots=True)
    assert not errors, errors
    assert sum(compactions) >= 2
    expected = kv.snapshot()
    assert read_table(path) == expected
    assert kv.table_bytes == table_size(expected)
    assert journaled(path).snapshot() == expected
    kv.close()
    assert os.listdir(tmp_path) == ["kvConfig.json"]
    assert path.read_bytes() == kvconfig._dumps(expected).encode("utf-8")


def test_a_normal_interpreter_exit_compacts(tmp_path):
    path = tmp_path / "kvConfig.json"
    env = dict(os.environ, PYTHONPATH=PKG_PARENT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    code = ("import sys\nfrom rmq.namesrv.kvconfig import KVConfig\n"
            "kv = KVConfig(sys.argv[1])\nkv.put('ns', 'k', 'v ü')\n")
    subprocess.run([sys.executable, "-c", code, str(path)], env=env, check=True, timeout=60)
    assert os.listdir(tmp_path) == ["kvConfig.json"]
    assert path.read_bytes() == '{"configTable":{"ns":{"k":"v ü"}}}'.encode()


# ---------------------------------------------------------------- limits

@pytest.mark.parametrize("change, limit, size, maximum", [
    (("put", "n" * 4097, "k", "v"), "maxKvNamespaceBytes", 4097, 4096),
    (("put", "ns", "é" * 2049, "v"), "maxKvKeyBytes", 4098, 4096),
    (("put", "ns", "k", "v" * (2 << 20)), "maxKvValueBytes", 2 << 20, 1 << 20),
    (("del", "n" * 5000, "k"), "maxKvNamespaceBytes", 5000, 4096),
    (("del", "ns", "k" * 4097), "maxKvKeyBytes", 4097, 4096),
])
def test_each_limit_refuses_and_changes_nothing(tmp_path, change, limit, size, maximum):
    path = tmp_path / "kvConfig.json"
    kv = journaled(path)
    kv.put("ns", "k", "v")
    before = (kv.snapshot(), kv.table_bytes, kv.journal_bytes,
              Path(journal_path(path, 1)).read_bytes())
    with pytest.raises(KVLimitError) as info:
        run_ops(kv, [change])
    what = {"maxKvNamespaceBytes": "namespace", "maxKvKeyBytes": "key",
            "maxKvValueBytes": "value"}[limit]
    assert str(info.value) == f"KV {what} of {size} bytes exceeds {limit} {maximum}"
    assert (info.value.limit, info.value.size, info.value.maximum) == (limit, size, maximum)
    assert isinstance(info.value, KVConfigError) and isinstance(info.value, ValueError)
    assert (kv.snapshot(), kv.table_bytes, kv.journal_bytes,
            Path(journal_path(path, 1)).read_bytes()) == before


def test_limits_at_their_exact_size_are_accepted():
    kv = KVConfig(None, max_key_bytes=3, max_namespace_bytes=2, max_value_bytes=4)
    kv.put("ns", "kéy"[:2], "vvvv")
    kv.put("ns", "abc", "éé")
    with pytest.raises(KVLimitError, match="KV value of 5 bytes exceeds maxKvValueBytes 4"):
        kv.put("ns", "abc", "vvvvv")
    with pytest.raises(KVLimitError, match="maxKvNamespaceBytes 2"):
        kv.put("nsx", "k", "v")


def test_the_table_limit(tmp_path):
    path = tmp_path / "kvConfig.json"
    kv = KVConfig(path, max_table_bytes=100)
    kv.put("ns", "k", "v" * 90)                       # 93 bytes
    assert kv.table_bytes == 93
    with pytest.raises(KVLimitError) as info:
        kv.put("ns", "k2", "v" * 6)                   # 93 + 2 + 6
    assert str(info.value) == "KV table of 101 bytes exceeds maxKvTableBytes 100"
    with pytest.raises(KVLimitError, match="KV table of 101 bytes"):
        kv.put("n2", "k", "v" * 5)                    # a new namespace counts its name
    with pytest.raises(KVLimitError, match="KV table of 101 bytes"):
        kv.put("ns", "k", "v" * 98)                   # a bigger value counts the difference
    assert kv.snapshot() == {"ns": {"k": "v" * 90}} and kv.table_bytes == 93
    kv.put("ns", "k2", "v" * 5)                       # exactly 100
    kv.put("ns", "k", "é" * 45)                       # the same size: allowed
    kv.delete("ns", "k2")
    assert kv.table_bytes == 93
    assert KVConfig(path).table_bytes == 93
    # a table loaded above the limit is kept; a change that does not grow it goes through
    crash(kv)
    small = KVConfig(path, max_table_bytes=50)
    assert small.table_bytes == 93
    small.put("ns", "k", "v" * 80)                   # shrinks: allowed above the limit
    assert small.table_bytes == 83
    with pytest.raises(KVLimitError):
        small.put("ns", "k3", "x")
    small.close()


def test_table_bytes_is_tracked_through_every_change():
    rng = random.Random(11)
    kv = KVConfig(None)
    for op in random_ops(rng, 2000, namespaces=6, keys=50):
        run_ops(kv, [op])
    assert kv.table_bytes == table_size(kv.snapshot())


@pytest.mark.parametrize("change", [("put", "ns\ud800", "k", "v"), ("put", "ns", "\udfff", "v"),
                                    ("put", "ns", "k", "a\ud83d"), ("del", "ns", "k\udc00")])
def test_lone_surrogates_are_refused(tmp_path, change):
    path = tmp_path / "kvConfig.json"
    kv = KVConfig(path)
    kv.put("ns", "k", "v")
    size = kv.journal_bytes
    with pytest.raises(KVEncodingError, match="lone surrogate") as info:
        run_ops(kv, [change])
    assert isinstance(info.value, KVLimitError) and isinstance(info.value, KVConfigError)
    assert kv.snapshot() == {"ns": {"k": "v"}} and kv.journal_bytes == size
    kv.close()
    assert read_json(path) == {"configTable": {"ns": {"k": "v"}}}


def test_values_are_never_logged(tmp_path, caplog, monkeypatch):
    caplog.set_level("DEBUG", logger="rmq.namesrv.kvconfig")
    path = tmp_path / "kvConfig.json"
    kv = KVConfig(path)
    kv.put("ns", "k", "SECRET-VALUE")

    def fail(fd, data):
        raise OSError(5, "I/O error")

    monkeypatch.setattr(kvconfig, "_write_all", fail)
    with pytest.raises(KVConfigError) as info:
        kv.put("ns", "k", "SECRET-VALUE-2")
    with pytest.raises(KVLimitError) as limit:
        kv.put("ns", "k", "SECRET" * 200_000)
    monkeypatch.undo()
    kv.close()
    KVConfig(path).close()
    assert caplog.records
    assert "SECRET" not in caplog.text
    assert "SECRET" not in str(info.value) + str(limit.value)


# ---------------------------------------------------------------- kill -9 while compacting

CHILD_COMPACTING = r"""
import sys, threading, time
from rmq.namesrv.kvconfig import KVConfig
kv = KVConfig(sys.argv[1], compact_journal_bytes=64 << 10)
i = int(sys.argv[2])

def compactor():
    while True:
        kv.compact()
        time.sleep(0.001)

threading.Thread(target=compactor, daemon=True).start()
pad = "y" * 2000
while True:
    kv.put("ns%d" % (i % 4), "k%d" % (i % 200), "%d:%s" % (i, pad))
    if i % 3 == 0:
        kv.delete("ns%d" % ((i + 1) % 4), "k%d" % ((i * 7) % 200))
    sys.stdout.write("%d\n" % i)
    sys.stdout.flush()
    i += 1
"""


def child_ops(i):
    ops = [("put", f"ns{i % 4}", f"k{i % 200}", f"{i}:{'y' * 2000}")]
    if i % 3 == 0:
        ops.append(("del", f"ns{(i + 1) % 4}", f"k{(i * 7) % 200}"))
    return ops


def apply_model(model, op):
    if op[0] == "put":
        model.setdefault(op[1], {})[op[2]] = op[3]
    elif op[1] in model:
        model[op[1]].pop(op[2], None)


def test_kill_9_during_journal_appends_and_compactions_loses_no_acknowledged_change(
        tmp_path):
    """A child puts and deletes (journal) while a thread compacts without a pause; SIGKILL
    at random moments. After each kill the state on disk is exactly every acknowledged
    change, plus possibly the one under way when the kill came."""
    path = tmp_path / "kvConfig.json"
    env = dict(os.environ, PYTHONPATH=PKG_PARENT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rng = random.Random(0xC0FFEE)
    model = {}
    start = 0
    kills = caught_compacting = 0
    deadline = time.monotonic() + 30
    # (at least 8 kills, and on until one came during a compaction: on a loaded machine
    # the first kills may all fall between compactions)
    while (kills < 8 or not caught_compacting) and time.monotonic() < deadline:
        # 40 changes of 2 KB fill the 64 KiB journal: compactions are under way by then
        done = killed_child(CHILD_COMPACTING, path, start, env, rng.uniform(0.0, 0.2),
                            lines=40)
        kills += 1
        names = os.listdir(tmp_path)
        caught_compacting += (len([n for n in names if ".journal." in n]) > 1
                              or any(n.endswith(".tmp") for n in names))
        assert all(ours(n) for n in names), names
        assert done == list(range(start, start + len(done)))
        for i in done:
            for op in child_ops(i):
                apply_model(model, op)
        # the change under way at the kill: none, its put, or its put and its delete
        candidates = [model]
        for op in child_ops(done[-1] + 1):
            candidates.append(json.loads(json.dumps(candidates[-1])))
            apply_model(candidates[-1], op)
        on_disk = read_table(path)
        assert on_disk in candidates, "acknowledged changes lost or unknown ones found"
        model = on_disk
        start = done[-1] + 2          # the interrupted index is settled either way
    assert kills >= 3
    assert caught_compacting >= 1, "no kill came during a compaction"
    kv = KVConfig(path)
    assert kv.snapshot() == model
    kv.close()
    assert os.listdir(tmp_path) == ["kvConfig.json"]
    assert path.read_bytes() == kvconfig._dumps(model).encode("utf-8")


# ---------------------------------------------------------------- kvConfig.json rewritten below the threshold

def java_table(path):
    """kvConfig.json read alone, as Java's KVConfigManager.load reads it (the file's
    text parsed into KVConfigSerializeWrapper: {"configTable":{ns:{k:v}}}), with plain
    json and no journal replay; a missing file is an empty table."""
    try:
        text = Path(path).read_text("utf-8")
    except FileNotFoundError:
        return {}
    return json.loads(text)["configTable"]


@pytest.mark.parametrize("seed", range(3))
def test_below_the_threshold_the_file_alone_holds_every_change(tmp_path, seed):
    rng = random.Random(seed)
    path = tmp_path / "kvConfig.json"
    kv = KVConfig(path, rewrite_max_table_bytes=1 << 20)
    model = {}
    for op in random_ops(rng, 300):
        run_ops(kv, [op])                 # returned: acknowledged
        apply_model(model, op)
        assert java_table(path) == model
        assert journals(tmp_path) == []
    assert kv.snapshot() == model
    assert path.read_bytes() == kvconfig._dumps(model).encode("utf-8")   # Java's bytes
    crash(kv)                             # as after kill -9: nothing more is written
    assert java_table(path) == model
    assert os.listdir(tmp_path) == ["kvConfig.json"]


def test_a_change_below_the_threshold_is_one_rewrite_and_a_no_op_writes_nothing(
        tmp_path, monkeypatch):
    path = tmp_path / "sub" / "kvConfig.json"
    writes, syncs = [], []
    real_write, real_sync = kvconfig._atomic_write, kvconfig._sync
    monkeypatch.setattr(kvconfig, "_atomic_write",
                        lambda *a, **k: (writes.append(a[0]), real_write(*a, **k))[1])
    monkeypatch.setattr(kvconfig, "_sync", lambda fd: (syncs.append(fd), real_sync(fd)))
    kv = KVConfig(path, rewrite_max_table_bytes=1000)
    kv.put("ns", "k", "v")                # parent directories created, as Java's mkdirs
    assert writes == [str(path)]
    kv.put("ns", "k", "v")                # unchanged value: already on disk
    kv.delete("ns", "absent")
    kv.delete("nope", "k")
    assert len(writes) == 1
    kv.put("ns", "k2", "w")
    kv.delete("ns", "k")
    assert len(writes) == 3 and syncs == []   # no journal record, no journal
    assert os.listdir(path.parent) == ["kvConfig.json"]
    assert java_table(path) == {"ns": {"k2": "w"}}
    assert kv.compact() is False          # nothing the file lacks
    kv.close()
    assert len(writes) == 3


def test_the_file_mode_is_kept_by_a_rewrite(tmp_path):
    path = tmp_path / "kvConfig.json"
    kv = KVConfig(path)
    kv.put("ns", "k", "v")
    os.chmod(path, 0o600)
    kv.put("ns", "k", "w")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert java_table(path) == {"ns": {"k": "w"}}


@pytest.mark.parametrize("where", ["write", "fsync", "replace"])
def test_a_failed_rewrite_raises_and_changes_nothing(tmp_path, monkeypatch, where):
    path = tmp_path / "kvConfig.json"
    kv = KVConfig(path, rewrite_max_table_bytes=1000)
    kv.put("ns", "k", "old")
    before = path.read_bytes()

    def fail(*args):
        raise OSError(28, "No space left on device")

    if where == "write":
        monkeypatch.setattr(kvconfig, "_write_all", fail)
    else:
        monkeypatch.setattr(kvconfig.os, where, fail)
    with pytest.raises(KVConfigError, match="No space left") as info:
        kv.put("ns", "k", "new")
    assert info.value.path == str(path)
    with pytest.raises(KVConfigError):
        kv.delete("ns", "k")
    with pytest.raises(KVConfigError):
        kv.put("other", "k", "v")
    monkeypatch.undo()
    assert kv.snapshot() == {"ns": {"k": "old"}}  # memory never claims what the disk lacks
    assert kv.table_bytes == len("nskold")
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["kvConfig.json"]  # no temporary, no journal
    kv.put("ns", "k2", "later")
    assert java_table(path) == {"ns": {"k": "old", "k2": "later"}}


def test_crossing_the_threshold_journals_above_and_folds_back_below(tmp_path):
    path = tmp_path / "kvConfig.json"
    kv = KVConfig(path, rewrite_max_table_bytes=1000)
    kv.put("ns", "a", "1")
    kv.put("ns", "b", "2")
    small = {"ns": {"a": "1", "b": "2"}}
    assert java_table(path) == small and journals(tmp_path) == []
    # above: journaled; the file keeps the last state below the threshold
    kv.put("ns", "big", "x" * 1000)
    kv.put("ns", "a", "3")
    kv.delete("ns", "b")
    big = {"ns": {"a": "3", "big": "x" * 1000}}
    assert journals(tmp_path) == ["kvConfig.json.journal.1"]
    assert java_table(path) == small
    assert read_table(path) == big
    assert [op[0] for op in records(journal_path(path, 1))] == ["put", "put", "del"]
    # exactly at the threshold is below it: the change that shrinks the table to it
    # folds the journal into the file, which alone holds the table again
    kv.put("ns", "big", "x" * (1000 - len("nsa3big")))
    assert kv.table_bytes == 1000
    exact = {"ns": {"a": "3", "big": "x" * 993}}
    assert os.listdir(tmp_path) == ["kvConfig.json"]
    assert java_table(path) == exact
    kv.put("ns", "c", "4")                 # above again: a new generation
    assert journals(tmp_path) == ["kvConfig.json.journal.2"]
    kv.delete("ns", "big")
    assert os.listdir(tmp_path) == ["kvConfig.json"]
    assert java_table(path) == {"ns": {"a": "3", "c": "4"}} == kv.snapshot()
    crash(kv)
    assert KVConfig(path).snapshot() == {"ns": {"a": "3", "c": "4"}}


def test_journals_left_on_a_small_table_are_folded_by_the_first_change(tmp_path):
    path = tmp_path / "kvConfig.json"
    old = journaled(path)                  # as an rmq that journaled everything left it
    old.put("ns", "a", "1")
    old.put("ns", "b", "2")
    crash(old)
    kv = KVConfig(path, rewrite_max_table_bytes=1000)
    assert journals(tmp_path) == ["kvConfig.json.journal.1"]   # loading writes nothing
    kv.put("ns", "a", "3")                 # a key the journal holds too
    assert os.listdir(tmp_path) == ["kvConfig.json"]
    assert java_table(path) == {"ns": {"a": "3", "b": "2"}}
    # and a compaction of a small table leaves no journal either
    crash(kv)
    old = journaled(path)
    old.put("ns", "c", "4")
    crash(old)
    kv = KVConfig(path, rewrite_max_table_bytes=1000)
    assert kv.compact() is True
    assert os.listdir(tmp_path) == ["kvConfig.json"]
    assert java_table(path) == {"ns": {"a": "3", "b": "2", "c": "4"}}


class Killed(BaseException):
    """A kill -9 between two file-system steps."""


def kill_at(monkeypatch, step):
    """From the ``step``-th file-system call of kvconfig on (0-based), every call raises
    Killed instead of running (nothing more reaches the disk, as after a kill). Returns
    a list that counts the calls made."""
    calls = []

    def wrap(real):
        def call(*args, **kwargs):
            calls.append(real)
            if len(calls) > step:
                raise Killed
            return real(*args, **kwargs)
        return call

    for name in ("_write_all", "_sync", "_fsync_dir"):
        monkeypatch.setattr(kvconfig, name, wrap(getattr(kvconfig, name)))
    for name in ("open", "fsync", "replace", "unlink", "ftruncate", "fchmod"):
        monkeypatch.setattr(kvconfig.os, name, wrap(getattr(os, name)))
    return calls


@pytest.mark.parametrize("scenario", ["rewrite put", "rewrite delete", "above", "fold"])
def test_a_kill_between_any_two_steps_of_a_change_loads_exactly(tmp_path, monkeypatch,
                                                                scenario):
    """The change is killed before each of its file-system calls in turn: what is on
    disk then loads as the table before the change or after it; below the threshold
    kvConfig.json alone does, with no journal."""
    path = tmp_path / "kvConfig.json"
    base = {"ns": {"a": "1", "b": "2"}}
    if scenario == "fold":
        base_journal = [["put", "ns", "big", "x" * 2000], ["put", "ns", "a", "5"]]
        before = {"ns": {"a": "5", "b": "2", "big": "x" * 2000}}
        change, after = ("del", "ns", "big"), {"ns": {"a": "5", "b": "2"}}
    elif scenario == "above":
        base_journal = None
        before = base
        change, after = ("put", "ns", "a", "y" * 2000), {"ns": {"a": "y" * 2000, "b": "2"}}
    else:
        base_journal = None
        before = base
        change = ("put", "ns", "a", "3") if scenario == "rewrite put" else ("del", "ns", "a")
        after = {"ns": {"a": "3", "b": "2"}} if scenario == "rewrite put" else {"ns": {"b": "2"}}
    steps = 0
    while True:
        for p in tmp_path.iterdir():
            p.unlink()
        path.write_text(kvconfig._dumps(base), "utf-8")
        if base_journal is not None:
            Path(journal_path(path, 1)).write_bytes(
                kvconfig.JOURNAL_MAGIC + b"".join(kvconfig._record(op) for op in base_journal))
        kv = KVConfig(path, rewrite_max_table_bytes=1000)
        assert kv.snapshot() == before
        calls = kill_at(monkeypatch, steps)
        try:
            run_ops(kv, [change])
        except Killed:
            killed = True
        else:
            killed = False
        monkeypatch.undo()
        crash(kv)
        on_disk = read_table(path)
        if not killed:
            assert on_disk == after
            if scenario != "above":        # below the threshold: the file alone, exact
                assert java_table(path) == after
                assert os.listdir(tmp_path) == ["kvConfig.json"]
            break
        assert on_disk in (before, after), (scenario, steps, calls)
        if scenario.startswith("rewrite"):
            assert journals(tmp_path) == []
            assert java_table(path) in (before, after), (scenario, steps)
        reloaded = KVConfig(path, rewrite_max_table_bytes=1000)   # temporaries cleaned
        assert reloaded.snapshot() == on_disk
        assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
        crash(reloaded)
        steps += 1
    assert steps >= 5, steps                # it was killed at every step it has


def test_changes_across_the_threshold_with_compactions_and_readers(tmp_path):
    """Writers grow the table past the threshold and shrink it back below, over and
    over, while a thread compacts and readers read: nothing is lost, and once the table
    is small the file alone holds it."""
    path = tmp_path / "kvConfig.json"
    kv = KVConfig(path, rewrite_max_table_bytes=3_000, compact_journal_bytes=4_000)

    def writer(t):
        for i in range(150):
            if i % 30 < 20:
                kv.put(f"ns{t}", f"k{i % 10}", f"{t}-{i}-" + "y" * 150)
            else:
                kv.delete(f"ns{t}", f"k{i % 10}")

    errors, compactions = writers_compactor_and_reader(kv, writer)
    assert not errors, errors
    assert any(compactions)
    expected = kv.snapshot()
    assert expected == {f"ns{t}": {} for t in range(3)}   # the last 10 of each deleted
    assert read_table(path) == expected
    assert os.listdir(tmp_path) == ["kvConfig.json"]
    assert java_table(path) == expected
    assert kv.table_bytes == table_size(expected)


def test_a_table_shrinking_below_the_threshold_during_a_compaction(tmp_path, monkeypatch):
    """Changes that take the table below the threshold while a compaction writes its
    (fuzzy, older) snapshot go to the journal: a rewrite then would be replaced by that
    snapshot after the journals holding the change were gone. The compaction folds
    them once done."""
    path = tmp_path / "kvConfig.json"
    monkeypatch.setattr(kvconfig, "_CHUNK_ITEMS", 1)
    kv = KVConfig(path, rewrite_max_table_bytes=1000)
    for i in range(20):
        kv.put("ns", f"k{i:02d}", "x" * 100)      # above the threshold: journaled
    during = [("del", "ns", f"k{i:02d}") for i in range(19, 8, -1)]   # 9 keys left: below
    during.append(("put", "ns", "k00", "small"))
    busy = []

    def pause():                          # the compaction's own pauses only
        if during and not busy:
            busy.append(1)
            run_ops(kv, [during.pop(0)])
            busy.pop()

    monkeypatch.setattr(kvconfig, "_yield_gil", pause)
    assert kv.compact() is True
    assert not during, "the snapshot was written in too few chunks"
    expected = {"ns": {"k00": "small", **{f"k{i:02d}": "x" * 100 for i in range(1, 9)}}}
    assert kv.snapshot() == expected
    assert read_table(path) == expected
    assert os.listdir(tmp_path) == ["kvConfig.json"]
    assert java_table(path) == expected


CHILD_SMALL = r"""
import sys
from rmq.namesrv.kvconfig import KVConfig
kv = KVConfig(sys.argv[1], rewrite_max_table_bytes=1 << 20)
i = int(sys.argv[2])
while True:
    if i % 4 == 3:
        kv.delete("ns%d" % (i % 3), "k%d" % ((i - 1) % 40))
    else:
        kv.put("ns%d" % (i % 3), "k%d" % (i % 40), "%d:%s" % (i, "z" * 100))
    sys.stdout.write("%d\n" % i)
    sys.stdout.flush()
    i += 1
"""


def child_small_op(i):
    if i % 4 == 3:
        return ("del", f"ns{i % 3}", f"k{(i - 1) % 40}")
    return ("put", f"ns{i % 3}", f"k{i % 40}", f"{i}:{'z' * 100}")


def test_kill_9_below_the_threshold_leaves_every_acknowledged_change_in_the_file(tmp_path):
    """A child puts and deletes on a small table; SIGKILL at random moments: kvConfig.json
    alone, read as Java reads it, holds every acknowledged change (and maybe the one
    under way), and no journal is left."""
    path = tmp_path / "kvConfig.json"
    env = dict(os.environ, PYTHONPATH=PKG_PARENT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rng = random.Random(0xF11E)
    model = {}
    start = kills = 0
    deadline = time.monotonic() + 10
    while kills < 5 and time.monotonic() < deadline:
        done = killed_child(CHILD_SMALL, path, start, env, rng.uniform(0.0, 0.2))
        kills += 1
        assert done == list(range(start, start + len(done)))
        for i in done:
            apply_model(model, child_small_op(i))
        with_next = json.loads(json.dumps(model))
        apply_model(with_next, child_small_op(done[-1] + 1))
        assert java_table(path) in (model, with_next), "an acknowledged change is missing"
        assert journals(tmp_path) == []
        model = java_table(path)
        start = done[-1] + 2               # the interrupted index is settled either way
    assert kills >= 3
    assert KVConfig(path).snapshot() == model
