"""The server split into rooms (issue 9): padding has one owner, the null backend lets
the model and batcher run without a runtime, reload planning is pure, an operator's
variant pin holds against the governor, and the governor is closed on reload and stop."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import MODELS, Daemon, digits_config
from sysfs_fixtures import wait_governor_steps
from test_governor_daemon import LEVELS

from edged.backends import backend_module
from edged.backends.base import run_batch
from edged.backends.null import NullBackend, Options
from edged.config import Limits, load_config, parse_config
from edged.errors import ConfigError, EdgedError
from edged.metrics import Metrics
from edged.model import Model, Result
from edged.protocol.request import InputMeta, Request
from edged.server.reload import plan_reload

SAMPLE = MODELS / "samples" / "digit7_196.png"


# -- padding: backends.base.run_batch is the one owner ------------------------------------

@pytest.mark.parametrize(("rows", "calls"), [(1, [1]), (3, [4]), (4, [4]), (6, [4, 4]),
                                             (9, [4, 4, 1])])
def test_run_batch_pads_and_splits_to_declared_sizes(rows: int, calls: list[int]) -> None:
    be = NullBackend(Options(shape=(-1, 3), batch_sizes=(1, 4)))
    x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
    out = run_batch(be, {"input": x})["output"]
    assert be.calls == calls
    np.testing.assert_array_equal(out, x)  # padding rows cut, order kept


def test_fixed_size_backend_refuses_other_sizes_itself() -> None:
    be = NullBackend(Options(batch_sizes=(2,)))
    with pytest.raises(ValueError, match="batch 3 is not one of"):
        be.run({"input": np.zeros((3, 4), np.float32)})
    assert run_batch(be, {"input": np.ones((3, 4), np.float32)})["output"].shape == (3, 4)


def test_dynamic_backend_gets_the_batch_as_is() -> None:
    be = NullBackend(Options())
    run_batch(be, {"input": np.zeros((7, 4), np.float32)})
    assert be.calls == [7]


# -- a model on the null backend, in process -----------------------------------------------

def null_config(tmp: Path, options: str = "", **model: Any) -> Any:
    extra = "".join(f"{k} = {v}\n" for k, v in model.items())
    text = f"""
[metrics]
listen = "off"
[[models]]
name = "echo"
max_batch_size = 8
{extra}
[[models.variants]]
name = "null"
backend = "null"
path = "unused"
[models.variants.options]
{options}
"""
    p = tmp / "null.toml"
    p.write_text(text)
    return load_config(p)


def test_model_batches_on_the_null_backend_and_answers_each_its_own(tmp_path: Path) -> None:
    cfg = null_config(tmp_path, 'delay_ms = 30\nbatch_sizes = [1, 2, 4, 8]')

    async def go() -> list[tuple[int, Result | EdgedError]]:
        m = Model(cfg.models[0], Metrics(), Limits())
        await m.load(0)
        got: list[tuple[int, Result | EdgedError]] = []
        done = asyncio.Event()

        def respond(i: int) -> Any:
            def f(outcome: Result | EdgedError) -> None:
                got.append((i, outcome))
                if len(got) == 6:
                    done.set()
            return f

        for i in range(6):
            x = np.full((1, 4), i, np.float32)
            req = Request(op="infer", id=i, model="echo",
                          inputs=[InputMeta(None, "raw", np.dtype("float32"), (1, 4), x)])
            m.submit(m.prepare(req), respond(i), arrival=time.monotonic())
        await asyncio.wait_for(done.wait(), 10)
        await m.close()
        return got

    got = asyncio.run(go())
    assert len(got) == 6
    batches = set()
    for i, outcome in got:
        assert isinstance(outcome, Result), outcome
        assert outcome.variant == "null"
        np.testing.assert_array_equal(dict(outcome.outputs)["output"], np.full((1, 4), i))
        batches.add(outcome.batch)
    assert max(batches) > 1  # the five that queued behind the first ran together


def test_null_backend_options_are_validated_with_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as ei:
        null_config(tmp_path, "shape = [4, 4]\nbatch_sizes = [4, 2]")
    text = "\n".join(ei.value.problems)
    assert "models[0].variants[0].options.shape" in text
    assert "models[0].variants[0].options.batch_sizes" in text
    assert backend_module("null").Options is Options


# -- reload planning is pure --------------------------------------------------------------

def test_plan_reload_names_added_changed_removed_and_restart_keys(tmp_path: Path) -> None:
    old = load_config(digits_config(tmp_path))
    text = digits_config(tmp_path, variants=("cnn-fp32", "cnn-int8")).read_text()
    new_raw = text.replace('[server]', '[server]\nendpoints = ["tcp://127.0.0.1:1"]')
    new_raw += """
[[models]]
name = "extra"
[[models.variants]]
name = "null"
backend = "null"
path = "unused"
"""
    import tomllib

    new = parse_config(tomllib.loads(new_raw), tmp_path / "edged.toml")
    plan = plan_reload(old, new)
    assert [m.name for m in plan.added] == ["extra"]
    assert [m.name for m in plan.changed] == ["digits"]
    assert plan.removed == []
    assert plan.needs_restart == ["server.endpoints"]
    assert plan_reload(new, old).removed == ["extra"]


# -- the daemon: operator pins and the governor's lifetime --------------------------------

def governed(tmp: Path, levels: str = "") -> Path:
    """The digits model with the governor on and no sensors at all (as on this machine)."""
    root = tmp / "empty-sysfs"
    root.mkdir(exist_ok=True)
    return digits_config(tmp, governor=f"""
[governor]
enabled = true
sysfs_root = "{root}"
interval_s = 0.2
swap_min_interval_s = 0  # these tests are about pins, not the swap budget
{levels}
""")


def variant_of(d: Daemon) -> str:
    with d.client() as c:
        r = c.infer("digits", SAMPLE, priority=0)  # the hot level sheds priority > 0
        assert r.ok, r.header
        return str(r.header["variant"])


def test_operator_swap_is_a_pin_the_governor_does_not_undo(make_daemon: Any,
                                                           tmp_path: Path) -> None:
    d = make_daemon(governed(tmp_path))
    r = d.ctl({"op": "swap", "model": "digits", "variant": "cnn-int8"})
    assert r["status"] == "OK", r
    assert r["pin"]["variant"] == "cnn-int8" and r["pin"]["by"] == "operator"
    assert variant_of(d) == "cnn-int8"
    wait_governor_steps(lambda: d.ctl({"op": "status"}), 4)  # ticks at level normal
    assert variant_of(d) == "cnn-int8"
    m = d.ctl({"op": "status"})["models"][0]
    assert m["pin"]["variant"] == "cnn-int8" and m["active_variant"] == "cnn-int8"
    assert "from=cnn-int8 to=cnn-fp32" not in d.log()
    r = d.ctl({"op": "swap", "model": "digits", "variant": "auto"})
    assert r["status"] == "OK" and r["pin"] is None
    assert variant_of(d) == "cnn-fp32"
    assert d.ctl({"op": "status"})["models"][0]["pin"] is None


def test_a_more_severe_level_overrides_the_pin_until_it_relaxes(make_daemon: Any,
                                                               tmp_path: Path) -> None:
    d = make_daemon(governed(tmp_path, LEVELS))
    assert d.ctl({"op": "swap", "model": "digits", "variant": "cnn-int8"})["status"] == "OK"
    assert d.ctl({"op": "level", "level": "hot"})["status"] == "OK"
    end = time.monotonic() + 20
    while variant_of(d) != "small-fp32" and time.monotonic() < end:
        time.sleep(0.1)
    assert variant_of(d) == "small-fp32"
    r = d.ctl({"op": "swap", "model": "digits", "variant": "cnn-int8"})
    assert "needs at least small-fp32" in r["held_by_governor"]
    assert d.ctl({"op": "level", "level": "auto"})["status"] == "OK"
    end = time.monotonic() + 20
    while variant_of(d) != "cnn-int8" and time.monotonic() < end:
        time.sleep(0.1)
    assert variant_of(d) == "cnn-int8"  # the pin applies again, not the heaviest rung


def test_unknown_variant_pin_is_not_found(make_daemon: Any, tmp_path: Path) -> None:
    d = make_daemon(governed(tmp_path))
    r = d.ctl({"op": "swap", "model": "digits", "variant": "nope"})
    assert r["status"] == "NOT_FOUND" and "no variant 'nope'" in r["error"]
    assert variant_of(d) == "cnn-fp32"


def test_governor_is_closed_on_every_reload_and_at_stop(make_daemon: Any,
                                                        tmp_path: Path) -> None:
    d = make_daemon(governed(tmp_path))
    for n in (1, 2):
        d.signal(signal.SIGHUP)
        end = time.monotonic() + 20
        while d.log().count("reload done") < n and time.monotonic() < end:
            time.sleep(0.05)
        assert d.log().count("governor closed") == n
    assert d.stop() == 0
    assert d.log().count("governor closed") == 3


def test_daemon_serves_the_null_backend(make_daemon: Any, tmp_path: Path) -> None:
    cfg = tmp_path / "null.toml"
    cfg.write_text("""
[metrics]
listen = "off"
[[models]]
name = "echo"
max_batch_size = 4
[[models.variants]]
name = "null"
backend = "null"
path = "unused"
[models.variants.options]
shape = [-1, 2]
batch_sizes = [4]
""")
    d = make_daemon(cfg)
    with d.client() as c:
        x = np.array([[1.5, -2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)
        r = c.infer("echo", x)
        assert r.ok, r.header
        np.testing.assert_array_equal(r.outputs["output"], x)
