"""Load as a ladder input (``edged.server.overload``): the rule on its own, its config,
and the real daemon stepping a model down while its answers come too close to their
deadlines and back up once they no longer do, beside a model that has it off."""

from __future__ import annotations

import threading
import time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.configs import config, model_table, person_config, variant
from support.waits import wait_until

from edged.cli.status_text import format_status
from edged.config.file import parse_config
from edged.config.overload import OverloadConfig
from edged.errors import ConfigError
from edged.server.overload import MIN_ANSWERS, UNKNOWN_COST_RATIO, decide

CFG = OverloadConfig(step_down=True, down_at=0.6, up_at=0.4, dwell_s=10.0)


# -- the rule ------------------------------------------------------------------------------
def test_a_quarter_of_the_answers_near_their_deadline_steps_down_one_rung() -> None:
    uses = [0.3] * 15 + [0.7] * 5  # 25 % at 0.6 or more
    assert decide(CFG, uses, 0, 3, 1.2, held_s=0.0) == (
        1, "25% of 20 answers used 60% or more of their deadline")
    assert decide(CFG, uses, 1, 3, 1.2, held_s=0.0)[0] == 2  # type: ignore[index]


def test_no_step_down_on_a_tail_few_answers_or_the_last_rung() -> None:
    assert decide(CFG, [0.3] * 16 + [0.9] * 4, 0, 3, 1.2, 0.0) is None  # 20 %: a tail
    few = [0.9] * (MIN_ANSWERS - 1)
    assert decide(CFG, few, 0, 3, 1.2, 0.0) is None
    assert decide(CFG, [1.5] * 40, 2, 3, 1.2, 100.0) is None  # nothing lighter


def test_step_up_waits_for_the_dwell_and_for_the_heavier_rung_to_fit() -> None:
    calm = [0.2] * 40
    assert decide(CFG, calm, 1, 3, 1.5, held_s=9.9) is None
    # p95 0.2 x 1.5 = 0.3 < 0.4: the heavier rung would keep the deadlines
    got = decide(CFG, calm, 1, 3, 1.5, held_s=10.0)
    assert got is not None and got[0] == 0 and "would use 30%" in got[1]
    # p95 0.2 x 2.5 = 0.5: it would not
    assert decide(CFG, calm, 1, 3, 2.5, held_s=10.0) is None
    assert decide(CFG, calm, 0, 3, 1.5, held_s=10.0) is None  # already the heaviest


def test_no_requests_with_a_deadline_for_a_window_steps_up() -> None:
    assert decide(CFG, [], 2, 3, UNKNOWN_COST_RATIO, held_s=10.0) == (
        1, "no request with a deadline for 2 s")
    # ... a whole window of none: not a look cut short by the settling after a change
    assert decide(CFG, [], 2, 3, UNKNOWN_COST_RATIO, held_s=10.0, whole=False) is None


# -- the config ----------------------------------------------------------------------------
def _parse(tmp: Path, model_extra: str) -> Any:
    text = config(tmp, models=[model_table(
        "det", [variant("a", backend="null"), variant("b", backend="null")],
        extra=model_extra)]).read_text()
    return parse_config(tomllib.loads(text), tmp / "edged.toml")


def test_off_for_a_native_model_unless_its_table_says_so(tmp_path: Path) -> None:
    assert _parse(tmp_path, "").model("det").overload.step_down is False
    on = _parse(tmp_path, "[models.overload]\nstep_down = true\ndwell_s = 3\n").model("det")
    assert on.overload == OverloadConfig(step_down=True, dwell_s=3.0)


def test_a_frigate_endpoints_detector_steps_down_unless_it_says_not_to(
        tmp_path: Path) -> None:
    data = tomllib.loads(person_config(tmp_path).read_text())
    data.setdefault("server", {})["frigate"] = [{"endpoint": "tcp://127.0.0.1:1",
                                                 "model": "person"}]
    assert parse_config(data, tmp_path / "x.toml").model("person").overload.step_down is True
    data["models"][0]["overload"] = {"step_down": False}
    assert parse_config(data, tmp_path / "x.toml").model("person").overload.step_down is False


@pytest.mark.parametrize(("extra", "key", "says"), [
    ("up_at = 0.7", "up_at", "must be below down_at"),
    ("down_at = 1.5", "down_at", "share of the deadline"),
    ("dwell_s = -1", "dwell_s", ">= 0"),
    ("window_s = 0", "window_s", "> 0"),
    ('step_down = "yes"', "step_down", ""),
    ("steps = true", "steps", ""),
])
def test_bad_overload_keys_are_named(tmp_path: Path, extra: str, key: str, says: str) -> None:
    with pytest.raises(ConfigError) as e:
        _parse(tmp_path, f"[models.overload]\n{extra}\n")
    assert f"overload.{key}" in str(e.value) and says in str(e.value)


# -- the daemon ----------------------------------------------------------------------------
def _two_rungs(name: str, step_down: bool) -> str:
    """A heavy rung of 40 ms a request and a light one of 2 ms (null backends: the time is
    a sleep, so the two models do not compete for the test machine's cores)."""
    return model_table(
        name, [variant("heavy", backend="null", options={"delay_ms": 40}),
               variant("light", backend="null", options={"delay_ms": 2})],
        max_batch_size=1, max_queue=64,
        extra=f"[models.overload]\nstep_down = {str(step_down).lower()}\ndwell_s = 1.0\n")


def _model(d: Any, name: str) -> dict[str, Any]:
    return next(m for m in d.ctl({"op": "status"})["models"] if m["name"] == name)


def test_the_daemon_steps_down_under_deadline_pressure_and_back_up_when_it_ends(
        make_daemon: Any, tmp_path: Path) -> None:
    d = make_daemon(config(tmp_path, models=[_two_rungs("det", True),
                                             _two_rungs("plain", False)]))
    x = np.zeros((1, 4), np.float32)
    with d.client() as c:  # served inputs: what the light rung is checked on
        for _ in range(4):
            assert c.infer("det", x).ok
    wait_until(lambda: "standby model=det variant=light held" in d.log(), timeout=30,
               what="the light rung opened and checked in the background")
    stop = threading.Event()
    statuses: dict[str, list[str]] = {"det": [], "plain": []}

    def client(model: str) -> None:
        # six requests in flight on a 40 ms rung: ~240 ms each against a 150 ms deadline
        with d.client() as c:
            while not stop.is_set():
                r = c.infer(model, x, timeout_ms=150, raise_on_error=False, timeout_s=10)
                statuses[model].append(str(r.header.get("status")))

    threads = [threading.Thread(target=client, args=(m,), daemon=True)
               for m in ("det", "plain") for _ in range(6)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: _model(d, "det")["active_variant"] == "light", timeout=30,
                   what="det to step down to its light rung")
        det = _model(d, "det")
        assert det["overload"]["asks"] == "light"
        assert "of their deadline" in det["overload"]["reason"]
        assert det["last_swap"]["reason"].startswith("overload: ")
        assert det["last_swap"]["standby"] is True, det["last_swap"]  # a switch
        assert "load asks for light: " in format_status(d.ctl({"op": "status"}))
        # on the light rung the deadlines are kept: it stays there while the load lasts
        n = len(statuses["det"])
        wait_until(lambda: len(statuses["det"]) > n + 200, timeout=30, what="200 answers")
        after = statuses["det"][n + 50:]
        assert after.count("OK") >= 0.95 * len(after), after  # a stall of the test machine
        assert _model(d, "det")["active_variant"] == "light"
    finally:
        stop.set()
        for t in threads:
            t.join(15)
    plain = _model(d, "plain")
    assert plain["active_variant"] == "heavy" and plain["overload"] is None
    assert "DEADLINE_EXCEEDED" in statuses["plain"]  # the same load, left where it was
    # no request with a deadline for a window after the dwell: back to the heavy rung
    wait_until(lambda: _model(d, "det")["active_variant"] == "heavy", timeout=30,
               what="det to step back up")
    back = _model(d, "det")["last_swap"]
    assert "no request with a deadline" in back["reason"] and back["standby"] is True, back
    assert "standby model=plain" not in d.log()  # a model that walks no ladder holds none
    assert "overload: model=det asks for light (was heavy)" in d.log()


# -- the rule over time, on a model's real usage record ------------------------------------
class _Served:
    """What ``Overload.tick`` reads of a served model, with a real ``ModelUsage``."""

    def __init__(self, cfg: OverloadConfig) -> None:
        from types import SimpleNamespace

        from edged.model.usage import ModelUsage

        self.name = "det"
        self.cfg = SimpleNamespace(overload=cfg)
        self.ready, self.swapping, self.active_index = True, False, 0
        self.variant_names = ["heavy", "light"]
        self.usage = ModelUsage()

    def answer(self, used: float, n: int = 1) -> None:
        now = time.monotonic()
        for _ in range(n):
            self.usage.answered(now - used * 0.2, now - used * 0.2 + 0.2)


def test_held_down_while_answers_keep_coming_and_up_only_when_they_stop() -> None:
    from edged.server.overload import SETTLE_S, Overload

    m = _Served(OverloadConfig(step_down=True, dwell_s=0.5, window_s=0.5))
    m.usage.computed("heavy", 1, 0.04)
    ov = Overload()
    ov.tick([m], time.monotonic())  # first sight of the model
    time.sleep(SETTLE_S + 0.05)
    m.answer(0.9, 30)
    assert next(w for _, w in ov.tick([m], time.monotonic())).startswith("100% of 30")
    assert ov.index("det") == 1
    m.active_index = 1  # the swap happened
    m.usage.computed("light", 1, 0.002)
    end = time.monotonic() + SETTLE_S + 1.5
    while time.monotonic() < end:  # busy on the light rung: p95 0.5 x 20 = 10 > up_at
        m.answer(0.5, 5)
        assert ov.tick([m], time.monotonic()) == []
        time.sleep(0.05)
    assert ov.index("det") == 1
    time.sleep(0.6)  # nothing answered for a window
    got = ov.tick([m], time.monotonic())
    assert got and got[0][1] == "no request with a deadline for 0.5 s"
    assert ov.index("det") == 0


def test_the_standby_is_held_only_where_memory_allows(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor
    from types import SimpleNamespace

    from edged.model.open import Loaded
    from edged.model.standby import Standby

    artifact = tmp_path / "light.onnx"
    artifact.write_bytes(b"x" * 1024)
    closed: list[int] = []

    def loaded(index: int) -> Any:
        return Loaded(index, SimpleNamespace(path=artifact),  # type: ignore[arg-type]
                      SimpleNamespace(close=lambda: closed.append(index)), 0.0)  # type: ignore[arg-type]

    with ThreadPoolExecutor(1) as worker:
        roomy = Standby(worker, headroom_bytes=0)
        assert roomy.keep(loaded(1)) and roomy.index == 1
        assert roomy.take(0) is None and roomy.index == 1  # not the one asked for
        assert roomy.take(1).index == 1 and roomy.index is None
        assert roomy.keep(loaded(2)) and roomy.keep(loaded(0))  # the older one is closed
        tight = Standby(worker, headroom_bytes=1 << 60)
        assert not tight.keep(loaded(3)) and tight.index is None
    assert closed == [2, 3]
