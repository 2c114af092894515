"""Chooses the implementation of the core: compiled ``rmq._core`` or the pure-Python
reference ``rmq.fallback`` (``RMQ_PUREPYTHON=1``, or when the extension is missing)."""

import os

if os.environ.get("RMQ_PUREPYTHON", "") not in ("", "0"):
    from rmq import fallback as core
else:
    try:
        from rmq import _core as core
    except ImportError:  # not built (e.g. a source checkout on PyPy): the reference
        from rmq import fallback as core

IMPLEMENTATION = core.IMPLEMENTATION
