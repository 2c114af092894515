# cython: language_level=3
"""rmq._core: the compiled core of rmq.

Bytes in, parsed objects out: the remoting frame codec (JSON and ROCKETMQ
headers, streaming splitter), the hot body codecs, and CRC-32. No I/O, and no
calls back into the server. The pure-Python reference is rmq.fallback.
"""

include "jsonio.pxi"
include "codec.pxi"
include "stream.pxi"
include "bodies.pxi"
include "crc32.pxi"
include "scan.pxi"
include "javatable.pxi"
include "routes.pxi"
include "engine.pxi"
include "trace.pxi"
include "columns.pxi"

# The typed public surface is src/rmq/_core.pyi (installed beside the module).
IMPLEMENTATION = "compiled"
# Whether this build has the debug checks compiled in (RMQ_DEBUG=1): make test-debug
# refuses to run its tests on a build without them.
DEBUG_BUILD = RMQ_DEBUG
