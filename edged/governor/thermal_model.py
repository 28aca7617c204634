"""Learn the board's thermal response and each variant's power; predict equilibria.

Why: waiting for a threshold to be crossed and then swapping means the device always
overshoots by its thermal lag. A first-order board model,
``τ·dT/dt = T_amb + R·P − T``, learned online from the governor's own samples, says
where the temperature *will settle* for a given power. With each variant's power learned
while it runs, the governor can pick the heaviest rung whose predicted equilibrium stays
below the first throttling threshold, before crossing it.

``P`` is the board's total power from the rails when the board has them. Without rails
(a Raspberry Pi) it is the summed compute duty cycle of the active variants (0..1 per
model), so ``R`` is then "°C per unit of duty" — the same arithmetic, other units.

The fit is ordinary least squares of ``ΔT/Δt`` (over ``LAG_S``, to average out 1 °C
quantisation) on ``[1, P, T]`` over the last ``HISTORY_S``, ridge-regularised so a
short history cannot produce wild coefficients. It needs power to have varied (idle vs
load) before it claims to know ``R``; until then :meth:`ThermalModel.params` is None.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

LAG_S = 10.0
REFIT_S = 10.0  # refit at most this often: the response changes over minutes
HISTORY_S = 1800.0
MIN_SAMPLES = 30
MIN_POWER_SPREAD = 0.15  # relative: (p90 − p10) / p90
RIDGE = 1e-3
DUTY_FLOOR = 0.05
EWMA = 0.1


@dataclass(frozen=True)
class ThermalParams:
    ambient_c: float
    rise_per_unit: float  # R: °C per W (rails) or per unit of duty (no rails)
    tau_s: float
    units: str  # "W" or "duty"

    def equilibrium(self, power: float) -> float:
        return self.ambient_c + self.rise_per_unit * power


class ThermalModel:
    """Online fit of ``τ·dT/dt = T_amb + R·P − T`` from (t, T, P) samples."""

    def __init__(self) -> None:
        self._samples: deque[tuple[float, float, float]] = deque()
        self.units = "W"
        self._params: ThermalParams | None = None
        self._fitted_at: float | None = None

    def add(self, t: float, temp: float, power: float, units: str) -> None:
        if units != self.units:
            self._samples.clear()
            self.units = units
            self._fitted_at = None
        self._samples.append((t, temp, power))
        while self._samples and self._samples[0][0] < t - HISTORY_S:
            self._samples.popleft()

    def params(self) -> ThermalParams | None:
        if not self._samples:
            return None
        now = self._samples[-1][0]
        if self._fitted_at is None or now - self._fitted_at >= REFIT_S or now < self._fitted_at:
            self._params = self._fit()
            self._fitted_at = now
        return self._params

    def _fit(self) -> ThermalParams | None:
        if len(self._samples) < MIN_SAMPLES:
            return None
        arr = np.asarray(self._samples, dtype=float)
        t, temp, power = arr[:, 0], arr[:, 1], arr[:, 2]
        hi, lo = np.percentile(power, 90), np.percentile(power, 10)
        if hi <= 0 or (hi - lo) / hi < MIN_POWER_SPREAD:
            return None
        # Pair each sample with the first one LAG_S later.
        j = np.searchsorted(t, t + LAG_S)
        ok = j < len(t)
        i, j = np.nonzero(ok)[0], j[ok]
        if len(i) < MIN_SAMPLES:
            return None
        dt = t[j] - t[i]
        y = (temp[j] - temp[i]) / dt
        csum_p = np.concatenate([[0.0], np.cumsum(power)])
        csum_t = np.concatenate([[0.0], np.cumsum(temp)])
        mean_p = (csum_p[j + 1] - csum_p[i]) / (j + 1 - i)
        mean_t = (csum_t[j + 1] - csum_t[i]) / (j + 1 - i)
        x = np.column_stack([np.ones_like(y), mean_p, mean_t])
        scale = np.abs(x).max(axis=0)
        xs = x / scale
        coef = np.linalg.solve(xs.T @ xs + RIDGE * np.eye(3), xs.T @ y) / scale
        a, b, c = (float(v) for v in coef)
        if c >= 0 or b <= 0:
            return None  # not a stable heating response (yet)
        tau = -1.0 / c
        return ThermalParams(ambient_c=a * tau, rise_per_unit=b * tau, tau_s=tau, units=self.units)


@dataclass
class VariantLoad:
    """What one variant of one model has been seen to draw (EWMA while active)."""

    power: float | None = None  # board total while it ran (W), or its duty (no rails)
    duty: float | None = None


class LoadBook:
    """Which variant of which model is active, its duty, and each variant's learned power."""

    def __init__(self) -> None:
        self.active: dict[str, tuple[int, float]] = {}  # model -> (variant index, duty)
        self.loads: dict[tuple[str, int], VariantLoad] = {}
        self.idle_power: float | None = None

    def observe(self, model: str, variant_index: int, duty: float) -> None:
        self.active[model] = (variant_index, min(max(duty, 0.0), 1.0))

    def duty_total(self) -> float:
        return sum(d for _, d in self.active.values())

    def learn(self, total_power: float | None) -> None:
        """Attribute this sample's power to the active variants (one EWMA step)."""
        busy = {m: (v, d) for m, (v, d) in self.active.items() if d >= DUTY_FLOOR}
        if total_power is not None and not busy:
            self.idle_power = _ewma(self.idle_power, total_power)
        for m, (v, d) in busy.items():
            load = self.loads.setdefault((m, v), VariantLoad())
            load.duty = _ewma(load.duty, d)
            load.power = _ewma(load.power, total_power if total_power is not None else d)

    def predicted_power(self, model: str, variant_index: int, rails: bool) -> float | None:
        """Board power (rails) or duty (no rails) if ``model`` ran this variant now."""
        load = self.loads.get((model, variant_index))
        if load is None or load.power is None:
            return None
        if not rails:
            others = sum(d for m, (_, d) in self.active.items() if m != model)
            return others + load.power
        return load.power


def _ewma(old: float | None, new: float) -> float:
    return new if old is None else old + EWMA * (new - old)


#: going back to a heavier rung needs its equilibrium this far below the limit, so a
#: prediction hovering at the limit does not swap back and forth.
MARGIN_C = 2.0


def choose_rung(
    predictions: list[float | None], active: int, limit_c: float, margin_c: float = MARGIN_C
) -> int:
    """Heaviest rung (index 0 = heaviest) whose predicted equilibrium is below ``limit_c``.

    A rung heavier than the active one must be predicted ``margin_c`` below the limit
    (hysteresis). A rung never seen running (None) is only chosen when it is lighter than
    the active one and every heavier rung is predicted too hot: exploring downwards is
    safe, upwards is not. When every known rung is too hot, the lightest is chosen.
    """
    for i, eq in enumerate(predictions):
        if eq is None:
            if i > active:
                return i
            continue
        if eq < limit_c - (margin_c if i < active else 0.0):
            return i
    return len(predictions) - 1
