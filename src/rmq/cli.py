"""The ``rmq`` command."""

import argparse
import sys

import rmq


def _version(args):
    print(f"rmq {rmq.__version__}")
    print(f"implementation: {rmq.IMPLEMENTATION}")
    print(f"crc32 kernel:   {rmq.CRC32_KERNEL}")
    print(f"python:         {sys.version.split()[0]}")
    return 0


def build_parser():
    parser = argparse.ArgumentParser(prog="rmq", description="RocketMQ NameServer toolkit")
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("version", help="print the version, the core in use and its CRC32 kernel")
    p.set_defaults(func=_version)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", _version)
    return func(args)


if __name__ == "__main__":
    sys.exit(main())
