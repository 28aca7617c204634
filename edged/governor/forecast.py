"""Temperature forecast by fitting a first-order heat-up curve.

Why not a straight line: under constant load a die temperature approaches an
equilibrium exponentially, ``T(t) = T_eq + c·exp(-t/τ)``. A line fitted over the first
seconds of a heat-up extrapolates the initial slope (0.6–0.7 °C/s on a Raspberry Pi 4)
that the curve never keeps, so a linear forecast jumps straight to the top level and then
flaps. Here, for each time constant on a geometric grid, ``T_eq`` and ``c`` are a linear
least-squares fit; the grid point with the smallest residual wins. That is cheap
(numpy, tens of samples × ~30 grid points), deterministic, and robust to 1 °C
quantisation because it uses the whole window.

The fast transient at a load step (the die jumps several °C in 2–3 s before the
heat sink's slow curve takes over) is not part of that curve: after a step (a rise of
``step_c`` within ``step_s``, or a jump of the total power by a quarter) the samples
before ``step + settle_s`` are dropped, and no forecast is made until the window again
spans half of ``window_s``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

#: τ grid, as multiples of the fit window: from short (a fast heat sink) to "a line".
TAU_GRID = tuple(float(x) for x in np.geomspace(0.1, 40.0, 32))
EQUILIBRIUM_MAX_WINDOWS = 5.0
STEP_C = 3.0
STEP_S = 3.0
POWER_STEP = 0.25
MIN_POWER_STEP_W = 0.5
POWER_AVG_S = 5.0  # power is compared as 5 s means: inference power is bursty


@dataclass(frozen=True)
class Fit:
    """The fitted curve at the newest sample."""

    temperature_c: float  # the fitted value now (smooths quantisation)
    equilibrium_c: float | None  # None when τ is many windows long: the data is ~a line
    tau_s: float
    slope_c_per_s: float  # d/dt of the fit now
    forecast_c: float  # the fit ``horizon_s`` ahead

    def to_dict(self) -> dict[str, float | None]:
        return {
            "fit_c": round(self.temperature_c, 2),
            "equilibrium_c": None if self.equilibrium_c is None else round(self.equilibrium_c, 2),
            "tau_s": round(self.tau_s, 1),
            "slope_c_per_s": round(self.slope_c_per_s, 4),
            "forecast_c": round(self.forecast_c, 2),
        }


def fit_first_order(ts: np.ndarray, temps: np.ndarray, horizon_s: float, span_s: float) -> Fit:
    """Best ``T_eq + c·exp(-(t - t_now)/τ)`` over the τ grid (scaled by ``span_s``).

    For a fixed τ the model is a straight line in ``e = exp(-(t - t_now)/τ)``, so every
    grid point is a closed-form simple regression; all of them are computed at once.
    """
    taus = np.asarray(TAU_GRID) * span_s
    e = np.exp(-(ts - ts[-1])[:, None] / taus[None, :])  # n × K, 1 at the newest sample
    de = e - e.mean(axis=0)
    dt = temps - temps.mean()
    sxx = np.einsum("ij,ij->j", de, de)
    sxy = de.T @ dt
    c = np.divide(sxy, sxx, out=np.zeros_like(sxy), where=sxx > 1e-12)
    sse = float(dt @ dt) - c * sxy
    k = int(np.argmin(sse + 1e-9 * np.arange(len(taus))))  # ties: the shortest τ
    tau, ck = float(taus[k]), float(c[k])
    t_eq = float(temps.mean() - ck * e[:, k].mean())
    # Beyond a few windows the equilibrium is an extrapolation, not an estimate.
    at_top = tau > EQUILIBRIUM_MAX_WINDOWS * span_s
    return Fit(
        temperature_c=t_eq + ck,
        equilibrium_c=None if at_top else t_eq,
        tau_s=tau,
        slope_c_per_s=-ck / tau,
        forecast_c=t_eq + ck * float(np.exp(-horizon_s / tau)),
    )


class FirstOrderForecast:
    """Online: ``update(t, temp, power)`` per sample returns a :class:`Fit` or None."""

    def __init__(self, window_s: float, horizon_s: float, settle_s: float) -> None:
        self.window_s = window_s
        self.horizon_s = horizon_s
        self.settle_s = settle_s
        self._points: deque[tuple[float, float]] = deque()
        self._power: deque[tuple[float, float]] = deque()
        self._ignore_before = float("-inf")
        self.last_step_at: float | None = None

    def update(self, t: float, temp: float, power: float | None = None) -> Fit | None:
        self._points.append((t, temp))
        while self._points and self._points[0][0] < t - max(self.window_s, STEP_S):
            self._points.popleft()
        if self._is_step(t, temp, power):
            self.last_step_at = t
            self._ignore_before = t + self.settle_s
        pts = [p for p in self._points if p[0] >= self._ignore_before and p[0] >= t - self.window_s]
        if len(pts) < 4 or pts[-1][0] - pts[0][0] < self.window_s / 2:
            return None
        arr = np.asarray(pts, dtype=float)
        return fit_first_order(arr[:, 0], arr[:, 1], self.horizon_s, self.window_s)

    def _is_step(self, t: float, temp: float, power: float | None) -> bool:
        recent = [v for s, v in self._points if s >= t - STEP_S]
        if recent and temp - min(recent) >= STEP_C:
            return True
        if power is None:
            return False
        self._power.append((t, power))
        while self._power[0][0] < t - 2 * POWER_AVG_S:
            self._power.popleft()
        new = [p for s, p in self._power if s > t - POWER_AVG_S]
        old = [p for s, p in self._power if s <= t - POWER_AVG_S]
        if not new or not old or self._power[0][0] > t - 2 * POWER_AVG_S + 1.5:
            return False  # not two full windows yet
        before, after = sum(old) / len(old), sum(new) / len(new)
        if abs(after - before) >= max(MIN_POWER_STEP_W, POWER_STEP * before):
            self._power.clear()
            return True
        return False


def linear_slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope (°C/s): a fit, not two points, so one noisy sample can't trigger."""
    n = len(points)
    mt = sum(p[0] for p in points) / n
    mv = sum(p[1] for p in points) / n
    den = sum((p[0] - mt) ** 2 for p in points)
    if den <= 0:
        return 0.0
    return sum((p[0] - mt) * (p[1] - mv) for p in points) / den


class LinearForecast:
    """``forecast_model = "linear"``: the slope over ``window_s``, once half of it is seen."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._temps: deque[tuple[float, float]] = deque()

    def update(self, t: float, temp: float) -> float | None:
        """The slope (°C/s) at ``t``, or None while the window is too short to believe."""
        self._temps.append((t, temp))
        while self._temps and self._temps[0][0] < t - self.window_s:
            self._temps.popleft()
        pts = list(self._temps)
        if len(pts) >= 3 and pts[-1][0] - pts[0][0] >= self.window_s / 2:
            return linear_slope(pts)
        return None


class ForecastGate:
    """A forecast escalates only once it has asked for more for ``persist`` samples running.

    Why: one noisy sample (or one steep second of a load step) must not swap a variant.
    """

    def __init__(self, persist: int) -> None:
        self.persist = persist
        self._streak = 0

    def reset(self) -> None:
        self._streak = 0

    def passes(self) -> bool:
        """Count one more sample asking for more; True once the streak is long enough."""
        self._streak += 1
        return self._streak >= self.persist
