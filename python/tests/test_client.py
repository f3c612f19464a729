"""The client against a real head and agents: every call, credentials as the CLI finds them,
and bad input answered with the head's own message while nothing changes."""

from __future__ import annotations

import re
import shutil
import signal
import socket
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import List, Optional

import pytest
from conftest import WAIT_S, Cluster, wait_for

from ftdrive import (
    ApiError,
    ArgumentError,
    Backoff,
    Client,
    ConfigError,
    Event,
    HeadUnreachableError,
    JobSpec,
    Retries,
    Suspect,
)
from ftdrive.client import _lines
from ftdrive.connection import head_url
from ftdrive.models import LogChunk


def check_env_spec(cluster: Cluster, name: str, nodes: int = 3, nproc: int = 2) -> JobSpec:
    script = str(cluster.work / "check_env.py")
    return JobSpec(
        name=name,
        command=[sys.executable, "-u", script, str(nodes * nproc), str(nproc)],
        min_nodes=nodes,
        max_nodes=nodes,
        nproc_per_node=nproc,
        bundle={"cpu": 1, "memory_mb": 256},
    )


def test_health_and_nodes(cluster: Cluster) -> None:
    client = cluster.client()
    health = client.health()
    assert health.recovering is False
    assert health.nodes >= 3 and health.alive_nodes >= 3, health
    nodes = {n.name: n for n in client.nodes()}
    assert {"n1", "n2", "n3"} <= set(nodes)
    n1 = nodes["n1"]
    assert (n1.state, n1.resources, n1.addr) == ("ALIVE", {"cpu": 4, "memory_mb": 8192}, "127.0.0.1")
    assert isinstance(n1.ports_left, int) and n1.ports_left > 0, "a rendezvous port for each bundle it may take"
    assert client.node("n1") == n1
    with pytest.raises(ApiError) as unknown:
        client.node("n99")
    assert unknown.value.status == 404 and "knows no node `n99`" in str(unknown.value)


def test_submit_a_jobspec_and_read_status_ledger_and_jobs(cluster: Cluster) -> None:
    client = cluster.client()
    submitted = client.submit(check_env_spec(cluster, "client-check"))
    assert submitted.id and submitted.name == "client-check" and submitted.nproc_per_node == 2
    job = client.wait(submitted.id, timeout=45)
    assert job.state == "SUCCEEDED", job
    assert [a.state for a in job.actors] == ["TASK_COMPLETED"] * 3
    assert sorted(a.rank for a in job.actors if a.rank is not None) == [0, 1, 2]
    rank0 = next(a for a in job.actors if a.rank == 0)
    assert job.rendezvous is not None and job.rendezvous.node == rank0.node, job.rendezvous
    assert job.rendezvous.port >= 29500, job.rendezvous
    assert len(job.ledger) == 3
    for entry in job.ledger:
        assert (entry.cause, entry.budget, entry.exit_code, entry.charged) == ("completed", "none", 0, False)
        assert entry.remaining.user == 0 and entry.remaining.system == 3 and entry.remaining.preemption == -1
    assert job.placement_groups[0].state == "REMOVED"
    assert submitted.id in [j.id for j in client.jobs()]
    assert submitted.id in [j.id for j in client.jobs(states=["SUCCEEDED"])]
    assert submitted.id not in [j.id for j in client.jobs(states=["PENDING", "RUNNING"])]
    newest = client.jobs(limit=1)
    assert len(newest) == 1 and newest[0].id == client.jobs()[-1].id
    with pytest.raises(ApiError) as unknown:
        client.jobs(states=["DONE"])
    assert unknown.value.status == 400 and "DONE" in unknown.value.message


def test_submit_a_dict_spec(cluster: Cluster) -> None:
    client = cluster.client()
    spec = {
        "name": "dict-spec",
        "command": [sys.executable, "-c", "print('from a dict')"],
        "min_nodes": 1,
        "max_nodes": 1,
    }
    job = client.wait(client.submit(spec).id, timeout=45)
    assert job.state == "SUCCEEDED", job
    assert "".join(client.logs(job.id, 0)) == "from a dict\n"


def test_logs_of_every_worker_or_one(cluster: Cluster) -> None:
    client = cluster.client()
    job = client.wait(client.submit(check_env_spec(cluster, "client-logs", nodes=1, nproc=2)).id, timeout=45)
    assert job.state == "SUCCEEDED", job
    both = list(client.logs(job.id, 0))
    assert sorted(line.split(" ")[0] for line in both) == ["[rank0]:", "[rank1]:"], both
    assert all(line.endswith("\n") for line in both)
    one = list(client.logs(job.id, 0, local_rank=1, attempt=1))
    assert len(one) == 1 and one[0].startswith("check ok rank=1 local_rank=1 world=2"), one
    chunk = client.log_chunk(job.id, 0)
    assert (chunk.attempt, chunk.running, chunk.next_offset) == (1, False, len(chunk.data))
    with pytest.raises(ApiError) as missing:
        list(client.logs(job.id, 0, attempt=7))
    assert missing.value.status == 404 and "no attempt 7" in missing.value.message
    # By global rank: one node of two workers holds ranks 0 and 1.
    assert list(client.logs(job.id, rank=1)) == one
    by_rank = client.log_chunk(job.id, rank=1)
    assert (by_rank.actor, by_rank.attempt, by_rank.local_rank) == (0, 1, 1), by_rank
    with pytest.raises(ApiError) as beyond:
        client.log_chunk(job.id, rank=2)
    assert beyond.value.status == 400 and f"rank 2: {job.id} has ranks 0 to 1" in beyond.value.message


def test_logs_follow_a_running_attempt(cluster: Cluster, tmp_path: Path) -> None:
    client = cluster.client()
    gate = tmp_path / "gate"
    script = str(cluster.work / "gated.py")
    spec = JobSpec(name="follow", command=[sys.executable, "-u", script, str(gate)], min_nodes=1, max_nodes=1)
    job_id = client.submit(spec).id
    runs = cluster.wait_job(job_id, "its actor runs", lambda j: j.actors[0].state == "RUNNING" and not j.actors[0].starting)
    assert runs.raw["actors"][0]["starting"] is False, runs.raw
    lines = client.logs(job_id, 0, follow=True, poll_interval=0.1)
    assert next(lines) == "line 0\n"
    # The job waits for the gate: the first line came while it was running.
    assert client.status(job_id).state == "RUNNING"
    gate.touch()
    assert list(lines) == [f"line {i}\n" for i in range(1, 6)]
    assert client.wait(job_id, timeout=30).state == "SUCCEEDED"


def test_logs_tail_the_last_lines_and_follow_on_from_them(cluster: Cluster, tmp_path: Path) -> None:
    client = cluster.client()
    printer = [sys.executable, "-c", "for i in range(10): print('line', i)"]
    done = client.wait(client.submit(JobSpec(name="tail", command=printer, min_nodes=1, max_nodes=1)).id, timeout=45)
    assert done.state == "SUCCEEDED", done
    assert list(client.logs(done.id, 0, tail=3)) == ["line 7\n", "line 8\n", "line 9\n"]
    end = client.log_chunk(done.id, 0, tail=0)
    assert (end.data, end.next_offset) == (b"", sum(len(f"line {i}\n") for i in range(10)))
    gate = tmp_path / "gate"
    script = str(cluster.work / "gated.py")
    spec = JobSpec(name="tail-follow", command=[sys.executable, "-u", script, str(gate)], min_nodes=1, max_nodes=1)
    job_id = client.submit(spec).id
    cluster.wait_job(job_id, "its actor runs", lambda j: j.actors[0].state == "RUNNING")
    wait_for("its first line is written", lambda: list(client.logs(job_id, 0, tail=1)) == ["line 0\n"])
    lines = client.logs(job_id, 0, follow=True, poll_interval=0.1, tail=1)
    assert next(lines) == "line 0\n"
    gate.touch()
    assert list(lines) == [f"line {i}\n" for i in range(1, 6)]


def test_events_of_a_job_start_with_a_snapshot_and_end_with_it(cluster: Cluster, tmp_path: Path) -> None:
    client = cluster.client()
    gate = tmp_path / "gate"
    command = [sys.executable, "-u", str(cluster.work / "gated.py"), str(gate)]
    job_id = client.submit(JobSpec(name="events", command=command, min_nodes=2, max_nodes=2)).id
    stream = client.events(job_id, idle_timeout=30)
    first = next(stream)
    assert first.event == "snapshot" and first.job is not None and first.job.id == job_id
    assert not first.job.is_terminal, "the job waits for the gate"
    gate.touch()
    events: List[Event] = [first, *stream]
    tags = [e.event for e in events]
    assert "ledger" in tags and "job_state" in tags, tags
    ledger = [e.entry for e in events if e.entry is not None]
    assert sorted((entry.actor, entry.cause) for entry in ledger) == [
        (f"{job_id}/0", "completed"),
        (f"{job_id}/1", "completed"),
    ]
    final = [e for e in events if e.event == "job_state"][-1]
    assert final.data["to"] == "SUCCEEDED" and final.job_id == job_id
    assert events[-1].event == "snapshot" and events[-1].job is not None and events[-1].job.state == "SUCCEEDED"
    # Without follow: only what the head has ready (the snapshot of a finished job).
    assert [e.event for e in client.events(job_id, follow=False)] == ["snapshot"]


def test_a_quiet_job_is_followed_past_the_request_timeout_and_idle_timeout_is_kept(
    cluster: Cluster, tmp_path: Path
) -> None:
    # The head closes the connection after an event stream, and the client must time the
    # stream on the response's own socket: it ended after the request timeout, as if the job
    # had, and an idle_timeout shorter than the request timeout was not kept.
    gate = tmp_path / "gate"
    command = [sys.executable, "-u", str(cluster.work / "gated.py"), str(gate)]
    quick = cluster.client(timeout=1.0)
    job_id = quick.submit(JobSpec(name="quiet", command=command, min_nodes=1, max_nodes=1)).id
    # Its start confirmed (a `start_confirmed` event), so that nothing more is said meanwhile.
    cluster.wait_job(job_id, "it runs", lambda j: j.actors[0].state == "RUNNING" and not j.actors[0].starting)
    # From here it is quiet until the gate opens, after both timeouts.
    opener = threading.Timer(3.0, gate.touch)
    opener.start()
    try:
        early = [e.event for e in cluster.client().events(job_id, idle_timeout=0.5)]
        assert early == ["snapshot"], f"the idle timeout was not kept: {early}"
        events = list(quick.events(job_id))
    finally:
        opener.cancel()
    last = events[-1]
    assert last.event == "snapshot" and last.job is not None and last.job.state == "SUCCEEDED", [
        e.event for e in events
    ]


def test_a_silent_head_is_told_from_a_quiet_one(tmp_path: Path) -> None:
    # A quiet head sends a keep-alive line, which is not an event: idle_timeout still ends a
    # stream with no event. A stopped head (SIGSTOP: its connections stay open) sends nothing,
    # and its stream raises instead of waiting for ever.
    head = Cluster(tmp_path)
    try:
        head.start_head(extra=["--events-keepalive-ms", "200"])
        assert head.head is not None
        client = head.client()
        found: List[List[Event]] = []
        reader = threading.Thread(target=lambda: found.append(list(client.events(idle_timeout=1.0))), daemon=True)
        reader.start()
        reader.join(WAIT_S)
        assert found == [[]], "keep-alives were taken for events: idle_timeout was not kept"
        stream = client.events()
        head.head.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(HeadUnreachableError, match="sent nothing for 0.6 s"):
                next(stream)
        finally:
            head.head.send_signal(signal.SIGCONT)
    finally:
        head.stop()


def test_events_of_the_cluster(cluster: Cluster) -> None:
    client = cluster.client()
    # Open before the submission: the cluster's stream has no backlog.
    stream = client.events(idle_timeout=20)
    job_id = client.submit(JobSpec(name="cluster-events", command=["true"], min_nodes=1, max_nodes=1)).id
    seen: List[Event] = []
    for event in stream:
        seen.append(event)
        if event.event == "job_state" and event.job_id == job_id and event.data.get("to") == "SUCCEEDED":
            break
    stream.close()
    tags = [(e.event, e.job_id) for e in seen]
    assert ("job_submitted", job_id) in tags, tags
    assert ("job_state", job_id) in tags, tags
    with pytest.raises(ApiError) as unknown:
        client.events("j999999")
    assert unknown.value.status == 404


def test_stop_a_running_job(cluster: Cluster) -> None:
    client = cluster.client()
    spec = JobSpec(name="to-stop", command=[sys.executable, str(cluster.work / "sleep.py")], min_nodes=2, max_nodes=2)
    job_id = client.submit(spec).id
    running = cluster.wait_job(job_id, "both actors run", lambda j: [a.state for a in j.actors] == ["RUNNING"] * 2)
    bundles = running.placement_groups[0].bundles
    assert running.rendezvous is not None and running.rendezvous.port in [b.port for b in bundles], bundles
    answered = client.stop(job_id)
    assert answered.id == job_id
    job = client.wait(job_id, timeout=30)
    assert job.state == "STOPPED", job
    assert {a.state for a in job.actors} == {"STOPPED"}
    assert {(e.cause, e.budget) for e in job.ledger} == {("stopped", "none")}, job.ledger


def test_a_job_backing_off_says_when_it_restarts(cluster: Cluster) -> None:
    client = cluster.client()
    backoff = Backoff(initial=60_000, max=60_000)
    for restart in ("gang", "actor"):
        spec = JobSpec(
            name=f"backoff-{restart}",
            command=["sh", "-c", "exit 3"],
            min_nodes=1,
            max_nodes=1,
            restart=restart,
            retries=Retries(user=3, backoff_ms=backoff),
        )
        job_id = client.submit(spec).id
        job = cluster.wait_job(job_id, "it backs off", lambda j: j.restart_at_ms or j.actors[0].restart_at_ms)
        at = job.restart_at_ms if restart == "gang" else job.actors[0].restart_at_ms
        failed_ms = job.ledger[0].end_ms
        # Half to all of the 60 s backoff, from when the head heard of the end (a moment later).
        assert at is not None and 30_000 <= at - failed_ms <= 65_000, (restart, at, failed_ms)
        assert (job.restart_at_ms is None) == (restart == "actor"), job.raw
        client.stop(job_id)
        stopped = client.wait(job_id, timeout=30)
        assert stopped.restart_at_ms is None and stopped.actors[0].restart_at_ms is None, stopped.raw


def test_a_job_waiting_for_room_says_which_job_holds_it(cluster: Cluster) -> None:
    client = cluster.client()
    whole_nodes = {"cpu": 4}
    sleeper = [sys.executable, str(cluster.work / "sleep.py")]
    holder = client.submit(JobSpec(name="holds-n", command=sleeper, min_nodes=3, max_nodes=3, bundle=whole_nodes)).id
    try:
        cluster.wait_job(holder, "it runs", lambda j: [a.state for a in j.actors] == ["RUNNING"] * 3)
        waiter = client.submit(JobSpec(name="waits", command=sleeper, min_nodes=1, max_nodes=1, bundle=whole_nodes))
        try:
            job = client.status(waiter.id)
            assert job.state == "PENDING" and job.infeasible is None, job
            assert job.waiting is not None and job.waiting.startswith("waiting for capacity: needs 1 node"), job.waiting
            assert job.waiting.endswith(f"in use by {holder}"), job.waiting
        finally:
            client.stop(waiter.id)
    finally:
        client.stop(holder)
    assert client.wait(holder, timeout=30).waiting is None


def test_wait_rides_out_a_head_restart(cluster: Cluster) -> None:
    client = cluster.client()
    spec = JobSpec(name="through-a-restart", command=["sleep", "3"], min_nodes=1, max_nodes=1)
    job_id = client.submit(spec).id
    cluster.wait_job(job_id, "it runs", lambda j: [a.state for a in j.actors] == ["RUNNING"])
    cluster.kill_head()
    restarter = threading.Timer(1.0, cluster.restart_head)
    restarter.start()
    try:
        job = client.wait(job_id, timeout=60, head_return_timeout=30)
    finally:
        restarter.join()
    assert job.state == "SUCCEEDED", job
    assert [(e.cause, e.attempt, e.cycle) for e in job.ledger] == [("completed", 1, 1)], job.ledger
    wait_for("every agent is back", lambda: all(n.state == "ALIVE" for n in client.nodes()))


def test_following_a_log_rides_out_a_head_restart(cluster: Cluster, tmp_path: Path) -> None:
    client = cluster.client()
    gate = tmp_path / "gate"
    command = [sys.executable, "-u", str(cluster.work / "gated.py"), str(gate)]
    spec = JobSpec(name="log-through-a-restart", command=command, min_nodes=1, max_nodes=1)
    job_id = client.submit(spec).id
    runs = cluster.wait_job(job_id, "its actor runs", lambda j: j.actors[0].state == "RUNNING" and not j.actors[0].starting)
    assert runs.raw["actors"][0]["starting"] is False, runs.raw
    lines = client.logs(job_id, 0, follow=True, poll_interval=0.1)
    assert next(lines) == "line 0\n"
    cluster.kill_head()
    gate.touch()  # the rest is written while the head is away
    restarter = threading.Timer(1.0, cluster.restart_head)
    restarter.start()
    try:
        rest = list(lines)
    finally:
        restarter.join()
    assert rest == [f"line {i}\n" for i in range(1, 6)], rest
    assert client.wait(job_id, timeout=30).state == "SUCCEEDED"
    wait_for("every agent is back", lambda: all(n.state == "ALIVE" for n in client.nodes()))


def test_a_stopping_head_ends_a_job_stream_with_an_error_not_an_end(cluster: Cluster) -> None:
    client = cluster.client()
    spec = JobSpec(name="through-a-stop", command=["sleep", "3"], min_nodes=1, max_nodes=1)
    job_id = client.submit(spec).id
    cluster.wait_job(job_id, "it runs", lambda j: [a.state for a in j.actors] == ["RUNNING"])
    stream = client.events(job_id, idle_timeout=30)
    assert next(stream).event == "snapshot"
    cluster.stop_head()
    with pytest.raises(HeadUnreachableError, match="ended the event stream"):
        list(stream)
    cluster.restart_head()
    job = client.wait(job_id, timeout=60)
    assert [(e.cause, e.attempt, e.cycle) for e in job.ledger] == [("completed", 1, 1)], job.ledger
    wait_for("every agent is back", lambda: all(n.state == "ALIVE" for n in client.nodes()))


def test_drain_and_undrain_a_node(cluster: Cluster) -> None:
    client = cluster.client()
    cluster.add_node("drained")
    try:
        answer = client.drain("drained", deadline_ms=60_000)
        assert (answer.node, answer.draining, answer.deadline_ms) == ("drained", True, 60_000)
        assert (answer.state, answer.cordoned, answer.leaving) == ("DRAINING", True, False)
        nodes = {n.name: n for n in client.nodes()}
        assert (nodes["drained"].state, nodes["drained"].cordoned) == ("DRAINING", True)
        assert (nodes["n1"].state, nodes["n1"].cordoned) == ("ALIVE", False)
        assert answer.lifted is None
        undone = client.undrain("drained")
        assert (undone.state, undone.draining, undone.cordoned, undone.deadline_ms) == ("ALIVE", False, False, None)
        assert undone.lifted is True
        assert client.undrain("drained").lifted is False, "nothing left to lift"
        assert {n.name: n.state for n in client.nodes()}["drained"] == "ALIVE"
    finally:
        cluster.kill_node("drained")
    with pytest.raises(ApiError) as unknown:
        client.drain("no-such-node")
    assert unknown.value.status == 404 and "no-such-node" in unknown.value.message
    with pytest.raises(ApiError) as unknown:
        client.undrain("no-such-node")
    assert unknown.value.status == 404 and "no-such-node" in unknown.value.message


def test_a_node_that_cannot_start_work_says_why(cluster: Cluster) -> None:
    client = cluster.client()
    cluster.add_node("full", labels="disk=full")
    try:
        wait_for("the node registers", lambda: "full" in {n.name for n in client.nodes()})
        attempts = Path(cluster.dir) / "node-full" / "attempts"
        shutil.rmtree(attempts, ignore_errors=True)
        attempts.write_text("a file where the directory goes")
        spec = JobSpec(name="on-full", command=["true"], min_nodes=1, max_nodes=1, node_selector={"disk": "full"})
        job_id = client.submit(spec).id
        wait_for("the node says why it takes no work", lambda: {n.name: n for n in client.nodes()}["full"].problem)
        problem = {n.name: n for n in client.nodes()}["full"].problem
        assert "attempts takes no write" in problem or "cannot start attempts" in problem, problem
        job = client.status(job_id)
        assert [(e.cause, e.budget) for e in job.ledger] == [("node_lost", "system")], job.ledger
        client.stop(job_id)
    finally:
        cluster.kill_node("full")


def test_a_node_whose_agent_is_gone_is_suspect_until_declared_dead(cluster: Cluster) -> None:
    client = cluster.client()
    cluster.add_node("cut")
    wait_for("cut joins", lambda: any(n.name == "cut" and n.suspect is None for n in client.nodes()))
    cluster.kill_node("cut")  # its connection drops: suspect at once, DEAD after the node timeout
    suspect = wait_for("cut is suspect", lambda: {n.name: n for n in client.nodes()}["cut"].suspect)
    assert suspect.link_lost and suspect.dead_in_ms <= 1000, suspect
    wait_for("cut is DEAD", lambda: {n.name: n.state for n in client.nodes()}["cut"] == "DEAD")
    assert {n.name: n for n in client.nodes()}["cut"].suspect is None, "a DEAD node is no longer suspect"
    client.forget("cut")


def test_a_lone_silent_node_is_held_not_declared_dead(tmp_path: Path) -> None:
    # The head hears from no node at all, so its own network is as likely at fault as the
    # node: it holds the node ALIVE (FD-1) past its node timeout (1 s here), and says so.
    lone = Cluster(tmp_path)
    try:
        lone.start_head()
        lone.add_node("only")
        client = lone.client()
        agent = lone.nodes["only"]
        agent.send_signal(signal.SIGSTOP)  # its connection stays open; no heartbeat is sent
        try:

            def held_past_the_timeout() -> Optional[Suspect]:
                node = {n.name: n for n in client.nodes()}["only"]
                assert node.state == "ALIVE", node
                return node.suspect if node.suspect and node.suspect.held and node.suspect.silent_ms > 2000 else None

            suspect = wait_for("the lone node is held", held_past_the_timeout)
            assert not suspect.link_lost and suspect.dead_in_ms > 1000, suspect
        finally:
            agent.send_signal(signal.SIGCONT)
        wait_for("it is heard again", lambda: {n.name: n for n in client.nodes()}["only"].suspect is None)
        assert {n.name: n.state for n in client.nodes()} == {"only": "ALIVE"}
    finally:
        lone.stop()


def test_forget_a_dead_node_but_never_a_live_one(cluster: Cluster) -> None:
    client = cluster.client()
    cluster.add_node("gone")
    wait_for("gone joins", lambda: any(n.name == "gone" for n in client.nodes()))
    with pytest.raises(ApiError) as live:
        client.forget("gone")
    assert live.value.status == 409 and "only a DEAD node can be forgotten" in live.value.message
    cluster.kill_node("gone")
    wait_for("gone is DEAD", lambda: {n.name: n.state for n in client.nodes()}.get("gone") == "DEAD")
    forgotten = client.forget("gone")
    assert (forgotten.name, forgotten.state, forgotten.raw.get("forgotten")) == ("gone", "DEAD", True)
    assert "gone" not in {n.name for n in client.nodes()}
    with pytest.raises(ApiError) as unknown:
        client.forget("gone")
    assert unknown.value.status == 404 and "gone" in unknown.value.message


@pytest.mark.parametrize(
    "spec, status, fragment",
    [
        ({"name": "bad", "command": ["true"], "min_nodes": 0, "max_nodes": 1}, 400, "job spec field `min_nodes`"),
        ({"name": "bad", "command": ["true"], "min_nodes": 3, "max_nodes": 2}, 400, "min_nodes <= max_nodes"),
        ({"name": "bad", "command": [], "min_nodes": 1, "max_nodes": 1}, 400, "`command`: is empty"),
        ({"name": "bad", "command": ["true"], "min_nodes": 1, "max_nodes": 1, "colour": 1}, 400, "unknown field"),
        (
            JobSpec(name="bad", command=["true"], min_nodes=1, max_nodes=1, retries=Retries(user=-2)),
            400,
            "retries.user",
        ),
    ],
)
def test_bad_input_is_refused_with_the_heads_message_and_changes_nothing(
    cluster: Cluster, spec: object, status: int, fragment: str
) -> None:
    client = cluster.client()
    before = [j.id for j in client.jobs()]
    with pytest.raises(ApiError) as refused:
        client.submit(spec)  # type: ignore[arg-type]
    assert refused.value.status == status
    assert fragment in refused.value.message, refused.value.message
    assert fragment in str(refused.value)
    assert [j.id for j in client.jobs()] == before


def test_a_negative_number_in_a_query_is_refused_saying_what_numbers_may_be(cluster: Cluster) -> None:
    # By the head, to any client:
    token = (cluster.dir / "token").read_text().strip()
    request = urllib.request.Request(f"{cluster.url}/v1/jobs?limit=-1", headers={"Authorization": f"Bearer {token}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=WAIT_S)
    assert refused.value.code == 400
    said = refused.value.read().decode()
    assert "limit: 1 or more" in said, said
    # And by this client before it asks, naming its own argument:
    client = cluster.client()
    job_id = client.jobs()[0].id if client.jobs() else "j1"
    refusals = [
        (lambda: client.jobs(limit=0), "limit=0: give the number of newest jobs to list, 1 or more"),
        (lambda: client.log_chunk(job_id, 0, offset=-5), "offset=-5: give a byte offset into the log, 0 or more"),
        (lambda: client.log_chunk(job_id, 0, offset=5, tail=2), "offset=5 and tail=2: give one"),
        (lambda: client.logs(job_id, 0, tail=-1), "tail=-1: give a number of lines, 0 or more"),
        (lambda: client.logs(job_id, 0, attempt=0), "attempt=0: attempts are numbered from 1"),
        (lambda: client.log_bytes(job_id, 0, attempt=-1), "attempt=-1: attempts are numbered from 1"),
        (lambda: client.logs(job_id, 0, local_rank=-1), "local_rank=-1: give a worker's local rank on its node"),
        (lambda: client.logs(job_id), "give an actor (its index or name) or rank= (a global rank"),
        (lambda: client.log_chunk(job_id, 0, rank=1), "one of the two"),
        (lambda: client.logs(job_id, rank=-1), "rank=-1: give a global rank, 0 or more"),
        (lambda: client.logs(job_id, rank=1, attempt=1), "rank=1 names its holder's attempt and worker"),
        (lambda: client.log_bytes(job_id, rank=1, local_rank=0), "leave out attempt= and local_rank="),
    ]
    for call, said in refusals:
        with pytest.raises(ArgumentError, match=re.escape(said)):
            call()


def test_jobs_takes_one_state_or_several(cluster: Cluster) -> None:
    client = cluster.client()
    done = client.submit(JobSpec(name="one-state", command=["true"], min_nodes=1, max_nodes=1)).id
    assert client.wait(done, timeout=WAIT_S).state == "SUCCEEDED"
    succeeded = client.jobs(states="SUCCEEDED")
    assert done in [j.id for j in succeeded] and {j.state for j in succeeded} == {"SUCCEEDED"}
    assert done not in [j.id for j in client.jobs(states="RUNNING")]
    assert done in [j.id for j in client.jobs(states=["FAILED", "SUCCEEDED"])]


def test_jobs_pages_back_through_older_jobs_with_before(cluster: Cluster) -> None:
    client = cluster.client()
    spec = JobSpec(name="paged", command=["true"], min_nodes=1, max_nodes=1)
    ids = [client.submit(spec).id for _ in range(3)]
    for job_id in ids:
        assert client.wait(job_id, timeout=WAIT_S).state == "SUCCEEDED"
    assert [j.id for j in client.jobs(before=ids[2], limit=2)] == ids[:2]
    assert [j.id for j in client.jobs(before=ids[1], limit=1)] == ids[:1]
    older = client.jobs(before=ids[0])
    assert all(int(j.id[1:]) < int(ids[0][1:]) for j in older), older
    with pytest.raises(ApiError) as refused:
        client.jobs(before="latest")
    assert refused.value.status == 400 and "`before` is `latest`" in refused.value.message


def test_a_list_carries_the_newest_100_ledger_entries_and_counts_the_rest(cluster: Cluster) -> None:
    client = cluster.client()
    retries = Retries(user=104, backoff_ms=Backoff(initial=1, max=1))
    spec = JobSpec(name="crashes", command=["false"], min_nodes=1, max_nodes=1, retries=retries)
    job_id = client.submit(spec).id
    job = client.wait(job_id, timeout=WAIT_S)
    assert (job.state, len(job.ledger), job.ledger_omitted) == ("FAILED", 105, 0)
    [listed] = [j for j in client.jobs() if j.id == job_id]
    assert listed.ledger_omitted == 5
    assert [e.attempt for e in listed.ledger] == [e.attempt for e in job.ledger[5:]]


def test_unknown_jobs_are_404(cluster: Cluster) -> None:
    client = cluster.client()
    for call in (client.status, client.stop):
        with pytest.raises(ApiError) as unknown:
            call("j999999")
        assert unknown.value.status == 404 and "no job `j999999`" in unknown.value.message


def test_credentials_are_found_as_the_cli_finds_them(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("FTDRIVE_HEAD", "FTDRIVE_TOKEN", "FTDRIVE_STATE_DIR", "FTDRIVE_CA_CERT"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigError, match=r"\$FTDRIVE_HEAD"):
        Client()
    # Head from $FTDRIVE_HEAD (no scheme means http), token from the state dir's file.
    monkeypatch.setenv("FTDRIVE_HEAD", cluster.url.replace("http://", ""))
    monkeypatch.setenv("FTDRIVE_STATE_DIR", str(cluster.dir))
    assert Client().base_url == cluster.url
    assert Client().health().nodes >= 3
    # $FTDRIVE_TOKEN wins over the file: a wrong one is refused by the head, saying why.
    monkeypatch.setenv("FTDRIVE_TOKEN", "not-the-token")
    with pytest.raises(ApiError) as refused:
        Client().jobs()
    assert refused.value.status == 401 and "token" in refused.value.message
    # An empty $FTDRIVE_TOKEN counts as unset, as in the CLI.
    monkeypatch.setenv("FTDRIVE_TOKEN", "")
    assert Client().health().nodes >= 3
    monkeypatch.setenv("FTDRIVE_STATE_DIR", str(cluster.dir / "nowhere"))
    with pytest.raises(ConfigError, match="no API token"):
        Client()
    # Two lines pasted are no token: refused here, not sent as a header that fails as a lost head.
    monkeypatch.setenv("FTDRIVE_TOKEN", "a\nb")
    with pytest.raises(ConfigError, match=r"the token from \$FTDRIVE_TOKEN holds '\\n'"):
        Client()


def test_a_head_address_is_read_as_the_cli_reads_it() -> None:
    for given, base in [
        ("127.0.0.1:7390", "http://127.0.0.1:7390"),
        ("127.0.0.1", "http://127.0.0.1:7380"),
        ("head.example:9000", "https://head.example:9000"),
        ("10.0.0.5", "https://10.0.0.5:7380"),
        ("localhost:7390", "http://localhost:7390"),
        ("http://10.0.0.5:7380/", "http://10.0.0.5:7380"),
        ("https://head.example", "https://head.example"),
        ("[::1]:7380", "http://[::1]:7380"),
    ]:
        assert head_url(given) == base, given
    for given, why in [
        ("not a url", "not an address"),
        ("127.0.0.1:99999", "not an address"),
        ("ftp://head:21", "is not http:// or https://"),
        ("http://head:7380/v1/jobs", "has a path"),
    ]:
        with pytest.raises(ConfigError, match=why) as refused:
            head_url(given)
        assert str(refused.value).endswith("such as 127.0.0.1:7380"), refused.value


def test_an_unreachable_head_and_a_bad_ca_certificate(cluster: Cluster, tmp_path: Path) -> None:
    token = (cluster.dir / "token").read_text().strip()
    with pytest.raises(HeadUnreachableError, match="cannot reach the head"):
        Client("127.0.0.1:1", token=token, timeout=5).health()
    with pytest.raises(ConfigError, match="CA certificate"):
        Client("https://127.0.0.1:1", token=token, ca_cert=tmp_path / "missing.pem")


def test_https_to_a_plain_http_head_says_to_use_http(cluster: Cluster) -> None:
    plain = cluster.url.split("://", 1)[1]
    with pytest.raises(HeadUnreachableError) as refused:
        Client(f"https://{plain}", state_dir=cluster.dir, timeout=5).health()
    message = str(refused.value)
    assert "may be serving plain http" in message and f"use http://{plain}" in message, message
    assert "--tls-cert" in message, message


def test_logs_of_an_actor_that_never_started_say_so(cluster: Cluster) -> None:
    client = cluster.client()
    spec = JobSpec(name="never-placed", command=["true"], min_nodes=1, max_nodes=1, bundle={"cpu": 64})
    job_id = client.submit(spec).id
    try:
        with pytest.raises(ApiError) as waiting:
            list(client.logs(job_id, 0))
        assert waiting.value.status == 404
        assert f"actor {job_id}/0 has not started an attempt yet (the job is PENDING" in waiting.value.message
        assert "no attempt 0" not in waiting.value.message
    finally:
        client.stop(job_id)
    client.wait(job_id, timeout=30)
    with pytest.raises(ApiError, match="has not started an attempt, and the job ended STOPPED"):
        list(client.logs(job_id, 0))
    with pytest.raises(ApiError, match="has not started an attempt, and the job ended STOPPED"):
        list(client.logs(job_id, 0, attempt=1))  # an attempt asked for by number: the same answer


def test_an_actor_is_given_by_index_or_by_name(cluster: Cluster) -> None:
    """As the CLI's ``--actor j7/1`` and ``Actor.name`` give it; a bad one is refused at the
    call, naming what was given, before the head is asked."""
    client = cluster.client()
    job_id = client.submit(JobSpec(name="named-actor", command=["echo", "by name"], min_nodes=1, max_nodes=1)).id
    job = client.wait(job_id, timeout=WAIT_S)
    name = job.actors[0].name
    assert name == f"{job_id}/0"
    assert list(client.logs(job_id, name)) == list(client.logs(job_id, 0)) == ["by name\n"]
    assert client.log_chunk(job_id, name).data == b"by name\n"
    assert [c.data for c in client.log_bytes(job_id, name)] == [b"by name\n"]
    for actor, said in [
        ("j999/0", f"actor 'j999/0' is not an actor of job '{job_id}': give the index N, or the name {job_id}/N"),
        (-1, f"actor -1: actors of {job_id} are numbered from 0 ({job_id}/0, {job_id}/1, …)"),
        (f"{job_id}/x", f"actor '{job_id}/x': give the actor's index (0, 1, …) or its name, such as {job_id}/0"),
    ]:
        for call in (client.logs, client.log_bytes, client.log_chunk):
            with pytest.raises(ArgumentError, match=re.escape(said)):
                call(job_id, actor)  # type: ignore[operator]


def test_a_head_that_never_answered_could_not_be_reached(tmp_path: Path) -> None:
    """``wait`` rides out a head restart; a head that never answered did not go away."""
    client = Client("127.0.0.1:45731", token="t", timeout=2)  # nothing listens there
    with pytest.raises(HeadUnreachableError) as never:
        client.wait("j15", head_return_timeout=1, poll_interval=0.1)
    message = str(never.value)
    assert "could not be reached, asked for 1 s and never answering" in message, message
    assert "did not come back" not in message and "is `ftdrive head` running?" in message, message


def test_wait_keeps_its_timeout_when_the_head_accepts_and_never_answers() -> None:
    """``timeout`` bounds the whole call, as ``Future.result(timeout)`` does: no request waits
    out the client's own (here an hour) past it."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # the kernel accepts; nothing ever answers
    client = Client(f"127.0.0.1:{silent.getsockname()[1]}", token="t", timeout=3600)
    outcome: List[BaseException] = []

    def wait() -> None:
        try:
            client.wait("j1", timeout=0.5)
        except BaseException as e:  # noqa: B036 - handed to the test's thread
            outcome.append(e)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(WAIT_S)  # a hang guard, an hour short of the request timeout
    silent.close()
    assert not waiter.is_alive(), "wait(timeout=0.5) waited on a request past its timeout"
    assert len(outcome) == 1 and isinstance(outcome[0], TimeoutError), outcome
    assert "job j1 is still unknown (the head cannot be reached) after 0.5 s" in str(outcome[0])


def test_log_lines_end_only_at_newlines() -> None:
    """As ``ftdrive logs`` splits them: a carriage return (a progress bar's redraw, or half of a
    CRLF cut between two reads), a form feed or a Unicode separator is inside a line."""
    parts = [b"50%\r100%\r\nA" + b"x" * 3 + b"\r", b"\nsep\xe2\x80\xa8ff\x0cend\n", b"\xe2\x80", b"\xa8last"]
    chunks = [LogChunk(data=p, attempt=1, node="n1", running=False, next_offset=0) for p in parts]
    assert list(_lines(iter(chunks))) == ["50%\r100%\r\n", "Axxx\r\n", "sep\u2028ff\x0cend\n", "\u2028last"]


def test_a_refused_token_says_where_it_came_from_and_how_to_give_the_right_one(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = cluster.url

    def refusal(client: Client) -> str:
        with pytest.raises(ApiError) as refused:
            client.jobs()
        assert refused.value.status == 401
        return refused.value.message

    monkeypatch.setenv("FTDRIVE_TOKEN", "not-the-token")
    said = refusal(Client(url, state_dir=cluster.dir))
    assert said.startswith(
        f"the head at {url} refused the token from $FTDRIVE_TOKEN: it is not its client token; set $FTDRIVE_TOKEN "
        "to the contents of the `token` file in the head's state dir, or unset it"
    ), said
    monkeypatch.delenv("FTDRIVE_TOKEN")
    other = tmp_path / "other-head"
    other.mkdir()
    (other / "token").write_text("another-heads-token\n")
    said = refusal(Client(url, state_dir=other))
    assert f"refused the token from {other / 'token'}: it is not its client token; that file is another head's" in said
    assert "pass token= the contents of the `token` file" in refusal(Client(url, token="nope"))
    agent_token = (cluster.dir / "agent-token").read_text().strip()
    said = refusal(Client(url, token=agent_token))
    assert "refused the token given as token=: it is its agent token, which opens only the agent channel" in said
