"""The systemd notify protocol (sd_notify(3)) in pure Python.

Why not libsystemd or a PyPI package: the protocol is one datagram of
newline-separated ``KEY=VALUE`` lines sent to the ``AF_UNIX``/``SOCK_DGRAM``
socket named by ``$NOTIFY_SOCKET``. Writing it here keeps the daemon free of a
C dependency that Jetson/Pi images may lack, and lets us choose the failure
behaviour: a notification must never take the serving path down, so every
send error is swallowed and logged once.

What the daemon tells systemd, and when (see ``systemd/edged.service``):

* ``READY=1`` only after the models are warm and every socket is bound, so that
  ``systemctl start`` (and units ordered ``After=edged.service``) return only
  when requests can actually be answered.
* ``EXTEND_TIMEOUT_USEC`` while a long load runs (TensorRT engine deserialisation,
  TVM module load, first-run warm-up), so ``TimeoutStartSec=`` does not kill a
  start that is making progress, yet a start that hangs is still killed.
* ``WATCHDOG=1`` from the serving path, and only while the event loop and the
  inference workers make progress. A ping from an independent timer thread
  would keep a wedged daemon "alive" forever: the point of the watchdog is that
  a deadlocked loop or a stuck backend call stops the pings and systemd
  restarts the service (``Restart=on-failure``).
* ``RELOADING=1`` + ``MONOTONIC_USEC`` then ``READY=1`` around a config reload;
  systemd >= 253 (``Type=notify-reload``) rejects RELOADING without the
  timestamp and ``systemctl reload`` then hangs until its timeout.
* ``STOPPING=1`` as soon as SIGTERM is handled, so ``systemctl status`` shows
  "deactivating" while the daemon drains queued requests.

With ``NotifyAccess=main`` systemd only accepts messages whose sender (the
kernel attaches the pid as SCM_CREDENTIALS) is the main process: send from the
daemon process itself (any thread), never from a forked or spawned worker.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping

__all__ = ["Notifier"]

log = logging.getLogger(__name__)

#: How long one send may block when systemd's receive queue is full. Bounded so
#: a jammed PID 1 can stall the serving loop for at most this long; long enough
#: that READY=1 survives a short burst of pressure instead of being dropped.
DEFAULT_SEND_TIMEOUT = 0.5

FieldValue = str | int | float | bool


def _format_value(value: FieldValue) -> str:
    """Render one field value; newlines would start a new field, so they are flattened."""
    if isinstance(value, bool):
        text = "1" if value else "0"
    elif isinstance(value, float) and value.is_integer():
        text = str(int(value))
    else:
        text = str(value)
    return text.replace("\r", " ").replace("\n", " ")


def _parse_address(raw: str) -> str | None:
    """Turn ``$NOTIFY_SOCKET`` into an ``AF_UNIX`` address, or None when unusable.

    ``@name`` is Linux's abstract namespace (no file; the kernel wants a leading
    NUL). systemd itself only ever hands out absolute paths or ``@`` names;
    ``vsock:`` addresses (systemd >= 254, for VMs) are not supported here and
    make the notifier a no-op with a warning rather than an error.
    """
    if raw.startswith("@"):
        return "\0" + raw[1:]
    if raw.startswith("/"):
        return raw
    return None


class Notifier:
    """Sends sd_notify messages to systemd; a silent no-op when not under systemd.

    Create it with :meth:`from_env` once at start-up. Methods return True when a
    datagram was sent and False otherwise (no socket, or the send failed); they
    never raise, because losing a status message must not cost a request.
    Thread-safe: each message is one ``sendto`` on a datagram socket.
    """

    def __init__(
        self,
        address: str | None,
        *,
        watchdog_usec: int | None = None,
        watchdog_pid: int | None = None,
        send_timeout: float = DEFAULT_SEND_TIMEOUT,
    ) -> None:
        """Use :meth:`from_env` in the daemon; this form exists for tests and tools.

        ``address`` is the raw ``$NOTIFY_SOCKET`` value (``/path`` or ``@abstract``)
        or None for a no-op notifier.
        """
        self._raw_address = address or None
        self._address: str | None = None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._failing = False
        self._send_timeout = send_timeout
        self._watchdog_usec = watchdog_usec
        self._watchdog_pid = watchdog_pid
        if self._raw_address is None:
            return
        parsed = _parse_address(self._raw_address)
        if parsed is None:
            log.warning(
                "NOTIFY_SOCKET=%r is not an absolute path or @abstract name; "
                "systemd notifications are disabled",
                self._raw_address,
            )
            return
        self._address = parsed

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        unset_environment: bool = False,
        send_timeout: float = DEFAULT_SEND_TIMEOUT,
    ) -> Notifier:
        """Build a notifier from ``NOTIFY_SOCKET``, ``WATCHDOG_USEC`` and ``WATCHDOG_PID``.

        ``unset_environment=True`` removes those variables from ``os.environ``
        (like sd_notify's ``unset_environment``) so that child processes, e.g.
        compile jobs or multiprocessing workers, do not inherit them and send
        notifications systemd would reject (``NotifyAccess=main``) or, worse,
        accept. Only honoured when ``environ`` is ``os.environ`` (the default).
        """
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET") or None
        usec = _parse_positive_int(env.get("WATCHDOG_USEC"), "WATCHDOG_USEC")
        pid = _parse_positive_int(env.get("WATCHDOG_PID"), "WATCHDOG_PID")
        if unset_environment and env is os.environ:
            for key in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
                os.environ.pop(key, None)
        return cls(address, watchdog_usec=usec, watchdog_pid=pid, send_timeout=send_timeout)

    # -- state -----------------------------------------------------------

    @property
    def enabled(self) -> bool:
        """True when there is a usable notify socket (i.e. we run under Type=notify)."""
        return self._address is not None

    @property
    def address(self) -> str | None:
        """The socket address as given in ``$NOTIFY_SOCKET`` (None when disabled)."""
        return self._raw_address if self.enabled else None

    def watchdog_interval(self) -> float | None:
        """Seconds between ``WATCHDOG=1`` pings, or None when the watchdog is off.

        Half of ``WATCHDOG_USEC`` (sd_watchdog_enabled(3) recommends pinging at
        half the timeout so one late ping is not fatal). None when there is no
        notify socket, no ``WATCHDOG_USEC``, or ``WATCHDOG_PID`` names another
        process: the variables were then inherited from a parent that is the
        one systemd watches, and our pings would be rejected.
        """
        if not self.enabled or not self._watchdog_usec:
            return None
        if self._watchdog_pid is not None and self._watchdog_pid != os.getpid():
            return None
        return self._watchdog_usec / 2 / 1_000_000

    # -- messages --------------------------------------------------------

    def ready(self, status: str | None = None) -> bool:
        """``READY=1``: start-up (or a reload) finished; models warm, sockets bound."""
        if status is None:
            return self.notify(READY=1)
        return self.notify(READY=1, STATUS=status)

    def status(self, text: str) -> bool:
        """``STATUS=``: one line shown by ``systemctl status`` (e.g. "serving 2 models")."""
        return self.notify(STATUS=text)

    def watchdog(self) -> bool:
        """``WATCHDOG=1``: call from the serving path only, after checking progress.

        The ping asserts "the event loop turns and the workers finish batches".
        Sending it from a timer thread that does not check that would defeat the
        watchdog (see the module docstring).
        """
        return self.notify(WATCHDOG=1)

    def reloading(self, status: str | None = None) -> bool:
        """``RELOADING=1`` + ``MONOTONIC_USEC``: a reload started; send ``ready()`` after.

        systemd >= 253 matches the timestamp against the reload request; without
        it ``Type=notify-reload`` units never leave "reloading". CLOCK_MONOTONIC
        is the clock systemd expects, and ``time.monotonic_ns`` reads it on Linux.
        """
        fields: dict[str, FieldValue] = {
            "RELOADING": 1,
            "MONOTONIC_USEC": time.monotonic_ns() // 1000,
        }
        if status is not None:
            fields["STATUS"] = status
        return self.notify(**fields)

    def stopping(self, status: str | None = None) -> bool:
        """``STOPPING=1``: shutdown began (SIGTERM handled); draining follows."""
        if status is None:
            return self.notify(STOPPING=1)
        return self.notify(STOPPING=1, STATUS=status)

    def extend_timeout(self, seconds: float) -> bool:
        """``EXTEND_TIMEOUT_USEC``: "still starting/reloading/stopping, give me ``seconds`` more".

        systemd extends the current start/stop timeout so it ends ``seconds``
        from now (it never shortens it). Send it again before that runs out,
        e.g. once per loaded variant or every few seconds of an engine build:
        a load that truly hangs then still hits the timeout.
        """
        usec = max(0, int(seconds * 1_000_000))
        return self.notify(EXTEND_TIMEOUT_USEC=usec)

    def notify(self, **fields: FieldValue) -> bool:
        """Send one datagram made of ``KEY=VALUE`` lines, in argument order.

        E.g. ``notify(READY=1, STATUS="serving")``. Values are stringified
        (True -> ``1``); a newline in a value is replaced by a space because it
        would otherwise start a new, unintended field.
        """
        if not fields:
            return False
        lines = []
        for key, value in fields.items():
            if not key or "=" in key or "\n" in key:
                log.warning("ignoring invalid sd_notify field name %r", key)
                continue
            lines.append(f"{key}={_format_value(value)}")
        if not lines:
            return False
        return self.send("\n".join(lines))

    def send(self, message: str | bytes) -> bool:
        """Send a pre-formatted message as-is (the raw protocol). Never raises."""
        if self._address is None:
            return False
        data = message.encode() if isinstance(message, str) else message
        try:
            with self._lock:
                sock = self._socket()
                sock.sendto(data, self._address)
        except OSError as exc:
            self._report_failure(exc)
            return False
        if self._failing:
            log.info("systemd notify socket %s accepts messages again", self._raw_address)
            self._failing = False
        return True

    def close(self) -> None:
        """Close the socket; later messages reopen it. Safe to call twice."""
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None

    def __enter__(self) -> Notifier:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Notifier(address={self.address!r}, watchdog_interval={self.watchdog_interval()!r})"

    # -- internals -------------------------------------------------------

    def _socket(self) -> socket.socket:
        """One unconnected socket kept open; ``sendto`` per message.

        Unconnected so a restarted receiver (``systemctl daemon-reexec``
        recreates /run/systemd/notify) is reached again without reopening.
        CLOEXEC so children do not inherit it.
        """
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            sock.settimeout(self._send_timeout)
            self._sock = sock
        return self._sock

    def _report_failure(self, exc: OSError) -> None:
        """Warn on the first failure of a run of failures, then stay quiet (debug)."""
        if isinstance(exc, TimeoutError) or exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
            reason = "systemd's notify queue is full"
        else:
            reason = str(exc)
        if not self._failing:
            self._failing = True
            log.warning(
                "cannot send to systemd notify socket %s (%s); "
                "further failures are logged at debug level",
                self._raw_address,
                reason,
            )
        else:
            log.debug("sd_notify send failed: %s", reason)


def _parse_positive_int(value: str | None, name: str) -> int | None:
    """Parse an env var that must be a positive integer; junk is ignored with a warning."""
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        log.warning("ignoring %s=%r: not an integer", name, value)
        return None
    if number <= 0:
        log.warning("ignoring %s=%r: not positive", name, value)
        return None
    return number
