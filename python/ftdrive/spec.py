"""The job spec (DESIGN §4, ``src/spec.rs``) as dataclasses.

Field names are exactly those of ``job.json``; defaults are the documented ones, so
``JobSpec(name=..., command=[...], min_nodes=..., max_nodes=...)`` is a complete spec.
:meth:`JobSpec.to_dict` gives the JSON object the head takes; :meth:`JobSpec.from_dict` reads
one back and refuses fields the head does not know. Values are validated by the head, which
names the field and the fix in its answer (raised as :class:`ftdrive.errors.ApiError`).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, List, Mapping, Optional

from .errors import SpecError

#: Placement strategies (``strategy``).
STRATEGIES = ("STRICT_SPREAD", "SPREAD", "PACK", "STRICT_PACK")
#: Restart modes (``restart``): ``gang`` (torchelastic) or ``actor`` (torchx).
RESTART_MODES = ("gang", "actor")
#: A budget of -1 is unlimited.
UNLIMITED = -1


@dataclass
class Backoff:
    """Exponential backoff between retries, in milliseconds."""

    initial: int = 1000
    max: int = 30000

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Backoff":
        _refuse_unknown(cls, data, "retries.backoff_ms.")
        return cls(**data)


@dataclass
class Retries:
    """Retry budgets (DESIGN §6): counts, ``-1`` for unlimited."""

    user: int = 0
    system: int = 3
    preemption: int = UNLIMITED
    single_budget: bool = False
    non_retryable_exit_codes: List[int] = field(default_factory=list)
    backoff_ms: Backoff = field(default_factory=Backoff)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Retries":
        _refuse_unknown(cls, data, "retries.")
        values = {key: value for key, value in data.items() if value is not None}
        if "backoff_ms" in values:
            values["backoff_ms"] = Backoff.from_dict(values["backoff_ms"])
        return cls(**values)


@dataclass
class JobSpec:
    """One job: ``max_nodes + hot_spares`` command actors, each running ``command`` as a
    group of ``nproc_per_node`` workers on one node's ``bundle``."""

    name: str
    command: List[str]
    min_nodes: int
    max_nodes: int
    env: Dict[str, str] = field(default_factory=dict)
    cwd: Optional[str] = None
    hot_spares: int = 0
    nproc_per_node: int = 1
    bundle: Dict[str, float] = field(default_factory=lambda: {"cpu": 1})
    strategy: str = "STRICT_SPREAD"
    node_selector: Dict[str, str] = field(default_factory=dict)
    pack_by: Optional[str] = None
    priority: int = 0
    restart: str = "gang"
    retries: Retries = field(default_factory=Retries)
    last_attempt_non_preemptible: bool = False
    scale_up_delay_ms: int = 5000
    stop_grace_ms: int = 10000
    schedule_timeout_ms: Optional[int] = None
    #: How long the job may run, from when it first ran and through its restarts, before it is
    #: stopped and fails (as Slurm's ``--time``); ``None``: no limit.
    run_timeout_ms: Optional[int] = None

    def to_dict(self) -> Dict[str, Any]:
        """The spec as the head takes it (every field, in the order DESIGN §4 shows)."""
        data = asdict(self)
        order = [
            "name", "command", "env", "cwd", "min_nodes", "max_nodes", "hot_spares", "bundle",
            "strategy", "node_selector", "pack_by", "priority", "nproc_per_node", "restart",
            "retries", "last_attempt_non_preemptible", "scale_up_delay_ms", "stop_grace_ms",
            "schedule_timeout_ms", "run_timeout_ms",
        ]  # fmt: skip
        return {key: data[key] for key in order}

    def to_json(self, indent: Optional[int] = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "JobSpec":
        """Reads a ``job.json`` object; a field the head does not know is a :class:`SpecError`."""
        _refuse_unknown(cls, data, "")
        # null means "the default" for every field, as in job.json.
        values = {key: value for key, value in data.items() if value is not None}
        if "retries" in values:
            values["retries"] = Retries.from_dict(values["retries"])
        missing = [name for name in ("name", "command", "min_nodes", "max_nodes") if name not in values]
        if missing:
            raise SpecError(f"job spec field `{missing[0]}` is required")
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> "JobSpec":
        """Reads a ``job.json`` text; text that is not JSON is a :class:`SpecError` saying where."""
        try:
            data = json.loads(text)
        except ValueError as e:
            raise SpecError(f"job spec is not JSON: {e}") from e
        return cls.from_dict(data)


def _refuse_unknown(cls: Any, data: Mapping[str, Any], prefix: str) -> None:
    if not isinstance(data, Mapping):
        raise SpecError(f"job spec field `{prefix.rstrip('.') or '(document)'}` must be an object")
    known = {f.name for f in fields(cls)}
    for key in data:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.8)
            meant = f"did you mean `{close[0]}`? " if close else ""
            raise SpecError(
                f"job spec field `{prefix}{key}`: unknown field; {meant}known fields are {', '.join(sorted(known))}"
            )
