"""Start-up's background open: a model's first variant is opened while the daemon
imports, the daemon's load takes exactly that session, and nothing is leaked or hidden
(an artifact that fails fails the load with its own error)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from support.configs import digits_config, variant

from edged.config.file import load_config
from edged.errors import ArtifactError
from edged.model import preopen as load

pytestmark = pytest.mark.skipif((os.cpu_count() or 1) < 2,
                                reason="pre-opening is off on one core (nothing to overlap)")


def test_the_load_takes_what_was_preopened_once(tmp_path: Path) -> None:
    cfg = load_config(digits_config(tmp_path))
    m = cfg.models[0]
    assert load.preopen(cfg.models) == 1
    first, _ = load.load_variant(m.variants[0], m.max_batch_size)
    again, _ = load.load_variant(m.variants[0], m.max_batch_size)
    assert again is not first  # taken once; the next load opens its own
    assert first.run({first.inputs[0].name: np.zeros((1, 1, 28, 28), np.float32)})
    first.close()
    again.close()
    load.discard_preopened()


def test_a_variant_nobody_loads_is_closed(tmp_path: Path) -> None:
    cfg = load_config(digits_config(tmp_path))
    assert load.preopen(cfg.models) == 1
    load.discard_preopened()
    m = cfg.models[0]
    backend, _ = load.load_variant(m.variants[0], m.max_batch_size)  # opened anew
    backend.close()


def test_a_broken_artifact_fails_its_load_with_its_own_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    cfg = load_config(digits_config(tmp_path, variant_tables=[variant("bad", bad)]))
    m = cfg.models[0]
    assert m.variants[0].path == bad
    load.preopen(cfg.models)
    with pytest.raises(ArtifactError) as preopened:
        load.load_variant(m.variants[0], m.max_batch_size)
    with pytest.raises(ArtifactError) as direct:
        load.load_variant(m.variants[0], m.max_batch_size)
    assert str(preopened.value) == str(direct.value)
    load.discard_preopened()
