"""Package names loaded on first use (PEP 562), for packages whose
``__init__`` re-exports from heavy modules.

A server process imports a package's light submodule (``kafkalite.storage.config``,
``kafkalite.record.layout``, ``kafkalite.client.producer``) far more often
than it needs everything the package re-exports; importing the submodule
runs the package's ``__init__`` first, which then must not load the rest
(the Cython scanners and builders import numpy, the consumer pyarrow).

    __getattr__, __dir__ = lazy_exports(__name__, {
        "kafkalite.storage.log": ("PartitionLog", "LogAppendInfo"), ...})

Who may call: package ``__init__`` modules of kafkalite.
"""
from __future__ import annotations

import importlib
import sys


def lazy_exports(package: str, exports: dict[str, tuple[str, ...]]):
    """``(__getattr__, __dir__)`` for ``package``: ``exports`` maps each
    module to the public names it defines. A name, once loaded, is kept in
    the package's namespace."""
    module_of = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str):
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(module_of))

    return __getattr__, __dir__
