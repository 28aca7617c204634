"""A model's input contract: what a request must send, and how it becomes tensors.

Why apart from the model: validating a request against the model's inputs (names,
dtypes, shapes, rows, outputs asked for) and turning images into tensors is pure work
on the request, fixed once the first variant has loaded; the model only decides when
it runs. The result is one ``Prepared`` the caller hands back to ``Model.submit``.

Which inputs are preprocessed (docs/protocol.md, "Which inputs are preprocessed"): an
encoded image, or a raw uint8 HxW(xC) frame on the preprocessed input, goes through the
head's ``RequestFit`` (the model's preprocessing; a detector also records the letterbox); a
raw tensor that matches an input apart from the batch dimension goes through untouched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from edged.backends.base import TensorSpec
from edged.config.server import Limits
from edged.errors import ArtifactError, InvalidArgument
from edged.model.heads import RequestFit
from edged.model.request import InputMeta, Request
from edged.preprocess.preprocessor import Preprocessor, check_frame, decode_image


@dataclass(eq=False)
class Prepared:
    """A request validated against its model, its tensors made: ready to queue."""

    feeds: dict[str, np.ndarray]  # input name -> array with leading batch dim ``rows``
    rows: int
    key: tuple[Any, ...]  # requests batch together only when keys are equal
    meta: Any = None  # what the model's head needs after compute (a detector's job)
    outputs: list[str] | None = None  # outputs asked for (None: all)
    stream: str | None = None
    max_fps: float | None = None


def batch_key(feeds: dict[str, np.ndarray]) -> tuple[Any, ...]:
    return tuple((k, a.dtype.str, a.shape[1:]) for k, a in sorted(feeds.items()))


class InputContract:
    """The inputs and outputs a model promised its clients, from its first variant."""

    def __init__(self, model: str, inputs: list[TensorSpec], outputs: list[TensorSpec],
                 preprocessor: Preprocessor | None, limits: Limits,
                 max_batch_size: int) -> None:
        self.model = model
        self.inputs = inputs
        self.outputs = outputs
        self.output_names = [o.name for o in outputs]
        self._output_set = set(self.output_names)
        self.specs = {s.name: s for s in inputs}
        self.pre = preprocessor
        self.limits = limits
        self.max_batch_size = max_batch_size
        self.image_input: str | None = None  # the input the preprocessing feeds
        if preprocessor is not None:
            want = preprocessor.cfg.input
            names = list(self.specs)
            if want is not None and want not in names:
                raise ArtifactError(f"model {model!r}: preprocess.input {want!r} is not an "
                                    f"input of the model (inputs: {', '.join(names)})")
            self.image_input = want or names[0]

    def needs_thread(self, req: Request) -> bool:
        """Image decoding/resizing is heavy enough to keep off the event loop."""
        return any(m.encoding != "raw" or (m.dtype == np.uint8 and m.shape is not None
                                           and len(m.shape) in (2, 3)) for m in req.inputs)

    def prepare(self, req: Request, fit: RequestFit) -> Prepared:
        """Validate ``req`` and build its input tensors (``fit`` makes image tensors)."""
        if req.outputs:
            unknown = [o for o in req.outputs if o not in self._output_set]
            if unknown:
                raise InvalidArgument(f"unknown output(s) {', '.join(map(repr, unknown))}; "
                                      f"model {self.model!r} has {', '.join(self.output_names)}")
        feeds: dict[str, np.ndarray] = {}
        for i, meta in enumerate(req.inputs):
            spec = self._spec_for(i, meta, len(req.inputs))
            if spec.name in feeds:
                raise InvalidArgument(f"input {spec.name!r} given twice")
            feeds[spec.name] = self._tensor(i, meta, spec, fit)
        missing = [n for n in self.specs if n not in feeds]
        if missing:
            raise InvalidArgument(f"missing input(s) {', '.join(missing)} for model "
                                  f"{self.model!r}")
        rows = {a.shape[0] for a in feeds.values()}
        if len(rows) != 1:
            raise InvalidArgument(f"inputs disagree on the batch dimension: {sorted(rows)}")
        n = rows.pop()
        if n < 1:
            raise InvalidArgument("batch dimension is 0: nothing to compute")
        if n > self.max_batch_size:
            raise InvalidArgument(f"{n} rows exceed max_batch_size {self.max_batch_size} of "
                                  f"model {self.model!r}; split the request")
        key = batch_key(feeds)
        return Prepared(feeds, n, key, fit.finish(n, req.stream), req.outputs, req.stream,
                        req.max_fps)

    def prepare_frame(self, frame: np.ndarray, color: str, fit: RequestFit,
                      stream: str | None = None) -> Prepared:
        """A uint8 frame in ``color`` handed over whole (a Frigate frame, a pipeline's
        frame or crop): the same result as ``prepare`` for a native raw frame, so both
        batch together."""
        if self.image_input is None or len(self.inputs) != 1:
            raise InvalidArgument(f"model {self.model!r} is not a one-input image model "
                                  "(one input, fed by its [models.preprocess])")
        assert self.pre is not None
        check_frame(frame)
        feeds = {self.image_input: fit.frame(self.pre, frame, color)}
        return Prepared(feeds, 1, batch_key(feeds), fit.finish(1, stream), stream=stream)

    def _spec_for(self, i: int, meta: InputMeta, given: int) -> TensorSpec:
        name = meta.name
        if name is None:
            if given != 1 and len(self.inputs) != 1:
                raise InvalidArgument(f"inputs[{i}] needs a name: model {self.model!r} has "
                                      f"inputs {', '.join(self.specs)}")
            names = list(self.specs)
            name = self.image_input if (self.image_input and meta.encoding != "raw") \
                else names[min(i, len(names) - 1)]
        spec = self.specs.get(name)
        if spec is None:
            raise InvalidArgument(f"inputs[{i}]: model {self.model!r} has no input {name!r}; "
                                  f"its inputs are {', '.join(self.specs)}")
        return spec

    def _tensor(self, i: int, meta: InputMeta, spec: TensorSpec, fit: RequestFit) -> np.ndarray:
        image = self.pre is not None and spec.name == self.image_input
        if meta.encoding != "raw":
            if not image:
                raise InvalidArgument(f"inputs[{i}]: model {self.model!r} has no preprocessing "
                                      f"for input {spec.name!r}; send a raw tensor "
                                      f"{spec.dtype} {list(spec.shape)}")
            assert self.pre is not None
            frame = decode_image(meta.data, self.limits.max_image_pixels, meta.encoding)
            check_frame(frame)
            return fit.frame(self.pre, frame, "bgr")
        arr = meta.data
        assert meta.dtype is not None and meta.shape is not None
        if spec.matches_item(meta.dtype, meta.shape):
            if image:
                fit.as_is()
            return arr
        if image and meta.dtype == np.uint8 and len(meta.shape) in (2, 3):
            assert self.pre is not None
            if meta.shape[0] * meta.shape[1] > self.limits.max_image_pixels:
                raise InvalidArgument(f"inputs[{i}]: frame of {meta.shape[1]}x{meta.shape[0]} "
                                      f"exceeds {self.limits.max_image_pixels} pixels")
            check_frame(arr)
            return fit.frame(self.pre, arr, None)
        want = f"{spec.dtype} {['N' if d == -1 else d for d in spec.shape]}"
        hint = (" or a uint8 HxW or HxWxC image frame (C = 1, 3 or 4 channels) / JPEG / PNG"
                if self.pre else "")
        raise InvalidArgument(f"inputs[{i}] ({spec.name!r}): got {meta.dtype} "
                              f"{list(meta.shape)}; model {self.model!r} expects {want}{hint}")


def check_spec(c: InputContract | None) -> TensorSpec | None:
    """The input validation frames are made for (the preprocessed one)."""
    if c is None:
        return None
    want = c.image_input or (c.inputs[0].name if len(c.inputs) == 1 else None)
    return next((s for s in c.inputs if s.name == want), None)
