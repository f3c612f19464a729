"""Where the head is and which credential to present, found exactly as the ``ftdrive`` CLI
finds them (``actors/src/cli`` and ``actors/src/paths.rs``):

* the head: an explicit ``head=`` argument, else ``$FTDRIVE_HEAD``; a value without a scheme
  means ``http://`` on loopback (``127.0.0.1:7380``) and ``https://`` elsewhere (a head serves
  plain HTTP only on loopback unless told otherwise), and a bare host the head's port, 7380. There is no
  other fallback: with neither, the CLI (except ``ftdrive submit``, which then starts an
  embedded cluster) refuses, and so does this client.
* the client token: an explicit ``token=`` argument, else ``$FTDRIVE_TOKEN`` when set and not
  empty, else the ``token`` file in the state directory (surrounding whitespace trimmed).
* the state directory: an explicit ``state_dir=`` argument, else ``$FTDRIVE_STATE_DIR``, else
  ``$HOME/.ftdrive``.
* TLS (DESIGN §11): an ``https://`` head is verified against ``ca_cert=`` or
  ``$FTDRIVE_CA_CERT`` when given, else against the system's trusted certificates.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple, Union

from .errors import ConfigError

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class Connection:
    """A resolved head address, credential and TLS setting, with where the token and the CA
    certificate came from (named when the head refuses the one or is not trusted with the other)."""

    base_url: str
    token: str
    ssl_context: Optional[ssl.SSLContext] = None
    #: ``token=``, ``$FTDRIVE_TOKEN`` or the token file's path.
    token_from: str = "token="
    #: The CA certificate file an https head is verified with; None: the system's roots.
    ca_cert: Optional[str] = None


def _given(var: str) -> Optional[str]:
    """An environment variable's value, or None when it is unset or empty."""
    value = os.environ.get(var)
    return value if value else None


def default_state_dir() -> Path:
    """``$FTDRIVE_STATE_DIR``, else ``$HOME/.ftdrive`` (as the CLI's ``default_state_dir``)."""
    if "FTDRIVE_STATE_DIR" in os.environ:
        return Path(os.environ["FTDRIVE_STATE_DIR"])
    return Path(os.environ.get("HOME", ".")) / ".ftdrive"


#: Where a token given in the environment comes from, as the head's refusal of it names it.
TOKEN_VAR = "$FTDRIVE_TOKEN"

DEFAULT_HEAD_PORT = 7380
"""Where a head listens unless told otherwise, and so where a bare ``HOST`` points."""


def head_url(head: Optional[str] = None) -> str:
    """The head's base URL from ``head``, else ``$FTDRIVE_HEAD``: ``HOST:PORT``; a bare ``HOST``,
    on the head's default port (7380); or ``http(s)://HOST[:PORT]``, which keeps its scheme's
    port as any URL does. Without a scheme, a loopback host means ``http://`` and any other
    ``https://``: a token crosses the network in clear only where ``http://`` is written out.
    Anything else is a ``ConfigError`` saying how to write one."""
    value = head or _given("FTDRIVE_HEAD")
    if not value:
        raise ConfigError("no head given: pass head='http://HOST:PORT' or set $FTDRIVE_HEAD")

    def bad(why: str) -> ConfigError:
        return ConfigError(
            f"head {value!r}: {why}; give HOST:PORT or http(s)://HOST:PORT, such as 127.0.0.1:{DEFAULT_HEAD_PORT}"
        )

    bare = "://" not in value
    parts = urllib.parse.urlsplit(f"http://{value}" if bare else value)
    if parts.scheme not in ("http", "https"):
        raise bad(f"`{parts.scheme}://` is not http:// or https://")
    try:
        port = parts.port
    except ValueError as e:
        raise bad(f"not an address ({e})") from None
    if not parts.hostname or any(c.isspace() for c in parts.netloc):
        raise bad("names no host" if not parts.hostname else "not an address")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise bad(f"has a path (`{parts.path}`); the head's address is its host and port only")
    netloc = f"{parts.netloc}:{DEFAULT_HEAD_PORT}" if bare and port is None else parts.netloc
    scheme = "https" if bare and not _is_loopback(parts.hostname) else parts.scheme
    return urllib.parse.urlunsplit((scheme, netloc, "", "", ""))


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host.lower() == "localhost"


def client_token(token: Optional[str] = None, state_dir: Optional[PathLike] = None) -> str:
    """The client token: ``token``, else ``$FTDRIVE_TOKEN``, else ``<state dir>/token``."""
    return client_token_from(token, state_dir)[0]


def client_token_from(token: Optional[str] = None, state_dir: Optional[PathLike] = None) -> Tuple[str, str]:
    """As :func:`client_token`, with where it came from: ``token=``, ``$FTDRIVE_TOKEN`` or the
    file's path."""
    if token:
        return _checked(token, "token="), "token="
    from_env = _given("FTDRIVE_TOKEN")
    if from_env:
        return _checked(from_env, TOKEN_VAR), TOKEN_VAR
    path = (Path(state_dir) if state_dir is not None else default_state_dir()) / "token"
    try:
        return _checked(path.read_text().strip(), str(path)), str(path)
    except OSError as e:
        raise ConfigError(
            f"no API token: set $FTDRIVE_TOKEN or make {path} readable ({e.strerror or e}); the head writes it at start"
        ) from e


def _checked(token: str, source: str) -> str:
    """A token goes into an HTTP header: one with a space or a newline (two lines pasted) is
    refused here, as the CLI refuses it, rather than failing as an unreachable head."""
    bad = next((c for c in token if not ("!" <= c <= "~")), None)
    if bad is not None:
        raise ConfigError(
            f"the token from {source} holds {bad!r}, which no token has: give the contents of the head's "
            "`token` file, one line"
        )
    return token


def ca_cert_file(ca_cert: Optional[PathLike] = None) -> Optional[str]:
    """The CA certificate file: ``ca_cert``, else ``$FTDRIVE_CA_CERT``, else None."""
    return str(ca_cert) if ca_cert else _given("FTDRIVE_CA_CERT")


def tls_context(base_url: str, ca_cert: Optional[PathLike] = None) -> Optional[ssl.SSLContext]:
    """For an https head: a context verifying it against ``ca_cert`` / ``$FTDRIVE_CA_CERT``
    (else the system's trusted certificates). None for plain http."""
    cafile = ca_cert_file(ca_cert)
    if not base_url.startswith("https://"):
        return None
    if cafile is None:
        return ssl.create_default_context()
    try:
        return ssl.create_default_context(cafile=cafile)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(
            f"cannot use the CA certificate {cafile} ({e}); pass ca_cert= or set $FTDRIVE_CA_CERT "
            "to the PEM file the head's certificate is signed with"
        ) from e


def resolve(
    head: Optional[str] = None,
    token: Optional[str] = None,
    state_dir: Optional[PathLike] = None,
    ca_cert: Optional[PathLike] = None,
) -> Connection:
    """Everything a client needs to talk to the head, or a ConfigError saying what is missing."""
    base_url = head_url(head)
    token, token_from = client_token_from(token, state_dir)
    https = base_url.startswith("https://")
    return Connection(
        base_url=base_url,
        token=token,
        ssl_context=tls_context(base_url, ca_cert),
        token_from=token_from,
        ca_cert=ca_cert_file(ca_cert) if https else None,
    )
