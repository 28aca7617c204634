"""The real daemon in a subprocess on free ports (edged's one harness) and its metrics.

``Daemon`` and ``free_port`` are ``edged.testing.harness``'s own, re-exported so tests and
scripts start daemons the same way.
"""

from __future__ import annotations

import re
import urllib.request

from edged.testing.harness import Daemon, free_port

__all__ = ["Daemon", "free_port", "inflight", "metric", "metrics", "received"]


def metrics(d: Daemon) -> str:
    """The daemon's Prometheus exposition text (it must run with ``metrics=True``)."""
    return urllib.request.urlopen(f"http://127.0.0.1:{d.metrics_port}/metrics").read().decode()


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0.0 if none)."""
    total = 0.0
    for m in re.finditer(rf"^{name}\{{([^}}]*)\}} (\S+)$", text, re.M):
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(2))
    return total


def _inflight(text: str) -> float:
    m = re.search(r"^edged_inflight_requests (\S+)$", text, re.M)
    assert m is not None, "no edged_inflight_requests in /metrics"
    return float(m.group(1))


def inflight(d: Daemon) -> float:
    """Requests the daemon has received and not yet answered (``edged_inflight_requests``)."""
    return _inflight(metrics(d))


def received(d: Daemon) -> float:
    """Requests the daemon has received so far: in flight plus answered, read from one
    scrape so a reply between two reads is not lost or counted twice."""
    text = metrics(d)
    return _inflight(text) + metric(text, "edged_requests_total")
