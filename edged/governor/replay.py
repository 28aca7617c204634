"""``edged governor replay TRACE``: run the configured policy over a recorded trace.

Why: operators tune thresholds, forecast and swap budget on recordings instead of
cooking a device. ``Governor.step(readings, now)`` is pure with an injected clock, so
feeding it the trace's own clock makes a replay deterministic: the same trace and
config give the same decisions, on any machine, in seconds.

Printed: each decision that changes the level or the ladder step (time, level, ladder,
reason) and a summary (level changes, ladder changes, time per level, first escalation,
first step down the ladder, peak temperature, escalations by the forecast, and the lead
time before the device's own throttling when the trace has a ``throttled`` column).
``--simulate`` closes the loop with a first-order plant (see ``simulate.py``) and, on a
trace with power, judges the energy budget mode against its oracle (``energy_sim.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from edged.config.governor import GovernorConfig
from edged.governor.policy import Governor
from edged.governor.trace import Trace, TraceError, load_trace

#: what ``edged governor replay --help`` says (the module docstring is for developers)
DESCRIPTION = """\
Run the governor of --config over a recorded trace (a CSV or a tegrastats log) on the
trace's own clock: the same trace and config give the same decisions on any machine.
Prints each decision that changes the level or the ladder step and a summary; --plot
draws it, --simulate closes the loop with a simple thermal model of the device.
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``governor replay`` under ``subparsers`` (the ``edged`` command's)."""
    g = subparsers.add_parser("governor", help="replay a recorded temperature trace through the "
                               "governor")
    gsub = g.add_subparsers(dest="governor_cmd", required=True)
    r = gsub.add_parser("replay", help="run the policy over a recorded trace",
                        description=DESCRIPTION,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("trace", type=Path, help="CSV (docs/governor.md) or a tegrastats log")
    r.add_argument("--config", "-c", type=Path, help="edged config file ([governor] table)")
    r.add_argument("--trip", type=float, metavar="C",
                   help='passive trip for levels = "auto" (default: 85 °C fallback)')
    r.add_argument("--interval", type=float, default=1.0,
                   help="seconds between tegrastats lines without timestamps (default 1)")
    r.add_argument("--plot", type=Path, metavar="PNG", help="draw the replay (needs matplotlib)")
    r.add_argument("--json", action="store_true", help="print one JSON document")
    r.add_argument("--simulate", action="store_true",
                   help="closed loop: a first-order plant driven by the chosen variant")
    return r


def run(args: argparse.Namespace) -> int:
    """Entry point for ``edged governor replay``; returns the exit status."""
    from edged.governor.__main__ import load

    cfg = load(args.config, None)  # a bad config: its ConfigError, said with its code
    try:
        trace = load_trace(args.trace, args.interval)
    except TraceError as e:
        print(f"edged governor replay: {e}", file=sys.stderr)
        return 2
    result = replay(cfg if args.trip is None else cfg.at_trip(args.trip), trace)
    if args.simulate:
        from edged.governor.energy_sim import has_power, judge
        from edged.governor.simulate import compare, default_ladder, default_plant, demand_profile

        trip = args.trip if args.trip is not None else _trip_of(result)
        plant = default_plant(trace, trip)
        result["simulation"] = compare(cfg, plant, default_ladder(5.0), demand_profile(trace))
        if has_power(trace):  # the energy budget mode against its oracle (energy_sim.py)
            result["simulation"]["energy"] = judge(cfg, trace)
    if args.plot is not None:
        try:
            plot(trace, result, args.plot)
        except ImportError:
            print("edged governor replay: --plot needs matplotlib: pip install 'edged[plot]'",
                  file=sys.stderr)
            return 2
    result.pop("_series", None)
    if "simulation" in result:
        result["simulation"].pop("_series", None)
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=1))
    else:
        print(format_text(result))
    return 0


def replay(cfg: GovernorConfig, trace: Trace) -> dict[str, Any]:
    """Step a fresh Governor through ``trace``; decisions, summary and per-sample series."""
    clock = [trace.samples[0].timestamp]
    gov = Governor(cfg, clock=lambda: clock[0])
    t0 = trace.samples[0].timestamp
    events: list[dict[str, Any]] = []
    series: list[dict[str, Any]] = []
    prev_steps = prev_index = 0
    for r in trace.samples:
        clock[0] = r.timestamp
        d = gov.step(r, now=r.timestamp)
        t = round(r.timestamp - t0, 3)
        if d.changed or d.ladder_steps != prev_steps:
            events.append({"t_s": t, "level": d.level, "index": d.index,
                           "prev_index": prev_index,
                           "ladder_steps": d.ladder_steps, "temperature_c": d.temperature_c,
                           "reason": d.reason,
                           "forecast_only": "forecast)" in d.reason and d.changed})
        prev_steps, prev_index = d.ladder_steps, d.index
        series.append({"t_s": t, "temperature_c": d.temperature_c, "power_w": r.total_power_w,
                       "index": d.index, "ladder_steps": d.ladder_steps,
                       "forecast_c": (d.forecast or {}).get("forecast_c"),
                       "equilibrium_c": (d.prediction or {}).get("equilibrium_c")})
    snap = gov.snapshot()
    summary = summarize(gov, trace, events, series, snap)
    return {"trace": trace.path, "format": trace.format, "samples": len(trace.samples),
            "levels": snap["levels"], "decisions": events, "summary": summary,
            "last_prediction": gov.decision.prediction, "_series": series}


def summarize(gov: Governor, trace: Trace, events: list[dict[str, Any]],
              series: list[dict[str, Any]], snap: dict[str, Any]) -> dict[str, Any]:
    names = gov.level_names
    level_events = [e for e in events if e["index"] != e["prev_index"]]
    entered = dict.fromkeys(names[1:], 0)
    for e in level_events:
        for i in range(e["prev_index"] + 1, e["index"] + 1):
            entered[names[i]] += 1
    temps = [s["temperature_c"] for s in series if s["temperature_c"] is not None]
    first_up = next((e for e in events if e["index"] > 0), None)
    first_down = next((s for s in series if s["ladder_steps"] > 0), None)
    top = len(names) - 1
    out: dict[str, Any] = {
        "duration_s": round(trace.duration_s, 1),
        "level_changes": len(level_events),
        "entries_per_level": entered,
        "ladder_changes": sum(1 for i, s in enumerate(series)
                              if i and s["ladder_steps"] != series[i - 1]["ladder_steps"]),
        "seconds_per_level": {k: round(v, 1) for k, v in snap["seconds_per_level"].items()},
        "first_escalation": None if first_up is None else
        {k: first_up[k] for k in ("t_s", "level", "temperature_c", "reason")},
        "first_step_down_s": None if first_down is None else first_down["t_s"],
        "peak_temperature_c": max(temps) if temps else None,
        "forecast_escalations": sum(1 for e in level_events if e["forecast_only"]),
        "top_level_from_forecast": any(e["forecast_only"] and e["index"] == top
                                       for e in level_events),
    }
    if trace.throttled is not None:
        t0 = trace.samples[0].timestamp
        first_thr = next((s.timestamp - t0 for s, m in zip(trace.samples, trace.throttled,
                                                            strict=True) if m), None)
        out["device_throttled_at_s"] = first_thr
        if first_thr is not None and first_down is not None:
            out["lead_before_device_throttling_s"] = round(first_thr - first_down["t_s"], 1)
    return out


def _trip_of(result: dict[str, Any]) -> float:
    enters = [lv["enter_c"] for lv in result["levels"] if "enter_c" in lv]
    return max(enters) + 5.0 if enters else 85.0


def format_text(result: dict[str, Any]) -> str:
    lines = [f"trace {result['trace']} ({result['format']}, {result['samples']} samples)",
             "levels: " + ", ".join(
                 f"{lv['name']}" + (f" ≥{lv['enter_c']:g}/<{lv['exit_c']:g} °C"
                                    if "enter_c" in lv else "")
                 + f" [ladder {lv.get('ladder_steps', 0)}]" for lv in result["levels"]),
             "", f"{'t_s':>8}  {'level':<10}{'ladder':>6}  reason"]
    for e in result["decisions"]:
        lines.append(f"{e['t_s']:>8.1f}  {e['level']:<10}{e['ladder_steps']:>6}  {e['reason']}")
    s = result["summary"]
    lines += ["", "summary"]
    for k, v in s.items():
        lines.append(f"  {k:<32}{json.dumps(v, ensure_ascii=False)}")
    if result.get("last_prediction"):
        lines.append(f"  {'prediction (last)':<32}"
                     f"{json.dumps(result['last_prediction'], ensure_ascii=False)}")
    sim = result.get("simulation")
    if sim:
        p = sim["plant"]
        lines += ["", f"simulation (model, not a recording): ambient {p['ambient_c']:.1f} °C, "
                      f"R {p['rise_per_w']:.2f} °C/W, τ {p['tau_s']:.0f} s, "
                      f"device throttles at {p['trip_c']:.1f} °C",
                  f"  swaps at most every {sim['swap_min_interval_s']:g} s; the oracle: the most "
                  "work with 0 s above the trip under the same swap budget",
                  f"  {'policy':<10}{'of oracle':>10}{'peak °C':>9}{'swaps':>7}"
                  f"{'above trip s':>14}{'lost vs heaviest':>18}{'vs lightest':>13}"
                  "  seconds per rung"]
        for name, r in sim["runs"].items():
            share = r["share_of_oracle"]
            lines.append(f"  {name:<10}{'–' if share is None else f'{100 * share:.1f}%':>10}"
                         f"{r['peak_c']:>9.1f}{r['swaps']:>7}{r['seconds_above_limit']:>14.0f}"
                         f"{r['work_lost_vs_heaviest_pct']:>17.1f}%"
                         f"{r['work_lost_vs_lightest_pct']:>12.1f}%  "
                         + ", ".join(f"{k} {v:.0f}" for k, v in r["seconds_on"].items()))
        if sim.get("energy"):
            from edged.governor.energy_sim import format_text as energy_text

            lines += energy_text(sim["energy"])
    return "\n".join(lines)


def plot(trace: Trace, result: dict[str, Any], out: Path) -> None:
    """Temperature and power over time, thresholds, the level as a band, throttle marks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = result["_series"]
    t = [s["t_s"] for s in series]
    fig, ax = plt.subplots(figsize=(10, 4.8), dpi=110)
    colors = ["#ffffff", "#fff2b3", "#ffc58a", "#ff8a80", "#d08bff"]
    start = 0
    for i in range(1, len(series) + 1):
        if i == len(series) or series[i]["index"] != series[start]["index"]:
            idx = series[start]["index"]
            if idx > 0:
                end = t[i] if i < len(t) else t[-1]
                ax.axvspan(t[start], end, color=colors[min(idx, len(colors) - 1)], lw=0,
                           label=f"level {result['levels'][idx]['name']}")
            start = i
    ax.plot(t, [s["temperature_c"] for s in series], color="#c62828", lw=1.2,
            label="hottest zone °C")
    fc = [s["forecast_c"] for s in series]
    if any(v is not None for v in fc):
        ax.plot(t, fc, color="#6a1b9a", lw=0.8, ls="--", label="forecast °C")
    for lv in result["levels"]:
        if "enter_c" in lv:
            ax.axhline(lv["enter_c"], color="#555", lw=0.7, ls=":")
            ax.text(t[-1], lv["enter_c"], f"enter {lv['name']} ", fontsize=7, va="bottom",
                    ha="right")
    if trace.throttled is not None:
        marks = [x for x, m in zip(t, trace.throttled, strict=True) if m]
        ax.plot(marks, [ax.get_ylim()[1]] * len(marks), "|", color="k", ms=8,
                label="device throttled")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("°C")
    power = [s["power_w"] for s in series]
    if any(p is not None for p in power):
        ax2 = ax.twinx()
        ax2.plot(t, power, color="#1565c0", lw=0.8, alpha=0.8, label="total power W")
        ax2.set_ylabel("W")
        ax2.legend(loc="lower right", fontsize=7)
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles, strict=True))
    ax.legend(uniq.values(), uniq.keys(), loc="upper left", fontsize=7)
    ax.set_title(f"governor replay: {Path(result['trace']).name}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
