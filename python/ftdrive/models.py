"""What the head answers, as dataclasses: jobs with their actors and attempt ledger, nodes,
health, event-stream lines and log chunks.

Field names are those of the head's JSON (DESIGN §6, §7; ``src/view.rs``, ``src/event.rs``).
Parsing is lenient about fields a newer head adds (they stay in ``raw``) and fills the
documented default for fields an older head lacks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

#: Job states (DESIGN §2). The last three are terminal.
JOB_STATES = ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED")
TERMINAL_JOB_STATES = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
#: Command actor states (DESIGN §2). The last three are terminal.
ACTOR_STATES = ("SCHEDULING", "STANDBY", "RUNNING", "FAILING", "TASK_COMPLETED", "FAILED", "STOPPED")
TERMINAL_ACTOR_STATES = frozenset({"TASK_COMPLETED", "FAILED", "STOPPED"})


def _opt_int(value: Any) -> Optional[int]:
    return None if value is None else int(value)


@dataclass
class Remaining:
    """What is left of each retry budget; -1 is unlimited."""

    user: int
    system: int
    preemption: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Remaining":
        return cls(user=int(data["user"]), system=int(data["system"]), preemption=int(data["preemption"]))


@dataclass
class LedgerEntry:
    """One ended attempt: its cause, the evidence, the budget charged and what remains."""

    actor: str
    rank: Optional[int]
    attempt: int
    cycle: int
    node: str
    start_ms: int
    end_ms: int
    exit_code: Optional[int]
    signal: Optional[int]
    cause: str
    evidence: str
    budget: str
    remaining: Remaining

    @property
    def charged(self) -> bool:
        """Whether this attempt used up a retry (its budget is not ``none``)."""
        return self.budget != "none"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "LedgerEntry":
        return cls(
            actor=data["actor"],
            rank=_opt_int(data.get("rank")),
            attempt=int(data["attempt"]),
            cycle=int(data["cycle"]),
            node=data["node"],
            start_ms=int(data["start_ms"]),
            end_ms=int(data["end_ms"]),
            exit_code=_opt_int(data.get("exit_code")),
            signal=_opt_int(data.get("signal")),
            cause=data["cause"],
            evidence=data.get("evidence", ""),
            budget=data["budget"],
            remaining=Remaining.from_json(data["remaining"]),
        )


@dataclass
class Actor:
    """A command actor: ``<job>/<index>``, its state, node, rank and attempt count."""

    name: str
    state: str
    node: Optional[str]
    rank: Optional[int]
    attempt: int
    role: str = "active"
    started_ms: Optional[int] = None
    #: RUNNING, but its agent has not confirmed the start yet: its process may not
    #: exist for a while (a pod whose containers are still being created).
    starting: bool = False
    devices: List[int] = field(default_factory=list)
    #: While it is STANDBY (a hot spare waiting with its bundle): since when.
    standby_since_ms: Optional[int] = None
    #: While it backs off before its next attempt (``restart: "actor"``,
    #: ``retries.backoff_ms``): the earliest that attempt may start, in Unix ms.
    restart_at_ms: Optional[int] = None

    @property
    def index(self) -> int:
        """The actor's index within its job (``j1/2`` → 2), as ``logs`` takes it."""
        return int(self.name.rsplit("/", 1)[-1])

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_ACTOR_STATES

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Actor":
        return cls(
            name=data["name"],
            state=data["state"],
            node=data.get("node"),
            rank=_opt_int(data.get("rank")),
            attempt=int(data.get("attempt", 0)),
            role=data.get("role", "active"),
            started_ms=_opt_int(data.get("started_ms")),
            starting=bool(data.get("starting", False)),
            devices=[int(d) for d in data.get("devices") or []],
            standby_since_ms=_opt_int(data.get("standby_since_ms")),
            restart_at_ms=_opt_int(data.get("restart_at_ms")),
        )


@dataclass
class Bundle:
    """One bundle of a placement group."""

    index: int
    status: str
    node: Optional[str]
    devices: List[int] = field(default_factory=list)
    #: The port it holds on its node's machine: ``MASTER_PORT`` while its actor is rank 0.
    port: Optional[int] = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Bundle":
        port = data.get("port")
        return cls(
            index=int(data["index"]),
            status=data["status"],
            node=data.get("node"),
            devices=[int(d) for d in data.get("devices") or []],
            port=None if port is None else int(port),
        )


@dataclass
class PlacementGroup:
    """A job's reservation: its state, strategy, per-node bundle and where each bundle is."""

    id: str
    state: str
    strategy: str
    bundle: Dict[str, float]
    bundles: List[Bundle]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "PlacementGroup":
        return cls(
            id=data["id"],
            state=data["state"],
            strategy=data["strategy"],
            bundle=dict(data.get("bundle") or {}),
            bundles=[Bundle.from_json(b) for b in data.get("bundles") or []],
        )


@dataclass
class CycleStart:
    """When a rendezvous cycle formed, and with how many ranks."""

    cycle: int
    at_ms: int
    world_size: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "CycleStart":
        return cls(cycle=int(data["cycle"]), at_ms=int(data["at_ms"]), world_size=int(data["world_size"]))


@dataclass
class Rendezvous:
    """Where a cycle's ranks meet: rank 0's node, ``MASTER_ADDR`` and ``MASTER_PORT``."""

    node: str
    addr: str
    port: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Rendezvous":
        return cls(node=data["node"], addr=data["addr"], port=int(data["port"]))


@dataclass
class Job:
    """A job as ``ftdrive status JOB --output json`` shows it."""

    id: str
    name: str
    state: str
    cycles: int
    min_nodes: int
    max_nodes: int
    nproc_per_node: int
    submit_ms: int
    message: Optional[str]
    infeasible: Optional[str]
    #: Why a job the cluster could hold still waits (busy nodes, and which jobs hold them).
    waiting: Optional[str]
    remaining: Remaining
    actors: List[Actor]
    ledger: List[LedgerEntry]
    placement_groups: List[PlacementGroup]
    cycle_starts: List[CycleStart] = field(default_factory=list)
    #: The spec's ``priority``: pending jobs are placed higher first.
    priority: int = 0
    #: The current (or last) cycle's rendezvous, once one formed.
    rendezvous: Optional[Rendezvous] = None
    #: While it backs off before its next cycle after a failure (gang restarts,
    #: ``retries.backoff_ms``): the earliest that cycle may form, in Unix ms.
    restart_at_ms: Optional[int] = None
    #: While a job with a ``run_timeout_ms`` runs: when it will be stopped and fail, in Unix ms.
    run_deadline_ms: Optional[int] = None
    #: Ledger entries a list (:meth:`Client.jobs`) left out, the oldest: it carries each job's
    #: newest 100. ``Client.job(id)`` has them all (0 here).
    ledger_omitted: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_terminal(self) -> bool:
        """SUCCEEDED, FAILED or STOPPED."""
        return self.state in TERMINAL_JOB_STATES

    def actor(self, index: int) -> Actor:
        """The actor ``<job>/<index>``."""
        for actor in self.actors:
            if actor.index == index:
                return actor
        raise KeyError(f"job {self.id} has actors {self.id}/0 to {self.id}/{len(self.actors) - 1}; no {index}")

    def attempts_of(self, index: int) -> List[LedgerEntry]:
        """The ledger entries of actor ``index``, oldest first."""
        name = f"{self.id}/{index}"
        return [entry for entry in self.ledger if entry.actor == name]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Job":
        return cls(
            id=data["id"],
            name=data["name"],
            state=data["state"],
            cycles=int(data.get("cycles", 0)),
            min_nodes=int(data["min_nodes"]),
            max_nodes=int(data["max_nodes"]),
            nproc_per_node=int(data.get("nproc_per_node", 1)),
            submit_ms=int(data.get("submit_ms", 0)),
            message=data.get("message"),
            infeasible=data.get("infeasible"),
            waiting=data.get("waiting"),
            remaining=Remaining.from_json(data["remaining"]),
            actors=[Actor.from_json(a) for a in data.get("actors") or []],
            ledger=[LedgerEntry.from_json(e) for e in data.get("ledger") or []],
            placement_groups=[PlacementGroup.from_json(p) for p in data.get("placement_groups") or []],
            cycle_starts=[CycleStart.from_json(c) for c in data.get("cycle_starts") or []],
            priority=int(data.get("priority", 0)),
            rendezvous=Rendezvous.from_json(data["rendezvous"]) if data.get("rendezvous") else None,
            restart_at_ms=_opt_int(data.get("restart_at_ms")),
            run_deadline_ms=_opt_int(data.get("run_deadline_ms")),
            ledger_omitted=int(data.get("ledger_omitted", 0)),
            raw=dict(data),
        )


@dataclass
class Suspect:
    """Why the head suspects a node (not heard from as it should be) and what comes next."""

    #: Its agent's connection dropped (rather than a heartbeat going missing).
    link_lost: bool
    #: How long since the head last heard from it.
    silent_ms: int
    #: How long until it is declared DEAD unless it is heard from first (for a held node,
    #: at least this long after any node is heard from).
    dead_in_ms: int
    #: Every node went silent at once, so the head declares none DEAD until one is heard
    #: from: its own network is the likelier cause.
    held: bool = False

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Suspect":
        return cls(
            link_lost=bool(data["link_lost"]),
            silent_ms=int(data["silent_ms"]),
            dead_in_ms=int(data["dead_in_ms"]),
            held=bool(data.get("held", False)),
        )


@dataclass
class Node:
    """A node as ``ftdrive nodes --output json`` shows it."""

    name: str
    state: str
    resources: Dict[str, float]
    labels: Dict[str, str]
    allocated: Dict[str, float] = field(default_factory=dict)
    addr: str = ""
    devices: List[int] = field(default_factory=list)
    devices_held: List[int] = field(default_factory=list)
    #: The operator drained it: no new work until undrained, even after it was DEAD.
    cordoned: bool = False
    #: Its agent announced that the machine is going away.
    leaving: bool = False
    metrics_url: Optional[str] = None
    #: What keeps its agent from starting work (its state dir takes no write): it keeps what
    #: runs there and is given nothing new until the agent can again.
    problem: Optional[str] = None
    #: Set while the head has not heard from it as it should: room for its bundles is held
    #: until it is heard from again or declared DEAD.
    suspect: Optional[Suspect] = None
    #: Rendezvous ports it may still take, one per bundle: with none it takes no bundle, however
    #: free its resources (its machine's agents share the head's ``--master-port-base`` to 65535,
    #: ``--ports-per-node`` each). ``None`` from a head that did not say.
    ports_left: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Node":
        return cls(
            name=data["name"],
            state=data["state"],
            resources=dict(data.get("resources") or {}),
            labels=dict(data.get("labels") or {}),
            allocated=dict(data.get("allocated") or {}),
            addr=data.get("addr", ""),
            devices=[int(d) for d in data.get("devices") or []],
            devices_held=[int(d) for d in data.get("devices_held") or []],
            cordoned=bool(data.get("cordoned", False)),
            leaving=bool(data.get("leaving", False)),
            metrics_url=data.get("metrics_url"),
            problem=data.get("problem"),
            suspect=Suspect.from_json(data["suspect"]) if data.get("suspect") else None,
            ports_left=data.get("ports_left"),
            raw=dict(data),
        )


@dataclass
class Drain:
    """The head's answer to a drain or an undrain: the node as it is then. ``cordoned``: the
    operator's drain stands (until undrained, even across the node's death); ``leaving``: its
    own agent announced that the machine is going away. ``deadline_ms`` only for a drain that
    set the deadline in force: a node already draining keeps the deadline it was first given.
    ``lifted``, for an undrain: whether there was an operator's drain to lift (``False``: the
    node was not drained; ``None`` for a drain)."""

    node: str
    draining: bool
    deadline_ms: Optional[int] = None
    state: str = ""
    cordoned: bool = False
    leaving: bool = False
    lifted: Optional[bool] = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Drain":
        deadline = data.get("deadline_ms")
        return cls(
            node=data["node"],
            draining=bool(data["draining"]),
            deadline_ms=None if deadline is None else int(deadline),
            state=data.get("state", ""),
            cordoned=bool(data.get("cordoned", False)),
            leaving=bool(data.get("leaving", False)),
            lifted=None if data.get("lifted") is None else bool(data["lifted"]),
        )


@dataclass
class Health:
    """``GET /v1/health``: whether a restarted head still waits for its nodes, and counts."""

    recovering: bool
    jobs: int
    nodes: int
    alive_nodes: int
    failed: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Health":
        return cls(
            recovering=bool(data.get("recovering", False)),
            jobs=int(data.get("jobs", 0)),
            nodes=int(data.get("nodes", 0)),
            alive_nodes=int(data.get("alive_nodes", 0)),
            failed=data.get("failed"),
            raw=dict(data),
        )


@dataclass
class Event:
    """One line of the head's NDJSON event stream.

    ``event`` is the line's tag (``snapshot``, ``job_submitted``, ``transition``, ``ledger``,
    ``cycle_formed``, ``job_state``, ``placed``, ``released``, ``node_state``, …); ``data`` is
    the whole line. A ``snapshot`` line carries the job as it stands in ``job``; a ``ledger``
    line its entry in ``entry``.
    """

    event: str
    t_ms: Optional[int]
    job_id: Optional[str]
    data: Dict[str, Any]
    job: Optional[Job] = None
    entry: Optional[LedgerEntry] = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Event":
        tag = str(data.get("event", ""))
        job = Job.from_json(data["job"]) if tag == "snapshot" and isinstance(data.get("job"), Mapping) else None
        job_id = job.id if job is not None else data.get("job")
        entry = LedgerEntry.from_json(data["entry"]) if tag == "ledger" and "entry" in data else None
        return cls(
            event=tag,
            t_ms=_opt_int(data.get("t_ms")),
            job_id=job_id if isinstance(job_id, str) else None,
            data=dict(data),
            job=job,
            entry=entry,
        )


@dataclass
class LogChunk:
    """A slice of one attempt's log, and where the next read starts."""

    data: bytes
    attempt: int
    node: str
    running: bool
    next_offset: int
    #: Whose log: the actor's index (asked by rank, the rank's holder), and the worker's local
    #: rank when one worker's log was read.
    actor: Optional[int] = None
    local_rank: Optional[int] = None
