"""Config parsing: typed objects, every problem named by file and key path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import MODELS, ROOT

from edged.config.file import Config, load_config, parse_config
from edged.config.server import Limits
from edged.errors import ConfigError
from edged.host.runtime_dir import ipc_path, resolve_runtime_dir


def test_shipped_config_parses_into_typed_objects() -> None:
    cfg = load_config(ROOT / "config.toml")
    assert isinstance(cfg, Config)
    assert cfg.server.endpoints == ("ipc://edged.sock", "tcp://127.0.0.1:5555")
    assert cfg.metrics.host == "127.0.0.1" and cfg.metrics.port == 9464
    m, p = cfg.models
    assert m.name == "digits" and m.required and m.max_batch_size == 8
    assert [v.name for v in m.variants] == ["cnn-fp32", "cnn-int8", "small-fp32"]
    assert all(v.path.is_file() and v.path.is_absolute() for v in [*m.variants, *p.variants])
    assert m.preprocess is not None and m.preprocess.color == "gray"
    assert p.name == "person" and [v.name for v in p.variants] == ["ssdlite-fp32", "ssdlite-int8"]
    assert p.postprocess is not None and p.postprocess.decoder == "ssd"
    assert cfg.governor.enabled


def _problems(text: str, tmp: Path) -> list[str]:
    p = tmp / "bad.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(p)
    return e.value.problems


VARIANT = f"""
[[models.variants]]
name = "v"
backend = "onnxruntime"
path = "{MODELS / 'cnn-fp32.onnx'}"
"""


def test_unknown_key_suggests_the_nearest(tmp_path: Path) -> None:
    probs = _problems(f'[[models]]\nname = "m"\nmax_batch = 4\n{VARIANT}', tmp_path)
    assert len(probs) == 1
    assert "bad.toml: models[0].max_batch: unknown key (did you mean 'max_batch_size'?)" \
        in probs[0]


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    text = f"""
[server]
endpoints = ["udp://x"]
drain_timeout_s = -1
[metrics]
listen = "nonsense"
[[models]]
name = "m"
max_batch_size = 0
max_queue = "many"
[models.preprocess]
color = "purple"
width = 28
height = 28
mean = [1, 2]
{VARIANT}
[models.variants.options]
providers = ["gpu"]
threds = 2
[governor]
interval_s = 0
"""
    probs = _problems(text, tmp_path)
    text_all = "\n".join(probs)
    for key in ("server.endpoints[0]", "server.drain_timeout_s", "metrics.listen",
                "models[0].max_batch_size", "models[0].max_queue",
                "models[0].preprocess.color", "models[0].variants[0].options.providers[0]",
                "models[0].variants[0].options.threds", "governor.interval_s"):
        assert key in text_all, (key, text_all)
    assert all(p.startswith(str(tmp_path / "bad.toml")) for p in probs)
    assert "did you mean 'threads'" in text_all


def test_types_and_required_keys_are_named(tmp_path: Path) -> None:
    probs = _problems('[[models]]\nname = 3\n[[models.variants]]\nbackend = "onnx"\n', tmp_path)
    text = "\n".join(probs)
    assert "models[0].name: expected a string, got 3" in text
    assert "models[0].variants[0].name: missing" in text
    assert "models[0].variants[0].backend: must be one of" in text
    assert "models[0].variants[0].path: missing" in text


def test_invalid_toml_and_missing_file(tmp_path: Path) -> None:
    assert "invalid TOML" in _problems("[server\n", tmp_path)[0]
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "nope.toml")
    assert "cannot read config file" in e.value.problems[0]


def test_duplicate_names_and_control_must_be_ipc(tmp_path: Path) -> None:
    text = f'[server]\ncontrol = "tcp://0.0.0.0:1"\n[[models]]\nname = "m"\n{VARIANT}' \
           f'[[models]]\nname = "m"\n{VARIANT}'
    text_all = "\n".join(_problems(text, tmp_path))
    assert "server.control" in text_all and "ipc" in text_all
    assert "model name 'm' is used twice" in text_all


def test_server_limits_are_one_limits_built_at_load(tmp_path: Path) -> None:
    p = tmp_path / "limits.toml"
    p.write_text(f'[server.limits]\nmax_rank = 3\nhard_message_bytes = 4096\n'
                 f'max_message_bytes = 1024\n[[models]]\nname = "m"\n{VARIANT}')
    limits = load_config(p).server.limits
    assert limits == Limits(max_rank=3, hard_message_bytes=4096, max_message_bytes=1024)
    assert limits.hard_cap == 4096 and Limits(max_message_bytes=1024).hard_cap == 2048


def test_server_limits_problems_name_the_key(tmp_path: Path) -> None:
    probs = _problems(f'[server.limits]\nmax_dim = 0\nmax_inputs = "4"\nmax_rnak = 2\n'
                      f'max_message_bytes = 1000\nhard_message_bytes = 999\n'
                      f'[[models]]\nname = "m"\n{VARIANT}', tmp_path)
    for key in ("max_dim", "max_inputs", "max_rnak", "hard_message_bytes"):
        assert sum(f"server.limits.{key}:" in pr for pr in probs) == 1, (key, probs)
    assert len(probs) == 4, probs


def test_relative_paths_anchor_at_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "x.onnx").write_bytes((MODELS / "cnn-fp32.onnx").read_bytes())
    cfg = parse_config({"models": [{"name": "m", "variants": [
        {"name": "v", "backend": "onnxruntime", "path": "m/x.onnx"}]}]}, tmp_path / "c.toml")
    assert cfg.models[0].variants[0].path == (tmp_path / "m" / "x.onnx").resolve()


def test_cli_overrides_endpoints_and_metrics() -> None:
    cfg = load_config(ROOT / "config.toml").with_overrides(
        ["tcp://127.0.0.1:7000"], "127.0.0.1:9999", "/tmp/x", None)
    assert cfg.server.endpoints == ("tcp://127.0.0.1:7000",)
    assert cfg.metrics.port == 9999 and str(cfg.server.runtime_dir) == "/tmp/x"
    assert not cfg.with_overrides(metrics="off").metrics.enabled


def test_runtime_dir_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path / "sd"))
    assert resolve_runtime_dir(None) == tmp_path / "sd"
    monkeypatch.delenv("RUNTIME_DIRECTORY")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "xdg"))
    d = resolve_runtime_dir(None)
    assert d == tmp_path / "xdg" / "edged" and oct(d.stat().st_mode & 0o777) == "0o750"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert resolve_runtime_dir(None).name.startswith("edged-")
    assert ipc_path("ipc://a.sock", tmp_path) == f"ipc://{tmp_path}/a.sock"
    assert ipc_path("ipc:///abs.sock", tmp_path) == "ipc:///abs.sock"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edged", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def test_edged_check_loads_every_artifact() -> None:
    r = _cli("check", "config.toml")
    assert r.returncode == 0, r.stdout + r.stderr
    for v in ("cnn-fp32", "cnn-int8", "small-fp32"):
        assert f"ok   digits/{v}" in r.stdout
    assert "CPUExecutionProvider" in r.stdout


def test_edged_check_reports_problems_and_broken_artifacts(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[[models]]\nname = "m"\nmax_queue = -3\nwat = 1\n')
    r = _cli("check", str(bad))
    assert r.returncode == 4  # an invalid config (edged.cli.exits.CONFIG)
    assert "max_queue: must be > 0" in r.stdout and "wat: unknown key" in r.stdout
    assert "variants: missing" in r.stdout
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"\x08\x07garbage" * 10)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[[models]]\nname = "m"\n[[models.variants]]\nname = "v"\n'
                   f'backend = "onnxruntime"\npath = "{broken}"\n')
    r = _cli("check", str(cfg))
    assert r.returncode == 1 and "FAIL m/v" in r.stdout and str(broken) in r.stdout


def test_serve_with_invalid_config_exits_4_with_the_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[[models]]\nname = 1\n")
    r = _cli("serve", "--config", str(bad))
    assert r.returncode == 4 and "models[0].name" in r.stderr


def test_a_toml_error_names_file_line_and_column(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[server]\nendpoints = ["ipc://a.sock"]\nlog_level = \n')
    for args in (("check", str(bad)), ("check", "--config", str(bad)),
                 ("serve", "--config", str(bad))):
        r = _cli(*args)
        assert r.returncode == 4, (args, r.stdout, r.stderr)
        assert f"{bad}:3:13: invalid TOML" in r.stdout + r.stderr, (args, r.stdout, r.stderr)


def test_a_rung_pair_reads_as_one_variant_with_its_batch_variant(tmp_path: Path) -> None:
    p = tmp_path / "pair.toml"
    p.write_text(f'[[models]]\nname = "m"\n{VARIANT}batch_variant = {{ name = "ov", '
                 f'backend = "openvino", path = "{MODELS / "cnn-fp32.onnx"}", '
                 'options = { threads = 1 } }\n'
                 f'[[models.variants]]\nname = "w"\nbackend = "onnxruntime"\n'
                 f'path = "{MODELS / "cnn-int8.onnx"}"\n')
    v, w = load_config(p).models[0].variants
    assert v.batch_variant is not None and w.batch_variant is None
    b = v.batch_variant
    assert (b.name, b.backend, b.path, b.batch_variant) == (
        "ov", "openvino", MODELS / "cnn-fp32.onnx", None)
    assert b.options.threads == 1  # type: ignore[union-attr]


def test_a_rung_pair_problems_name_the_key(tmp_path: Path) -> None:
    member = f'backend = "onnxruntime"\npath = "{MODELS / "cnn-int8.onnx"}"\n'
    probs = _problems(
        f'[[models]]\nname = "m"\n{VARIANT}[models.variants.batch_variant]\nname = "v"\n'
        f'{member}reference = true\nthreds = 1\n'
        f'[models.variants.batch_variant.batch_variant]\nname = "x"\n{member}', tmp_path)
    text = "\n".join(probs)
    assert "models[0].variants: variant name 'v' is used twice" in text, text
    assert "models[0].variants[0].batch_variant.reference: a batch_variant cannot be " \
           "the reference" in text, text
    assert "models[0].variants[0].batch_variant.batch_variant: a batch_variant cannot " \
           "have a batch_variant" in text, text
    assert "models[0].variants[0].batch_variant.threds: unknown key" in text, text
    assert len(probs) == 4, probs
    probs = _problems(f'[[models]]\nname = "m"\n{VARIANT}batch_variant = "ov"\n', tmp_path)
    assert len(probs) == 1 and "models[0].variants[0].batch_variant: expected a table" \
        in probs[0], probs


def test_edged_check_loads_a_pairs_batch_variant_too(tmp_path: Path) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"\x08\x07garbage" * 10)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[[models]]\nname = "m"\n{VARIANT}[models.variants.batch_variant]\n'
                   f'name = "b"\nbackend = "onnxruntime"\npath = "{broken}"\n')
    r = _cli("check", str(cfg))
    assert r.returncode == 1 and "ok   m/v" in r.stdout, r.stdout + r.stderr
    assert "FAIL m/b (onnxruntime" in r.stdout and str(broken) in r.stdout
