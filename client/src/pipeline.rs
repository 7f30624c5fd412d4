//! Pipelines and lake tables over the API.

use crate::client::{Client, Payload};
use crate::error::{lost, Result};
use crate::http1::{encode, to_json};
use oncelake::UnitOutcome;
use std::io::Read;
use std::time::Duration;

impl Client {
    /// Records `unit`'s source version with `input` as its input (pipelines): the outcome of the
    /// internal commit, as `oncelake::pipeline::set_source_version` returns it.
    pub fn pipeline_set_version(
        &self,
        unit: &str,
        source_version: u64,
        mut input: &[u8],
    ) -> Result<UnitOutcome> {
        let q = format!(
            "/v1/pipeline/source?unit={}&version={source_version}",
            encode(unit)
        );
        self.json("PUT", &q, Payload::Stream(&mut input))
    }

    /// The cell counts of the pipeline defined by `definition` (its TOML text).
    pub fn pipeline_status(&self, definition: &str) -> Result<oncelake::pipeline::Status> {
        let body = to_json(&serde_json::json!({ "pipeline": definition }))?;
        self.json("POST", "/v1/pipeline/status", Payload::Json(body))
    }

    /// Why each cell of `unit` is in its state, in the pipeline defined by `definition`.
    pub fn pipeline_explain(
        &self,
        definition: &str,
        unit: &str,
    ) -> Result<oncelake::pipeline::Explain> {
        let body = to_json(&serde_json::json!({ "pipeline": definition, "unit": unit }))?;
        self.json("POST", "/v1/pipeline/explain", Payload::Json(body))
    }

    /// Defines a lake table (`oncelake table create`): the table and how far it is published.
    pub fn table_create(
        &self,
        name: &str,
        prefix: &str,
        format: &str,
    ) -> Result<oncelake::table::TableStatus> {
        let body = to_json(&crate::wire_table::CreateReqW {
            name: name.into(),
            prefix: prefix.into(),
            format: format.into(),
        })?;
        self.json("POST", "/v1/table/create", Payload::Json(body))
    }

    /// The store's lake tables and how far each is published (`oncelake table ls`).
    pub fn table_ls(&self) -> Result<Vec<oncelake::table::TableStatus>> {
        self.json("GET", "/v1/table/ls", Payload::Empty)
    }

    /// Publishes table `name`, or every table (`oncelake table publish`).
    pub fn table_publish(&self, name: Option<&str>) -> Result<Vec<oncelake::table::PublishReport>> {
        let body = to_json(&crate::wire_table::PublishReqW {
            name: name.map(Into::into),
        })?;
        self.json("POST", "/v1/table/publish", Payload::Json(body))
    }
}

/// The pipeline's cell calls.
impl Client {
    /// Records the pipeline definition in the log if it changed; the record's seq if written.
    pub fn pipeline_define(&self, definition: &str) -> Result<Option<u64>> {
        #[derive(serde::Deserialize)]
        struct R {
            recorded_seq: Option<u64>,
        }
        let body = to_json(&serde_json::json!({ "pipeline": definition }))?;
        let r: R = self.json("POST", "/v1/pipeline/define", Payload::Json(body))?;
        Ok(r.recorded_seq)
    }

    /// Up to `limit` ready cells of the pipeline defined by `definition`.
    pub fn pipeline_ready(
        &self,
        definition: &str,
        limit: usize,
    ) -> Result<Vec<oncelake::pipeline::ReadyCell>> {
        #[derive(serde::Deserialize)]
        struct R {
            cells: Vec<oncelake::pipeline::ReadyCell>,
        }
        let body = to_json(&serde_json::json!({ "pipeline": definition, "limit": limit }))?;
        let r: R = self.json("POST", "/v1/pipeline/ready", Payload::Json(body))?;
        Ok(r.cells)
    }

    /// Claims a ready cell for `worker`.
    pub fn pipeline_claim(
        &self,
        definition: &str,
        cell: &oncelake::pipeline::ReadyCell,
        worker: &str,
        ttl: Duration,
    ) -> Result<oncelake::pipeline::Claim> {
        let body = to_json(&serde_json::json!({
            "pipeline": definition,
            "cell": cell,
            "worker": worker,
            "ttl_ms": ttl.as_millis() as u64,
        }))?;
        self.json("POST", "/v1/pipeline/claim", Payload::Json(body))
    }

    /// Completes a cell with `output`.
    pub fn pipeline_complete(
        &self,
        definition: &str,
        attempt: &oncelake::pipeline::Attempt,
        output: &[u8],
    ) -> Result<UnitOutcome> {
        let mut body = to_json(&serde_json::json!({
            "pipeline": definition,
            "attempt": attempt,
        }))?;
        body.push(b'\n');
        body.extend_from_slice(output);
        self.json("POST", "/v1/pipeline/complete", Payload::Json(body))
    }

    /// Records a failed run of a cell.
    pub fn pipeline_fail(
        &self,
        definition: &str,
        attempt: &oncelake::pipeline::Attempt,
        error: &str,
    ) -> Result<oncelake::pipeline::FailOutcome> {
        let body = to_json(&serde_json::json!({
            "pipeline": definition,
            "attempt": attempt,
            "error": error,
        }))?;
        self.json("POST", "/v1/pipeline/fail", Payload::Json(body))
    }

    /// The bytes of a ready cell's input: `stage` `None` for the unit's source, else an upstream
    /// stage (as `ReadyCell::read_input`).
    pub fn pipeline_input(
        &self,
        cell: &oncelake::pipeline::ReadyCell,
        stage: Option<&str>,
    ) -> Result<Vec<u8>> {
        let body = to_json(&serde_json::json!({
            "cell": cell,
            "stage": stage,
        }))?;
        let mut resp = self.request("POST", "/v1/pipeline/input", Payload::Json(body))?;
        let mut out = Vec::new();
        resp.body
            .read_to_end(&mut out)
            .map_err(|e| lost("POST /v1/pipeline/input", e))?;
        Ok(out)
    }
}
