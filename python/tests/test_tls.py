"""An https head, verified with a CA certificate given as ``ca_cert=`` or ``$FTDRIVE_CA_CERT``.

The head terminates TLS itself (``--tls-cert``/``--tls-key``, DESIGN §11) with a certificate
signed by a CA the test makes with ``openssl``; its agents verify it with the same CA.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from pathlib import Path
from typing import Callable, Iterator, List, Tuple

import pytest
from conftest import WAIT_S, Cluster

from ftdrive import Client, HeadUnreachableError, JobSpec


def make_certificates(directory: Path, names: str = "DNS:localhost,IP:127.0.0.1") -> Tuple[Path, Path, Path]:
    """A CA, and a certificate for ``names`` (subjectAltNames) signed by it: (ca, cert, key)."""
    directory.mkdir(exist_ok=True)
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed; it makes the test's CA and server certificate")
    ca_key, ca, key, csr, cert = (directory / n for n in ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem"))
    ext = directory / "server.ext"
    ext.write_text(
        f"subjectAltName={names}\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n"
    )

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca), "-days", "2",
        "-subj", "/CN=ftdrive test CA", "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", "/CN=localhost")
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
        "-out", str(cert), "-days", "2", "-extfile", str(ext))  # fmt: skip
    return ca, cert, key


@pytest.fixture
def https_cluster(tmp_path: Path) -> Iterator[Tuple[Cluster, Path]]:
    """A head serving https, and one agent that reaches it over https: (cluster, CA)."""
    certificates = make_certificates(tmp_path)
    cluster = Cluster(tmp_path)
    try:
        cluster.start_head(tls=certificates)
        cluster.add_node("t1")
        yield cluster, certificates[0]
    finally:
        cluster.stop()


def test_an_https_head_verified_with_a_ca_certificate(
    https_cluster: Tuple[Cluster, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster, ca = https_cluster
    url = cluster.url
    assert url.startswith("https://"), url
    client = Client(url, state_dir=cluster.dir, ca_cert=ca)
    assert client.health().nodes == 1
    stream = client.events(idle_timeout=30)  # open before the job exists: no event is missed
    job_id = client.submit(JobSpec(name="over-tls", command=["echo", "tls"], min_nodes=1, max_nodes=1)).id
    for event in stream:
        if event.event == "job_state" and event.job_id == job_id and event.data["to"] == "SUCCEEDED":
            break
    else:
        pytest.fail(f"the event stream over TLS ended before {job_id} succeeded")
    stream.close()
    assert client.status(job_id).state == "SUCCEEDED"
    assert list(client.logs(job_id, 0)) == ["tls\n"]

    monkeypatch.setenv("FTDRIVE_CA_CERT", str(ca))
    assert Client(url, state_dir=cluster.dir).health().nodes == 1
    monkeypatch.delenv("FTDRIVE_CA_CERT")


def test_tls_mistakes_are_told_with_their_fix(https_cluster: Tuple[Cluster, Path], tmp_path: Path) -> None:
    """As the CLI tells them: http:// for a head that speaks HTTPS, and a certificate that the
    CA given (or the system's) did not sign; each names ``ca_cert=`` / ``$FTDRIVE_CA_CERT``."""
    cluster, ca = https_cluster
    url = cluster.url
    plain = "http://" + url.split("://", 1)[1]

    def refusal(head: str, **kwargs: object) -> str:
        with pytest.raises(HeadUnreachableError) as refused:
            Client(head, state_dir=cluster.dir, timeout=10, **kwargs).health()  # type: ignore[arg-type]
        message = str(refused.value)
        assert "is `ftdrive head` running?" not in message, message
        return message

    said = refusal(plain)
    assert f"the head at {plain} speaks HTTPS; use {url} (with ca_cert= or $FTDRIVE_CA_CERT when a private CA" in said
    said = refusal(url)
    assert f"the head at {url} presented a certificate signed by a CA that is not trusted here" in said, said
    assert said.endswith("give that CA with ca_cert= or $FTDRIVE_CA_CERT"), said
    other_ca = make_certificates(tmp_path / "other")[0]
    said = refusal(url, ca_cert=other_ca)
    assert f"presented a certificate that the CA in {other_ca} did not sign" in said, said
    assert said.endswith("give ca_cert= or $FTDRIVE_CA_CERT the CA that did"), said


def test_calls_that_ride_out_a_restart_do_not_wait_on_a_tls_mistake(https_cluster: Tuple[Cluster, Path]) -> None:
    """A head away is waited for (a restart loses no job), but a TLS mistake does not mend
    itself: ``wait`` and a followed log raise it at once, as a one-off call does."""
    cluster, _ = https_cluster
    job_id = cluster.client().submit(JobSpec(name="seen", command=["true"], min_nodes=1, max_nodes=1)).id
    plain = "http://" + cluster.url.split("://", 1)[1]
    for head, said in [(cluster.url, "signed by a CA that is not trusted here"), (plain, "speaks HTTPS")]:
        client = Client(head, state_dir=cluster.dir, timeout=10)
        calls = [
            lambda: client.wait(job_id, head_return_timeout=3600),
            lambda: list(client.logs(job_id, 0, follow=True, head_return_timeout=3600)),
        ]
        for call in calls:
            outcome: List[BaseException] = []
            caller = threading.Thread(target=lambda: raised(call, outcome), daemon=True)
            caller.start()
            caller.join(WAIT_S)  # a hang guard, an hour short of head_return_timeout
            assert not caller.is_alive(), f"{head}: waited for the head to come back over a TLS mistake"
            assert len(outcome) == 1 and isinstance(outcome[0], HeadUnreachableError), outcome
            assert said in str(outcome[0]) and "never answering" not in str(outcome[0]), outcome[0]


def raised(call: Callable[[], object], into: List[BaseException]) -> None:
    try:
        call()
    except BaseException as e:  # noqa: B036 - handed to the test's thread
        into.append(e)


def test_a_certificate_for_another_name_says_which(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        cluster.start_head(tls=make_certificates(tmp_path / "elsewhere", names="DNS:elsewhere.example,IP:127.0.0.1"))
        by_name = cluster.url.replace("127.0.0.1", "localhost")
        with pytest.raises(HeadUnreachableError) as refused:
            Client(by_name, state_dir=cluster.dir, ca_cert=cluster.tls[0] if cluster.tls else None).health()
        said = str(refused.value)
        assert f"the head at {by_name} presented a certificate that does not name localhost" in said, said
        assert "reissue it with localhost as a subjectAltName" in said, said
    finally:
        cluster.stop()
