"""The NameServer's route tables (Java's RouteInfoManager).

The pure-Python reference is ``rmq.fallback.routes``; the compiled core provides
the same ``RouteTable`` when it has one.
"""

from rmq._impl import core

try:
    RouteTable = core.RouteTable
except AttributeError:  # the compiled core does not carry the tables yet
    from rmq.fallback.routes import RouteTable

__all__ = ["RouteTable"]
