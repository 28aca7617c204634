"""A model file Frigate sent: check it, fit it to its ``model_type``, make it servable.

Why apart from the room (room.py): the bytes come from a socket, so they are untrusted input,
and everything edged decides about them is pure code: parse with ``onnx`` (protobuf, never
pickle), refuse external data, run ``onnx.checker``, then match the graph's inputs and
outputs against the layouts of Frigate's model types (docs/frigate.md, "Frigate side, per
model type"), and build the ``ModelConfig`` the registry loads like any other. Two types
need a small graph change to serve batched, and get it here:

- ``dfine`` takes ``orig_target_sizes`` beside the image; Frigate feeds the model
  input's ``[[h, w]]``, so edged makes it a constant of the graph (one input left);
- ``yolonas``' flat ``[N, 7]`` output has no batch axis; edged adds one (``[1, N, 7]``)
  and serves it one image per run;
- a ``yologeneric`` export with rows per candidate, ``[1, N, 4+C]``, which Frigate reads
  too, is transposed to the ``[1, 4+C, N]`` of edged's decoder.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from edged.backends.base import TensorSpec
from edged.config.frigate import FRIGATE_IDS, outside_labelmap
from edged.config.layouts import FRIGATE_TYPES, LAYOUTS
from edged.config.overload import OverloadConfig
from edged.config.postprocess import PostprocessConfig
from edged.config.preprocess import PreprocessConfig
from edged.detect.outputs import OutputMismatch, check_outputs
from edged.errors import ArtifactError

#: the order a graph is matched in when nobody says its type (most specific first): the
#: order ``FRIGATE_TYPES`` is written in, so the types are named once
DETECT_ORDER = tuple(FRIGATE_TYPES)
#: input size assumed for an image input whose height/width are dynamic
#: what Frigate stops reading under; also the NMS overlap its own decoders use
MIN_SCORE = 0.4


class ModelRefused(ArtifactError):
    """A sent model edged will not serve; the message goes back to Frigate."""


@dataclass(frozen=True)
class CheckedModel:
    """A graph that fits a Frigate model type, ready to write and load."""

    model_type: str
    decoder: str
    image: TensorSpec  # the one input left after adaptation
    width: int
    height: int
    layout: str  # NCHW | NHWC
    #: the graph to serve when it differs from the bytes sent (dfine, yolonas), else None
    adapted: bytes | None
    #: every Frigate type the graph fits, ``model_type`` first: a ``[1, N, K]`` head is
    #: YOLOX's or a row-wise yolo-generic export, which only Frigate's header tells apart
    fits: tuple[str, ...] = ()
    #: class ids the model can answer, 0..classes-1 after the type's label offset (None:
    #: the layout gives ids as values, not one score per class: SSD, D-FINE, YOLO-NAS)
    classes: int | None = None


def check_model(data: bytes, model_type: str | None = None) -> CheckedModel:
    """Parse and check ``data``; fit it to ``model_type`` (None: whichever type fits).

    ModelRefused says what is wrong in words Frigate's user can act on."""
    import onnx

    try:
        model = onnx.load_from_string(data)
    except Exception as e:  # protobuf's DecodeError and friends
        raise ModelRefused(f"not an ONNX model (truncated or another format): {e}") from None
    if not model.graph.node:
        raise ModelRefused("not an ONNX model: the file parses but holds no graph")
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    if any(uses_external_data(t) for t in _get_all_tensors(model)):
        raise ModelRefused("the model keeps weights in external data files; send one "
                           "self-contained .onnx (onnx.save(..., save_as_external_data=False))")
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        raise ModelRefused(f"onnx.checker refused the model: {str(e)[:300]}") from None
    types = [model_type] if model_type else list(DETECT_ORDER)
    problems, fits = [], []
    for t in types:
        try:
            _fit(model, t, adapt=False)
            fits.append(t)
        except ModelRefused as e:
            problems.append(f"{t}: {e}")
    if fits:
        return replace(_fit(model, fits[0], adapt=True), fits=tuple(fits))
    if model_type:
        raise ModelRefused(f"the model does not fit model_type {model_type!r}: "
                           f"{problems[0].split(': ', 1)[1]}")
    raise ModelRefused("the model fits none of Frigate's model types; " + "; ".join(problems))


def _specs(values: Any, skip: set[str]) -> list[TensorSpec]:
    from onnx.helper import tensor_dtype_to_np_dtype

    out = []
    for v in values:
        if v.name in skip:
            continue
        tt = v.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else -1
                     for d in tt.shape.dim)
        out.append(TensorSpec(v.name, np.dtype(tensor_dtype_to_np_dtype(tt.elem_type)), dims))
    return out


def _image_input(inputs: list[TensorSpec], model_type: str) -> tuple[TensorSpec, int, int, str]:
    images = [s for s in inputs if len(s.shape) == 4 and 3 in (s.shape[1], s.shape[3])]
    if len(images) != 1:
        have = ", ".join(f"{s.name} {list(s.shape)}" for s in inputs) or "none"
        raise ModelRefused(f"needs one image input [1,3,H,W] or [1,H,W,3]; inputs: {have}")
    s = images[0]
    layout = "NCHW" if s.shape[1] == 3 else "NHWC"
    h, w = (s.shape[2], s.shape[3]) if layout == "NCHW" else (s.shape[1], s.shape[2])
    size = FRIGATE_TYPES[model_type].default_size
    if s.dtype.kind not in "fu":
        raise ModelRefused(f"image input {s.name!r} is {s.dtype.name}; Frigate sends uint8 "
                           "or float")
    return s, (w if w > 0 else size), (h if h > 0 else size), layout


def _fit(model: Any, model_type: str, adapt: bool) -> CheckedModel:
    init = {i.name for i in model.graph.initializer}
    inputs = _specs(model.graph.input, init)
    outputs = _specs(model.graph.output, set())
    extra = [s for s in inputs if s.name == "orig_target_sizes"]
    if model_type == "dfine" and not extra:
        raise ModelRefused("a D-FINE export has a second input 'orig_target_sizes' [1,2]")
    if model_type != "dfine" and extra:
        raise ModelRefused("the 'orig_target_sizes' input says D-FINE (model_type dfine)")
    image, w, h, layout = _image_input([s for s in inputs if s not in extra], model_type)
    if len(inputs) != 1 + len(extra):
        names = ", ".join(s.name for s in inputs)
        raise ModelRefused(f"takes inputs {names}; Frigate sends one image")
    flat = model_type == "yolonas" and len(outputs) == 1 and len(outputs[0].shape) == 2
    checked_outputs = [TensorSpec(o.name, o.dtype, (1, *o.shape)) for o in outputs] \
        if flat else outputs
    # Frigate reads a one-output yolo-generic [1, N, 4+C] as well as [1, 4+C, N]
    o0 = outputs[0].shape if len(outputs) == 1 else ()
    rows = (model_type == "yologeneric" and len(o0) == 3 and o0[1] > 0 and o0[2] > 0
            and o0[1] > o0[2])
    if rows:
        checked_outputs = [TensorSpec(outputs[0].name, outputs[0].dtype, (o0[0], o0[2], o0[1]))]
    decoder = FRIGATE_TYPES[model_type].layout
    if model_type == "yologeneric" and len(outputs) == 3:
        decoder = "yolo-anchors"  # YOLOv3/v4/v7: three heads with anchors
    try:
        check_outputs(decoder, checked_outputs, input_size=(w, h))
    except OutputMismatch as e:
        raise ModelRefused(str(e).replace("the model's outputs do not fit decoder ",
                                          "outputs do not fit ")) from None
    adapted = None
    if adapt and (extra or flat or rows):
        adapted = _adapt(model, extra[0].name if extra else None, (h, w),
                         outputs[0].name if flat else None,
                         outputs[0].name if rows else None)
    return CheckedModel(model_type, decoder, image, w, h, layout, adapted,
                        classes=_classes(decoder, checked_outputs))


def _classes(decoder: str, outputs: list[TensorSpec]) -> int | None:
    """How many class ids a layout with one score per class answers (None: ids are
    values in the output, not known before it runs)."""
    shapes = [o.shape for o in outputs]
    c: int | None = None
    if decoder == "yolov8" and len(shapes) == 1 and len(shapes[0]) == 3:
        c = shapes[0][1] - 4
    elif decoder == "yolox" and len(shapes) == 1 and len(shapes[0]) == 3:
        c = shapes[0][2] - 5
    elif decoder == "yolo-anchors" and shapes and len(shapes[0]) == 4 and shapes[0][1] > 0:
        c = shapes[0][1] // 3 - 5
    elif decoder == "rfdetr":
        c = max((s[-1] for s in shapes if len(s) == 3), default=0) - 1  # column 0 dropped
    return c if c is not None and c > 0 else None


def labelmap_fit(checked: CheckedModel, class_map: dict[int, int]) -> tuple[str | None, str]:
    """Whether a sent model's class ids fit Frigate's labelmap (ids 0..90), through the
    endpoint's ``class_map``: (why it is refused or None, what the answer says of it)."""
    if checked.classes is None:
        return None, ("class ids outside Frigate's labelmap (0..90) are dropped from "
                      "replies")
    ids = range(checked.classes)
    out = outside_labelmap(checked.classes, class_map)
    mapped = [i for i in ids if i in class_map]
    if out:
        return (f"the model answers {checked.classes} class ids (0..{checked.classes - 1}); "
                f"Frigate's labelmap holds ids 0..{FRIGATE_IDS - 1} and its camera process "
                f"fails on an id it lacks: ids {out[0]}..{out[-1]} are outside it. Map them "
                "with this endpoint's class_map (e.g. class_map = { "
                f"{out[0]} = 0 }}) or send a model of at most {FRIGATE_IDS} classes"), ""
    if mapped:
        return None, f"class ids {', '.join(map(str, mapped[:8]))} mapped by class_map"
    return None, f"class ids 0..{checked.classes - 1} fit Frigate's labelmap"


def _adapt(model: Any, sizes_input: str | None, hw: tuple[int, int],
           flat_output: str | None, rows_output: str | None = None) -> bytes:
    """The D-FINE size input as a constant, the YOLO-NAS flat output with a batch axis,
    a YOLO ``[1, N, 4+C]`` output transposed to ``[1, 4+C, N]``."""
    import onnx
    from onnx import helper, numpy_helper

    g = model.graph
    if rows_output is not None:
        inner = f"{rows_output}__rows"
        for node in g.node:
            node.output[:] = [inner if o == rows_output else o for o in node.output]
        g.node.append(helper.make_node("Transpose", [inner], [rows_output], perm=[0, 2, 1]))
        dims = g.output[0].type.tensor_type.shape.dim
        d1, d2 = onnx.TensorShapeProto.Dimension(), onnx.TensorShapeProto.Dimension()
        d1.CopyFrom(dims[2])
        d2.CopyFrom(dims[1])
        dims[1].CopyFrom(d1)
        dims[2].CopyFrom(d2)
    if sizes_input is not None:
        kept = [i for i in g.input if i.name != sizes_input]
        del g.input[:]
        g.input.extend(kept)
        g.initializer.append(numpy_helper.from_array(np.array([hw], np.int64), sizes_input))
    if flat_output is not None:
        inner = f"{flat_output}__flat"
        for node in g.node:
            node.output[:] = [inner if o == flat_output else o for o in node.output]
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
        if opset >= 13:
            axes = f"{flat_output}__axes"
            g.initializer.append(numpy_helper.from_array(np.array([0], np.int64), axes))
            g.node.append(helper.make_node("Unsqueeze", [inner, axes], [flat_output]))
        else:
            g.node.append(helper.make_node("Unsqueeze", [inner], [flat_output], axes=[0]))
        out = g.output[0]
        dims = out.type.tensor_type.shape.dim
        first = onnx.TensorShapeProto.Dimension(dim_value=1)
        dims.insert(0, first)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def model_config(name: str, variant: str, path: Path, checked: CheckedModel,
                 color: str, max_batch_size: int = 4) -> Any:
    """The registry's ``ModelConfig`` for a checked model stored at ``path``: its one
    fp32 variant (``edged.delivery.rungs.with_rungs`` adds the rungs built for it)."""
    from edged.config.models import ModelConfig, VariantConfig
    from edged.config.runtimes import OnnxRuntimeOptions

    t = FRIGATE_TYPES[checked.model_type]
    uint8 = checked.image.dtype == np.uint8
    pre = PreprocessConfig(
        input=checked.image.name, color=color, raw_color=color, width=checked.width,
        height=checked.height, interpolation="linear",
        scale=1.0 if uint8 else t.float_scale, mean=(0.0, 0.0, 0.0),
        std=(1.0, 1.0, 1.0), layout=checked.layout,
        dtype=checked.image.dtype.name if checked.image.dtype.name in (
            "float32", "float16", "uint8") else "float32")
    lay = LAYOUTS[checked.decoder]
    post = PostprocessConfig(
        decoder=lay.name, resize="stretch", conf=MIN_SCORE, iou=MIN_SCORE, max_det=20,
        box_format=lay.box_format, box_order=lay.box_order or "xyxy",
        label_offset=t.label_offset, nms=not lay.nms_in_graph)
    batch = 1 if t.name == "yolonas" else max_batch_size  # a flat output mixes a batch's rows
    variants = (VariantConfig(variant, "onnxruntime", path, OnnxRuntimeOptions(),
                              precision="fp32"),)
    return ModelConfig(name=name, variants=variants, max_batch_size=batch,
                       max_queue=64, preprocess=pre, postprocess=post,
                       overload=OverloadConfig(step_down=True))
