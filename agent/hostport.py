"""`HOST:PORT` addresses of the flags that name a listening socket (`--metrics-address`).

Its own light module: `gputopo-scheduler run` checks its flags before it connects, and the
metrics server's module (`agent.httpserver`) imports prometheus_client and waitress.
"""

from __future__ import annotations


def parse_address(address: str) -> tuple[str, int]:
    """`:9445` -> ("", 9445); `127.0.0.1:0`; `[::1]:9445`. ValueError names the address."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"bad address {address!r}: expected HOST:PORT (port 0 = ephemeral)")
    return host.strip("[]"), int(port)
