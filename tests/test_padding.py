"""Padding has one owner: ``backends.base.run_batch`` pads a batch up to a size the
backend declares and splits one that is larger, so no backend or caller pads itself."""

from __future__ import annotations

import numpy as np
import pytest

from edged.backends.base import run_batch
from edged.backends.null import NullBackend
from edged.config.runtimes import NullOptions


@pytest.mark.parametrize(("rows", "calls"), [(1, [1]), (3, [4]), (4, [4]), (6, [4, 4]),
                                             (9, [4, 4, 1])])
def test_run_batch_pads_and_splits_to_declared_sizes(rows: int, calls: list[int]) -> None:
    be = NullBackend(NullOptions(shape=(-1, 3), batch_sizes=(1, 4)))
    x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
    out = run_batch(be, {"input": x})["output"]
    assert be.calls == calls
    np.testing.assert_array_equal(out, x)  # padding rows cut, order kept


def test_fixed_size_backend_refuses_other_sizes_itself() -> None:
    be = NullBackend(NullOptions(batch_sizes=(2,)))
    with pytest.raises(ValueError, match="batch 3 is not one of"):
        be.run({"input": np.zeros((3, 4), np.float32)})
    assert run_batch(be, {"input": np.ones((3, 4), np.float32)})["output"].shape == (3, 4)


def test_dynamic_backend_gets_the_batch_as_is() -> None:
    be = NullBackend(NullOptions())
    run_batch(be, {"input": np.zeros((7, 4), np.float32)})
    assert be.calls == [7]
