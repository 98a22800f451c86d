"""How fast a request must arrive: the time limits of a connection's current request, as a rule with
no I/O (the server's sweep calls it once a tick, :meth:`HttpConnection.check_time`).

Times are the seconds the client had to send: while the server itself stops reading (the app is slow
to take the body, or an earlier pipelined answer is still being sent), the clocks stand still.

- A head (request line and headers) must arrive within ``slow_client_timeout_secs`` of its first byte
  (of the connection's opening, for its first request).
- A body must not stall for ``slow_client_timeout_secs``, and after that long it must average
  ``min_body_rate`` bytes a second: a client sending 10 bytes every 5 s resets a stall timer forever,
  but falls under the rate at the end of the grace.
- The whole request must arrive within ``request_timeout_secs``, however steady.
"""

from __future__ import annotations

from dataclasses import dataclass

from conch.frontends.http.limits import HttpLimits


@dataclass
class RequestPace:
    """The clocks of the request arriving on one connection."""

    #: Seconds since the request's first byte (the connection's opening for its first request).
    request_secs: float = 0.0
    #: Seconds since its head was complete, and the body bytes since.
    body_secs: float = 0.0
    body_bytes: int = 0
    #: Seconds since a byte last came.
    stalled_secs: float = 0.0

    def restart(self) -> None:
        self.request_secs = self.body_secs = self.stalled_secs = 0.0
        self.body_bytes = 0

    def advance(self, seconds: float, in_body: bool) -> None:
        self.request_secs += seconds
        self.stalled_secs += seconds
        if in_body:
            self.body_secs += seconds

    def late_head(self, limits: HttpLimits) -> str | None:
        if self.request_secs > limits.slow_client_timeout_secs:
            return (
                "the request's line and headers did not arrive within "
                f"{limits.slow_client_timeout_secs:g} s (--http-slow-client-timeout-secs)"
            )
        return self.late_request(limits)

    def late_body(self, limits: HttpLimits) -> str | None:
        if self.stalled_secs > limits.slow_client_timeout_secs:
            return (
                f"no byte of the request body arrived for {limits.slow_client_timeout_secs:g} s "
                "(--http-slow-client-timeout-secs)"
            )
        grace = limits.slow_client_timeout_secs
        if self.body_secs > grace and self.body_bytes < limits.min_body_rate * (self.body_secs - grace):
            return (
                f"the request body arrived slower than {limits.min_body_rate} bytes a second "
                "(--http-min-body-rate); send it faster"
            )
        return self.late_request(limits)

    def late_request(self, limits: HttpLimits) -> str | None:
        if self.request_secs > limits.request_timeout_secs:
            return (
                f"the request did not arrive whole within {limits.request_timeout_secs:g} s "
                "(--http-request-timeout-secs)"
            )
        return None

    def rate(self, header_bytes: int) -> float:
        """Bytes a second this request has arrived at so far, for choosing whom to evict."""
        return (header_bytes + self.body_bytes) / max(self.request_secs, 0.5)
