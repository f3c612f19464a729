"""How a torchx AppDef becomes a job spec (no cluster needed): torchrun translation, node
ranges, resources, env, retry budgets and policies, and torchx macros; and what the client
refuses before it asks the head anything."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import types
from pathlib import Path
from typing import Any, Dict

import pytest
from torchx.components.dist import ddp
from torchx.components.utils import python as utils_python
from torchx.specs import AppDef, AppState, BindMount, Resource, RetryPolicy, Role

from ftdrive import ArgumentError, Client, ConfigError, FtdriveError, SpecError
from ftdrive.models import Actor
from ftdrive.spec import JobSpec
from ftdrive.torchrun import translate
from ftdrive.torchx_scheduler import _in_torchx_terms, _replica_state, create_scheduler, to_request

CFG: Dict[str, Any] = {"cwd": "/srv/train", "python": "python3"}


def test_an_empty_job_id_or_node_name_is_refused_before_any_request() -> None:
    client = Client("http://127.0.0.1:9", token="t")  # nothing listens there: never asked
    # An empty job id to events() is no "every job": refused as for every other call.
    calls = (lambda: client.forget(""), lambda: client.status(""), lambda: client.drain(""), lambda: client.events(""))
    for call in calls:
        with pytest.raises(ValueError, match="cannot be empty"):
            call()


def spec_of(app: AppDef, **cfg: Any) -> JobSpec:
    return to_request(app, {**CFG, **cfg}).spec


def with_job_id(app: AppDef) -> AppDef:
    """As torchx's runner hands it over: with ``TORCHX_JOB_ID`` using the ``${app_id}`` macro."""
    app.roles[0].env["TORCHX_JOB_ID"] = "ftdrive://torchx/${app_id}"
    return app


def test_dist_ddp_elastic_becomes_a_node_range_with_workers_per_node() -> None:
    app = ddp("--epochs", "3", script="train.py", j="3:8x4", cpu=8, gpu=4, memMB=65536, max_retries=2)
    spec = spec_of(with_job_id(app))
    assert (spec.min_nodes, spec.max_nodes, spec.nproc_per_node) == (3, 8, 4)
    assert spec.bundle == {"cpu": 8, "gpu": 4, "memory_mb": 65536}
    assert spec.retries.user == 2 and spec.restart == "gang" and spec.cwd == "/srv/train"
    assert spec.command[-5:] == ["python3", "-u", "train.py", "--epochs", "3"]
    assert spec.env["LOGLEVEL"] == "WARNING"
    # ${app_id} is known only once the head placed the job: set from $FTDRIVE_JOB_ID.
    assert spec.command[:2] == ["/bin/sh", "-c"] and "TORCHX_JOB_ID" not in spec.env
    assert '"${FTDRIVE_JOB_ID}"' in spec.command[2] and spec.command[2].endswith('exec "$@"')


def test_the_sh_prologue_sets_late_bound_values_in_the_process() -> None:
    spec = spec_of(with_job_id(ddp(script="train.py", j="1x1")))
    command = spec.command[:4] + ["sh", "-c", 'printf "%s|%s" "$TORCHX_JOB_ID" "$1"', "sh", "a b"]
    env = {"FTDRIVE_JOB_ID": "j42", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    assert out == "ftdrive://torchx/j42|a b", out


def test_a_module_launch_and_nproc_from_the_gpus() -> None:
    spec = spec_of(ddp(m="pkg.train", j="2", gpu=8))
    assert (spec.min_nodes, spec.max_nodes, spec.nproc_per_node) == (1, 1, 2)
    assert spec.command[-4:] == ["python3", "-u", "-m", "pkg.train"]
    role = Role(name="t", image="", entrypoint="torchrun", args=["--nproc-per-node=gpu", "--nnodes=2:4", "t.py"])
    role.resource = Resource(cpu=4, gpu=8, memMB=0)
    spec = spec_of(AppDef(name="t", roles=[role]), python="/venv/bin/python")
    assert (spec.min_nodes, spec.max_nodes, spec.nproc_per_node) == (2, 4, 8)
    assert spec.command == ["/venv/bin/python", "-u", "t.py"] and spec.bundle == {"cpu": 4, "gpu": 8}


def test_shell_arguments_keep_the_shell() -> None:
    launch = translate(["bash", "-c", "torchrun --nnodes 2 --nproc_per_node 1 train.py --data $DATA_DIR"])
    assert launch is not None and launch.command == ["bash", "-c", "exec python3 -u train.py --data $DATA_DIR"]
    assert translate(["bash", "-c", "cd /x && torchrun --nnodes 2 train.py"]) is None
    assert translate(["bash", "-c", "torchrun --nnodes 2 train.py; echo done"]) is None
    with pytest.raises(ValueError, match="--nnodes"):
        translate(["torchrun", "--nnodes", "two", "train.py"])


def test_a_role_without_torchrun_runs_as_is_on_its_replicas() -> None:
    app = utils_python(c="print(1)", name="hello", num_replicas=2, cpu=1, gpu=0, memMB=512)
    spec = spec_of(app)
    assert (spec.min_nodes, spec.max_nodes, spec.nproc_per_node) == (2, 2, 1)
    assert spec.command[-3:] == ["python", "-c", "print(1)"]
    assert spec.bundle == {"cpu": 1, "memory_mb": 512}


def test_retry_policies_map_to_restart_modes_and_spares() -> None:
    def app(policy: RetryPolicy) -> AppDef:
        role = Role(name="w", image="", entrypoint="worker", args=["--x"], num_replicas=5, min_replicas=3)
        role.resource, role.retry_policy, role.max_retries = Resource(cpu=1, gpu=0, memMB=0), policy, 4
        role.env = {"REPLICA": "r${replica_id}"}
        return AppDef(name="my app/1", roles=[role])

    gang = spec_of(app(RetryPolicy.APPLICATION))
    assert (gang.min_nodes, gang.max_nodes, gang.hot_spares, gang.restart, gang.name) == (3, 5, 0, "gang", "my-app-1")
    assert '"${FTDRIVE_ACTOR##*/}"' in gang.command[2] and gang.retries.user == 4
    actor = spec_of(app(RetryPolicy.REPLICA), priority=5, system_retries=-1, node_selector={"zone": "a"})
    assert (actor.restart, actor.priority, actor.retries.system, actor.node_selector) == ("actor", 5, -1, {"zone": "a"})
    spares = spec_of(app(RetryPolicy.HOT_SPARE))
    assert (spares.min_nodes, spares.max_nodes, spares.hot_spares) == (3, 3, 2)


def test_multi_role_apps_are_refused() -> None:
    role = Role(name="a", image="", entrypoint="x", resource=Resource(cpu=1, gpu=0, memMB=0))
    scheduler = create_scheduler("test")
    with pytest.raises(ValueError, match="one role per app"):
        scheduler.submit_dryrun(AppDef(name="two", roles=[role, role]), {})


def test_dryrun_is_the_spec_json_and_round_trips() -> None:
    info = create_scheduler("test").submit_dryrun(ddp(script="train.py", j="2x2"), {"head": "h:1"})
    text = str(info)
    assert text.startswith("# ftdrive job spec for h:1")
    assert JobSpec.from_dict(info.request.spec.to_dict()) == info.request.spec
    assert "torchrun launch translated: 2..2 node(s) x 2 worker(s)" in text
    with pytest.raises(ValueError, match="`retries.colour`"):
        JobSpec.from_dict({"name": "x", "command": ["y"], "min_nodes": 1, "max_nodes": 1, "retries": {"colour": 1}})
    with pytest.raises(FtdriveError, match="`prority`: unknown field; did you mean `priority`"):
        JobSpec.from_dict({"name": "x", "command": ["y"], "min_nodes": 1, "max_nodes": 1, "prority": 1})


@pytest.mark.parametrize(
    "cfg, said",
    [
        ({"restart": "bogus"}, "-cfg restart=bogus: must be one of gang, actor"),
        ({"strategy": "spread"}, "-cfg strategy=spread: must be one of STRICT_SPREAD, SPREAD, PACK, STRICT_PACK"),
        ({"hot_spares": -1}, "-cfg hot_spares=-1: must be 0 or more"),
        ({"system_retries": -2}, r"-cfg system_retries=-2: must be -1 or more \(-1: no limit\)"),
        ({"schedule_timeout_ms": 0}, "-cfg schedule_timeout_ms=0: must be 1 or more$"),
        ({"run_timeout_ms": 0}, "-cfg run_timeout_ms=0: must be 1 or more$"),
    ],
)
def test_run_options_the_head_would_refuse_are_refused_naming_the_option(cfg: Dict[str, Any], said: str) -> None:
    # A dry run too: it showed such a spec, and the real run ended in the head's 400 for a field.
    with pytest.raises(ArgumentError, match=said):
        create_scheduler("test").submit_dryrun(ddp(script="train.py", j="2x1"), {"head": "h:1", **cfg})


def test_what_the_client_refuses_before_asking_is_an_ftdrive_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(SpecError, match=r"job spec is not JSON: .*line 1 column 2"):
        JobSpec.from_json("{")
    client = Client("http://127.0.0.1:9", token="t")
    with pytest.raises(FtdriveError, match="cannot be empty") as empty:
        client.status("")
    assert isinstance(empty.value, ValueError)  # an ArgumentError
    with pytest.raises(ArgumentError, match="deadline_ms is -5: .* 0 or more"):
        client.drain("n1", deadline_ms=-5)

    # Under torchx, the head is given as torchx users give it, not as a Python argument.
    monkeypatch.delenv("FTDRIVE_HEAD", raising=False)
    (tmp_path / "torchxconfig").write_text("")
    monkeypatch.setenv("TORCHXCONFIG", str(tmp_path / "torchxconfig"))
    with pytest.raises(ConfigError) as headless:
        create_scheduler("torchx").describe("j1")
    assert "-cfg head=" in str(headless.value) and ".torchxconfig" in str(headless.value), headless.value
    assert "head='" not in str(headless.value)


@pytest.mark.parametrize(
    "program, code, said",
    [
        ("no_such_program_xyz", 127, "cannot start `no_such_program_xyz`: not found on the PATH of this node"),
        ("./missing.sh", 127, "cannot start `./missing.sh`: no such file in the working directory of the job"),
        ("plain.txt", 127, "cannot start `plain.txt`: not found on the PATH of this node"),
        ("./plain.txt", 126, "cannot start `./plain.txt`: not an executable file in the working directory"),
    ],
)
def test_the_prologue_names_a_program_that_cannot_start(tmp_path: Path, program: str, code: int, said: str) -> None:
    """The ``/bin/sh`` prologue checks the program before its ``exec``, whose failure would say
    only ``exit 127``: it says why on stderr and in torchelastic's error file, which ftdrive
    quotes in the attempt's evidence, and exits as a shell does."""
    (tmp_path / "plain.txt").write_text("not a program\n")
    role = Role(name="r", image="", entrypoint=program, args=["x"], resource=Resource(cpu=1, gpu=0, memMB=0))
    spec = spec_of(with_job_id(AppDef(name="r", roles=[role])))
    error_file = tmp_path / "error.json"
    env = {"FTDRIVE_JOB_ID": "j1", "PATH": "/usr/bin:/bin", "TORCHELASTIC_ERROR_FILE": str(error_file)}
    done = subprocess.run(spec.command, env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == code and said in done.stderr, done
    written = json.loads(error_file.read_text())
    assert said in written["message"]["message"], written
    assert spec.retries.non_retryable_exit_codes == [126, 127]


def test_a_program_that_can_start_runs_under_the_prologue(tmp_path: Path) -> None:
    role = Role(name="r", image="", entrypoint="sh", args=["-c", 'echo "$TORCHX_JOB_ID"'])
    role.resource = Resource(cpu=1, gpu=0, memMB=0)
    spec = spec_of(with_job_id(AppDef(name="r", roles=[role])))
    env = {"FTDRIVE_JOB_ID": "j5", "PATH": "/usr/bin:/bin", "TORCHELASTIC_ERROR_FILE": str(tmp_path / "e")}
    done = subprocess.run(spec.command, env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "ftdrive://torchx/j5\n"), done
    assert not (tmp_path / "e").exists()


def test_non_retryable_exit_codes_are_a_run_option() -> None:
    app = ddp(script="train.py", j="1x1")
    assert spec_of(app, non_retryable_exit_codes=["2", "127"]).retries.non_retryable_exit_codes == [2, 127]
    assert spec_of(app, non_retryable_exit_codes="3;4").retries.non_retryable_exit_codes == [3, 4]
    with pytest.raises(ArgumentError, match=r"-cfg non_retryable_exit_codes=2,300: `300` is not an exit code"):
        spec_of(app, non_retryable_exit_codes=["2", "300"])


def test_capabilities_and_devices_are_asked_for_not_dropped() -> None:
    """A number is a resource of that name in the bundle (as Kubernetes asks for a device as a
    resource limit); any other capability is a node label the nodes must have (as Kubernetes
    selects nodes by the instance-type capability)."""
    role = Role(name="r", image="", entrypoint="worker")
    role.resource = Resource(
        cpu=2, gpu=0, memMB=0, capabilities={"widget": 2, "zone": "a", "fast": True}, devices={"fpga": 1}
    )
    request = to_request(AppDef(name="r", roles=[role]), {**CFG, "node_selector": {"rack": "r1"}})
    assert request.spec.bundle == {"cpu": 2, "fpga": 1, "widget": 2}
    assert request.spec.node_selector == {"zone": "a", "fast": "true", "rack": "r1"}
    assert any("fpga" in note and "--resources" in note for note in request.notes), request.notes

    efa = r"resource devices `vpc.amazonaws.com/efa` cannot be an ftdrive resource name \(1 to 64 letters, digits"
    for resource, said in [
        (Resource(cpu=1, gpu=0, memMB=0, devices={"vpc.amazonaws.com/efa": 4}), efa + ".*--resources efa=4"),
        (Resource(cpu=1, gpu=0, memMB=0, capabilities={"gpu": 2}), "capabilities `gpu` is the bundle's own `gpu`"),
        (Resource(cpu=1, gpu=0, memMB=0, capabilities={"widget": -1}), "capabilities `widget` is -1; give 0 or more"),
    ]:
        role.resource = resource
        with pytest.raises(SpecError, match=f"role r: .*{said}"):
            to_request(AppDef(name="r", roles=[role]), CFG)


def test_a_relative_cwd_is_taken_from_where_torchx_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    role = Role(name="r", image="", entrypoint="sh", args=["${img_root}/run.sh"])
    role.resource = Resource(cpu=1, gpu=0, memMB=0)
    spec = spec_of(AppDef(name="r", roles=[role]), cwd="work/sub")
    assert spec.cwd == str(tmp_path / "work" / "sub")
    assert spec.command == ["sh", str(tmp_path / "work" / "sub" / "run.sh")]
    assert spec_of(AppDef(name="r", roles=[role]), cwd=None).cwd == os.getcwd() == str(tmp_path)


def role_with(**fields: Any) -> AppDef:
    role = Role(name="w", image="", entrypoint="worker", resource=Resource(cpu=1, gpu=0, memMB=0))
    for key, value in fields.items():
        setattr(role, key, value)
    return AppDef(name="w", roles=[role])


@pytest.mark.parametrize(
    "app, said",
    [
        (role_with(num_replicas=2, min_replicas=3), "role w: min_replicas 3 is more than num_replicas 2"),
        (role_with(num_replicas=0), "role w: num_replicas is 0; give 1 or more"),
        (role_with(num_replicas=2, min_replicas=0), "role w: min_replicas is 0; a job runs on at least 1 node"),
        (ddp(script="t.py", j="3:2x1"), r"torchrun --nnodes 3:2 \(dist.ddp: -j 3:2xN\): at least 3 nodes but at most"),
        (role_with(max_retries=-2), r"role w: max_retries is -2; give 0 to 1,000,000 \(-1: no limit\)"),
        (ddp(script="t.py", j="1x1", memMB=-5), r"role t: resource memMB is -5; give 0 or more"),
        (ddp(script="t.py", j="1x1", cpu=-1), r"role t: resource cpu is -1; give 0 or more"),
    ],
)
def test_a_role_the_head_would_refuse_is_refused_in_torchx_terms(app: AppDef, said: str) -> None:
    """Refused before submitting (a dry run too), naming the role's fields, not the spec's."""
    with pytest.raises(SpecError, match=said):
        create_scheduler("test").submit_dryrun(app, {"head": "h:1"})


def test_a_schedule_timeout_is_a_run_option() -> None:
    """So that an app no node can hold ends (and ``torchx run --wait`` with it) rather than wait for ever."""
    app = ddp(script="train.py", j="2x1")
    assert spec_of(app).schedule_timeout_ms is None
    assert spec_of(app, schedule_timeout_ms=60_000).schedule_timeout_ms == 60_000
    assert "schedule_timeout_ms" in {name for name, _ in create_scheduler("test").run_opts()}


def test_a_run_timeout_is_a_run_option() -> None:
    """As Slurm's ``--time``: a hung app ends rather than hold its nodes for ever."""
    app = ddp(script="train.py", j="2x1")
    assert spec_of(app).run_timeout_ms is None
    assert spec_of(app, run_timeout_ms=3_600_000).to_dict()["run_timeout_ms"] == 3_600_000
    assert "run_timeout_ms" in {name for name, _ in create_scheduler("test").run_opts()}


def test_mounts_the_job_leaves_out_are_said_when_it_is_submitted(caplog: pytest.LogCaptureFixture) -> None:
    app = role_with(mounts=[BindMount(src_path="/data", dst_path="/mnt/data")])
    request = to_request(app, CFG)
    said = "role w: mounts are ignored: ftdrive runs processes on the nodes' own filesystems"
    assert request.ignored == [said] and said in request.notes
    assert to_request(role_with(), CFG).ignored == []
    scheduler = create_scheduler("test", client=Client("http://127.0.0.1:9", token="t"))  # nothing listens there
    with caplog.at_level(logging.WARNING, logger="ftdrive.torchx_scheduler"), pytest.raises(FtdriveError):
        scheduler.schedule(scheduler.submit_dryrun(app, CFG))
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [said]


@pytest.mark.parametrize(
    "head_said, torchx_says",
    [
        (
            "infeasible: min_nodes 4 bundles of cpu=2 do not fit on the 3 node(s) that could hold one, DEAD ones "
            "included: 3 at most, even empty; add nodes, or lower min_nodes",
            "add nodes, or lower the app's fewest nodes (dist.ddp: -j MIN:MAXxN; else the role's min_replicas)",
        ),
        (
            "infeasible: bundle needs memory_mb=999999, largest node has memory_mb=4096 (n1)",
            "infeasible: one replica's resource needs memMB=999999, largest node has memMB=4096 (n1)",
        ),
        (
            "infeasible: no node matches node_selector zone=a",
            "infeasible: no node matches the role's resource capabilities and -cfg node_selector: zone=a",
        ),
    ],
)
def test_why_an_app_waits_is_told_in_torchx_terms(head_said: str, torchx_says: str) -> None:
    assert torchx_says in _in_torchx_terms(head_said)
    assert "min_nodes" not in _in_torchx_terms(head_said).split(";")[-1]


def test_a_replica_is_running_once_its_agent_confirmed_its_start() -> None:
    """RUNNING turns on when the head sends the start; until the agent confirms it the
    replica's process may not exist, as a torchx PENDING replica's does not."""
    job = types.SimpleNamespace(state="RUNNING")
    seen = {"name": "j1/0", "state": "RUNNING", "node": "n1", "rank": 0, "attempt": 1}
    sent = Actor.from_json({**seen, "starting": True})
    assert _replica_state(job, sent) == AppState.PENDING  # type: ignore[arg-type]
    assert _replica_state(job, Actor.from_json({**seen, "starting": False})) == AppState.RUNNING  # type: ignore[arg-type]
