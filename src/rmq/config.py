"""Compatibility name of :mod:`rmq.namesrv.config` (the NameServer's settings)."""

from rmq.namesrv.config import *  # noqa: F403
from rmq.namesrv.config import __all__  # noqa: F401
