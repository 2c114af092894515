"""Compatibility name: this module is :mod:`rmq.trace.pcap` (the capture reader)."""
import sys
from rmq.trace import pcap as _module
from rmq.trace.pcap import *  # noqa: F403  (the names, for type checkers)
sys.modules[__name__] = _module
