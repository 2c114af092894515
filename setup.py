"""Builds the compiled core ``rmq._core``; metadata lives in pyproject.toml.

RMQ_DEBUG=1 builds with assertions and without optimisation; RMQ_ANNOTATE=1
writes Cython's HTML annotation next to the sources.
"""

import glob
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

DEBUG = os.environ.get("RMQ_DEBUG", "") not in ("", "0")


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
            annotate=os.environ.get("RMQ_ANNOTATE", "") not in ("", "0"),
        )
        super().finalize_options()


# Portable flags only: CPU-specific code is chosen at run time (crc32.c uses
# target attributes), so one wheel runs on every x86_64 / aarch64 machine.
cflags = ["-O0", "-g", "-UNDEBUG"] if DEBUG else ["-O3"]
# Python's own CFLAGS carry -g: a release build drops the debug sections at link time
# (the symbol table stays, for perf and gdb backtraces).
ldflags = [] if DEBUG else ["-Wl,--strip-debug"]

CORE = "src/_core"
C_SOURCES = ["crc32.c", "hash.c", "scan.c", "routetable.c"]

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
        )
    ],
    cmdclass={"build_ext": BuildExt},
)
