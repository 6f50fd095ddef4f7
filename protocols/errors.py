"""The one error that decoding anything off the wire may raise."""

__all__ = ["ProtocolError"]


class ProtocolError(ValueError):
    """A message could not be decoded or validated.

    `field` names where the problem is (a dotted field path, or `<payload>`/`<envelope>` for the
    message as a whole); `problem` says what is wrong with it.
    """

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem
