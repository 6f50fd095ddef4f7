"""Errors of the bus, each naming the subject or URL involved."""

__all__ = ["BusConnectError", "BusError", "NoResponders", "RemoteFailure", "RequestTimeout"]


class BusError(RuntimeError):
    """Base of every bus error."""


class BusConnectError(BusError):
    """NATS could not be reached at the configured URL."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot reach NATS at {url}: {reason}")
        self.url = url


class RequestTimeout(BusError):
    """No reply within the timeout."""

    def __init__(self, subject: str, timeout_s: float) -> None:
        super().__init__(f"no reply on {subject} within {timeout_s:g} s")
        self.subject = subject
        self.timeout_s = timeout_s


class NoResponders(BusError):
    """Nobody listens on the subject."""

    def __init__(self, subject: str) -> None:
        super().__init__(f"no responders on {subject}: is a node with that role running?")
        self.subject = subject


class RemoteFailure(BusError):
    """The responder received the request but failed to handle it (it replied with a Failure)."""

    def __init__(self, subject: str, error_type: str, reason: str) -> None:
        super().__init__(f"request on {subject} failed remotely: {error_type}: {reason}")
        self.subject = subject
        self.error_type = error_type
        self.reason = reason
