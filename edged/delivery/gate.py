"""What a stored version must pass on this device before it serves: the model it makes,
its contract against what the model's clients send, and its accuracy on its own
validation set.

Why on the device: the field's servers stop at "it loaded" (docs/delivery.md); a version
that loads can still answer another task (a changed input, a retrained head that lost
accuracy), and this device's runtime is not the publisher's. Each check raises ``Refused``
(``edged.delivery.download``) with its stage and reason; nothing here touches what serves.

- ``version_config``: the ``ModelConfig`` of a version, from the served model's own table
  (its preprocessing, post-processing, batching: how clients call it) and the version's
  ladder (``variants.toml`` as ``edged compile`` wrote it; paths are the bundle's files);
  each variant is named ``VARIANT@VERSION``, so every reply names the version it came from;
- ``check_contract``: the candidate's inputs and outputs are the ones the model's clients
  send and read (the variants' own check, ``edged.model.open.check_contract``, then the
  shapes; a dynamic dimension matches any);
- ``accuracy_gate``: its top variant on the bundle's labelled validation set, on this
  device, may lose at most ``MAX_DROP_POINTS`` (the 2-point rule of ``edged compile``)
  against the accuracy the bundle claims.
"""

from __future__ import annotations

import logging
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from edged.backends.base import TensorSpec, run_batch
from edged.config.models import ModelConfig, VariantConfig, _variant
from edged.config.schema import Table
from edged.delivery.bundle import Manifest
from edged.delivery.download import Refused
from edged.delivery.rungs import built, openvino_missing, with_rungs
from edged.delivery.store import Version
from edged.model.open import check_contract as variant_contract
from edged.verify.compare import VerifyRefused

log = logging.getLogger("edged.delivery")

#: the accuracy gate: at most this many points below what the bundle claims
MAX_DROP_POINTS = 2.0
#: validation rows the gate runs at most (bounded time on a small device)
MAX_GATE_ROWS = 2000


def version_config(base: ModelConfig, version: Version, manifest: Manifest) -> ModelConfig:
    """The served model's table with the version's ladder (``Refused`` when the ladder
    names a file the bundle lacks or a key edged does not know)."""
    ladder = version.path / (manifest.ladder or "variants.toml")
    try:
        doc = tomllib.loads(ladder.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise Refused("verifying", "ladder", f"{ladder.name}: unreadable: {e}") from None
    tables = (doc.get("models") or {}).get("variants") if isinstance(doc.get("models"),
                                                                       dict) else None
    if not isinstance(tables, list) or not tables:
        raise Refused("verifying", "ladder", f"{ladder.name}: no [[models.variants]]")
    problems: list[str] = []
    variants: list[VariantConfig] = []
    for i, vt in enumerate(tables):
        if not isinstance(vt, dict):
            continue
        vt = _flat(vt)
        if isinstance(vt.get("batch_variant"), dict):
            vt["batch_variant"] = _flat(vt["batch_variant"])
        t = Table(vt, f"models.variants[{i}]", ladder, problems, base_dir=version.path)
        v = _variant(t)
        if v is None:
            continue
        where = f"{ladder.name}: models.variants[{i}]"
        if not _in_bundle(v, version, f"{where}.path", problems):
            continue
        why = cannot_run(v)
        if why:  # a rung for another device (a TensorRT plan on a CPU): not opened here
            log.info("delivery: %s %s: variant %s is not opened on this device: %s",
                     base.name, manifest.version, v.name, why)
            continue
        m = v.batch_variant
        if m is not None and not _in_bundle(m, version, f"{where}.batch_variant.path",
                                            problems):
            continue
        why = cannot_run(m) if m is not None else None
        if m is not None and why:  # the rung serves on its variant alone here
            log.info("delivery: %s %s: batch_variant %s is not opened on this device: %s",
                     base.name, manifest.version, m.name, why)
            v = replace(v, batch_variant=None)
        variants.append(v)
    if problems or not variants:
        raise Refused("verifying", "ladder", "; ".join(problems) or
                      f"{ladder.name}: no variant this device can run")
    mc = replace(base, variants=tuple(variants))
    if len(variants) == 1:  # rungs built here before (edged.delivery.rungs), if any
        mc = with_rungs(mc, variants[0].path)
    return replace(mc, variants=tuple(_versioned(v, manifest.version) for v in mc.variants))


def _flat(vt: dict[str, Any]) -> dict[str, Any]:
    """A variant's table with its path by base name: a bundle is flat."""
    vt = dict(vt)
    if isinstance(vt.get("path"), str):
        vt["path"] = Path(vt["path"]).name
    return vt


def _in_bundle(v: VariantConfig, version: Version, where: str, problems: list[str]) -> bool:
    if v.path.is_file() and v.path.parent == version.path:
        return True
    problems.append(f"{where}: {v.path.name} is not a file of the bundle")
    return False


def _versioned(v: VariantConfig, version: str) -> VariantConfig:
    """``v`` (and a pair's member) named for ``version``: two versions' series never mix."""
    m = v.batch_variant
    return replace(v, name=f"{v.name}@{version}",
                   batch_variant=None if m is None else replace(m, name=f"{m.name}@{version}"))


def cannot_run(v: VariantConfig) -> str | None:
    """Why this device cannot open variant ``v`` (its runtime is not installed), or None."""
    import importlib.util

    if v.backend == "openvino":
        return openvino_missing()
    module = {"tvm": "tvm", "tensorrt": "tensorrt"}.get(v.backend)
    if module is not None and importlib.util.find_spec(module) is None:
        return f"{v.backend} is not installed"
    return None


def needs_rungs(mc: ModelConfig) -> bool:
    """A version whose ladder is one fp32 ONNX model with no rung built for it here."""
    if len(mc.variants) != 1:
        return False
    v = mc.variants[0]
    return (v.backend == "onnxruntime" and v.path.suffix == ".onnx"
            and (v.precision or "fp32") == "fp32" and not built(v.path))


def rung_frames(mc: ModelConfig, version: Version, manifest: Manifest, preprocessor: Any,
                count: int = 48) -> np.ndarray:
    """The first ``count`` rows of the bundle's validation set as the model's input
    tensors: what its rungs are calibrated (3/4) and checked (1/4) on."""
    x, _ = _validation(version.path / manifest.validation)
    x = x[:count]
    if preprocessor is not None and x.dtype == np.uint8:
        return np.concatenate([preprocessor.from_frame(r) for r in x])
    return np.ascontiguousarray(x)


def _fits(want: TensorSpec, got: TensorSpec) -> bool:
    if want.name != got.name or want.dtype != got.dtype or len(want.shape) != len(got.shape):
        return False
    return all(a == b or a < 0 or b < 0 for a, b in zip(want.shape[1:], got.shape[1:],
                                                        strict=True))


def check_contract(clients_send: list[TensorSpec], clients_read: list[TensorSpec],
                   inputs: list[TensorSpec], outputs: list[TensorSpec]) -> None:
    """``Refused`` unless the candidate takes what clients send and gives what they read:
    the check every variant passes before it serves (``edged.model.open.check_contract``:
    names, dtypes, ranks), then what a new version must also keep (no other input, the
    same sizes beyond the batch, a dynamic dimension matching any)."""
    def show(specs: list[TensorSpec]) -> str:
        return ", ".join(f"{s.name} {s.dtype} {list(s.shape)}" for s in specs)

    try:
        variant_contract("the new version", clients_send, inputs, "input")
        variant_contract("the new version", clients_read, outputs, "output")
    except VerifyRefused as e:
        raise Refused("gating", "contract", str(e)) from None
    if len(inputs) != len(clients_send) or not all(
            any(_fits(w, g) for g in inputs) for w in clients_send):
        raise Refused("gating", "contract",
                      f"the new version takes {show(inputs)}; the model's clients send "
                      f"{show(clients_send)}")
    missing = [w for w in clients_read if not any(_fits(w, g) for g in outputs)]
    if missing:
        raise Refused("gating", "contract",
                      f"the new version gives {show(outputs)}; the model's clients read "
                      f"{show(missing)}")


def _validation(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:
            x = z["x"][:MAX_GATE_ROWS]
            y = z["y"][:MAX_GATE_ROWS]
    except (OSError, ValueError, KeyError) as e:
        raise Refused("gating", "validation", f"{path.name}: not a labelled validation set "
                      f"(an .npz with x and y): {e}") from None
    if len(x) == 0 or len(x) != len(y):
        raise Refused("gating", "validation", f"{path.name}: {len(x)} inputs, {len(y)} labels")
    return x, y


def accuracy_gate(loaded: Any, preprocessor: Any, version: Version,
                  manifest: Manifest, postprocess: Any = None) -> dict[str, float]:
    """The accuracy of ``loaded`` (an open variant: its ``backend``) on the bundle's
    validation set, on this device: top-1 for a classifier, mAP@0.5 for a detector
    (``postprocess``: the model's table); ``Refused`` when it is more than
    ``MAX_DROP_POINTS`` below the claim. Blocking (a worker thread)."""
    if manifest.metric == "map50":
        measured = _map50(loaded, version, manifest, postprocess)
        return _held(measured, manifest, "mAP@0.5", "images")
    x, y = _validation(version.path / manifest.validation)
    spec = loaded.backend.inputs[0]
    correct = 0
    batch = 32
    for i in range(0, len(x), batch):
        rows = x[i:i + batch]
        if spec.matches_item(rows.dtype, rows.shape):
            t = np.ascontiguousarray(rows)
        elif preprocessor is not None and rows.dtype == np.uint8:
            t = np.concatenate([preprocessor.from_frame(r) for r in rows])
        else:
            raise Refused("gating", "validation", f"{manifest.validation}: rows "
                          f"{rows.dtype} {list(rows.shape[1:])} fit neither the input "
                          f"{spec.name} {list(spec.shape)} nor its preprocessing")
        outs = run_batch(loaded.backend, {spec.name: t})
        logits = outs[loaded.backend.outputs[0].name]
        correct += int((logits.reshape(len(rows), -1).argmax(1) == y[i:i + batch]).sum())
    return _held((100.0 * correct / len(x), len(x)), manifest, "top-1", "rows")


def _held(measured_n: tuple[float, int], manifest: Manifest, what: str,
          unit: str) -> dict[str, float]:
    """The 2-point rule against the bundle's claim."""
    measured, n = measured_n
    claimed = 100.0 * manifest.accuracy
    report = {"accuracy_pct": round(measured, 3), "claimed_pct": round(claimed, 3),
              "rows": float(n)}
    if measured < claimed - MAX_DROP_POINTS:
        raise Refused("gating", "accuracy",
                      f"{what} {measured:.2f}% on {n} {unit} of {manifest.validation} on "
                      f"this device, {claimed - measured:.2f} points below the "
                      f"{claimed:.2f}% the bundle claims (at most {MAX_DROP_POINTS:g} "
                      "points are allowed)")
    return report


def _map50(loaded: Any, version: Version, manifest: Manifest,
           postprocess: Any) -> tuple[float, int]:
    """mAP@0.5 of a detector on the bundle's labelled images (``edged compile``'s own
    detection check: the same letterbox, decode and NMS as the daemon)."""
    if postprocess is None:
        raise Refused("gating", "metric", "a map50 validation set needs a detector: the "
                      "model's table has no [models.postprocess]")
    try:
        from edged.compile.data import Preprocess
        from edged.compile.detect_val import DetectionCheck, load_detection_set
        from edged.detect.metrics_map import evaluate_map
    except ImportError as e:
        raise Refused("gating", "metric", f"a detector's gate needs pip install "
                      f"'edged[compile]' (pycocotools): {e}") from None
    try:
        data = load_detection_set(version.path / manifest.validation)
        pre = Preprocess.from_json(version.path / manifest.contract)
        check = DetectionCheck(postprocess, data, pre, MAX_DROP_POINTS)
        dets = check.detect(loaded.backend, 8)
        r = evaluate_map(dets, data.truth, max_det=postprocess.max_det)
    except (ValueError, KeyError, OSError, RuntimeError) as e:
        raise Refused("gating", "validation", f"{manifest.validation}: {e}"[:400]) from None
    return 100.0 * r.map50, len(data.images)
