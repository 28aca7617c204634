"""Faults from the outside world: broken artifacts, broken backends, taken ports,
unwritable directories and bad configs.

Every fault must give a clear error naming the file (or key, or address), cost
nothing beyond what it breaks, and a start-up fault must be one line on stderr and
a non-zero exit, never a traceback or a hang.
"""

from __future__ import annotations

import random
import socket
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.configs import digits_config, one_variant_model
from support.daemons import Daemon, free_port
from support.digits import VAL, run_edged, tensor
from support.faults import BROKEN_KINDS, broken_artifact, make_batch_collapsing_model

from edged.client import build_infer


def serve(config: Path, tmp: Path, *, endpoint: str | None = None, metrics: str = "off",
          runtime_dir: Path | None = None, control: str | None = None
          ) -> subprocess.CompletedProcess[str]:
    run = runtime_dir or tmp / "run"
    return run_edged("serve", "--config", str(config), "--runtime-dir", str(run),
                 "--endpoint", endpoint or f"tcp://127.0.0.1:{free_port()}",
                 "--control", control or f"ipc://{run}/control.sock", "--metrics", metrics)


def one_line_startup_error(r: subprocess.CompletedProcess[str]) -> str:
    """The exit is 1 and stderr ends in exactly one `edged: cannot start: ...` line."""
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    mine = [ln for ln in r.stderr.splitlines() if ln.startswith("edged:")]
    assert len(mine) == 1, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last == mine[0] and last.startswith("edged: cannot start: "), r.stderr
    return last


# -- broken artifacts ---------------------------------------------------------------------

def test_broken_artifacts_fail_only_their_model_with_a_reason(make_daemon: Any,
                                                              tmp_path: Path) -> None:
    paths = {k: broken_artifact(tmp_path, k) for k in BROKEN_KINDS}
    cfg = digits_config(tmp_path, variants=("cnn-fp32",), extra_models="".join(
        one_variant_model(f"broken-{k}", p) for k, p in paths.items()))
    d: Daemon = make_daemon(cfg)
    with d.client() as c:
        assert c.health().ok  # only required models count for health
        described = {m["name"]: m for m in c.models().header["models"]}
        for k, p in paths.items():
            m = described[f"broken-{k}"]
            assert m["state"] == "failed" and str(p) in m["error"], m
            r = c.infer(f"broken-{k}", np.zeros((1, 4), np.float32), raise_on_error=False)
            assert r.status == "UNAVAILABLE", r.header
            assert str(p) in r.header["error"] and "failed" in r.header["error"], r.header
        # The good model is untouched, before and after.
        r = c.infer("digits", tensor(0))
        assert r.ok and int(np.argmax(r.outputs["logits"])) == int(VAL["y"][0])
    # `edged check` names every broken file and fails.
    chk = run_edged("check", str(cfg))
    assert chk.returncode == 1, chk.stdout
    for k, p in paths.items():
        line = next(ln for ln in chk.stdout.splitlines() if f"broken-{k}/" in ln)
        assert line.startswith("FAIL") and str(p) in line, chk.stdout
    assert any(ln.startswith("ok   digits/") for ln in chk.stdout.splitlines()), chk.stdout
    assert "Traceback" not in chk.stdout + chk.stderr


@pytest.mark.parametrize("kind", ["missing", "truncated", "corrupt"])
def test_a_broken_required_model_stops_start_up_naming_the_file(tmp_path: Path,
                                                                kind: str) -> None:
    p = broken_artifact(tmp_path, kind)
    cfg = digits_config(tmp_path, variants=("cnn-fp32",),
                        extra_models=one_variant_model("needed", p, required=True))
    last = one_line_startup_error(serve(cfg, tmp_path))
    assert "required model 'needed'" in last and str(p) in last, last


# -- a backend that returns the wrong shape at run time --------------------------------------

def test_wrong_output_shape_fails_only_that_batch_and_the_model_recovers(
        make_daemon: Any, tmp_path: Path) -> None:
    path = make_batch_collapsing_model(tmp_path / "collapse.onnx")
    cfg = digits_config(tmp_path, variants=("cnn-fp32",),
                        extra_models=one_variant_model("collapse", path, max_batch_size=4))
    d: Daemon = make_daemon(cfg)
    one = np.arange(4, dtype=np.float32)[None]
    two = np.arange(8, dtype=np.float32).reshape(2, 4)
    with d.client() as c:
        for _ in range(2):
            r = c.infer("collapse", one)
            assert r.ok, r.header
            np.testing.assert_allclose(r.outputs["y"], one)
            bad = c.infer("collapse", two, raise_on_error=False)
            assert bad.status == "INTERNAL", bad.header
            assert "expected 2 rows" in bad.header["error"] and "v1" in bad.header["error"]
        # Other models go on, and this one is still ready.
        assert c.infer("digits", tensor(1)).ok
        m = next(x for x in c.models().header["models"] if x["name"] == "collapse")
        assert m["state"] == "ready" and m["queue_depth"] == 0
        # Pipelined: batches that form by themselves fail together, nothing is lost.
        ids = []
        for i in range(6):
            h, f = build_infer("collapse", one, id=f"p{i}")
            ids.append(c.send(h, f))
        got = {}
        for _ in ids:
            r = c.recv(10)
            got[r.header["id"]] = r.status
        assert sorted(got) == sorted(ids)
        assert set(got.values()) <= {"OK", "INTERNAL"}
        assert c.infer("collapse", one).ok
    assert d.proc.poll() is None
    assert "Traceback" not in d.log()


# -- the environment -----------------------------------------------------------------------

def test_metrics_port_in_use_is_a_one_line_error(tmp_path: Path) -> None:
    cfg = digits_config(tmp_path, variants=("cnn-fp32",))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        last = one_line_startup_error(serve(cfg, tmp_path, metrics=f"127.0.0.1:{port}"))
    assert f"port {port} ([metrics] listen = 127.0.0.1:{port}) is already in use" in last, last
    assert "--metrics" in last, last  # and what moves it


def test_runtime_dir_under_a_regular_file_is_a_one_line_error(tmp_path: Path) -> None:
    cfg = digits_config(tmp_path, variants=("cnn-fp32",))
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    run = afile / "run"
    last = one_line_startup_error(serve(cfg, tmp_path, runtime_dir=run,
                                        control=f"ipc://{tmp_path}/c.sock"))
    assert str(run) in last and "runtime directory" in last, last


@pytest.mark.parametrize("which", ["endpoint", "control"])
def test_ipc_socket_under_a_regular_file_is_a_one_line_error(tmp_path: Path,
                                                             which: str) -> None:
    cfg = digits_config(tmp_path, variants=("cnn-fp32",))
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    ep = f"ipc://{afile}/edged.sock"
    if which == "endpoint":
        r = serve(cfg, tmp_path, endpoint=ep)
    else:
        r = serve(cfg, tmp_path, control=ep)
    last = one_line_startup_error(r)
    assert ep in last and "cannot bind" in last, last


# -- configs --------------------------------------------------------------------------------

def _bad_configs(tmp: Path) -> dict[str, Path]:
    out = {"missing": tmp / "nope.toml", "a directory": tmp / "cfgdir"}
    (tmp / "cfgdir").mkdir()
    for name, data in {
        "invalid TOML": b"[server\nendpoints = [",
        "not UTF-8": b"[server]\nlog_level = \"\xff\xfe\"\n",
        "binary garbage": bytes(random.Random(2).randbytes(512)),
        "wrong type": b"[server]\ndrain_timeout_s = \"soon\"\n[[models]]\nname = \"m\"\n"
                      b"[[models.variants]]\nname = \"v\"\nbackend = \"onnxruntime\"\n"
                      b"path = \"m.onnx\"\n",
    }.items():
        p = tmp / f"{name.replace(' ', '-')}.toml"
        p.write_bytes(data)
        out[name] = p
    return out


@pytest.mark.parametrize("case", ["missing", "a directory", "invalid TOML", "not UTF-8",
                                  "binary garbage", "wrong type"])
def test_unreadable_or_invalid_config_exits_4_naming_the_file(tmp_path: Path,
                                                              case: str) -> None:
    path = _bad_configs(tmp_path)[case]
    r = serve(path, tmp_path)
    assert r.returncode == 4, (r.returncode, r.stderr)  # edged.cli.exits.CONFIG
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    # "edged: invalid config:", one line per problem naming the file, then what to do.
    assert lines[0] == "edged: invalid config:", r.stderr
    assert len(lines) == 3, r.stderr
    assert str(path) in lines[1], r.stderr
    assert "--config" in lines[2], r.stderr


def test_edged_check_lists_every_problem_with_file_and_key_path(tmp_path: Path) -> None:
    cfg = tmp_path / "many.toml"
    cfg.write_text("""
[server]
endpoints = ["http://x:1"]
drain_timeout_s = -1
colour = "red"
[server.limits]
max_rank = 0
[metrics]
listen = "bogus"
[[models]]
name = "m"
max_batch_size = 0
[[models.variants]]
name = "v"
backend = "nope"
path = "x.onnx"
""")
    r = run_edged("check", str(cfg))
    assert r.returncode == 4, r.stdout  # an invalid config (edged.cli.exits.CONFIG)
    assert "Traceback" not in r.stdout + r.stderr
    out = r.stdout.splitlines()
    assert out[0] == f"{cfg}: 7 problem(s):", r.stdout
    for key in ("server.endpoints[0]", "server.drain_timeout_s", "server.colour",
                "server.limits.max_rank", "metrics.listen", "models[0].max_batch_size",
                "models[0].variants[0].backend"):
        hits = [ln for ln in out[1:] if f"{cfg}: {key}:" in ln]
        assert len(hits) == 1, (key, r.stdout)
    assert len(out) == 9, r.stdout  # the heading, exactly the seven problems, what to do
    assert out[-1] == "fix the file where each line points", r.stdout
