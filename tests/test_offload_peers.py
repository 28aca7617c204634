"""Offload to real KServe v2 servers: NVIDIA Triton, Seldon MLServer and KServe's ModelServer
(``edged.testing.peers``), each serving the digits model on loopback as the remote of
daemons pinned to a level that offloads digits, one over gRPC and one over HTTP.

Each server takes at most 4 rows a request while the local model takes 8, so an 8-row
request is one the remote refuses (Triton: INVALID_ARGUMENT / 400; MLServer and KServe:
INTERNAL / 500). Each daemon also maps a model the remote does not serve the tensors of
(``slow`` -> the remote's digits), which the metadata check must keep local.

Why module-scoped: one server process per kind and two daemons serve every test of that
kind (the suite's time). The peers' venvs are built on first use (``peer_venvs.cache_root``)
and a peer that cannot be built or started here skips its tests with the reason.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tritonclient.grpc", reason="the kserve extra is not installed "
                    "(pip install 'edged[kserve]')")
from support.configs import digits_config, slow_table
from support.daemons import Daemon, metric, metrics
from support.paths import MODELS
from support.peers import started_or_skip
from support.slow_model import make_slow_model
from support.sysfs import make_thermal_zone
from support.waits import wait_until

from edged.cli.status_text import format_status
from edged.testing import peer_venvs, peers

# A clean machine builds each peer's venv in its first test's setup (a minute or so).
pytestmark = pytest.mark.timeout(900)

SCHEMES = ("grpc", "http")
REMOTE_ROWS = 4  # what each peer takes at most; the local digits model takes 8
VAL = np.load(MODELS / "validation.npz")
X = (VAL["x"][:8].astype(np.float32) / 255.0)[:, None]
MISMATCH_LOG = "offload of model slow to"
PACE_S = 0.02  # between one load thread's requests


def reference(x: np.ndarray) -> np.ndarray:
    """The logits ONNX Runtime gives in process for the same file the peers serve."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(MODELS / "cnn-fp32.onnx"),
                                providers=["CPUExecutionProvider"])
    return np.asarray(sess.run(["logits"], {"input": x})[0])


WANT = reference(X)


@pytest.fixture(scope="module", params=peer_venvs.KINDS)
def peer(request: pytest.FixtureRequest,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[peers.Peer]:
    kind = request.param
    p = started_or_skip(request, kind, MODELS / "cnn-fp32.onnx", tmp_path_factory.mktemp(kind),
                        name="digits", max_batch_size=REMOTE_ROWS, threads=1)
    yield p
    p.stop(timeout=5)


def offload_config(tmp: Path, url: str) -> Path:
    """digits (offloaded while pinned hot) and ``slow``, mapped to the remote's digits,
    whose tensors it does not have."""
    root = tmp / "sysroot"
    make_thermal_zone(root, 0, "cpu-thermal", 45000, trips=[(95000, "passive", 0)])
    slow = make_slow_model(tmp / "slow.onnx", 10)
    offload = (f'[offload]\nurl = "{url}"\ntimeout_ms = 5000\nhealth_interval_s = 0.2\n'
               '[[offload.models]]\nmodel = "digits"\nvariant = "cnn-fp32"\n'
               '[[offload.models]]\nmodel = "slow"\nremote_model = "digits"\n')
    governor = (f'[governor]\nenabled = true\nsysfs_root = "{root}"\ninterval_s = 0.1\n'
                'dwell_s = 0.1\n[[governor.levels]]\nname = "hot"\nenter_c = 80.0\n'
                'exit_c = 75.0\noffload = ["digits", "slow"]\n')
    return digits_config(tmp, variants=("cnn-fp32",), governor=governor,
                         extra_models=slow_table(slow, max_batch_size=8) + offload)


def status(d: Daemon) -> dict[str, Any]:
    return d.ctl({"op": "status"})["offload"]


@pytest.fixture(scope="module")
def local(peer: peers.Peer, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Daemon]]:
    """One daemon per scheme, pinned hot, the remote up and its digits checked."""
    tmp = tmp_path_factory.mktemp(f"{peer.kind}-daemons")
    daemons = {s: Daemon(offload_config(tmp / s, peer.url(s)), tmp / s, metrics=True,
                         wait=False) for s in SCHEMES}
    try:
        for d in daemons.values():
            d.wait_ready()
            assert d.ctl({"op": "level", "level": "hot"})["status"] == "OK"
        for s, d in daemons.items():
            wait_until(lambda d=d: status(d)["up"] == {"digits": True, "slow": True}
                       and "unused" not in status(d)["models"]["digits"], 30,
                       what=f"{peer.kind} over {s} up and digits checked")
        yield daemons
    finally:
        for d in daemons.values():
            d.stop()


def outcomes(d: Daemon, outcome: str) -> float:
    return metric(metrics(d), "edged_offload_requests_total", model="digits", outcome=outcome)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_reply_comes_from_the_remote_with_the_local_logits(
        peer: peers.Peer, local: dict[str, Daemon], scheme: str) -> None:
    d = local[scheme]
    with d.client(timeout_s=30) as c:
        for rows in (1, 3, REMOTE_ROWS, 2):
            r = c.infer("digits", X[:rows])
            assert r.variant == "remote:digits", r.header
            np.testing.assert_allclose(r.outputs["logits"], WANT[:rows], rtol=1e-5, atol=1e-5)
        # The model whose tensors the remote does not have stays here.
        assert c.infer("slow", np.zeros((1, 64), np.float32)).variant == "loop"
    st = status(d)
    why = st["models"]["slow"]["unused"]
    assert "does not match 'slow'" in why and "input 'x'" in why, why
    text = format_status(d.ctl({"op": "status"}))  # what `edged status` prints
    assert f"slow -> digits (counts as loop): unused: {why}" in text, text
    assert "digits -> digits (counts as cnn-fp32): up" in text, text
    assert d.log().count(MISMATCH_LOG) == 1, d.log_tail()  # once per change, not per check
    if scheme == "http":  # MLServer does not take the binary-tensor extension
        assert st["tensors"] == ("json" if peer.kind == "mlserver" else "binary"), st
    assert outcomes(d, "failed") == outcomes(d, "fallen_back") == 0


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_request_the_remote_refuses_is_answered_here_and_offload_goes_on(
        peer: peers.Peer, local: dict[str, Daemon], scheme: str) -> None:
    d = local[scheme]
    before = outcomes(d, "fallen_back")
    with d.client(timeout_s=30) as c:
        r = c.infer("digits", X)  # 8 rows: more than the remote takes
        assert r.ok and r.variant == "cnn-fp32", r.header
        np.testing.assert_allclose(r.outputs["logits"], WANT, rtol=1e-5, atol=1e-5)
        assert status(d)["up"]["digits"] is True
        r = c.infer("digits", X[:1])
        assert r.variant == "remote:digits", r.header
    assert outcomes(d, "fallen_back") == before + 1
    assert outcomes(d, "failed") == 0


class Load:
    """Client threads sending one-row digits requests to a daemon until stopped, paced
    (``PACE_S`` apart, so a restarting server gets CPU); every reply is checked against
    the reference and counted by variant."""

    def __init__(self, d: Daemon, threads: int = 2) -> None:
        self.d, self.stop = d, threading.Event()
        self.variants: dict[str, int] = {}
        self.bad: list[str] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(k,)) for k in range(threads)]
        for t in self.threads:
            t.start()

    def _run(self, k: int) -> None:
        with self.d.client(timeout_s=30) as c:
            i = k
            while not self.stop.is_set():
                i = (i + 1) % len(X)
                r = c.infer("digits", X[i:i + 1], raise_on_error=False)
                with self.lock:
                    if not r.ok:
                        self.bad.append(f"{r.status}: {r.error}")
                    elif not np.allclose(r.outputs["logits"], WANT[i:i + 1], atol=1e-5):
                        self.bad.append(f"wrong logits from {r.variant}")
                    else:
                        self.variants[r.variant or "?"] = self.variants.get(
                            r.variant or "?", 0) + 1
                self.stop.wait(PACE_S)

    def count(self, variant: str) -> int:
        with self.lock:
            return self.variants.get(variant, 0)

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)


def test_a_killed_remote_is_answered_here_and_used_again_once_restarted(
        peer: peers.Peer, local: dict[str, Daemon]) -> None:
    loads = {s: Load(d) for s, d in local.items()}
    try:
        for s, ld in loads.items():
            wait_until(lambda ld=ld: ld.count("remote:digits") >= 10, 30,
                       what=f"offloaded replies over {s}")
        peer.kill()  # mid-run: requests in flight to it
        for s, ld in loads.items():
            wait_until(lambda ld=ld: ld.count("cnn-fp32") >= 10, 30,
                       what=f"replies computed here over {s} once the remote died")
            assert status(local[s])["up"]["digits"] is False
        peer.start()
        for s, d in local.items():
            wait_until(lambda d=d: status(d)["up"]["digits"], 30,
                       what=f"the restarted {peer.kind} seen up over {s}")
            since = loads[s].count("remote:digits")
            wait_until(lambda s=s, since=since: loads[s].count("remote:digits") >= since + 10,
                       30, what=f"offload resumed over {s}")
    finally:
        for ld in loads.values():
            ld.finish()
    for s, ld in loads.items():
        assert ld.bad == [], (s, ld.bad[:5])
        assert set(ld.variants) == {"remote:digits", "cnn-fp32"}, (s, ld.variants)
        assert outcomes(local[s], "failed") == 0, s
