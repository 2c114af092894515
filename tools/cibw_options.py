"""cibuildwheel's options for one build, read from pyproject.toml as cibuildwheel
resolves them: ``[tool.cibuildwheel]``, then ``[tool.cibuildwheel.linux]``, then every
``[[tool.cibuildwheel.overrides]]`` whose ``select`` matches the build identifier, in
order (a later one wins, option by option). The scripts that build and test here
(tools/wheel-test.sh, tools/aarch64-test.sh) read what they run from it, so that they
and cibuildwheel cannot drift apart.

    python3 tools/cibw_options.py cp311-manylinux_x86_64 test-command --project DIR
    python3 tools/cibw_options.py cp311-manylinux_aarch64 test-requires   # one a line
    python3 tools/cibw_options.py - build-system.requires                  # any table

``--project DIR`` replaces ``{project}`` and ``{package}`` in commands, as cibuildwheel
does (no package-dir is set, so both are the project's directory). A dotted key reads
pyproject.toml itself (``build-system.requires``, ``project.dependencies``).
"""

import argparse
import fnmatch
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:          # Python 3.10: tomli is the same parser
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
#: Options that are lists, which cibuildwheel also takes as one space-separated string.
LIST_OPTIONS = {"test-requires", "test-extras", "test-sources"}


def resolve(meta, identifier):
    """The cibuildwheel options in force for ``identifier`` on Linux."""
    cibw = meta.get("tool", {}).get("cibuildwheel", {})
    options = {k: v for k, v in cibw.items() if k not in ("linux", "macos", "windows", "overrides")}
    options.update(cibw.get("linux", {}))
    for override in cibw.get("overrides", []):
        if "inherit" in override:
            sys.exit("cibw_options: overrides with `inherit` are not supported here")
        patterns = override["select"].split()
        if any("{" in p for p in patterns):
            sys.exit("cibw_options: brace expansion in `select` is not supported here")
        if any(fnmatch.fnmatchcase(identifier, p) for p in patterns):
            options.update({k: v for k, v in override.items() if k != "select"})
    return options


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("identifier", help="a build identifier (cp311-manylinux_aarch64), "
                                           "or - for a dotted key")
    parser.add_argument("key", help="a cibuildwheel option, or a dotted pyproject key")
    parser.add_argument("--project", help="the project directory for {project} and {package}")
    parser.add_argument("--pyproject", type=Path, default=PYPROJECT)
    args = parser.parse_args(argv)
    meta = tomllib.loads(args.pyproject.read_text())

    if "." in args.key:
        value = meta
        for part in args.key.split("."):
            value = value[part]
    else:
        value = resolve(meta, args.identifier).get(args.key)
        if value is None:
            sys.exit(f"cibw_options: no {args.key} for {args.identifier}")
    if args.key.endswith("-command") or args.key.startswith("before-"):
        # a list of commands is run as one, joined as cibuildwheel joins them
        value = " && ".join(value) if isinstance(value, list) else value
        if args.project:
            value = value.replace("{project}", args.project).replace("{package}", args.project)
    elif isinstance(value, str) and args.key in LIST_OPTIONS:
        value = value.split()
    print("\n".join(value) if isinstance(value, list) else value)


if __name__ == "__main__":
    main()
