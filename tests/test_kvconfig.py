"""rmq.kvconfig: the KV table of Java's KVConfigManager, persisted atomically."""

import json
import os
import random
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rmq import kvconfig
from rmq.errors import RmqError
from rmq.kvconfig import KVConfig, KVConfigError

SRC = str(Path(__file__).resolve().parent.parent / "src")


def read_json(path):
    return json.loads(Path(path).read_text("utf-8"))


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
    kv = KVConfig(path)
    kv.put("命名空间", "ключ", "valeur é 😀")
    assert KVConfig(path).get("命名空间", "ключ") == "valeur é 😀"
    # written as UTF-8 characters, not \u escapes, as fastjson writes them
    assert "😀" in path.read_text("utf-8")


# ---------------------------------------------------------------- file format

def test_file_format_is_javas_compact_json(tmp_path):
    path = tmp_path / "kvConfig.json"
    kv = KVConfig(path)
    kv.put("ORDER_TOPIC_CONFIG", "TopicA", "broker-a:4;broker-b:4")
    text = path.read_text("utf-8")
    assert text == '{"configTable":{"ORDER_TOPIC_CONFIG":{"TopicA":"broker-a:4;broker-b:4"}}}'


def test_reads_a_java_written_file(tmp_path):
    # As Java 4.9.8 writes it: fastjson compact, HashMap order, UTF-8.
    path = tmp_path / "kvConfig.json"
    path.write_bytes(
        '{"configTable":{"ORDER_TOPIC_CONFIG":{"TopicB":"broker-b:8","TopicA":'
        '"broker-a:4;broker-b:4"},"rmq":{"k":"v","ü":"é"}}}'.encode("utf-8"))
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
    kv = KVConfig(path)
    assert kv.namespaces() == []
    assert not path.exists()
    kv.put("ns", "k", "v")  # parent directories are created, as Java's mkdirs
    assert read_json(path) == {"configTable": {"ns": {"k": "v"}}}


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
    assert read_json(path)["configTable"] == kv.snapshot()


def test_every_put_and_delete_writes_the_file_as_java_does(tmp_path, monkeypatch):
    writes = []
    real = kvconfig._atomic_write
    monkeypatch.setattr(kvconfig, "_atomic_write",
                        lambda p, data: (writes.append(data), real(p, data)))
    kv = KVConfig(tmp_path / "kvConfig.json")
    kv.put("ns", "k", "v")
    kv.put("ns", "k", "v")  # unchanged value: Java persists anyway
    kv.delete("ns", "absent")  # absent key: Java persists anyway
    kv.delete("nope", "k")
    assert len(writes) == 4
    assert KVConfig(None).put("a", "b", "c") is None  # memory only: no file at all


def test_failed_write_raises_and_changes_nothing(tmp_path, monkeypatch):
    path = tmp_path / "kvConfig.json"
    kv = KVConfig(path)
    kv.put("ns", "k", "old")

    def crash(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(kvconfig.os, "replace", crash)
    with pytest.raises(KVConfigError, match="No space left"):
        kv.put("ns", "k", "new")
    with pytest.raises(KVConfigError):
        kv.delete("ns", "k")
    assert kv.get("ns", "k") == "old"  # memory never claims what the disk lacks
    monkeypatch.undo()
    assert read_json(path) == {"configTable": {"ns": {"k": "old"}}}
    assert [p.name for p in tmp_path.iterdir()] == ["kvConfig.json"]  # no temp left


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
    kv = KVConfig(path)
    kv.put("ns", "k", "v")
    os.chmod(path, 0o600)
    kv.put("ns", "k", "w")
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
    assert read_json(path)["configTable"] == expected


# ---------------------------------------------------------------- kill -9

CHILD = r"""
import sys
from rmq.kvconfig import KVConfig
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


def test_kill_9_at_random_moments_never_tears_the_file(tmp_path):
    """A child puts in a loop and prints each index once put() returned; SIGKILL at a
    random moment; the file must parse and hold every reported put (or a later one)."""
    path = tmp_path / "kvConfig.json"
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rng = random.Random(0x5EED)
    start = 0
    latest = {}  # (ns, key) -> highest index reported done
    kills = 0
    deadline = time.monotonic() + 8
    while kills < 8 and time.monotonic() < deadline:
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(start)],
                                stdout=subprocess.PIPE, env=env)
        try:
            first = proc.stdout.readline()  # the child is loaded and writing
            assert first, "child died before its first put"
            time.sleep(rng.uniform(0.0, 0.25))
            os.kill(proc.pid, signal.SIGKILL)
            rest = proc.stdout.read()
        finally:
            proc.kill()
            proc.wait()
            proc.stdout.close()
        assert proc.returncode == -signal.SIGKILL
        kills += 1
        data = (first + rest).decode("ascii")
        done = [int(line) for line in data.split("\n")[:-1]]  # a torn last line is not done
        assert done and done == list(range(start, start + len(done)))
        for i in done:
            latest[(f"ns{i % 3}", f"k{i % 150}")] = i
        doc = json.loads(path.read_text("utf-8"))  # never torn
        table = doc["configTable"]
        for (ns, key), i in latest.items():
            stored = int(table[ns][key].split(":", 1)[0])
            assert stored >= i, f"{ns}/{key}: put {i} reported done, file holds {stored}"
        start = done[-1] + 1 + 1000  # later puts may have landed unreported: skip ahead
        assert not [p for p in tmp_path.iterdir() if p.name != "kvConfig.json"
                    and not p.name.endswith(".tmp")]
    assert kills >= 3
    kv = KVConfig(path)  # loads what the last child left, removes its temporaries
    assert [p.name for p in tmp_path.iterdir()] == ["kvConfig.json"]
    assert len(kv.snapshot()["ns0"]) > 0


def test_temporaries_left_before_the_first_file_are_cleaned(tmp_path):
    stale = tmp_path / ".kvConfig.json.1.cafe.tmp"
    stale.write_text("{", "utf-8")
    other = tmp_path / ".other.json.1.cafe.tmp"  # not ours
    other.write_text("{", "utf-8")
    assert KVConfig(tmp_path / "kvConfig.json").namespaces() == []
    assert not stale.exists() and other.exists()
