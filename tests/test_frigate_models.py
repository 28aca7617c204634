"""A model file Frigate sends, in process: which ``model_type`` its graph fits, what is
refused and why (edged/protocols/frigate/model_check.py), the new decoders against the
formulas of Frigate's own decoders, and the content-addressed store
(edged/protocols/frigate/store.py over edged/delivery/store.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from support import frigate_graphs as fg
from support.paths import ROOT

from edged.config.layouts import normalize_type
from edged.delivery.store import VersionStore
from edged.detect.decoders.rfdetr import decode_rfdetr
from edged.detect.decoders.support import DecodeParams
from edged.detect.decoders.yolo_anchors import ANCHORS, STRIDES, decode_yolo_anchors
from edged.protocols.frigate.model_check import ModelRefused, check_model
from edged.protocols.frigate.store import FrigateModels, StoredModel, check_name

onnx = pytest.importorskip("onnx")


@pytest.mark.parametrize("key,model_type,decoder,pinned", [
    ("yologeneric", "yologeneric", "yolov8", "yolov8"),
    # [1, N, K] is YOLOX's head or a row-wise yolo-generic export: Frigate's header decides
    ("yologeneric-rows", "yolox", "yolox", "yolov8"),
    ("yolo-anchors", "yologeneric", "yolo-anchors", "yolo-anchors"),
    ("yolonas", "yolonas", "yolonas", "yolonas"), ("yolox", "yolox", "yolox", "yolox"),
    ("dfine", "dfine", "dfine", "dfine"), ("rfdetr", "rfdetr", "rfdetr", "rfdetr"),
    # OpenVINO's DetectionOutput [1, 1, N, 7]: Frigate's ssd; the decoder reads it by shape
    ("ssd-openvino", "ssd", "ssd", "ssd"),
])
def test_each_graph_is_told_its_type_and_pinning_it_agrees(key: str, model_type: str,
                                                           decoder: str, pinned: str) -> None:
    g = fg.ALL[key]()
    c = check_model(g.data)
    assert (c.model_type, c.decoder) == (model_type, decoder)
    assert normalize_type(g.model_type) in c.fits
    assert check_model(g.data, normalize_type(g.model_type)).decoder == pinned


def test_dfine_and_yolonas_are_adapted_to_one_input_and_a_batch_axis() -> None:
    import onnxruntime as ort

    d = check_model(fg.dfine().data)
    s = ort.InferenceSession(d.adapted, providers=["CPUExecutionProvider"])
    assert [i.name for i in s.get_inputs()] == ["images"]
    labels, boxes, _ = s.run(None, {"images": np.zeros((1, 3, 320, 320), np.float32)})
    assert np.allclose(boxes[0, 5], fg.BOX) and labels[0, 5] == 16  # sizes fed as [[320, 320]]
    n = check_model(fg.yolonas().data)
    s = ort.InferenceSession(n.adapted, providers=["CPUExecutionProvider"])
    (out,) = s.run(None, {"input": np.zeros((1, 3, 320, 320), np.uint8)})
    assert out.shape == (1, 1, 7)
    r = check_model(fg.yologeneric_rows().data, "yologeneric")
    s = ort.InferenceSession(r.adapted, providers=["CPUExecutionProvider"])
    (out,) = s.run(None, {"images": np.zeros((1, 3, 320, 320), np.float32)})
    assert out.shape == (1, 84, 2100) and out[0, 4 + 2, 777] == fg.SCORE


def test_shipped_models_are_told_their_types() -> None:
    person = check_model((ROOT / "models/person/ssdlite-fp32.onnx").read_bytes())
    assert (person.model_type, person.layout, person.width) == ("ssd", "NHWC", 300)
    digits = check_model((ROOT / "models/digits-det/det-fp32.onnx").read_bytes())
    assert (digits.model_type, digits.decoder, digits.width) == ("yologeneric", "yolov8", 160)


def _external_data_model(tmp: Path) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((1, 3, 8, 8), np.float32), "w")
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, tmp / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.data", size_threshold=0)
    return (tmp / "m.onnx").read_bytes()


def test_refusals_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ModelRefused, match="external data"):
        check_model(_external_data_model(tmp_path))
    with pytest.raises(ModelRefused, match="not an ONNX model"):
        check_model(b"\x00" * 100)
    with pytest.raises(ModelRefused, match="not an ONNX model"):
        check_model(fg.rfdetr().data[:3000])
    broken = onnx.load_from_string(fg.yolox().data)
    broken.graph.node[0].input[0] = "nowhere"
    with pytest.raises(ModelRefused, match=r"onnx\.checker"):
        check_model(broken.SerializeToString())
    with pytest.raises(ModelRefused, match="does not fit model_type 'yolox'"):
        check_model(fg.yologeneric().data, "yolox")
    with pytest.raises(ModelRefused, match="orig_target_sizes"):
        check_model(fg.yolox().data, "dfine")
    with pytest.raises(ModelRefused, match="D-FINE"):
        check_model(fg.dfine().data, "yologeneric")
    with pytest.raises(ModelRefused, match="fits none of Frigate's model types"):
        check_model(_not_a_detector())


def _not_a_detector() -> bytes:
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _frigate_multipart(heads: list[np.ndarray], conf: float) -> list[tuple]:
    """Frigate's own loop (frigate/util/model.py in Frigate's source)."""
    found = []
    for i, out in enumerate(heads):
        c = out.shape[0] // 3
        ny, nx = out.shape[1:]
        x = out.reshape(3, c, ny, nx).transpose(0, 2, 3, 1)
        for a, (aw, ah) in enumerate(ANCHORS[i]):
            for y in range(ny):
                for xx in range(nx):
                    p = x[a, y, xx]
                    k = int(np.argmax(p[5:]))
                    score = p[5 + k] * p[4]
                    if score <= conf:
                        continue
                    bx = (p[0] * 2 - 0.5 + xx) * STRIDES[i]
                    by = (p[1] * 2 - 0.5 + y) * STRIDES[i]
                    bw, bh = (p[2] * 2) ** 2 * aw, (p[3] * 2) ** 2 * ah
                    found.append((k, score, bx - bw / 2, by - bh / 2, bx + bw / 2, by + bh / 2))
    return sorted(found, key=lambda r: -r[1])


def test_anchor_decode_matches_frigates_loop() -> None:
    rng = np.random.default_rng(3)
    heads = [rng.random((3 * 9, 64 // s, 64 // s), dtype=np.float32) for s in STRIDES]
    got = decode_yolo_anchors(heads, 0.6, DecodeParams(64, 64))
    want = _frigate_multipart(heads, 0.6)
    assert len(want) > 5 and len(got.scores) == len(want)
    order = np.argsort(-got.scores, kind="stable")
    for i, row in zip(order, want, strict=True):
        assert got.classes[i] == row[0] and np.isclose(got.scores[i], row[1])
        assert np.allclose(got.boxes[i], row[2:], atol=1e-4)


def test_rfdetr_scores_are_sigmoids_without_column_zero() -> None:
    dets = np.array([[0.5, 0.5, 0.2, 0.4], [0.1, 0.1, 0.1, 0.1]], np.float32)
    logits = np.full((2, 91), -9.0, np.float32)
    logits[0, 0] = 8.0  # column 0 (COCO's unused id) never wins
    logits[0, 3] = 1.0  # COCO id 3 (car) -> Frigate's 91-class id 2
    c = decode_rfdetr([dets, logits], 0.5, DecodeParams(100, 200))
    assert c.classes.tolist() == [2] and np.isclose(c.scores[0], 1 / (1 + np.exp(-1.0)))
    assert np.allclose(c.boxes[0], [40, 60, 60, 140])


def test_store_is_content_addressed_atomic_and_survives_a_damaged_index(tmp_path: Path
                                                                        ) -> None:
    root = tmp_path / "state" / "store"
    s = FrigateModels(VersionStore(root), "frigate@ipc://a")

    def put(name: str, data: bytes, model_type: str) -> StoredModel:
        return s.put(name, data, hashlib.sha256(data).hexdigest(), model_type)

    a = put("a.onnx", b"model one", "ssd")
    b = s.rename(s.by_digest(a.sha256), "b.onnx")  # same bytes: one file, the new name
    assert a.path == b.path and a.sha256 == hashlib.sha256(b"model one").hexdigest()
    assert len(list((root / "versions").iterdir())) == 1
    put("a.onnx", b"model two", "yolox")  # a changed file under the same name
    got = s.get("a.onnx")
    assert got is not None and got.model_type == "yolox" and got.path.read_bytes() == b"model two"
    s.served(got)
    assert s.last_served() == got
    assert FrigateModels(VersionStore(root), "frigate@ipc://a").last_served() == got
    got.path.write_bytes(b"tampered")
    assert not s.verify(got)
    (root / "index.json").write_text("{not json")
    s = FrigateModels(VersionStore(root), "frigate@ipc://a")  # a restart reads it
    assert s.get("b.onnx") is None  # an unreadable index costs a transfer, nothing else
    assert not list((root / "versions").iterdir())  # the folders it named are orphans now
    put("c.onnx", b"three", "ssd")
    index = json.loads((root / "index.json").read_text())
    assert [v["name"] for v in index["models"]["frigate@ipc://a"]["versions"]] == ["c.onnx"]
    assert not list(root.rglob("*.tmp"))


def test_a_model_stored_before_the_one_store_is_adopted_with_its_rungs(tmp_path: Path
                                                                      ) -> None:
    data = fg.yolox().data
    sha = hashlib.sha256(data).hexdigest()
    old = tmp_path / "frigate"
    (old / "models").mkdir(parents=True)
    (old / "models" / f"{sha}.onnx").write_bytes(data)
    (old / "models" / f"{sha}.int8.onnx").write_bytes(b"rung")
    (old / "index.json").write_text(json.dumps({
        "names": {"yolox.onnx": {"sha256": sha, "model_type": "yolox"}},
        "endpoints": {"ipc://f.sock": "yolox.onnx"}}))
    s = FrigateModels(VersionStore(tmp_path / "store"), "frigate@ipc://f.sock")
    got = s.adopt_legacy(tmp_path, "ipc://f.sock")
    assert got is not None and got.model_type == "yolox" and s.last_served() == got
    assert (got.path.parent / f"{sha}.int8.onnx").read_bytes() == b"rung"
    assert not list((old / "models").iterdir())  # moved, not copied
    assert s.adopt_legacy(tmp_path, "ipc://other.sock") is None


@pytest.mark.parametrize("name,ok", [("yolov9-t-320.onnx", True), ("plus_abc123", True),
                                     ("../x.onnx", False), ("a/b.onnx", False), ("", False),
                                     (".hidden", False), (5, False), ("x" * 201, False)])
def test_model_names_are_file_names(name: object, ok: bool) -> None:
    assert (check_name(name) is None) == ok


def test_config_keys_of_sent_models_are_checked(tmp_path: Path) -> None:
    from edged.config.file import parse_config
    from edged.errors import ConfigError

    (tmp_path / "afile").write_text("x")
    model = {"name": "m", "variants": [{"name": "v", "backend": "onnxruntime",
                                        "path": str(ROOT / "models/digits/cnn-fp32.onnx")}]}
    ok = parse_config({"server": {"state_dir": str(tmp_path / "st"), "frigate": [
        {"endpoint": "ipc://f.sock", "accept_models": True, "model_type": "yolo-generic"}]},
        "models": [model]}, tmp_path / "c.toml")
    f = ok.server.frigate[0]
    assert f.model == "frigate@ipc://f.sock" and f.model_type == "yologeneric"
    assert f.max_model_bytes == 256 << 20 and f.int8_rung and ok.server.state_dir == (
        tmp_path / "st")
    bad = {"server": {"state_dir": str(tmp_path / "afile"), "frigate": [
        {"endpoint": "ipc://a.sock", "accept_models": True, "model": "m"},
        {"endpoint": "ipc://b.sock"},
        {"endpoint": "ipc://c.sock", "model": "m", "model_type": "yolox"},
        {"endpoint": "ipc://d.sock", "accept_models": True, "model_type": "yolov99",
         "int8_frames": 2, "max_model_bytes": 0}]}, "models": [model]}
    with pytest.raises(ConfigError) as e:
        parse_config(bad, tmp_path / "c.toml")
    text = str(e.value)
    for want in ("server.state_dir: ", "is not a directory",
                 "server.frigate[0].model: give either model", "server.frigate[1].model: missing",
                 "server.frigate[2].model_type: applies with accept_models = true only",
                 "server.frigate[3].model_type: must be one of Frigate's model types",
                 "server.frigate[3].int8_frames: must be 4..1024",
                 "server.frigate[3].max_model_bytes"):
        assert want in text, (want, text)
