"""The NameServer's route tables: a compatibility name for rmq.namesrv.routeinfo."""

from rmq.namesrv.routeinfo import RouteTable

__all__ = ["RouteTable"]
