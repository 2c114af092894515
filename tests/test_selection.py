"""RMQ_PUREPYTHON selects the implementation behind the public names."""

import importlib

import rmq
import rmq.bodies
import rmq.codec
from support import CORE_NAMES, PUREPYTHON, load_compiled, load_fallback


def test_implementation_follows_the_switch():
    if PUREPYTHON:
        assert rmq.IMPLEMENTATION == "python"
    else:
        assert rmq.IMPLEMENTATION == "compiled"


def test_public_names_come_from_the_selected_core():
    core = load_fallback() if PUREPYTHON else load_compiled()
    assert core.IMPLEMENTATION == rmq.IMPLEMENTATION
    for name in ("RemotingCommand", "decode_frame", "encode_frame", "FrameDecoder",
                 "crc32", "body_crc32"):
        assert getattr(rmq, name) is getattr(core, name), name
    assert rmq.codec.RemotingCommand is core.RemotingCommand
    # (the package attribute rmq.crc32 is the function, not the module)
    assert importlib.import_module("rmq.crc32").crc32 is core.crc32
    for name in ("json_loads", "json_dumps", "decode_register_broker_body",
                 "encode_register_broker_body", "encode_topic_route_data"):
        assert getattr(rmq.bodies, name) is getattr(core, name), name


def test_default_crc32_kernel():
    if PUREPYTHON:
        assert rmq.CRC32_KERNEL == "zlib"
    else:
        assert rmq.CRC32_KERNEL == load_compiled().crc32_kernels_available()[0]


def test_both_expose_the_same_names(impl):
    missing = [name for name in CORE_NAMES if not hasattr(impl, name)]
    assert not missing
    assert impl.IMPLEMENTATION == ("compiled" if impl.__name__ == "rmq._core" else "python")


def test_error_module_is_shared():
    assert rmq.errors.ProtocolError.__module__ == "rmq.errors"
