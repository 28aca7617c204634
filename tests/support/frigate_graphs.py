"""Small ONNX graphs with exactly the inputs and outputs of each Frigate ``model_type``
(docs/frigate.md), each answering one known object whatever the image.

Why built here: no permissively licensed YOLOv9/YOLOX/YOLO-NAS/D-FINE/RF-DETR weights
ship in a wheel, and what the tests check is edged's reading of each layout (names,
shapes, box conventions, class numbering), which a graph with a planted answer pins
down exactly. The answer goes through the image input (``+ 0 * mean(image)``), so ONNX
Runtime cannot fold the graph to constants and the input is really fed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: the planted object: class (Frigate labelmap id), score, box x1, y1, x2, y2 in input pixels
SIZE = 320
BOX = (40.0, 60.0, 200.0, 300.0)
SCORE = 0.9


@dataclass(frozen=True)
class Graph:
    model_type: str  # what Frigate's config says
    data: bytes
    shape: tuple[int, ...]  # the tensor Frigate sends
    dtype: str
    #: the row Frigate must get back: class, score, y1, x1, y2, x2 normalised
    want: tuple[float, ...]


def _model(inputs: list, outputs: list, nodes: list, inits: list) -> bytes:
    import onnx
    from onnx import helper

    g = helper.make_graph(nodes, "frigate_test", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m.SerializeToString()


def _through_input(image: str, image_float: bool) -> list:
    """Nodes giving ``zero`` = 0 * mean(image), a float scalar tied to the input."""
    from onnx import TensorProto, helper

    nodes = []
    src = image
    if not image_float:
        nodes.append(helper.make_node("Cast", [image], ["image_f"], to=TensorProto.FLOAT))
        src = "image_f"
    nodes += [helper.make_node("ReduceMean", [src], ["mean"], keepdims=0),
              helper.make_node("Mul", ["mean", "zero_c"], ["zero"])]
    return nodes


def _const_outputs(image: str, image_float: bool, consts: dict[str, np.ndarray]) -> tuple:
    """Each float const becomes an output ``name`` = const + zero."""
    from onnx import helper, numpy_helper

    nodes = _through_input(image, image_float)
    inits = [numpy_helper.from_array(np.array(0.0, np.float32), "zero_c")]
    for name, value in consts.items():
        inits.append(numpy_helper.from_array(value.astype(np.float32), f"{name}_c"))
        nodes.append(helper.make_node("Add", [f"{name}_c", "zero"], [name]))
    return nodes, inits


def _want(cls: int, score: float, box: tuple[float, ...], size: int) -> tuple[float, ...]:
    x1, y1, x2, y2 = box
    return (cls, score, y1 / size, x1 / size, y2 / size, x2 / size)


def _image(name: str, shape: tuple[int, ...], elem: int) -> object:
    from onnx import helper

    return helper.make_tensor_value_info(name, elem, list(shape))


def yologeneric(classes: int = 80) -> Graph:
    """YOLOv9 export: ``images [1,3,320,320]`` float -> ``output0 [1, 4+C, 2100]``."""
    from onnx import TensorProto, helper

    n = 2100
    out = np.zeros((1, 4 + classes, n), np.float32)
    x1, y1, x2, y2 = BOX
    out[0, :4, 777] = ((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1)
    out[0, 4 + 2, 777] = SCORE  # class 2 (car)
    nodes, inits = _const_outputs("images", True, {"output0": out})
    data = _model([_image("images", (1, 3, SIZE, SIZE), TensorProto.FLOAT)],
                  [helper.make_tensor_value_info("output0", TensorProto.FLOAT, list(out.shape))],
                  nodes, inits)
    return Graph("yolo-generic", data, (1, 3, SIZE, SIZE), "float32", _want(2, SCORE, BOX, SIZE))


def yologeneric_rows(classes: int = 80) -> Graph:
    """The same answer as ``yologeneric`` with one row per candidate, ``[1, 2100, 4+C]``."""
    from onnx import TensorProto, helper

    g = yologeneric(classes)
    out = np.zeros((1, 2100, 4 + classes), np.float32)
    x1, y1, x2, y2 = BOX
    out[0, 777, :4] = ((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1)
    out[0, 777, 4 + 2] = SCORE
    nodes, inits = _const_outputs("images", True, {"output0": out})
    data = _model([_image("images", (1, 3, SIZE, SIZE), TensorProto.FLOAT)],
                  [helper.make_tensor_value_info("output0", TensorProto.FLOAT, list(out.shape))],
                  nodes, inits)
    return Graph("yolo-generic", data, g.shape, g.dtype, g.want)


def yolo_anchors(classes: int = 80) -> Graph:
    """YOLOv7 export: three heads ``[1, 3*(5+C), ny, nx]`` at strides 8, 16, 32."""
    from onnx import TensorProto, helper

    c = 5 + classes
    heads = {f"head{s}": np.zeros((1, 3 * c, SIZE // s, SIZE // s), np.float32)
             for s in (8, 16, 32)}
    h = heads["head8"].reshape(3, c, SIZE // 8, SIZE // 8)
    # anchor 0 (12x16) at cell x=10, y=20: centre (80, 160), size (2*1)^2 * anchor = 48x64
    h[0, :4, 20, 10] = (0.25, 0.25, 1.0, 1.0)
    h[0, 4, 20, 10] = 0.95
    h[0, 5 + 7, 20, 10] = 0.95  # class 7 (truck)
    nodes, inits = _const_outputs("images", True, heads)
    outputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape))
               for k, v in heads.items()]
    data = _model([_image("images", (1, 3, SIZE, SIZE), TensorProto.FLOAT)], outputs, nodes,
                  inits)
    return Graph("yolo-generic", data, (1, 3, SIZE, SIZE), "float32",
                 _want(7, 0.95 * 0.95, (56.0, 128.0, 104.0, 192.0), SIZE))


def yolonas() -> Graph:
    """super-gradients flat export: uint8 ``input [1,3,320,320]`` -> ``[N, 7]``."""
    from onnx import TensorProto, helper

    rows = np.array([[0, *BOX, SCORE, 0]], np.float32)  # class 0 (person)
    nodes, inits = _const_outputs("input", False, {"graph2_flat_predictions": rows})
    data = _model([_image("input", (1, 3, SIZE, SIZE), TensorProto.UINT8)],
                  [helper.make_tensor_value_info("graph2_flat_predictions", TensorProto.FLOAT,
                                                 ["num_predictions", 7])], nodes, inits)
    return Graph("yolonas", data, (1, 3, SIZE, SIZE), "uint8", _want(0, SCORE, BOX, SIZE))


def yolox(classes: int = 80) -> Graph:
    """YOLOX export: ``images [1,3,416,416]`` float 0..255 -> ``output [1, 3549, 5+C]``."""
    from onnx import TensorProto, helper

    size = 416
    out = np.zeros((1, 3549, 5 + classes), np.float32)
    row = 7 * (size // 8) + 5  # stride 8, cell x=5, y=7
    out[0, row, :5] = (0.5, 0.5, np.log(10.0), np.log(12.0), SCORE)
    out[0, row, 5 + 15] = 1.0  # class 15 (cat)
    nodes, inits = _const_outputs("images", True, {"output": out})
    data = _model([_image("images", (1, 3, size, size), TensorProto.FLOAT)],
                  [helper.make_tensor_value_info("output", TensorProto.FLOAT, list(out.shape))],
                  nodes, inits)
    # centre ((0.5+5)*8, (0.5+7)*8) = (44, 60), size (10*8, 12*8) = (80, 96)
    return Graph("yolox", data, (1, 3, size, size), "float32",
                 _want(15, SCORE, (4.0, 12.0, 84.0, 108.0), size))


def dfine() -> Graph:
    """D-FINE export: ``images`` + ``orig_target_sizes`` int64 ``[1,2]`` -> ``labels``,
    ``boxes`` (pixels of orig_target_sizes), ``scores``."""
    from onnx import TensorProto, helper, numpy_helper

    q = 300
    boxes = np.zeros((1, q, 4), np.float32)
    boxes[0, 5] = np.array(BOX) / SIZE  # normalised, scaled by the size input in the graph
    scores = np.zeros((1, q), np.float32)
    scores[0, 5] = SCORE
    labels = np.zeros((1, q), np.int64)
    labels[0, 5] = 16  # class 16 (dog)
    nodes, inits = _const_outputs("images", True, {"boxes_n": boxes, "scores": scores})
    nodes += [
        helper.make_node("Cast", ["orig_target_sizes"], ["sizes_f"], to=TensorProto.FLOAT),
        helper.make_node("Tile", ["sizes_f", "reps"], ["sizes4"]),  # [1, 4]: h, w, h, w
        helper.make_node("Unsqueeze", ["sizes4", "axis1"], ["sizes4u"]),
        helper.make_node("Mul", ["boxes_n", "sizes4u"], ["boxes"]),
        helper.make_node("Identity", ["labels_c"], ["labels"]),
    ]
    inits += [numpy_helper.from_array(np.array([1, 2], np.int64), "reps"),
              numpy_helper.from_array(np.array([1], np.int64), "axis1"),
              numpy_helper.from_array(labels, "labels_c")]
    data = _model([_image("images", (1, 3, SIZE, SIZE), TensorProto.FLOAT),
                   helper.make_tensor_value_info("orig_target_sizes", TensorProto.INT64, [1, 2])],
                  [helper.make_tensor_value_info("labels", TensorProto.INT64, [1, q]),
                   helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, q, 4]),
                   helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, q])],
                  nodes, inits)
    return Graph("dfine", data, (1, 3, SIZE, SIZE), "float32", _want(16, SCORE, BOX, SIZE))


def rfdetr() -> Graph:
    """RF-DETR export: ``input`` -> ``dets [1,300,4]`` (normalised cx, cy, w, h) and
    ``labels [1,300,91]`` logits; column 1 is COCO's person, Frigate's class 0."""
    from onnx import TensorProto, helper

    q = 300
    dets = np.zeros((1, q, 4), np.float32)
    x1, y1, x2, y2 = BOX
    dets[0, 9] = np.array(((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1)) / SIZE
    logits = np.full((1, q, 91), -10.0, np.float32)
    logits[0, 9, 1] = 3.0
    nodes, inits = _const_outputs("input", True, {"dets": dets, "labels": logits})
    data = _model([_image("input", (1, 3, SIZE, SIZE), TensorProto.FLOAT)],
                  [helper.make_tensor_value_info("dets", TensorProto.FLOAT, [1, q, 4]),
                   helper.make_tensor_value_info("labels", TensorProto.FLOAT, [1, q, 91])],
                  nodes, inits)
    return Graph("rfdetr", data, (1, 3, SIZE, SIZE), "float32",
                 _want(0, float(1 / (1 + np.exp(-3.0))), BOX, SIZE))


def ssd_openvino() -> Graph:
    """An SSD as OpenVINO's model zoo exports it (Frigate's SSDLite for its OpenVINO
    detector): uint8 ``image_tensor [1,300,300,3]`` -> one ``DetectionOutput``
    ``[1, 1, 100, 7]``: image_id, label (TF COCO ids, 1 = person), conf, x_min, y_min,
    x_max, y_max normalised; a background row, then the -1 row that ends the list."""
    from onnx import TensorProto, helper

    size = 300
    out = np.zeros((1, 1, 100, 7), np.float32)
    x1, y1, x2, y2 = (np.array(BOX) * size / SIZE).tolist()
    out[0, 0, 0] = (0, 0, 0.95, 0.0, 0.0, 0.5, 0.5)  # label 0: background, never a detection
    out[0, 0, 1] = (0, 1, SCORE, x1 / size, y1 / size, x2 / size, y2 / size)
    out[0, 0, 2] = (-1, 0, 0, 0, 0, 0, 0)
    out[0, 0, 3] = (0, 3, 0.99, 0.1, 0.1, 0.2, 0.2)  # after the end: padding, never read
    nodes, inits = _const_outputs("image_tensor", False, {"detection_out": out})
    data = _model([_image("image_tensor", (1, size, size, 3), TensorProto.UINT8)],
                  [helper.make_tensor_value_info("detection_out", TensorProto.FLOAT,
                                                 list(out.shape))], nodes, inits)
    return Graph("ssd", data, (1, size, size, 3), "uint8", _want(0, SCORE, (x1, y1, x2, y2),
                                                                   size))


ALL = {"yologeneric": yologeneric, "yologeneric-rows": yologeneric_rows,
       "yolo-anchors": yolo_anchors, "yolonas": yolonas,
       "yolox": yolox, "dfine": dfine, "rfdetr": rfdetr, "ssd-openvino": ssd_openvino}
