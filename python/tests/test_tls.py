"""An https head, verified with a CA certificate given as ``ca_cert=`` or ``$FTDRIVE_CA_CERT``.

The head serves plain HTTP on loopback until it terminates TLS itself (DESIGN §11), so the
test puts a TLS-terminating relay in front of it, with a certificate signed by a CA the test
makes with ``openssl``.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest
from conftest import Cluster

from ftdrive import Client, HeadUnreachableError, JobSpec


def make_certificates(directory: Path) -> Tuple[Path, Path, Path]:
    """A CA, and a certificate for localhost/127.0.0.1 signed by it: (ca, cert, key)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed; it makes the test's CA and server certificate")
    ca_key, ca, key, csr, cert = (directory / n for n in ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem"))
    ext = directory / "server.ext"
    ext.write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
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


class TlsRelay:
    """Accepts TLS on a loopback port and relays each connection to ``target`` in plain TCP."""

    def __init__(self, target: Tuple[str, int], cert: Path, key: Path) -> None:
        self.target = target
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(str(cert), str(key))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.open: List[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            client = self.context.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError):
            raw.close()  # e.g. a client that refused our certificate
            return
        upstream = socket.create_connection(self.target)
        self.open += [client, upstream]
        threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()
        self._pump(client, upstream)

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()
        for s in self.open:
            s.close()


@pytest.fixture
def https_head(cluster: Cluster, tmp_path: Path) -> Iterator[Tuple[str, Path]]:
    ca, cert, key = make_certificates(tmp_path)
    host, port = cluster.url.replace("http://", "").rsplit(":", 1)
    relay = TlsRelay((host, int(port)), cert, key)
    try:
        yield f"https://localhost:{relay.port}", ca
    finally:
        relay.close()


def test_an_https_head_verified_with_a_ca_certificate(
    cluster: Cluster, https_head: Tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, ca = https_head
    client = Client(url, state_dir=cluster.dir, ca_cert=ca)
    assert client.health().nodes >= 3
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
    assert Client(url, state_dir=cluster.dir).health().nodes >= 3
    monkeypatch.delenv("FTDRIVE_CA_CERT")
    with pytest.raises(HeadUnreachableError, match="CERTIFICATE_VERIFY_FAILED"):
        Client(url, state_dir=cluster.dir, timeout=10).health()
