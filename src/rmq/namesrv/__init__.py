"""The NameServer: request processing (``handlers``), the route tables' rules
(``routeinfo``), the network layer (``server``), its configuration (``config``) and
its KV table (``kvconfig``). ``rmq namesrv`` runs it; the wire level it stands on
(``rmq.codec``, ``rmq.bodies``) knows nothing of it."""

from rmq.namesrv.handlers import DefaultRequestProcessor

__all__ = ["DefaultRequestProcessor"]
