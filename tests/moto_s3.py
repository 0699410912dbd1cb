"""A real S3 API for the tiered storage tests: moto's server (moto[server])
on a free port of 127.0.0.1, in a thread of the test process (a server the
tests start reaches it over HTTP like any S3 endpoint), with a bucket."""
import contextlib
import os

TEST_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                    "AWS_DEFAULT_REGION": "us-east-1"}


@contextlib.contextmanager
def moto_s3(bucket: str = "tiered"):
    """Yields the endpoint URL of an S3 API holding an empty ``bucket``; the
    AWS credential variables are set to moto's test ones meanwhile."""
    import boto3
    from moto.server import ThreadedMotoServer
    saved = {k: os.environ.get(k) for k in TEST_CREDENTIALS}
    os.environ.update(TEST_CREDENTIALS)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
        yield endpoint
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
