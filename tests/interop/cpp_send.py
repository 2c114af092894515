"""Send one message with the Apache RocketMQ C++ client (PyPI ``rocketmq`` 0.4.4).

Usage: python cpp_send.py NAMESRV_ADDR TOPIC BODY

With $CPP_ACCESS_KEY and $CPP_SECRET_KEY set, the producer signs its requests with
them (``set_session_credentials``, channel ALIYUN): tests/test_acl.py.

Run in a subprocess by tests/test_interop.py: the C++ client starts threads, logs
under $HOME/logs/rocketmq-cpp and may abort the process on a protocol error, so it
is kept out of the pytest process. Prints one JSON line:
``{"status": ..., "msg_id": ..., "offset": ...}`` or ``{"error": ..., "type": ...}``;
exit 0 after a result, 2 after an error, 4 when the package cannot be imported.
"""

import json
import os
import sys


def main():
    addr, topic, body = sys.argv[1:4]
    try:
        from rocketmq.client import Message, Producer
    except (ImportError, OSError) as exc:          # OSError: the bundled .so fails to load
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}", "type": "import"}), flush=True)
        return 4
    producer = Producer("PID_RMQ_INTEROP", timeout=3000)
    producer.set_namesrv_addr(addr)
    if os.environ.get("CPP_ACCESS_KEY"):
        producer.set_session_credentials(os.environ["CPP_ACCESS_KEY"],
                                         os.environ["CPP_SECRET_KEY"], "ALIYUN")
    producer.start()
    try:
        msg = Message(topic)
        msg.set_keys("interop-key")
        msg.set_tags("TagA")
        msg.set_body(body)
        try:
            result = producer.send_sync(msg)
        except Exception as exc:                   # rocketmq.exceptions.ProducerSendSyncFailed
            print(json.dumps({"error": str(exc), "type": type(exc).__name__}), flush=True)
            return 2
        print(json.dumps({"status": result.status.name, "msg_id": result.msg_id,
                          "offset": result.offset}), flush=True)
        return 0
    finally:
        producer.shutdown()


if __name__ == "__main__":
    sys.exit(main())
