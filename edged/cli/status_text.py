"""``edged status`` for a person: the control ``status`` reply as a few lines of text.

Why apart from the CLI: every room adds what an operator should see (models and
variants, pins, the governor's level and why, Frigate endpoints and their rungs,
KServe listeners, OpenVINO's runtime), and the text grows with them.
"""

from __future__ import annotations

import json
from typing import Any


def format_status(r: dict[str, Any]) -> str:
    up = r["uptime_s"]
    lines = [
        f"edged {r['version']}  pid {r['pid']}  {r['state']}  up {int(up // 3600)}h"
        f"{int(up % 3600 // 60):02d}m{int(up % 60):02d}s  {r['requests_per_second']} req/s",
        f"config    {r['config']}",
        f"endpoints {', '.join(r['endpoints'])}",
        f"control   {r['control']}    metrics {r['metrics'] or 'off'}",
        *(["frigate   " + ", ".join(f"{a} -> {m}" for a, m in r["frigate"].items())]
          if r.get("frigate") else []),
        *(f"rungs {a}: {g.get('state')} {g.get('progress') or g.get('error') or ''}"
          for a, g in (r.get("frigate_rungs") or {}).items()),
        *([_store_line(r["store"])] if r.get("store") else []),
        "",
        f"{'MODEL':<16}{'STATE':<9}{'VARIANT':<20}{'BACKEND':<12}{'QUEUE':>10}{'SERVED':>9}"
        f"{'P50 ms':>9}{'P99 ms':>9}",
    ]
    for m in r["models"]:
        q = f"{m['queue_depth']}/{m['max_queue']}"
        p50 = "-" if m.get("p50_ms") is None else f"{m['p50_ms']:.2f}"
        p99 = "-" if m.get("p99_ms") is None else f"{m['p99_ms']:.2f}"
        lines.append(f"{m['name']:<16}{m['state']:<9}{m['active_variant'] or '-':<20}"
                     f"{m['backend'] or '-':<12}{q:>10}{m.get('served', 0):>9}{p50:>9}{p99:>9}")
        if m.get("error"):
            lines.append(f"  error: {m['error']}")
        if m.get("backend") == "openvino" and m.get("runtime"):
            lines.append(_openvino_line(m["runtime"]))
        ladder = " > ".join(f"[{v}]" if v == m["active_variant"] else v for v in m["variants"])
        lines.append(f"  ladder: {ladder}")
        streams = m.get("streams") or {}
        if streams.get("tracked"):
            fps = streams.get("max_stream_fps")
            lines.append(f"  streams: {streams['tracked']} (of at most {streams['max_streams']})"
                         + (f", limit {fps:g} fps" if fps else ""))
            for s in streams.get("top") or []:
                lines.append(f"    {s['stream'][:24]:<25}received {s['received']:>7}  served "
                             f"{s['served']:>7}  stale {s['dropped_stale']:>6}  rate-limited "
                             f"{s['dropped_rate']:>6}")
        if m.get("pin"):
            lines.append(f"  pinned: {m['pin']['variant']} by {m['pin']['by']} "
                         "(edged ctl swap MODEL auto releases it)")
        load = m.get("overload") or {}
        if load.get("asks"):
            lines.append(f"  load asks for {load['asks']}: {load['reason']}")
    for name, e in (r.get("delivery") or {}).items():
        lines.extend(_delivery_lines(name, e))
    g = r.get("governor")
    lines.append("")
    if not g:
        lines.append("governor  disabled")
    else:
        lines.extend(_format_governor(g))
    if r.get("last_reload"):
        lines.append(f"last reload: {json.dumps(r['last_reload'])}")
    return "\n".join(lines)


def _delivery_lines(name: str, e: dict[str, Any]) -> list[str]:
    """A delivered model: its version and source, a candidate's stage, the last refusal
    and rollback, the last few events (docs/delivery.md)."""
    digest = f" ({e['digest'][:12]})" if e.get("digest") else ""
    out = [f"delivery {name}: {e.get('version') or 'no delivered version'}{digest} from "
           f"{e.get('source') or '-'}; {e.get('stage') or '-'}"
           + (f" {e['candidate']}" if e.get("candidate") else "")
           + (f": {e['progress']}" if e.get("progress") else "")]
    w = e.get("watch") or {}
    if e.get("stage") == "watching" and w.get("watched"):
        seen = w["watched"]
        out.append(f"  watching {w.get('version')}: {seen['requests']} requests, "
                   f"{seen['errors']} errors, {seen['deadline_misses']} deadline misses, "
                   f"p99 {seen['p99_ms']} ms (before: "
                   f"{(w.get('baseline') or {}).get('p99_ms')} ms) of {w.get('seconds')} s")
    if e.get("last_refusal"):
        f = e["last_refusal"]
        out.append(f"  last refusal ({f['stage']}, {f['reason']}): {f['message']}"[:300])
    if e.get("last_rollback"):
        b = e["last_rollback"]
        out.append(f"  last rollback of {b['version']} ({b['by']}): {b['reason']}"[:300])
    hist = e.get("history") or []
    if hist:
        out.append("  history: " + ", ".join(
            f"{h.get('version') or h.get('stage', '')} {h['event']}".strip()
            for h in hist[-5:]))
    return out


def _store_line(s: dict[str, Any]) -> str:
    """The model store's use against its quota (``[server] max_store_bytes``)."""
    used, quota = s["used_bytes"], s["quota_bytes"]
    pct = 100 * used / quota if quota else 0
    return (f"store     {_mib(used)} of {_mib(quota)} ({pct:.0f}%), {s['versions']} "
            f"version(s), at most {s['per_model']} per model  ({s['root']})")


def _mib(n: float) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"


def _openvino_line(rt: dict[str, Any]) -> str:
    """Version, device, hint, threads: what decides an OpenVINO variant's speed."""
    cache = "from cache" if rt.get("loaded_from_cache") else "compiled at load"
    return (f"  openvino {rt.get('openvino')} on {rt.get('device')}: {rt.get('hint')}, "
            f"{rt.get('threads')} threads, {rt.get('streams')} streams, "
            f"{rt.get('precision')}, {cache}")


def _format_governor(g: dict[str, Any]) -> list[str]:
    if "error" in g and "level" not in g:
        return [f"governor  error: {g['error']}"]
    head = f"governor  level {g.get('level')}"
    if g.get("pinned"):
        head += f" (pinned by operator; automatic: {g.get('automatic_level')})"
    if g.get("headroom") is not None:
        head += f"   headroom {g['headroom']:.2f} (1.00 = first threshold)"
    out = [head]
    if g.get("reason"):
        out.append(f"  why          {g['reason']}")
    acts = {k: v for k, v in (g.get("actions") or {}).items() if v}
    if acts:
        out.append("  actions      " + ", ".join(f"{k}={v}" for k, v in acts.items()))
    rd = g.get("readings") or {}
    temps = rd.get("temperatures") or {}
    if temps:
        out.append("  temperature  " + ", ".join(f"{k} {v:.1f} °C" for k, v in temps.items()))
    power = rd.get("power") or {}
    if power:
        total = rd.get("total_power_w")
        out.append("  power        " + ", ".join(f"{k} {v:.2f} W" for k, v in power.items())
                   + (f"   (total {total:.2f} W)" if total is not None else ""))
    if rd.get("battery_ratio") is not None:
        plugged = {True: "plugged in", False: "on battery"}.get(rd.get("battery_plugged"), "")
        out.append(f"  battery      {100 * rd['battery_ratio']:.0f}% {plugged}")
    flags = [k for k, v in (rd.get("throttled") or {}).items() if v]
    if flags:
        out.append("  throttled    " + ", ".join(flags))
    stale = rd.get("stale") or []
    if stale:
        out.append("  stale        " + ", ".join(sorted(stale)))
    pred = g.get("prediction") or {}
    if pred:
        out.append(f"  prediction   settles at {pred['equilibrium_c']} °C "
                   f"(limit {pred['limit_c']} °C; τ {pred['tau_s']} s)" + "".join(
                       f"; {m}: rung {v['rung']} of {v['equilibria_c']}"
                       for m, v in pred.get("models", {}).items()))
    levels = g.get("seconds_per_level") or {}
    if levels:
        out.append("  time/level   " + ", ".join(f"{k} {v:.0f} s" for k, v in levels.items()))
    return out
