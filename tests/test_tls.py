"""TLS as mongod offers it: `--tlsMode disabled|allowTLS|preferTLS|requireTLS`,
`--tlsCertificateKeyFile`, `--tlsCAFile`, `--tlsAllowConnectionsWithoutCertificates`,
`--tlsAllowInvalidCertificates` (and the config file's `net.tls`). pymongo connects with
`tls=true&tlsCAFile=...`; the certificates are made for the run by `tls_certs.py`."""

import socket
import ssl
import subprocess
import time
import urllib.parse

import pytest
from pymongo import MongoClient
from pymongo import monitoring
from pymongo.errors import OperationFailure, ServerSelectionTimeoutError

from conftest import TailstreamServer, binary_path, eventually, free_port, next_event
from tls_certs import CLIENT_SUBJECT_RFC2253, make_certs

# Long enough for pymongo to try (and be refused) a few times; a refusal never
# succeeds by waiting, so the figure only bounds how long a failing test takes.
REFUSED_WITHIN_MS = 1500

REQUIRE_TLS_ONLY = "The server is configured to only allow SSL connections"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(autouse=True)
def connection_lines(monkeypatch):
    """The servers log connection lines (the suite's servers run with --quiet)."""
    monkeypatch.setenv("TAILSTREAM_LOG", "info")


class TlsServer(TailstreamServer):
    """A server whose readiness ping (and `uri()`) goes through TLS when it needs to."""

    def __init__(self, dbpath, certs, extra_args, ping_with_tls):
        super().__init__(dbpath, extra_args=extra_args)
        self.certs = certs
        self.ping_with_tls = ping_with_tls

    def uri(self, **opts):
        if self.ping_with_tls:
            opts = {**opts, **tls_options(self.certs, "client")}
        return super().uri(**{k: urllib.parse.quote(str(v), safe="") for k, v in opts.items()})


def tls_options(certs, client_cert):
    opts = {"tls": "true", "tlsCAFile": certs["ca"]}
    if client_cert is not None:
        opts["tlsCertificateKeyFile"] = certs[client_cert]
    return opts


@pytest.fixture
def tls_server(tmp_path, certs):
    """Factory: tls_server(mode, ca=True, extra=()) -> a started server with the
    test server certificate (and the test CA for client certificates)."""
    servers = []

    def make(mode, ca=True, extra=()):
        args = ["--tlsMode", mode, "--tlsCertificateKeyFile", str(certs["server"])]
        if ca:
            args += ["--tlsCAFile", str(certs["ca"])]
        srv = TlsServer(tmp_path / f"db{len(servers)}", certs, args + list(extra),
                        ping_with_tls=(mode == "requireTLS"))
        servers.append(srv)
        return srv.start()

    yield make
    for srv in servers:
        try:
            srv.stop(timeout=10)
        except Exception:  # noqa: BLE001
            srv.kill9()
        srv.remove_socket_file()


def tls_client(srv, client_cert="client", timeout_ms=5000):
    opts = {} if client_cert is None else {"tlsCertificateKeyFile": str(srv.certs[client_cert])}
    return MongoClient(
        f"mongodb://127.0.0.1:{srv.port}/", tls=True, tlsCAFile=str(srv.certs["ca"]),
        directConnection=True, serverSelectionTimeoutMS=timeout_ms, **opts,
    )


def plain_client(srv, timeout_ms=5000):
    return MongoClient(f"mongodb://127.0.0.1:{srv.port}/", directConnection=True,
                       serverSelectionTimeoutMS=timeout_ms)


def assert_refused(client):
    with client, pytest.raises(ServerSelectionTimeoutError):
        client.admin.command("ping")


def test_pymongo_over_tls_crud_and_a_change_stream(tls_server):
    srv = tls_server("requireTLS")
    with tls_client(srv) as c:
        coll = c.tlsdb.items
        coll.insert_many([{"_id": i, "n": i} for i in range(5)])
        coll.update_one({"_id": 2}, {"$set": {"n": 20}})
        coll.delete_one({"_id": 4})
        assert [d["n"] for d in coll.find().sort("_id", 1)] == [0, 1, 20, 3]
        with coll.watch() as stream:
            coll.insert_one({"_id": 9, "big": "x" * 200_000})
            event = next_event(stream)
            assert event["operationType"] == "insert"
            assert event["fullDocument"]["big"] == "x" * 200_000
        status = c.admin.command("serverStatus")
        assert status["transportSecurity"]["1.3"] >= 1
        assert set(status["transportSecurity"]) == {"1.0", "1.1", "1.2", "1.3", "unknown"}
        assert status["security"]["SSLServerSubjectName"] == "CN=localhost,O=Tailstream"
        assert status["security"]["SSLServerHasCertificateAuthority"] is True
        assert status["security"]["SSLServerCertificateExpirationDate"] > status["localTime"]
        net = c.admin.command("getCmdLineOpts")["parsed"]["net"]
        assert net["tls"] == {
            "mode": "requireTLS",
            "certificateKeyFile": str(srv.certs["server"]),
            "CAFile": str(srv.certs["ca"]),
        }
    log = srv.log_text()
    assert '"msg":"Waiting for connections"' in log and '"ssl":"on"' in log
    # The client certificate's subject, as mongod writes it.
    assert f'"peerSubject":"{CLIENT_SUBJECT_RFC2253}"' in log
    # A driver closes without TLS's close_notify: an ordinary end, not an error.
    assert "close_notify" not in log


def test_require_tls_refuses_plain_clients_while_serving_others(tls_server):
    srv = tls_server("requireTLS")
    with tls_client(srv) as good:
        good.t.c.insert_one({"_id": 1})
        assert_refused(plain_client(srv, REFUSED_WITHIN_MS))
        assert good.t.c.find_one({"_id": 1}) == {"_id": 1}
    assert REQUIRE_TLS_ONLY in srv.log_text()
    assert '"codeName":"SSLHandshakeFailed"' in srv.log_text()


@pytest.mark.parametrize("mode", ["allowTLS", "preferTLS"])
def test_allow_and_prefer_take_tls_and_plain_clients_on_one_port(tls_server, mode):
    srv = tls_server(mode, ca=False)
    with plain_client(srv) as plain, tls_client(srv, client_cert=None) as tls:
        plain.t.c.insert_one({"_id": "plain"})
        tls.t.c.insert_one({"_id": "tls"})
        assert {d["_id"] for d in tls.t.c.find()} == {"plain", "tls"}
        assert {d["_id"] for d in plain.t.c.find()} == {"plain", "tls"}
        assert tls.admin.command("serverStatus")["transportSecurity"]["1.3"] >= 1
        # Without --tlsCAFile no client certificate is asked for.
        assert "security" in tls.admin.command("serverStatus")
        assert tls.admin.command("serverStatus")["security"][
            "SSLServerHasCertificateAuthority"] is False
    not_using = "is not using SSL."
    if mode == "preferTLS":
        assert not_using in srv.log_text()
    else:
        assert not_using not in srv.log_text()


@pytest.mark.parametrize("client_cert, reason", [
    ("expired", "certificate expired"),
    ("other-client", "UnknownIssuer"),
    (None, "peer sent no certificates"),
])
def test_bad_or_missing_client_certificates_are_refused(tls_server, client_cert, reason):
    srv = tls_server("requireTLS")
    assert_refused(tls_client(srv, client_cert, REFUSED_WITHIN_MS))
    assert reason in srv.log_text()
    with tls_client(srv) as good:
        assert good.admin.command("ping")["ok"] == 1


def test_connections_without_certificates_when_allowed(tls_server):
    srv = tls_server("requireTLS", extra=["--tlsAllowConnectionsWithoutCertificates"])
    with tls_client(srv, client_cert=None) as anonymous:
        assert anonymous.admin.command("ping")["ok"] == 1
    # A certificate shown is still checked.
    assert_refused(tls_client(srv, "other-client", REFUSED_WITHIN_MS))
    opts = tls_client(srv).admin.command("getCmdLineOpts")["parsed"]["net"]["tls"]
    assert opts["allowConnectionsWithoutCertificates"] is True


def test_allow_invalid_certificates_takes_an_expired_one_with_a_warning(tls_server):
    srv = tls_server("requireTLS", extra=["--tlsAllowInvalidCertificates"])
    with tls_client(srv, "expired") as c:
        assert c.admin.command("ping")["ok"] == 1
    assert "SSL peer certificate validation failed" in srv.log_text()
    # Still no entry without a certificate.
    assert_refused(tls_client(srv, None, REFUSED_WITHIN_MS))


def test_the_unix_socket_stays_plain_under_require_tls(tls_server):
    srv = tls_server("requireTLS")
    path = urllib.parse.quote(f"/tmp/mongodb-{srv.port}.sock", safe="")
    with MongoClient(f"mongodb://{path}", directConnection=True,
                     serverSelectionTimeoutMS=5000) as c:
        c.t.c.insert_one({"_id": "unix"})
        assert c.admin.command("whatsmyuri")["you"] == "anonymous unix socket:27017"
    with tls_client(srv) as tls:
        assert tls.t.c.find_one({"_id": "unix"}) == {"_id": "unix"}


def closed_by_server(sock, timeout=10.0):
    """Whether the server closes `sock` (it may send a TLS alert first)."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if sock.recv(4096) == b"":
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False
    return False


def client_hello():
    """A real TLS ClientHello, taken from Python's TLS engine without a socket."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_side=False)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


@pytest.mark.parametrize("mode", ["requireTLS", "allowTLS"])
def test_garbage_before_or_in_the_handshake_closes_that_connection_only(tls_server, mode):
    srv = tls_server(mode)
    with tls_client(srv) as good:
        good.t.c.insert_one({"_id": 1})
        # Bytes that are neither a MongoDB message nor TLS (responseTo not 0).
        with socket.create_connection(("127.0.0.1", srv.port)) as s:
            s.sendall(b"\x16\x03\x01garbage that is no TLS record at all" * 3)
            assert closed_by_server(s)
        # A genuine ClientHello, then garbage where the rest of the handshake goes.
        with socket.create_connection(("127.0.0.1", srv.port)) as s:
            s.sendall(client_hello())
            s.settimeout(10)
            assert s.recv(5)[:1] == b"\x16"  # the ServerHello's record
            s.sendall(b"\x17\x03\x03\x00\x20" + b"\xAA" * 32 + b"\x00" * 64)
            assert closed_by_server(s)
        # Fewer bytes than a message header, then nothing: the server waits, the
        # client leaves, the connection ends.
        with socket.create_connection(("127.0.0.1", srv.port)) as s:
            s.sendall(b"\x00\x01")
        assert good.t.c.find_one({"_id": 1}) == {"_id": 1}
        assert good.admin.command("ping")["ok"] == 1
    assert "SSL handshake failed" in srv.log_text()


def run_binary(tmp_path, args, timeout=30):
    return subprocess.run(
        [str(binary_path()), "--port", str(free_port()), "--dbpath", str(tmp_path / "db"),
         "--nounixsocket", *args],
        capture_output=True, text=True, timeout=timeout,
    )


def test_bad_tls_options_stop_the_start(tmp_path, certs):
    no_key = run_binary(tmp_path, ["--tlsMode", "requireTLS"])
    assert no_key.returncode == 2
    assert "need tlsCertificateKeyFile" in no_key.stderr
    no_mode = run_binary(tmp_path, ["--tlsCertificateKeyFile", str(certs["server"])])
    assert no_mode.returncode == 2
    assert "need to enable TLS via the sslMode/tlsMode flag" in no_mode.stderr
    missing = run_binary(tmp_path, ["--tlsMode", "requireTLS",
                                    "--tlsCertificateKeyFile", str(tmp_path / "nope.pem")])
    assert missing.returncode == 1
    assert "cannot read PEM key file" in missing.stderr and "nope.pem" in missing.stderr
    bad = tmp_path / "bad.pem"
    bad.write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n")
    bad_pem = run_binary(tmp_path, ["--tlsMode", "preferTLS", "--tlsCertificateKeyFile", str(bad)])
    assert bad_pem.returncode == 1
    assert "bad.pem" in bad_pem.stderr
    # A certificate without its key.
    cert_only = tmp_path / "cert-only.pem"
    cert_only.write_text((certs["server"].parent / "server.crt").read_text())
    no_private_key = run_binary(tmp_path, ["--tlsMode", "requireTLS",
                                           "--tlsCertificateKeyFile", str(cert_only)])
    assert no_private_key.returncode == 1
    assert "no private key" in no_private_key.stderr
    bad_ca = run_binary(tmp_path, ["--tlsMode", "requireTLS",
                                   "--tlsCertificateKeyFile", str(certs["server"]),
                                   "--tlsCAFile", str(tmp_path / "no-ca.pem")])
    assert bad_ca.returncode == 1
    assert "cannot read certificate file" in bad_ca.stderr
    bad_mode = run_binary(tmp_path, ["--tlsMode", "sometimes"])
    assert bad_mode.returncode == 2


def test_config_file_net_tls(tmp_path, certs):
    conf = tmp_path / "ts.conf"
    conf.write_text(
        "net:\n  tls:\n"
        "    mode: requireTLS\n"
        f"    certificateKeyFile: {certs['server']}\n"
        f"    CAFile: {certs['ca']}\n"
        "    allowConnectionsWithoutCertificates: true\n"
    )
    srv = TlsServer(tmp_path / "db", certs, ["--config", str(conf)], ping_with_tls=True)
    srv.start()
    try:
        with tls_client(srv, client_cert=None) as c:
            tls = c.admin.command("getCmdLineOpts")["parsed"]["net"]["tls"]
            assert tls == {
                "mode": "requireTLS",
                "certificateKeyFile": str(certs["server"]),
                "CAFile": str(certs["ca"]),
                "allowConnectionsWithoutCertificates": True,
            }
        assert_refused(plain_client(srv, REFUSED_WITHIN_MS))
    finally:
        srv.stop()
        srv.remove_socket_file()


def test_tls_disabled_by_default(fresh_server):
    srv = fresh_server()
    with srv.client() as c:
        status = c.admin.command("serverStatus")
        assert status["transportSecurity"] == {
            "1.0": 0, "1.1": 0, "1.2": 0, "1.3": 0, "unknown": 0}
        assert "security" not in status
        assert "tls" not in c.admin.command("getCmdLineOpts")["parsed"]["net"]
    assert_refused(MongoClient(f"mongodb://127.0.0.1:{srv.port}/", tls=True,
                               tlsAllowInvalidCertificates=True, directConnection=True,
                               serverSelectionTimeoutMS=REFUSED_WITHIN_MS))


def test_tls_versions_are_counted(tls_server, certs):
    """serverStatus's transportSecurity counts each handshake under its version."""
    srv = tls_server("allowTLS", ca=False)
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        ctx = ssl.create_default_context(cafile=str(certs["ca"]))
        ctx.minimum_version = ctx.maximum_version = version
        with socket.create_connection(("127.0.0.1", srv.port)) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                assert tls.version() == {ssl.TLSVersion.TLSv1_2: "TLSv1.2",
                                         ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[version]
    with plain_client(srv) as c:
        def counted():
            counts = c.admin.command("serverStatus")["transportSecurity"]
            return (counts["1.2"], counts["1.3"])
        # The server counts a handshake once it read the client's last message, which
        # may come after this client's next command.
        assert eventually(lambda: counted() == (2, 1))
        assert counted() == (2, 1)


# MONGODB-X509: the client certificate's subject is the user, in `$external`.
X509_READER_ROLES = [{"role": "read", "db": "x509db"}]


class EventListener(monitoring.CommandListener):
    """The names of the commands a client started, in order."""

    def __init__(self):
        self.names = []

    def started(self, event):
        self.names.append(event.command_name)

    def succeeded(self, event):
        pass

    def failed(self, event):
        pass

    def started_command_names(self):
        return list(self.names)


def x509_client(srv, client_cert="client", **kw):
    return MongoClient(
        f"mongodb://127.0.0.1:{srv.port}/", tls=True, tlsCAFile=str(srv.certs["ca"]),
        tlsCertificateKeyFile=str(srv.certs[client_cert]), directConnection=True,
        serverSelectionTimeoutMS=5000, authMechanism="MONGODB-X509", **kw,
    )


def root_client(srv):
    """Creates the first user through the localhost exception; a client logged in as it."""
    with tls_client(srv) as anonymous:
        anonymous.admin.command("createUser", "root", pwd="rootpw", roles=["root"])
    return MongoClient(
        f"mongodb://root:rootpw@127.0.0.1:{srv.port}/", tls=True,
        tlsCAFile=str(srv.certs["ca"]), tlsCertificateKeyFile=str(srv.certs["client"]),
        directConnection=True, serverSelectionTimeoutMS=5000,
    )


def failure_code(fn):
    with pytest.raises(OperationFailure) as e:
        fn()
    return e.value.code


def test_mongodb_x509_logs_the_certificates_subject_in(tls_server):
    srv = tls_server("requireTLS", extra=["--auth"])
    with root_client(srv) as root:
        root.x509db.c.insert_one({"_id": 1})
        # No user of that name in $external yet: mongod says so (11 UserNotFound).
        with x509_client(srv) as unknown:
            assert failure_code(lambda: unknown.x509db.c.find_one()) == 11
        root["$external"].command("createUser", CLIENT_SUBJECT_RFC2253,
                                  roles=X509_READER_ROLES)
    listener = EventListener()
    with x509_client(srv, event_listeners=[listener]) as c:
        assert c.x509db.c.find_one() == {"_id": 1}
        # Logged in inside the handshake's hello: no authenticate command of its own.
        assert listener.started_command_names() == ["find"]
        status = c.admin.command("connectionStatus")["authInfo"]
        assert status["authenticatedUsers"] == [
            {"user": CLIENT_SUBJECT_RFC2253, "db": "$external"}]
        assert status["authenticatedUserRoles"] == X509_READER_ROLES
        # Its roles apply: it may read, not write.
        assert failure_code(lambda: c.x509db.c.insert_one({"_id": 2})) == 13
    # The subject named in the URI must be the certificate's.
    with x509_client(srv, username=CLIENT_SUBJECT_RFC2253) as named:
        assert named.x509db.c.find_one() == {"_id": 1}
    with x509_client(srv, username="CN=someone else") as other:
        assert failure_code(lambda: other.x509db.c.find_one()) == 18
    log = srv.log_text()
    assert '"mechanism":"MONGODB-X509"' in log and '"isSpeculative":true' in log
    assert "There is no x.509 client certificate matching the user." in log


def test_the_authenticate_command_answers_as_mongods(tls_server):
    srv = tls_server("requireTLS", extra=["--auth", "--tlsAllowConnectionsWithoutCertificates"])
    with root_client(srv) as root:
        root["$external"].command("createUser", CLIENT_SUBJECT_RFC2253,
                                  roles=X509_READER_ROLES)
    # One connection (maxPoolSize=1): what one command proves, the next one has.
    with tls_client(srv) as c, MongoClient(
            c.address[0], c.address[1], maxPoolSize=1, tls=True,
            tlsCAFile=str(srv.certs["ca"]), tlsCertificateKeyFile=str(srv.certs["client"]),
            directConnection=True, serverSelectionTimeoutMS=5000) as one:
        x509 = {"mechanism": "MONGODB-X509"}
        # Only in $external (17 ProtocolError); only MONGODB-X509 (18).
        assert failure_code(lambda: one.admin.command("authenticate", 1, **x509)) == 17
        assert failure_code(lambda: one["$external"].command(
            "authenticate", 1, mechanism="SCRAM-SHA-256")) == 18
        assert failure_code(lambda: one["$external"].command("authenticate", 1)) == 18
        assert failure_code(lambda: one.x509db.c.find_one()) == 13
        reply = one["$external"].command("authenticate", 1, **x509)
        assert reply["dbname"] == "$external" and reply["user"] == CLIENT_SUBJECT_RFC2253
        assert one.x509db.c.find_one() is None
    # A TLS client without a certificate has no subject to log in as (18).
    with tls_client(srv, client_cert=None) as anonymous:
        assert failure_code(lambda: anonymous["$external"].command(
            "authenticate", 1, mechanism="MONGODB-X509")) == 18
    assert "No verified subject name available from client" in srv.log_text()


def test_a_certificate_let_through_unverified_names_no_one(tls_server):
    """--tlsAllowInvalidCertificates takes an expired certificate for the connection,
    but its subject is not verified: MONGODB-X509 refuses it, as mongod."""
    srv = tls_server("requireTLS", extra=["--auth", "--tlsAllowInvalidCertificates"])
    expired_subject = "CN=expired,OU=tests,O=Tailstream"
    with root_client(srv) as root:
        for subject in (expired_subject, CLIENT_SUBJECT_RFC2253):
            root["$external"].command("createUser", subject, roles=X509_READER_ROLES)
    with x509_client(srv, "expired") as expired:
        assert failure_code(lambda: expired.x509db.c.find_one()) == 18
    with x509_client(srv) as valid:
        assert valid.x509db.c.find_one() is None
