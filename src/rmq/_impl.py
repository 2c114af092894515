"""Chooses the implementation of the core: compiled ``rmq._core`` or the pure-Python
reference ``rmq.fallback`` (``RMQ_PUREPYTHON=1``, or when the extension is missing)."""

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # Type checkers see the compiled core's stub (rmq/_core.pyi); rmq.fallback has
    # the same names and signatures (tests/test_typing.py checks both against it).
    from rmq import _core as core
elif os.environ.get("RMQ_PUREPYTHON", "") not in ("", "0"):
    from rmq import fallback as core
else:
    try:
        from rmq import _core as core
    except ImportError:  # not built (e.g. a source checkout on PyPy): the reference
        from rmq import fallback as core

IMPLEMENTATION: str = core.IMPLEMENTATION

__all__ = ["core", "IMPLEMENTATION"]
