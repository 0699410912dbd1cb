"""Build the Cython hot paths in ext/ into kafkalite._ext.*.

There is deliberately no pure-Python fallback: if a C compiler or Cython is
missing, the build fails here, loudly, instead of producing a package whose
hot path silently runs at a hundredth of the speed.
"""
import os
import shutil
import sysconfig

import Cython
import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

EXT_DIR = "ext"
COMMON = dict(
    include_dirs=[EXT_DIR, os.path.join(EXT_DIR, "vendor", "xxhash"), numpy.get_include()],
    # -g0: no debug information (Python's CFLAGS ask for -g): a fifth of gcc's
    # time, and gcc is most of the build's (Cython's translation under a fifth)
    extra_compile_args=["-O3", "-g0", "-fno-strict-aliasing"],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
)

# One extension per job; the shared byte layout (wire.h) and the batch
# helpers (batch.pxd) are inline functions compiled into each module that
# uses them.
MODULES = ["crc32c", "layout", "builder", "reader", "columns", "batch_scan", "index", "offset_map",
           "shm_ring", "partitioner", "messages", "accumulator", "produce_fetch", "fetch_state",
           "produce_wire", "leader_append", "avro_columns", "json_columns", "cdc_envelope",
           "pgoutput", "copy_text", "produce_frames", "log_state", "tail_read",
           "fetch_session_state", "ring_append", "kafka_wake"]

extensions = [
    Extension(f"kafkalite._ext.{name}", [os.path.join(EXT_DIR, f"{name}.pyx")], **COMMON)
    for name in MODULES
]



# Compiled extensions kept in the source tree between builds. pip builds
# each install (`pip install -e '.[spark]'` after `pip install -e .`) in a
# new temporary directory, so without this every install recompiled all the
# extensions (a minute or more on 2 cores) though nothing in ext/ changed.
# Keyed by what else goes into them: the interpreter, numpy's headers, Cython.
CACHE_DIR = os.path.join("build", "ext-cache", f"{sysconfig.get_config_var('SOABI')}"
                         f"-numpy-{numpy.__version__}-cython-{Cython.__version__}")


def _inputs_mtime() -> float:
    """The newest time any of our inputs changed: the .pyx, .pxd and
    header files under ext/ and kafkalite/_ext (a shared .pxd or header can change them all)
    and this file (flags). Not the generated .c files: Cython writes them
    again in every isolated build, as numpy's .pxd it depends on is
    installed afresh there. One stamp for all rebuilds everything on any
    change, which is rare; a finer one could miss a header."""
    newest = os.path.getmtime(os.path.abspath(__file__))
    # the .pxd files the modules cimport each other through live beside
    # the compiled modules (kafkalite/_ext), not in ext/
    for top in (EXT_DIR, os.path.join("kafkalite", "_ext")):
        for root, _dirs, files in os.walk(top):
            for name in files:
                if name.endswith((".pyx", ".pxd", ".pxi", ".h")):
                    newest = max(newest, os.path.getmtime(os.path.join(root, name)))
    return newest


INPUTS_MTIME = _inputs_mtime()


def _cached(ext_file: str) -> str | None:
    """The cached build of an extension file name, if it is newer than
    every input."""
    path = os.path.join(CACHE_DIR, ext_file)
    return path if os.path.exists(path) and os.path.getmtime(path) >= INPUTS_MTIME else None


class ParallelBuildExt(build_ext):
    """Compile the extensions side by side, one per core, unless told
    otherwise (``build_ext -j N``): one after another they made
    ``pip install -e .`` take minutes on a small machine. An extension
    compiled from the same inputs before is copied from CACHE_DIR."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1

    def build_extension(self, ext):
        target = self.get_ext_fullpath(ext.name)
        cached = None if self.force else _cached(os.path.basename(target))
        if cached:
            os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
            shutil.copy2(cached, target)
            return
        super().build_extension(ext)
        os.makedirs(CACHE_DIR, exist_ok=True)
        cached = os.path.join(CACHE_DIR, os.path.basename(target))
        # copied under a temporary name and renamed: a build killed halfway
        # leaves no truncated extension in the cache
        shutil.copy2(target, cached + ".tmp")
        os.replace(cached + ".tmp", cached)


SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
# every extension cached: nothing to translate (Cython would write every .c
# again, see _inputs_mtime) and nothing to compile
ALL_CACHED = all(_cached(name + SUFFIX) for name in MODULES)

setup(
    cmdclass={"build_ext": ParallelBuildExt},
    ext_modules=extensions if ALL_CACHED else cythonize(
        extensions,
        # .pyx -> .c in parallel too (Cython only regenerates what changed)
        nthreads=os.cpu_count() or 1,
        include_path=[EXT_DIR, "."],
        compiler_directives={
            "language_level": "3",
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
        },
        annotate=bool(os.environ.get("KAFKALITE_CYTHON_ANNOTATE")),
    ),
)
