"""Verification through the real daemon: every shipped INT8 rung goes live on this CPU
(checked against its reference computed here, not against numbers from the build
machine); a classifier with perturbed weights is refused with or without a golden file;
a variant with no check inputs is refused until it has some, unless `verify = false`."""

from __future__ import annotations

import re
import shutil
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper
from support.configs import DIGITS_PREPROCESS, config, model_table, variant
from support.daemons import Daemon
from support.paths import MODELS, ROOT

from edged.verify import golden

SAMPLE = MODELS / "samples" / "digit7_196.png"


def perturbed_copy(src: Path, dst: Path, scale: float = 0.5) -> Path:
    """``src`` with noise on every weight (no golden file beside it)."""
    m = onnx.load(str(src))
    rng = np.random.default_rng(0)
    for init in m.graph.initializer:
        w = numpy_helper.to_array(init)
        if w.dtype == np.float32 and w.size > 16:
            noisy = w + rng.normal(0, scale * (float(np.abs(w).std()) or 1.0), w.shape)
            init.CopyFrom(numpy_helper.from_array(noisy.astype(np.float32), init.name))
    onnx.save(m, str(dst))
    return dst


def digits_with(tmp: Path, name: str, path: Path, **variant_keys: Any) -> Path:
    """digits on cnn-fp32 > cnn-int8 > ``name`` (``path``, with ``variant_keys``), each on
    ONNX Runtime's default options."""
    ladder = [variant("cnn-fp32", MODELS / "cnn-fp32.onnx", options={}),
              variant("cnn-int8", MODELS / "cnn-int8.onnx", options={}),
              variant(name, path, options={}, **variant_keys)]
    digits = model_table("digits", ladder, max_batch_size=4, preprocess=DIGITS_PREPROCESS)
    return config(tmp, models=[digits], server="drain_timeout_s = 2.0")


def metric(d: Daemon, line: str) -> bool:
    text = urllib.request.urlopen(f"http://127.0.0.1:{d.metrics_port}/metrics").read().decode()
    return line in text


def test_every_shipped_int8_rung_goes_live_on_this_cpu(make_daemon: Any) -> None:
    d: Daemon = make_daemon(ROOT / "config.toml", metrics=True)
    for model, rung in (("digits", "cnn-int8"), ("person", "ssdlite-int8")):
        r = d.ctl({"op": "swap", "model": model, "variant": rung})
        assert r["status"] == "OK", r
        assert r["model"]["active_variant"] == rung
    log = d.log()
    assert re.search(r"verify ok model=person variant=ssdlite-int8 vs ssdlite-fp32 on golden "
                     r"file .* det\.precision=1 det\.recall=1", log), log
    assert re.search(r"verify ok model=digits variant=cnn-int8 vs cnn-fp32 .*logits\.top1=1",
                     log)
    assert metric(d, 'edged_variant_checks_total{model="person",result="ok",'
                     'variant="ssdlite-int8"} 1.0')


def test_perturbed_weights_are_refused_on_their_golden_inputs(make_daemon: Any,
                                                              tmp_path: Path) -> None:
    bad = perturbed_copy(MODELS / "cnn-fp32.onnx", tmp_path / "corrupt.onnx")
    shutil.copy(golden.golden_path(MODELS / "cnn-fp32.onnx"), golden.golden_path(bad))
    d: Daemon = make_daemon(digits_with(tmp_path, "corrupt", bad), metrics=True)
    assert d.ctl({"op": "swap", "model": "digits", "variant": "cnn-int8"})["status"] == "OK"
    r = d.ctl({"op": "swap", "model": "digits", "variant": "corrupt"})
    assert r["status"] == "INTERNAL" and "top-1 agrees with the reference" in r["error"], r
    assert r["model"]["active_variant"] == "cnn-int8"  # still serving the good one
    assert r["pin"] is None  # a refused pin is dropped, not retried every tick
    assert re.search(r"verify failed: variant refused model=digits variant=corrupt: variant "
                     r"'corrupt' against the reference 'cnn-fp32' on golden file "
                     r"corrupt\.onnx\.golden\.npz: output 'logits' top-1 .* check input \d",
                     d.log())
    with d.client() as c:
        assert c.infer("digits", SAMPLE).variant == "cnn-int8"
    assert metric(d, 'edged_variant_checks_total{model="digits",result="refused",'
                     'variant="corrupt"} 1.0')


def test_no_golden_file_no_data_refused_until_the_model_has_served(make_daemon: Any,
                                                                     tmp_path: Path) -> None:
    bad = perturbed_copy(MODELS / "cnn-fp32.onnx", tmp_path / "corrupt.onnx")
    good = tmp_path / "copy-int8.onnx"
    shutil.copy(MODELS / "cnn-int8.onnx", good)  # the good INT8 file, no golden beside it
    cfg = digits_with(tmp_path, "corrupt", bad)
    cfg.write_text(cfg.read_text() + f"""
[[models.variants]]
name = "copy-int8"
backend = "onnxruntime"
path = "{good}"
""")
    d: Daemon = make_daemon(cfg)
    r = d.ctl({"op": "swap", "model": "digits", "variant": "corrupt"})
    assert r["status"] == "INTERNAL" and "has no check inputs" in r["error"], r
    assert "set verify = false" in r["error"] and "golden.npz" in r["error"]
    assert r["model"]["active_variant"] == "cnn-fp32"
    images = np.load(MODELS / "validation.npz")["x"][:24]
    with d.client() as c:
        for img in images:  # served one at a time: each batch leaves its row in the ring
            assert c.infer("digits", img).ok
    r = d.ctl({"op": "swap", "model": "digits", "variant": "corrupt"})
    assert r["status"] == "INTERNAL" and "on the last 16 inputs served" in r["error"], r
    assert "top-1" in r["error"]
    r = d.ctl({"op": "swap", "model": "digits", "variant": "copy-int8"})
    assert r["status"] == "OK", r  # the good file passes on the same served inputs
    st = r["model"]["verify"]
    assert st["reference"] == "cnn-fp32" and st["recent_inputs"] == 16
    assert 0 < st["recent_bytes"] <= 16 * 28 * 28 * 4


def test_validation_data_named_in_model_json_are_check_inputs(make_daemon: Any,
                                                              tmp_path: Path) -> None:
    for f in ("cnn-int8.onnx", "validation.npz", "model.json"):
        shutil.copy(MODELS / f, tmp_path / f)
    d: Daemon = make_daemon(digits_with(tmp_path, "int8-copy", tmp_path / "cnn-int8.onnx"))
    r = d.ctl({"op": "swap", "model": "digits", "variant": "int8-copy"})
    assert r["status"] == "OK", r
    assert re.search(r"verify ok model=digits variant=int8-copy vs cnn-fp32 on 16 rows of "
                     r"validation\.npz \(int8\): logits\.top1=1", d.log())


def test_verify_false_goes_live_unchecked_with_a_warning(make_daemon: Any,
                                                         tmp_path: Path) -> None:
    bad = perturbed_copy(MODELS / "cnn-fp32.onnx", tmp_path / "corrupt.onnx")
    d: Daemon = make_daemon(digits_with(tmp_path, "corrupt", bad, verify=False),
                            metrics=True)
    assert "variant corrupt of model digits is unverified (verify = false)" in d.log()
    r = d.ctl({"op": "swap", "model": "digits", "variant": "corrupt"})
    assert r["status"] == "OK", r
    with d.client() as c:
        assert c.infer("digits", SAMPLE).variant == "corrupt"
    assert "unverified variant goes live model=digits variant=corrupt" in d.log()
    assert metric(d, 'edged_variant_checks_total{model="digits",result="unverified",'
                     'variant="corrupt"} 1.0')


def test_a_model_loaded_on_a_lower_rung_is_checked_first(make_daemon: Any,
                                                         tmp_path: Path) -> None:
    """Loading (start, reload, `ctl load`) on a rung other than the reference checks it
    against the reference first; one that fails is not served: the reference is."""
    bad = perturbed_copy(MODELS / "cnn-fp32.onnx", tmp_path / "corrupt.onnx")
    shutil.copy(golden.golden_path(MODELS / "cnn-fp32.onnx"), golden.golden_path(bad))
    d: Daemon = make_daemon(digits_with(tmp_path, "corrupt", bad))
    assert d.ctl({"op": "swap", "model": "digits", "variant": "cnn-int8"})["status"] == "OK"
    assert d.ctl({"op": "unload", "model": "digits"})["status"] == "OK"
    r = d.ctl({"op": "load", "model": "digits"})  # the operator's pin says cnn-int8
    assert r["status"] == "OK" and r["model"]["active_variant"] == "cnn-int8", r
    assert len(re.findall(r"verify ok model=digits variant=cnn-int8 vs cnn-fp32", d.log())) == 2
    assert d.ctl({"op": "unload", "model": "digits"})["status"] == "OK"
    assert d.ctl({"op": "swap", "model": "digits", "variant": "corrupt"})["pin"]["variant"] \
        == "corrupt"  # pinned while unloaded: the next load starts there
    r = d.ctl({"op": "load", "model": "digits"})
    assert r["status"] == "OK" and r["model"]["active_variant"] == "cnn-fp32", r
    assert "verify failed: variant refused model=digits variant=corrupt" in d.log()
    with d.client() as c:
        assert c.infer("digits", SAMPLE).variant == "cnn-fp32"


def renamed_output_copy(src: Path, dst: Path) -> Path:
    """``src`` answering its one output under another name: a candidate that breaks the
    model's contract (clients read ``logits``)."""
    m = onnx.load(str(src))
    out = m.graph.output[0]
    m.graph.node.append(onnx.helper.make_node("Identity", [out.name], ["scores"]))
    out.name = "scores"
    onnx.save(m, str(dst))
    return dst


def test_a_candidate_breaking_the_contract_is_a_refusal_not_a_failed_load(
        make_daemon: Any, tmp_path: Path) -> None:
    """The contract check before a swap refuses as the reference check does: counted as a
    refused check, logged as a refusal, and never as a failed load."""
    bad = renamed_output_copy(MODELS / "cnn-fp32.onnx", tmp_path / "renamed.onnx")
    d: Daemon = make_daemon(digits_with(tmp_path, "renamed", bad, verify=False),
                            metrics=True)
    r = d.ctl({"op": "swap", "model": "digits", "variant": "renamed"})
    assert r["status"] != "OK" and "has no output named 'logits'" in r["error"], r
    assert r["model"]["active_variant"] == "cnn-fp32", r
    assert metric(d, 'edged_variant_checks_total{model="digits",result="refused",'
                     'variant="renamed"} 1.0')
    assert not metric(d, 'edged_model_loads_total{model="digits",result="error",'
                         'variant="renamed"}')
    assert "verify failed: variant refused model=digits variant=renamed" in d.log()
    assert "load failed model=digits variant=renamed" not in d.log()
