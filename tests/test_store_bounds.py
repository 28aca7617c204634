"""The one model store's bounds (issue 32, edged/delivery/store.py, store_bounds.py and
pace.py): at most K versions per model and a total quota, oldest unserved evicted first,
never what serves or its fallback; a transfer over the quota refused with its message; the
per-client pace of Frigate transfers; a restart that finds a consistent index.

The daemon tests speak Frigate's real transfer protocol (``edged.testing.frigate_plugin``,
and plain REQ sockets for a flood); the models are small graphs of Frigate's layouts made
distinct by one metadata entry each (they still parse, check and load, as the 300 models
of the issue's flood did).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq
from support import frigate_graphs as fg
from support.daemons import Daemon, free_port, metric, metrics

from edged.delivery.pace import OncePerMinute, Pace, peer_key
from edged.delivery.store import VersionStore
from edged.delivery.store_bounds import StoreFull
from edged.testing.frigate_plugin import FrigateDetector

onnx = pytest.importorskip("onnx", reason="model transfer checks graphs with onnx")

WAIT_MS = 20000


def distinct(g: fg.Graph, i: int) -> bytes:
    """``g``'s model with one metadata entry more: other bytes, the same graph."""
    m = onnx.load_from_string(g.data)
    m.metadata_props.add(key="copy", value=str(i))
    return m.SerializeToString()


def gauge(text: str, name: str) -> float:
    """An unlabelled sample of the daemon's exposition text."""
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    assert m is not None, f"no {name} in /metrics"
    return float(m.group(1))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- the store, in process ---------------------------------------------------------------

def test_versions_beyond_k_go_oldest_first_never_the_serving_one_or_its_fallback(
        tmp_path: Path) -> None:
    s = VersionStore(tmp_path / "store", max_bytes=1 << 30, per_model=3)
    blobs = [f"version {i}".encode() for i in range(6)]
    s.put_file("m", "v0", blobs[0], sha(blobs[0]), ".bin")
    s.promote("m", sha(blobs[0]))  # v0 serves
    s.put_file("m", "v1", blobs[1], sha(blobs[1]), ".bin")
    s.promote("m", sha(blobs[1]))  # v1 serves, v0 is its fallback
    for i in range(2, 6):
        s.put_file("m", f"v{i}", blobs[i], sha(blobs[i]), ".bin")
    assert [v.name for v in s.versions("m")] == ["v0", "v1", "v5"]
    assert s.serving("m").name == "v1" and s.fallback("m").name == "v0"  # type: ignore
    assert sorted(p.name for p in (tmp_path / "store" / "versions").iterdir()) == sorted(
        sha(b) for b in (blobs[0], blobs[1], blobs[5]))
    # another model's versions are bounded on their own; the same bytes are stored once
    s.put_file("n", "same", blobs[5], sha(blobs[5]), ".bin")
    assert len(list((tmp_path / "store" / "versions").iterdir())) == 3


def test_an_operators_rollback_keeps_the_version_it_left_as_the_rollback_target(
        tmp_path: Path) -> None:
    """After a manual rollback from v2 to v1, v2 is v1's fallback: never evicted by the
    versions that arrive after it (per model or by the quota), until a newer one is
    promoted; an automatic rollback leaves no target (issue 41)."""
    mb = 1 << 20
    s = VersionStore(tmp_path / "store", max_bytes=4 * mb, per_model=3)
    blobs = [bytes([i]) * mb for i in range(8)]
    for i in (1, 2):
        s.put_file("m", f"v{i}", blobs[i], sha(blobs[i]), ".bin")
        s.promote("m", sha(blobs[i]))
    s.demote("m", sha(blobs[2]), "operator: a doubt", never=True, source="x", keep=True)
    assert s.serving("m").name == "v1" and s.fallback("m").name == "v2"  # type: ignore
    for i in range(3, 7):  # arrivals beyond K and beyond the quota: v2 stays
        s.put_file("m", f"v{i}", blobs[i], sha(blobs[i]), ".bin")
        assert s.get("m", sha(blobs[2])) is not None, i
        assert s.used_bytes() <= 4 * mb
    assert [v.name for v in s.versions("m")] == ["v1", "v2", "v6"]
    reopened = VersionStore(tmp_path / "store", max_bytes=4 * mb, per_model=3)
    assert reopened.fallback("m").name == "v2"  # type: ignore[union-attr]  # kept across a restart
    s.promote("m", sha(blobs[6]))  # a newer one serves: v1 is its fallback, v2 may go
    assert s.fallback("m").name == "v1"  # type: ignore[union-attr]
    s.put_file("m", "v7", blobs[7], sha(blobs[7]), ".bin")
    assert s.get("m", sha(blobs[2])) is None
    # an automatic rollback (the watch window's) leaves the version it left no pointer
    s.demote("m", sha(blobs[6]), "p99: slower", never=True, source="x")
    assert s.serving("m").name == "v1" and s.fallback("m") is None  # type: ignore[union-attr]


def test_the_quota_evicts_the_oldest_unserved_and_refuses_what_cannot_fit(tmp_path: Path
                                                                         ) -> None:
    mb = 1 << 20
    s = VersionStore(tmp_path / "store", max_bytes=3 * mb, per_model=10)
    a, b = b"a" * mb, b"b" * mb
    s.put_file("a", "a", a, sha(a), ".bin")
    s.promote("a", sha(a))
    for i in range(5):  # model b's versions come and go; a's serving one stays
        blob = bytes([i]) * mb
        s.put_file("b", f"b{i}", blob, sha(blob), ".bin")
        assert s.used_bytes() <= 3 * mb
    assert s.get("a", sha(a)) is not None
    assert [v.name for v in s.versions("b")] == ["b3", "b4"]
    s.promote("b", sha(bytes([4]) * mb))
    # a serves 1 MiB, b serves 1 MiB; a new b needs 1 MiB and makes b4 its fallback: 3 MiB
    s.put_file("b", "b5", b, sha(b), ".bin")
    s.promote("b", sha(b))
    # a new b would make b5 its fallback (b4 may go): a 1 MiB + b5 1 MiB + 1 MiB fits ...
    s.admit("b", sha(b"new"), mb)
    with pytest.raises(StoreFull) as e:  # ... a byte more does not
        s.admit("b", sha(b"new"), mb + 1)
    assert "max_store_bytes" in str(e.value) and e.value.reason == "quota"
    assert not list((tmp_path / "store" / "incoming").glob("*"))


def test_a_restart_finds_a_consistent_index(tmp_path: Path) -> None:
    root = tmp_path / "store"
    s = VersionStore(root, per_model=4)
    x, y = b"x" * 100, b"y" * 100
    s.put_file("m", "x", x, sha(x), ".bin")
    s.put_file("m", "y", y, sha(y), ".bin")
    s.promote("m", sha(y))
    # a crash after a version's folder was written but before the index named it ...
    orphan = root / "versions" / sha(b"orphan")
    orphan.mkdir()
    (orphan / "f.bin").write_bytes(b"orphan")
    # ... and a folder lost under a version the index names (a disk error, a hand)
    for p in (root / "versions" / sha(x)).iterdir():
        p.unlink()
    (root / "versions" / sha(x)).rmdir()
    (root / ".index.json.abc.tmp").write_text("half an index")
    s2 = VersionStore(root, per_model=4)
    assert [v.name for v in s2.versions("m")] == ["y"] and s2.serving("m").name == "y"  # type: ignore
    assert not orphan.exists() and not list(root.glob("*.tmp"))
    assert {p.name for p in (root / "versions").iterdir()} == {sha(y)}
    index = json.loads((root / "index.json").read_text())
    assert [v["digest"] for v in index["models"]["m"]["versions"]] == [sha(y)]


def test_the_pace_counts_per_client_in_a_sliding_minute() -> None:
    now = [0.0]
    p = Pace(3, clock=lambda: now[0])
    assert [p.take("a") for _ in range(3)] == [None, None, None]
    assert p.take("a") == pytest.approx(60.0)
    assert p.take("b") is None  # another client has its own pace
    now[0] = 30.0
    assert p.take("a") == pytest.approx(30.0)
    now[0] = 60.0
    assert p.take("a") is None
    once = OncePerMinute(clock=lambda: now[0])
    assert once("a", "pace") and not once("a", "pace") and once("b", "pace")
    now[0] = 121.0
    assert once("a", "pace")
    # ipc peers are counted per user, not per process
    assert peer_key("localhost:0:0:123") == peer_key("localhost:0:0:456") == "localhost:0:0"
    assert peer_key("127.0.0.1") == "127.0.0.1"


# -- the daemon, through Frigate's transfer ----------------------------------------------

def config(tmp: Path, ports: dict[str, int], max_store_bytes: int, per_model: int = 3,
           flood_pace: int = 1000) -> Path:
    p = tmp / "edged.toml"
    p.write_text(f"""
[server]
drain_timeout_s = 1.0
state_dir = "{tmp / 'state'}"
max_store_bytes = {max_store_bytes}
max_store_versions = {per_model}
[[server.frigate]]
endpoint = "tcp://127.0.0.1:{ports['serve']}"
accept_models = true
timeout_ms = 20000
int8_rung = false
transfers_per_minute = {flood_pace}
[[server.frigate]]
endpoint = "tcp://127.0.0.1:{ports['flood']}"
accept_models = true
timeout_ms = 20000
int8_rung = false
transfers_per_minute = {flood_pace}
[[server.frigate]]
endpoint = "tcp://127.0.0.1:{ports['paced']}"
accept_models = true
timeout_ms = 20000
int8_rung = false
transfers_per_minute = 2
[[models]]
name = "unused"
[[models.variants]]
name = "v"
backend = "null"
path = "unused"
""")
    return p


def send(port: int, name: str, data: bytes, ctx: zmq.Context) -> dict[str, Any]:
    """One transfer as Frigate's plugin makes it: the question, then the file."""
    with ctx.socket(zmq.REQ) as s:
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RCVTIMEO, 60000)
        s.connect(f"tcp://127.0.0.1:{port}")
        s.send_multipart([json.dumps({"model_data": True, "model_name": name}).encode(), data])
        return json.loads(s.recv_multipart()[0])


def store_state(tmp: Path) -> tuple[dict[str, Any], set[str], int]:
    root = tmp / "state" / "store"
    index = json.loads((root / "index.json").read_text())
    folders = {p.name for p in (root / "versions").iterdir()}
    used = sum(f.stat().st_size for f in root.rglob("*") if f.is_file()
               and f.name != "index.json")
    return index, folders, used


def detect(port: int, name: str, g: fg.Graph, data: bytes) -> FrigateDetector:
    f = FrigateDetector(f"tcp://127.0.0.1:{port}", f"/config/{name}", g.model_type, WAIT_MS,
                        model_bytes=data)
    return f


def test_a_flood_of_distinct_models_stays_in_bounds_and_the_served_model_survives(
        tmp_path: Path) -> None:
    ports = {k: free_port() for k in ("serve", "flood", "paced")}
    mib = 1 << 20
    served = distinct(fg.yolox(), 0)  # 1.2 MB, served on the first endpoint throughout
    flood = fg.yologeneric()  # 0.7 MB each
    quota = 3 * mib
    cfg = config(tmp_path, ports, quota)
    d = Daemon(cfg, tmp_path, metrics=True)
    ctx = zmq.Context()
    try:
        f = detect(ports["serve"], "served.onnx", fg.yolox(), served)
        assert f.ready, f.events
        want = np.array(fg.yolox().want, np.float32)
        x = np.zeros(fg.yolox().shape, fg.yolox().dtype)
        assert np.allclose(f.detect_raw(x)[0], want, atol=1e-3)
        for i in range(24):
            a = send(ports["flood"], f"flood-{i}.onnx", distinct(flood, i), ctx)
            assert a["model_saved"] is True and a["model_loaded"] is True, (i, a)
            index, folders, used = store_state(tmp_path)
            assert used <= quota, (i, used)
            for m in index["models"].values():
                assert len(m["versions"]) <= 3
        assert folders == {v["digest"] for m in index["models"].values()
                           for v in m["versions"]}
        # the model that serves on the other endpoint survived every eviction, and serves
        serve_model = index["models"][f"frigate@tcp://127.0.0.1:{ports['serve']}"]
        assert serve_model["serving"] == sha(served) and sha(served) in folders
        assert np.allclose(f.detect_raw(x)[0], want, atol=1e-3)
        # the flood's last one serves, the one before is its fallback
        flood_model = index["models"][f"frigate@tcp://127.0.0.1:{ports['flood']}"]
        assert flood_model["serving"] == sha(distinct(flood, 23))
        assert flood_model["fallback"] == sha(distinct(flood, 22))
        text = metrics(d)
        assert gauge(text, "edged_store_bytes") <= quota
        assert gauge(text, "edged_store_quota_bytes") == quota
        assert gauge(text, "edged_store_evictions_total") >= 20
        status = d.ctl({"op": "status"})["store"]
        assert status["quota_bytes"] == quota and 0 < status["used_bytes"] <= quota
        from edged.cli.status_text import format_status

        assert "store     " in format_status(d.ctl({"op": "status"}))

        # over the quota: the versions that serve or are a fallback leave no room
        big = distinct(fg.yolox(), 1)
        a = send(ports["serve"], "bigger.onnx", big, ctx)
        assert a["model_saved"] is False and "model store is full" in a["message"], a
        assert "max_store_bytes" in a["message"]
        for _ in range(3):
            send(ports["serve"], "bigger.onnx", big, ctx)
        assert d.log().count("model store is full") == 1  # once per client and minute
        assert np.allclose(f.detect_raw(x)[0], want, atol=1e-3)  # the old one serves on
        assert metric(metrics(d), "edged_frigate_transfers_total",
                      outcome="refused_quota") == 4
        f.close()
    finally:
        ctx.term()
        d.stop()
    # a restart finds a consistent index and serves the same models without a transfer
    d = Daemon(cfg, tmp_path)
    try:
        index2, folders2, _ = store_state(tmp_path)
        assert index2 == index and folders2 == folders
        f = detect(ports["serve"], "served.onnx", fg.yolox(), served)
        assert f.ready and f.events.transfers == 0
        assert np.allclose(f.detect_raw(x)[0], want, atol=1e-3)
        f.close()
    finally:
        d.stop()


def test_the_pace_refuses_a_third_new_model_a_minute_and_a_frigate_start_stays_inside(
        tmp_path: Path) -> None:
    ports = {k: free_port() for k in ("serve", "flood", "paced")}
    d = Daemon(config(tmp_path, ports, 64 << 20), tmp_path, metrics=True)
    ctx = zmq.Context()
    g = fg.ssd_openvino()
    try:
        # four Frigate detectors start at once with the same model, then all time out
        # and handshake again: one new file, three of the same bytes, nothing paced
        dets: list[FrigateDetector] = []

        def start() -> None:
            dets.append(detect(ports["paced"], "ssd.onnx", g, g.data))

        threads = [threading.Thread(target=start) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(f.ready for f in dets), [f.events for f in dets]
        for f in dets:
            f._reset()  # what the plugin does after an inference timeout
            assert f.ready and f.events.handshakes == 2
            f.close()
        text = metrics(d)
        assert metric(text, "edged_frigate_transfers_total", outcome="refused_pace") == 0
        assert metric(text, "edged_frigate_transfers_total", outcome="stored") == 1
        # a second new model is inside the pace of 2 a minute; a third is refused
        assert send(ports["paced"], "v2.onnx", distinct(g, 2), ctx)["model_saved"] is True
        a = send(ports["paced"], "v3.onnx", distinct(g, 3), ctx)
        assert a["model_saved"] is False and "transfers_per_minute = 2" in a["message"], a
        send(ports["paced"], "v4.onnx", distinct(g, 4), ctx)
        assert d.log().count("new model files a minute") == 1  # logged once a minute
        # bytes it has stored already are not a new model: served, not paced
        assert send(ports["paced"], "again.onnx", g.data, ctx)["model_loaded"] is True
        # another endpoint has its own pace; the daemon serves on
        assert send(ports["serve"], "other.onnx", distinct(g, 5), ctx)["model_saved"] is True
    finally:
        ctx.term()
        d.stop()
