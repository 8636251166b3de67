"""The systemd notification protocol (sd_notify): READY, STATUS, WATCHDOG, EXTEND_TIMEOUT, RELOADING, STOPPING.

A message is one datagram of ``KEY=VALUE`` lines sent to ``$NOTIFY_SOCKET``; a
leading ``@`` names a Linux abstract socket (sd_notify(3)). systemd-python's
``systemd.daemon.notify`` is used when it can be imported, otherwise a few lines
of ``socket`` do the same. Outside systemd (no ``NOTIFY_SOCKET``) every call is
a no-op, so the daemon never needs to ask whether it runs under systemd.
"""

from __future__ import annotations

import os
import socket
from typing import Callable, Mapping, Optional

from healthd.text import one_line

# The longest value sent; a STATUS= line is for `systemctl status`, one screen line or so.
_VALUE_LIMIT = 1000


def _send_datagram(address: str, message: str) -> bool:
    # sd_notify(3): "@" at the start means the abstract namespace (a leading NUL byte).
    target = "\0" + address[1:] if address.startswith("@") else address
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(target)
            sock.sendall(message.encode("utf-8", "replace"))
    except OSError:
        return False
    return True


def _systemd_sender() -> Optional[Callable[[str], bool]]:
    try:
        from systemd import daemon
    except ImportError:
        return None

    def send(message: str) -> bool:
        return bool(daemon.notify(message))

    return send


def watchdog_interval(environ: Optional[Mapping[str, str]] = None) -> Optional[float]:
    """Seconds between ``WATCHDOG=1`` pings (half of ``WATCHDOG_USEC``), or None without a watchdog.

    sd_watchdog_enabled(3): ``WATCHDOG_PID``, when set, must be our own pid, else the
    watchdog belongs to another process of the service.
    """
    env = os.environ if environ is None else environ
    usec = env.get("WATCHDOG_USEC", "")
    pid = env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    if pid and (not pid.isdigit() or int(pid) != os.getpid()):
        return None
    return int(usec) / 2_000_000


class Notifier:
    """Sends state changes to the service manager; silently does nothing outside systemd."""

    def __init__(self, environ: Optional[Mapping[str, str]] = None) -> None:
        env = os.environ if environ is None else environ
        self.address = env.get("NOTIFY_SOCKET") or None
        self.watchdog_seconds = watchdog_interval(env)
        # systemd-python reads the real environment, so it serves only when we do too.
        library = _systemd_sender() if environ is None else None
        address = self.address
        if library is not None:
            self._send: Callable[[str], bool] = library
        elif address is not None:
            self._send = lambda message: _send_datagram(address, message)
        else:
            self._send = lambda message: False

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, **fields: str) -> bool:
        """Send ``KEY=VALUE`` lines (keys upper-cased); True when the datagram went out."""
        if not self.enabled or not fields:
            return False
        # A newline inside a value would start a new, bogus assignment: each value is one line.
        lines = (f"{key.upper()}={one_line(value, _VALUE_LIMIT)}" for key, value in fields.items())
        return self._send("\n".join(lines))

    def ready(self, status: str) -> bool:
        return self.notify(ready="1", status=status)

    def status(self, text: str) -> bool:
        return self.notify(status=text)

    def extend_timeout(self, seconds: float) -> bool:
        """Ask for ``seconds`` more before the next message is due (start-up, reload or stop timeout)."""
        return self.notify(extend_timeout_usec=str(int(seconds * 1_000_000)))

    def watchdog(self) -> bool:
        return self.notify(watchdog="1")

    def reloading(self) -> bool:
        return self.notify(reloading="1", status="reloading configuration")

    def stopping(self) -> bool:
        return self.notify(stopping="1", status="stopping")
