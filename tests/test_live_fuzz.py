"""A bounded live fuzz against a real daemon; scripts/ops/fuzz runs it at scale.

A few thousand malformed, truncated, mutated, oversized and random multipart messages
(``edged.testing.fuzz``) while a valid client keeps doing real, checked inferences. The
daemon must not crash, must answer every message it can attribute to a sender (all
of them, on a ROUTER) with a status that message may legitimately get, must keep the
valid client correctly served, and its RSS must stay flat: under 20 % growth from
the end of warm-up (the first 10 % of messages) to the end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import zmq
from support.daemons import Daemon
from support.paths import MODELS

from edged.testing.fuzz.live import env_seed, fuzz_config, peak_rss, run_fuzz
from edged.testing.fuzz.messages import Generator

MESSAGES = 5000
RSS_GROWTH_BOUND_PCT = 20.0


@pytest.fixture
def fuzz_daemon(make_daemon: Any, tmp_path: Path) -> Daemon:
    d: Daemon = make_daemon(fuzz_config(tmp_path))
    return d


def test_live_fuzz_answers_everything_and_keeps_serving(fuzz_daemon: Daemon) -> None:
    d = fuzz_daemon
    rep = run_fuzz(d.tcp, d.ipc, d.proc.pid, MESSAGES, seed=env_seed())
    summary = json.dumps(rep.to_dict(), indent=1)
    assert rep.daemon_alive and d.proc.poll() is None, d.log()[-3000:]
    assert rep.messages == MESSAGES
    assert not rep.lost and not rep.late, summary
    assert not rep.unexpected, summary
    assert not rep.id_mismatch, summary
    # Every kind of hostile message was exercised and answered.
    assert set(rep.by_kind) == {k for k, _, _ in Generator(0).kinds}, summary
    assert sum(rep.statuses().values()) == MESSAGES
    assert rep.statuses()["INVALID_ARGUMENT"] > MESSAGES // 3
    assert rep.statuses()["INTERNAL"] == 0 and rep.statuses()["UNAVAILABLE"] == 0
    # Frames above MAXMSGSIZE never reach edged: libzmq drops the peer.
    assert rep.oversize_dropped == 10 and rep.oversize_answered == 0
    # The valid client was served, correctly, all along.
    assert not rep.valid_bad, summary
    assert rep.valid_ok >= 50, summary
    # Memory stays flat.
    assert rep.rss_growth_pct < RSS_GROWTH_BOUND_PCT, summary
    # Nothing a client sent made the daemon log an unhandled error.
    log = d.log()
    assert "Traceback" not in log and "unhandled error" not in log, log[-3000:]
    with d.client() as c:
        assert c.health().ok


JSON_EDGE_CASES = {
    "5000-digit integer": b'{"v":1,"op":"health","id":' + b"7" * 5000 + b"}",
    "nesting 20000 deep": b"[" * 20000 + b"]" * 20000,
}


@pytest.mark.parametrize("case", list(JSON_EDGE_CASES))
def test_headers_json_cannot_decode_are_still_answered(fuzz_daemon: Daemon, case: str) -> None:
    d = fuzz_daemon
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(d.tcp)
    try:
        s.send_multipart([JSON_EDGE_CASES[case]])
        assert s.poll(3000), "no reply"
        h = json.loads(s.recv_multipart()[0])
    finally:
        s.close()
    assert h["status"] == "INVALID_ARGUMENT"
    assert "Traceback" not in d.log()


def png_claiming_a_huge_chunk(claim: int) -> bytes:
    """A real sample PNG whose IDAT length field claims ``claim`` bytes (it has ~600)."""
    png = bytearray((MODELS / "samples" / "digit0_124.png").read_bytes())
    i = png.index(b"IDAT") - 4
    png[i:i + 4] = claim.to_bytes(4, "big")
    return bytes(png)


def test_a_png_claiming_a_huge_chunk_is_refused_without_allocating(fuzz_daemon: Daemon) -> None:
    d = fuzz_daemon
    before = peak_rss(d.proc.pid)
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(d.tcp)
    try:
        s.send_multipart([json.dumps({"v": 1, "id": "bomb", "model": "digits",
                                      "inputs": [{"encoding": "png"}]}).encode(),
                          png_claiming_a_huge_chunk(1 << 30)])
        assert s.poll(30000), "no reply"
        h = json.loads(s.recv_multipart()[0])
    finally:
        s.close()
    assert h["status"] == "INVALID_ARGUMENT" and h["id"] == "bomb"
    grew = peak_rss(d.proc.pid) - before
    assert grew < 256 << 20, f"peak RSS grew by {grew >> 20} MiB for a {600}-byte PNG"
