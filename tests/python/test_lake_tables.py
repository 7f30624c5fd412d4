"""Lake tables published into a shared lake (SPEC R21, R23), read by delta-rs from the lake itself:
a shared directory (file://) and, when `weed` is found (ONCELAKE_WEED or PATH), SeaweedFS over S3.
Checked against a model of the rows each unit holds; the table is the lake's, so a second node lists
it without creating it and publishes the next versions, read by delta-rs as the model says."""

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest

from test_tables import BIN, delta_info, delta_rows, parquet_file, partitions, read


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_weed():
    w = os.environ.get("ONCELAKE_WEED") or shutil.which("weed")
    return w if w and os.path.isfile(w) else None


class Weed:
    """A `weed mini` on loopback ports serving the bucket `lake`, stopped by its own pid."""

    def __init__(self, weed, tmp):
        ports = {n: free_port() for n in ["master", "volume", "filer", "s3", "admin"]}
        grpc = {n: free_port() for n in ports}
        args = [weed, "mini", f"-dir={tmp}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-bucket=lake",
                "-admin.ui=false", "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0"]
        args += [f"-{n}.port={p}" for n, p in ports.items()]
        args += [f"-{n}.port.grpc={p}" for n, p in grpc.items()]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.endpoint = f"http://127.0.0.1:{ports['s3']}"
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"{self.endpoint}/lake", timeout=2)
                return
            except Exception:
                time.sleep(0.2)
        self.stop()
        pytest.fail("weed mini did not serve the bucket within 60 s")

    def env(self):
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "oncelake",
                "AWS_SECRET_ACCESS_KEY": "oncelake", "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def ol(env, *args, check=True):
    p = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, env={**os.environ, **env})
    if check and p.returncode != 0:
        raise AssertionError(f"oncelake {args} exited {p.returncode}: {p.stderr}")
    return p


def delta_equals_model(table_path, storage_options, model):
    """Asserts that delta-rs reads exactly the model's rows from the table; returns its info."""
    want = sorted(tuple(sorted(r.items())) for rows in model.values() for r in rows)
    got = read("delta_rows", table_path, storage_options=storage_options)
    assert sorted(tuple(tuple(p) for p in r) for r in got) == want
    return read("delta_info", table_path, storage_options=storage_options)


def lake_table_is_published_and_read_from_the_lake(tmp_path, url, table_path, env, storage_options):
    node1, node2, files = tmp_path / "node1", tmp_path / "node2", tmp_path / "files"
    files.mkdir()
    ol(env, "init", node1, "--lake", url)
    ol(env, "table", "create", node1, "sales", "--prefix", "sales/")
    model, n = {}, 0
    for round_ in range(2):
        for day in range(3):
            n += 1
            unit = f"sales/day={day}/part-{n % 2}"
            rows = [{"id": n * 10 + i, "name": f"r{round_}"} for i in range(n % 3 + 1)]
            ol(env, "put", node1, unit, n, parquet_file(files / f"f{n}.parquet", rows))
            model[unit] = [dict(r, **partitions(unit)) for r in rows]
        ol(env, "table", "publish", node1, "sales")
    info = delta_equals_model(table_path, storage_options, model)
    assert info["version"] == n - 1 and info["partition_columns"] == ["day"]
    # A second node lists the lake's table without creating it and publishes the next version.
    ol(env, "init", node2, "--lake", url)
    listed = [json.loads(l) for l in ol(env, "table", "ls", node2, "--json").stdout.splitlines() if l.strip()]
    assert [t["table"] for t in listed] == ["sales"], listed
    n += 1
    unit = "sales/day=0/part-9"
    rows = [{"id": 9000 + i, "name": "node2"} for i in range(2)]
    ol(env, "put", node2, unit, n, parquet_file(files / f"f{n}.parquet", rows))
    model[unit] = [dict(r, **partitions(unit)) for r in rows]
    ol(env, "table", "publish", node2, "sales")
    assert delta_equals_model(table_path, storage_options, model)["version"] == n - 1


def test_a_table_published_into_a_file_lake_is_read_by_delta_rs_from_the_lake(tmp_path):
    lake = tmp_path / "lake"
    lake_table_is_published_and_read_from_the_lake(
        tmp_path, f"file://{lake}", lake / "tables" / "sales", {}, None)


def test_a_table_published_into_seaweedfs_is_read_by_delta_rs_over_s3(tmp_path):
    weed = find_weed()
    if weed is None:
        pytest.skip("no weed (set ONCELAKE_WEED or put weed on PATH)")
    (tmp_path / "weed").mkdir()
    server = Weed(weed, tmp_path / "weed")
    try:
        env = server.env()
        lake_table_is_published_and_read_from_the_lake(
            tmp_path, "s3://lake/sales", "s3://lake/sales/tables/sales", env, dict(env))
    finally:
        server.stop()
