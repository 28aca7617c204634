"""An operator's variant pin (``edged ctl swap``) in the real daemon: the governor does
not undo it at its normal level, a more severe level overrides it only while that level
lasts, an unknown variant is NOT_FOUND; and the governor is closed on every reload and
at stop (no sensor handles leak across reloads)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from support.configs import digits_config
from support.daemons import Daemon
from support.governor import LEVELS
from support.paths import MODELS
from support.waits import wait_governor_steps, wait_until

SAMPLE = MODELS / "samples" / "digit7_196.png"


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
    wait_until(lambda: variant_of(d) == "small-fp32", 20, "the hot level's rung small-fp32",
               interval=0.1)
    r = d.ctl({"op": "swap", "model": "digits", "variant": "cnn-int8"})
    assert "needs at least small-fp32" in r["held_by_governor"]
    assert d.ctl({"op": "level", "level": "auto"})["status"] == "OK"
    # the pin applies again, not the heaviest rung
    wait_until(lambda: variant_of(d) == "cnn-int8", 20, "the pin cnn-int8 after the level",
               interval=0.1)


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
        wait_until(lambda n=n: d.log().count("reload done") >= n, 20, f"reload {n} done")
        assert d.log().count("governor closed") == n
    assert d.stop() == 0
    assert d.log().count("governor closed") == 3
