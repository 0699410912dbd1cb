"""What a SASL login costs on the Kafka listener: SCRAM-SHA-256 and
SCRAM-SHA-512 against PLAIN, in the same run on the same server.

    python benchmarks/bench_sasl_login.py               # 3 rounds of 3 s per mechanism
    python benchmarks/bench_sasl_login.py --seconds 1   # quicker

One server (SASL_PLAINTEXT, one worker), one user with every mechanism at
the default 4096 iterations (``kafkalite users add``). A client on a raw
socket (our protocol codec, scramp's SCRAM client) opens a connection,
logs in (SaslHandshake v1, SaslAuthenticate v2) and closes it, over and
over, for --seconds per mechanism; the mechanisms take turns (the one
going first rotated each round) for --rounds rounds and the best round
of each is kept, so load on a shared machine falls on all alike.
Figures: logins/s, and each mechanism's login time beside PLAIN's. The
client's own share of a SCRAM login (its PBKDF2 of the password, 4096
HMACs) is measured apart and printed, so the server's share can be told. PLAIN's server side is a PBKDF2-HMAC-SHA-512 of 4096 iterations
(credentials.py: the password arrives, its hash is checked); SCRAM's
server does a few HMACs against StoredKey/ServerKey, the 4096 iterations
being the client's work. Timing never fails anything.
"""
from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

import scramp

import common
from kafkalite.protocol import ApiKey, decode_response, encode_request
from kafkalite import launcher

USER, PASSWORD = "bench", "bench-password"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class Wire:
    def __init__(self, host: str, port: int):
        self.sock = socket.create_connection((host, port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation = 0

    def request(self, api_key, version: int, body: dict) -> dict:
        self.correlation += 1
        frame = encode_request(api_key, version, self.correlation, "bench", body)
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        size, = struct.unpack(">i", self._exact(4))
        return decode_response(api_key, version, self._exact(size))[1]

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return bytes(buf)


def login(host: str, port: int, mechanism: str) -> float:
    """One login on a new connection; the seconds the client spent computing."""
    w = Wire(host, port)
    try:
        assert w.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})["error_code"] == 0
        if mechanism == "PLAIN":
            answer = w.request(ApiKey.SASL_AUTHENTICATE, 2,
                               {"auth_bytes": f"\0{USER}\0{PASSWORD}".encode()})
            assert answer["error_code"] == 0, answer
            return 0.0
        client = scramp.ScramClient([mechanism], USER, PASSWORD)
        first = w.request(ApiKey.SASL_AUTHENTICATE, 2,
                          {"auth_bytes": client.get_client_first().encode()})
        t = time.perf_counter()
        client.set_server_first(first["auth_bytes"].decode())
        final_token = client.get_client_final().encode()
        spent = time.perf_counter() - t
        final = w.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": final_token})
        assert final["error_code"] == 0, final
        client.set_server_final(final["auth_bytes"].decode())
        return spent
    finally:
        w.sock.close()


def round_of(host: str, port: int, mechanism: str, seconds: float) -> tuple[float, float]:
    """(logins/s, mean client seconds per login) over ``seconds``."""
    n, client, start = 0, 0.0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        client += login(host, port, mechanism)
        n += 1
    return n / (time.perf_counter() - start), client / n


def main(argv=None) -> int:
    ap = common.parser(__doc__)
    ap.add_argument("--seconds", type=float, default=3.0, help="per mechanism and round")
    common.add_rounds(ap, 3)
    args = common.parse(ap, argv)
    work = tempfile.mkdtemp(prefix="kafkalite-bench-login-")
    data = os.path.join(work, "data")
    subprocess.run([sys.executable, "-m", "kafkalite", "users", "add", USER, "--password",
                    PASSWORD, "--data-dir", data], check=True, capture_output=True,
                   env=launcher.package_env())
    server = launcher.ServerProcess(data, workers=1, extra_args=[
        "--kafka-security-protocol", "SASL_PLAINTEXT"]).start()
    try:
        host, port = server.kafka_bootstrap.rsplit(":", 1)
        rounds = common.alternating(MECHANISMS, args.rounds, lambda mechanism: round_of(
            host, int(port), mechanism, args.seconds))
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    best = {m: rounds.best(m, key=lambda r: r[0]) for m in MECHANISMS}
    plain_rate = best["PLAIN"][0]
    common.say(f"SASL logins on one connection each (best of {args.rounds} rounds of "
               f"{args.seconds:g} s, 4096 iterations)")
    rows = []
    for mechanism in MECHANISMS:
        rate, client = best[mechanism]
        rows += [common.Row(f"{mechanism} login", 1000 / rate, "ms", 1000 / plain_rate, "PLAIN",
                            fmt=".2f"),
                 common.Row(f"{mechanism} logins/s", rate, "/s", plain_rate, "PLAIN")]
        if client:
            rows.append(common.Row(f"{mechanism} client's PBKDF2", client * 1000, "ms",
                                   fmt=".2f"))
    common.say_table(rows)
    common.say_load(rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
