"""The ``[governor]`` table: sensors, thresholds with hysteresis, and each level's actions.

Why levels are data: boards differ (a Pi throttles at 80 °C, an Orin's passive trip is
99 °C), so thresholds and actions are config; ``levels = "auto"`` derives them from the
board's own first passive trip point so a default config is sensible everywhere.
Every problem names its key (``governor.levels[1].exit_c``) via :class:`edged.config.schema.Table`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from edged.config.governor_energy import EnergyConfig
from edged.config.schema import Table, non_negative, positive

STALE_POLICIES = ("hot", "ignore", "hold")
#: how the ladder step is chosen: the level's step, ``predicted`` (the level's or the
#: heaviest rung whose equilibrium stays below the first threshold, whichever is lighter),
#: ``mpc`` (a plan over the next minutes against ``limit_c``; docs/governor.md), or
#: ``auto`` (the default): ``mpc`` with the auto levels, ``levels`` with configured ones,
#: so a ``[[governor.levels]]`` table written for the levels keeps its meaning
POLICIES = ("auto", "levels", "predicted", "mpc")
FORECAST_MODELS = ("linear", "first_order")
#: first_order fits a curve, which needs a longer window than a slope does.
FIRST_ORDER_WINDOW_S = 60.0
#: consecutive samples a forecast must persist before it escalates, per model.
DEFAULT_FORECAST_PERSIST = {"linear": 1, "first_order": 5}
#: swap_min_interval_s = "auto" is this many dwell_s (50 s at the default 5 s dwell):
#: a flap near a threshold lasts at least a dwell (to relax) plus the time to re-heat,
#: so ten dwells cover it and a heat-up/cool-down cycle costs at most one swap down
#: and one up per level (docs/governor.md "Swap budget").
SWAP_INTERVAL_DWELLS = 10.0

#: Without a passive trip point the auto levels assume this trip: the Raspberry Pi's
#: hard limit, which gives the documented 70 °C / 80 °C fallback thresholds.
FALLBACK_TRIP_C = 85.0
AUTO_WARM_BELOW_TRIP_C = 15.0
AUTO_HOT_BELOW_TRIP_C = 5.0
#: with ``mpc`` the auto ``hot`` level is a backstop just under the trip: mpc plans to stay
#: 1 °C below ``limit_c`` (the trip by default), so a reading this close means a plan
#: missed, and its batch cap does not engage where mpc holds the board by design
AUTO_HOT_BELOW_TRIP_MPC_C = 0.5
AUTO_EXIT_BELOW_ENTER_C = 5.0
DEFAULT_EXIT_BELOW_ENTER_C = 5.0
BASE_LEVEL = "normal"


@dataclass(frozen=True)
class LevelConfig:
    """One governor level: what makes it apply (triggers) and what it does (actions).

    Triggers (any one enters the level; the level is left only when all are below their
    exit values): ``enter_c``/``exit_c`` on temperature, ``enter_w``/``exit_w`` on the
    window-averaged total power, ``battery_below`` (ratio, only while on battery).
    """

    name: str
    enter_c: float | None = None
    exit_c: float | None = None
    enter_w: float | None = None
    exit_w: float | None = None
    battery_below: float | None = None
    ladder_steps: int = 0
    max_batch_size: int | None = None
    max_rate_hz: float | None = None
    shed_priority_above: int | None = None
    #: models whose requests go to the [offload] server while this level holds
    offload: tuple[str, ...] = ()

    @property
    def has_trigger(self) -> bool:
        return (
            self.enter_c is not None or self.enter_w is not None or self.battery_below is not None
        )

    @classmethod
    def from_table(cls, t: Table) -> LevelConfig:
        name = t.get("name", str, check=lambda v: None if v.strip() else "must not be empty")
        enter_c = t.get("enter_c", float, None)
        exit_c = t.get("exit_c", float, None)
        enter_w = t.get("enter_w", float, None, check=positive)
        exit_w = t.get("exit_w", float, None, check=non_negative)
        battery_below = t.get(
            "battery_below",
            float,
            None,
            check=lambda v: None if 0 < v <= 1 else "must be a ratio in (0, 1], e.g. 0.2 for 20 %",
        )
        ladder_steps = t.get("ladder_steps", int, 0, check=non_negative)
        max_batch_size = t.get("max_batch_size", int, None, check=positive)
        max_rate_hz = t.get("max_rate_hz", float, None, check=positive)
        shed = t.get("shed_priority_above", int, None, check=non_negative)
        offload = t.get_list("offload", str, [])
        t.done()
        if exit_c is not None and enter_c is None:
            t.problem("exit_c", "given without enter_c")
            exit_c = None
        elif enter_c is not None:
            if exit_c is None:
                exit_c = enter_c - DEFAULT_EXIT_BELOW_ENTER_C
            elif exit_c >= enter_c:
                t.problem(
                    "exit_c", f"must be below enter_c ({enter_c}) for hysteresis; got {exit_c}"
                )
                exit_c = enter_c - DEFAULT_EXIT_BELOW_ENTER_C
        if exit_w is not None and enter_w is None:
            t.problem("exit_w", "given without enter_w")
            exit_w = None
        elif enter_w is not None:
            if exit_w is None:
                exit_w = enter_w * 0.9
            elif exit_w >= enter_w:
                t.problem(
                    "exit_w", f"must be below enter_w ({enter_w}) for hysteresis; got {exit_w}"
                )
                exit_w = enter_w * 0.9
        return cls(
            name=name or "?",
            enter_c=enter_c,
            exit_c=exit_c,
            enter_w=enter_w,
            exit_w=exit_w,
            battery_below=battery_below,
            ladder_steps=ladder_steps,
            max_batch_size=max_batch_size,
            max_rate_hz=max_rate_hz,
            shed_priority_above=shed,
            offload=tuple(offload or ()),
        )


def auto_levels(trip_c: float | None, max_batch_size: int | None = 1,
                mpc: bool = False) -> list[LevelConfig]:
    """Levels from the board's first passive trip (or :data:`FALLBACK_TRIP_C`).

    ``warm``: one ladder step at trip − 15 °C; ``hot``: two steps and a batch cap at
    trip − 5 °C (``mpc``: trip − 0.5 °C, a backstop: :data:`AUTO_HOT_BELOW_TRIP_MPC_C`);
    each left 5 °C below its entry. The kernel's own throttling starts at the trip, so
    edged acts first and the kernel never has to.
    """
    trip = FALLBACK_TRIP_C if trip_c is None else trip_c
    warm = trip - AUTO_WARM_BELOW_TRIP_C
    hot = trip - (AUTO_HOT_BELOW_TRIP_MPC_C if mpc else AUTO_HOT_BELOW_TRIP_C)
    return [
        LevelConfig(BASE_LEVEL),
        LevelConfig("warm", enter_c=warm, exit_c=warm - AUTO_EXIT_BELOW_ENTER_C, ladder_steps=1),
        LevelConfig(
            "hot",
            enter_c=hot,
            exit_c=hot - AUTO_EXIT_BELOW_ENTER_C,
            ladder_steps=2,
            max_batch_size=max_batch_size,
        ),
    ]


def with_base(levels: list[LevelConfig]) -> list[LevelConfig]:
    """The level list as the policy uses it: index 0 is a base level without triggers.

    A configured first level with no trigger *is* the base (it may be renamed or carry
    actions); otherwise an implicit ``normal`` with no actions is put in front.
    """
    if levels and not levels[0].has_trigger:
        return list(levels)
    return [LevelConfig(BASE_LEVEL), *levels]


@dataclass(frozen=True)
class GovernorConfig:
    enabled: bool = False
    sysfs_root: str = "/"
    interval_s: float = 1.0
    sensors: tuple[str, ...] = ()  # globs over sensor names; () = all thermal zones
    ignore_sensors: tuple[str, ...] = ()
    stale_policy: str = "hot"
    dwell_s: float = 5.0
    forecast_s: float = 0.0
    forecast_window_s: float = 10.0
    forecast_model: str = "first_order"
    forecast_persist: int = 1
    forecast_settle_s: float = 10.0
    swap_min_interval_s: float = SWAP_INTERVAL_DWELLS * 5.0
    predict: bool = False
    #: one of :data:`POLICIES`; ``predict = true`` is the older spelling of "predicted";
    #: :attr:`chosen_policy` is what runs
    policy: str = "auto"
    #: the temperature mpc keeps below: None = the passive trip (else the fallback, 85 °C)
    limit_c: float | None = None
    power_budget_w: float | None = None
    power_budget_exit_w: float | None = None
    power_window_s: float = 10.0
    battery_hysteresis: float = 0.05
    nvml: bool = True
    #: None = derive from the board's trip points when the Governor starts ("auto").
    levels: tuple[LevelConfig, ...] | None = None
    auto_max_batch_size: int | None = 1
    #: ``[governor.energy]``: a budget over a mission (``governor/energy.py``)
    energy: EnergyConfig = field(default_factory=EnergyConfig)

    @property
    def chosen_policy(self) -> str:
        """The policy that runs: ``auto`` is ``mpc`` with the auto levels, else ``levels``."""
        if self.predict:
            return "predicted"
        if self.policy == "auto":
            return "mpc" if self.levels is None else "levels"
        return self.policy

    def at_trip(self, trip_c: float) -> GovernorConfig:
        """This config with ``levels = "auto"`` made explicit at ``trip_c`` (a replay, the
        simulator), its policy resolved first so the auto levels keep choosing ``mpc``."""
        if self.levels is not None:
            return self
        policy = self.chosen_policy
        levels = auto_levels(trip_c, self.auto_max_batch_size, mpc=policy == "mpc")
        return replace(self, policy=policy, levels=tuple(levels))

    @classmethod
    def from_table(cls, t: Table) -> GovernorConfig:
        """Parse ``[governor]``; an absent or empty table means the governor is off."""
        present = bool(t.data)
        enabled = t.get("enabled", bool, present)
        root = t.get_path("sysfs_root", "/")
        interval_s = t.get("interval_s", float, 1.0, check=positive)
        sensors = t.get_list("sensors", str, [])
        ignore = t.get_list("ignore_sensors", str, [])
        stale_policy = t.get("stale_policy", str, "hot", choices=STALE_POLICIES)
        dwell_s = t.get("dwell_s", float, 5.0, check=non_negative)
        forecast_s = t.get("forecast_s", float, 0.0, check=non_negative)
        forecast_model = t.get("forecast_model", str, "first_order", choices=FORECAST_MODELS)
        model = forecast_model or "first_order"
        default_window = FIRST_ORDER_WINDOW_S if model == "first_order" else 10.0
        forecast_window_s = t.get("forecast_window_s", float, default_window, check=positive)
        forecast_persist = t.get(
            "forecast_persist", int, DEFAULT_FORECAST_PERSIST[model], check=positive
        )
        forecast_settle_s = t.get("forecast_settle_s", float, 10.0, check=non_negative)
        swap_raw = t.data.get("swap_min_interval_s", "auto")
        if isinstance(swap_raw, str):
            t.get("swap_min_interval_s", str, "auto", choices=("auto",))
            swap_min_interval_s = None
        else:
            swap_min_interval_s = t.get("swap_min_interval_s", float, None, check=non_negative)
        predict = t.get("predict", bool, False)
        policy = t.get("policy", str, "predicted" if predict else "auto", choices=POLICIES)
        if predict and policy not in (None, "predicted", "auto"):
            t.problem("policy", f"{policy!r} with predict = true (the older spelling of "
                      'policy = "predicted"): give one')
        limit_c = t.get("limit_c", float, None)
        budget = t.get("power_budget_w", float, None, check=positive)
        budget_exit = t.get("power_budget_exit_w", float, None, check=non_negative)
        power_window_s = t.get("power_window_s", float, 10.0, check=positive)
        battery_h = t.get(
            "battery_hysteresis",
            float,
            0.05,
            check=lambda v: None if 0 <= v < 1 else "must be a ratio in [0, 1)",
        )
        nvml = t.get("nvml", bool, True)
        auto_batch = t.get("auto_max_batch_size", int, 1, check=positive)
        energy = EnergyConfig.from_table(t.table("energy"))
        levels: tuple[LevelConfig, ...] | None = None
        raw = t.data.get("levels")
        if raw is None or isinstance(raw, str):
            t.get("levels", str, "auto", choices=("auto",))
        else:
            parsed = [LevelConfig.from_table(lt) for lt in t.tables("levels")]
            levels = tuple(with_base(parsed)) if parsed else None
            if not parsed and isinstance(raw, list):
                t.problem("levels", 'empty; give [[governor.levels]] tables or levels = "auto"')
            _check_levels(t, parsed)
        t.done()
        if budget_exit is not None and budget is None:
            t.problem("power_budget_exit_w", "given without power_budget_w")
        elif budget is not None:
            if budget_exit is None:
                budget_exit = budget * 0.9
            elif budget_exit >= budget:
                t.problem("power_budget_exit_w", f"must be below power_budget_w ({budget})")
                budget_exit = budget * 0.9
        return cls(
            enabled=bool(enabled),
            sysfs_root=str(root) if root is not None else "/",
            interval_s=interval_s or 1.0,
            sensors=tuple(sensors or ()),
            ignore_sensors=tuple(ignore or ()),
            stale_policy=stale_policy or "hot",
            dwell_s=dwell_s if dwell_s is not None else 5.0,
            forecast_s=forecast_s or 0.0,
            forecast_window_s=forecast_window_s or default_window,
            forecast_model=model,
            forecast_persist=forecast_persist or DEFAULT_FORECAST_PERSIST[model],
            forecast_settle_s=forecast_settle_s if forecast_settle_s is not None else 10.0,
            swap_min_interval_s=(
                swap_min_interval_s
                if swap_min_interval_s is not None
                else SWAP_INTERVAL_DWELLS * (dwell_s if dwell_s is not None else 5.0)
            ),
            predict=bool(predict),
            policy=policy or "auto",
            limit_c=limit_c,
            power_budget_w=budget,
            power_budget_exit_w=budget_exit,
            power_window_s=power_window_s or 10.0,
            battery_hysteresis=battery_h if battery_h is not None else 0.05,
            nvml=bool(nvml),
            levels=levels,
            auto_max_batch_size=auto_batch,
            energy=energy,
        )


def _check_levels(t: Table, levels: list[LevelConfig]) -> None:
    """Names unique and not the reserved base name; thresholds ordered by severity."""
    seen: dict[str, int] = {}
    for i, lv in enumerate(levels):
        key = f"levels[{i}].name"
        if lv.name in seen:
            t.problem(key, f"duplicate level name {lv.name!r} (also levels[{seen[lv.name]}])")
        seen.setdefault(lv.name, i)
        if i > 0 and not lv.has_trigger:
            t.problem(
                f"levels[{i}]",
                "has no trigger (enter_c, enter_w or battery_below); only the first level may",
            )
    if levels and levels[0].has_trigger and BASE_LEVEL in seen:
        t.problem(
            f"levels[{seen[BASE_LEVEL]}].name",
            f"{BASE_LEVEL!r} is the implicit base level when the first level has a trigger",
        )
    _check_order(t, levels, "enter_c", increasing=True)
    _check_order(t, levels, "enter_w", increasing=True)
    _check_order(t, levels, "battery_below", increasing=False)


def _check_order(t: Table, levels: list[LevelConfig], attr: str, *, increasing: bool) -> None:
    prev: tuple[int, float] | None = None
    for i, lv in enumerate(levels):
        v = getattr(lv, attr)
        if v is None:
            continue
        if prev is not None and (v <= prev[1] if increasing else v >= prev[1]):
            order = "greater" if increasing else "less"
            t.problem(
                f"levels[{i}].{attr}",
                f"must be {order} than levels[{prev[0]}].{attr} ({prev[1]}): "
                "levels go from normal to most severe",
            )
        prev = (i, v)
