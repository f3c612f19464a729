"""The ``ftdrive`` torchx scheduler through the real ``torchx`` CLI against a real cluster:
``dist.ddp`` apps that succeed, fail and are cancelled; ``status``, ``log``, ``list``,
``cancel`` and ``--dryrun``; ``run --log`` (waiting and following) across a head restart;
``log`` and ``cancel`` of an app the head does not know, ``log`` of a role an app does not have;
the run's ``-cfg head`` for its own later calls; restarts as the budgets count them; ``describe``."""

from __future__ import annotations

import http.server
import json
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
from conftest import Cluster, wait_for
from torchx.components.utils import sh
from torchx.specs import AppDef, AppState, Resource, Role, UnknownAppException

from ftdrive import Client, HeadUnreachableError, Job, JobSpec
from ftdrive.torchx_scheduler import create_scheduler


def torchx(
    cli: List[str],
    cluster: Cluster,
    *args: str,
    check: bool = True,
    timeout: float = 120,
    env: Optional[Dict[str, str]] = None,
    cwd: Optional[Path] = None,
) -> "subprocess.CompletedProcess[str]":
    """``torchx ARGS`` as a user of ``cluster`` runs it (``env``: another environment; ``cwd``:
    another directory than the agents' work dir)."""
    try:
        done = subprocess.run(
            [*cli, *args],
            cwd=cluster.work if cwd is None else cwd,
            env=cluster.user_env() if env is None else env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"torchx {' '.join(args)} was still running after {timeout:.0f} s:\n{e.stderr!r}") from e
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


def unknown_app(cluster: Cluster) -> str:
    """A job id the head has not handed out."""
    numbers = [int(job.id.lstrip("j")) for job in cluster.client().jobs()]
    return f"j{max(numbers, default=0) + 1000}"


def test_log_of_an_app_the_head_does_not_know_ends_saying_how_to_list_apps(
    cluster: Cluster, torchx_cli: List[str]
) -> None:
    app_id = unknown_app(cluster)
    for handle in (f"ftdrive://torchx/{app_id}", f"ftdrive://torchx/{app_id}/sh/0"):
        done = torchx(torchx_cli, cluster, "log", handle, check=False, timeout=30)
        assert done.returncode != 0, f"{handle}:\n{done.stdout}\n{done.stderr}"
        assert f"has no app {app_id}" in done.stderr, done.stderr
        assert "`torchx list -s ftdrive` or `ftdrive status`" in done.stderr, done.stderr

    scheduler = create_scheduler("torchx", client=cluster.client())
    for tail in (False, True):
        with pytest.raises(UnknownAppException, match=f"has no app {app_id} .*torchx list -s ftdrive"):
            scheduler.log_iter(app_id, "sh", should_tail=tail)
    assert scheduler.describe(app_id) is None  # torchx's answer for an app that does not exist
    with pytest.raises(UnknownAppException, match=f"has no app {app_id} "):
        scheduler.describe(app_id)  # asked again, as torchx log does while it waits for the app to start


def test_cancel_of_an_app_the_head_does_not_know_says_so(cluster: Cluster, torchx_cli: List[str]) -> None:
    app_id = unknown_app(cluster)
    done = torchx(torchx_cli, cluster, "cancel", f"ftdrive://torchx/{app_id}", check=False)
    assert f"has no app {app_id}" in done.stderr, done.stderr
    assert "`torchx list -s ftdrive` or `ftdrive status`" in done.stderr, done.stderr
    assert app_id not in {job.id for job in cluster.client().jobs()}


def test_log_of_a_role_the_app_does_not_know_names_the_apps_role(cluster: Cluster, torchx_cli: List[str]) -> None:
    """The app's one role answers to any name (the component's own may differ from the job's,
    and another process cannot know it), with a warning naming the role."""
    handle = launch(torchx_cli, cluster, "--wait", "utils.sh", "echo", "hello from sh")
    job_id = job_of(handle)
    right = torchx(torchx_cli, cluster, "log", f"{handle}/sh/0")
    assert "hello from sh" in right.stdout and "has one role" not in right.stderr, right.stderr

    done = torchx(torchx_cli, cluster, "log", f"{handle}/wrongrole/0")
    assert f"app {job_id} has one role, named 'sh' here; showing its logs for 'wrongrole'" in done.stderr, done.stderr
    assert "hello from sh" in done.stdout, done.stdout


def test_log_takes_the_role_name_an_app_was_submitted_with(cluster: Cluster) -> None:
    """The job is named after the app; ``torchx run --log`` asks for the role's own name."""
    scheduler = create_scheduler("torchx", client=cluster.client())
    app = sh("echo", "renamed")
    app.name = "greeting"
    app_id = scheduler.submit(app, {"cwd": str(cluster.work)})
    job = cluster.wait_job(app_id, "it ends", lambda j: j.is_terminal)
    assert (job.state, job.name) == ("SUCCEEDED", "greeting"), job
    for role in ("sh", "greeting"):
        assert "renamed" in "".join(scheduler.log_iter(app_id, role)), role


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
    assert "Num Restarts: 1\n" in status, "the second failure found the budget exhausted: no restart"
    # The root cause at app level, as torchx's own schedulers give it: the end that failed it.
    described = create_scheduler("torchx", client=cluster.client()).describe(job_of(handle))
    assert described is not None
    root = json.loads(described.structured_error_msg)["message"]
    assert root["message"].startswith(f"{job.id}/0 attempt 2: user_error (charged to user): "), root
    assert root["errorCode"] == 1, root
    log = torchx(torchx_cli, cluster, "log", handle).stdout
    assert "failing on purpose, attempt 1" in log and "failing on purpose, attempt 2" in log, log


def test_run_log_rides_out_a_head_restart(cluster: Cluster, torchx_cli: List[str]) -> None:
    gate = cluster.work / "restart-gate"
    before = {j.id for j in cluster.client().jobs()}
    args = ["run", "-s", "ftdrive", "--log", "dist.ddp", "-j", "1x1", "--script", "gated.py", "--", str(gate)]
    waiting = subprocess.Popen(
        [*torchx_cli, *args],
        cwd=cluster.work,
        env=cluster.user_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        client = cluster.client()
        job_id = wait_for("torchx submitted the app", lambda: next(iter({j.id for j in client.jobs()} - before), None))
        cluster.wait_job(job_id, "it runs", lambda j: [a.state for a in j.actors] == ["RUNNING"])
        cluster.kill_head()
        gate.touch()  # the app ends while the head is away
        restarter = threading.Timer(1.5, cluster.restart_head)
        restarter.start()
        try:
            output, _ = waiting.communicate(timeout=90)
        finally:
            restarter.join()
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    assert waiting.returncode == 0, output
    assert "SUCCEEDED" in output, output
    logged = re.findall(r"gated/0 .*(line \d)", output)
    assert logged == [f"line {i}" for i in range(6)], output  # the log followed through the restart, once
    job = cluster.client().status(job_id)
    assert [(e.cause, e.attempt, e.cycle) for e in job.ledger] == [("completed", 1, 1)], job.ledger
    running = set(cluster.nodes)  # agents of earlier tests that were stopped stay listed, DEAD
    wait_for("every agent is back", lambda: all(n.state == "ALIVE" for n in client.nodes() if n.name in running))


class _NoSuchJob(http.server.BaseHTTPRequestHandler):
    """A head that knows no job: every request is answered 404."""

    def do_GET(self) -> None:
        body = b'{"error": "no job j7"}'
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_describe_is_unknown_only_for_an_app_answered_before_and_only_for_a_while() -> None:
    server = http.server.HTTPServer(("127.0.0.1", 0), _NoSuchJob)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    client = Client(head=f"http://127.0.0.1:{server.server_port}", token="t", timeout=5)
    patient = create_scheduler("s", client=client)
    impatient = create_scheduler("s", client=client, head_return_timeout=0)
    assert patient.describe("j7") is None and impatient.describe("j7") is None  # both were answered
    server.shutdown()
    server.server_close()
    serving.join()

    away = patient.describe("j7")
    assert away is not None and away.state == AppState.UNKNOWN, away
    assert "lost the head" in away.msg and "runs on" in away.msg, away.msg
    with pytest.raises(HeadUnreachableError, match="did not come back within 0 s"):
        impatient.describe("j7")
    with pytest.raises(HeadUnreachableError, match="cannot reach the head"):
        patient.describe("j8")  # never answered here: a wrong head looks the same


def test_run_with_a_cfg_head_alone_follows_its_app_at_that_head(
    cluster: Cluster, torchx_cli: List[str], tmp_path: Path
) -> None:
    """With no $FTDRIVE_HEAD, ``-cfg head=URL`` is the head of the run's own calls after the
    submission (the status it prints, ``--log``, ``--wait``), which torchx makes without the run
    options; a later command is told every way to give the head."""
    env = {key: value for key, value in cluster.user_env().items() if key != "FTDRIVE_HEAD"}
    done = torchx(
        torchx_cli, cluster, "run", "-s", "ftdrive", "-cfg", f"head={cluster.url}", "--log",
        "dist.ddp", "-j", "1x1", "--script", "check_env.py", "--", "1", "1", "cfg-head",
        env=env,
    )  # fmt: skip
    handle = [line for line in done.stdout.splitlines() if line.startswith("ftdrive://")][-1]
    assert "args=cfg-head" in done.stderr and "Job finished: SUCCEEDED" in done.stderr, done.stderr
    assert cluster.client().status(job_of(handle)).state == "SUCCEEDED"

    headless = torchx(torchx_cli, cluster, "status", handle, check=False, env=env)
    assert headless.returncode != 0
    for how in ("`torchx run` takes `-cfg head=", "[ftdrive] section of .torchxconfig", "$FTDRIVE_HEAD"):
        assert how in headless.stderr, headless.stderr
    assert "head='" not in headless.stderr, "a torchx user has no Python argument to pass"

    config = tmp_path / "torchxconfig"
    config.write_text(f"[ftdrive]\nhead = {cluster.url}\n")
    configured = torchx(torchx_cli, cluster, "status", handle, env={**env, "TORCHXCONFIG": str(config)})
    assert "SUCCEEDED" in configured.stdout, configured.stdout


def test_num_restarts_counts_the_restarts_charged_to_retry_budgets(cluster: Cluster, torchx_cli: List[str]) -> None:
    """A replica restarted on its own (``restart: actor``, one cycle) after a failure: 1."""
    handle = launch(
        torchx_cli, cluster, "-cfg", "restart=actor", "--wait", "dist.ddp", "-j", "1x1", "--max_retries", "2",
        "--script", "fail_once.py",
    )  # fmt: skip
    job = cluster.client().status(job_of(handle))
    assert [(e.cause, e.budget) for e in job.ledger] == [("user_error", "user"), ("completed", "none")], job.ledger
    assert (job.state, job.cycles) == ("SUCCEEDED", 1), job
    status = torchx(torchx_cli, cluster, "status", handle).stdout
    assert "Num Restarts: 1\n" in status, status


def test_an_elastic_job_growing_is_no_restart(cluster: Cluster) -> None:
    """Growing re-forms the gang (a new cycle, its ranks stopped as ``membership_change``) at
    no budget's cost: 0 restarts."""
    client = cluster.client()
    sleeper = [sys.executable, str(cluster.work / "sleep.py")]
    whole_node = {"cpu": 4}
    others = len(cluster.nodes) - 1
    holder = client.submit(
        JobSpec(name="holds", command=sleeper, min_nodes=others, max_nodes=others, bundle=whole_node)
    )
    try:
        cluster.wait_job(holder.id, "it runs", lambda j: [a.state for a in j.actors] == ["RUNNING"] * others)
        spec = JobSpec(
            name="grows", command=sleeper, min_nodes=1, max_nodes=2, bundle=whole_node, scale_up_delay_ms=100
        )
        grows = client.submit(spec).id
        try:
            cluster.wait_job(grows, "it runs on one node", lambda j: "RUNNING" in [a.state for a in j.actors])
            client.stop(holder.id)
            job = cluster.wait_job(
                grows,
                "it grew to two nodes",
                lambda j: j.cycles == 2 and [a.state for a in j.actors] == ["RUNNING"] * 2,
            )
            assert {(e.cause, e.budget) for e in job.ledger} == {("membership_change", "none")}, job.ledger
            described = create_scheduler("torchx", client=client).describe(grows)
            assert described is not None and described.num_restarts == 0, described
        finally:
            client.stop(grows)
    finally:
        client.stop(holder.id)


def test_a_succeeded_elastic_app_shows_only_the_replicas_that_ran(cluster: Cluster) -> None:
    """Ranks beyond the nodes an elastic app got never ran; the head ends them STOPPED, which
    torchx would show as cancelled replicas of an app that succeeded."""
    client = cluster.client()
    nodes = len(cluster.nodes)
    job = client.submit(JobSpec(name="fewer", command=["true"], min_nodes=1, max_nodes=nodes + 1))
    ended = cluster.wait_job(job.id, "it succeeds", lambda j: j.state == "SUCCEEDED")
    assert any(a.attempt == 0 for a in ended.actors), "one rank found no node"
    described = create_scheduler("torchx", client=client).describe(job.id)
    assert described is not None and described.state == AppState.SUCCEEDED, described
    replicas = described.roles_statuses[0].replicas
    assert replicas and {r.state for r in replicas} == {AppState.SUCCEEDED}, replicas
    assert len(replicas) == sum(1 for a in ended.actors if a.attempt > 0), replicas


def test_describe_fills_the_role_from_the_job(cluster: Cluster, torchx_cli: List[str]) -> None:
    """``torchx describe`` in another process: replicas, resources and the retries the app was
    given (one of them used) from the head."""
    handle = launch(
        torchx_cli, cluster, "--wait", "dist.ddp", "-j", "1x1", "--max_retries", "2", "--cpu", "1", "--memMB", "512",
        "--script", "fail_once.py",
    )  # fmt: skip
    job = cluster.client().status(job_of(handle))
    assert job.state == "SUCCEEDED" and job.remaining.user == 1, job
    described = torchx(torchx_cli, cluster, "describe", handle).stdout
    for field_, value in [
        ("name", "'fail_once'"), ("num_replicas", "1"), ("min_replicas", "1"), ("max_retries", "2"),
        ("cpu", "1"), ("gpu", "0"), ("memMB", "512"),
    ]:  # fmt: skip
        assert re.search(rf"'{field_}': {value}(?!\w)", described), f"{field_} is not {value}:\n{described}"
    spec = job.raw["spec"]
    assert f"'entrypoint': '{spec['command'][0]}'" in described, described
    assert "fail_once.py" in described and "<MISSING>" not in described, described
    assert "RetryPolicy.APPLICATION" in described, described


def handle_in(done: "subprocess.CompletedProcess[str]") -> str:
    handles = [line for line in done.stdout.splitlines() if line.startswith("ftdrive://")]
    assert handles, f"no app handle in:\n{done.stdout}\n{done.stderr}"
    return handles[-1]


def test_a_program_that_cannot_start_fails_the_app_at_once_naming_it(cluster: Cluster, torchx_cli: List[str]) -> None:
    """torchx's ``${app_id}`` puts every app under a ``/bin/sh`` prologue, whose ``exec`` of a
    missing program would exit 127 as a user error, retried; the prologue names the program,
    and 126/127 are non-retryable for a torchx app."""
    done = torchx(
        torchx_cli, cluster, "run", "-s", "ftdrive", "-cfg", "python=no_such_program_xyz", "--wait",
        "dist.ddp", "-j", "1x1", "--max_retries", "2", "--script", "check_env.py",
        check=False,
    )  # fmt: skip
    assert done.returncode != 0, done.stderr
    job = cluster.client().status(job_of(handle_in(done)))
    assert job.state == "FAILED", job
    said = "cannot start `no_such_program_xyz`: not found on the PATH of this node"
    assert [(e.cause, e.exit_code, e.charged) for e in job.ledger] == [("non_retryable", 127, False)], job.ledger
    assert said in job.ledger[0].evidence and job.remaining.user == 2, job.ledger
    status = torchx(torchx_cli, cluster, "status", handle_in(done)).stdout
    assert said in status and "Num Restarts: 0\n" in status, status


def test_a_relative_cwd_is_taken_from_where_torchx_runs(cluster: Cluster, torchx_cli: List[str]) -> None:
    """As the default (the directory ``torchx run`` runs in), not from the agents' work dir."""
    here = cluster.work / "torchx-here"
    (here / "inner").mkdir(parents=True)
    run = ["run", "-s", "ftdrive", "-cfg", "cwd=inner", "--wait", "utils.sh", "pwd"]
    done = torchx(torchx_cli, cluster, *run, cwd=here)
    handle = handle_in(done)
    assert cluster.client().status(job_of(handle)).state == "SUCCEEDED", done.stderr
    assert f"{here / 'inner'}\n" in torchx(torchx_cli, cluster, "log", f"{handle}/sh/0").stdout


def test_run_mistakes_are_told_in_torchx_terms(cluster: Cluster, torchx_cli: List[str]) -> None:
    """A role the head would refuse, a missing ``-cfg cwd`` and an unreachable ``-cfg head``
    are named as the torchx user gave them, not as job spec fields or Python arguments."""
    for args, said in [
        (["dist.ddp", "-j", "3:2x1", "--script", "check_env.py"], "torchrun --nnodes 3:2 (dist.ddp: -j 3:2xN)"),
        (["utils.sh", "--max_retries", "-2", "true"], "role sh: max_retries is -2; give 0 to 1,000,000 (-1: no limit)"),
        (["dist.ddp", "-j", "1x1", "--memMB", "-5", "--script", "check_env.py"], "resource memMB is -5"),
    ]:
        done = torchx(torchx_cli, cluster, "run", "-s", "ftdrive", "--dryrun", *args, check=False)
        assert done.returncode != 0 and said in done.stderr, done.stderr
        assert "job spec field" not in done.stderr and "retries.user" not in done.stderr, done.stderr

    run = ["run", "-s", "ftdrive", "-cfg", "cwd=/nonexistent-xyz", "--wait", "utils.sh", "true"]
    done = torchx(torchx_cli, cluster, *run, check=False)
    status = torchx(torchx_cli, cluster, "status", handle_in(done)).stdout
    assert "FAILED" in status and "/nonexistent-xyz is not a directory" in status, status
    assert "give `-cfg cwd=DIR` one that exists on every node (default: the directory `torchx run` ran in)" in status
    assert "job spec's `cwd`" not in status, status

    env = {key: value for key, value in cluster.user_env().items() if key != "FTDRIVE_HEAD"}
    done = torchx(
        torchx_cli, cluster, "run", "-s", "ftdrive", "-cfg", "head=127.0.0.1:45733", "utils.sh", "true",
        check=False, env=env,
    )  # fmt: skip
    assert done.returncode != 0
    assert "cannot reach the head at http://127.0.0.1:45733" in done.stderr, done.stderr
    assert "the address came from -cfg head; give the head's address" in done.stderr, done.stderr
    assert "pass head=" not in done.stderr, done.stderr

    # A refused token: the state dir is named as a torchx user gives it (no state_dir= there).
    bad_token = {**cluster.user_env(), "FTDRIVE_TOKEN": "bad"}
    done = torchx(torchx_cli, cluster, "status", "ftdrive://torchx/j1", check=False, env=bad_token)
    assert done.returncode != 0 and "refused the token from $FTDRIVE_TOKEN" in done.stderr, done.stderr
    assert "from the state dir ($FTDRIVE_STATE_DIR, else ~/.ftdrive)" in done.stderr, done.stderr
    assert "state_dir=" not in done.stderr, done.stderr


def test_log_of_a_replica_that_never_started_says_why(cluster: Cluster, torchx_cli: List[str]) -> None:
    handle = launch(torchx_cli, cluster, "utils.sh", "--cpu", "64", "true")
    job_id = job_of(handle)
    try:
        cluster.wait_job(job_id, "it is infeasible", lambda j: j.infeasible is not None)
        done = torchx(torchx_cli, cluster, "log", f"{handle}/sh/0")
        said = f"[ftdrive] actor {job_id}/0 has not started an attempt yet (the job is PENDING: "
        assert said in done.stdout, done.stdout
    finally:
        cluster.client().stop(job_id)
    cluster.wait_job(job_id, "it is stopped", lambda j: j.is_terminal)
    done = torchx(torchx_cli, cluster, "log", f"{handle}/sh/0")
    assert f"actor {job_id}/0 has not started an attempt, and the job ended STOPPED" in done.stdout, done.stdout
    # Never started in a cancelled app: why, rather than torchx's "(no reply file)".
    status = torchx(torchx_cli, cluster, "status", handle).stdout
    assert f"{job_id}/0 never started: the app was CANCELLED before it was placed (stopped by the user)" in status
    assert "no reply file" not in status, status


def test_replicas_stopped_with_their_gang_in_a_failed_app_are_failed(cluster: Cluster) -> None:
    """As Kubernetes shows the pods it killed when one task failed: FAILED, not CANCELLED."""
    client = cluster.client()
    script = 'case "$FTDRIVE_ACTOR" in */0) sleep 1; exit 3;; *) exec sleep 60;; esac'
    job_id = client.submit(JobSpec(name="gang", command=["sh", "-c", script], min_nodes=2, max_nodes=2)).id
    job = client.wait(job_id, timeout=45)
    assert job.state == "FAILED" and [a.state for a in job.actors] == ["FAILED", "STOPPED"], job
    described = create_scheduler("torchx", client=client).describe(job_id)
    assert described is not None and described.state == AppState.FAILED
    replicas = sorted(described.roles_statuses[0].replicas, key=lambda r: r.id)
    assert [r.state for r in replicas] == [AppState.FAILED, AppState.FAILED], replicas
    peer = json.loads(replicas[1].structured_error_msg)["message"]["message"]
    assert peer.startswith(f"{job_id}/1 attempt 1: collateral"), peer


def test_capabilities_are_asked_for_and_described_back(cluster: Cluster) -> None:
    """A numeric capability is a resource the bundle asks for, which no agent here offers: the
    app waits, saying so; ``describe`` gives the capabilities back."""
    client = cluster.client()
    role = Role(name="w", image="", entrypoint="true")
    role.resource = Resource(cpu=1, gpu=0, memMB=0, capabilities={"widget": 2, "zone": "a"})
    scheduler = create_scheduler("torchx", client=client)
    app_id = scheduler.submit(AppDef(name="w", roles=[role]), {"cwd": str(cluster.work)})
    try:
        job = cluster.wait_job(app_id, "it is infeasible", lambda j: j.infeasible is not None)
        assert "widget" in (job.infeasible or "") or "zone" in (job.infeasible or ""), job.infeasible
        described = scheduler.describe(app_id)
        assert described is not None and described.roles[0].resource.capabilities == {"widget": 2, "zone": "a"}
    finally:
        client.stop(app_id)
