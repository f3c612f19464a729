"""A client for the ftdrive head's HTTP API (``actors/src/head/api.rs``), standard library only.

>>> from ftdrive import Client, JobSpec
>>> client = Client()                      # $FTDRIVE_HEAD, token as the CLI finds it
>>> job = client.submit(JobSpec(name="hello", command=["echo", "hi"], min_nodes=1, max_nodes=1))
>>> client.wait(job.id).state
'SUCCEEDED'

Every method maps to one route; an error the head answers raises
:class:`~ftdrive.errors.ApiError` with its status and message, and nothing else happens.
"""

from __future__ import annotations

import codecs
import functools
import http.client
import json
import socket
import ssl
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Dict, Generator, Iterator, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

from . import connection
from .connection import TOKEN_VAR, PathLike
from .errors import ApiError, ArgumentError, ConfigError, FtdriveError, HeadUnreachableError
from .models import Actor, Drain, Event, Health, Job, LogChunk, Node
from .spec import JobSpec

#: How long ``events(follow=False)`` waits for the next line before it stops.
PAUSE_S = 0.25
#: A head sends a blank line whenever an event stream was quiet for the interval it names in
#: this header; this many such intervals without a byte mean it is stopped or cut off.
KEEPALIVE_HEADER = "x-ftdrive-keepalive-ms"
KEEPALIVES_MISSED = 3
#: How long ``wait`` and a followed log ask again a head that cannot be reached (restarting,
#: say) before giving up.
HEAD_RETURN_TIMEOUT_S = 120.0
#: A head's answers that say it is away for now: an agent it needs not reached yet (502), or
#: itself stopping (503: its state database failed it, and it changed nothing).
_AWAY = (502, 503)
#: The first and the longest pause between asking a head that is away again.
_AWAY_PAUSE_S = (0.1, 2.0)
#: What OpenSSL reports when an ``https://`` request is answered in plain http (by version).
_NOT_TLS = frozenset({"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"})
#: OpenSSL's verify codes for a certificate whose issuer is not trusted here (unable to get the
#: issuer, self-signed, self-signed in the chain, unable to verify the first certificate).
_UNTRUSTED_ISSUER = frozenset({2, 18, 19, 20, 21})
#: OpenSSL's verify codes for a certificate that does not name the host or address asked for.
_NAME_MISMATCH = frozenset({62, 64})
#: How long the probe of whether an http:// head speaks TLS waits.
_PROBE_S = 3.0
#: The least time a request is given when a caller's deadline is that close or past: the
#: deadline is checked after it, and a request given no time at all would not be sent.
_SHORTEST_REQUEST_S = 0.05


@dataclass(frozen=True)
class Directions:
    """How the caller gives the head's address, the CA certificate an https head is verified
    with and the state dir whose token file is read, in the caller's own terms: errors that need
    one fixed name it this way (the torchx scheduler names its ``-cfg`` options, and has no
    ``state_dir=``)."""

    head: str = "pass head= or set $FTDRIVE_HEAD"
    ca_cert: str = "ca_cert= or $FTDRIVE_CA_CERT"
    state_dir: str = "state_dir=, $FTDRIVE_STATE_DIR, else ~/.ftdrive"


T = TypeVar("T")


class Client:
    """Talks to one head. Arguments left out are found as the ``ftdrive`` CLI finds them:
    ``head`` from ``$FTDRIVE_HEAD``; ``token`` from ``$FTDRIVE_TOKEN`` or the ``token`` file in
    ``state_dir`` (``$FTDRIVE_STATE_DIR``, else ``~/.ftdrive``); for an ``https://`` head, the
    CA certificate from ``ca_cert`` or ``$FTDRIVE_CA_CERT``. ``timeout`` bounds connecting and
    each ordinary request, in seconds. ``directions`` says how a fix of the head's address or
    CA certificate is given, in the errors that need one."""

    directions: Directions = Directions()

    def __init__(
        self,
        head: Optional[str] = None,
        token: Optional[str] = None,
        *,
        state_dir: Optional[PathLike] = None,
        ca_cert: Optional[PathLike] = None,
        timeout: float = 30.0,
    ) -> None:
        self._conn = connection.resolve(head=head, token=token, state_dir=state_dir, ca_cert=ca_cert)
        self.timeout = timeout
        parts = urllib.parse.urlsplit(self._conn.base_url)
        if not parts.hostname:
            raise ConfigError(f"head {self._conn.base_url!r} names no host")
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")

    @property
    def base_url(self) -> str:
        """The head's URL, e.g. ``http://127.0.0.1:7380``."""
        return self._conn.base_url

    def dashboard_url(self, job: Optional[str] = None) -> str:
        """The head's web page, or one job's page on it."""
        return f"{self.base_url}/#/jobs/{job}" if job else f"{self.base_url}/"

    # ---- jobs ---------------------------------------------------------------------------

    def submit(self, spec: Union[JobSpec, Mapping[str, Any]]) -> Job:
        """Submits a job (a :class:`JobSpec` or a ``job.json`` dict) and returns it as the head
        recorded it (``.id`` is the new job's id). Bad specs raise ApiError 400 naming the field."""
        body = spec.to_dict() if isinstance(spec, JobSpec) else dict(spec)
        return Job.from_json(self._json("POST", "/v1/jobs", {"spec": body}))

    def status(self, job: str) -> Job:
        """One job, with its actors and attempt ledger."""
        return Job.from_json(self._json("GET", f"/v1/jobs/{_seg(job)}"))

    def jobs(
        self,
        states: Union[str, Sequence[str], None] = None,
        limit: Optional[int] = None,
        before: Optional[str] = None,
    ) -> List[Job]:
        """The jobs the head keeps (running ones and recently finished ones), in submission
        order: only those in ``states`` (a state, or a list such as ``["PENDING", "RUNNING"]``)
        when given, only those submitted before job ``before`` (an id such as ``"j40"``) when
        given, and only the newest ``limit`` of them. To page back through older jobs, pass
        the first (oldest) id of one page as ``before`` of the next, until a page is empty."""
        query: Dict[str, str] = {}
        if states:
            query["state"] = states if isinstance(states, str) else ",".join(states)
        if before is not None:
            query["before"] = before
        if limit is not None:
            if int(limit) < 1:
                raise ArgumentError(f"limit={limit}: give the number of newest jobs to list, 1 or more")
            query["limit"] = str(int(limit))
        path = "/v1/jobs" + ("?" + urllib.parse.urlencode(query) if query else "")
        return [Job.from_json(j) for j in self._json("GET", path)]

    def stop(self, job: str) -> Job:
        """Stops a job (its processes get SIGTERM, then SIGKILL after ``stop_grace_ms``);
        returns it as it stands. It reaches STOPPED once nothing of it runs any more."""
        return Job.from_json(self._json("POST", f"/v1/jobs/{_seg(job)}/stop"))

    def wait(
        self,
        job: str,
        timeout: Optional[float] = None,
        poll_interval: float = 0.2,
        head_return_timeout: float = HEAD_RETURN_TIMEOUT_S,
    ) -> Job:
        """Polls until the job is SUCCEEDED, FAILED or STOPPED and returns it. Raises
        TimeoutError when ``timeout`` seconds pass first.

        A head restart loses no job, so a head that cannot be reached is polled on for up to
        ``head_return_timeout`` seconds before :class:`HeadUnreachableError` is raised."""
        deadline = None if timeout is None else time.monotonic() + timeout
        away = HeadAway(self.base_url, head_return_timeout)
        while True:
            try:
                # No request outlasts the caller's deadline (``timeout`` bounds the whole call).
                view: Optional[Job] = Job.from_json(
                    self._json("GET", f"/v1/jobs/{_seg(job)}", timeout=self._request_timeout(deadline))
                )
                away.answered()
            except HeadUnreachableError as e:
                away.ride_out(e)
                view = None
            if view is not None and view.is_terminal:
                return view
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                where = view.state if view is not None else "unknown (the head cannot be reached)"
                raise TimeoutError(f"job {job} is still {where} after {timeout} s")
            time.sleep(poll_interval if left is None else min(poll_interval, left))

    # ---- events -------------------------------------------------------------------------

    def events(
        self, job: Optional[str] = None, *, follow: bool = True, idle_timeout: Optional[float] = None
    ) -> Generator[Event, None, None]:
        """The head's NDJSON event stream, one :class:`Event` per line.

        For one job, the first line is a ``snapshot`` of it; the stream ends when the job
        ends (with a last snapshot). Without ``job``, every event of the cluster, for as long
        as the caller reads. ``follow=False`` stops at the first pause in the stream (the lines
        the head has ready now); ``idle_timeout`` stops once no event arrived for that long.
        An empty ``job`` is :class:`ArgumentError`, as for every method taking a job id.

        The stream is open when this returns (an unknown job or a refused token raise here),
        so every event from then on is in it. Closing the iterator closes the connection. A
        stream the head ends otherwise (it is stopping or restarting; the jobs run on), or one
        silent for three of the keep-alive intervals the head names (a stopped head, a lost
        network), raises :class:`HeadUnreachableError`: call ``events`` again once it is back."""
        # An empty job id is refused, not taken for "every job".
        path = "/v1/events" if job is None else f"/v1/jobs/{_seg(job)}/events"
        idle = PAUSE_S if not follow and idle_timeout is None else idle_timeout
        conn, response, sock = self._open("GET", path)
        return self._event_lines(conn, response, sock, path, idle)

    def _event_lines(
        self,
        conn: http.client.HTTPConnection,
        response: http.client.HTTPResponse,
        sock: Optional[socket.socket],
        path: str,
        idle: Optional[float],
    ) -> Generator[Event, None, None]:
        # A job's stream ends on its final snapshot; any other end is the head's going away.
        finished = False
        silence = _silence_limit(response.getheader(KEEPALIVE_HEADER))
        last_event = time.monotonic()
        try:
            while True:
                # The response's own socket: the connection lets go of it when the head says it
                # closes the connection after the stream, as it does.
                idle_left = None if idle is None else last_event + idle - time.monotonic()
                if idle_left is not None and idle_left <= 0:
                    return  # keep-alives came, but no event for `idle`
                waits = [w for w in (idle_left, silence) if w is not None]
                if sock is not None:
                    sock.settimeout(min(waits) if waits else None)
                try:
                    line = response.readline()
                except (socket.timeout, TimeoutError):
                    if idle is not None and time.monotonic() - last_event >= idle:
                        return
                    raise HeadUnreachableError(
                        f"the head at {self.base_url} sent nothing for {silence:g} s, not even the keep-alive it "
                        "sends when quiet: is it stopped, or cut off? follow again once it answers"
                    ) from None
                except (OSError, http.client.HTTPException) as e:
                    raise HeadUnreachableError(f"lost the head's event stream at {self.base_url}: {e}") from e
                if not line:
                    if finished:
                        return
                    raise HeadUnreachableError(
                        f"the head at {self.base_url} ended the event stream: it is stopping or restarting, "
                        "and the jobs run on; follow again once it is back"
                    )
                text = line.decode("utf-8", errors="replace").strip()
                if text:  # a blank line is a keep-alive
                    event = Event.from_json(_parse(text, path))
                    finished = event.job is not None and event.job.is_terminal
                    last_event = time.monotonic()
                    yield event
        finally:
            conn.close()

    # ---- logs ---------------------------------------------------------------------------

    def log_chunk(
        self,
        job: str,
        index: Optional[ActorRef] = None,
        *,
        rank: Optional[int] = None,
        attempt: Optional[int] = None,
        local_rank: Optional[int] = None,
        offset: int = 0,
        tail: Optional[int] = None,
    ) -> LogChunk:
        """One read of an attempt's log from ``offset``, or of its last ``tail`` lines (default
        attempt: the latest); ``next_offset`` says where to read on. The actor is its index
        (``1``) or its name (``"j7/1"``, as ``Actor.name`` and the CLI's ``--actor`` have it);
        or, instead, ``rank`` names a global rank (torchrun's ``RANK``) and the head reads the log
        of whoever holds it, or last held it (its actor, attempt and worker are the chunk's)."""
        query = _whose_log(job, index, rank, attempt, local_rank)
        query["offset"] = _not_negative("offset", offset, "a byte offset into the log")
        if tail is not None:
            if offset:
                raise ArgumentError(f"offset={offset} and tail={tail}: give one (a tail is read from the log's end)")
            query["tail"] = _not_negative("tail", tail, "a number of lines")
        path = f"/v1/jobs/{_seg(job)}/logs?{urllib.parse.urlencode(query)}"
        conn, response, _ = self._open("GET", path)
        try:
            data = response.read()
        except (OSError, http.client.HTTPException) as e:
            raise HeadUnreachableError(f"lost the head at {self.base_url}: {e}") from e
        finally:
            conn.close()
        next_offset = response.getheader("x-ftdrive-next-offset")
        actor = response.getheader("x-ftdrive-actor")
        worker = response.getheader("x-ftdrive-local-rank")
        return LogChunk(
            data=data,
            attempt=int(response.getheader("x-ftdrive-attempt") or attempt or 0),
            node=response.getheader("x-ftdrive-node") or "",
            running=response.getheader("x-ftdrive-running") == "true",
            next_offset=int(next_offset) if next_offset else offset + len(data),
            actor=int(actor) if actor else query.get("actor"),
            local_rank=int(worker) if worker else local_rank,
        )

    def log_bytes(
        self,
        job: str,
        index: Optional[ActorRef] = None,
        *,
        rank: Optional[int] = None,
        attempt: Optional[int] = None,
        local_rank: Optional[int] = None,
        follow: bool = False,
        poll_interval: float = 0.3,
        head_return_timeout: float = HEAD_RETURN_TIMEOUT_S,
        tail: Optional[int] = None,
    ) -> Iterator[LogChunk]:
        """The chunks of one attempt's log (stdout and stderr together; with several workers,
        their lines interleaved and each prefixed ``[rankR]: ``, or one worker's with
        ``local_rank``), or of its last ``tail`` lines and what follows them. Default attempt:
        the latest when called, kept while following.
        ``follow`` keeps reading while the attempt runs and ends once it ended and all of its
        output was read; it rides out a head restart as :meth:`wait` does, and goes on from
        where it was. The actor is its index or its name, as for :meth:`log_chunk`, or ``rank``
        names it: the rank's holder when first read, kept while following (a re-formed job may
        give the rank to another actor meanwhile). A bad one is :class:`ArgumentError` here,
        before the head is asked."""
        _whose_log(job, index, rank, attempt, local_rank)
        if tail is not None:
            _not_negative("tail", tail, "a number of lines")
        ask = self._log_reader(job, index, rank, local_rank)
        return _chunks(ask, attempt, follow, poll_interval, HeadAway(self.base_url, head_return_timeout), tail)

    def logs(
        self,
        job: str,
        index: Optional[ActorRef] = None,
        *,
        rank: Optional[int] = None,
        attempt: Optional[int] = None,
        local_rank: Optional[int] = None,
        follow: bool = False,
        poll_interval: float = 0.3,
        head_return_timeout: float = HEAD_RETURN_TIMEOUT_S,
        tail: Optional[int] = None,
    ) -> Iterator[str]:
        """As :meth:`log_bytes`, as text lines (each with its ``\\n``, but for an unfinished
        last line). A bad actor (a negative index, another job's name) is :class:`ArgumentError`
        here, before the head is asked."""
        chunks = self.log_bytes(
            job,
            index,
            rank=rank,
            attempt=attempt,
            local_rank=local_rank,
            follow=follow,
            poll_interval=poll_interval,
            head_return_timeout=head_return_timeout,
            tail=tail,
        )
        return _lines(chunks)

    def _log_reader(
        self, job: str, index: Optional[ActorRef], rank: Optional[int], local_rank: Optional[int]
    ) -> Callable[..., LogChunk]:
        """``log_chunk(attempt=, offset=, tail=)`` of one actor's log; asked by rank, of the
        holder the first read found, so that reading on stays in the log it began."""
        if rank is None:
            return functools.partial(self.log_chunk, job, actor_index(job, index), local_rank=local_rank)
        found: List[LogChunk] = []

        def read(attempt: Optional[int], offset: int, tail: Optional[int]) -> LogChunk:
            if not found:
                found.append(self.log_chunk(job, rank=rank, offset=offset, tail=tail))
                return found[0]
            holder = found[0]
            return self.log_chunk(
                job, holder.actor, attempt=attempt, local_rank=holder.local_rank, offset=offset, tail=tail
            )

        return read

    # ---- nodes and the head -------------------------------------------------------------

    def nodes(self) -> List[Node]:
        """Every node the head knows, with its state, resources, labels and allocation."""
        return [Node.from_json(n) for n in self._json("GET", "/v1/nodes")]

    def node(self, name: str) -> Node:
        """One node, as :meth:`nodes` lists it; one the head does not know (never registered, or
        forgotten) is :class:`~ftdrive.errors.ApiError` 404."""
        return Node.from_json(self._json("GET", f"/v1/nodes/{_seg(name)}"))

    def drain(self, node: str, deadline_ms: int = 30_000) -> Drain:
        """Drains a node: its work moves (charged to the ``preemption`` budget), and it takes no
        new work until :meth:`undrain` — across agent and head restarts, and after the node was
        DEAD and came back. A DEAD node may be drained too."""
        if int(deadline_ms) < 0:
            raise ArgumentError(f"deadline_ms is {deadline_ms}: the milliseconds the work gets to move, 0 or more")
        return Drain.from_json(self._json("POST", f"/v1/nodes/{_seg(node)}/drain", {"deadline_ms": deadline_ms}))

    def undrain(self, node: str) -> Drain:
        """Withdraws :meth:`drain`: the node takes new work again; what the drain moved stays
        where it went. A node whose own agent announced that its machine is leaving (SIGTERM, a
        cloud's notice) stays DRAINING; undraining it when the operator had not drained it is
        :class:`~ftdrive.errors.ApiError` 409."""
        return Drain.from_json(self._json("POST", f"/v1/nodes/{_seg(node)}/undrain", {}))

    def forget(self, node: str) -> Node:
        """Forgets a DEAD node: it leaves :meth:`nodes`, the reasons jobs wait and the head's
        state, and a machine registering in its name later joins as a new node (its drain, if
        any, forgotten too). Answers the node as it was. A node that is not DEAD is
        :class:`~ftdrive.errors.ApiError` 409; one the head does not know, 404."""
        return Node.from_json(self._json("DELETE", f"/v1/nodes/{_seg(node)}"))

    def health(self) -> Health:
        """Whether the head is recovering after a restart, and job and node counts."""
        return Health.from_json(self._json("GET", "/v1/health"))

    # ---- HTTP ---------------------------------------------------------------------------

    def _request_timeout(self, deadline: Optional[float]) -> float:
        """``timeout``, or less when a caller's deadline comes sooner."""
        if deadline is None:
            return self.timeout
        return max(min(self.timeout, deadline - time.monotonic()), _SHORTEST_REQUEST_S)

    def _json(self, method: str, path: str, body: Any = None, timeout: Optional[float] = None) -> Any:
        conn, response, _ = self._open(method, path, body, timeout)
        try:
            data = response.read()
        except (OSError, http.client.HTTPException) as e:
            raise HeadUnreachableError(f"lost the head at {self.base_url}: {e}") from e
        finally:
            conn.close()
        return _parse(data.decode("utf-8", errors="replace"), path)

    def _connection(self, timeout: Optional[float] = None) -> http.client.HTTPConnection:
        timeout = self.timeout if timeout is None else timeout
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._conn.ssl_context)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _open(
        self, method: str, path: str, body: Any = None, timeout: Optional[float] = None
    ) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse, Optional[socket.socket]]:
        """Sends a request; answers the open connection, a 2xx response and the socket it is
        read from, or raises."""
        headers = {"Authorization": f"Bearer {self._conn.token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        conn = self._connection(timeout)
        try:
            conn.request(method, self._prefix + path, body=data, headers=headers)
            sock = conn.sock
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise self._unreachable(e) from e
        if 200 <= response.status < 300:
            return conn, response, sock
        try:
            text = response.read().decode("utf-8", errors="replace")
        except (OSError, http.client.HTTPException):
            text = ""
        finally:
            conn.close()
        message = _error_message(text, response.status)
        if response.status == 401:
            message = self._refused_token(text)
        raise ApiError(response.status, message, method, path.split("?")[0])

    def _unreachable(self, error: Exception) -> HeadUnreachableError:
        """Why the head did not answer: TLS's doing when it can be told (a wrong scheme, a
        certificate not trusted), as the CLI tells it; else the error and where to look."""
        why = self._tls_cause(error)
        if why is not None:
            return HeadUnreachableError(f"cannot reach the head: {why}", lasting=True)
        return HeadUnreachableError(
            f"cannot reach the head at {self.base_url}: {error}; is `ftdrive head` running? {self.directions.head}"
        )

    def _tls_cause(self, error: Exception) -> Optional[str]:
        """The fix for a failure that TLS explains, or None."""
        url, ca_flag = self.base_url, self.directions.ca_cert
        if self._scheme == "http":
            if isinstance(error, (ConnectionRefusedError, socket.timeout)) or not _speaks_tls(self._host, self._port):
                return None
            https = "https://" + url.split("://", 1)[1]
            return (
                f"the head at {url} speaks HTTPS; use {https} (with {ca_flag} when a private CA signed its certificate)"
            )
        if isinstance(error, ssl.SSLCertVerificationError):
            return _untrusted(url, self._host, error, self._conn.ca_cert, ca_flag)
        if isinstance(error, ssl.SSLError) and error.reason in _NOT_TLS:
            plain = "http://" + url.split("://", 1)[1]
            return (
                f"the head at {url} does not speak TLS ({error}); it may be serving plain http: use {plain}, "
                "or start the head with --tls-cert and --tls-key"
            )
        return None

    def _refused_token(self, text: str) -> str:
        """A 401: the token is not this head's client token. Says where it came from, whether it
        is the head's agent token, and how to give the right one (as the CLI does)."""
        try:
            presented = json.loads(text).get("presented")
        except (ValueError, AttributeError):
            presented = None
        head, source = self.base_url, self._conn.token_from
        given = "the token given as token=" if source == "token=" else f"the token from {source}"
        if presented == "agent_token":
            return (
                f"the head at {head} refused {given}: it is its agent token, which opens only the agent channel; "
                "give its client token, the `token` file in its state dir"
            )
        if source == TOKEN_VAR:
            fix = (
                "set $FTDRIVE_TOKEN to the contents of the `token` file in the head's state dir, or unset it to use "
                f"that file from the state dir ({self.directions.state_dir})"
            )
        elif source == "token=":
            fix = "pass token= the contents of the `token` file in the head's state dir"
        else:
            fix = (
                f"that file is another head's; give the state dir of the head at {head} "
                f"({self.directions.state_dir}), or set $FTDRIVE_TOKEN to the contents of the `token` file there"
            )
        return f"the head at {head} refused {given}: it is not its client token; {fix}"


def _speaks_tls(host: str, port: Optional[int]) -> bool:
    """Whether ``host:port`` answers a TLS handshake (nothing verified: the handshake is all
    that is asked)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port or 80), timeout=_PROBE_S) as raw:
            with context.wrap_socket(raw, server_hostname=host):
                return True
    except (OSError, ValueError):
        return False


def _untrusted(url: str, host: str, error: ssl.SSLCertVerificationError, ca_cert: Optional[str], flag: str) -> str:
    """Why the head's certificate was not accepted, and the fix, as the CLI says it."""
    code, said = error.verify_code, error.verify_message
    if code in _UNTRUSTED_ISSUER:
        if ca_cert:
            return (
                f"the head at {url} presented a certificate that the CA in {ca_cert} did not sign ({said}); "
                f"give {flag} the CA that did"
            )
        return (
            f"the head at {url} presented a certificate signed by a CA that is not trusted here ({said}); "
            f"give that CA with {flag}"
        )
    if code in _NAME_MISMATCH:
        return (
            f"the head at {url} presented a certificate that does not name {host} ({said}); reissue it with "
            f"{host} as a subjectAltName, or reach the head by a name the certificate holds"
        )
    return (
        f"the head at {url} presented a certificate that cannot be verified ({said}); when a private CA "
        f"signed it, give that CA with {flag}"
    )


def _silence_limit(keepalive_ms: Optional[str]) -> Optional[float]:
    """Seconds of silence after which an event stream is taken as lost; ``None`` when the head
    names no keep-alive interval (it then sends none, and its silence tells nothing)."""
    try:
        interval_ms = int(keepalive_ms or "")
    except ValueError:
        return None
    return KEEPALIVES_MISSED * interval_ms / 1000 if interval_ms > 0 else None


class HeadAway:
    """How long a head has been away, for the calls that ride out its restart (a restart loses
    no job): away is unreachable, or back but not yet reconnected to the agent a request needs
    (502), or stopping (503). Used by :meth:`Client.wait`, a followed log and the torchx scheduler."""

    def __init__(self, base_url: str, timeout_s: float) -> None:
        self.base_url = base_url
        self.timeout_s = timeout_s
        self._since: Optional[float] = None
        self._pause_s = _AWAY_PAUSE_S[0]
        # Whether the head ever answered: one that never did did not go away, it was never there.
        self._ever_answered = False

    def answered(self) -> None:
        self._since = None
        self._pause_s = _AWAY_PAUSE_S[0]
        self._ever_answered = True

    def ride_out(self, error: FtdriveError) -> None:
        """Returns if ``error`` is the head's being away, for less than ``timeout_s`` so far;
        raises otherwise: the error itself, or one saying that the head did not come back (or,
        when it never answered, that it could not be reached)."""
        if not isinstance(error, HeadUnreachableError) and not (isinstance(error, ApiError) and error.status in _AWAY):
            raise error
        if isinstance(error, HeadUnreachableError) and error.lasting:
            raise error  # the head answered, and waiting will not mend how it was asked
        self._ever_answered = self._ever_answered or isinstance(error, ApiError)
        now = time.monotonic()
        self._since = now if self._since is None else self._since
        if now - self._since >= self.timeout_s and not self._ever_answered:
            raise HeadUnreachableError(
                f"the head at {self.base_url} could not be reached, asked for {self.timeout_s:.0f} s and never "
                f"answering: {error}"
            ) from error
        if now - self._since >= self.timeout_s:
            raise HeadUnreachableError(
                f"the head at {self.base_url} did not come back within {self.timeout_s:.0f} s "
                f"({error.__cause__ or error}); its jobs may still be running"
            ) from error

    def ask(self, call: Callable[[], T]) -> T:
        """``call()``, called again after a pause (growing to 2 s) while the head is away."""
        while True:
            try:
                answer = call()
            except FtdriveError as e:
                self.ride_out(e)
                time.sleep(self._pause_s)
                self._pause_s = min(self._pause_s * 2, _AWAY_PAUSE_S[1])
                continue
            self.answered()
            return answer


def _seg(value: str) -> str:
    """One path segment, escaped. An empty one would name another route (``/v1/nodes/`` is
    not a node), so it is refused here."""
    if not str(value):
        raise ArgumentError("a job id or node name cannot be empty")
    return urllib.parse.quote(str(value), safe="")


ActorRef = Union[int, str]
"""An actor of a job: its index (``1``) or its name (``"j7/1"``)."""


def actor_index(job: str, actor: ActorRef) -> int:
    """The index of ``actor`` of ``job``: an index (0 or more), or a name ``JOB/N`` of that
    job, as ``Actor.name`` and the CLI's ``--actor`` give it. Anything else is
    :class:`ArgumentError` naming what was given, so that the head is not asked."""
    shown = repr(actor) if isinstance(actor, str) else str(actor)
    owner, slash, number = str(actor).rpartition("/")
    if isinstance(actor, str) and slash and owner != job:
        raise ArgumentError(
            f"actor {shown} is not an actor of job {job!r}: give the index N, or the name {job}/N, of one of its actors"
        )
    try:
        index = int(number)
    except ValueError:
        raise ArgumentError(f"actor {shown}: give the actor's index (0, 1, …) or its name, such as {job}/0") from None
    if index < 0:
        raise ArgumentError(f"actor {shown}: actors of {job} are numbered from 0 ({job}/0, {job}/1, …)")
    return index


def _not_negative(name: str, value: int, what: str) -> int:
    """``value`` as a whole number of 0 or more; else :class:`ArgumentError`, before the head is asked."""
    number = int(value)
    if number < 0:
        raise ArgumentError(f"{name}={value}: give {what}, 0 or more")
    return number


def _whose_log(
    job: str, index: Optional[ActorRef], rank: Optional[int], attempt: Optional[int], local_rank: Optional[int]
) -> Dict[str, Any]:
    """The log API's query for an actor's log (``actor``, ``attempt``, ``local_rank``) or a
    rank's (``rank``, which names its holder's attempt and worker); a wrong mix, or a bad
    number, is :class:`ArgumentError`, before the head is asked."""
    _check_log_numbers(attempt, local_rank)
    if (index is None) == (rank is None):
        raise ArgumentError(
            f"whose log of {job}: give an actor (its index or name) or rank= (a global rank, as torchrun's RANK), "
            "one of the two"
        )
    if rank is None:
        query: Dict[str, Any] = {"actor": actor_index(job, index)}
        if attempt is not None:
            query["attempt"] = attempt
        if local_rank is not None:
            query["local_rank"] = local_rank
        return query
    if attempt is not None or local_rank is not None:
        raise ArgumentError(
            f"rank={rank} names its holder's attempt and worker: leave out attempt= and local_rank=, or ask by "
            "actor (a chunk's .actor)"
        )
    return {"rank": _not_negative("rank", rank, "a global rank")}


def _check_log_numbers(attempt: Optional[int], local_rank: Optional[int]) -> None:
    """An attempt is numbered from 1; a worker's local rank from 0."""
    if attempt is not None and int(attempt) < 1:
        raise ArgumentError(f"attempt={attempt}: attempts are numbered from 1 (leave it out for the latest)")
    if local_rank is not None:
        _not_negative("local_rank", local_rank, "a worker's local rank on its node")


def not_started(view: Job, actor: Actor) -> str:
    """Why ``actor`` of ``view`` has no log: it has not started an attempt, and what the job
    waits for (or how it ended): the head words its 404 to such a log request the same way."""
    if view.is_terminal:
        return f"actor {actor.name} has not started an attempt, and the job ended {view.state}"
    waiting = view.waiting or view.infeasible
    why = f"{view.state}: {waiting}" if waiting else view.state
    return f"actor {actor.name} has not started an attempt yet (the job is {why})"


def _chunks(
    ask_at: Callable[..., LogChunk],
    attempt: Optional[int],
    follow: bool,
    poll_interval: float,
    away: HeadAway,
    tail: Optional[int] = None,
) -> Iterator[LogChunk]:
    """The chunks ``ask_at(attempt=, offset=, tail=)`` reads, from offset 0 on or from the last
    ``tail`` lines on (see ``log_bytes``)."""
    offset = 0
    while True:
        ask = functools.partial(ask_at, attempt=attempt, offset=offset, tail=tail)
        chunk = away.ask(ask) if follow else ask()
        attempt = chunk.attempt or attempt
        offset, tail = chunk.next_offset, None
        if chunk.data:
            yield chunk
            continue
        if not follow or not chunk.running:
            return
        time.sleep(poll_interval)


def _lines(chunks: Iterator[LogChunk]) -> Iterator[str]:
    """Log chunks as text lines (each with its ``\\n``, but for an unfinished last line)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    for chunk in chunks:
        pending += decoder.decode(chunk.data)
        # Only "\n" ends a line, as for `ftdrive logs`: str.splitlines also breaks at "\r" (a
        # progress bar's redraw, or the first half of a "\r\n" split across two chunks), form
        # feeds and Unicode separators, which the program did not mean as lines.
        *lines, pending = pending.split("\n")
        yield from (line + "\n" for line in lines)
    pending += decoder.decode(b"", final=True)
    if pending:
        yield pending


def _parse(text: str, path: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise FtdriveError(f"unexpected answer from the head to {path}: {e}: {text[:200]!r}") from e


def _error_message(text: str, status: int) -> str:
    """The head's ``{"error": ...}`` message, else the body's text."""
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return str(body["error"])
    return text.strip() or f"HTTP {status} with no message"
