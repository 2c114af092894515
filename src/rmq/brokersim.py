"""``rmq broker-sim``: simulated brokers registering with NameServers through
BrokerRegistrar, for demos, benchmarks and tests.

Broker i is broker-<i> at 127.0.0.1:<10911 + 10 i> (its HA port one above), a
master, in cluster DefaultCluster (or Cluster-<i mod C> with --clusters C); every
broker carries every topic (TopicTest-00000...), as the W1 workload of bench/. Each broker has its own connections, as real brokers do. It
registers at once, then every --period seconds; SIGINT or SIGTERM (or the end of
--duration) stops it cleanly: each broker unregisters from every NameServer.
"""

import asyncio
import logging
import signal

from rmq import bodies
from rmq.registrar import BrokerRegistrar, RegistrationError

log = logging.getLogger("rmq.brokersim")


class SimRegistrar(BrokerRegistrar):
    # A simulator may register faster than a real broker's 10 s floor.
    SHORTEST_PERIOD = 1.0
    bump = False                    # a new DataVersion every period (--bump)

    async def tick(self):
        if self.bump:       # the table unchanged: its encoded JSON is reused
            self._table.next_version()
        return await super().tick()


def add_parser(sub):
    p = sub.add_parser("broker-sim", help="simulated brokers registering with NameServers",
                       description=__doc__.split("\n\n")[1])
    p.add_argument("-n", "--namesrv", required=True, metavar="ADDRS",
                   help="NameServer addresses, ';'-separated (namesrvAddr)")
    p.add_argument("--brokers", type=_positive, default=1, metavar="B")
    p.add_argument("--topics", type=_non_negative, default=100, metavar="T",
                   help="topics per broker (every broker carries all of them)")
    p.add_argument("--clusters", type=_positive, default=1, metavar="C")
    p.add_argument("--queues", type=_positive, default=8, help="read/write queues per topic")
    p.add_argument("--period", type=float, default=30.0, metavar="S",
                   help="seconds between registrations (at least 1; default 30)")
    p.add_argument("--compressed", action="store_true", help="compressed register bodies")
    p.add_argument("--oneway", action="store_true", help="periodic registrations oneway")
    p.add_argument("--split", action="store_true",
                   help="split registration (800 topics per request)")
    p.add_argument("--bump", action="store_true",
                   help="a new DataVersion every period (the table 'changes')")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    p.add_argument("--timeout", type=float, default=6.0, metavar="S",
                   help="registration timeout (registerBrokerTimeoutMills; default 6)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=main)
    return p


def _positive(text):
    n = int(text)
    if n < 1:
        raise ValueError(text)
    return n


def _non_negative(text):
    n = int(text)
    if n < 0:
        raise ValueError(text)
    return n


def make_registrars(args):
    configs = {f"TopicTest-{j:05d}": bodies.topic_config(f"TopicTest-{j:05d}", args.queues,
                                                          args.queues)
               for j in range(args.topics)}
    out = []
    for i in range(args.brokers):
        port = 10911 + 10 * i
        cluster = "DefaultCluster" if args.clusters == 1 else f"Cluster-{i % args.clusters}"
        out.append(SimRegistrar(
            args.namesrv, cluster=cluster, broker_name=f"broker-{i}",
            broker_addr=f"127.0.0.1:{port}", ha_server_addr=f"127.0.0.1:{port + 1}",
            topics=configs, period=args.period, compressed=args.compressed,
            oneway=args.oneway, split_registration=args.split,
            register_timeout=args.timeout))
    return out


async def run(args, stop=None):
    """Start every broker, wait for ``stop`` (an Event), SIGINT/SIGTERM or the
    duration, then unregister every broker. Returns the exit status."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (RuntimeError, ValueError):      # not the main thread: the caller stops us
            pass
    registrars = make_registrars(args)
    started = []
    status = 0
    try:
        for r in registrars:
            try:
                results = await r.start()
            except RegistrationError as e:
                log.error("%s", e)
                status = 1
                break
            started.append(r)
            log.info("%s registered with %d of %d name servers (%d topics)", r.broker_name,
                     len(results), len(r.namesrv_addrs), len(r.topics))
        if status == 0:
            for r in registrars:
                r.bump = args.bump
            log.info("%d brokers registered; Ctrl-C stops them", len(started))
            try:
                await asyncio.wait_for(stop.wait(), args.duration)
            except asyncio.TimeoutError:
                pass
    finally:
        for r in started:
            outcome = await r.stop(unregister=True)
            failed = {a: e for a, e in outcome.items() if e is not None}
            if failed:
                status = 1
            log.info("%s unregistered from %d of %d name servers", r.broker_name,
                     len(outcome) - len(failed), len(outcome))
        for r in registrars[len(started):]:
            await r.stop(unregister=False)
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.remove_signal_handler(sig)
            except (RuntimeError, ValueError):
                pass
    return status


def main(args):
    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s %(levelname)-5s %(name)s: %(message)s")
    from rmq.namesrv.server import new_event_loop
    loop = new_event_loop()
    try:
        return loop.run_until_complete(run(args))
    finally:
        loop.close()
