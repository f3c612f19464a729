"""A real ftdrive cluster for the tests: ``$FTDRIVE_BIN head`` and ``$FTDRIVE_BIN node`` agents
on loopback, as ``actors/tests/common`` starts one — one temporary state dir shared by the
head (which writes its URL to ``head.url`` and its tokens there) and its agents, no
``$FTDRIVE_TOKEN``, fast failure detection. Every process started is ended at teardown, and
so is every job process (found by a mark in its environment), even when a test failed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar

import pytest

import ftdrive
from ftdrive import Client, Job

WAIT_S = 45.0
T = TypeVar("T")

# The tests say which head and credentials they use; none come from the caller's environment.
for _var in ("FTDRIVE_HEAD", "FTDRIVE_TOKEN", "FTDRIVE_STATE_DIR", "FTDRIVE_CA_CERT", "FTDRIVE_AGENT_TOKEN"):
    os.environ.pop(_var, None)

SCRIPTS: Dict[str, str] = {
    # Checks torchrun's environment as ftdrive sets it; argv: WORLD_SIZE LOCAL_WORLD_SIZE.
    "check_env.py": """
import os, sys
world, nproc = int(sys.argv[1]), int(sys.argv[2])
env = os.environ
problems = []
rank, local, group = int(env["RANK"]), int(env["LOCAL_RANK"]), int(env["GROUP_RANK"])
if int(env["WORLD_SIZE"]) != world: problems.append(f"WORLD_SIZE={env['WORLD_SIZE']}, expected {world}")
if int(env["LOCAL_WORLD_SIZE"]) != nproc: problems.append(f"LOCAL_WORLD_SIZE={env['LOCAL_WORLD_SIZE']}")
if not 0 <= local < nproc: problems.append(f"LOCAL_RANK={local}")
if rank != group * nproc + local: problems.append(f"RANK={rank} but GROUP_RANK={group}, LOCAL_RANK={local}")
if not env.get("MASTER_ADDR") or not env.get("MASTER_PORT", "").isdigit(): problems.append("no MASTER_ADDR/PORT")
if env.get("TORCHELASTIC_RUN_ID") != env["FTDRIVE_JOB_ID"]: problems.append("TORCHELASTIC_RUN_ID")
torchx_id = env.get("TORCHX_JOB_ID")
if torchx_id is not None and not torchx_id.endswith("/" + env["FTDRIVE_JOB_ID"]):
    problems.append(f"TORCHX_JOB_ID={torchx_id}")
extra = " ".join(sys.argv[3:])
if problems:
    print("check failed:", "; ".join(problems), file=sys.stderr)
    sys.exit(3)
print(f"check ok rank={rank} local_rank={local} world={world} job={env['FTDRIVE_JOB_ID']} args={extra}")
""",
    "fail.py": """
import os, sys
print(f"failing on purpose, attempt {os.environ['FTDRIVE_ATTEMPT']}", flush=True)
sys.exit(1)
""",
    # Fails its first attempt, succeeds on the next.
    "fail_once.py": """
import os, sys
attempt = os.environ["FTDRIVE_ATTEMPT"]
print(f"attempt {attempt}", flush=True)
sys.exit(1 if attempt == "1" else 0)
""",
    "sleep.py": """
import time
print("sleeping", flush=True)
time.sleep(120)
""",
    # Prints a line, waits until the file argv[1] exists (at most 30 s), prints five more.
    "gated.py": """
import os, sys, time
print("line 0", flush=True)
deadline = time.monotonic() + 30
while not os.path.exists(sys.argv[1]):
    if time.monotonic() > deadline:
        sys.exit(4)
    time.sleep(0.05)
for i in range(1, 6):
    print(f"line {i}", flush=True)
""",
}


def ftdrive_bin() -> str:
    path = os.environ.get("FTDRIVE_BIN")
    if not path:
        pytest.fail("set $FTDRIVE_BIN to the ftdrive binary (e.g. target/release/ftdrive after cargo build --release)")
    if not os.access(path, os.X_OK):
        pytest.fail(f"$FTDRIVE_BIN={path} is not an executable file")
    return path


def wait_for(what: str, probe: Callable[[], Optional[T]], timeout: float = WAIT_S) -> T:
    """Polls ``probe`` until it returns something other than None/False; fails after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting until {what}")
        time.sleep(0.1)


class Cluster:
    """A head and agents on loopback, their state in ``dir``."""

    def __init__(self, root: Path) -> None:
        self.bin = ftdrive_bin()
        self.dir = root / "state"
        self.work = root / "work"
        self.dir.mkdir(mode=0o700)
        self.work.mkdir()
        self.mark = f"pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.head: Optional[subprocess.Popen[bytes]] = None
        self.nodes: Dict[str, subprocess.Popen[bytes]] = {}
        self.url = ""
        # With TLS: (CA certificate, server certificate, server key) the head serves https with.
        self.tls: Optional[Tuple[Path, Path, Path]] = None
        for name, text in SCRIPTS.items():
            (self.work / name).write_text(text.lstrip())
        # An empty torchx config, so that no ~/.torchxconfig changes what the tests run.
        (root / "torchxconfig").write_text("")
        self.torchxconfig = root / "torchxconfig"

    # ---- processes ----------------------------------------------------------------------

    def _env(self) -> Dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FTDRIVE_")}
        env.update(FTDRIVE_LOG="warn", FTDRIVE_STATE_DIR=str(self.dir), PYTEST_FTDRIVE_MARK=self.mark)
        if self.tls is not None:
            env["FTDRIVE_CA_CERT"] = str(self.tls[0])  # agents verify the head with it
        return env

    def _spawn(self, name: str, args: List[str]) -> "subprocess.Popen[bytes]":
        log = open(self.dir.parent / f"{name}.log", "wb")
        try:
            return subprocess.Popen([self.bin, *args], env=self._env(), stdout=log, stderr=log, cwd=self.work)
        finally:
            log.close()

    def start_head(
        self, tls: Optional[Tuple[Path, Path, Path]] = None, listen: str = "127.0.0.1:0", extra: Sequence[str] = ()
    ) -> None:
        """Starts the head; with ``tls`` (CA, certificate, key) it serves https itself."""
        args = ["head", "--listen", listen, "--heartbeat-interval-ms", "200", "--node-timeout-ms", "1000", *extra]
        self.tls = tls
        if tls is not None:
            args += ["--tls-cert", str(tls[1]), "--tls-key", str(tls[2])]
        self.head = self._spawn("head", [*args, "--state-dir", str(self.dir)])
        url_file = self.dir / "head.url"

        def listening() -> Optional[str]:
            self._check_alive("head", self.head)
            return url_file.read_text().strip() if url_file.exists() else None

        self.url = wait_for("the head listens", listening)
        wait_for("the head answers", lambda: self._answers())

    def kill_head(self) -> None:
        """SIGKILL for the head: its state stays in ``dir`` for the next one."""
        assert self.head is not None
        self.head.kill()
        self.head.wait(timeout=10)
        (self.dir / "head.url").unlink()

    def stop_head(self) -> None:
        """SIGTERM for the head, as a service manager stops it; waits until it has exited."""
        assert self.head is not None
        self.head.send_signal(signal.SIGTERM)
        self.head.wait(timeout=WAIT_S)
        (self.dir / "head.url").unlink()

    def restart_head(self) -> None:
        """A new head on the killed one's address and state dir, as a user restarts it."""
        self.start_head(self.tls, listen=self.url.split("://", 1)[1])

    def _answers(self) -> bool:
        try:
            self.client().health()
            return True
        except Exception:
            return False

    def add_node(self, name: str, labels: str = "") -> None:
        args = ["node", "--head", self.url, "--name", name, "--resources", "cpu=4,memory_mb=8192", "--gpus", "none"]
        args += ["--addr", "127.0.0.1", "--work-dir", str(self.work), "--reattach-grace-ms", "500"]
        if labels:
            args += ["--labels", labels]
        self.nodes[name] = self._spawn(f"node-{name}", args)

        def registered() -> bool:
            self._check_alive(f"node {name}", self.nodes[name])
            return any(n.name == name and n.state == "ALIVE" for n in self.client().nodes())

        wait_for(f"node {name} registers", registered)

    def kill_node(self, name: str) -> None:
        process = self.nodes.pop(name)
        process.kill()
        process.wait(timeout=10)

    def _check_alive(self, what: str, process: Optional["subprocess.Popen[bytes]"]) -> None:
        if process is not None and process.poll() is not None:
            log = self.dir.parent / f"{what.replace(' ', '-')}.log"
            text = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            pytest.fail(f"{what} exited with {process.returncode}:\n{text}")

    def stop(self) -> None:
        """Ends everything this cluster started: jobs, agents, head, and any job process left."""
        if self.head is not None and self.head.poll() is None:
            try:
                for job in self.client(timeout=5).jobs():
                    if not job.is_terminal:
                        self.client(timeout=5).stop(job.id)
            except Exception:
                pass  # the head may be the thing that failed; the processes are ended below
        for name in list(self.nodes):
            self.kill_node(name)
        if self.head is not None:
            self.head.send_signal(signal.SIGTERM)
            try:
                self.head.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.head.kill()
                self.head.wait(timeout=10)
        # Supervisors end their attempts once their agent is gone for the re-attach grace.
        deadline = time.monotonic() + 5
        while self.job_processes() and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in self.job_processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def job_processes(self) -> List[int]:
        """Live processes carrying this cluster's mark (agents' attempts and supervisors)."""
        needle = f"PYTEST_FTDRIVE_MARK={self.mark}".encode()
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                    if state != "Z":
                        pids.append(int(entry.name))
            except OSError:
                continue
        return pids

    # ---- clients ------------------------------------------------------------------------

    def client(self, timeout: float = 30.0) -> Client:
        ca_cert = self.tls[0] if self.tls is not None else None
        return Client(head=self.url, state_dir=self.dir, timeout=timeout, ca_cert=ca_cert)

    def user_env(self) -> Dict[str, str]:
        """The environment of a user of this cluster (the CLI's way: head and state dir). The
        ``torchx`` it runs imports the ``ftdrive`` package these tests import, not another
        copy installed in its environment (a relative $PYTHONPATH would not reach it from the
        directory torchx runs in)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("FTDRIVE_")}
        env.update(FTDRIVE_HEAD=self.url, FTDRIVE_STATE_DIR=str(self.dir), TORCHXCONFIG=str(self.torchxconfig))
        package_root = str(Path(ftdrive.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
        return env

    def wait_job(self, job_id: str, what: str, done: Callable[[Job], bool], timeout: float = WAIT_S) -> Job:
        client = self.client()

        def probe() -> Optional[Job]:
            job = client.status(job_id)
            return job if done(job) else None

        return wait_for(f"{job_id}: {what}", probe, timeout)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A head and three agents (n1, n2, n3: 4 CPUs, 8 GiB each), shared by the tests."""
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        c.start_head()
        for name in ("n1", "n2", "n3"):
            c.add_node(name)
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="session")
def torchx_cli() -> List[str]:
    """The ``torchx`` command of this interpreter's environment."""
    script = Path(sys.executable).with_name("torchx")
    if script.exists():
        return [str(script)]
    found = shutil.which("torchx")
    return [found] if found else [sys.executable, "-m", "torchx.cli.main"]
