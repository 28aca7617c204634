"""The soak's capacity probe: what the soak's own open-loop mix sustains.

Why a probe of its own and not ``edged bench``'s closed-loop throughput: a pipelined
burst keeps the queue full, so batches are full, and its clients do less work per
request than the soak's; ``--load 0.8`` of it saturated the daemon. So a short
closed-loop burst of the mix only bounds the rate; then the soak's own client processes
(``MixClient``) send the mix open loop at ``PROBE_FRACTIONS`` of that bound, and the
highest step that held is the capacity.
"""

from __future__ import annotations

import multiprocessing as mp
import random
import time
from pathlib import Path
from typing import Any

from edged.bench.soak_mix import DIGITS, MixClient, mix_frames, samples
from edged.testing.harness import percentile_ms

#: the open-loop probe's steps, as fractions of the closed-loop upper bound
PROBE_FRACTIONS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1)
#: a probe step is sustained when at most this share of its valid requests is refused
PROBE_MAX_REFUSED_PCT = 0.5
#: ... its clients sent at least this share of the step's rate (they kept up) ...
PROBE_MIN_SENT_SHARE = 0.95
#: ... and its valid p50 stayed within this factor (+ 2 ms) of the lightest step's
PROBE_MAX_P50_FACTOR = 5.0
#: seconds between probe steps, for the last step's replies to come back
PROBE_GAP_S = 0.7
#: a client stops after two steps in a row in which more than this share was refused
CLIENT_STEP_FAILED_SHARE = 0.05


def pct(seconds: list[float], q: float) -> float | None:
    """The q-th percentile in ms, rounded for the report; None when nothing was timed."""
    return round(percentile_ms(seconds, q), 3) if seconds else None


def bootstrap_worker(endpoint: str, model: str, seconds: float, window: int,
                     mix: dict[str, float], seed: int, out: Any,
                     digits: Path = DIGITS) -> None:
    """Closed loop, ``window`` requests of the mix in flight: replies per second. An upper
    bound (a pipelined burst keeps the queue full, which open-loop load does not), used
    only to place the open-loop probe's steps."""
    import zmq

    x, _ = samples(digits, 8)
    rng = random.Random(seed)
    kinds = list(mix)
    weights = [mix[kind] for kind in kinds]
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(endpoint)
    frames = [x[i:i + 1].tobytes() for i in range(len(x))]
    n = 0
    answered = 0

    def send() -> None:
        nonlocal n
        kind = rng.choices(kinds, weights)[0]
        s.send_multipart(mix_frames(kind, f"c{n}", model, 0, n, frames[n % len(frames)]))
        n += 1

    for _ in range(window):
        send()
    t0 = time.monotonic()
    end = t0 + seconds
    while time.monotonic() < end:
        if not s.poll(5000):
            break
        s.recv_multipart()
        answered += 1
        send()
    rate = answered / (time.monotonic() - t0)
    # Let the burst's replies arrive before the probe's first step.
    while n > answered and s.poll(2000):
        s.recv_multipart()
        answered += 1
    s.close(0)
    ctx.term()
    out.put(rate)


def probe_worker(k: int, endpoint: str, model: str, mix: dict[str, float], seed: int,
                 ready: Any, go: Any, out: Any, digits: Path = DIGITS) -> None:
    """Open loop at each step's rate: reports ready, then takes the schedule from ``go``
    (``[(start at, req/s for this client, seconds)]`` on the monotonic clock, which every
    probe process shares). Per step: what was sent, how it was answered and the valid
    requests' latencies; a step's late replies still count for that step."""
    c = MixClient(k, endpoint, model, mix, seed, len(PROBE_FRACTIONS), digits)
    ready.put(k)
    steps = go.get(timeout=300)
    sent_rate = []
    for b, (start, rate, seconds) in enumerate(steps):
        c.wait_until(start)
        t0 = time.monotonic()
        c.run_open_loop(rate, t0 + seconds, lambda _t, b=b: b)
        sent_rate.append(sum(c.sent[b].values()) / max(time.monotonic() - t0, 1e-9))
        if b and c.refused_share_over(b, CLIENT_STEP_FAILED_SHARE) \
                and c.refused_share_over(b - 1, CLIENT_STEP_FAILED_SHARE):
            break  # two overloaded steps in a row: the rest would only be more so
    c.drain(15.0)
    out.put({"k": k, "sent": c.sent, "statuses": c.statuses, "lat": c.lat,
             "sent_rate": sent_rate, "lost": len(c.pending)})
    c.close()


def measure_capacity(endpoint: str, model: str, clients: int, seconds: float,
                     step_s: float, mix: dict[str, float], seed: int,
                     digits: Path = DIGITS) -> dict[str, Any]:
    """What the soak's own open-loop mix sustains: the highest rate at which the daemon
    answered it without a growing queue.

    A short closed-loop burst (``seconds``) gives an upper bound; then the soak's client
    processes run the mix open loop at ``PROBE_FRACTIONS`` of it, ``step_s`` each, and
    the highest step that refused at most ``PROBE_MAX_REFUSED_PCT`` % of its valid
    requests, whose clients kept up and whose p50 stayed near the lightest step's is the
    capacity."""
    spawn = mp.get_context("spawn")
    q: Any = spawn.Queue()
    procs = [spawn.Process(target=bootstrap_worker,
                           args=(endpoint, model, seconds, 16, mix, seed + k, q, digits))
             for k in range(clients)]
    for p in procs:
        p.start()
    upper = float(sum(q.get(timeout=seconds + 120) for _ in procs))
    for p in procs:
        p.join(30)
    rates = [f * upper for f in PROBE_FRACTIONS]
    ready: Any = spawn.Queue()
    go: Any = spawn.Queue()
    out: Any = spawn.Queue()
    procs = [spawn.Process(target=probe_worker, args=(k, endpoint, model, mix, seed + 100 + k,
                                                      ready, go, out, digits))
             for k in range(clients)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=120)  # every client has loaded its samples
    t0 = time.monotonic() + 0.3
    schedule = [(t0 + i * (step_s + PROBE_GAP_S), r / clients, step_s)
                for i, r in enumerate(rates)]
    for _ in procs:
        go.put(schedule)
    parts = [out.get(timeout=len(rates) * (step_s + PROBE_GAP_S) + 180) for _ in procs]
    for p in procs:
        p.join(30)
    steps = _steps(rates, parts)
    capacity = highest_sustained(steps)
    return {"upper_bound_rps": round(upper, 1), "steps": steps, "capacity_rps": capacity,
            # every step held: the daemon sustains at least this much (the soak is gentler)
            "capacity_is_lower_bound": bool(steps) and capacity == steps[-1]["rate_rps"],
            "lost": sum(pt["lost"] for pt in parts)}


def _steps(rates: list[float], parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each step's figures over every client, and whether the step was sustained."""
    steps = []
    for b, rate in enumerate(rates):
        valid = sum(pt["sent"][b]["valid"] for pt in parts)
        if not valid:
            break  # every client had stopped: two overloaded steps before this one
        refused = sum(pt["statuses"][b]["valid"].get("RESOURCE_EXHAUSTED", 0) for pt in parts)
        lat = [x for pt in parts for x in pt["lat"][b]]
        sent_rate = sum(pt["sent_rate"][b] for pt in parts if b < len(pt["sent_rate"]))
        steps.append({"rate_rps": round(rate, 1), "sent_rps": round(sent_rate, 1),
                      "valid_sent": valid,
                      "refused_pct": round(100.0 * refused / valid, 2),
                      "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99)})
    base = next((st["p50_ms"] for st in steps if st["p50_ms"] is not None), None)
    for st in steps:
        st["sustained"] = bool(
            st["refused_pct"] <= PROBE_MAX_REFUSED_PCT
            and st["sent_rps"] >= PROBE_MIN_SENT_SHARE * st["rate_rps"]
            and st["p50_ms"] is not None and base is not None
            and st["p50_ms"] <= PROBE_MAX_P50_FACTOR * base + 2.0)
    return steps


def highest_sustained(steps: list[dict[str, Any]]) -> float:
    """The rate of the last sustained step before the load broke it: a step that failed
    and was followed by another failure (or by nothing). One failed step between
    sustained ones is taken for noise (another process's burst of CPU)."""
    best = 0.0
    for i, st in enumerate(steps):
        if st["sustained"]:
            best = st["rate_rps"]
        elif i + 1 >= len(steps) or not steps[i + 1]["sustained"]:
            break
    return best
