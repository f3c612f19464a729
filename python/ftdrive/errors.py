"""The exceptions the ftdrive client raises.

Every error the head answers becomes an :class:`ApiError` carrying the HTTP status and the
head's own message (its JSON body is ``{"error": "..."}``). Problems found before a request
is sent (no head configured, no token) are :class:`ConfigError`; a head that cannot be reached
is :class:`HeadUnreachableError`; a job spec refused before sending is :class:`SpecError`, and
another bad argument (an empty job id) :class:`ArgumentError`. All of them derive from
:class:`FtdriveError`.
"""

from __future__ import annotations


class FtdriveError(Exception):
    """Base class of every error this package raises."""


class SpecError(FtdriveError, ValueError):
    """A job spec the client can tell is wrong before sending it (an unknown or missing field).
    Also a ``ValueError``, as torchx expects of a bad app."""


class ArgumentError(FtdriveError, ValueError):
    """A bad argument, refused without asking the head about it: an empty job id or node name
    (no request is sent); under torchx, a replica the app does not have, or a stream ftdrive
    does not keep apart. Also a ``ValueError``, as it is a bad value."""


class ConfigError(FtdriveError):
    """The client cannot tell where the head is or which credential to present."""


class HeadUnreachableError(FtdriveError):
    """The head could not be reached (refused, timed out, TLS failure, connection lost).

    ``lasting`` is true when the cause will not pass by itself — TLS set up differently at the
    two ends (a wrong scheme, a certificate not trusted here): calls that ride out a head's
    restart raise it at once rather than wait for the head to come back."""

    def __init__(self, message: str, *, lasting: bool = False) -> None:
        super().__init__(message)
        self.lasting = lasting


class ApiError(FtdriveError):
    """The head answered with an error status.

    ``status`` is the HTTP status code (400 bad input, 401/403 credentials, 404 unknown job,
    node or actor, 502 an agent could not be reached, 503 the head is stopping and changed
    nothing); ``message`` is the head's own explanation, taken from its ``{"error": ...}`` body
    (or the body's text when the head answered something else).
    """

    def __init__(self, status: int, message: str, method: str = "", path: str = "") -> None:
        self.status = status
        self.message = message
        self.method = method
        self.path = path
        where = f" ({method} {path})" if method else ""
        super().__init__(f"the head answered {status}{where}: {message}")
