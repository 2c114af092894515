"""Builds the compiled core ``rmq._core``; metadata lives in pyproject.toml.

RMQ_DEBUG=1 builds with assertions and without optimisation; RMQ_SANITIZE=address,undefined
instruments the core with the compiler's sanitizers (``make test-debug``); RMQ_ANNOTATE=1
writes Cython's HTML annotation next to the sources.
"""

import glob
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

DEBUG = os.environ.get("RMQ_DEBUG", "") not in ("", "0")
SANITIZE = os.environ.get("RMQ_SANITIZE", "")
# A debug or sanitized build keeps its generated C and its objects apart: cythonize and
# build_ext go by timestamps, not by flags, and would reuse the release build's.
VARIANT = "-".join(filter(None, ["debug" if DEBUG else "", SANITIZE.replace(",", "-")]))
BUILD = f"build/{VARIANT}" if VARIANT else None


class BuildExt(build_ext):
    def finalize_options(self):
        from Cython.Build import cythonize

        directives = {
            "language_level": 3,
            "boundscheck": DEBUG,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": DEBUG,
            "embedsignature": True,
        }
        self.distribution.ext_modules[:] = cythonize(
            self.distribution.ext_modules,
            compiler_directives=directives,
            # the .pxd beside each C header, cimported by the .pxi files
            include_path=[CORE],
            build_dir=BUILD,
            annotate=os.environ.get("RMQ_ANNOTATE", "") not in ("", "0"),
        )
        super().finalize_options()


# Portable flags only: CPU-specific code is chosen at run time (crc32.c uses
# target attributes), so one wheel runs on every x86_64 / aarch64 machine.
cflags = ["-O0", "-g", "-UNDEBUG"] if DEBUG else ["-O3"]
# Python's own CFLAGS carry -g: a release build drops the debug sections at link time
# (the symbol table stays, for perf and gdb backtraces).
ldflags = [] if DEBUG else ["-Wl,--strip-debug"]
if SANITIZE:
    # UBSan only warns by default: a finding must stop the process like ASan's do.
    # Python's CFLAGS carry -fwrapv, under which signed overflow is defined and UBSan
    # does not look for it; the core must not depend on that flag.
    cflags += [f"-fsanitize={SANITIZE}", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer",
               "-fno-wrapv"]
    ldflags += [f"-fsanitize={SANITIZE}"]

CORE = "src/_core"
C_SOURCES = ["crc32.c", "hash.c", "javatable.c", "scan.c", "routetable.c", "serve.c", "bufpool.c",
             "engine.c", "tls.c"]

setup(
    ext_modules=[
        Extension(
            "rmq._core",
            sources=[f"{CORE}/_core.pyx"] + [f"{CORE}/{c}" for c in C_SOURCES],
            include_dirs=[CORE],
            # every .pxi, .pxd and .h: a change to any of them rebuilds the extension
            depends=sorted(glob.glob(f"{CORE}/*.pxi") + glob.glob(f"{CORE}/*.pxd")
                           + glob.glob(f"{CORE}/*.h")),
            extra_compile_args=cflags,
            extra_link_args=ldflags,
            define_macros=[("RMQ_DEBUG", "1" if DEBUG else "0")],
            # dlopen (tls.c), in libc itself only from glibc 2.34
            libraries=["dl"] if sys.platform.startswith("linux") else [],
        )
    ],
    cmdclass={"build_ext": BuildExt},
    options={"build": {"build_base": BUILD}} if BUILD else {},
)
