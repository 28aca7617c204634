"""The TVM backend against real TVM-compiled libraries of the shipped digits model.

Builds (once per module) an untuned symbolic-batch ``.so`` and an untuned static
set (b=1, b=4), then checks outputs against ONNX Runtime fp32 and every refusal
path: missing, truncated, other architecture, other TVM version, no sidecar, no TVM.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tvm")
ort = pytest.importorskip("onnxruntime")

from edged.backends import backend_module  # noqa: E402
from edged.backends.base import run_batch  # noqa: E402
from edged.backends.support.sidecar import sha256_file, sidecar_path, write_sidecar  # noqa: E402
from edged.backends.tvm import open_backend  # noqa: E402
from edged.compile import tvm_build  # noqa: E402
from edged.compile.modelinfo import io_specs, tool_versions  # noqa: E402
from edged.config.runtimes import TvmOptions  # noqa: E402
from edged.config.schema import Table  # noqa: E402
from edged.errors import ArtifactError  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models" / "digits" / "cnn-fp32.onnx"
VAL = ROOT / "models" / "digits" / "validation.npz"


def _meta(target: dict[str, Any], batch_sizes: list[int] | None, **extra: Any) -> dict[str, Any]:
    ins, outs = io_specs(MODEL)
    return {"source": {"path": str(MODEL), "sha256": sha256_file(MODEL)}, "backend": "tvm",
            "precision": "fp32", "target": target, "batch_sizes": batch_sizes,
            "inputs": ins, "outputs": outs, "tools": tool_versions("tvm"), **extra}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("tvm")
    choice = tvm_build.resolve_target("llvm", None, 2)
    dyn = tvm_build.build_dynamic(MODEL, d / "dyn.so", choice)
    write_sidecar(dyn, _meta(choice.spec, None, sha256=sha256_file(dyn)))
    files = {}
    for b in (1, 4):
        lib, _ = tvm_build.build_static(MODEL, d / f"set.b{b}.so", choice, b)
        files[str(b)] = {"path": lib.name, "sha256": sha256_file(lib)}
    write_sidecar(d / "set.so", _meta(choice.spec, [1, 4], files=files))
    return {"dir": d, "dyn": dyn, "set": d / "set.so"}


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    with np.load(VAL) as z:
        x = (z["x"][:24].astype(np.float32) / 255.0)[:, None]
    ref = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0]
    return x, ref


def _copy(built: dict[str, Path], name: str, tmp: Path) -> Path:
    src = built[name]
    for p in src.parent.glob(src.stem + "*"):
        shutil.copy(p, tmp / p.name)
    return tmp / src.name


def test_dynamic_library_matches_onnxruntime(built, data) -> None:
    x, ref = data
    be = open_backend(built["dyn"], TvmOptions(threads=2), 8)
    assert be.batch_sizes is None
    assert [s.name for s in be.inputs] == ["input"] and be.inputs[0].shape == (-1, 1, 28, 28)
    for n in (1, 3, 8):
        out = be.run({"input": x[:n]})["logits"]
        assert out.shape == (n, 10)
        np.testing.assert_allclose(out, ref[:n], atol=1e-4, rtol=1e-4)
    be.warmup(2)
    assert be.info.backend == "tvm" and "cpu" in be.info.device
    be.close()


def test_per_batch_set_pads_and_chunks(built, data) -> None:
    x, ref = data
    be = backend_module("tvm").open_backend(built["set"], TvmOptions(), 8)
    assert be.batch_sizes == (1, 4)
    for n in (1, 2, 3, 4, 6, 9):  # padded to 4; larger batches run in chunks
        out = run_batch(be, {"input": x[:n]})["logits"]
        assert out.shape == (n, 10)
        np.testing.assert_allclose(out, ref[:n], atol=1e-4, rtol=1e-4)
    with pytest.raises(ArtifactError, match="no library for batch 3"):
        be.run({"input": x[:3]})  # the backend itself runs only its compiled sizes


def test_options_from_table() -> None:
    problems: list[str] = []
    o = TvmOptions.from_table(Table({"threads": 2}, "models[0].variants[0].options", "c.toml",
                                 problems))
    assert o.threads == 2 and not problems
    TvmOptions.from_table(Table({"threads": 0, "devcie": "cpu"}, "o", "c.toml", problems))
    assert any("threads" in p for p in problems) and any("device" in p for p in problems)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match=r"not found: .*nope\.so"):
        open_backend(tmp_path / "nope.so", TvmOptions(), 8)


def test_missing_member_of_set(built, tmp_path: Path) -> None:
    p = _copy(built, "set", tmp_path)
    (tmp_path / "set.b4.so").unlink()
    with pytest.raises(ArtifactError, match=r"set\.b4\.so"):
        open_backend(p, TvmOptions(), 8)


def test_truncated_library_is_refused(built, tmp_path: Path) -> None:
    p = _copy(built, "dyn", tmp_path)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(ArtifactError, match=r"dyn\.so.*truncated or corrupt"):
        open_backend(p, TvmOptions(), 8)
    # Without a recorded checksum the loader itself must still fail cleanly.
    meta = json.loads(sidecar_path(p).read_text())
    meta.pop("sha256")
    sidecar_path(p).write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match=r"dyn\.so: TVM library is truncated"):
        open_backend(p, TvmOptions(), 8)
    p.write_bytes(b"garbage" * 100)
    with pytest.raises(ArtifactError, match=r"dyn\.so: not a shared library"):
        open_backend(p, TvmOptions(), 8)


def test_other_architecture_is_refused(built, tmp_path: Path) -> None:
    p = _copy(built, "dyn", tmp_path)
    meta = json.loads(sidecar_path(p).read_text())
    other = "aarch64-linux-gnu" if not meta["target"]["mtriple"].startswith("aarch64") \
        else "x86_64-linux-gnu"
    meta["target"]["mtriple"] = other
    sidecar_path(p).write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match=rf"dyn\.so: built for {other}"):
        open_backend(p, TvmOptions(), 8)


def test_other_tvm_version_is_refused(built, tmp_path: Path) -> None:
    p = _copy(built, "dyn", tmp_path)
    meta = json.loads(sidecar_path(p).read_text())
    meta["tools"]["tvm"] = "0.19.0"
    sidecar_path(p).write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match=r"built with TVM 0\.19\.0.*apache-tvm==0\.19\.0"):
        open_backend(p, TvmOptions(), 8)


def test_missing_or_foreign_sidecar(built, tmp_path: Path) -> None:
    p = _copy(built, "dyn", tmp_path)
    sidecar_path(p).unlink()
    with pytest.raises(ArtifactError, match="no sidecar"):
        open_backend(p, TvmOptions(), 8)
    sidecar_path(p).write_text("{not json")
    with pytest.raises(ArtifactError, match="unreadable artifact sidecar"):
        open_backend(p, TvmOptions(), 8)


def test_missing_tvm_names_the_extra(built, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tvm", None)  # makes `import tvm` raise ImportError
    with pytest.raises(ArtifactError, match=r"edged\[tvm\]"):
        open_backend(built["dyn"], TvmOptions(), 8)


def test_daemon_serves_tvm_with_the_runtime_library_only(built, data, tmp_path: Path) -> None:
    """The daemon maps libtvm_runtime.so, never the 259 MB compiler library."""
    from support.configs import config, model_table, variant
    from support.daemons import Daemon

    x, ref = data
    tvm = variant("tvm-dyn", built["dyn"], backend="tvm", options={"threads": 1})
    cfg = config(tmp_path, models=[model_table("digits", [tvm], max_batch_size=4)],
                 name="tvm.toml")
    d = Daemon(cfg, tmp_path)
    try:
        with d.client() as c:
            r = c.infer("digits", x[:4])
            assert r.ok, r.header
            np.testing.assert_allclose(r.outputs["logits"], ref[:4], atol=1e-4, rtol=1e-4)
        maps = Path(f"/proc/{d.proc.pid}/maps").read_text()
        assert "libtvm_runtime.so" in maps
        assert "libtvm_compiler" not in maps and "libtvm.so" not in maps
    finally:
        d.stop()
