"""The soak's verdict and its printout: what the client processes counted, summed into
served, replies by status, refused %, lost replies, wrong answers, p50/p99 per window and
the daemon's RSS growth, and the list of problems that fail the run.

Why apart from the run: the verdict is pure (counts in, report out), so what fails a
soak is decided in one place, away from processes and sockets.
"""

from __future__ import annotations

from typing import Any

from edged.bench.soak_mix import KINDS
from edged.bench.soak_probe import pct

#: above this share of valid requests refused (queue full) the run measured a saturated
#: daemon, not one at ``--load`` of what it sustains
SATURATED_REFUSED_PCT = 1.0


def summarise(results: list[dict[str, Any]], window_s: float, max_rss_growth: float,
              load_s: float, rss: tuple[int, int, int], rss_samples: list[tuple[float, int]],
              alive: bool, exit_code: int, probe_lost: int = 0) -> dict[str, Any]:
    """The report of one soak from its clients' ``results``; ``rss`` is the daemon's RSS
    at start, after warm-up and at the end (bytes)."""
    rss_start, rss_warm, rss_end = rss
    sent = {kind: sum(r["sent"][kind] for r in results) for kind in KINDS}
    by_kind: dict[str, dict[str, int]] = {kind: {} for kind in KINDS}
    by_status: dict[str, int] = {}
    for r in results:
        for kind, sts in r["statuses"].items():
            for st, n in sts.items():
                by_kind[kind][st] = by_kind[kind].get(st, 0) + n
                by_status[st] = by_status.get(st, 0) + n
    total_sent = sum(sent.values())
    lost = sum(r["lost"] for r in results)
    n_windows = len(results[0]["latency_s"]) if results else 0
    windows = []
    all_lat: list[float] = []
    for w in range(n_windows):
        lw = [x for r in results for x in r["latency_s"][w]]
        all_lat.extend(lw)
        if lw:
            windows.append({"t_s": int(w * window_s), "n": len(lw), "p50_ms": pct(lw, 50),
                            "p99_ms": pct(lw, 99)})
    growth = 100.0 * (rss_end - rss_warm) / rss_warm if rss_warm and rss_end else None
    out = {
        "duration_s": round(load_s, 1),
        "sent": total_sent,
        "sent_by_kind": sent,
        "received": sum(by_status.values()),
        "lost": lost,
        "lost_ids_sample": [i for r in results for i in r["lost_ids"]][:10],
        "duplicates": sum(r["duplicates"] for r in results),
        "unattributed_replies": sum(r["unknown_ids"] for r in results),
        "served_ok": by_status.get("OK", 0),
        "achieved_rps": round(total_sent / load_s, 1) if load_s else 0,
        "by_status": dict(sorted(by_status.items())),
        "by_kind": by_kind,
        "unexpected": [u for r in results for u in r["unexpected"]][:20],
        "wrong_answers": sum(r["wrong"] for r in results),
        "behind_resets": sum(r["behind_resets"] for r in results),
        "latency_windows": windows,
        "p50_ms": pct(all_lat, 50),
        "p99_ms": pct(all_lat, 99),
        "rss_mib": {"start": round(rss_start / 2**20, 1),
                    "after_warmup": round(rss_warm / 2**20, 1),
                    "end": round(rss_end / 2**20, 1)},
        "rss_samples_mib": [(t, round(r / 2**20, 1)) for t, r in rss_samples],
        "rss_growth_pct": round(growth, 2) if growth is not None else None,
        "daemon_alive_at_end": alive,
        "daemon_exit_code": exit_code,
    }
    valid_re = by_kind["valid"].get("RESOURCE_EXHAUSTED", 0)
    out["valid_queue_full_pct"] = round(100.0 * valid_re / sent["valid"], 2) if sent["valid"] \
        else 0.0
    # Not a failure (every request was answered), but the latencies then measure a full
    # queue, not the daemon at 80 %: the machine gave it less CPU than when capacity was
    # measured (other jobs), or the clients' own work ate into it.
    out["refused_pct"] = out["valid_queue_full_pct"]
    out["saturated"] = out["refused_pct"] > SATURATED_REFUSED_PCT
    out["problems"] = _problems(out, growth, max_rss_growth, probe_lost)
    out["ok"] = not out["problems"]
    return out


def _problems(out: dict[str, Any], growth: float | None, max_rss_growth: float,
              probe_lost: int) -> list[str]:
    """What fails the run: anything lost or wrong, the daemon dead, or RSS growing."""
    problems = []
    if out["lost"]:
        problems.append(f"{out['lost']} lost replies")
    if probe_lost:
        problems.append(f"{probe_lost} lost replies during the capacity probe")
    if out["duplicates"] or out["unattributed_replies"]:
        problems.append("duplicate or unattributed replies")
    if out["wrong_answers"]:
        problems.append(f"{out['wrong_answers']} wrong answers")
    if out["unexpected"]:
        problems.append("unexpected statuses")
    if not out["daemon_alive_at_end"]:
        problems.append("daemon died")
    if out["daemon_exit_code"] != 0:
        problems.append(f"daemon exit code {out['daemon_exit_code']}")
    if growth is None or growth > max_rss_growth:
        problems.append(f"RSS growth {growth}% > {max_rss_growth}%")
    return problems


def print_report(r: dict[str, Any]) -> None:
    print(f"soak: {r['duration_s']} s at {r['achieved_rps']} req/s sent "
          f"(target {r['target_rps']}, capacity {r['capacity_rps']}), "
          f"{r['clients']} clients over {r['endpoint']}")
    print(f"  sent {r['sent']} {r['sent_by_kind']}")
    print(f"  received {r['received']}  lost {r['lost']}  duplicates {r['duplicates']}  "
          f"wrong answers {r['wrong_answers']}")
    print(f"  by status: {r['by_status']}")
    for kind, sts in r["by_kind"].items():
        print(f"    {kind:8} {sts}")
    print(f"  refused {r['refused_pct']} % of valid requests (queue full)  p50 {r['p50_ms']} ms  "
          f"p99 {r['p99_ms']} ms  lost {r['lost']}  wrong {r['wrong_answers']}  RSS growth "
          f"{r['rss_growth_pct']} %")
    print("  valid-request latency per window (ms):")
    for w in r["latency_windows"]:
        print(f"    t={w['t_s']:>5}s  n={w['n']:>7}  p50={w['p50_ms']:>8}  p99={w['p99_ms']:>8}")
    print(f"  overall p50={r['p50_ms']} ms  p99={r['p99_ms']} ms")
    if r["saturated"]:
        print(f"  WARNING: {r['valid_queue_full_pct']}% of valid requests found the queue full: "
              "the daemon did not sustain the target (busy machine?); latencies above are "
              "those of a saturated queue. Re-run on an idle machine.")
    m = r["rss_mib"]
    print(f"  daemon RSS MiB: start {m['start']}  after warm-up {m['after_warmup']}  "
          f"end {m['end']}  growth {r['rss_growth_pct']}%")
    print(f"  daemon exit code {r['daemon_exit_code']}, tracebacks in log "
          f"{r['daemon_log_tracebacks']}")
    print("  RESULT: " + ("OK" if r["ok"] else "FAIL: " + "; ".join(r["problems"])))
