"""`edged compile` as the README and docs/compile.md show it, and the ladder rule.

The README's command, ``edged compile MODEL.onnx --out DIR``, runs verbatim as a
subprocess (the installed console script, real ORT and TVM) on the shipped digits
model: it must find the validation data through ``models/digits/model.json`` and
exit 0. Its ``variants.toml`` is then checked against the ladder rule: the digits
CNN's fp32, graph-optimized fp32 and fp16 cost the same on a CPU, so only one of
them may be a rung.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from edged.backends.support.isa import CpuIsa, cpu_isa
from edged.backends.support.sidecar import read_sidecar
from edged.compile import ladder, ladder_file
from edged.compile.options import CompileOptions
from edged.compile.ort_steps import seven_bit_weights
from edged.compile.run import run
from edged.compile.sources import DataError
from edged.config import modeljson

ROOT = Path(__file__).resolve().parent.parent
MODEL = Path("models/digits/cnn-fp32.onnx")  # as typed in the README, from the repo root
EDGED = Path(sys.executable).parent / "edged"


def _edged(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([str(EDGED), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    if not EDGED.exists():
        pytest.skip(f"no console script {EDGED} (pip install -e '.[compile,tvm]')")
    out = tmp_path_factory.mktemp("readme") / "DIR"
    r = _edged("compile", str(MODEL), "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    return out, r.stdout


def test_the_readme_command_is_the_documented_one() -> None:
    assert "`edged compile MODEL.onnx --out DIR`" in (ROOT / "README.md").read_text()
    assert "`edged compile MODEL.onnx --out DIR`" in (ROOT / "docs/compile.md").read_text()


def test_readme_command_uses_the_data_model_json_names(readme_run) -> None:
    out, log = readme_run
    assert "validation data: models/digits/validation.npz (named by models/digits/model.json)" \
        in log, log
    int8 = read_sidecar(out / "cnn-int8.onnx")
    assert int8 is not None and "validation.npz (450 samples)" in int8["target"]["calibration"]
    assert int8["validation"]["samples"] == 450 and int8["validation"]["accuracy_pct"] > 95
    assert "FAILED" not in log


def test_equal_cost_digits_variants_make_one_rung(readme_run) -> None:
    out, _ = readme_run
    text = (out / "variants.toml").read_text()
    rungs = [v["name"] for v in tomllib.loads(text)["models"]["variants"]]
    # OpenVINO's fp32 IR (where it is installed) competes with ORT's fp32 variants for the
    # top: whichever measured fastest on this machine wins it.
    fp32 = {"cnn-fp32", "cnn-fp32-opt"} | ({"cnn-ov-fp32"} if "# cnn-ov-fp32:" in text else set())
    equal_cost = fp32 | {"cnn-fp16"}
    assert len(equal_cost & set(rungs)) == 1, text
    assert rungs[0] in fp32  # the most precise heads the ladder
    # A real step down: INT8 (ORT's, or OpenVINO's where it is installed and measures
    # cheaper still), ~2x cheaper than fp32 on any CPU; or, on a CPU with fast bf16 (AMX),
    # OpenVINO's bf16, which INT8 then need not beat by the 1.15x a rung must (the reason
    # is then written beside it, checked below).
    assert {"cnn-int8", "cnn-ov-int8", "cnn-ov-bf16"} & set(rungs[1:]), text
    for name in ("cnn-int8", "cnn-ov-int8"):
        if name not in rungs and f"# {name}:" in text:
            reason = next(ln for ln in text.split(f"# {name}:")[1].splitlines()
                          if ln.startswith("# not on the ladder:"))
            assert "not measurably cheaper than" in reason, reason
    for name in equal_cost - set(rungs):
        reason = next(ln for ln in text.split(f"# {name}:")[1].splitlines()
                      if ln.startswith("# not on the ladder:"))
        assert ("not measurably cheaper than" in reason and "1.15x" in reason) or \
            reason.startswith(f"# not on the ladder: as precise and as accurate as {rungs[0]}"), \
            reason
    # Each rung after the first is >= 1.15x cheaper than the one above (best rounds).
    entries = {e.get("name"): e for e in ladder.collect(out)}
    for upper, lower in itertools.pairwise(rungs):
        b1, big = ladder.speedup(entries[upper], entries[lower])
        assert max(b1, big or 0.0) >= ladder.MIN_SPEEDUP, (upper, lower, b1, big)
    assert len(entries[rungs[0]]["speed"]["rounds"]) == 3


def test_without_calibration_data_int8_is_skipped_and_the_run_succeeds(tmp_path) -> None:
    alone = tmp_path / "cnn-fp32.onnx"  # no model.json beside it, no val/calib
    shutil.copy(ROOT / MODEL, alone)
    fast = {"bench_runs": 3, "threads": 1, "max_batch": 4}
    r = run(CompileOptions(model=alone, out=tmp_path / "out", steps=("ort-opt", "int8"), **fast))
    assert r.exit_code == 0, r.log
    assert any("INT8 steps are skipped" in line for line in r.log)
    assert r.skipped["int8"].startswith("no calibration data")
    assert not (tmp_path / "out" / "cnn-int8.onnx").exists()
    assert r.outcomes == {"cnn-fp32-opt.onnx": "ok"}
    # Asked for alone, a step that cannot run is an error (as tensorrt without a GPU).
    r = run(CompileOptions(model=alone, out=tmp_path / "out2", steps=("int8",), **fast))
    assert r.exit_code == 1 and r.only_step_skipped and "int8" in r.skipped


@pytest.mark.parametrize(("doc", "message"), [
    ({"validation": 3}, "'validation' must be a path"),
    ({"validation": "nope.npz"}, "'validation' names 'nope.npz'"),
    ({"calibration": ""}, "'calibration' must be a path"),
])
def test_bad_model_json_data_keys_are_named(tmp_path, doc: dict[str, Any], message: str) -> None:
    (tmp_path / "model.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=message):
        modeljson.read(tmp_path / "model.json")
    shutil.copy(ROOT / MODEL, tmp_path / "m.onnx")
    with pytest.raises(DataError, match=message) as ei:
        run(CompileOptions(model=tmp_path / "m.onnx", out=tmp_path / "o", steps=("ort-opt",)))
    assert "model.json" in str(ei.value)
    assert not (tmp_path / "o" / "m-fp32-opt.onnx").exists()


def _entry(name: str, precision: str, b1_rounds: list[float], thr_rounds: list[float],
           accuracy: float = 99.0) -> dict[str, Any]:
    rounds = [{"latency_ms_p50": b, "throughput_per_s": t}
              for b, t in zip(b1_rounds, thr_rounds, strict=True)]
    return {"name": name, "precision": precision, "_artifact": Path(f"/x/{name}.onnx"),
            "validation": {"accuracy_pct": accuracy, "passed": True},
            "speed": {"latency_ms_p50": sorted(b1_rounds)[1], "max_batch": 8,
                      "throughput_per_s": sorted(thr_rounds)[1], "rounds": rounds}}


def test_ladder_rule_on_constructed_figures() -> None:
    fp32 = _entry("fp32", "fp32", [1.00, 1.02, 0.98], [800, 790, 810])
    fp16 = _entry("fp16", "fp16", [0.95, 0.99, 1.01], [820, 800, 805])  # noise only
    # 1.1x faster in every round, best against best: not measurably cheaper
    lucky = _entry("lucky", "int8", [0.89, 0.90, 0.95], [830, 820, 800], accuracy=98.0)
    # same latency, 1.25x the throughput at the max batch: cheaper
    batchy = _entry("batchy", "int8", [0.99, 1.0, 1.0], [1020, 1030, 1040], accuracy=98.5)
    small = _entry("small", "fp32", [0.1, 0.1, 0.11], [9000, 9100, 8900], accuracy=97.0)
    rungs, off = ladder.plan([small, lucky, fp16, batchy, fp32])
    # Most precise, then most accurate, heads: fp32. Of those measurably cheaper than
    # fp32 (small; batchy at the max batch), the most precise is next: small. Nothing
    # is measurably cheaper than small, so the ladder ends there.
    assert [r["name"] for r in rungs] == ["fp32", "small"]
    assert set(off) == {"fp16", "lucky", "batchy"}
    assert off["fp16"].startswith("not measurably cheaper than fp32 (b=1 1.03x, b=8 1.01x")
    assert off["lucky"].startswith("not measurably cheaper than fp32 (b=1 1.10x")


def test_equal_quality_variants_never_make_two_rungs() -> None:
    """fp32 and its graph-optimized copy give the same outputs: even when noise makes
    one look 1.3x cheaper at the max batch, they compete for one rung, and timed
    interleaved (the same cost) the preferred one keeps it."""
    fp32 = _entry("fp32", "fp32", [1.0, 1.0, 1.0], [800, 800, 800])
    opt = _entry("fp32-opt", "fp32", [1.01, 1.02, 1.03], [1040, 1000, 990])
    int8 = _entry("int8", "int8", [0.5, 0.5, 0.5], [1600, 1600, 1600], accuracy=97.0)

    def confirm(upper: dict[str, Any], lower: dict[str, Any]) -> tuple[float, float]:
        return (1.0, 1.0) if lower["name"] == "fp32-opt" else (2.0, 2.0)

    rungs, off = ladder.plan([opt, int8, fp32], confirm)
    assert [r["name"] for r in rungs] == ["fp32", "int8"]
    assert off["fp32-opt"].startswith("as precise and as accurate as fp32, which serves as "
                                      "fast or faster at the model's batch sizes")


def test_equals_are_decided_by_how_they_serve_at_batch_1_and_the_max_batch() -> None:
    """The issue's MobileNetV2 figures: OpenVINO's INT8 is as fast as ORT's at batch 1
    and twice its throughput at batch 8; it takes the rung (ORT's, preferred, did)."""
    fp32 = _entry("fp32", "fp32", [6.1, 6.1, 6.2], [197, 196, 195]) | {"backend": "onnxruntime"}
    ort8 = _entry("ort-int8", "int8", [4.23, 4.25, 4.3], [307, 305, 300], 98.0) \
        | {"backend": "onnxruntime"}
    ov8 = _entry("ov-int8", "int8", [4.28, 4.3, 4.35], [601, 598, 590], 98.0) \
        | {"backend": "openvino"}
    rungs, off = ladder.plan([fp32, ov8, ort8])
    assert [r["name"] for r in rungs] == ["fp32", "ov-int8"]
    assert off["ort-int8"].startswith("as precise and as accurate as ov-int8, which serves "
                                      "1.39x cheaper at the model's batch sizes (b=1 0.99x, "
                                      "b=8 1.96x")


def test_a_slower_top_rung_is_never_chosen_over_onnx_runtimes_fp32() -> None:
    """OpenVINO's fp32 a hair more accurate (one sample) but slower at both batch
    sizes: the original model, run by ONNX Runtime, stays on top, whatever the order."""
    src = _entry("cnn-fp32", "fp32", [6.1, 6.1, 6.2], [197, 196, 195]) \
        | {"backend": "onnxruntime", "_source": True}
    ovf = _entry("ov-fp32", "fp32", [9.7, 9.8, 9.9], [163, 160, 158], accuracy=99.01) \
        | {"backend": "openvino"}
    for order in ([src, ovf], [ovf, src]):
        rungs, off = ladder.plan(list(order))
        assert [r["name"] for r in rungs] == ["cnn-fp32"]
        assert "ov-fp32" in off


def test_the_ladder_rule_picks_the_same_rung_on_a_rerun() -> None:
    """Two equals within a few per cent of each other: the preferred keeps the rung in
    every order and whichever of them measured a hair faster on this run."""
    for lucky in (0.97, 1.03):
        a = _entry("ort-int8", "int8", [1.0, 1.0, 1.0], [800, 800, 800]) \
            | {"backend": "onnxruntime"}
        b = _entry("ov-int8", "int8", [lucky] * 3, [800 / lucky] * 3) | {"backend": "openvino"}
        for order in ([a, b], [b, a]):
            rungs, _ = ladder.plan(list(order))
            assert rungs[0]["name"] == "ort-int8"


def test_ladder_rule_picks_the_cheaper_of_two_int8s_as_one_rung() -> None:
    """int8 and batchy are equals (0.1 point apart, one sample): one rung, the one that
    serves cheaper; then tiny, less accurate and cheaper still."""
    fp32 = _entry("fp32", "fp32", [1.0, 1.0, 1.0], [800, 800, 800])
    int8 = _entry("int8", "int8", [0.5, 0.5, 0.5], [1600, 1600, 1600], accuracy=98.8)
    batchy = _entry("batchy", "int8", [0.99, 1.0, 1.0], [1020, 1030, 1040], accuracy=98.9)
    tiny = _entry("tiny", "int8", [0.2, 0.2, 0.2], [4000, 4000, 4000], accuracy=97.0)
    rungs, off = ladder.plan([tiny, int8, batchy, fp32])
    assert [r["name"] for r in rungs] == ["fp32", "int8", "tiny"]
    assert off["batchy"].startswith("as precise and as accurate as int8, which serves")
    rendered = ladder_file.render([tiny, int8, batchy, fp32], Path("/x"))
    assert tomllib.loads(rendered)["models"]["variants"][0]["name"] == "fp32"


def test_weight_width_is_chosen_from_the_cpu() -> None:
    avx2, vnni = CpuIsa("x86_64", ()), CpuIsa("x86_64", ("avx_vnni",))
    arm, unknown = CpuIsa("aarch64", ()), CpuIsa("x86_64", None)
    assert [seven_bit_weights("auto", c) for c in (avx2, vnni, arm, unknown)] == \
        [True, False, False, False]
    assert all(seven_bit_weights("on", c) for c in (avx2, vnni, arm))
    assert not any(seven_bit_weights("off", c) for c in (avx2, vnni, arm))


def test_int8_sidecar_records_the_weight_width(readme_run) -> None:
    out, log = readme_run
    here = cpu_isa()
    int8 = read_sidecar(out / "cnn-int8.onnx")
    assert int8 is not None and int8["target"]["reduce_range"] is here.saturates_u8s8
    assert int8["build_cpu"] == here.to_json()
    if here.saturates_u8s8:
        assert "7-bit (reduce_range)" in int8["target"]["quantization"]
        assert "int8: this CPU has no VNNI" in log
        assert int8["validation"]["max_abs_diff"] < 0.5  # no saturation


def test_a_rung_must_survive_the_interleaved_re_timing() -> None:
    fp32 = _entry("fp32", "fp32", [1.0, 1.0, 1.0], [800, 800, 800])
    fp16 = _entry("fp16", "fp16", [0.8, 0.8, 0.8], [1000, 1000, 1000])  # 1.25x on record
    int8 = _entry("int8", "int8", [0.4, 0.4, 0.4], [2000, 2000, 2000], accuracy=98.0)
    asked: list[tuple[str, str]] = []

    def confirm(upper: dict[str, Any], lower: dict[str, Any]) -> tuple[float, float] | None:
        asked.append((upper["name"], lower["name"]))
        if lower["name"] == "fp16":
            return 1.02, 0.99  # side by side, the same cost
        return None  # cannot run here: the recorded figures stand

    rungs, off = ladder.plan([fp32, fp16, int8], confirm)
    assert [r["name"] for r in rungs] == ["fp32", "int8"]
    assert "timed interleaved with it" in off["fp16"] and "b=1 1.02x" in off["fp16"]
    assert asked == [("fp32", "fp16"), ("fp32", "int8")]
    text = ladder_file.render([fp32, fp16, int8], Path("/x"), confirm)
    assert "# rung: cheaper than fp32 by b=1 2.50x, b=8 2.50x (best round" in text


def _sidecars(out: Path, *entries: dict[str, Any]) -> None:
    """``entries`` as the sidecars ``edged compile`` writes beside its artifacts."""
    from edged.backends.support.sidecar import FORMAT

    out.mkdir(parents=True, exist_ok=True)
    for e in entries:
        doc = {k: v for k, v in e.items() if not k.startswith("_")} | {"format": FORMAT}
        (out / f"{e['name']}.onnx.json").write_text(json.dumps(doc))


def _issue_int8s(ov_b1: float) -> list[dict[str, Any]]:
    """MobileNetV2's fp32 and two INT8s of equal quality (compile's figures: ORT INT8 2.5 ms
    at batch 1 and 508/s at 8, OpenVINO INT8 620/s at 8), and a less accurate INT8."""
    return [
        _entry("fp32", "fp32", [6.1, 6.1, 6.2], [197, 196, 195]) | {"backend": "onnxruntime"},
        _entry("ort-int8", "int8", [2.5, 2.5, 2.6], [508, 505, 500], 98.0)
        | {"backend": "onnxruntime"},
        _entry("ov-int8", "int8", [ov_b1] * 3, [620, 610, 600], 98.1)
        | {"backend": "openvino", "options": {"threads": 2}},
        # cheaper than ORT's INT8 at the max batch (1.38x), not than the pair (1.13x)
        _entry("tiny", "int8", [2.4, 2.4, 2.4], [700, 700, 700], 95.0)
        | {"backend": "onnxruntime"}]


def test_equals_that_split_the_contest_are_kept_as_one_rung_of_two(tmp_path: Path) -> None:
    """ORT INT8 1.72x faster at batch 1, OpenVINO INT8 1.22x faster at batch 8: both stay,
    one rung, ORT's computing lone rows and OpenVINO's batches; the sidecars' ladder says
    why, the config reader takes it, and a rung below must beat the pair."""
    from types import SimpleNamespace

    from edged.compile import served_config
    from edged.config.file import load_config, parse_config

    _sidecars(tmp_path, *_issue_int8s(4.3))
    path, in_dir = ladder_file.write_with_text(tmp_path, tmp_path)
    text = path.read_text()
    doc = tomllib.loads(text)["models"]["variants"]
    assert [v["name"] for v in doc] == ["fp32", "ort-int8"]
    assert doc[1]["batch_variant"] == {"name": "ov-int8", "backend": "openvino",
                                       "path": "ov-int8.onnx", "options": {"threads": 2}}
    assert ("# pair: ort-int8 and ov-int8 are as precise and as accurate, and neither is "
            "faster at every batch size: ort-int8 computes lone rows (b=1 1.72x faster), "
            "ov-int8 batches of more (b=8 1.22x faster) (best round against best round; "
            "each >= 1.15x)") in text
    assert "# not on the ladder: not measurably cheaper than ort-int8 (b=1 1.04x, b=8 1.13x" \
        in text
    cfg = parse_config({"models": [{"name": "m", "variants": doc}]}, tmp_path / "e.toml")
    pair = cfg.models[0].variants[1]
    assert pair.batch_variant is not None and pair.batch_variant.name == "ov-int8"
    assert pair.batch_variant.path == tmp_path / "ov-int8.onnx"
    # the served config (OUT/edged.toml) carries the pair as it is
    ctx = SimpleNamespace(name="m", src=tmp_path / "m.onnx", out=tmp_path, preprocess_from=None,
                          opts=SimpleNamespace(max_batch=8, postprocess=None),
                          inputs=[{"name": "x", "shape": [-1, 10], "dtype": "float32"}])
    served = load_config(served_config.write(ctx, in_dir, lambda _: None))  # type: ignore[arg-type]
    member = served.models[0].variants[1].batch_variant
    assert member is not None and member.path == tmp_path / "ov-int8.onnx"


def test_a_pair_is_confirmed_interleaved_both_ways() -> None:
    """Re-timed side by side, each member's advantage as its rival would least like it:
    ``confirm`` gives the round least favourable to its second argument, so it is asked
    in both orders (ORT's 1.60x at batch 1 from one, OpenVINO's 1.20x at 8 from the other)."""
    figures = {("ort-int8", "ov-int8"): (0.6, 1.2), ("ov-int8", "ort-int8"): (1.6, 0.85)}
    asked: list[tuple[str, str]] = []

    def confirm(upper: dict[str, Any], lower: dict[str, Any]) -> tuple[float, float]:
        asked.append((upper["name"], lower["name"]))
        return figures.get((upper["name"], lower["name"]), (3.0, 3.0))

    rungs, off = ladder.plan(_issue_int8s(4.3), confirm)
    assert [r["name"] for r in rungs] == ["fp32", "ort-int8"] and set(off) == {"tiny"}
    assert rungs[1]["_pair"]["name"] == "ov-int8"
    assert ("ort-int8 computes lone rows (b=1 1.60x faster), ov-int8 batches of more (b=8 "
            "1.20x faster) (timed interleaved both ways") in rungs[1]["_pair_why"]
    assert {("ort-int8", "ov-int8"), ("ov-int8", "ort-int8")} <= set(asked)


def test_equals_that_do_not_split_the_contest_keep_one() -> None:
    """OpenVINO 1.08x slower at batch 1 (under the margin) and 1.22x faster at 8: no pair;
    it keeps the rung alone (the preferred: a hair more accurate); and a pair the
    interleaved re-timing does not confirm is no pair."""
    rungs, off = ladder.plan(_issue_int8s(2.7))
    assert [r["name"] for r in rungs] == ["fp32", "ov-int8"]  # tiny: not 1.15x cheaper
    assert "_pair" not in rungs[1] and off["ort-int8"].startswith(
        "as precise and as accurate as ov-int8, which serves as fast or faster")

    def confirm(upper: dict[str, Any], lower: dict[str, Any]) -> tuple[float, float]:
        int8s = {upper["name"], lower["name"]} == {"ort-int8", "ov-int8"}
        return (1.0, 1.0) if int8s else (3.0, 3.0)  # side by side, the INT8s cost the same

    rungs, off = ladder.plan(_issue_int8s(4.3), confirm)
    # without ORT's INT8 beside it for lone rows, tiny is a rung below (1.79x at batch 1)
    assert [r["name"] for r in rungs] == ["fp32", "ov-int8", "tiny"]
    assert "_pair" not in rungs[1] and "ort-int8" in off
