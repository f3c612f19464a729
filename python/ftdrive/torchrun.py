"""Recognising a ``torchrun`` launch and rewriting it for ftdrive (no torchx needed here).

ftdrive is itself the elastic launcher: every worker of a command actor gets torchrun's whole
environment (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``,
``GROUP_RANK``, …; DESIGN §4), rendezvous lives in the head, and restarts are charged to retry
budgets. A command that runs ``torchrun`` under ftdrive would start a second launcher with its
own rendezvous and restart policy inside each actor. So a torchrun launch is translated:
``--nnodes`` and ``--nproc_per_node`` become the job's ``min_nodes``/``max_nodes`` and
``nproc_per_node``, and the script runs directly (``python -u script.py args`` or
``python -u -m module args``). torchrun's other options (rendezvous endpoint and backend, run
id, ``--max_restarts``, ``--tee``, …) are ftdrive's business and are dropped.

Recognised shapes: ``torchrun ARGS`` or ``python -m torch.distributed.run ARGS`` as the
command itself, or as the whole script of ``bash -c``/``sh -c`` (as torchx's ``dist.ddp``
writes it). A script that does more than launch torchrun is left alone.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

#: torchrun options that take no value.
_FLAGS = {"--standalone", "--run_path", "--no_python", "--module", "-m"}
#: torchrun options with a value that ftdrive reads; every other option is dropped.
_READ = {"--nnodes", "--nproc_per_node"}
_SHELLS = {"bash", "sh", "/bin/bash", "/bin/sh", "/usr/bin/bash", "/usr/bin/sh"}
#: Characters that may make a shell word mean more than its text.
_SHELL_SPECIAL = re.compile(r"[$`;&|<>(){}*?\[\]~!#\\\n]")
#: Characters of shell operators (``;``, ``&&``, ``|``, redirections, subshells).
_OPERATORS = set("();<>|&")


@dataclass
class Launch:
    """A torchrun launch, rewritten: the job's node range, workers per node and command."""

    min_nodes: int
    max_nodes: int
    nproc_per_node: int
    command: List[str]


def _normal(option: str) -> str:
    """``--nproc-per-node`` and ``--nproc_per_node`` are the same option."""
    return "--" + option[2:].replace("-", "_") if option.startswith("--") else option


def _is_torchrun(words: Sequence[str]) -> int:
    """How many words name the launcher (0: not torchrun)."""
    if words and (words[0] == "torchrun" or words[0].endswith("/torchrun")):
        return 1
    is_python = bool(words) and re.fullmatch(r"(.*/)?python[0-9.]*", words[0]) is not None
    if is_python and len(words) >= 3 and words[1] == "-m" and words[2] == "torch.distributed.run":
        return 3
    return 0


def parse_nnodes(value: str) -> Tuple[int, int]:
    """``3`` → (3, 3); ``3:8`` → (3, 8)."""
    low, sep, high = value.partition(":")
    try:
        return (int(low), int(high)) if sep else (int(low), int(low))
    except ValueError:
        raise ValueError(f"torchrun --nnodes {value!r}: expected N or MIN:MAX") from None


def parse_nproc(value: str, gpus: int, cpus: int) -> int:
    """``--nproc_per_node``: a count, or ``gpu``/``cpu``/``auto`` from the role's resources."""
    if value == "gpu":
        return max(1, gpus)
    if value == "cpu":
        return max(1, cpus)
    if value == "auto":
        return max(1, gpus if gpus > 0 else cpus)
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"torchrun --nproc_per_node {value!r}: expected a count, gpu, cpu or auto") from None


@dataclass
class _Options:
    nnodes: Optional[str] = None
    nproc: Optional[str] = None
    module: bool = False
    no_python: bool = False
    target: int = -1  # index of the script (or module) word; -1 when there is none


def _options(words: Sequence[str], start: int) -> _Options:
    """Reads torchrun's options from ``words[start:]`` up to the script."""
    found = _Options()
    i = start
    while i < len(words):
        word = words[i]
        if not word.startswith("-") or word == "-":
            found.target = i
            return found
        name, eq, inline = word.partition("=")
        name = _normal(name)
        if name in ("--module", "-m"):
            found.module = True
        elif name == "--no_python":
            found.no_python = True
        if name in _FLAGS:
            i += 1
            continue
        value = inline if eq else (words[i + 1] if i + 1 < len(words) else "")
        if name == "--nnodes":
            found.nnodes = value
        elif name == "--nproc_per_node":
            found.nproc = value
        i += 1 if eq else 2
    return found


def _word_starts(script: str) -> List[int]:
    """Where each word of ``script`` begins (shell quoting as ``shlex.split`` reads it)."""
    lexer = shlex.shlex(script, posix=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    starts: List[int] = []
    position = 0
    while True:
        while position < len(script) and script[position] in lexer.whitespace:
            position += 1
        token = lexer.get_token()
        if token is None or token == lexer.eof:
            return starts
        starts.append(position)
        position = lexer.instream.tell()  # type: ignore[attr-defined]


def _direct(python: str, options: _Options, rest: List[str]) -> List[str]:
    if options.no_python:
        return list(rest)
    if options.module:
        return [python, "-u", "-m", *rest]
    return [python, "-u", *rest]


def translate(command: Sequence[str], *, gpus: int = 0, cpus: int = 1, python: str = "python3") -> Optional[Launch]:
    """The ftdrive launch for ``command`` when it is a torchrun launch, else None.

    ``gpus``/``cpus`` resolve ``--nproc_per_node gpu|cpu|auto``; ``python`` runs the script.
    Raises ValueError for a torchrun launch ftdrive cannot read (a bad ``--nnodes``)."""
    words = list(command)
    if len(words) == 3 and words[0] in _SHELLS and words[1] == "-c":
        return _translate_script(words[2], gpus=gpus, cpus=cpus, python=python)
    skip = _is_torchrun(words)
    if not skip:
        return None
    options = _options(words, skip)
    if options.target < 0:
        raise ValueError("the torchrun command names no script or module to run")
    return _launch(options, _direct(python, options, words[options.target :]), gpus, cpus)


def _translate_script(script: str, *, gpus: int, cpus: int, python: str) -> Optional[Launch]:
    """``bash -c "torchrun … script.py args"``: the same, keeping the shell for the script's
    arguments when they use shell syntax (variables, globs, …)."""
    try:
        words = shlex.split(script, comments=False, posix=True)
        starts = _word_starts(script)
        compound = _has_operators(script)
    except ValueError:
        return None  # unbalanced quotes: not a command we can read
    skip = _is_torchrun(words)
    if not skip or compound or len(starts) != len(words):
        return None  # not a torchrun launch, or more than one: left as it is
    options = _options(words, skip)
    if options.target < 0:
        raise ValueError("the torchrun command names no script or module to run")
    rest_text = script[starts[options.target] :]
    if _SHELL_SPECIAL.search(rest_text) is None:
        return _launch(options, _direct(python, options, words[options.target :]), gpus, cpus)
    # The arguments need the shell (a variable, a glob, …): keep it, with exec.
    launcher = ["exec", *(shlex.quote(w) for w in _direct(python, options, [])), rest_text]
    return _launch(options, ["bash", "-c", " ".join(launcher)], gpus, cpus)


def _has_operators(script: str) -> bool:
    """Whether ``script`` holds a shell operator outside quotes (``;``, ``&&``, ``|``, …)."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    return any(token and set(token) <= _OPERATORS for token in lexer)


def _launch(options: _Options, command: List[str], gpus: int, cpus: int) -> Launch:
    low, high = parse_nnodes(options.nnodes) if options.nnodes else (1, 1)
    nproc = parse_nproc(options.nproc, gpus, cpus) if options.nproc else 1
    return Launch(min_nodes=low, max_nodes=high, nproc_per_node=nproc, command=command)
