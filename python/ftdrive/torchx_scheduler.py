"""The torchx scheduler ``ftdrive``: ``torchx run -s ftdrive dist.ddp -j 3:8x2 --script train.py``.

An app's (single) role becomes one ftdrive job spec:

* nodes and workers: a ``torchrun`` launch (``dist.ddp`` writes ``bash -c "torchrun … script
  args"``) is translated by :mod:`ftdrive.torchrun`: its ``--nnodes MIN:MAX`` and
  ``--nproc_per_node`` become ``min_nodes``/``max_nodes``/``nproc_per_node`` and the script runs
  directly under ftdrive's own launcher. Any other role runs its ``entrypoint args`` as is,
  one process per node, ``min_replicas``..``num_replicas`` nodes.
* resources: ``cpu``, ``gpu``, ``memMB`` → the bundle's ``cpu``, ``gpu``, ``memory_mb``;
  ``devices`` and numeric ``capabilities`` → bundle resources of their names (as Kubernetes
  asks for devices), other ``capabilities`` → ``node_selector`` labels (as Kubernetes selects
  nodes by instance type).
* ``env`` → ``env``; ``max_retries`` → the ``user`` retry budget; ``retry_policy`` REPLICA →
  ``restart: actor``, APPLICATION → ``gang``, HOT_SPARE → ``min_replicas`` nodes and the rest as
  hot spares.
* torchx macros: ``${rank0_env}`` is ``TORCHX_RANK0_HOST`` (ftdrive sets it), ``${img_root}`` the
  working directory; ``${app_id}`` (the job id) and ``${replica_id}`` (the actor's index) are
  known only once the head placed the job, so a value that uses them is set by a ``/bin/sh``
  prologue from ``$FTDRIVE_JOB_ID`` / ``$FTDRIVE_ACTOR``. The prologue checks that the program
  can be started before its ``exec``, saying why not; 126 and 127 are non-retryable exit codes
  (``-cfg non_retryable_exit_codes`` sets others).
* A role the head would refuse (its node range, ``max_retries``, a negative resource) is
  refused before submitting, in the role's terms; a relative ``-cfg cwd`` is taken from the
  directory torchx runs in.

The app id is the ftdrive job id (``ftdrive://SESSION/j3`` ↔ ``ftdrive status j3``). The head is
``-cfg head=URL`` (or ``head`` in the ``[ftdrive]`` section of ``.torchxconfig``), else
``$FTDRIVE_HEAD``; the token as the ``ftdrive`` CLI finds it. An app submitted by this scheduler
is asked about at the head it was submitted to (torchx passes the run's ``-cfg`` to ``schedule``
alone, so ``torchx run --wait`` and ``--log`` would otherwise not know it); any other app, and
``list``, at the head of ``.torchxconfig``, else ``$FTDRIVE_HEAD``.

``num_restarts`` counts the restarts charged to the job's retry budgets (``user``, ``system``,
``preemption``): its ledger's charged entries, less one that found its budget exhausted and
failed the job. A membership change (an elastic job growing), a gang's collateral stops and a
completion charge nothing and count nothing.

A head restart loses no job, so an app this scheduler has seen answered (submitted or
described) is ``UNKNOWN`` while the head cannot be reached, for up to ``HEAD_RETURN_TIMEOUT_S``
(120 s), as a Kubernetes pod is ``Unknown`` while its node is out of touch: ``torchx run --wait``
polls on through the restart. An app never answered here (a one-shot ``torchx status``, a wrong
head) raises :class:`~ftdrive.errors.HeadUnreachableError` at once.

An app the head does not have (never submitted to it, or finished and since forgotten) is
``None`` to ``describe``, as torchx expects of an app that does not exist: ``torchx status``
says so and ``torchx cancel`` cancels nothing. The scheduler logs why, and how to list the apps
there are, as an error. Asked about that app again (``torchx log`` polls ``describe`` until the
app has started), ``describe`` raises :class:`UnknownAppError` instead, so that the poll ends:
a forgotten job does not come back. ``log_iter`` raises it at once.
"""

from __future__ import annotations

import configparser
import contextlib
import functools
import json
import logging
import os
import re
import shlex
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, TypedDict

from torchx.schedulers.api import DescribeAppResponse, ListAppResponse, Scheduler, Stream
from torchx.specs import (
    NONE,
    NULL_RESOURCE,
    AppDef,
    AppDryRunInfo,
    AppState,
    ReplicaStatus,
    Resource,
    RetryPolicy,
    Role,
    RoleStatus,
    UnknownAppException,
    macros,
    runopts,
)

from . import torchrun
from .client import HEAD_RETURN_TIMEOUT_S, Client, Directions, HeadAway, not_started
from .errors import ApiError, ArgumentError, ConfigError, FtdriveError, HeadUnreachableError, SpecError
from .models import Actor, Job, LedgerEntry
from .spec import RESTART_MODES, STRATEGIES, JobSpec, Retries

logger: logging.Logger = logging.getLogger(__name__)

#: What torchx's ``${app_id}`` and ``${replica_id}`` stand for until the head placed the job,
#: and the shell expression that gives each its value in the job's processes.
_JOB_ID = "@FTDRIVE_JOB_ID@"
_REPLICA_ID = "@FTDRIVE_REPLICA_ID@"
_LATE = {_JOB_ID: '"${FTDRIVE_JOB_ID}"', _REPLICA_ID: '"${FTDRIVE_ACTOR##*/}"'}
_LATE_RE = re.compile("|".join(re.escape(k) for k in _LATE))
_NAME_RE = re.compile(r"[^A-Za-z0-9._-]+")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: What the head takes as a resource name (``src/resources.rs``).
_RESOURCE_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
#: The bundle's own resources, which a role gives as its resource's cpu, gpu and memMB.
_BUNDLE_KEYS = ("cpu", "gpu", "memory_mb")
#: The largest retry budget the head takes.
_MAX_BUDGET = 1_000_000
#: The exit codes of a program that cannot be started, as a shell has them (127: not found,
#: 126: not executable): the prologue exits with them, and they fail the job at once.
_CANNOT_START = (126, 127)

_APP_STATE: Mapping[str, AppState] = {
    "PENDING": AppState.PENDING,
    "RUNNING": AppState.RUNNING,
    "SUCCEEDED": AppState.SUCCEEDED,
    "FAILED": AppState.FAILED,
    "STOPPED": AppState.CANCELLED,
}
_REPLICA_STATE: Mapping[str, AppState] = {
    "SCHEDULING": AppState.PENDING,
    "STANDBY": AppState.PENDING,
    "RUNNING": AppState.RUNNING,
    "FAILING": AppState.RUNNING,
    "TASK_COMPLETED": AppState.SUCCEEDED,
    "FAILED": AppState.FAILED,
    "STOPPED": AppState.CANCELLED,
}
_POLL_S = 0.5
#: Where a torchx command finds the head (the scheduler's calls but ``schedule`` get no run options).
_NO_HEAD = (
    "no ftdrive head given: `torchx run` takes `-cfg head=http://HOST:PORT`; any torchx command "
    "reads `head = http://HOST:PORT` from the [ftdrive] section of .torchxconfig, else $FTDRIVE_HEAD"
)
#: How a torchx user gives the head's address and its CA certificate, named when either is wrong.
_HEAD_WAYS = (
    "give the head's address (`ftdrive head` prints it) with `-cfg head=http://HOST:PORT` to `torchx run`, "
    "`head = http://HOST:PORT` in the [ftdrive] section of .torchxconfig, or $FTDRIVE_HEAD"
)
_CA_CERT_WAYS = "`-cfg ca_cert=PEM` (or `ca_cert` in the [ftdrive] section of .torchxconfig, or $FTDRIVE_CA_CERT)"
_STATE_DIR_WAYS = "$FTDRIVE_STATE_DIR, else ~/.ftdrive"


class UnknownAppError(FtdriveError, UnknownAppException):
    """The head has no such app: it was never submitted there, or it finished and was forgotten.
    Also torchx's :class:`~torchx.specs.UnknownAppException`, what torchx raises for it."""

    def __init__(self, app_id: str, head: str) -> None:
        self.app_id = app_id
        self.head = head
        Exception.__init__(
            self,
            f"the head at {head} has no app {app_id} (never submitted there, or finished and since forgotten); "
            "`torchx list -s ftdrive` or `ftdrive status` lists the apps it has",
        )


class FtdriveOpts(TypedDict, total=False):
    head: Optional[str]
    ca_cert: Optional[str]
    cwd: Optional[str]
    python: str
    hot_spares: Optional[int]
    priority: int
    restart: Optional[str]
    system_retries: Optional[int]
    preemption_retries: Optional[int]
    strategy: Optional[str]
    schedule_timeout_ms: Optional[int]
    run_timeout_ms: Optional[int]
    node_selector: Optional[Dict[str, str]]
    non_retryable_exit_codes: Optional[List[str]]


@dataclass
class FtdriveRequest:
    """What ``schedule`` submits: the job spec, the head it goes to, notes on how the role was
    mapped (shown by ``--dryrun``), and the role's name (torchx asks for the app's logs by it;
    the job is named after the app)."""

    spec: JobSpec
    head: Optional[str] = None
    ca_cert: Optional[str] = None
    notes: List[str] = field(default_factory=list)
    role_name: str = ""
    #: What of the app the job leaves out: said as a warning when it is submitted, not only by
    #: ``--dryrun``.
    ignored: List[str] = field(default_factory=list)

    def __str__(self) -> str:
        head = self.head or os.environ.get("FTDRIVE_HEAD") or "(no head: set $FTDRIVE_HEAD or -cfg head=URL)"
        lines = [f"# ftdrive job spec for {head}", self.spec.to_json()]
        lines += [f"# {note}" for note in self.notes]
        return "\n".join(lines)


class FtdriveScheduler(Scheduler[FtdriveOpts]):
    """Runs a torchx app's role as one ftdrive job (see the module's documentation).

    .. compatibility::
        type: scheduler
        features:
            cancel: true
            logs: per replica (actor), every attempt in order; regex, since/until (by attempt
                  times) and tailing supported; stdout and stderr come combined
            distributed: true
            describe: state, restarts, replicas with their nodes and failure evidence
            workspaces: false (the job runs in ``cwd``, which every node must have)
            mounts: false
            elasticity: true (``-j MIN:MAX``; ftdrive grows the job as nodes free up)
    """

    def __init__(
        self, session_name: str, client: Optional[Client] = None, head_return_timeout: float = HEAD_RETURN_TIMEOUT_S
    ) -> None:
        super().__init__("ftdrive", session_name)
        self._given_client = client
        self._head_return_timeout_s = head_return_timeout
        # Apps the head answered for here.
        self._seen: Dict[str, _Seen] = {}

    # ---- configuration ------------------------------------------------------------------

    def _run_opts(self) -> runopts:
        opts = runopts()
        opts.add("head", type_=str, default=None, help="the head's URL (default: $FTDRIVE_HEAD)")
        opts.add(
            "ca_cert", type_=str, default=None, help="CA certificate for an https head (default: $FTDRIVE_CA_CERT)"
        )
        opts.add(
            "cwd",
            type_=str,
            default=None,
            help="working directory of the job on every node (default: the directory torchx runs in)",
        )
        opts.add("python", type_=str, default="python3", help="interpreter for a translated torchrun launch")
        opts.add(
            "hot_spares", type_=int, default=None, help="spare nodes kept ready (default: 0; HOT_SPARE: the extras)"
        )
        opts.add("priority", type_=int, default=0, help="queue priority; higher first")
        opts.add("restart", type_=str, default=None, help="gang or actor (default: from the role's retry_policy)")
        opts.add("system_retries", type_=int, default=None, help="retries after node losses (default: 3; -1: no limit)")
        opts.add(
            "preemption_retries", type_=int, default=None, help="retries after preemptions (default: -1, no limit)"
        )
        opts.add("strategy", type_=str, default=None, help=f"placement: one of {', '.join(STRATEGIES)}")
        opts.add(
            "schedule_timeout_ms",
            type_=int,
            default=None,
            help="fail the app once it has waited this long with fewer than its minimum nodes (default: wait for "
            "ever, as for a cluster that is growing)",
        )
        opts.add(
            "run_timeout_ms",
            type_=int,
            default=None,
            help="stop the app and fail it once it has run this long, counted from when it first ran and "
            "through its restarts (default: no limit)",
        )
        opts.add("node_selector", type_=Dict[str, str], default=None, help="node labels to match, e.g. zone:a;rack:r1")
        opts.add(
            "non_retryable_exit_codes",
            type_=List[str],
            default=None,
            help="exit codes that fail the job at once, without a retry (default: 126,127, a program that "
            "cannot be started)",
        )
        return opts

    def _client(self, head: Optional[str] = None, ca_cert: Optional[str] = None) -> Client:
        """A client for ``head`` (the run's ``-cfg head``), else the ``.torchxconfig`` one, else
        ``$FTDRIVE_HEAD``; with none, a :class:`ConfigError` naming the ways a torchx user gives
        one. Its errors name the head's address and CA certificate as torchx options."""
        if self._given_client is not None:
            return self._given_client
        source = "-cfg head"
        if not head:
            head, source = _torchxconfig("head"), "`head` in the [ftdrive] section of .torchxconfig"
        if not head:
            source = "$FTDRIVE_HEAD"
            if not os.environ.get("FTDRIVE_HEAD"):
                raise ConfigError(_NO_HEAD)
        client = Client(head=head, ca_cert=ca_cert or _torchxconfig("ca_cert"))
        client.directions = Directions(
            head=f"the address came from {source}; {_HEAD_WAYS}", ca_cert=_CA_CERT_WAYS, state_dir=_STATE_DIR_WAYS
        )
        return client

    def _client_of(self, app_id: str) -> Client:
        """The client of the head ``app_id`` was submitted to here (the run's ``-cfg head``,
        which torchx does not pass on to ``describe``, ``log_iter`` and ``cancel``), else
        :meth:`_client`'s."""
        seen = self._seen.get(app_id)
        if seen is not None and seen.client is not None:
            return seen.client
        return self._client()

    # ---- submitting ---------------------------------------------------------------------

    def _validate(self, app: AppDef, scheduler: str) -> None:
        if len(app.roles) != 1:
            names = ", ".join(role.name for role in app.roles)
            raise SpecError(
                f"the ftdrive scheduler runs one role per app (one job); {app.name} has {len(app.roles)}: "
                f"{names}. Submit each role as its own app."
            )
        if app.roles[0].resource == NULL_RESOURCE:
            raise SpecError(f"role {app.roles[0].name} has no resource; give cpu/gpu/memMB or a named resource (-h)")

    def _submit_dryrun(self, app: AppDef, cfg: FtdriveOpts) -> AppDryRunInfo[FtdriveRequest]:
        self._validate(app, self.backend)
        request = to_request(app, cfg)
        return AppDryRunInfo(request, str)

    def schedule(self, dryrun_info: AppDryRunInfo[FtdriveRequest]) -> str:
        request = dryrun_info.request
        client = self._client(request.head, request.ca_cert)
        for what in request.ignored:
            logger.warning(what)
        try:
            job = client.submit(request.spec)
        except ApiError as e:
            if e.status != 400:
                raise
            raise SpecError(
                f"the head refused the job spec that app {request.spec.name} became: {e.message} "
                "(`torchx run --dryrun` shows that spec)"
            ) from e
        seen = self._answered(client, job.id, job)
        seen.submitted_as = request.role_name
        seen.client = client
        return job.id

    # ---- observing and cancelling -------------------------------------------------------

    def describe(self, app_id: str) -> Optional[DescribeAppResponse]:
        client = self._client_of(app_id)
        try:
            job = _status_or_none(client, app_id)
        except HeadUnreachableError as e:
            return self._while_the_head_is_away(app_id, e)
        seen = self._answered(client, app_id, job)
        if job is None:
            self._not_on_the_head(client, app_id, seen)
            return None
        role = job.name
        replicas = [
            ReplicaStatus(
                id=actor.index,
                state=_replica_state(job, actor),
                role=role,
                hostname=actor.node or "",
                structured_error_msg=_replica_error(job, actor),
            )
            for actor in job.actors
            if _is_replica(job, actor)
        ]
        return DescribeAppResponse(
            app_id=app_id,
            state=_APP_STATE.get(job.state, AppState.UNKNOWN),
            num_restarts=_restarts(job),
            msg=_in_torchx_terms(job.message or job.infeasible or job.waiting or "") or NONE,
            structured_error_msg=_app_error(job),
            ui_url=client.dashboard_url(job.id),
            roles_statuses=[RoleStatus(role=role, replicas=replicas)],
            roles=seen.roles,
        )

    def _answered(self, client: Client, app_id: str, job: Optional[Job]) -> _Seen:
        """Notes that the head answered for ``app_id`` (with ``job``, or that there is none)."""
        seen = self._seen.setdefault(app_id, _Seen(HeadAway(client.base_url, self._head_return_timeout_s)))
        seen.away.answered()
        if job is not None:
            seen.roles = [_role(job)]
            seen.absent = False
        return seen

    def _not_on_the_head(self, client: Client, app_id: str, seen: _Seen) -> None:
        """Logs that the head has no ``app_id`` the first time it says so (``describe`` then
        answers None, as torchx expects); raises :class:`UnknownAppError` when asked again, as
        whoever asks again is waiting for the app to appear, and it will not."""
        error = UnknownAppError(app_id, client.base_url)
        if seen.absent:
            raise error
        seen.absent = True
        logger.error("%s", error)

    def _while_the_head_is_away(self, app_id: str, error: HeadUnreachableError) -> DescribeAppResponse:
        """``UNKNOWN`` for an app answered here before, until the head has been away for
        ``head_return_timeout`` seconds; the error itself for any other app, or after that."""
        seen = self._seen.get(app_id)
        if seen is None:
            raise error
        away = seen.away
        away.ride_out(error)
        return DescribeAppResponse(
            app_id=app_id,
            roles=seen.roles,
            state=AppState.UNKNOWN,
            msg=(
                f"lost the head at {away.base_url} ({error.__cause__ or error}); the app runs on, "
                f"asked again for up to {away.timeout_s:.0f} s"
            ),
        )

    def list(self) -> List[ListAppResponse]:
        return [
            ListAppResponse(app_id=job.id, state=_APP_STATE.get(job.state, AppState.UNKNOWN))
            for job in self._client().jobs()
        ]

    def _cancel_existing(self, app_id: str) -> None:
        client = self._client_of(app_id)
        with _known(client, app_id):
            client.stop(app_id)

    def log_iter(
        self,
        app_id: str,
        role_name: str,
        k: int = 0,
        regex: Optional[str] = None,
        since: Optional[datetime] = None,
        until: Optional[datetime] = None,
        should_tail: bool = False,
        streams: Optional[Stream] = None,
    ) -> Iterable[str]:
        """Replica ``k`` is actor ``<job>/k``; its log is each of its attempts' output in turn
        (every worker's lines, prefixed ``[rankR]: ``). ``since``/``until`` skip attempts that
        ended before or started after them; ``should_tail`` follows the running attempt and
        the ones after it until the job ends. A replica that has not started an attempt (and
        is not tailed, or its app ended) answers one ``[ftdrive]`` line saying why, as torchx
        shows an empty log as nothing at all. An app the head does not have raises
        :class:`UnknownAppError`. The app has one role: a role name it does not know by (a typo,
        or the component's own name asked from another process) is logged as a warning that
        names the role, and its logs are shown."""
        if streams not in (None, Stream.COMBINED):
            raise ArgumentError("ftdrive keeps stdout and stderr of an attempt in one log; use --streams combined")
        client = self._client_of(app_id)
        away = HeadAway(client.base_url, self._head_return_timeout_s)
        with _known(client, app_id):
            job = away.ask(functools.partial(client.status, app_id)) if should_tail else client.status(app_id)
        roles = self._role_names(app_id, job)
        if role_name not in roles:
            named = " or ".join(map(repr, roles))
            logger.warning("app %s has one role, named %s here; showing its logs for %r", app_id, named, role_name)
        if not 0 <= k < len(job.actors):
            raise ArgumentError(f"{app_id} has replicas 0 to {len(job.actors) - 1}; there is no replica {k}")
        lines = _replica_lines(client, away, app_id, k, _ms(since), _ms(until), should_tail)
        if regex:
            pattern = re.compile(regex)
            return (line for line in lines if pattern.search(line))
        return lines

    def _role_names(self, app_id: str, job: Job) -> List[str]:
        """The names the app's one role goes by: the job's (what ``describe`` shows), and the
        role's own when the app was submitted here under another name (``torchx run --log``
        asks by it)."""
        seen = self._seen.get(app_id)
        submitted_as = seen.submitted_as if seen is not None else ""
        return [job.name, submitted_as] if submitted_as and submitted_as != job.name else [job.name]


def create_scheduler(
    session_name: str,
    client: Optional[Client] = None,
    head_return_timeout: float = HEAD_RETURN_TIMEOUT_S,
    **kwargs: Any,
) -> FtdriveScheduler:
    """The ``torchx.schedulers`` entry point."""
    return FtdriveScheduler(session_name=session_name, client=client, head_return_timeout=head_return_timeout)


# ---- AppDef → job spec ------------------------------------------------------------------


def _check_run_options(cfg: Mapping[str, Any]) -> None:
    """Run options the head would refuse, refused here naming the option (a dry run included),
    rather than as a field of the spec they became."""
    choices = {"restart": RESTART_MODES, "strategy": STRATEGIES}
    for name, allowed in choices.items():
        if cfg.get(name) is not None and cfg[name] not in allowed:
            raise ArgumentError(f"-cfg {name}={cfg[name]}: must be one of {', '.join(allowed)}")
    lowest = {"hot_spares": 0, "system_retries": -1, "preemption_retries": -1, "schedule_timeout_ms": 1, "run_timeout_ms": 1}
    for name, low in lowest.items():
        if cfg.get(name) is not None and int(cfg[name]) < low:
            meaning = " (-1: no limit)" if low == -1 else ""
            raise ArgumentError(f"-cfg {name}={cfg[name]}: must be {low} or more{meaning}")


def to_request(app: AppDef, cfg: Mapping[str, Any]) -> FtdriveRequest:
    """The job spec an app becomes under ``cfg`` (the scheduler's run options). What the head
    would refuse of the role is refused here in the role's own terms."""
    _check_run_options(cfg)
    # A relative -cfg cwd means the directory torchx runs in, as the default does, not the agents'.
    cwd = os.path.abspath(cfg.get("cwd") or os.getcwd())
    values = macros.Values(img_root=cwd, app_id=_JOB_ID, replica_id=_REPLICA_ID, rank0_env="TORCHX_RANK0_HOST")
    role = values.apply(app.roles[0])
    _check_role(role)
    notes: List[str] = []
    command, low, high, nproc = _launch_shape(role, str(cfg.get("python") or "python3"), notes)
    min_nodes, max_nodes, hot_spares, restart = _topology(role.retry_policy, low, high, cfg)
    command, env = _late_bound(command, dict(role.env))
    ignored = []
    if role.mounts:
        ignored.append(f"role {role.name}: mounts are ignored: ftdrive runs processes on the nodes' own filesystems")
    notes.extend(ignored)
    bundle, labels = _bundle(role, notes)
    spec = JobSpec(
        name=_job_name(app.name, role.name),
        command=command,
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        env=env,
        cwd=cwd,
        hot_spares=hot_spares,
        nproc_per_node=nproc,
        bundle=bundle,
        priority=int(cfg.get("priority") or 0),
        restart=restart,
        retries=_retries(role.max_retries, cfg),
    )
    if cfg.get("strategy"):
        spec.strategy = str(cfg["strategy"])
    for timeout in ("schedule_timeout_ms", "run_timeout_ms"):
        if cfg.get(timeout) is not None:
            setattr(spec, timeout, int(cfg[timeout]))
    spec.node_selector = {**labels, **dict(cfg.get("node_selector") or {})}
    return FtdriveRequest(
        spec=spec,
        head=cfg.get("head"),
        ca_cert=cfg.get("ca_cert"),
        notes=notes,
        role_name=app.roles[0].name,
        ignored=ignored,
    )


def _check_role(role: Role) -> None:
    """The role's retries and resources as the head would refuse them, named as torchx has them."""
    if not -1 <= role.max_retries <= _MAX_BUDGET:
        raise SpecError(
            f"role {role.name}: max_retries is {role.max_retries}; give 0 to {_MAX_BUDGET:,} (-1: no limit)"
        )
    resource = role.resource
    amounts = (("cpu", resource.cpu, "cpu"), ("gpu", resource.gpu, "gpu"), ("memMB", resource.memMB, "memory_mb"))
    for name, value, key in amounts:
        if value < 0:
            raise SpecError(
                f"role {role.name}: resource {name} is {value}; give 0 or more (0 leaves `{key}` out of the "
                "job's bundle)"
            )


def _check_nodes(role: Role, low: int, high: int, nnodes: Optional[str]) -> None:
    """The role's node range as the head would refuse it, named as the role gives it: a
    torchrun launch's ``--nnodes`` (``dist.ddp -j MIN:MAXxN``), else ``min_replicas`` and
    ``num_replicas``."""
    if nnodes is not None:
        where = f"torchrun --nnodes {nnodes} (dist.ddp: -j {nnodes}xN)"
        if low < 1:
            raise SpecError(f"{where}: a job runs on at least 1 node; give MIN 1 or more")
        if low > high:
            raise SpecError(f"{where}: at least {low} nodes but at most {high}; give MIN <= MAX")
        return
    if high < 1:
        raise SpecError(f"role {role.name}: num_replicas is {high}; give 1 or more")
    if low < 1:
        raise SpecError(
            f"role {role.name}: min_replicas is {low}; a job runs on at least 1 node: give 1 to num_replicas "
            f"({high}), or leave it out for num_replicas"
        )
    if low > high:
        raise SpecError(
            f"role {role.name}: min_replicas {low} is more than num_replicas {high}; give min_replicas <= num_replicas"
        )


def _launch_shape(role: Role, python: str, notes: List[str]) -> Tuple[List[str], int, int, int]:
    """The command, node range and workers per node of a role: a torchrun launch translated
    (see :mod:`ftdrive.torchrun`), anything else as it is on ``min_replicas..num_replicas``."""
    gpus, cpus = max(int(role.resource.gpu), 0), max(int(role.resource.cpu), 1)
    command = [role.entrypoint, *role.args]
    launch = torchrun.translate(command, gpus=gpus, cpus=cpus, python=python)
    if launch is not None:
        _check_nodes(role, launch.min_nodes, launch.max_nodes, f"{launch.min_nodes}:{launch.max_nodes}")
        if launch.nproc_per_node < 1:
            raise SpecError(f"torchrun --nproc_per_node {launch.nproc_per_node}: give 1 or more workers per node")
        notes.append(
            f"torchrun launch translated: {launch.min_nodes}..{launch.max_nodes} node(s) x "
            f"{launch.nproc_per_node} worker(s), ftdrive sets torchrun's environment; runs {shlex.join(launch.command)}"
        )
        return launch.command, launch.min_nodes, launch.max_nodes, launch.nproc_per_node
    if _mentions_torchrun(command):
        notes.append("the role runs torchrun inside a larger script: left as it is, one process per node")
    high = role.num_replicas
    low = role.min_replicas if role.min_replicas is not None else high
    _check_nodes(role, low, high, None)
    return command, low, high, 1


def _topology(policy: RetryPolicy, low: int, high: int, cfg: Mapping[str, Any]) -> Tuple[int, int, int, str]:
    """min_nodes, max_nodes, hot_spares and restart mode for a retry policy."""
    spares = cfg.get("hot_spares")
    restart = "actor" if policy == RetryPolicy.REPLICA else "gang"
    if policy == RetryPolicy.HOT_SPARE:
        high, spares = low, (high - low if spares is None else spares)
    if cfg.get("restart"):
        restart = str(cfg["restart"])
    return low, high, int(spares or 0), restart


def _retries(max_retries: int, cfg: Mapping[str, Any]) -> Retries:
    retries = Retries(user=int(max_retries), non_retryable_exit_codes=_exit_codes(cfg))
    if cfg.get("system_retries") is not None:
        retries.system = int(cfg["system_retries"])
    if cfg.get("preemption_retries") is not None:
        retries.preemption = int(cfg["preemption_retries"])
    return retries


def _exit_codes(cfg: Mapping[str, Any]) -> List[int]:
    """``-cfg non_retryable_exit_codes`` (a list, or text with ``,`` or ``;`` between codes);
    by default 126 and 127, which the prologue exits with when the program cannot start."""
    given = cfg.get("non_retryable_exit_codes")
    if given is None:
        return list(_CANNOT_START)
    words = str(given).replace(";", ",").split(",") if isinstance(given, str) else [str(w) for w in given]
    words = [word.strip() for word in words if word.strip()]
    codes: List[int] = []
    for word in words:
        if not word.isdigit() or not 1 <= int(word) <= 255:
            raise ArgumentError(
                f"-cfg non_retryable_exit_codes={','.join(words)}: `{word}` is not an exit code; give codes 1 to 255, "
                "such as 2,126,127"
            )
        codes.append(int(word))
    return codes


def _bundle(role: Role, notes: List[str]) -> Tuple[Dict[str, float], Dict[str, str]]:
    """The bundle and the node labels a role's resource asks for: ``cpu``, ``gpu`` and
    ``memMB``; ``devices`` and numeric ``capabilities`` as resources of their own name (which
    the agents declare with ``--resources``), as Kubernetes asks for a device as a resource
    limit; any other capability as a node label (``node_selector``), as Kubernetes selects
    nodes by the instance-type capability."""
    resource = role.resource
    bundle: Dict[str, float] = {}
    for key, value in (("cpu", resource.cpu), ("gpu", resource.gpu), ("memory_mb", resource.memMB)):
        if value > 0:
            bundle[key] = value
    labels: Dict[str, str] = {}
    extra = [("devices", name, amount) for name, amount in resource.devices.items()]
    extra += [("capabilities", name, value) for name, value in resource.capabilities.items()]
    for where, name, value in extra:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            bundle[_resource_name(role, where, str(name), value)] = value
        else:
            labels[str(name)] = str(value).lower() if isinstance(value, bool) else str(value)
    asked = {key: value for key, value in bundle.items() if key not in _BUNDLE_KEYS}
    if asked:
        notes.append(f"resource devices/capabilities {asked} are asked for in the bundle (agents declare --resources)")
    if labels:
        notes.append(f"resource capabilities {labels} select nodes with these labels (node_selector)")
    return bundle or {"cpu": 1}, labels


def _resource_name(role: Role, where: str, name: str, amount: float) -> str:
    """``name`` as a resource of the bundle, or a :class:`SpecError` saying why it cannot be one."""
    if name in _BUNDLE_KEYS:
        raise SpecError(
            f"role {role.name}: resource {where} `{name}` is the bundle's own `{name}`; give it as the resource's "
            "cpu, gpu or memMB"
        )
    if not _RESOURCE_NAME_RE.fullmatch(name):
        plain = _NAME_RE.sub("_", name.rsplit("/", 1)[-1]).strip("_")[:64] or "name"
        raise SpecError(
            f"role {role.name}: resource {where} `{name}` cannot be an ftdrive resource name (1 to 64 letters, "
            f"digits, `_`, `-` or `.`); declare it on the agents under such a name (`ftdrive node --resources "
            f"{plain}={amount:g}`) and ask for `{plain}` instead"
        )
    if amount < 0:
        raise SpecError(f"role {role.name}: resource {where} `{name}` is {amount}; give 0 or more")
    return name


def _job_name(app_name: str, role_name: str) -> str:
    """A valid job name (letters, digits, ``-``, ``_``, ``.``; at most 63) from the app's."""
    for candidate in (app_name, role_name):
        name = _NAME_RE.sub("-", candidate or "").strip("-")[:63]
        if name:
            return name
    return "torchx"


def _mentions_torchrun(command: List[str]) -> bool:
    return any("torchrun" in word or "torch.distributed.run" in word for word in command)


def _shell_word(text: str) -> str:
    """``text`` as one shell word, with the late-bound values expanded."""
    parts: List[str] = []
    position = 0
    for match in _LATE_RE.finditer(text):
        if match.start() > position:
            parts.append(shlex.quote(text[position : match.start()]))
        parts.append(_LATE[match.group(0)])
        position = match.end()
    if position < len(text) or not parts:
        parts.append(shlex.quote(text[position:]))
    return "".join(parts)


def _late_bound(command: List[str], env: Dict[str, str]) -> Tuple[List[str], Dict[str, str]]:
    """The command and env with ``${app_id}``/``${replica_id}`` resolved in the job's own
    processes: values that use them are set by a ``/bin/sh`` prologue, which then checks that
    the program can be started (see :func:`_startable`) and execs it."""
    late_env = {key: value for key, value in env.items() if _LATE_RE.search(value)}
    late_args = any(_LATE_RE.search(word) for word in command)
    if not late_env and not late_args:
        return command, env
    lines = []
    for key, value in late_env.items():
        if not _ENV_NAME_RE.fullmatch(key):
            raise SpecError(f"env {key!r} uses ${{app_id}} or ${{replica_id}} but is not a shell variable name")
        lines.append(f"export {key}={_shell_word(value)}")
    tail: List[str] = []
    if late_args:
        lines.append("set -- " + " ".join(_shell_word(word) for word in command))
    else:
        tail = ["ftdrive-torchx", *command]
    lines += [*_startable(command[0]), 'exec "$@"']
    rest = {key: value for key, value in env.items() if key not in late_env}
    return ["/bin/sh", "-c", "; ".join(lines), *tail], rest


def _startable(program: str) -> List[str]:
    """Shell lines that end the prologue when ``$1`` (``program``) cannot be started, as a shell
    would (127: not found, 126: not executable), but first say so on stderr and in
    ``$TORCHELASTIC_ERROR_FILE``, which ftdrive quotes in the attempt's evidence: an ``exec``
    that fails says only ``exit 127``, which would read as the program's own failure."""
    shown = _LATE_RE.sub(lambda m: "${app_id}" if m.group(0) == _JOB_ID else "${replica_id}", program)

    def cannot(code: int, why: str) -> str:
        message = f"cannot start `{shown}`: {why}"
        record = json.dumps({"message": {"message": message, "extraInfo": {"timestamp": "0"}}})
        return f"_ftdrive_cannot_start {code} {shlex.quote(message)} {shlex.quote(record)}"

    say = (
        "_ftdrive_cannot_start() { printf '%s\\n' \"$2\" >&2; "
        'if [ -n "${TORCHELASTIC_ERROR_FILE:-}" ]; then printf \'%s\\n\' "$3" > "$TORCHELASTIC_ERROR_FILE"; fi; '
        'exit "$1"; }'
    )
    if "/" not in program:
        return [say, f'command -v -- "$1" >/dev/null 2>&1 || {cannot(127, "not found on the PATH of this node")}']
    where = "on this node" if program.startswith("/") else "in the working directory of the job on this node"
    return [
        say,
        f'if [ ! -e "$1" ]; then {cannot(127, f"no such file {where}")}; '
        f'elif [ -d "$1" ] || [ ! -x "$1" ]; then {cannot(126, f"not an executable file {where}")}; fi',
    ]


# ---- observing ---------------------------------------------------------------------------


def _torchxconfig(key: str) -> Optional[str]:
    """``key`` of the ``[ftdrive]`` section in the ``.torchxconfig`` files torchx reads."""
    try:
        from torchx.runner.config import find_configs

        files = find_configs()
    except (ImportError, OSError):
        return None
    for path in files:
        parser = configparser.ConfigParser()
        parser.read(path)
        if parser.has_option("ftdrive", key):
            return parser.get("ftdrive", key)
    return None


@dataclass
class _Seen:
    """An app the head answered for: how long the head has been away since, the app's roles as
    last seen (shown while the head is away, so that ``torchx log`` still finds replicas), the
    role's own name and the client of its head when it was submitted here, and whether the head
    last said it has no such app."""

    away: HeadAway
    roles: List[Role] = field(default_factory=list)
    submitted_as: str = ""
    client: Optional[Client] = None
    absent: bool = False


def _role(job: Job) -> Role:
    """A job's one role, from the spec the head accepted (one job's view carries it): the name
    and command; every actor as a replica (spares too, so that each one's logs can be asked
    for); ``min_nodes``; the bundle as the resource (keys other than ``cpu``, ``gpu`` and
    ``memory_mb``, and the node labels of ``node_selector``, as capabilities: ``_bundle``
    reversed); the ``user`` budget as ``max_retries`` (-1: unlimited); the restart mode and
    spares as the retry policy."""
    spec: Mapping[str, Any] = job.raw.get("spec") or {}
    command = list(spec.get("command") or [])
    bundle = dict(job.placement_groups[0].bundle) if job.placement_groups else {}
    capabilities: Dict[str, Any] = dict(spec.get("node_selector") or {})
    resource = Resource(
        cpu=_whole(bundle.pop("cpu", 0)),
        gpu=_whole(bundle.pop("gpu", 0)),
        memMB=_whole(bundle.pop("memory_mb", 0)),
        capabilities={**capabilities, **{key: _whole(value) for key, value in bundle.items()}},
    )
    role = Role(
        name=job.name,
        image="",
        num_replicas=len(job.actors),
        min_replicas=job.min_nodes,
        max_retries=int((spec.get("retries") or {}).get("user", job.remaining.user)),
        retry_policy=_retry_policy(spec),
        resource=resource,
        args=command[1:],
        env=dict(spec.get("env") or {}),
    )
    if command:
        role.entrypoint = command[0]
    return role


def _retry_policy(spec: Mapping[str, Any]) -> RetryPolicy:
    """The torchx policy a spec's restart mode and spares stand for (``_topology``, reversed)."""
    if spec.get("hot_spares"):
        return RetryPolicy.HOT_SPARE
    return RetryPolicy.REPLICA if spec.get("restart") == "actor" else RetryPolicy.APPLICATION


def _whole(value: float) -> Any:
    """A bundle amount as torchx has it: an int when it is whole."""
    return int(value) if float(value).is_integer() else value


def _exhausted(job: Job, entry: LedgerEntry) -> bool:
    """Whether ``entry`` found its budget at 0 and so failed the job: the last attempt of an
    actor that ended FAILED, charged to a budget with nothing left. (An attempt charged to a
    budget with retries left is followed by a restart, or by the job's closing.)"""
    actor = next((a for a in job.actors if a.name == entry.actor), None)
    return (
        entry.charged
        and actor is not None
        and actor.state == "FAILED"
        and entry.attempt == actor.attempt
        and getattr(entry.remaining, entry.budget, None) == 0
    )


def _restarts(job: Job) -> int:
    """Restarts charged to the job's retry budgets: the ledger's charged entries, less the one
    that found its budget exhausted (see the module's documentation)."""
    return sum(1 for entry in job.ledger if entry.charged and not _exhausted(job, entry))


@contextlib.contextmanager
def _known(client: Client, app_id: str) -> Iterator[None]:
    """Turns the head's 404 for ``app_id`` into :class:`UnknownAppError`."""
    try:
        yield
    except ApiError as e:
        if e.status == 404:
            raise UnknownAppError(app_id, client.base_url) from e
        raise


def _status_or_none(client: Client, app_id: str) -> Optional[Job]:
    try:
        return client.status(app_id)
    except ApiError as e:
        if e.status == 404:
            return None
        raise


def _is_replica(job: Job, actor: Actor) -> bool:
    """Whether torchx should see ``actor`` as a replica: not once the app succeeded or failed
    if it never ran (an elastic app's ranks beyond the nodes it got, its spares never needed),
    which the head ends STOPPED and torchx would show as cancelled."""
    return actor.attempt > 0 or job.state not in ("SUCCEEDED", "FAILED")


def _replica_state(job: Job, actor: Actor) -> AppState:
    """A replica's torchx state. In a failed app, one that ftdrive stopped is FAILED: it was
    stopped with its gang (or as the job closed) because the app failed, as Kubernetes shows
    the pods it killed when one task failed as Failed; CANCELLED is for an app cancelled."""
    if job.state == "FAILED" and actor.state == "STOPPED":
        return AppState.FAILED
    if actor.state == "RUNNING" and actor.starting:
        return AppState.PENDING  # its start is sent, not confirmed: its process may not run yet
    return _REPLICA_STATE.get(actor.state, AppState.UNKNOWN)


def _replica_error(job: Job, actor: Actor) -> str:
    """For a failed or stopped replica, its last ended attempt in torchx's error format; for
    one that never started (its app cancelled while it waited), why it has none."""
    if actor.state not in ("FAILED", "STOPPED"):
        return str(NONE)
    attempts = [entry for entry in job.attempts_of(actor.index) if entry.cause != "completed"]
    if attempts:
        return _error_json(attempts[-1])
    if actor.attempt > 0:
        return str(NONE)
    why = f" ({job.message})" if job.message else ""
    ended_ms = max([entry.end_ms for entry in job.ledger], default=job.submit_ms)
    state = _APP_STATE.get(job.state, AppState.UNKNOWN).name
    message = f"{actor.name} never started: the app was {state} before it was placed{why}"
    return _error_record(message, None, ended_ms)


# Ends that the job's own course brought about: none of them is why a job failed.
_NOT_A_CAUSE = ("completed", "collateral", "membership_change", "stopped")


def _app_error(job: Job) -> str:
    """For a failed app, the end that failed it (the last failure of the ledger), in torchx's
    error format, as torchx's own schedulers give the root cause at app level."""
    if job.state != "FAILED":
        return str(NONE)
    causes = [entry for entry in job.ledger if entry.cause not in _NOT_A_CAUSE]
    return _error_json(causes[-1]) if causes else str(NONE)


def _error_json(last: LedgerEntry) -> str:
    """One ended attempt as torchelastic's error file has it."""
    message = f"{last.actor} attempt {last.attempt}: {last.cause} (charged to {last.budget}): {last.evidence}"
    return _error_record(message, last.exit_code, last.end_ms)


def _error_record(message: str, code: Optional[int], at_ms: int) -> str:
    """A message in torchelastic's error format, as torchx shows it, in torchx's terms."""
    record = {"message": _in_torchx_terms(message), "errorCode": code, "extraInfo": {"timestamp": at_ms // 1000}}
    return json.dumps({"message": record})


#: What the head and agents word as job spec fields, as a torchx user gives them: the role's
#: replicas and resource, and the run options.
_TORCHX_TERMS = (
    (
        "set the job spec's `cwd` (default: the agent's --work-dir) to one that exists",
        "give `-cfg cwd=DIR` one that exists on every node (default: the directory `torchx run` ran in)",
    ),
    (
        "add nodes, or lower min_nodes",
        "add nodes, or lower the app's fewest nodes (dist.ddp: -j MIN:MAXxN; else the role's min_replicas)",
    ),
    ("infeasible: bundle needs ", "infeasible: one replica's resource needs "),
    ("memory_mb=", "memMB="),
    (
        "no node matches node_selector ",
        "no node matches the role's resource capabilities and -cfg node_selector: ",
    ),
)


def _in_torchx_terms(text: str) -> str:
    """``text`` (a job's message or evidence) with the fixes it names as job spec fields named
    as the torchx run options that set them."""
    for spec_terms, torchx_terms in _TORCHX_TERMS:
        text = text.replace(spec_terms, torchx_terms)
    return text


def _ms(moment: Optional[datetime]) -> Optional[int]:
    return None if moment is None else int(moment.timestamp() * 1000)


def _in_window(job: Job, index: int, attempt: int, since: Optional[int], until: Optional[int]) -> bool:
    ended = [e for e in job.attempts_of(index) if e.attempt == attempt]
    if ended:
        start, end = ended[0].start_ms, ended[0].end_ms
    else:
        start, end = job.actor(index).started_ms or 0, None
    if since is not None and end is not None and end < since:
        return False
    return until is None or start <= until


def _replica_lines(
    client: Client, away: HeadAway, job_id: str, index: int, since: Optional[int], until: Optional[int], tail: bool
) -> Iterator[str]:
    attempt = 1
    while True:
        job = away.ask(functools.partial(client.status, job_id)) if tail else client.status(job_id)
        actor = job.actor(index)
        if attempt > actor.attempt:
            if not tail or job.is_terminal:
                if actor.attempt == 0:
                    yield f"[ftdrive] {not_started(job, actor)}\n"  # else the log is empty, saying nothing
                return
            time.sleep(_POLL_S)
            continue
        if _in_window(job, index, attempt, since, until):
            try:
                yield from client.logs(job_id, index, attempt=attempt, follow=tail)
            except ApiError as e:
                yield f"[ftdrive] the log of {job_id}/{index} attempt {attempt} is not available: {e.message}\n"
        attempt += 1
