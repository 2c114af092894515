"""The ``rmq`` command."""

import argparse
import asyncio
import logging
import signal
import sys

import rmq


def _version(args):
    print(f"rmq {rmq.__version__}")
    print(f"implementation: {rmq.IMPLEMENTATION}")
    print(f"crc32 kernel:   {rmq.CRC32_KERNEL}")
    print(f"python:         {sys.version.split()[0]}")
    return 0


def _host_port(text):
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def _setup_logging(level):
    logging.basicConfig(level=getattr(logging, level.upper()),
                        format="%(asctime)s %(levelname)-5s %(name)s: %(message)s")


async def _serve_namesrv(app, host, port):
    """Serve until SIGTERM or SIGINT, then shut down (see NameServerApp.close); a
    second signal ends a graceful shutdown's GO_AWAY period at once."""
    log = logging.getLogger("rmq.namesrv")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(sig):
        if stop.is_set():
            log.info("%s received again: not waiting any longer", sig.name)
            app.hurry()
            return
        log.info("%s received, shutting down", sig.name)
        stop.set()

    # before listening: a signal that comes as soon as the port is open stops it cleanly
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    await app.start(host, port)
    await stop.wait()
    await app.close()


def _namesrv(args):
    from rmq.config import ConfigError, NamesrvConfig
    from rmq.kvconfig import KVConfig, KVConfigError
    from rmq.namesrv import NameServer
    from rmq.server import NameServerApp, new_event_loop

    _setup_logging(args.log_level)
    log = logging.getLogger("rmq.namesrv")
    try:
        config = NamesrvConfig.load(args.config) if args.config else NamesrvConfig()
    except (OSError, ConfigError) as e:
        print(f"rmq namesrv: {e}", file=sys.stderr)
        return 2
    if args.kv_config:
        config.kvConfigPath = args.kv_config
    host, port = args.listen if args.listen else (config.listenHost, config.listenPort)
    config.listenPort = port
    try:
        kv = KVConfig(config.kvConfigPath)
    except KVConfigError as e:
        print(f"rmq namesrv: {e}", file=sys.stderr)
        return 2
    app = NameServerApp(NameServer(config, kv))
    log.info("rmq %s NameServer (%s core, crc32 %s), kvConfig %s", rmq.__version__,
             rmq.IMPLEMENTATION, rmq.CRC32_KERNEL, config.kvConfigPath)
    loop = new_event_loop()
    try:
        loop.run_until_complete(_serve_namesrv(app, host, port))
    except OSError as e:
        print(f"rmq namesrv: cannot listen on {host}:{port}: {e}", file=sys.stderr)
        return 1
    finally:
        loop.close()
    return 0


def build_parser():
    parser = argparse.ArgumentParser(prog="rmq", description="RocketMQ NameServer toolkit")
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("version", help="print the version, the core in use and its CRC32 kernel")
    p.set_defaults(func=_version)
    p = sub.add_parser("namesrv", help="run a NameServer")
    p.add_argument("-c", "--config", metavar="FILE",
                   help="a namesrv.properties file (Java's keys; unknown keys are warned about)")
    p.add_argument("--listen", type=_host_port, metavar="HOST:PORT",
                   help="address to listen on (default: listenPort of the config, all interfaces)")
    p.add_argument("--kv-config", metavar="PATH", help="the kvConfig.json file (overrides kvConfigPath)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=_namesrv)
    from rmq import brokersim
    brokersim.add_parser(sub)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", _version)
    return func(args)


if __name__ == "__main__":
    sys.exit(main())
