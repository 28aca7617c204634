"""One ONNX Runtime CPU session per model file, for in-process model tests."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any


@functools.cache
def ort_session(path: Path) -> Any:
    """A cached session on ``path`` (1 thread, quiet): loading a model once per run, not
    once per test, keeps the model tests fast."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
