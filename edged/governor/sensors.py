"""Read temperatures, power rails, battery and throttle flags from sysfs (and NVML).

Why a root directory: every sysfs path is joined under ``root`` so tests and replays can
point the governor at a directory of files written in the kernel's own formats; nothing
here is mocked in tests. Why by hand rather than psutil everywhere: psutil only looks at
the real ``/sys``, knows nothing of INA3221, RAPL or ``get_throttled``, and cannot tell a
power-gated zone (EAGAIN, normal) from a broken one. At the real root we still prefer
psutil for hwmon temperatures and the battery, as it follows more driver quirks.

Rules the policy relies on:

* A value that cannot be read is *absent*, never 0 (a 0 °C reading would un-throttle a
  hot device). Any exception while reading a sensor makes that sensor unavailable for
  this sample; :meth:`Sensors.sample` never raises.
* A sensor that read fine before and now fails (file gone, garbage, I/O error) is
  *stale*: the policy's ``stale_policy`` decides what that means. EAGAIN/ENODATA (an
  Orin ``cv*-thermal`` zone while the DLA is power-gated, a Wi-Fi zone while the link is
  down) and PermissionError are *unavailable* but not stale: nothing is wrong.
* Every status change is logged once, not once per second.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("edged.governor.sensors")

#: errnos that mean "no data right now" (power-gated block, link down), not "broken".
GATED_ERRNOS = frozenset({errno.EAGAIN, errno.ENODATA})

#: Plausible silicon temperatures; outside this a reading is garbage (jtop's offline
#: sentinel is -256 °C, some drivers return -40 °C or 0xFFFF... when a block is off).
MIN_PLAUSIBLE_C = -50.0
MAX_PLAUSIBLE_C = 200.0

RAPL_PERMISSION_MESSAGE = (
    "{path}: energy_uj is root-only since the PLATYPUS fix (CVE-2020-8694, Intel SA-00389); "
    "RAPL power is unavailable. To let a non-root edged read it, add a tmpfiles rule, e.g. "
    "/etc/tmpfiles.d/edged-rapl.conf: 'z /sys/class/powercap/intel-rapl:*/energy_uj 0444 - - -' "
    "(or a udev rule doing the same), or run edged with CAP_DAC_READ_SEARCH."
)

#: Raspberry Pi ``get_throttled`` bits (raspberrypi.com docs, "get_throttled").
THROTTLE_BITS: dict[str, int] = {
    "under_voltage": 0,
    "freq_capped": 1,
    "throttled": 2,
    "soft_temp_limit": 3,
    "under_voltage_since_boot": 16,
    "freq_capped_since_boot": 17,
    "throttled_since_boot": 18,
    "soft_temp_limit_since_boot": 19,
}

#: NVML clock event reasons that mean the GPU is being held back (pynvml constants).
NVML_REASONS: dict[str, int] = {
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake": 0x80,
}

#: Rails that represent the whole board; the first one present is the total.
TOTAL_RAILS = ("VDD_IN", "POM_5V_IN")
#: Rails already contained in another rail (AGX Orin: VDDQ_VDD2_1V8AO is inside
#: VIN_SYS_5V0), left out of the sum when the containing rail is present.
SUB_RAILS = {"VDDQ_VDD2_1V8AO": "VIN_SYS_5V0"}

# Sensor kinds, as recorded in Readings.kinds.
THERMAL = "thermal"
HWMON = "hwmon"
NVML = "nvml"
RAIL = "rail"
BATTERY = "battery"
THROTTLE = "throttle"
TEMPERATURE_KINDS = frozenset({THERMAL, HWMON, NVML})


# -- low-level reads -------------------------------------------------------------------------
def read_text(path: str) -> str:
    """One small sysfs attribute, stripped.

    os.read rather than Path.read_text: on Python 3.10 a buffered read of a zone that
    returns EAGAIN raises TypeError instead of OSError; the raw syscall gives the errno.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    return data.decode("ascii").strip()


def read_int(path: str) -> int:
    return int(read_text(path))


def classify_error(exc: BaseException) -> str:
    """'gated' (EAGAIN/ENODATA), 'denied' (PermissionError) or 'error' (anything else)."""
    if isinstance(exc, PermissionError):
        return "denied"
    if isinstance(exc, OSError) and exc.errno in GATED_ERRNOS:
        return "gated"
    return "error"


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _trailing_int(path: str) -> int:
    m = re.search(r"(\d+)$", os.path.basename(path))
    return int(m.group(1)) if m else -1


def _dedupe(name: str, taken: set[str] | dict[str, Any]) -> str:
    """Same sensor name twice (two ``acpitz`` zones, two ``nvme`` chips): suffix .1, .2."""
    if name not in taken:
        return name
    k = 1
    while f"{name}.{k}" in taken:
        k += 1
    return f"{name}.{k}"


def is_bogus_zone(zone_type: str) -> bool:
    """Zones known to report nonsense: Jetson ``PMIC-Die`` always reads 100 °C."""
    return "pmic" in zone_type.lower()


# -- data --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TripPoint:
    index: int
    temp_c: float
    type: str  # active | passive | hot | critical
    hyst_c: float | None


@dataclass(frozen=True)
class Readings:
    """One sample of every sensor. Absent keys mean "could not read", never 0."""

    timestamp: float  # the governor clock (monotonic by default)
    wall_time: float
    temperatures: dict[str, float] = field(default_factory=dict)  # name -> °C
    power: dict[str, float] = field(default_factory=dict)  # rail -> W
    total_power_w: float | None = None
    battery_ratio: float | None = None  # 0..1
    battery_plugged: bool | None = None
    throttled: dict[str, bool] = field(default_factory=dict)
    #: sensors that read fine before and now fail (not power-gating): see module doc.
    stale: frozenset[str] = frozenset()
    #: every known sensor without a value in this sample (includes ``stale``).
    unavailable: frozenset[str] = frozenset()
    #: name -> kind (thermal, hwmon, nvml, rail, battery, throttle) for every known sensor.
    kinds: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form for ``edged status`` and replays."""
        return {
            "timestamp": self.timestamp,
            "wall_time": self.wall_time,
            "temperatures": dict(self.temperatures),
            "power": dict(self.power),
            "total_power_w": self.total_power_w,
            "battery_ratio": self.battery_ratio,
            "battery_plugged": self.battery_plugged,
            "throttled": dict(self.throttled),
            "stale": sorted(self.stale),
            "unavailable": sorted(self.unavailable),
        }


@dataclass
class _Partial:
    """What one sample collects before the stale bookkeeping."""

    temperatures: dict[str, float] = field(default_factory=dict)
    power: dict[str, float] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    failures: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (class, text)
    throttled: dict[str, bool] = field(default_factory=dict)
    battery_ratio: float | None = None
    battery_plugged: bool | None = None
    rapl_total: float | None = None
    ina_total: float | None = None
    nvml_total: float | None = None

    def fail(self, name: str, kind: str, exc: BaseException) -> None:
        self.kinds[name] = kind
        self.failures[name] = (classify_error(exc), _describe(exc))


# -- thermal zones ----------------------------------------------------------------------------
def _zone_dirs(root: str) -> list[str]:
    dirs = glob.glob(os.path.join(root, "sys/class/thermal/thermal_zone*"))
    return sorted(dirs, key=_trailing_int)


def _zone_names(root: str) -> list[tuple[str, str | None]]:
    """(zone dir, unique name) for every non-bogus zone; name None if ``type`` is unreadable.

    Zones are named by ``type`` (numbering is not stable across boots or kernels).
    """
    out: list[tuple[str, str | None]] = []
    taken: set[str] = set()
    for d in _zone_dirs(root):
        try:
            ztype = read_text(os.path.join(d, "type"))
        except Exception:
            out.append((d, None))
            continue
        if not ztype or is_bogus_zone(ztype):
            continue
        name = _dedupe(ztype, taken)
        taken.add(name)
        out.append((d, name))
    return out


def _plausible_c(millic: int, path: str) -> float:
    c = millic / 1000.0
    if not MIN_PLAUSIBLE_C <= c <= MAX_PLAUSIBLE_C:
        raise ValueError(f"{path}: implausible temperature {c} °C")
    return c


def read_thermal_zones(root: str, out: _Partial) -> None:
    for d, name in _zone_names(root):
        if name is None:
            continue  # cannot name it, so cannot match it: it counts for nothing
        path = os.path.join(d, "temp")
        try:
            out.temperatures[name] = _plausible_c(read_int(path), path)
            out.kinds[name] = THERMAL
        except Exception as exc:
            out.fail(name, THERMAL, exc)


def read_trip_points(root: str) -> dict[str, list[TripPoint]]:
    """Trip points of every zone, by zone name; unreadable trips are skipped."""
    result: dict[str, list[TripPoint]] = {}
    for d, name in _zone_names(root):
        if name is None:
            continue
        trips: list[TripPoint] = []
        for tpath in sorted(glob.glob(os.path.join(d, "trip_point_*_temp")), key=_trip_index):
            n = _trip_index(tpath)
            try:
                temp_c = read_int(tpath) / 1000.0
                ttype = read_text(os.path.join(d, f"trip_point_{n}_type"))
            except Exception:
                continue
            try:
                hyst: float | None = read_int(os.path.join(d, f"trip_point_{n}_hyst")) / 1000.0
            except Exception:
                hyst = None
            trips.append(TripPoint(n, temp_c, ttype, hyst))
        result[name] = trips
    return result


def _trip_index(path: str) -> int:
    m = re.search(r"trip_point_(\d+)_temp$", path)
    return int(m.group(1)) if m else -1


def first_passive_trip_c(
    trips: dict[str, list[TripPoint]], counts: Callable[[str], bool] = lambda _n: True
) -> tuple[str, float] | None:
    """(zone, °C) of the lowest sane passive trip among zones that ``counts``.

    Zones list trips in any order and some carry placeholder trips (0 °C, 255 °C), so
    only 20..150 °C is believed.
    """
    best: tuple[str, float] | None = None
    for zone, tps in trips.items():
        if not counts(zone):
            continue
        for tp in tps:
            sane = tp.type == "passive" and 20.0 <= tp.temp_c <= 150.0
            if sane and (best is None or tp.temp_c < best[1]):
                best = (zone, tp.temp_c)
    return best


# -- hwmon temperatures -------------------------------------------------------------------------
def read_hwmon_sysfs(root: str, out: _Partial) -> None:
    """``/sys/class/hwmon/hwmon*/{name,temp*_input,temp*_label}`` (m°C), as psutil reads it."""
    taken: set[str] = set()
    for d in sorted(glob.glob(os.path.join(root, "sys/class/hwmon/hwmon*")), key=_trailing_int):
        try:
            chip = read_text(os.path.join(d, "name"))
        except Exception:
            chip = os.path.basename(d)
        inputs = glob.glob(os.path.join(d, "temp*_input"))
        for ipath in sorted(inputs, key=lambda p: _trailing_int(p.removesuffix("_input"))):
            n = _trailing_int(ipath.removesuffix("_input"))
            try:
                label = read_text(os.path.join(d, f"temp{n}_label")) or f"temp{n}"
            except Exception:
                label = f"temp{n}"
            name = _dedupe(f"{chip}/{label}", taken)
            taken.add(name)
            try:
                out.temperatures[name] = _plausible_c(read_int(ipath), ipath)
                out.kinds[name] = HWMON
            except Exception as exc:
                out.fail(name, HWMON, exc)


def read_hwmon_psutil(out: _Partial) -> None:
    """psutil at the real root; skipped when psutil would fall back to thermal zones."""
    if not glob.glob("/sys/class/hwmon/hwmon*/temp*_input"):
        return  # psutil would report the thermal zones again under other names
    import psutil

    try:
        chips = psutil.sensors_temperatures()
    except Exception as exc:  # some Jetson kernels make it raise on null zones
        log.debug("psutil.sensors_temperatures() failed: %s", _describe(exc))
        return
    taken: set[str] = set()
    for chip, entries in chips.items():
        for i, e in enumerate(entries):
            name = _dedupe(f"{chip}/{e.label or f'temp{i + 1}'}", taken)
            taken.add(name)
            if e.current is None or not MIN_PLAUSIBLE_C <= e.current <= MAX_PLAUSIBLE_C:
                out.fail(name, HWMON, ValueError(f"implausible temperature {e.current}"))
                continue
            out.temperatures[name] = float(e.current)
            out.kinds[name] = HWMON


# -- power rails ---------------------------------------------------------------------------------
def read_ina3221_hwmon(root: str, out: _Partial, rails: dict[str, float]) -> None:
    """JetPack 5/6 mainline ``ina3221`` hwmon: P = in{n}_input mV × curr{n}_input mA."""
    pattern = os.path.join(root, "sys/bus/i2c/drivers/ina3221/*/hwmon/hwmon*")
    for d in sorted(glob.glob(pattern)):
        for lpath in sorted(glob.glob(os.path.join(d, "in*_label"))):
            n = _trailing_int(lpath.removesuffix("_label"))
            if not 1 <= n <= 3:
                continue  # in7 is the shunt-voltage sum, in4-6 are shunt voltages
            try:
                label = read_text(lpath)
            except Exception:
                continue
            if not label or "NC" in label:
                continue  # not connected
            name = _dedupe(label, rails)
            try:
                mv = read_int(os.path.join(d, f"in{n}_input"))
                ma = read_int(os.path.join(d, f"curr{n}_input"))
                rails[name] = mv * ma / 1e6
                out.kinds[name] = RAIL
            except Exception as exc:
                rails[name] = float("nan")
                out.fail(name, RAIL, exc)


def read_ina3221_iio(root: str, out: _Partial, rails: dict[str, float]) -> None:
    """JetPack 4 downstream ``ina3221x`` IIO: ``rail_name_N`` + ``in_power{N}_input`` (mW).

    Power is read directly: this driver's voltage/current file names are swapped.
    """
    pattern = os.path.join(root, "sys/bus/i2c/drivers/ina3221x/*/iio:device*")
    for d in sorted(glob.glob(pattern)):
        for rpath in sorted(glob.glob(os.path.join(d, "rail_name_*")), key=_trailing_int):
            n = _trailing_int(rpath)
            try:
                label = read_text(rpath)
            except Exception:
                continue
            if not label or "NC" in label:
                continue
            name = _dedupe(label, rails)
            try:
                rails[name] = read_int(os.path.join(d, f"in_power{n}_input")) / 1000.0
                out.kinds[name] = RAIL
            except Exception as exc:
                rails[name] = float("nan")
                out.fail(name, RAIL, exc)


def ina_total(rails: dict[str, float]) -> float | None:
    """The board rail if there is one, else the sum of rails (None if any is unread)."""
    for total in TOTAL_RAILS:
        if total in rails:
            v = rails[total]
            return None if v != v else v
    parts = [v for k, v in rails.items() if SUB_RAILS.get(k) not in rails]
    if not parts or any(v != v for v in parts):
        return None
    return sum(parts)


class RaplReader:
    """Package power from successive ``energy_uj`` readings, wrap-around included."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[int, float]] = {}  # zone dir -> (energy_uj, t)
        self._watts: dict[str, float] = {}
        self._denied_logged: set[str] = set()

    def read(self, root: str, now: float, out: _Partial) -> None:
        zones = [
            d
            for d in glob.glob(os.path.join(root, "sys/class/powercap/intel-rapl:*"))
            if re.fullmatch(r"intel-rapl:\d+", os.path.basename(d))
        ]
        psys: float | None = None
        packages: list[float] = []
        complete = True
        for d in sorted(zones, key=_trailing_int):
            try:
                zname = read_text(os.path.join(d, "name")) or os.path.basename(d)
            except Exception:
                zname = os.path.basename(d)
            name = f"rapl/{zname}"
            epath = os.path.join(d, "energy_uj")
            try:
                energy = read_int(epath)
            except Exception as exc:
                if isinstance(exc, PermissionError) and epath not in self._denied_logged:
                    self._denied_logged.add(epath)
                    log.warning(rapl_permission_message(epath))
                out.fail(name, RAIL, exc)
                complete = False
                continue
            watts = self._update(d, energy, now)
            if watts is None:
                complete = False
                continue
            out.power[name] = watts
            out.kinds[name] = RAIL
            if zname == "psys":
                psys = watts
            elif zname.startswith("package"):
                packages.append(watts)
        if psys is not None:
            out.rapl_total = psys
        elif packages and complete:
            out.rapl_total = sum(packages)

    def _update(self, zone: str, energy: int, now: float) -> float | None:
        prev = self._last.get(zone)
        self._last[zone] = (energy, now)
        if prev is None or now <= prev[1]:
            return self._watts.get(zone)  # no delta yet: keep the last value, if any
        delta = energy - prev[0]
        if delta < 0:
            try:
                delta += read_int(os.path.join(zone, "max_energy_range_uj"))
            except Exception:
                return self._watts.get(zone)
            if delta < 0:
                return self._watts.get(zone)
        watts = delta / 1e6 / (now - prev[1])
        self._watts[zone] = watts
        return watts


def rapl_permission_message(path: str) -> str:
    """The one log line for an unreadable ``energy_uj``: says why and how to fix it."""
    return RAPL_PERMISSION_MESSAGE.format(path=path)


# -- Raspberry Pi throttling -----------------------------------------------------------------
def get_throttled_path(root: str) -> str | None:
    fixed = os.path.join(root, "sys/devices/platform/soc/soc:firmware/get_throttled")
    if os.path.exists(fixed):
        return fixed
    found = sorted(
        glob.glob(os.path.join(root, "sys/devices/platform/soc*/*firmware*/get_throttled"))
    )
    return found[0] if found else None


def parse_throttled(text: str) -> dict[str, bool]:
    """Hex bitmask as sysfs prints it ("50005", "0x50005" or vcgencmd's "throttled=0x50005")."""
    value = int(text.strip().rpartition("=")[2], 16)
    return {flag: bool(value >> bit & 1) for flag, bit in THROTTLE_BITS.items()}


def read_get_throttled(root: str, out: _Partial) -> None:
    path = get_throttled_path(root)
    if path is None:
        return
    try:
        out.throttled.update(parse_throttled(read_text(path)))
        out.kinds["get_throttled"] = THROTTLE
    except Exception as exc:
        out.fail("get_throttled", THROTTLE, exc)


# -- battery --------------------------------------------------------------------------------------
_PLUGGED_STATUS = {"Charging": True, "Full": True, "Not charging": True, "Discharging": False}


def read_battery_sysfs(root: str, out: _Partial) -> None:
    supplies = os.path.join(root, "sys/class/power_supply")
    bats = sorted(glob.glob(os.path.join(supplies, "BAT*")))
    if not bats:
        return
    try:
        capacity = read_int(os.path.join(bats[0], "capacity"))
        if not 0 <= capacity <= 100:
            raise ValueError(f"capacity {capacity} outside 0..100")
    except Exception as exc:
        out.fail("battery", BATTERY, exc)
        return
    out.battery_ratio = capacity / 100.0
    out.kinds["battery"] = BATTERY
    try:
        out.battery_plugged = _PLUGGED_STATUS.get(read_text(os.path.join(bats[0], "status")))
    except Exception:
        out.battery_plugged = None
    if out.battery_plugged is None:
        for online in glob.glob(os.path.join(supplies, "A*", "online")):
            try:
                out.battery_plugged = read_int(online) == 1
                break
            except Exception:
                continue


def read_battery_psutil(out: _Partial) -> None:
    import psutil

    try:
        bat = psutil.sensors_battery()
    except Exception as exc:
        out.fail("battery", BATTERY, exc)
        return
    if bat is None:
        return
    out.battery_ratio = max(0.0, min(1.0, float(bat.percent) / 100.0))
    out.battery_plugged = bat.power_plugged
    out.kinds["battery"] = BATTERY


# -- NVML ---------------------------------------------------------------------------------------
class NvmlReader:
    """NVIDIA dGPUs through pynvml, imported lazily; absent package or GPU = no sensor.

    Jetson iGPUs have no NVML; their zones and rails come from sysfs.
    """

    def __init__(self) -> None:
        self._nvml: Any = None
        self._handles: list[Any] = []
        self._tried = False

    def _init(self) -> bool:
        if not self._tried:
            self._tried = True
            try:
                import pynvml  # type: ignore[import-not-found]

                pynvml.nvmlInit()
                count = pynvml.nvmlDeviceGetCount()
                self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
                self._nvml = pynvml
            except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, no driver ...
                log.debug("NVML not used: %s", _describe(exc))
                self._nvml = None
        return self._nvml is not None

    def read(self, out: _Partial) -> None:
        if not self._init():
            return
        nv = self._nvml
        total = 0.0
        complete = True
        for i, h in enumerate(self._handles):
            name = f"nvml/gpu{i}"
            try:
                out.temperatures[name] = float(
                    nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
                )
                out.kinds[name] = NVML
            except Exception as exc:
                out.fail(name, NVML, exc)
            try:
                watts = nv.nvmlDeviceGetPowerUsage(h) / 1000.0
                out.power[name] = watts
                total += watts
                out.kinds.setdefault(name, NVML)
            except Exception:
                complete = False
            try:
                # Newer bindings renamed ...ClocksThrottleReasons to ...ClocksEventReasons.
                get = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
                if get is None:
                    get = nv.nvmlDeviceGetCurrentClocksThrottleReasons
                reasons = int(get(h))
                for flag, bit in NVML_REASONS.items():
                    out.throttled[f"gpu{i}_{flag}"] = bool(reasons & bit)
            except Exception:
                pass
        if self._handles and complete:
            out.nvml_total = total

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml = None


# -- the sampler --------------------------------------------------------------------------------
class Sensors:
    """Samples every sensor under ``root``; keeps the state needed for RAPL and staleness.

    Blocking file I/O: call :meth:`sample` from a worker thread, not the event loop.
    """

    def __init__(
        self,
        root: str = "/",
        *,
        nvml: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = os.path.abspath(root)
        self.real_root = self.root == "/"
        self._clock = clock
        self._rapl = RaplReader()
        # NVML is live hardware, never part of a replayed tree.
        self._nvml = NvmlReader() if nvml and self.real_root else None
        self._kinds: dict[str, str] = {}
        self._good: set[str] = set()  # read fine at least once
        self._status: dict[str, str] = {}  # name -> ok | unavailable | stale
        self._broken: set[str] = set()  # sources whose reader raised (logged once)

    def trip_points(self) -> dict[str, list[TripPoint]]:
        return read_trip_points(self.root)

    def sample(self) -> Readings:
        """Read everything once. Never raises: a failing source makes its sensors unavailable."""
        now = self._clock()
        part = _Partial()
        steps: list[tuple[str, Callable[[], None]]] = [
            ("thermal zones", lambda: read_thermal_zones(self.root, part)),
            ("hwmon", lambda: self._hwmon(part)),
            ("INA3221", lambda: self._ina(part)),
            ("RAPL", lambda: self._rapl.read(self.root, now, part)),
            ("get_throttled", lambda: read_get_throttled(self.root, part)),
            ("battery", lambda: self._battery(part)),
        ]
        if self._nvml is not None:
            steps.append(("NVML", lambda: self._nvml.read(part) if self._nvml else None))
        for what, fn in steps:
            try:
                fn()
                self._broken.discard(what)
            except Exception as exc:  # a bug or a very odd tree: lose that source, not the sample
                if what not in self._broken:  # once per transition, not every second
                    self._broken.add(what)
                    log.exception("reading %s failed: %s", what, _describe(exc))
        return self._finish(part, now)

    def _hwmon(self, part: _Partial) -> None:
        if self.real_root:
            read_hwmon_psutil(part)
        else:
            read_hwmon_sysfs(self.root, part)

    def _battery(self, part: _Partial) -> None:
        if self.real_root:
            read_battery_psutil(part)
        else:
            read_battery_sysfs(self.root, part)

    def _ina(self, part: _Partial) -> None:
        rails: dict[str, float] = {}
        read_ina3221_hwmon(self.root, part, rails)
        read_ina3221_iio(self.root, part, rails)
        part.power.update({k: v for k, v in rails.items() if v == v})
        if rails:
            part.ina_total = ina_total(rails)

    def _finish(self, part: _Partial, now: float) -> Readings:
        present = set(part.temperatures) | set(part.power)
        if part.battery_ratio is not None:
            present.add("battery")
        if "get_throttled" in part.kinds and "get_throttled" not in part.failures:
            present.add("get_throttled")
        self._kinds.update(part.kinds)
        stale: set[str] = set()
        unavailable: set[str] = set()
        for name in self._kinds:
            if name in present:
                status = "ok"
                self._good.add(name)
            else:
                cls = part.failures.get(name, ("error", ""))[0]
                unavailable.add(name)
                status = "stale" if name in self._good and cls == "error" else "unavailable"
                if status == "stale":
                    stale.add(name)
            self._transition(name, status, part.failures.get(name, ("", ""))[1])
        if part.ina_total is not None:
            total: float | None = part.ina_total
        elif part.rapl_total is not None or part.nvml_total is not None:
            total = (part.rapl_total or 0.0) + (part.nvml_total or 0.0)
        else:
            total = None
        return Readings(
            timestamp=now,
            wall_time=time.time(),
            temperatures=part.temperatures,
            power=part.power,
            total_power_w=total,
            battery_ratio=part.battery_ratio,
            battery_plugged=part.battery_plugged,
            throttled=part.throttled,
            stale=frozenset(stale),
            unavailable=frozenset(unavailable),
            kinds=dict(self._kinds),
        )

    def _transition(self, name: str, status: str, why: str) -> None:
        old = self._status.get(name)
        if old == status:
            return
        self._status[name] = status
        if status == "stale":
            log.warning("sensor %s is stale (%s)", name, why or "no longer present")
        elif status == "unavailable":
            log.info("sensor %s unavailable (%s)", name, why or "no value yet")
        elif old is not None:
            log.info("sensor %s reads again", name)

    def close(self) -> None:
        if self._nvml is not None:
            self._nvml.close()
