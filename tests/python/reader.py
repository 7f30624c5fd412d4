"""One read of a lake table by a real client, in a process of its own (run by test_tables.py).

deltalake aborts the interpreter at exit in some processes ("terminate called without an active
exception", delta-rs #2184): a test process that imported it could fail at random after every
assertion passed. So the tests never import deltalake or DuckDB; each read runs here, prints its
result as one JSON document, flushes, and leaves with os._exit(0) before any exit handler runs.

Usage: python reader.py '<JSON request>'; the request's "op" names the read.
"""

import json
import os
import sys
from pathlib import Path


def rows_of(arrow_table):
    return sorted(sorted(r.items()) for r in arrow_table.to_pylist())


def duck_rows(path, version=None):
    import duckdb
    import duckdb_extension_delta

    ext = next(Path(duckdb_extension_delta.__file__).parent.glob("extensions/*/delta.duckdb_extension"))
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    con.execute(f"LOAD '{ext}'")
    if version is None:
        q = f"SELECT * FROM delta_scan('{path}')"
    else:
        q = f"SELECT * FROM delta_scan('{path}', version => {version})"
    rel = con.sql(q)
    cols = rel.columns
    return sorted(sorted(zip(cols, r)) for r in rel.fetchall())


def run(req):
    op, path = req["op"], req["path"]
    if op == "duck_rows":
        return duck_rows(path, req.get("version"))
    from deltalake import DeltaTable

    # An s3:// table (a lake's, SPEC R23) names its endpoint and credentials here.
    opts = req.get("storage_options")
    if op == "delta_rows":
        return rows_of(DeltaTable(path, version=req.get("version"), storage_options=opts).to_pyarrow_table())
    dt = DeltaTable(path, storage_options=opts)
    if op == "delta_info":
        return {
            "version": dt.version(),
            "history": len(dt.history()),
            "partition_columns": dt.metadata().partition_columns,
            "transaction_version": dt.transaction_version(req["app_id"]) if req.get("app_id") else None,
        }
    if op == "vacuum":
        return dt.vacuum(
            retention_hours=0, enforce_retention_duration=False, dry_run=req["dry_run"]
        )
    raise ValueError(f"unknown op {op}")


if __name__ == "__main__":
    try:
        out, code = json.dumps({"ok": run(json.loads(sys.argv[1]))}), 0
    except Exception as e:  # reported to the test, which fails with it
        out, code = json.dumps({"error": f"{type(e).__name__}: {e}"}), 0
    sys.stdout.write(out + "\n")
    sys.stdout.flush()
    os._exit(code)
