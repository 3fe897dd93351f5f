"""LeaseClient over TLS to a real `tollgate serve` serving TLS, with
certificates made by the openssl command for the test."""

import shutil
import subprocess

import pytest

import tollgate
from conftest import DOORMAN_CONFIG, PATIENCE, Server
from test_lease import wait_for_source

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "1", "-subj", f"/CN={name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)


@pytest.fixture
def tls_server(tmp_path):
    make_ca(tmp_path, "ca")
    make_ca(tmp_path, "other-ca")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost", cwd=tmp_path)
    (tmp_path / "ext.cnf").write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n"
    )
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.pem", "-days", "1", "-extfile", "ext.cnf", cwd=tmp_path)
    server = Server("serve", DOORMAN_CONFIG, tmp_path,
                    extra=["--tls-cert", str(tmp_path / "server.pem"), "--tls-key", str(tmp_path / "server.key")])
    yield server, tmp_path
    server.stop()


def test_a_client_trusting_the_ca_is_granted_and_one_trusting_another_is_not(tls_server):
    server, d = tls_server
    with tollgate.LeaseClient([server.address], tls=tollgate.Tls(d / "ca.pem")) as client:
        assert wait_for_source(client.resource("tls", 40), "lease").capacity == 40
    with tollgate.LeaseClient([server.address], tls=tollgate.Tls(str(d / "other-ca.pem")),
                              rpc_timeout=0.5) as client:
        refused = client.resource("tls", 40, expiry="pessimistic")
        # The handshake fails, and no retry can fix it: the wait raises at
        # once, naming the cause and the fix.
        with pytest.raises(tollgate.LeaseError) as raised:
            refused.wait(timeout=PATIENCE)
        assert "TLS failed" in str(raised.value)
        assert "not signed by the CA this client trusts" in str(raised.value)
        assert refused.current().source == "pending" and refused.capacity == 0
        with pytest.raises(tollgate.LeaseError):
            refused.release()


def test_tls_repr_names_its_files(tls_server):
    _, d = tls_server
    tls = tollgate.Tls(d / "ca.pem", domain="localhost")
    assert repr(tls) == f"Tls({str(d / 'ca.pem')!r}, domain='localhost')"
    with pytest.raises(ValueError, match="go together"):
        tollgate.Tls(d / "ca.pem", key=d / "server.key")
