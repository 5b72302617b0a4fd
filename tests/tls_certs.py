"""Test certificates for the TLS tests, made at test time with the `openssl` command
(no private key is ever committed): a CA, a server certificate for localhost and
127.0.0.1, a client certificate, an expired client certificate, and a second CA with
a client certificate of its own.

    python3 tests/tls_certs.py DIR     # writes them into DIR (for trying TLS by hand)

Every `*.pem` that a server or a client presents holds the certificate followed by
its key, as `--tlsCertificateKeyFile` and pymongo's `tlsCertificateKeyFile` take it.
"""

import shutil
import subprocess
import sys
from pathlib import Path

# The openssl configuration: the extensions of each kind of certificate, and what
# `openssl ca` needs to sign one with dates in the past (the expired certificate:
# `openssl x509 -req` cannot back-date one before OpenSSL 3.4).
OPENSSL_CNF = """\
[ca]
default_ca = test_ca

[test_ca]
database = {dir}/index.txt
new_certs_dir = {dir}/issued
serial = {dir}/serial
default_md = sha256
policy = any_name
copy_extensions = none
unique_subject = no

[any_name]
commonName = supplied
organizationalUnitName = optional
organizationName = optional

[req]
distinguished_name = req_dn
[req_dn]

[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash

[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid

[client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""

DAYS = "30"
# Elliptic-curve keys: generated in milliseconds (RSA keys take a while each).
NEW_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

CLIENT_SUBJECT = "/O=Tailstream/OU=tests/CN=client"
# As the server shows it (RFC 2253: the last name first).
CLIENT_SUBJECT_RFC2253 = "CN=client,OU=tests,O=Tailstream"


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d, name, subject):
    openssl("req", "-x509", *NEW_KEY, "-keyout", f"{name}.key", "-out", f"{name}.pem",
            "-days", DAYS, "-subj", subject, "-config", "openssl.cnf",
            "-extensions", "ca_ext", cwd=d)


def make_leaf(d, name, subject, ca, ext, expired=False):
    """Signs `name`'s certificate with `ca`; writes `name.pem` (certificate then key)."""
    openssl("req", "-new", *NEW_KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", subject, "-config", "openssl.cnf", cwd=d)
    if expired:
        openssl("ca", "-batch", "-config", "openssl.cnf", "-cert", f"{ca}.pem",
                "-keyfile", f"{ca}.key", "-extensions", ext, "-notext",
                "-startdate", "20200101000000Z", "-enddate", "20200201000000Z",
                "-in", f"{name}.csr", "-out", f"{name}.crt", cwd=d)
    else:
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem",
                "-CAkey", f"{ca}.key", "-CAcreateserial", "-days", DAYS, "-sha256",
                "-extfile", "openssl.cnf", "-extensions", ext, "-out", f"{name}.crt",
                cwd=d)
    pem = (d / f"{name}.crt").read_text() + (d / f"{name}.key").read_text()
    (d / f"{name}.pem").write_text(pem)


def make_certs(d):
    """Writes the certificates into directory `d`; returns their paths by name."""
    if shutil.which("openssl") is None:
        raise RuntimeError("the TLS tests need the openssl command (apt-get install openssl)")
    d = Path(d)
    (d / "issued").mkdir(parents=True, exist_ok=True)
    (d / "index.txt").write_text("")
    (d / "serial").write_text("1000\n")
    (d / "openssl.cnf").write_text(OPENSSL_CNF.format(dir=d))
    make_ca(d, "ca", "/O=Tailstream/CN=Tailstream Test CA")
    make_ca(d, "other-ca", "/O=Elsewhere/CN=Another CA")
    make_leaf(d, "server", "/O=Tailstream/CN=localhost", "ca", "server_ext")
    make_leaf(d, "client", CLIENT_SUBJECT, "ca", "client_ext")
    make_leaf(d, "expired", "/O=Tailstream/OU=tests/CN=expired", "ca", "client_ext",
              expired=True)
    make_leaf(d, "other-client", "/O=Elsewhere/CN=client", "other-ca", "client_ext")
    return {
        name: d / f"{name}.pem"
        for name in ("ca", "other-ca", "server", "client", "expired", "other-client")
    }


if __name__ == "__main__":
    for name, path in make_certs(Path(sys.argv[1])).items():
        print(f"{name}: {path}")
