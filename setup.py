"""Build the Cython hot paths in ext/ into kafkalite._ext.*.

There is deliberately no pure-Python fallback: if a C compiler or Cython is
missing, the build fails here, loudly, instead of producing a package whose
hot path silently runs at a hundredth of the speed.
"""
import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

EXT_DIR = "ext"
COMMON = dict(
    include_dirs=[EXT_DIR, os.path.join(EXT_DIR, "vendor", "xxhash"), numpy.get_include()],
    extra_compile_args=["-O3", "-fno-strict-aliasing"],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
)

# One extension per job; the shared byte layout (wire.h) and the batch
# helpers (batch.pxd) are inline functions compiled into each module that
# uses them.
MODULES = ["crc32c", "layout", "builder", "reader", "columns", "batch_scan", "index", "offset_map",
           "shm_ring", "partitioner", "messages", "accumulator"]

extensions = [
    Extension(f"kafkalite._ext.{name}", [os.path.join(EXT_DIR, f"{name}.pyx")], **COMMON)
    for name in MODULES
]



class ParallelBuildExt(build_ext):
    """Compile the extensions side by side, one per core, unless told
    otherwise (``build_ext -j N``): one after another they made
    ``pip install -e .`` take minutes on a small machine."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1


setup(
    cmdclass={"build_ext": ParallelBuildExt},
    ext_modules=cythonize(
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
