"""The status page of `oncelake serve` (SPEC R25, docs/server.md "The status page") in a real
headless chromium, driven over WebDriver (chromedriver) with nothing but the standard library.

A real server on loopback TCP (bearer token) gets commits, a duplicate, a conflict, a stale and a
busy rejection, a claim, a GC, a verify and a pipeline whose cells are done, running, ready,
failed and cut off. The page, opened with the token in the URL's fragment, must show the numbers
`/v1/stats` and `/v1/pipeline/status` give (and the model of what the test did), then a commit
made through the API must appear without a reload. The screenshot is saved as
target/status-page.png (docs/status-page.png is a copy of it).

Run by `.ci/run` with the venv's python: `pytest tests/python`. The binary is `$ONCELAKE_BIN`
(default: target/debug/oncelake). Without chromium and chromedriver the browser test is skipped,
unless ONCELAKE_REQUIRE_BROWSER=1 (set by `.ci/run`, which installs them): then it fails.
"""

import base64
import http.client
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from served import BIN, Server, pipeline_toml

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "target" / "status-page.png"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1440,1250", "--hide-scrollbars",
]
# ingest -> clean -> {daily, weekly}; max_attempts = 1 on daily so one failure is final.
PIPELINE = pipeline_toml(
    ("ingest", 1, []), ("clean", 2, ["ingest"]), ("daily", 1, ["clean"], 1), ("weekly", 1, ["clean"])
)
STATES = ("done", "ready", "running", "failed", "blocked", "cut_off")


def browser_or_skip():
    """chromium and chromedriver, or a skip (a failure when ONCELAKE_REQUIRE_BROWSER is set)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium and driver:
        return chromium, driver
    why = "chromium and chromedriver are needed (Debian: apt-get install chromium chromium-driver)"
    if os.environ.get("ONCELAKE_REQUIRE_BROWSER") == "1":
        pytest.fail(why + "; ONCELAKE_REQUIRE_BROWSER=1 says this run must have them")
    pytest.skip(why)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Browser:
    """A chromium session through chromedriver's WebDriver API."""

    def __init__(self, chromium, driver, profile):
        port = free_port()
        self.driver = subprocess.Popen([driver, f"--port={port}"], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{port}"
        wait_for(lambda: self.ready(), 30, "chromedriver to answer")
        caps = {"browserName": "chrome", "goog:chromeOptions": {
            "binary": chromium, "args": CHROMIUM_ARGS + [f"--user-data-dir={profile}"]}}
        self.session = self.cmd("POST", "/session", {"capabilities": {"alwaysMatch": caps}})["sessionId"]

    def ready(self):
        try:
            return self.cmd("GET", "/status")["ready"]
        except OSError:
            return False

    def cmd(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return json.loads(r.read())["value"]
        except urllib.error.HTTPError as e:
            raise AssertionError(f"WebDriver {method} {path}: {e.read().decode()}") from None

    def go(self, url):
        self.cmd("POST", f"/session/{self.session}/url", {"url": url})

    def js(self, script, *args):
        return self.cmd("POST", f"/session/{self.session}/execute/sync", {"script": script, "args": list(args)})

    def screenshot(self, path):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self.cmd("GET", f"/session/{self.session}/screenshot")))

    def quit(self):
        try:
            self.cmd("DELETE", f"/session/{self.session}")
        finally:
            self.driver.terminate()
            self.driver.wait(timeout=30)


def wait_for(cond, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"waited {seconds} s for {what}")


def run_pipeline(srv):
    """Works the pipeline's cells through the API into every state; returns the expected counts
    per stage (the model the page is checked against)."""
    srv.call("POST", "/v1/pipeline/define", {"pipeline": PIPELINE})
    units = [f"events/d={d}" for d in range(1, 7)]
    for u in units:
        srv.call("PUT", "/v1/pipeline/source?" + urllib.parse.urlencode({"unit": u, "version": 1}), b"raw " + u.encode())

    def cell(stage, unit):
        ready = srv.call("POST", "/v1/pipeline/ready", {"pipeline": PIPELINE, "limit": 1000})["cells"]
        return next(c for c in ready if c["stage"] == stage and c["unit"] == unit)

    def claim(stage, unit, ttl_ms=600_000):
        got = srv.call("POST", "/v1/pipeline/claim", {"pipeline": PIPELINE, "cell": cell(stage, unit),
                                                      "worker": "w-" + stage, "ttl_ms": ttl_ms})
        assert got["claim"] == "granted", got
        c, lease = got["cell"], got["lease"]
        return {"unit": c["unit"], "stage": c["stage"], "source_version": c["source_version"],
                "worker": "w-" + stage, "token": lease["token"]}

    def complete(stage, unit, output=None):
        attempt = claim(stage, unit)
        head = json.dumps({"pipeline": PIPELINE, "attempt": attempt}).encode()
        out = output if output is not None else f"{stage} of {unit}".encode()
        assert srv.call("POST", "/v1/pipeline/complete", head + b"\n" + out)["outcome"] == "committed"

    # d=1..4 through ingest and clean; d=1..2 daily and weekly; d=3 daily fails (final);
    # d=4 weekly is running; d=5 ingest done; d=6 untouched.
    for u in units[:5]:
        complete("ingest", u)
    for u in units[:4]:
        complete("clean", u)
    for u in units[:2]:
        complete("daily", u)
        complete("weekly", u)
    attempt = claim("daily", units[2])
    assert srv.call("POST", "/v1/pipeline/fail", {"pipeline": PIPELINE, "attempt": attempt,
                                                  "error": "no rows for d=3"})["outcome"] == "recorded"
    claim("weekly", units[3])
    # A new source version of d=1 whose ingest output is unchanged: clean, daily and weekly are
    # cut off (SPEC R24), not re-run.
    srv.call("PUT", "/v1/pipeline/source?" + urllib.parse.urlencode({"unit": units[0], "version": 2}), b"raw v2")
    complete("ingest", units[0])
    return {
        "ingest": {"done": 5, "ready": 1, "running": 0, "failed": 0, "blocked": 0, "cut_off": 0},
        "clean": {"done": 4, "ready": 1, "running": 0, "failed": 0, "blocked": 1, "cut_off": 1},
        "daily": {"done": 2, "ready": 1, "running": 0, "failed": 1, "blocked": 2, "cut_off": 1},
        "weekly": {"done": 2, "ready": 1, "running": 1, "failed": 0, "blocked": 2, "cut_off": 1},
    }


def fill_store(srv):
    """Commits and rejections of every kind the page counts; returns the model of the counters."""
    for d in range(1, 9):
        assert srv.put(f"orders/d={d}", 1, f"orders of day {d}\n".encode() * 40) == "committed"
    assert srv.put("orders/d=1", 1, b"orders of day 1\n" * 40) == "duplicate"
    assert srv.put("orders/d=2", 1, b"other bytes") == "conflict"
    assert srv.put("orders/d=3", 2, b"orders of day 3, v2\n" * 40) == "committed"
    assert srv.put("orders/d=3", 1, b"old") == "stale"
    lease = srv.call("POST", "/v1/claim", {"unit": "orders/d=9", "source_version": 1,
                                           "worker": "loader-7", "ttl_ms": 600_000})
    assert lease["claim"] == "granted", lease
    assert srv.put("orders/d=9", 1, b"no lease") == "busy"
    assert srv.put("orders/d=9", 1, b"wrong lease", token=lease["lease"]["token"] + 1) == "fenced"
    return {"duplicates_collapsed": 1, "conflicts": 1, "stale_rejections": 1, "busy_rejections": 1,
            "fenced_rejections": 1}


def cards(browser):
    return browser.js("""return Object.fromEntries([...document.querySelectorAll('.card')].map(c =>
        [c.dataset.key, [c.querySelector('.value').dataset.value, c.querySelector('.value').textContent]]));""")


def shown_seq(browser):
    c = cards(browser).get("seq")
    return int(c[0]) if c else -1


def test_status_page_in_chromium(tmp_path):
    chromium, driver = browser_or_skip()
    srv = Server(tmp_path / "lake")
    browser = None
    try:
        model = fill_store(srv)
        pipeline_model = run_pipeline(srv)
        srv.call("POST", "/v1/gc", {"grace_ms": 0})
        srv.call("POST", "/v1/verify", {})
        stats = srv.call("GET", "/v1/stats")

        browser = Browser(chromium, driver, tmp_path / "profile")
        browser.go(srv.base + "/#token=" + srv.token)
        wait_for(lambda: shown_seq(browser) == stats["seq"], 30, "the page to show the store's seq")
        assert browser.js("return location.hash") == "", "the token stays out of the address bar"

        # The numbers shown are /v1/stats' (the store is idle) and the model's.
        shown = cards(browser)
        for key, (value, text) in shown.items():
            if key.startswith("commit_p"):
                continue
            want = stats["counters"].get(key, stats.get(key))
            assert int(value) == want, f"{key}: page {value}, /v1/stats {want}"
            assert text.replace(",", "") == value, f"{key} is shown as {text!r}"
        for key, want in model.items():
            assert int(shown[key][0]) == want, f"{key}: page {shown[key][0]}, model {want}"
        assert int(shown["units"][0]) == stats["units"] > 0
        assert stats["counters"]["commits"] == int(shown["commits"][0]) > 0

        # The DAG: one node per stage with the counts of /v1/pipeline/status and of the model.
        status = srv.call("POST", "/v1/pipeline/status", {"pipeline": PIPELINE})
        nodes = browser.js("""return Object.fromEntries([...document.querySelectorAll('.stage-node')]
            .map(g => [g.dataset.stage, Object.assign({}, g.dataset)]));""")
        assert set(nodes) == {s["stage"] for s in status["stages"]} == set(pipeline_model)
        for s in status["stages"]:
            node = nodes[s["stage"]]
            for k in STATES:
                assert int(node[k.replace("_o", "O")]) == s[k] == pipeline_model[s["stage"]][k], (s, node)
        edges = browser.js("return document.querySelectorAll('#pipeline path.edge').length")
        assert edges == 3

        # GC and verify as this server ran them.
        maint = browser.js("return document.getElementById('maintenance').textContent")
        assert "last verify" in maint and "ok" in maint and "last GC" in maint, maint

        # The latest commits, newest first, starting at the store's seq.
        seqs = browser.js("return [...document.querySelectorAll('#records tbody tr')].map(r => +r.dataset.seq)")
        assert seqs[0] == stats["seq"] and seqs == sorted(seqs, reverse=True), seqs
        kinds = browser.js("return [...document.querySelectorAll('#records tbody tr')].map(r => r.children[2].textContent)")
        assert {"commit", "claim", "cell failed"} <= set(kinds), kinds

        # A commit through the API appears without a reload.
        browser.js("window.__sameDocument = 'yes'")
        commits = int(shown["commits"][0])
        assert srv.put("orders/d=10", 1, b"late orders\n" * 30) == "committed"
        wait_for(lambda: int(cards(browser)["commits"][0]) == commits + 1, 30, "the new commit's count")
        wait_for(lambda: "orders/d=10" in browser.js("return document.querySelector('#records tbody').textContent"),
                 30, "the new commit in the latest commits")
        assert browser.js("return window.__sameDocument") == "yes", "the page was reloaded"
        # Once more, so that the rates shown are of a quiet second (the screenshot).
        wait_for(lambda: int(browser.js("return +document.body.dataset.polls")) > 4, 30, "a few polls")
        browser.screenshot(SCREENSHOT)
        assert SCREENSHOT.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

        # /metrics through the page's link (fetched with the token).
        browser.js("document.querySelector('a[href=\"/metrics\"]').click()")
        wait_for(lambda: "oncelake_commits" in browser.js("return document.getElementById('raw').textContent"),
                 30, "/metrics shown")

        # Without the token (a new tab's storage) the page asks for it and shows no data; a
        # wrong one is refused and said so.
        browser.js("sessionStorage.clear()")
        browser.go(srv.base + "/")
        wait_for(lambda: browser.js("return !document.getElementById('login').hidden"), 30, "the token prompt")
        assert browser.js("return document.getElementById('main').hidden")
        browser.go(srv.base + "/#token=" + "0" * 64)
        wait_for(lambda: "refused" in browser.js("return document.getElementById('login-error').textContent"),
                 30, "a wrong token refused")
    finally:
        if browser:
            browser.quit()
        srv.stop()


def test_only_the_page_files_are_public_on_tcp(tmp_path):
    """The page's files are answered without the token; every data endpoint is not."""
    srv = Server(tmp_path / "lake")
    try:
        assert srv.put("a/1", 1, b"x") == "committed"
        page = srv.call("GET", "/", token=False, raw=True).decode()
        assert "/status-page/app.js" in page and str(tmp_path) not in page
        for path in ("/status-page/app.js", "/status-page/style.css"):
            assert srv.call("GET", path, token=False, raw=True)
        for path in ("/v1/overview", "/v1/stats", "/metrics", "/v1/ls", "/status-page/other.js"):
            with pytest.raises(urllib.error.HTTPError) as e:
                srv.call("GET", path, token=False, raw=True)
            assert e.value.code == 401, path
        with pytest.raises(urllib.error.HTTPError) as e:
            srv.call("POST", "/", b"{}", token=False, raw=True)
        assert e.value.code == 401
        ov = srv.call("GET", "/v1/overview")
        assert ov["seq"] == 1 and ov["records"][0]["units"][0]["unit"] == "a/1"
    finally:
        srv.stop()


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost")
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def test_the_page_on_the_unix_socket(tmp_path):
    """On the Unix socket (no token) the page and its JSON answer as on TCP: a person reaches it
    with `serve --listen`, a program (or `curl --unix-socket`) reads the same JSON."""
    store = tmp_path / "lake"
    subprocess.run([BIN, "init", str(store)], check=True, capture_output=True)
    proc = subprocess.Popen([BIN, "serve", str(store)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "serving" in proc.stdout.readline()
        subprocess.run([BIN, "put", str(store), "a/1", "3", "-"], input=b"abc", check=True, capture_output=True)
        conn = UnixConnection(str(store / "serve.sock"))
        conn.request("GET", "/")
        r = conn.getresponse()
        assert r.status == 200 and "script-src 'self'" in r.getheader("Content-Security-Policy")
        assert b"/status-page/app.js" in r.read()
        conn.request("GET", "/v1/overview?records=5")
        ov = json.loads(conn.getresponse().read())
        assert ov["records"][0]["units"] == [{"unit": "a/1", "version": 3, "size": 3}]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
