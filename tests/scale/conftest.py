"""Fixtures for the scale tests: tiny shards, a Range-capable HTTP server with fault
injection and a moto S3 server, all on 127.0.0.1, started and stopped by the tests."""

import os

import pytest

from helpers.rangeserver import range_server as http_server
from helpers.shards import write_shards


@pytest.fixture
def shard_dir(tmp_path):
    def make(sizes, **kw):
        return write_shards(str(tmp_path / "shards"), sizes, **kw)
    return make


@pytest.fixture
def http_root(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    with http_server(str(root)) as srv:
        yield srv


@pytest.fixture
def s3(monkeypatch):
    """A moto S3 server on loopback; AWS_* environment pointing boto3 at it."""
    pytest.importorskip("boto3")
    server_mod = pytest.importorskip("moto.server")
    from turboloader.io import remote

    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for var in ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(var, raising=False)
    remote._s3_client.clear()
    import boto3

    client = boto3.client("s3")
    client.create_bucket(Bucket="bucket")
    try:
        yield client
    finally:
        remote._s3_client.clear()
        server.stop()


# -- every store: emulators started here, on 127.0.0.1 ----------------------------------------

AZURITE_ACCOUNT = "devstoreaccount1"
# Azurite's published development key (not a secret: every Azurite accepts it)
AZURITE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
               "KBHBeksoGMGw==")


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port, proc=None, timeout=180):
    import socket
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.1)
    return False


def azurite_command():
    """Azurite's blob server: ``$TURBOLOADER_AZURITE``, the copy .ci/run installs under
    ``$TURBOLOADER_CI_CACHE`` (default ``~/.cache/turboloader-ci``), or one on ``PATH``."""
    import shutil

    env = os.environ.get("TURBOLOADER_AZURITE")
    if env:
        return env
    cache = os.environ.get("TURBOLOADER_CI_CACHE") or os.path.expanduser("~/.cache/turboloader-ci")
    local = os.path.join(cache, "azurite", "node_modules", ".bin", "azurite-blob")
    if os.path.exists(local):
        return local
    return shutil.which("azurite-blob")


def _missing(reason):
    """Skip (a developer's machine without the tool), but fail on CI, which installs it."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI installs it: .ci/run)")
    pytest.skip(reason)


class Store:
    """One store on loopback: ``put(name, data)``, ``url(name)``, ``upstream_port``, and
    ``route(port)`` pointing the client (environment / URL) at a proxy on ``port``."""

    def __init__(self, scheme, upstream_port, put, env):
        self.scheme = scheme
        self.upstream_port = upstream_port
        self._put = put
        self._env = env  # port -> {variable: value}
        self.port = upstream_port
        self.base = None

    def put(self, name, data):
        self._put(name, data)

    def url(self, name):
        if self.scheme == "http":
            return f"http://127.0.0.1:{self.port}/{name}"
        return {"s3": "s3://bucket/", "gs": "gs://bucket/", "az": "az://container/"}[
            self.scheme] + name

    def route(self, monkeypatch, port):
        """Point turboloader's client for this store at ``port`` (a proxy, or the server)."""
        from turboloader.io import remote

        self.port = port
        for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3"):
            monkeypatch.delenv(k, raising=False)
        for k, v in self._env(port).items():
            monkeypatch.setenv(k, v)
        remote._s3_client.clear()
        remote._gcs_session.clear()
        remote._az_client.clear()


@pytest.fixture(scope="session")
def _http_store(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("www"))

    def put(name, data):
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)

    with http_server(root) as srv:
        yield Store("http", srv.server_address[1], put, lambda port: {})


@pytest.fixture(scope="session")
def _s3_store():
    boto3 = pytest.importorskip("boto3")
    server_mod = pytest.importorskip("moto.server")
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "s3cr3t-aws-key",
             "AWS_DEFAULT_REGION": "us-east-1"}
    client = boto3.client("s3", endpoint_url=f"http://{host}:{port}",
                          aws_access_key_id="testing", aws_secret_access_key="x",
                          region_name="us-east-1")
    client.create_bucket(Bucket="bucket")

    def env(p):
        return {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{p}", **creds}

    try:
        yield Store("s3", port, lambda n, d: client.put_object(Bucket="bucket", Key=n, Body=d),
                    env)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def _gs_store():
    emulator = pytest.importorskip("gcp_storage_emulator.server")
    pytest.importorskip("requests")
    port = _free_port()
    server = emulator.create_server("127.0.0.1", port, in_memory=True, default_bucket="bucket")
    server.start()
    import requests

    def put(name, data):
        r = requests.post(f"http://127.0.0.1:{port}/upload/storage/v1/b/bucket/o",
                          params={"uploadType": "media", "name": name}, data=data, timeout=30)
        r.raise_for_status()

    try:
        yield Store("gs", port, put, lambda p: {"STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{p}"})
    finally:
        server.stop()


def _azure_conn(port):
    return (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
            f"AccountKey={AZURITE_KEY};BlobEndpoint=http://127.0.0.1:{port}/{AZURITE_ACCOUNT};")


@pytest.fixture(scope="session")
def _az_store(tmp_path_factory):
    import subprocess

    pytest.importorskip("azure.storage.blob")
    cmd = azurite_command()
    if not cmd:
        _missing("Azurite is not installed (npm install azurite)")
    port = _free_port()
    proc = subprocess.Popen([cmd, "--blobHost", "127.0.0.1", "--blobPort", str(port),
                             "--inMemoryPersistence", "--silent", "--skipApiVersionCheck",
                             "--loose"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        if not _wait_port(port, proc):
            err = proc.stderr.read().decode(errors="replace")[-2000:] if proc.poll() else ""
            pytest.fail(f"Azurite did not start: {err}")
        from azure.storage.blob import BlobServiceClient

        svc = BlobServiceClient.from_connection_string(_azure_conn(port))
        svc.create_container("container")

        def put(name, data):
            svc.get_blob_client("container", name).upload_blob(data, overwrite=True)

        yield Store("az", port, put, lambda p: {"AZURE_STORAGE_CONNECTION_STRING": _azure_conn(p)})
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            proc.kill()


STORES = ["http", "s3", "gs", "az"]


@pytest.fixture(params=STORES)
def store(request, monkeypatch):
    """Each store in turn (HTTP, moto's S3, the GCS emulator, Azurite), its client routed
    straight to the server; ``store.route(monkeypatch, proxy.port)`` puts a proxy between."""
    st = request.getfixturevalue(f"_{request.param}_store")
    st.route(monkeypatch, st.upstream_port)
    yield st
    st.route(monkeypatch, st.upstream_port)
