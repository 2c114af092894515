"""Warm restart: the route tables written to a file and read back at start.

After a restart a NameServer (Java's and a cold rmq) knows no route until each broker
registers again, up to 30 s later: clients get TOPIC_NOT_EXIST meanwhile. With
``warmRestart=true`` rmq writes ``RouteTable.snapshot()`` to ``routeSnapshotPath`` every
``routeSnapshotIntervalSeconds`` and at shutdown (before it closes the brokers'
connections, which would drop them), as JSON, atomically as kvConfig.json; at start it
loads it with every broker provisional (``RouteTable.restore``). The trade-off: a
broker that died while the NameServer was down is served for at most its heartbeat
timeout (120 s by default) after the start, as a broker that dies silently is today.
A file that cannot be read or is not a snapshot is logged and skipped: the server
starts cold.
"""

import json
import logging
import os
import time

from rmq.errors import BodyError
from rmq.namesrv.kvconfig import _atomic_write

__all__ = ["save", "load", "FORMAT"]

log = logging.getLogger(__name__)

#: The file's ``format``: a reader refuses another.
FORMAT = 1


def save(routes, path):
    """Write the tables' snapshot to ``path`` (old or new file after a crash, never
    half of one); returns its size in bytes."""
    doc = {"format": FORMAT, "savedAt": int(time.time() * 1000), "tables": routes.snapshot()}
    return _atomic_write(path, json.dumps(doc, separators=(",", ":")).encode("utf-8"))


def load(routes, path, now_ms):
    """Restore ``routes`` (empty) from the snapshot at ``path``: the number of live
    entries restored, or None when there is no usable snapshot (logged)."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read().decode("utf-8"))
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise BodyError(f"format {doc.get('format') if isinstance(doc, dict) else None!r}"
                            f", not {FORMAT}")
        count = routes.restore(doc["tables"], now_ms)
    except FileNotFoundError:
        log.info("warm restart: no route snapshot at %s: starting cold", path)
        return None
    except (OSError, ValueError, KeyError, TypeError, BodyError) as e:
        log.warning("warm restart: route snapshot %s not used (%s): starting cold", path, e)
        return None
    saved = doc.get("savedAt")
    age = (now_ms - saved) / 1000 if isinstance(saved, int) else 0
    log.info("warm restart: %d brokers and %d topics restored from %s (saved %.0f s ago), "
             "provisional until they register again", count, len(doc["tables"]["topics"]),
             os.path.abspath(path), age)
    return count
