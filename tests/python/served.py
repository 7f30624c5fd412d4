"""A real `oncelake serve` on loopback TCP for the tests of this directory, and calls to its HTTP
API with its bearer token (Python's standard library only). Not a test module."""

import json
import os
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("ONCELAKE_BIN") or str(
    Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "debug" / "oncelake"
)


def pipeline_toml(*stages):
    """A pipeline definition's text: per stage (name, code version, upstream stages[, max
    attempts])."""
    out = []
    for name, code_version, upstream, *max_attempts in stages:
        out.append(f"[stage.{name}]\ncode_version = {code_version}\n")
        if upstream:
            out.append("upstream = [" + ", ".join(f'"{u}"' for u in upstream) + "]\n")
        if max_attempts:
            out.append(f"max_attempts = {max_attempts[0]}\n")
    return "".join(out)


class Server:
    """`oncelake serve STORE --listen 127.0.0.1:0`, and calls to it with its bearer token."""

    def __init__(self, store):
        subprocess.run([BIN, "init", str(store)], check=True, capture_output=True)
        self.proc = subprocess.Popen([BIN, "serve", str(store), "--listen", "127.0.0.1:0"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert "serving" in line, f"serve printed {line!r}, {self.proc.stderr.read()}"
        info = json.loads((store / "serve.json").read_text())
        self.base = "http://" + info["address"].removeprefix("tcp:")
        self.token = info["token"]

    def call(self, method, path, body=None, token=True, raw=False):
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if token:
            req.add_header("Authorization", "Bearer " + self.token)
        with urllib.request.urlopen(req, timeout=30) as r:
            out = r.read()
            return out if raw else json.loads(out)

    def put(self, unit, version, data, token=None):
        q = urllib.parse.urlencode({"unit": unit, "version": version} | ({"token": token} if token else {}))
        return self.call("PUT", "/v1/put?" + q, data)["outcome"]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
