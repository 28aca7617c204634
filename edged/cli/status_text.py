"""``edged status`` for a person: the control ``status`` reply as a few lines of text.

Why apart from the CLI: every part of the daemon adds what an operator should see (models and
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
        f"control   {r['control']}",
        f"metrics   {r['metrics'] or 'off'}",
        "",
        *table(["LISTENER", "ADDRESS", "SERVES"], listener_rows(r)),
        *(f"rungs {a}: {g.get('state')} {g.get('progress') or g.get('error') or ''}"
          for a, g in (r.get("frigate_rungs") or {}).items()),
        *([_store_line(r["store"])] if r.get("store") else []),
        "",
    ]
    rows = []
    for m in r["models"]:
        q = f"{m['queue_depth']}/{m['max_queue']}"
        p50 = "-" if m.get("p50_ms") is None else f"{m['p50_ms']:.2f}"
        p99 = "-" if m.get("p99_ms") is None else f"{m['p99_ms']:.2f}"
        rows.append([m["name"], m["state"], m["active_variant"] or "-", m["backend"] or "-",
                     q, str(m.get("served", 0)), p50, p99])
    header = ["MODEL", "STATE", "VARIANT", "BACKEND", "QUEUE", "SERVED", "P50 ms", "P99 ms"]
    model_lines = table(header, rows, right={4, 5, 6, 7})
    lines.append(model_lines[0])
    g = r.get("governor")
    for m, row in zip(r["models"], model_lines[1:], strict=True):
        lines.append(row)
        lines.extend(_model_details(m, g))
    for p in r.get("pipelines") or []:
        lines.extend(_format_pipeline(p))
    for name, e in (r.get("delivery") or {}).items():
        lines.extend(_delivery_lines(name, e))
    lines.append("")
    if not g:
        lines.append("governor  disabled")
    else:
        lines.extend(_format_governor(g))
    if r.get("offload"):
        lines.extend(_format_offload(r["offload"]))
    if r.get("last_reload"):
        lines.append(f"last reload: {json.dumps(r['last_reload'])}")
    return "\n".join(lines)


def _format_offload(o: dict[str, Any]) -> list[str]:
    """The remote and, per model, whether it is offloaded there and, if not, why."""
    tensors = f", {o['tensors']} tensors" if o.get("tensors") else ""
    lines = [f"offload   {o['url']} ({o['inflight']} in flight{tensors})"]
    for name, m in o["models"].items():
        state = ("down" if not o["up"].get(name) else
                 f"unused: {m['unused']}" if m.get("unused") else "up")
        lines.append(f"  {name} -> {m['remote_model']} (counts as {m['counts_as']}): {state}")
    return lines


def table(header: list[str], rows: list[list[str]],
          right: frozenset[int] | set[int] = frozenset()
          ) -> list[str]:
    """Columns as wide as their longest cell plus two spaces, so a long endpoint or
    model name never runs into the next column."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        out = [f"{c:>{w}}" if i in right else f"{c:<{w}}"
               for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(out).rstrip()

    return [line(header), *(line([str(c) for c in row]) for row in rows)]


def listener_rows(r: dict[str, Any]) -> list[list[str]]:
    """Every bound address: the native endpoints, Frigate's, KServe's (the status reply's
    ``listeners``; from ``endpoints`` for a daemon older than that)."""
    listeners = r.get("listeners")
    if listeners is None:
        listeners = [{"protocol": "native", "address": e, "serves": ""}
                     for e in r.get("endpoints") or []]
    return [[li["protocol"], li["address"], li.get("serves") or "every model"]
            for li in listeners]


def _model_details(m: dict[str, Any], g: dict[str, Any] | None) -> list[str]:
    lines = []
    if m.get("error"):
        lines.append(f"  error: {m['error']}")
    if m.get("backend") == "openvino" and m.get("runtime"):
        lines.append(_openvino_line(m["runtime"]))
    lines.append(f"  ladder: {_ladder(m)}")
    member = (m.get("pairs") or {}).get(m.get("active_variant"))
    if member and m.get("batch_variant") != member:
        lines.append(f"  batch_variant {member} not taken: {m['active_variant']} computes "
                     "every batch (the log says why)")
    if m.get("digest"):
        lines.append(f"  artifact: {m.get('path')} sha256 {m['digest'][:16]}")
    held = held_below_top(m, g)
    if held:
        lines.append(f"  below its top rung: {held}")
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
    return lines


def held_below_top(m: dict[str, Any], g: dict[str, Any] | None) -> str | None:
    """Why a model serves a rung below its top one, from what the status reply says:
    an operator's pin, the load, the governor's level or energy budget, or the swap
    budget holding it there until it may step back up; None when it serves its top rung."""
    variants, active = m.get("variants") or [], m.get("active_variant")
    if active not in variants or variants.index(active) == 0:
        return None
    index = variants.index(active)
    why = []
    pin = m.get("pin") or {}
    if pin.get("variant") in variants and variants.index(pin["variant"]) >= index:
        why.append(f"pinned to {pin['variant']} by {pin.get('by', 'operator')}")
    load = m.get("overload") or {}
    if load.get("asks") in variants and variants.index(load["asks"]) >= index:
        why.append(f"overload: the load asks for {load['asks']} ({load.get('reason')})")
    if g and "level" in g:
        acts = g.get("actions") or {}
        per_model = ((g.get("prediction") or {}).get("models") or {}).get(m.get("name")) or {}
        steps = per_model.get("rung", acts.get("ladder_steps")) or 0
        budget = g.get("swap_budget") or {}
        wanted, hold = budget.get("ladder_wanted"), budget.get("hold_s") or 0.0
        pinned = " (pinned by operator)" if g.get("pinned") else ""
        if wanted is not None and wanted < steps and hold > 0:
            why.append(f"swap budget: level {g['level']}{pinned} wants {wanted} step(s) down, "
                       f"{steps} applied; it steps back one rung in {hold:.0f} s (at most one "
                       f"change per {budget.get('min_interval_s', 0):g} s)")
        elif steps >= index:
            energy = g.get("energy") or {}
            who = ("the energy budget" if not pinned and energy.get("step", 0) >= steps
                   else f"governor level {g['level']}{pinned}")
            why.append(f"{who} steps the ladder {steps} rung(s) down")
    if not why:
        swap = m.get("last_swap") or {}
        why.append(f"the last swap up failed: {swap['error']}" if swap.get("error")
                   else "a swap back up is pending")
    return "; ".join(why)


def _ladder(m: dict[str, Any]) -> str:
    return " > ".join(f"[{rung_label(m, v)}]" if v == m.get("active_variant")
                      else rung_label(m, v) for v in m.get("variants") or []) or "-"


def rung_label(m: dict[str, Any], v: str) -> str:
    """Rung ``v`` of model entry ``m`` as a person reads it: a pair is ``v+batch_variant``
    (lone rows on ``v``, batches on the other)."""
    member = (m.get("pairs") or {}).get(v)
    return v if member is None else f"{v}+{member}"


def _format_pipeline(p: dict[str, Any]) -> list[str]:
    """A pipeline: its state, each member with its variants (the active one bracketed),
    and where the governor or the load has put it on its step-down plan."""
    p50 = "-" if p.get("p50_ms") is None else f"{p['p50_ms']:.2f}"
    p99 = "-" if p.get("p99_ms") is None else f"{p['p99_ms']:.2f}"
    det = p["detector"]
    out = ["", f"PIPELINE {p['name']}  {p['state']}  served {p.get('served', 0)}  "
               f"p50 {p50} ms  p99 {p99} ms"]
    if p.get("error"):
        out.append(f"  error: {p['error']}")
    out.append(f"  {'detector':<16}{det['model']:<14}{det['state']:<9}{_ladder(det)}")
    for s in p.get("stages") or []:
        how = "optional" if s.get("optional") else "required"
        extra = f", reused {s['reinfer_interval']} frames" if s.get("reinfer_interval") else ""
        state = "shed" if s.get("shed") else s["state"]
        out.append(f"  {'stage ' + s['name']:<16}{s['model']:<14}{state:<9}{_ladder(s)}  "
                   f"({how}, K={s['max_crops']}{extra})")
        if s.get("error"):
            out.append(f"    error: {s['error']}")
    sd = p.get("step_down") or {}
    where = f"position {sd.get('position', 0)}/{len(sd.get('positions') or [1]) - 1}: " \
            f"{sd.get('at')}"
    out.append(f"  step-down order: {', '.join(sd.get('order') or [])}; {where}"
               + (f" ({sd['reason']})" if sd.get("reason") else ""))
    load = p.get("overload") or {}
    if load.get("asks"):
        out.append(f"  load asks for {load['asks']}: {load['reason']}")
    return out




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
        again = (f", again after {w['restarts']} restart(s) of the daemon"
                 if w.get("restarts") else "")
        out.append(f"  watching {w.get('version')}: {seen['requests']} requests, "
                   f"{seen['errors']} errors, {seen['deadline_misses']} deadline misses, "
                   f"p99 {seen['p99_ms']} ms (before: "
                   f"{(w.get('baseline') or {}).get('p99_ms')} ms) of {w.get('seconds')} s"
                   + again)
    if e.get("last_refusal"):
        f = e["last_refusal"]
        out.append(f"  last refusal ({f['stage']}, {f['reason']}): {f['message']}"[:300])
    if e.get("last_rollback"):
        b = e["last_rollback"]
        out.append(f"  last rollback of {b['version']} ({b['by']}): {b['reason']}"[:300])
    if e.get("rollback_target"):
        t = e["rollback_target"]
        out.append(f"  rollback target: {t['version']} ({t['digest'][:12]}), kept in the "
                   "store until a newer version is promoted")
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
        out.append("  prediction   " + _prediction_text(pred))
    if g.get("energy"):
        out.append("  " + energy_line(g["energy"]).replace("energy: ", "energy       ", 1))
    levels = g.get("seconds_per_level") or {}
    if levels:
        out.append("  time/level   " + ", ".join(f"{k} {v:.0f} s" for k, v in levels.items()))
    return out


def _prediction_text(pred: dict[str, Any]) -> str:
    """The board the prediction uses and each model's rung: ``predicted`` shows each rung's
    equilibrium, ``mpc`` its plan (and whether the board is its fit or its prior); while
    nothing computes ``mpc`` has no board and keeps the active rung."""
    head = (f"settles at {pred['equilibrium_c']} °C (limit {pred['limit_c']} °C; "
            f"τ {pred['tau_s']} s" + (f"; {pred['plant']} board" if pred.get("plant") else "")
            + ")") if "equilibrium_c" in pred else f"idle (limit {pred.get('limit_c')} °C)"
    parts = [f"; {m}: rung {v['rung']}" + (f" of {v['equilibria_c']}" if "equilibria_c" in v
                                          else f", plan {v['plan']}" if "plan" in v else "")
             for m, v in pred.get("models", {}).items()]
    return head + "".join(parts)


def energy_line(e: dict[str, Any] | None) -> str:
    """``energy: 1.20 of 2.00 Wh left (60 %), mission 3600 s left; lasts the mission``."""
    if not e:
        return "energy budget: off"
    if "left_wh" not in e:
        return f"energy: {e['budget_wh']:g} Wh for {e['mission_s']:g} s (starts at the next step)"
    end = {"mission": "at this draw the budget outlasts the mission",
           "budget": f"at this draw the budget runs out in {e.get('empty_in_s')} s, before the "
                     "mission ends: the plan steps down",
           "over": "the mission is over"}.get(e.get("projected_end"), "")
    return (f"energy: {e['left_wh']:.3f} of {e['budget_wh']:.3f} Wh left "
            f"({e['left_pct']:.0f} %), mission {e['mission_left_s']:.0f} s left "
            f"(set by {e.get('by')}); {end}")
