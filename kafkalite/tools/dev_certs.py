"""Throwaway TLS certificates for trying out, testing and benchmarking the
Kafka listeners' SSL: a CA, a server certificate for 127.0.0.1/localhost
(and any other names given), a client certificate for mutual TLS, and an
expired server certificate. Not for production: keys are unencrypted.

    python3 -m kafkalite.tools.dev_certs ./certs [--name my.host]

writes ca.pem, server.pem, server.key, client.pem, client.key,
expired.pem, expired.key into the directory. Needs the ``cryptography``
package (a test dependency, not a server one).
"""
from __future__ import annotations

import argparse
import datetime
import ipaddress
import os


def _key():
    from cryptography.hazmat.primitives.asymmetric import ec
    return ec.generate_private_key(ec.SECP256R1())


def _write(path: str, data: bytes, mode: int = 0o644) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def make_certs(directory: str, names=("localhost", "127.0.0.1")) -> dict[str, str]:
    """Write the certificates and keys into ``directory``; their paths by name."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    os.makedirs(directory, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    day = datetime.timedelta(days=1)

    def name(cn: str):
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kafkalite dev"),
                          x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = _key()
    ca = (x509.CertificateBuilder().subject_name(name("kafkalite dev CA"))
          .issuer_name(name("kafkalite dev CA")).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number())
          .not_valid_before(now - day).not_valid_after(now + 365 * day)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))

    def leaf(cn: str, not_before, not_after, usage, sans=()):
        key = _key()
        alt = [x509.IPAddress(ipaddress.ip_address(n)) if n.replace(".", "").isdigit() or ":" in n
               else x509.DNSName(n) for n in sans]
        builder = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(ca.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(not_before).not_valid_after(not_after)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if alt:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        return builder.sign(ca_key, hashes.SHA256()), key

    pem = serialization.Encoding.PEM
    paths = {}

    def save(stem: str, cert, key=None):
        paths[stem] = os.path.join(directory, stem + ".pem")
        _write(paths[stem], cert.public_bytes(pem))
        if key is not None:
            paths[stem + "_key"] = os.path.join(directory, stem + ".key")
            _write(paths[stem + "_key"], key.private_bytes(
                pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()), 0o600)

    save("ca", ca)
    save("server", *leaf(names[0], now - day, now + 365 * day, ExtendedKeyUsageOID.SERVER_AUTH,
                         names))
    save("client", *leaf("client", now - day, now + 365 * day, ExtendedKeyUsageOID.CLIENT_AUTH))
    save("expired", *leaf(names[0], now - 30 * day, now - day, ExtendedKeyUsageOID.SERVER_AUTH,
                          names))
    return paths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m kafkalite.tools.dev_certs",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("directory")
    parser.add_argument("--name", action="append", default=[],
                        help="another host name or IP the server certificate is for (repeatable)")
    args = parser.parse_args(argv)
    paths = make_certs(args.directory, ("localhost", "127.0.0.1", *args.name))
    for stem, path in sorted(paths.items()):
        print(f"{stem}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
