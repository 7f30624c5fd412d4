//! Staging handles, snapshot leases and the log's position over the API.

use crate::client::{Client, Payload};
use crate::error::{ClientError, Result};
use crate::http1::encode;
use crate::wire;
use crate::wire::{ChangesW, StagedW};
use oncelake::log::Record;
use oncelake::Entry;
use oncelake::ObjectMeta;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

/// A snapshot lease opened on the server ([`Client::snapshot_open`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotLease {
    /// The lease's id: name it in the snapshot calls, close it when done.
    pub id: u64,
    /// The newest seq the view contains.
    pub seq: u64,
    /// The oldest seq a view can be taken as of.
    pub history_from: u64,
}

/// Staging handles, snapshot leases, the log's position and the pipeline's cell calls.
impl Client {
    /// [`Client::stage_reader`], asking the server to drop the handle after `ttl` if it is
    /// neither committed nor dropped by then (the server's staging timeout is the most).
    pub fn stage_reader_for(
        &self,
        mut input: impl Read,
        ttl: Option<Duration>,
    ) -> Result<(u64, ObjectMeta)> {
        let path = match ttl {
            Some(t) => format!("/v1/stage?ttl_ms={}", t.as_millis()),
            None => "/v1/stage".to_string(),
        };
        let r: StagedW = self.json("POST", &path, Payload::Stream(&mut input))?;
        Ok((r.staged, r.meta))
    }

    /// Drops a staging handle (its object is unpinned); whether the server still had it.
    pub fn unstage(&self, id: u64) -> Result<bool> {
        #[derive(serde::Deserialize)]
        struct R {
            dropped: bool,
        }
        let r: R = self.json("DELETE", &format!("/v1/stage?id={id}"), Payload::Empty)?;
        Ok(r.dropped)
    }

    /// Opens a read view on the server, newest or as of `at`; GC keeps its objects until it is
    /// closed or unused for `ttl` (the server's default when `None`; each read renews it).
    pub fn snapshot_open(&self, at: Option<u64>, ttl: Option<Duration>) -> Result<SnapshotLease> {
        #[derive(serde::Deserialize)]
        struct R {
            snapshot: u64,
            seq: u64,
            history_from: u64,
        }
        let mut q = vec![];
        if let Some(at) = at {
            q.push(format!("at={at}"));
        }
        if let Some(t) = ttl {
            q.push(format!("ttl_ms={}", t.as_millis()));
        }
        let path = format!("/v1/snapshot?{}", q.join("&"));
        let r: R = self.json("POST", &path, Payload::Empty)?;
        Ok(SnapshotLease {
            id: r.snapshot,
            seq: r.seq,
            history_from: r.history_from,
        })
    }

    /// Closes a snapshot lease; whether it was open.
    pub fn snapshot_close(&self, id: u64) -> Result<bool> {
        #[derive(serde::Deserialize)]
        struct R {
            closed: bool,
        }
        let r: R = self.json("DELETE", &format!("/v1/snapshot?id={id}"), Payload::Empty)?;
        Ok(r.closed)
    }

    /// The unit's entry in the view `id`.
    pub fn snapshot_get(&self, id: u64, unit: &str) -> Result<Option<Entry>> {
        #[derive(serde::Deserialize)]
        struct R {
            entry: Option<Entry>,
        }
        let path = format!("/v1/snapshot/entry?id={id}&unit={}", encode(unit));
        let r: R = self.json("GET", &path, Payload::Empty)?;
        Ok(r.entry)
    }

    /// Copies the unit's object in the view `id` into `out`, streamed; its entry, or `None`.
    /// Checked as [`Client::read_object`] checks it.
    pub fn snapshot_read_object(
        &self,
        id: u64,
        unit: &str,
        out: &mut dyn Write,
    ) -> Result<Option<Entry>> {
        let path = format!("/v1/snapshot/object?id={id}&unit={}", encode(unit));
        self.object_to(&path, "GET /v1/snapshot/object", out)
    }

    /// The entries under `prefix` in the view `id`, to `each` in key order until it says stop.
    pub fn snapshot_ls(
        &self,
        id: u64,
        prefix: &str,
        each: impl FnMut(Entry) -> bool,
    ) -> Result<()> {
        let path = format!("/v1/snapshot/ls?id={id}&prefix={}", encode(prefix));
        self.entries(&path, "GET /v1/snapshot/ls", each)
    }

    /// The log records after `since` up to the view's seq (at most `limit`).
    pub fn snapshot_changes(&self, id: u64, since: u64, limit: usize) -> Result<Vec<Record>> {
        let path = format!("/v1/snapshot/changes?id={id}&since={since}&limit={limit}");
        let r: ChangesW = self.json("GET", &path, Payload::Empty)?;
        r.records
            .iter()
            .map(|rec| {
                let bytes = wire::from_hex(&rec.record).map_err(ClientError::Protocol)?;
                Record::decode(&bytes).map_err(|e| ClientError::Protocol(e.to_string()))
            })
            .collect()
    }

    /// Where the object `object` of the view `id` lies on the server's node.
    pub fn snapshot_object_path(&self, id: u64, object: &oncelake::ObjectId) -> Result<PathBuf> {
        #[derive(serde::Deserialize)]
        struct R {
            path: PathBuf,
        }
        let path = format!(
            "/v1/snapshot/object_path?id={id}&object={}",
            object.to_hex()
        );
        let r: R = self.json("GET", &path, Payload::Empty)?;
        Ok(r.path)
    }

    /// The newest seq of the store.
    pub fn last_seq(&self) -> Result<u64> {
        #[derive(serde::Deserialize)]
        struct R {
            seq: u64,
        }
        let r: R = self.json("GET", "/v1/seq", Payload::Empty)?;
        Ok(r.seq)
    }

    /// Makes everything acknowledged so far durable on the server.
    pub fn flush(&self) -> Result<()> {
        let _: serde_json::Value = self.json("POST", "/v1/flush", Payload::Empty)?;
        Ok(())
    }

    /// Brings the served lake node up to date with its lake (nothing on a local store): the
    /// newest seq after it, and the lake's URL (`None` for a local store).
    pub fn sync(&self) -> Result<(u64, Option<String>)> {
        #[derive(serde::Deserialize)]
        struct R {
            seq: u64,
            lake: Option<String>,
        }
        let r: R = self.json("POST", "/v1/sync", Payload::Empty)?;
        Ok((r.seq, r.lake))
    }

    /// Writes the served lake node's checkpoint into its lake: (segment, bytes, written), as
    /// `Store::checkpoint` reports it.
    pub fn checkpoint(&self) -> Result<(u64, u64, bool)> {
        #[derive(serde::Deserialize)]
        struct R {
            segment: u64,
            bytes: u64,
            written: bool,
        }
        let r: R = self.json("POST", "/v1/checkpoint", Payload::Empty)?;
        Ok((r.segment, r.bytes, r.written))
    }
}
