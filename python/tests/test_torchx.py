"""The ``ftdrive`` torchx scheduler through the real ``torchx`` CLI against a real cluster:
``dist.ddp`` apps that succeed, fail and are cancelled; ``status``, ``log``, ``list``,
``cancel`` and ``--dryrun``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any, Dict, List

from conftest import Cluster

from ftdrive import Job


def torchx(cli: List[str], cluster: Cluster, *args: str, check: bool = True) -> "subprocess.CompletedProcess[str]":
    done = subprocess.run(
        [*cli, *args], cwd=cluster.work, env=cluster.user_env(), capture_output=True, text=True, timeout=120
    )
    if check and done.returncode != 0:
        raise AssertionError(f"torchx {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


def launch(cli: List[str], cluster: Cluster, *args: str) -> str:
    """``torchx run -s ftdrive ARGS``; the app handle it prints."""
    done = torchx(cli, cluster, "run", "-s", "ftdrive", *args)
    handles = [line for line in done.stdout.splitlines() if line.startswith("ftdrive://")]
    assert handles, f"no app handle in:\n{done.stdout}\n{done.stderr}"
    return handles[-1]


def job_of(handle: str) -> str:
    return handle.rsplit("/", 1)[-1]


def dryrun_spec(output: str) -> Dict[str, Any]:
    """The job spec JSON ``--dryrun`` prints under its ``# ftdrive job spec`` line."""
    text = output.split("# ftdrive job spec", 1)[1].split("\n", 1)[1]
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    spec: Dict[str, Any] = json.loads(body)
    return spec


def test_dryrun_shows_the_job_spec(cluster: Cluster, torchx_cli: List[str]) -> None:
    before = [j.id for j in cluster.client().jobs()]
    done = torchx(
        torchx_cli, cluster, "run", "-s", "ftdrive", "--dryrun", "dist.ddp", "-j", "3:8x2", "--script", "check_env.py",
        "--", "--lr", "0.1",
    )  # fmt: skip
    spec = dryrun_spec(done.stdout)
    assert (spec["name"], spec["min_nodes"], spec["max_nodes"], spec["nproc_per_node"]) == ("check_env", 3, 8, 2)
    assert spec["command"][-5:] == ["python3", "-u", "check_env.py", "--lr", "0.1"]
    assert spec["bundle"] == {"cpu": 2, "memory_mb": 1024}
    assert spec["cwd"] == str(cluster.work)
    assert "torchrun launch translated" in done.stdout
    assert [j.id for j in cluster.client().jobs()] == before, "a dry run submits nothing"


def test_a_ddp_app_succeeds_and_status_log_and_list_work(cluster: Cluster, torchx_cli: List[str]) -> None:
    handle = launch(
        torchx_cli, cluster, "--wait", "dist.ddp", "-j", "3x2", "--script", "check_env.py", "--", "6", "2", "hello"
    )
    job = cluster.client().status(job_of(handle))
    assert job.state == "SUCCEEDED", job
    assert (job.min_nodes, job.max_nodes, job.nproc_per_node, len(job.actors)) == (3, 3, 2, 3)
    assert {(e.cause, e.budget) for e in job.ledger} == {("completed", "none")}

    status = torchx(torchx_cli, cluster, "status", handle).stdout
    assert "SUCCEEDED" in status and "check_env[2]" in status, status

    log = torchx(torchx_cli, cluster, "log", handle).stdout
    ranks = sorted(int(m) for m in re.findall(r"check ok rank=(\d+) local_rank=\d world=6 job=\S+ args=hello", log))
    assert ranks == list(range(6)), log
    assert re.search(r"check_env/2 \[rank\d\]: check ok", log), log

    one = torchx(torchx_cli, cluster, "log", "--regex", "local_rank=1", f"{handle}/check_env/0").stdout
    assert len(one.splitlines()) == 1 and "local_rank=1" in one, one

    listed = torchx(torchx_cli, cluster, "list", "-s", "ftdrive").stdout
    assert job.id in listed, listed


def test_torchx_cancel_stops_a_running_app(cluster: Cluster, torchx_cli: List[str]) -> None:
    handle = launch(torchx_cli, cluster, "dist.ddp", "-j", "2x1", "--script", "sleep.py")
    job_id = job_of(handle)
    cluster.wait_job(job_id, "both replicas run", lambda j: [a.state for a in j.actors] == ["RUNNING"] * 2)
    assert "RUNNING" in torchx(torchx_cli, cluster, "status", handle).stdout
    torchx(torchx_cli, cluster, "cancel", handle)
    job = cluster.wait_job(job_id, "it is stopped", lambda j: j.is_terminal, timeout=30)
    assert job.state == "STOPPED", job
    assert "CANCELLED" in torchx(torchx_cli, cluster, "status", handle).stdout


def test_a_failing_app_ends_failed_with_its_ledger_charged_to_the_user_budget(
    cluster: Cluster, torchx_cli: List[str]
) -> None:
    done = torchx(
        torchx_cli, cluster, "run", "-s", "ftdrive", "-cfg", f"python={sys.executable}", "--wait",
        "dist.ddp", "-j", "1x1", "--max_retries", "1", "--script", "fail.py",
        check=False,
    )  # fmt: skip
    assert done.returncode != 0, "torchx run --wait exits non-zero for a failed app"
    handle = [line for line in done.stdout.splitlines() if line.startswith("ftdrive://")][-1]
    job: Job = cluster.client().status(job_of(handle))
    assert job.state == "FAILED", job
    attempts = job.attempts_of(0)
    assert [(e.attempt, e.cause, e.budget, e.exit_code) for e in attempts] == [
        (1, "user_error", "user", 1),
        (2, "user_error", "user", 1),
    ], attempts
    assert attempts[0].remaining.user == 0, "the one retry was used by the first failure"
    assert job.remaining.user == 0

    status = torchx(torchx_cli, cluster, "status", handle).stdout
    assert "FAILED" in status and "user_error" in status, status
    log = torchx(torchx_cli, cluster, "log", handle).stdout
    assert "failing on purpose, attempt 1" in log and "failing on purpose, attempt 2" in log, log
