"""Backend lookup by name. Modules are imported lazily: a CPU-only device never
imports TensorRT or CUDA, and a missing optional runtime is a clear error naming
the extra to install, raised only when a config actually asks for that backend.

The names are ``edged.config.runtimes.RUNTIMES`` (the config is checked against them);
runtime ``NAME`` is the module ``edged.backends.NAME``, or the ``backend`` module of the
package of that name (TensorRT and its helpers), and each provides ``open_backend(path, options,
max_batch_size) -> Backend`` taking that runtime's options from ``edged.config.runtimes``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from edged.config.runtimes import RUNTIMES
from edged.errors import ArtifactError


def backend_module(name: str) -> ModuleType:
    """The module implementing runtime ``name``."""
    if name not in RUNTIMES:
        raise ArtifactError(f"unknown backend {name!r}; known: {', '.join(RUNTIMES)}")
    module = importlib.import_module(f"edged.backends.{name}")
    if hasattr(module, "__path__"):  # a package: its runtime is its ``backend`` module
        module = importlib.import_module(f"edged.backends.{name}.backend")
    return module
