"""The ``rmq`` command."""

import argparse
import asyncio
import gc
import json
import logging
import logging.handlers
import os
import signal
import sys

import rmq
from rmq.admin import (FAILURES, NamesrvAdmin, cluster_list_text, describe_error, error_json,
                       kv_config_text, namesrv_config_text, to_json, topic_list_text,
                       topic_route_text, update_namesrv_config_text, write_perm_text)


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


_LOG_FORMAT = "%(asctime)s %(levelname)-5s %(name)s: %(message)s"


def _setup_logging(level, path=None, max_bytes=0, backups=0):
    """To stderr, or to ``path`` rolled over at ``max_bytes`` into ``path.1`` ...
    ``path.<backups>`` (Java's namesrv.log rolls at 100 MB into 10 files)."""
    handler = None
    if path is not None:
        handler = logging.handlers.RotatingFileHandler(path, maxBytes=max_bytes,
                                                       backupCount=backups, encoding="utf-8")
        handler.setFormatter(logging.Formatter(_LOG_FORMAT))
    logging.basicConfig(level=getattr(logging, level.upper()), format=_LOG_FORMAT,
                        handlers=None if handler is None else [handler])


def _log_route_cache(log, routes):
    s = routes.cache_stats()
    log.info("route cache: hits=%d misses=%d evictions=%d bytes=%d entries=%d budget=%s "
             "answers=%d shared=%d refused=%d", s["hits"], s["misses"], s["evictions"],
             s["bytes"], s["entries"], s["budget"], s["answers"], s["shared"], s["refused"])


async def _serve_namesrv(app, host, port, routes):
    """Serve until SIGTERM or SIGINT, then shut down (see NameServerApp.close); a
    second signal ends a graceful shutdown's GO_AWAY period at once. SIGUSR1 logs
    the route cache's counters."""
    log = logging.getLogger(__name__)
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
    loop.add_signal_handler(signal.SIGUSR1, _log_route_cache, log, routes)
    await app.start(host, port)
    await stop.wait()
    await app.close()
    _log_route_cache(log, routes)


def _namesrv(args):
    from rmq.namesrv.config import ConfigError, NamesrvConfig
    from rmq.namesrv.kvconfig import KVConfig, KVConfigError
    from rmq.namesrv import DefaultRequestProcessor
    from rmq.namesrv.server import make_app, new_event_loop

    try:
        _setup_logging(args.log_level, args.log_file, args.log_max_bytes, args.log_backups)
    except OSError as e:
        print(f"rmq namesrv: cannot open the log file: {e}", file=sys.stderr)
        return 2
    log = logging.getLogger(__name__)
    try:
        config = NamesrvConfig.load(args.config) if args.config else NamesrvConfig()
    except (OSError, ConfigError) as e:
        print(f"rmq namesrv: {e}", file=sys.stderr)
        return 2
    if args.kv_config:
        config.kvConfigPath = args.kv_config
    host, port = args.listen if args.listen else (config.listenHost, config.listenPort)
    config.listenHost, config.listenPort = host, port
    if args.metrics:
        config.metricsAddress, config.metricsPort = args.metrics
    if args.print_config:
        # mqnamesrv -p: the effective configuration (file, then options), then exit
        sys.stdout.write(config.to_properties_text())
        return 0
    try:
        kv = KVConfig(config.kvConfigPath, **config.kv_limits())
    except KVConfigError as e:
        print(f"rmq namesrv: {e}", file=sys.stderr)
        return 2
    trace = None
    if args.trace_dir:
        from rmq.trace.segments import TraceRecorder
        trace = TraceRecorder(args.trace_dir, segment_bytes=args.trace_segment_mib << 20,
                              max_frame_length=config.maxFrameLength)
        log.info("recording every frame to %s (segments of %d MiB)", args.trace_dir,
                 args.trace_segment_mib)
    processor = DefaultRequestProcessor(config, kv)
    try:
        app = make_app(processor, trace=trace)
    except ConfigError as e:    # a wrong TLS setting, rocketmq.serialize.type or
        # serverEngine; aclEnable with a bad plain_acl.yml
        print(f"rmq namesrv: {e}", file=sys.stderr)
        kv.close()
        if trace is not None:
            trace.close()
        return 2
    log.info("rmq %s NameServer (%s core, crc32 %s), kvConfig %s", rmq.__version__,
             rmq.IMPLEMENTATION, rmq.CRC32_KERNEL, config.kvConfigPath)
    loop = new_event_loop()
    # What is loaded by now (modules, classes, functions) lives as long as the
    # process: kept out of the cyclic collector's full passes, which otherwise walk
    # it each time and hold the GIL meanwhile (a route answer waits for them).
    gc.collect()
    gc.freeze()
    try:
        loop.run_until_complete(_serve_namesrv(app, host, port, processor.routes))
    except OSError as e:
        print(f"rmq namesrv: cannot listen on {host}:{port}: {e}", file=sys.stderr)
        return 1
    finally:
        loop.close()
        kv.close()          # compacts the journal: kvConfig.json alone holds the table
        if trace is not None:
            trace.close()
            log.info("trace: %d frames recorded in %d segments, %d dropped%s",
                     trace.recorded, len(trace.files), trace.dropped,
                     f" (recording stopped: {trace.error})" if trace.error else "")
    return 0


# ---------------------------------------------------------------- rmq admin

def _trimmed(text):
    # mqadmin trims every option value it reads
    return text.strip()


def _seconds(text):
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _admin_cluster_list(admin, args):
    data = admin.cluster_list(args.cluster)
    return data, cluster_list_text(data), to_json(data)


def _admin_topic_route(admin, args):
    data = admin.topic_route(args.topic)
    return data, topic_route_text(data), to_json(data)


def _admin_topic_list(admin, args):
    data = admin.topic_list()
    return data, topic_list_text(data), to_json(data)


def _admin_get_namesrv_config(admin, args):
    results = admin.get_namesrv_config()
    return results, namesrv_config_text(results), to_json(results, "config")


def _admin_update_namesrv_config(admin, args):
    results = admin.update_namesrv_config(args.key, args.value)
    return (results, update_namesrv_config_text(results, args.key, args.value),
            to_json(results, key=args.key, value=args.value))


def _admin_update_kv_config(admin, args):
    results = admin.update_kv_config(args.namespace, args.key, args.value)
    return (results, kv_config_text(results),
            to_json(results, namespace=args.namespace, key=args.key, value=args.value))


def _admin_delete_kv_config(admin, args):
    results = admin.delete_kv_config(args.namespace, args.key)
    return (results, kv_config_text(results, deleted=True),
            to_json(results, namespace=args.namespace, key=args.key))


def _admin_wipe_write_perm(admin, args):
    results = admin.wipe_write_perm(args.broker_name)
    return (results, write_perm_text(results, args.broker_name),
            to_json(results, "wipeTopicCount", brokerName=args.broker_name))


def _admin_add_write_perm(admin, args):
    results = admin.add_write_perm(args.broker_name)
    return (results, write_perm_text(results, args.broker_name, added=True),
            to_json(results, "addTopicCount", brokerName=args.broker_name))


def _admin_tls(args):
    """The SSLContext of --tls (None without): Java's tls.client.* keys from --tls-config
    (default: Java's tls.config.file when it exists). A ConfigError is a ValueError."""
    if not (args.tls or args.tls_config):
        return None
    from rmq.tls import DEFAULT_CONFIG_FILE, client_context
    if args.tls_config and not os.path.isfile(args.tls_config):
        raise ValueError(f"--tls-config {args.tls_config}: no such file")
    return client_context(config_file=args.tls_config or DEFAULT_CONFIG_FILE)


def _admin(args):
    prog = f"rmq admin {args.verb}"
    addrs = args.namesrv_addr if args.namesrv_addr is not None else os.environ.get("NAMESRV_ADDR")
    if not (addrs or "").strip():
        print(f"{prog}: no NameServer address: give -n HOST:PORT[;HOST:PORT...] "
              "or set NAMESRV_ADDR", file=sys.stderr)
        return 2
    try:
        from rmq.acl import credentials_from
        admin = NamesrvAdmin(addrs, args.timeout, ssl=_admin_tls(args),
                             credentials=credentials_from(args.access_key, args.secret_key))
    except ValueError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    with admin:
        try:
            data, (out, err), doc = args.run(admin, args)
        except FAILURES as e:
            if args.json:
                print(json.dumps({"ok": False, **error_json(e)}, indent=2,
                                 ensure_ascii=False))
            print(f"{prog}: {describe_error(e)}", file=sys.stderr)
            return 1
    sys.stdout.write(doc + "\n" if args.json else out)
    sys.stderr.write(err)
    # a verb sent to every NameServer fails when any of them did not apply it
    ok = all(r.ok for r in data) if isinstance(data, list) else True
    return 0 if ok else 1


def _add_admin_parser(sub):
    p = sub.add_parser("admin", help="NameServer administration: the verbs and options of "
                                     "Apache RocketMQ's mqadmin")
    verbs = p.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-n", "--namesrvAddr", dest="namesrv_addr", metavar="ADDRS",
                        help="NameServer addresses, ';'-separated, e.g. "
                             "'192.168.0.1:9876;192.168.0.2:9876' (default: $NAMESRV_ADDR)")
    common.add_argument("--timeout", type=_seconds, default=3.0, metavar="SECONDS",
                        help="time allowed for each request, connecting included (default 3)")
    common.add_argument("--json", action="store_true",
                        help="print the result as JSON (failures included) for scripts")
    common.add_argument("--tls", action="store_true",
                        help="connect with TLS (Java's -Dtls.enable=true); the server is "
                             "verified unless the TLS config file says otherwise")
    common.add_argument("--tls-config", metavar="FILE",
                        help="Java's tls.config.file: tls.client.certPath, keyPath, "
                             "keyPassword, trustCertPath, authServer (implies --tls; "
                             "default /etc/rocketmq/tls.properties when it exists)")
    common.add_argument("--accessKey", dest="access_key", type=_trimmed, metavar="KEY",
                        help="sign the requests with this ACL account (default: "
                             "$RMQ_ACCESS_KEY); mqadmin reads it from conf/tools.yml")
    common.add_argument("--secretKey", dest="secret_key", type=_trimmed, metavar="SECRET",
                        help="its secret key (default: $RMQ_SECRET_KEY, which keeps it "
                             "off the command line that ps shows)")

    def verb(name, run, help):
        v = verbs.add_parser(name, parents=[common], help=help, description=help)
        v.set_defaults(func=_admin, run=run)
        return v

    v = verb("clusterList", _admin_cluster_list, "List the clusters and their brokers")
    v.add_argument("-c", "--clusterName", dest="cluster", type=_trimmed, help="this cluster only")
    v = verb("topicRoute", _admin_topic_route, "Examine a topic's route")
    v.add_argument("-t", "--topic", required=True, type=_trimmed, help="topic name")
    verb("topicList", _admin_topic_list, "List every topic the NameServer knows")
    verb("getNamesrvConfig", _admin_get_namesrv_config,
         "Get the configuration of every NameServer")
    v = verb("updateNamesrvConfig", _admin_update_namesrv_config,
             "Update a configuration key on every NameServer")
    v.add_argument("-k", "--key", required=True, type=_trimmed, help="config key")
    v.add_argument("-v", "--value", required=True, type=_trimmed, help="config value")
    v = verb("updateKvConfig", _admin_update_kv_config, "Create or update a KV config entry")
    v.add_argument("-s", "--namespace", required=True, type=_trimmed, help="the namespace")
    v.add_argument("-k", "--key", required=True, type=_trimmed, help="the key")
    v.add_argument("-v", "--value", required=True, type=_trimmed, help="the value")
    v = verb("deleteKvConfig", _admin_delete_kv_config, "Delete a KV config entry")
    v.add_argument("-s", "--namespace", required=True, type=_trimmed, help="the namespace")
    v.add_argument("-k", "--key", required=True, type=_trimmed, help="the key")
    v = verb("wipeWritePerm", _admin_wipe_write_perm,
             "Wipe the write permission of a broker on every NameServer")
    v.add_argument("-b", "--brokerName", dest="broker_name", required=True, type=_trimmed,
                   help="broker name")
    v = verb("addWritePerm", _admin_add_write_perm,
             "Give a broker its write permission back on every NameServer")
    v.add_argument("-b", "--brokerName", dest="broker_name", required=True, type=_trimmed,
                   help="broker name")


def _add_trace_parser(sub):
    # rmq.trace.analyze imports pyspark only when run: it says itself when pyspark is missing
    from rmq.trace import analyze, synth
    p = sub.add_parser("trace", help="analyze recorded traffic with Spark; synthesize traces")
    verbs = p.add_subparsers(dest="verb", required=True)
    a = verbs.add_parser("analyze", help="decode traces and pcaps with Spark (needs a JDK 17+): "
                                         "Parquet tables and an HTML report")
    analyze.add_arguments(a)
    a.set_defaults(func=analyze.main)
    s = verbs.add_parser("synth", help="write a protocol-exact synthetic trace")
    synth.add_arguments(s)
    s.set_defaults(func=synth.main)


def build_parser():
    from rmq.trace.analyze import positive_int
    parser = argparse.ArgumentParser(prog="rmq", description="RocketMQ NameServer toolkit")
    parser.add_argument("--version", action="version", version=f"rmq {rmq.__version__}")
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("version", help="print the version, the core in use and its CRC32 kernel")
    p.set_defaults(func=_version)
    p = sub.add_parser("namesrv", help="run a NameServer")
    p.add_argument("-c", "--config", metavar="FILE",
                   help="a namesrv.properties file (Java's keys; unknown keys are warned about)")
    p.add_argument("--listen", type=_host_port, metavar="HOST:PORT",
                   help="address to listen on (default: listenPort of the config, all interfaces)")
    p.add_argument("--kv-config", metavar="PATH", help="the kvConfig.json file (overrides kvConfigPath)")
    p.add_argument("--metrics", type=_host_port, metavar="HOST:PORT",
                   help="serve Prometheus metrics on http://HOST:PORT/metrics and /healthz "
                        "(overrides metricsAddress and metricsPort; default: off)")
    p.add_argument("--trace-dir", metavar="DIR",
                   help="record every frame in and out into trace segments under DIR")
    p.add_argument("--trace-segment-mib", type=int, default=64, metavar="MIB",
                   help="size of a trace segment file before the next one (default 64)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--log-file", metavar="PATH",
                   help="log to PATH instead of stderr, rolled over by size (as namesrv.log)")
    p.add_argument("--log-max-bytes", type=positive_int, default=100 * 1024 * 1024,
                   metavar="BYTES", help="roll the log file over past this size (100 MiB)")
    p.add_argument("--log-backups", type=positive_int, default=10, metavar="N",
                   help="rolled-over files kept: PATH.1 (newest) to PATH.N (10)")
    p.add_argument("-p", "--printConfigItem", dest="print_config", action="store_true",
                   help="print the effective configuration (as mqnamesrv -p) and exit")
    p.set_defaults(func=_namesrv)
    _add_admin_parser(sub)
    _add_trace_parser(sub)
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
