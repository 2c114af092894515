"""The NameServer's route tables (Java's RouteInfoManager).

The pure-Python reference is ``rmq.fallback.routes``; the compiled core's
``RouteTable`` is a subclass of it with the topic table and the route answers in C.
"""

from rmq._impl import core

RouteTable = core.RouteTable

__all__ = ["RouteTable"]
