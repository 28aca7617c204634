"""The OpenVINO backend against real OpenVINO on the shipped models, in process and
inside the daemon: agreement with ONNX Runtime, batching, errors, its cache, that it
sends no telemetry, and that a daemon not configured for it never imports it.

Skipped as a whole when OpenVINO is not installed (``pip install 'edged[openvino]'``),
except the tests that need no OpenVINO (the missing-runtime error, the footprint).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.configs import config, digits_config, model_table, variant
from support.ort import ort_session
from support.paths import MODELS, ROOT

from edged.backends import openvino as ovb
from edged.backends.base import run_batch
from edged.config.runtimes import OpenVinoOptions
from edged.config.schema import Table
from edged.errors import ArtifactError, InvalidArgument

HAVE_OV = importlib.util.find_spec("openvino") is not None
needs_ov = pytest.mark.skipif(not HAVE_OV, reason="OpenVINO is not installed "
                              "(pip install 'edged[openvino]')")
PERSON = ROOT / "models" / "person"
DET = ROOT / "models" / "digits-det"
VAL = np.load(MODELS / "validation.npz")
X = (VAL["x"][:64].astype(np.float32) / 255.0)[:, None]
Y = VAL["y"][:64]


def open_ov(path: Path, tmp: Path, max_batch: int = 8, **kw: Any) -> ovb.OpenVinoBackend:
    kw.setdefault("cache_dir", tmp / "ov-cache")
    return ovb.open_backend(path, OpenVinoOptions(**kw), max_batch)


def ort_outputs(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    s = ort_session(path)
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds), strict=True))


def parse(table: dict[str, Any]) -> tuple[OpenVinoOptions, list[str]]:
    problems: list[str] = []
    opts = OpenVinoOptions.from_table(Table(table, "models[0].variants[0].options", "edged.toml",
                                        problems))
    return opts, problems


# -- options (no OpenVINO needed) -------------------------------------------------------

def test_options_defaults_and_problems() -> None:
    opts, problems = parse({})
    assert problems == [] and opts.device == "CPU" and opts.precision == "f32"
    assert opts.performance_hint == "auto" and opts.cache
    _, problems = parse({"device": "cpu", "precision": "int4", "performance_hint": "fast",
                         "threads": -1, "colour": 1})
    text = "\n".join(problems)
    for word in ("device", "precision", "performance_hint", "threads", "colour"):
        assert word in text, text


def test_cache_folder_is_keyed_by_device_and_version(tmp_path: Path) -> None:
    a = ovb.cache_folder(tmp_path, "CPU", "2026.4.1-22982-e213a147257-releases/2026/4")
    b = ovb.cache_folder(tmp_path, "GPU.1", "2026.4.1-22982")
    c = ovb.cache_folder(tmp_path, "CPU", "2027.0.0-1")
    assert a.parent == tmp_path and len({a, b, c}) == 3
    assert a.name == "CPU-2026.4.1-22982" and "/" not in b.name


def test_missing_runtime_is_a_clear_error_naming_the_extra() -> None:
    code = ("import sys; sys.modules['openvino'] = None\n"
            "from edged.backends.openvino import import_openvino\n"
            "try:\n    import_openvino()\nexcept Exception as e:\n"
            "    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=60, check=True).stdout
    assert out.startswith("ArtifactError") and "pip install 'edged[openvino]'" in out, out


# -- telemetry ---------------------------------------------------------------------------

@needs_ov
def test_no_telemetry_and_no_child_process(tmp_path: Path) -> None:
    """A fresh interpreter with CI unset (where OpenVINO's telemetry is on by default):
    importing and running through the backend forks nothing, loads no telemetry module
    and writes nothing under $HOME/intel."""
    code = f"""
import json, os, sys
forks = []
os.register_at_fork(before=lambda: forks.append(1))
from pathlib import Path
import numpy as np
from edged.backends import openvino as ovb
from edged.config.runtimes import OpenVinoOptions
b = ovb.open_backend(Path({str(MODELS / 'cnn-fp32.onnx')!r}),
                     OpenVinoOptions(cache_dir=Path({str(tmp_path / 'cache')!r})), 8)
b.run({{"input": np.zeros((3, 1, 28, 28), np.float32)}})
import time; time.sleep(1.0)  # the telemetry's worker thread would have forked by now
import psutil
print(json.dumps({{"forks": len(forks),
                   "children": len(psutil.Process().children(recursive=True)),
                   "telemetry": sorted(m for m in sys.modules if "telemetry" in m),
                   "ovc": sys.modules.get("openvino.tools.ovc", "absent") is None}}))
"""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CI", "TF_BUILD", "JENKINS_URL", "BUILD_ID")}
    env["HOME"] = str(tmp_path / "home")
    (tmp_path / "home").mkdir()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=ROOT, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got == {"forks": 0, "children": 0, "telemetry": [], "ovc": True}, got
    assert not (tmp_path / "home" / "intel").exists()


@needs_ov
def test_a_process_that_may_not_map_code_gets_the_systemd_fix(tmp_path: Path) -> None:
    """The shipped unit's MemoryDenyWriteExecute=yes, emulated with the kernel's own
    PR_SET_MDWE (Linux 6.3+): OpenVINO's JIT cannot work, and the error says what to do
    instead of OpenVINO's "can't protect"."""
    code = f"""
import ctypes, sys
if ctypes.CDLL(None, use_errno=True).prctl(65, 1, 0, 0, 0) != 0:  # PR_SET_MDWE
    print("no-mdwe"); sys.exit(0)
from pathlib import Path
from edged.backends import openvino as ovb
from edged.config.runtimes import OpenVinoOptions
assert not ovb.can_map_code()
try:
    ovb.open_backend(Path({str(MODELS / 'cnn-fp32.onnx')!r}),
                     OpenVinoOptions(cache_dir=Path({str(tmp_path)!r})), 8)
except Exception as e:
    print(type(e).__name__, e)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120).stdout.strip()
    if out == "no-mdwe":
        pytest.skip("this kernel has no PR_SET_MDWE (Linux < 6.3)")
    assert out.startswith("ArtifactError") and "MemoryDenyWriteExecute" in out, out
    assert "systemd/openvino.conf" in out
    assert ovb.can_map_code()  # this test process may: the check is not always False
    dropin = (ROOT / "systemd" / "openvino.conf").read_text()
    directives = [ln for ln in dropin.splitlines() if ln and not ln.startswith(("#", "["))]
    assert directives == ["MemoryDenyWriteExecute=no"]


# -- agreement with ONNX Runtime ---------------------------------------------------------

@needs_ov
@pytest.mark.parametrize("name", ["cnn-fp32", "small-fp32"])
def test_fp32_digits_agree_with_ort(tmp_path: Path, name: str) -> None:
    be = open_ov(MODELS / f"{name}.onnx", tmp_path)
    assert be.info.backend == "openvino" and be.info.details["precision"] == "f32"
    got = run_batch(be, {"input": X})["logits"]
    ref = ort_outputs(MODELS / f"{name}.onnx", {"input": X})["logits"]
    assert got.shape == ref.shape == (64, 10)
    np.testing.assert_allclose(got, ref, atol=1e-4 * float(np.abs(ref).max()))
    assert (got.argmax(1) == ref.argmax(1)).all()


@needs_ov
def test_int8_digits_agree_with_ort_at_task_level(tmp_path: Path) -> None:
    """OpenVINO runs the QDQ model in int8 itself: top-1 is the check, not the bits."""
    be = open_ov(MODELS / "cnn-int8.onnx", tmp_path)
    got = run_batch(be, {"input": X})["logits"].argmax(1)
    ref = ort_outputs(MODELS / "cnn-int8.onnx", {"input": X})["logits"].argmax(1)
    assert (got == ref).mean() >= 0.95
    assert (got == Y).mean() >= 0.9


@needs_ov
def test_digit_detector_fp32_agrees_with_ort(tmp_path: Path) -> None:
    x = np.load(DET / "det-fp32.onnx.golden.npz")["in:images"][:4]
    be = open_ov(DET / "det-fp32.onnx", tmp_path)
    got = run_batch(be, {"images": x})["output0"]
    ref = ort_outputs(DET / "det-fp32.onnx", {"images": x})["output0"]
    np.testing.assert_allclose(got, ref, atol=1e-4 * float(np.abs(ref).max()))


def _photos(*names: str) -> np.ndarray:
    """The person test's photos (astronaut, grace_hopper by default), preprocessed."""
    from support.person import TRUE_BOX, photo, preprocessor

    pre = preprocessor()
    return np.concatenate([pre.from_frame(photo(n)[0]) for n in names or sorted(TRUE_BOX)])


@needs_ov
def test_person_detector_nms_loop_runs_and_agrees_with_ort(tmp_path: Path) -> None:
    """The TF-converted graph's NMS loop: OpenVINO reads it and gives ORT's detections
    (batch of two photos, one infer request per stream)."""
    x = _photos()
    be = open_ov(PERSON / "ssdlite-fp32.onnx", tmp_path, max_batch=4)
    got = run_batch(be, {"image_tensor:0": x})
    ref = ort_outputs(PERSON / "ssdlite-fp32.onnx", {"image_tensor:0": x})
    np.testing.assert_array_equal(got["num_detections:0"], ref["num_detections:0"])
    for i in range(len(x)):
        confident = ref["detection_scores:0"][i] >= 0.05  # below: near-ties may reorder
        assert confident.any()
        for k in ("detection_scores:0", "detection_boxes:0", "detection_classes:0"):
            np.testing.assert_allclose(got[k][i][confident], ref[k][i][confident], atol=1e-4)


@needs_ov
def test_person_detector_int8_finds_grace_hopper(tmp_path: Path) -> None:
    """OV int8 differs from ORT int8 more than ORT int8 from fp32 (its own int8
    kernels): checked at task level. Note: on the astronaut photo OpenVINO's int8
    scores the person 0.13 where ORT's int8 gives 0.90, so this rung must be validated
    by mAP (edged compile does) and is not assumed equal to ORT's int8."""
    from support.person import iou

    x = _photos("grace_hopper")
    be = open_ov(PERSON / "ssdlite-int8.onnx", tmp_path, max_batch=1)
    got = be.run({"image_tensor:0": x})
    ref = ort_outputs(PERSON / "ssdlite-fp32.onnx", {"image_tensor:0": x})
    assert got["detection_scores:0"][0, 0] > 0.9
    assert iou(tuple(got["detection_boxes:0"][0, 0]),
               tuple(ref["detection_boxes:0"][0, 0])) > 0.95


# -- batching ----------------------------------------------------------------------------

@needs_ov
def test_throughput_splits_a_batch_over_streams_and_latency_does_not(tmp_path: Path) -> None:
    ref = ort_outputs(MODELS / "cnn-fp32.onnx", {"input": X[:7]})["logits"]
    tp = open_ov(MODELS / "cnn-fp32.onnx", tmp_path, max_batch=8, streams=2)
    lat = open_ov(MODELS / "cnn-fp32.onnx", tmp_path, max_batch=1)
    assert tp.info.details["hint"] == "THROUGHPUT" and tp.info.details["requests"] == 2
    assert lat.info.details["hint"] == "LATENCY" and lat.info.details["requests"] == 1
    for be in (tp, lat):
        assert be.batch_sizes is None  # dynamic batch: any size, no padding
        for n in (1, 2, 7):
            got = run_batch(be, {"input": X[:n]})["logits"]
            np.testing.assert_allclose(got, ref[:n], atol=1e-4 * float(np.abs(ref).max()))


@needs_ov
@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_waiting_rows_batch_in_multiples_of_the_streams(make_daemon: Any, tmp_path: Path,
                                                        backend: str) -> None:
    """Three rows wait while a batch computes. ORT (one batch over every core) takes all
    three; OpenVINO with 2 streams takes two (1 + 1 in parallel) and the third next,
    instead of 2 + 1 with a stream idle for half the batch."""
    from support.daemons import received
    from support.slow_model import make_slow_model
    from support.waits import wait_computing

    from edged.client import build_infer

    slow = make_slow_model(tmp_path / "slow.onnx", 20_000)
    opts = {"streams": 2, "threads": 2, "cache_dir": tmp_path / "ov-cache"}
    table = model_table("slow", [variant("loop", slow, backend=backend,
                                         options=opts if backend == "openvino" else None)],
                        max_batch_size=4)
    d = make_daemon(digits_config(tmp_path, extra_models=table), metrics=True)
    x, busy = np.zeros((1, 64), np.float32), np.full((1, 64), 150_000, np.float32)
    with d.client(timeout_s=60) as c:
        for i in range(2):
            assert c.call(*build_infer("slow", x, id=f"warm{i}")).ok
        before = received(d)
        c.send(*build_infer("slow", busy, id="A"))
        wait_computing(d, "slow", since=before)
        for rid in "BCD":
            c.send(*build_infer("slow", x, id=rid))
        got = {r.header["id"]: r.header for r in (c.recv(60) for _ in range(4))}
    assert all(h["status"] == "OK" for h in got.values()), got
    assert got["A"]["timing"]["batch"] == 1
    batches = sorted(got[rid]["timing"]["batch"] for rid in "BCD")
    assert batches == ([3, 3, 3] if backend == "onnxruntime" else [1, 2, 2]), got
    slow_entry = next(m for m in d.ctl({"op": "models"})["models"] if m["name"] == "slow")
    assert slow_entry["batch_multiple"] == (1 if backend == "onnxruntime" else 2), slow_entry


@needs_ov
def test_static_batch_ir_is_padded_and_split_by_run_batch(tmp_path: Path) -> None:
    """An IR reshaped to batch 4 declares batch_sizes (4,): run_batch pads 3 rows up and
    splits 6 into 4 + 2 (padded), and the rows come back as ONNX Runtime's."""
    ov = ovb.import_openvino()
    m = ov.Core().read_model(str(MODELS / "cnn-fp32.onnx"))
    m.reshape([4, 1, 28, 28])
    xml = tmp_path / "cnn-b4.xml"
    ov.save_model(m, str(xml), compress_to_fp16=False)
    be = open_ov(xml, tmp_path)
    assert be.batch_sizes == (4,) and be.inputs[0].shape == (4, 1, 28, 28)
    ref = ort_outputs(MODELS / "cnn-fp32.onnx", {"input": X[:6]})["logits"]
    for n in (3, 4, 6):
        got = run_batch(be, {"input": X[:n]})["logits"]
        assert got.shape == (n, 10)
        np.testing.assert_allclose(got, ref[:n], atol=1e-4 * float(np.abs(ref).max()))


@needs_ov
def test_inputs_are_not_modified_and_outputs_are_owned(tmp_path: Path) -> None:
    """Zero-copy inputs must stay read-only to OpenVINO, and an output must not change
    when the request runs again (it is copied out of the request's memory)."""
    be = open_ov(MODELS / "cnn-fp32.onnx", tmp_path, max_batch=1)
    x = X[:1].copy()
    first = be.run({"input": x})["logits"]
    # The request read the caller's array in place (no copy on the way in).
    assert np.shares_memory(be._requests[0].get_input_tensor(0).data, x)
    kept = first.copy()
    be.run({"input": X[1:2].copy()})
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_array_equal(x, X[:1])


# -- errors ------------------------------------------------------------------------------

@needs_ov
def test_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="ONNX model not found"):
        open_ov(tmp_path / "nope.onnx", tmp_path)
    (tmp_path / "m.xml").write_text("<net/>")
    with pytest.raises(ArtifactError, match=r"\.bin beside the \.xml"):
        open_ov(tmp_path / "m.xml", tmp_path)
    (tmp_path / "bad.onnx").write_bytes(b"not a model at all")
    with pytest.raises(ArtifactError, match=r"OpenVINO cannot compile .*bad\.onnx"):
        open_ov(tmp_path / "bad.onnx", tmp_path)
    core_devices = ovb.import_openvino().Core().available_devices
    if "NPU" not in core_devices:
        with pytest.raises(ArtifactError, match=r"'NPU' is not available.*available: CPU"):
            open_ov(MODELS / "cnn-fp32.onnx", tmp_path, device="NPU")
    with pytest.raises(ArtifactError, match="'QPU' is not available"):
        open_ov(MODELS / "cnn-fp32.onnx", tmp_path, device="QPU")


@needs_ov
def test_wrong_inputs_are_refused_before_openvino_sees_them(tmp_path: Path) -> None:
    """OpenVINO itself returns an empty output for a wrong shape and casts any dtype."""
    be = open_ov(MODELS / "cnn-fp32.onnx", tmp_path)
    bad = {
        "shape": ({"input": np.zeros((2, 1, 27, 28), np.float32)}, r"float32 \[2, 1, 27, 28\]"),
        "rank": ({"input": np.zeros((2, 28, 28), np.float32)}, "takes float32"),
        "dtype": ({"input": np.zeros((2, 1, 28, 28), np.float64)}, "is float64"),
        "name": ({"image": np.zeros((2, 1, 28, 28), np.float32)}, "missing input; unknown image"),
        "empty": ({"input": np.zeros((0, 1, 28, 28), np.float32)}, "empty batch"),
        "order": ({"input": np.zeros((2, 1, 28, 28), np.float32, order="F")}, "C-contiguous"),
    }
    for what, (feeds, msg) in bad.items():
        with pytest.raises(InvalidArgument, match=msg):
            be.run(feeds)
        assert what  # each case raised
    assert be.run({"input": X[:2]})["logits"].shape == (2, 10)  # still fine afterwards


# -- the compiled-blob cache ---------------------------------------------------------------

@needs_ov
def test_second_load_comes_from_the_cache(tmp_path: Path) -> None:
    first = open_ov(MODELS / "cnn-fp32.onnx", tmp_path)
    again = open_ov(MODELS / "cnn-fp32.onnx", tmp_path)
    folder = Path(first.info.details["cache_dir"])
    assert folder.parent == tmp_path / "ov-cache" and folder.name.startswith("CPU-")
    assert not first.info.details["loaded_from_cache"]
    assert again.info.details["loaded_from_cache"] and any(folder.iterdir())
    np.testing.assert_array_equal(again.run({"input": X[:3]})["logits"],
                                  first.run({"input": X[:3]})["logits"])
    off = open_ov(MODELS / "cnn-fp32.onnx", tmp_path, cache=False)
    assert off.info.details["cache_dir"] is None


@needs_ov
def test_unwritable_cache_only_costs_time(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    be = open_ov(MODELS / "cnn-fp32.onnx", tmp_path, cache_dir=blocker / "cache")
    assert be.info.details["cache_dir"] is None
    assert be.run({"input": X[:1]})["logits"].shape == (1, 10)


# -- in the daemon ---------------------------------------------------------------------------

def ov_config(tmp: Path, governor: str = "") -> Path:
    """digits served by OpenVINO fp32 > ORT int8 > OpenVINO small: a mixed ladder."""
    ov = {"threads": 1, "cache_dir": tmp / "ov-cache"}
    ladder = [variant("ov-cnn-fp32", MODELS / "cnn-fp32.onnx", backend="openvino", options=ov),
              variant("ort-cnn-int8", MODELS / "cnn-int8.onnx"),
              variant("ov-small-fp32", MODELS / "small-fp32.onnx", backend="openvino",
                      options=ov)]
    return digits_config(tmp, variant_tables=ladder, governor=governor)


def _maps(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


@needs_ov
def test_daemon_serves_an_openvino_variant(make_daemon: Any, tmp_path: Path) -> None:
    d = make_daemon(ov_config(tmp_path))
    st = d.ctl({"op": "status"})
    m = st["models"][0]
    assert m["active_variant"] == "ov-cnn-fp32" and m["backend"] == "openvino"
    rt = m["runtime"]
    assert rt["device"] == "CPU" and rt["threads"] == 1 and rt["precision"] == "f32"
    assert rt["hint"] == "THROUGHPUT"  # max_batch_size 8
    with d.client() as c:
        r = c.infer("digits", X[:5])
        assert r.ok and r.header["variant"] == "ov-cnn-fp32"
        ref = ort_outputs(MODELS / "cnn-fp32.onnx", {"input": X[:5]})["logits"]
        np.testing.assert_allclose(r.outputs["logits"], ref, atol=1e-3)
        bad = c.infer("digits", {"input": np.zeros((1, 1, 27, 28), np.float32)},
                      raise_on_error=False)
        assert bad.status == "INVALID_ARGUMENT"
        assert c.infer("digits", X[:1]).ok
    assert "libopenvino" in _maps(d.pid)
    from edged.cli.status_text import format_status

    text = format_status(st)
    assert "openvino" in text and "THROUGHPUT" in text and "1 threads" in text, text


@needs_ov
def test_governor_moves_between_openvino_and_ort_rungs_under_load(
        make_daemon: Any, tmp_path: Path) -> None:
    from support.governor import LEVELS, Streamers, active
    from support.sysfs import make_battery, make_thermal_zone
    from support.waits import wait_until

    root = tmp_path / "sysroot"
    make_thermal_zone(root, 0, "cpu-thermal", 45000)
    make_battery(root, 80, "Discharging")
    gov = f"""
[governor]
enabled = true
sysfs_root = "{root}"
interval_s = 0.1
dwell_s = 0.3
{LEVELS}
"""
    d = make_daemon(ov_config(tmp_path, governor=gov))
    assert active(d) == "ov-cnn-fp32"
    load = Streamers(d)
    try:
        for lvl, want in (("warm", "ort-cnn-int8"), ("hot", "ov-small-fp32"),
                          ("warm", "ort-cnn-int8"), ("auto", "ov-cnn-fp32")):
            assert d.ctl({"op": "level", "level": lvl})["status"] == "OK"
            wait_until(lambda want=want: active(d) == want, timeout=60, what=f"{lvl} -> {want}")
            time.sleep(0.3)
    finally:
        replies = load.finish()
    assert len(replies) > 50
    bad = [r for r in replies if r[1] != "OK"]
    assert not bad, bad[:5]
    served = {r[2] for r in replies}
    assert {"ov-cnn-fp32", "ort-cnn-int8", "ov-small-fp32"} <= served, served
    assert sum(r[3] for r in replies) / len(replies) > 0.9  # correct digits throughout


@needs_ov
def test_daemon_serves_the_person_detector_on_openvino(make_daemon: Any, tmp_path: Path) -> None:
    """Detections through the daemon's SSD head from OpenVINO, whose outputs have
    dynamic shapes ([-1, -1, -1] where ORT says [N, 100, 4]), match ORT's variant."""
    from support.person import TRUE_BOX, iou, photo

    model = PERSON / "ssdlite-fp32.onnx"
    ladder = [variant("ov-fp32", model, backend="openvino",
                      options={"threads": 1, "cache_dir": tmp_path / "ov-cache"}),
              variant("ort-fp32", model)]
    person = model_table(
        "person", ladder, max_batch_size=2,
        preprocess={"color": "rgb", "width": 300, "height": 300, "layout": "NHWC",
                    "dtype": "uint8"},
        postprocess={"kind": "detect", "decoder": "ssd", "resize": "stretch",
                     "label_offset": 1, "labels": ["person"], "conf": 0.5})
    cfg = config(tmp_path, models=[person], server="drain_timeout_s = 5.0", name="person.toml")
    d = make_daemon(cfg)
    frames = {n: photo(n)[0] for n in sorted(TRUE_BOX)}
    got: dict[str, dict[str, Any]] = {}
    for rung in ("ov-fp32", "ort-fp32"):
        assert d.ctl({"op": "swap", "model": "person", "variant": rung})["status"] == "OK"
        with d.client(timeout_s=60) as c:
            got[rung] = {n: c.infer("person", f) for n, f in frames.items()}
    for n in frames:
        ov, ort = got["ov-fp32"][n], got["ort-fp32"][n]
        assert ov.ok and ov.header["variant"] == "ov-fp32"
        assert len(ov.detections) == len(ort.detections) == 1, (n, ov.detections.rows)
        np.testing.assert_allclose(ov.detections.rows, ort.detections.rows, atol=1e-2)
        assert iou(tuple(ov.detections.boxes[0]), TRUE_BOX[n]) >= 0.8


# -- footprint ---------------------------------------------------------------------------------

def test_a_daemon_without_openvino_variants_never_imports_it(make_daemon: Any,
                                                             tmp_path: Path) -> None:
    """The shipped config.toml names no OpenVINO variant: the daemon maps no OpenVINO
    library (checked in /proc/PID/maps after it served a request)."""
    d = make_daemon(ROOT / "config.toml", cwd=ROOT)
    with d.client() as c:
        assert c.infer("digits", X[:1]).ok
    maps = _maps(d.pid)
    assert "onnxruntime" in maps  # the check can see a runtime library when there is one
    assert "openvino" not in maps
