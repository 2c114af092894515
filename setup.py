"""Builds the compiled core ``rmq._core``; metadata lives in pyproject.toml.

RMQ_DEBUG=1 builds with assertions and without optimisation; RMQ_ANNOTATE=1
writes Cython's HTML annotation next to the sources.
"""

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
            annotate=os.environ.get("RMQ_ANNOTATE", "") not in ("", "0"),
            compile_time_env={"RMQ_DEBUG": DEBUG},
        )
        super().finalize_options()


# Portable flags only: CPU-specific code is chosen at run time (crc32.c uses
# target attributes), so one wheel runs on every x86_64 / aarch64 machine.
cflags = ["-O0", "-g", "-UNDEBUG"] if DEBUG else ["-O3"]

setup(
    ext_modules=[
        Extension(
            "rmq._core",
            sources=["src/_core/_core.pyx", "src/_core/crc32.c", "src/_core/hash.c", "src/_core/scan.c",
                     "src/_core/routetable.c"],
            include_dirs=["src/_core"],
            depends=["src/_core/crc32.h", "src/_core/hash.h", "src/_core/scan.h", "src/_core/routetable.h",
                     "src/_core/scan.pxi", "src/_core/routes.pxi", "src/_core/codec.pxi", "src/_core/bodies.pxi",
                     "src/_core/crc32.pxi", "src/_core/jsonio.pxi", "src/_core/trace.pxi"],
            extra_compile_args=cflags,
            define_macros=[("RMQ_DEBUG", "1" if DEBUG else "0")],
        )
    ],
    cmdclass={"build_ext": BuildExt},
)
