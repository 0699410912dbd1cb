"""A real S3 API for the tiered storage tests: moto's server (moto[server])
on a free port of 127.0.0.1, in a thread of the test process (a server the
tests start reaches it over HTTP like any S3 endpoint), with a bucket.

``MotoS3Server`` can also be stopped and started again on the same port, as
an object store that goes down for a while: ``stop`` closes the listening
socket and every open connection (a client's next request is refused, one
on a kept-alive connection is reset), ``start`` serves again with the same
buckets and objects (moto keeps them in this process's memory, as S3 keeps
them through an outage of its endpoint). ``hold`` and ``release`` make
an outage of another kind: the endpoint stops answering, requests wait."""
import contextlib
import os
import socket
import threading
import time

TEST_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                    "AWS_DEFAULT_REGION": "us-east-1"}


HOLD_MAX_S = 120.0      # the longest ``hold`` keeps a request unanswered


class MotoS3Server:
    """moto's S3 API on 127.0.0.1 (``endpoint``). ``put_delay`` holds each
    PUT that long before the store takes it (a store farther away than
    memory, so that a copy takes a while); ``stop_before``, when set, is
    called with each request's method and path, and a true answer stops the
    store before that request reaches it (the request's connection is
    closed unanswered): an outage starting at a chosen moment.
    ``on_request``, when set, is called with each request's method and
    path as it arrives (what the store was asked, counted by a test)."""

    def __init__(self):
        self.port = 0
        self.put_delay = 0.0
        self.stop_before = None
        self.on_request = None
        self.requests = 0
        self._held: threading.Event | None = None
        self._server = None
        self._thread = None
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> "MotoS3Server":
        from moto.server import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import ThreadedWSGIServer
        app = DomainDispatcherApplication(create_backend_app)
        owner = self

        class Server(ThreadedWSGIServer):
            def process_request(self, request, client_address):
                with owner._lock:
                    owner._connections.add(request)
                super().process_request(request, client_address)

            def shutdown_request(self, request):
                with owner._lock:
                    owner._connections.discard(request)
                super().shutdown_request(request)

        def gate(environ, start_response):
            method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
            self.requests += 1
            if self.on_request is not None:
                self.on_request(method, path)
            held = self._held
            if held is not None:
                held.wait(HOLD_MAX_S)   # no answer until release(), then a failure
                start_response("503 Service Unavailable", [("Content-Length", "0")])
                return [b""]
            if self.stop_before is not None and self.stop_before(method, path):
                self.stop_before = None
                self.stop()         # this request's connection too: it goes unanswered
                start_response("503 Service Unavailable", [("Content-Length", "0")])
                return [b""]
            if method == "PUT" and self.put_delay:
                time.sleep(self.put_delay)
            if method == "POST" and "uploadId=" in environ.get("QUERY_STRING", ""):
                return _completed_as_s3_answers(app, environ, start_response)
            return app(environ, start_response)

        # the same port after a stop (SO_REUSEADDR: HTTPServer's allow_reuse_address)
        for attempt in range(100):
            try:
                server = Server("127.0.0.1", self.port, gate)
                break
            except OSError:
                if not self.port or attempt == 99:
                    raise
                time.sleep(0.05)
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def hold(self) -> None:
        """The store stops answering (a network partition, not a refused
        connection): each request from now on waits, unanswered, until
        ``release``, and then fails (503), as a client's requests to an
        unreachable endpoint time out."""
        self._held = threading.Event()

    def release(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.set()

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.socket.close()
        with self._lock:
            open_now, self._connections = list(self._connections), set()
        for conn in open_now:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _completed_as_s3_answers(app, environ, start_response):
    """moto's answer to CompleteMultipartUpload with S3's root element.
    moto (5.2) names it ``CompleteMultipartUploadResponse``; S3 answers
    ``CompleteMultipartUploadResult``, and Arrow's S3 client (pyiceberg's
    PyArrowFileIO, whose every file is a multipart upload) takes any other
    answer for an error embedded in a 200 and fails the write. boto3 reads
    either."""
    answered = {}

    def keep(status, headers, exc_info=None):
        answered.update(status=status, headers=headers)
    body = b"".join(app(environ, keep))
    body = body.replace(b"CompleteMultipartUploadResponse", b"CompleteMultipartUploadResult")
    headers = [(k, str(len(body)) if k.lower() == "content-length" else v)
               for k, v in answered["headers"]]
    start_response(answered["status"], headers)
    return [body]


@contextlib.contextmanager
def moto_s3_server(bucket: str = "tiered"):
    """Yields a started MotoS3Server holding an empty ``bucket``; the AWS
    credential variables are set to moto's test ones meanwhile."""
    import boto3
    saved = {k: os.environ.get(k) for k in TEST_CREDENTIALS}
    os.environ.update(TEST_CREDENTIALS)
    server = MotoS3Server().start()
    try:
        boto3.client("s3", endpoint_url=server.endpoint).create_bucket(Bucket=bucket)
        yield server
    finally:
        server.stop_before = None
        server.release()
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def moto_s3(bucket: str = "tiered"):
    """Yields the endpoint URL of an S3 API holding an empty ``bucket``; the
    AWS credential variables are set to moto's test ones meanwhile."""
    with moto_s3_server(bucket) as server:
        yield server.endpoint


@contextlib.contextmanager
def tiered_store_config(kind: str, tmp_path, bucket: str):
    """A server config file that tiers to a ``kind`` store ("directory" in
    ``tmp_path``, or "s3": ``bucket`` on a moto server), and the store as a
    client of it sees it: (config path, RemoteStorageManager)."""
    from kafkalite.storage.remote.s3_storage import S3RemoteStorage
    from kafkalite.storage.remote.storage_manager import LocalDirectoryRemoteStorage
    config = tmp_path / "tiered.toml"
    if kind == "directory":
        remote = str(tmp_path / "remote")
        config.write_text('"remote.log.storage.system.enable" = true\n'
                          f'remote_log_storage_dir = "{remote}"\n')
        yield config, LocalDirectoryRemoteStorage(remote)
        return
    with moto_s3(bucket) as endpoint:
        config.write_text('"remote.log.storage.system.enable" = true\n'
                          f'remote_log_storage_s3_bucket = "{bucket}"\n'
                          f'remote_log_storage_s3_endpoint = "{endpoint}"\n')
        yield config, S3RemoteStorage(bucket, endpoint_url=endpoint)
