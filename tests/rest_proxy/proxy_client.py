"""What the proxy's tests speak HTTP with: one call (urllib, as curl sends it)
and the v3 streaming mode over a raw socket (a chunked body written by one
thread while the answers, a chunked body too, are read, as Confluent's
streaming clients do)."""
from __future__ import annotations

import http.client
import json
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request

V2 = "application/vnd.kafka.v2+json"
V2_JSON = "application/vnd.kafka.json.v2+json"
V2_BINARY = "application/vnd.kafka.binary.v2+json"


def call(url: str, method: str = "GET", body=None, content_type: str = "application/json",
         accept: str | None = None, raw: bytes | None = None, headers=None):
    """(status, decoded JSON answer or None, content type)."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(url, method=method, data=data)
    if data is not None:
        request.add_header("Content-Type", content_type)
    if accept:
        request.add_header("Accept", accept)
    for k, v in (headers or {}).items():
        request.add_header(k, v)
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text else None, resp.headers["Content-Type"]
    except urllib.error.HTTPError as exc:
        text = exc.read()
        try:
            answer = json.loads(text) if text else None
        except ValueError:
            answer = text
        return exc.code, answer, exc.headers["Content-Type"]


def stream_records(url: str, records, chunk_records: int = 500, headers=None):
    """POST ``records`` (dicts) to a v3 records ``url`` as one chunked body
    of ``chunk_records`` records a chunk; (status line, [answers]), or
    (status line, the body's bytes) when the request was refused whole."""
    parts = urllib.parse.urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=120)
    head = (f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n")
    for k, v in (headers or {}).items():
        head += f"{k}: {v}\r\n"
    sock.sendall((head + "\r\n").encode())

    def write() -> None:
        try:
            send()
        except OSError:
            pass            # refused before the body ended (a 401): the answer says why

    def send() -> None:
        batch = []
        for i, r in enumerate(records, 1):
            batch.append(json.dumps(r))
            if i % chunk_records == 0:
                data = "".join(batch).encode()
                sock.sendall(b"%x\r\n%s\r\n" % (len(data), data))
                batch = []
        if batch:
            data = "".join(batch).encode()
            sock.sendall(b"%x\r\n%s\r\n" % (len(data), data))
        sock.sendall(b"0\r\n\r\n")
    writer = threading.Thread(target=write)
    writer.start()
    resp = http.client.HTTPResponse(sock)
    resp.begin()
    body = resp.read()                      # to the answer's last chunk
    writer.join()
    sock.close()
    status = f"HTTP/1.1 {resp.status} {resp.reason}"
    if resp.status != 200:
        return status, body                 # an error answered for the whole request
    return status, [json.loads(line) for line in body.splitlines() if line.strip()]


def dechunked(raw: bytes) -> tuple[bytes, bool]:
    """The body so far of an answer whose bytes (head included) are
    ``raw``, with chunked transfer coding, and whether it is whole."""
    rest = raw.partition(b"\r\n\r\n")[2]
    out = b""
    while True:
        line, crlf, after = rest.partition(b"\r\n")
        if not crlf:
            return out, False
        size = int(line.split(b";")[0], 16)
        if size == 0:
            return out, True
        if len(after) < size + 2:
            return out, False
        out, rest = out + after[:size], after[size + 2:]
