"""ftdrive from Python: a client for the head's HTTP API and a torchx scheduler.

* :class:`Client` submits jobs, reads their status, attempt ledger, event stream and logs,
  stops them, and lists, drains and undrains nodes.
* :class:`JobSpec` is the job spec (DESIGN §4) as a dataclass.
* ``ftdrive.torchx_scheduler`` is the torchx scheduler registered as ``ftdrive``
  (``torchx run -s ftdrive dist.ddp -j 3x2 --script train.py``); importing this package does
  not import torchx.
"""

from .client import Client
from .errors import ApiError, ArgumentError, ConfigError, FtdriveError, HeadUnreachableError, SpecError
from .models import (
    Actor,
    Bundle,
    CycleStart,
    Drain,
    Event,
    Health,
    Job,
    LedgerEntry,
    LogChunk,
    Node,
    PlacementGroup,
    Remaining,
    Rendezvous,
    Suspect,
)
from .spec import Backoff, JobSpec, Retries

__version__ = "0.1.0"

__all__ = [
    "Actor",
    "ApiError",
    "ArgumentError",
    "Backoff",
    "Bundle",
    "Client",
    "ConfigError",
    "CycleStart",
    "Drain",
    "Event",
    "FtdriveError",
    "HeadUnreachableError",
    "Health",
    "Job",
    "JobSpec",
    "LedgerEntry",
    "LogChunk",
    "Node",
    "PlacementGroup",
    "Remaining",
    "Rendezvous",
    "SpecError",
    "Retries",
    "Suspect",
]
