"""Logging set-up that journald keeps well.

Under systemd (JOURNAL_STREAM set) lines carry an sd-daemon ``<N>`` priority prefix
and no timestamp (journald adds its own); elsewhere a timestamp and level name.
Context goes in key=value pairs in the message, never one line per request.
"""

from __future__ import annotations

import logging
import os
import sys

_SD_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3,
                logging.CRITICAL: 2}


class _JournalFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        prio = _SD_PRIORITY.get(record.levelno, 6)
        return f"<{prio}>{record.name}: {super().format(record)}"


def setup_logging(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if os.environ.get("JOURNAL_STREAM"):
        handler.setFormatter(_JournalFormatter("%(message)s"))
    else:
        handler.setFormatter(logging.Formatter(
            "%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("edged").setLevel(level.upper())
