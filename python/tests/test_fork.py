"""A child ``fork()``ed from the process that opened a store (``multiprocessing``'s default start
method on Linux before Python 3.14) cannot use its copy of the store, and closing that copy leaves
the parent's store, its files and its lock as they were."""

import fcntl
import hashlib
import os
import warnings

import oncelake


def digest(lake):
    """Every file below ``lake`` with a hash of its bytes: the "nothing changed" oracle."""
    out = {}
    for root, _dirs, files in os.walk(lake):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, lake)] = hashlib.sha256(f.read()).hexdigest()
    return out


def lock_is_free(lake):
    with open(os.path.join(lake, "LOCK"), "rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
        return True


def in_child(store, parent):
    """Runs in the forked child; returns its exit status (0: everything refused as it must be)."""
    try:
        store.put("child/1", 1, b"from the child")
        return 10
    except oncelake.errors.StoreError as e:
        if e.facts.get("opened_by") != parent or e.facts.get("this") != os.getpid():
            return 11
        if "fork" not in str(e):
            return 12
    try:
        store.ls()
        return 13
    except oncelake.errors.StoreError:
        pass
    store.close()
    return 0


def test_a_forked_child_can_neither_use_nor_close_its_parents_store(tmp_path):
    lake = str(tmp_path / "lake")
    model = {}
    store = oncelake.Store(lake)
    for i in range(10):
        unit, data = f"parent/{i}", f"v1 of {i}".encode()
        store.put(unit, 1, data)
        model[unit] = data
    store.ls()  # everything acknowledged is applied: the store's files are at rest
    before = digest(lake)
    parent = os.getpid()
    with warnings.catch_warnings():
        # Python 3.12+ warns about forking a process with threads (the store's applier).
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        code = 99
        try:
            code = in_child(store, parent)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child status {status:#x}"
    assert digest(lake) == before, "the child changed the store's files"
    assert not lock_is_free(lake), "the child released the parent's lock"
    for i in range(3):
        unit, data = f"parent/{i}", f"v2 of {i}".encode()
        store.put(unit, 2, data)
        model[unit] = data
    store.close()
    with oncelake.Store(lake) as again:
        assert {e.unit: again.get(e.unit) for e in again.ls()} == model


def test_a_forked_child_and_its_parent_never_share_a_server_connection(served):
    """A served ``Store`` keeps connections alive between calls. A forked child inherits copies of
    them; were parent and child to send on the same socket, each could read the other's answer.
    Both commit at once here, and every answer must be the one to its own request."""
    store = oncelake.Store(served)
    assert store.served_by is not None
    store.put("warm/0", 1, b"fills the connection pool")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    who = "child" if pid == 0 else "parent"
    code = 0
    try:
        for i in range(300):
            unit = f"{who}/{i}"
            outcome = store.put(unit, 1, f"{unit} bytes".encode())
            if not isinstance(outcome, oncelake.Committed) or outcome.unit != unit:
                code = 20
                break
    except Exception:  # an answer that was not one, or a connection another process broke
        code = 21
        if pid != 0:
            raise
    if pid == 0:
        os._exit(code)
    assert code == 0
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child status {status:#x}"
    units = {e.unit for e in store.ls()}
    assert {f"{w}/{i}" for w in ("child", "parent") for i in range(300)} <= units
    for w in ("child", "parent"):
        assert store.get(f"{w}/7") == f"{w}/7 bytes".encode()
    store.close()
