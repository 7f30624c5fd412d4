//! The wire forms of the pipeline's cell calls (`POST /v1/pipeline/ready`, `claim`, `complete`,
//! `fail`, `input`): the engine's [`ReadyCell`], [`Claim`], [`Attempt`] and [`FailOutcome`] field
//! for field, shared by the server and the [`crate::Client`] (a client-only build has them).

use crate::wire_pipeline::StaleW;
use oncelake::pipeline::{Attempt, Claim, FailOutcome, Input, ReadyCell, StaleReason};
use oncelake::{Entry, Lease};
use serde::{Deserialize, Serialize};

/// The engine's [`ReadyCell`].
#[derive(Clone, Debug, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct ReadyCellW {
    pub unit: String,
    pub stage: String,
    pub key: String,
    pub source_version: u64,
    pub attempts: u32,
    pub last_error: Option<String>,
    pub stale: Option<StaleW>,
    pub inputs: Vec<InputW>,
}

/// The engine's [`Input`].
#[derive(Clone, Debug, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct InputW {
    pub stage: Option<String>,
    pub entry: Entry,
}

/// The engine's [`Claim`].
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "claim", rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum ClaimCellW {
    Granted { lease: Lease, cell: ReadyCellW },
    Held { worker: String, expires_at_ms: u64 },
    AlreadyDone,
    GaveUp { attempts: u32 },
}

/// The engine's [`Attempt`].
#[derive(Clone, Debug, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct AttemptW {
    pub unit: String,
    pub stage: String,
    pub source_version: u64,
    pub worker: String,
    pub token: Option<u64>,
}

/// The engine's [`FailOutcome`].
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum FailOutcomeW {
    Recorded {
        seq: u64,
        attempts: u32,
        gave_up: bool,
    },
    Fenced {
        token: u64,
        newest_token: u64,
    },
    Busy {
        worker: String,
        expires_at_ms: u64,
    },
}

/// The stale reason on the wire (the form `explain` uses).
pub fn stale_w(s: &StaleReason) -> StaleW {
    match s {
        StaleReason::NewerSource { completed, current } => StaleW::NewerSource {
            completed: *completed,
            current: *current,
        },
        StaleReason::CodeChanged { from, to } => StaleW::CodeChanged {
            from: *from,
            to: *to,
        },
        StaleReason::UpstreamRerun => StaleW::UpstreamRerun,
    }
}

fn stale_back(s: &StaleW) -> StaleReason {
    match s {
        StaleW::NewerSource { completed, current } => StaleReason::NewerSource {
            completed: *completed,
            current: *current,
        },
        StaleW::CodeChanged { from, to } => StaleReason::CodeChanged {
            from: *from,
            to: *to,
        },
        StaleW::UpstreamRerun => StaleReason::UpstreamRerun,
    }
}

impl From<&ReadyCell> for ReadyCellW {
    fn from(c: &ReadyCell) -> Self {
        ReadyCellW {
            unit: c.unit.clone(),
            stage: c.stage.clone(),
            key: c.key.clone(),
            source_version: c.source_version,
            attempts: c.attempts,
            last_error: c.last_error.clone(),
            stale: c.stale.as_ref().map(stale_w),
            inputs: c
                .inputs
                .iter()
                .map(|i| InputW {
                    stage: i.stage.clone(),
                    entry: i.entry.clone(),
                })
                .collect(),
        }
    }
}

impl ReadyCellW {
    /// Back to the engine's type.
    pub fn to_engine(&self) -> Result<ReadyCell, String> {
        Ok(ReadyCell {
            unit: self.unit.clone(),
            stage: self.stage.clone(),
            key: self.key.clone(),
            source_version: self.source_version,
            attempts: self.attempts,
            last_error: self.last_error.clone(),
            stale: self.stale.as_ref().map(stale_back),
            inputs: self
                .inputs
                .iter()
                .map(|i| {
                    Ok(Input {
                        stage: i.stage.clone(),
                        entry: i.entry.clone(),
                    })
                })
                .collect::<Result<_, String>>()?,
        })
    }
}

impl From<&Claim> for ClaimCellW {
    fn from(c: &Claim) -> Self {
        match c {
            Claim::Granted { lease, cell } => ClaimCellW::Granted {
                lease: lease.clone(),
                cell: cell.into(),
            },
            Claim::Held {
                worker,
                expires_at_ms,
            } => ClaimCellW::Held {
                worker: worker.clone(),
                expires_at_ms: *expires_at_ms,
            },
            Claim::AlreadyDone => ClaimCellW::AlreadyDone,
            Claim::GaveUp { attempts } => ClaimCellW::GaveUp {
                attempts: *attempts,
            },
        }
    }
}

impl ClaimCellW {
    /// Back to the engine's type.
    pub fn to_engine(&self) -> Result<Claim, String> {
        Ok(match self {
            ClaimCellW::Granted { lease, cell } => Claim::Granted {
                lease: lease.clone(),
                cell: cell.to_engine()?,
            },
            ClaimCellW::Held {
                worker,
                expires_at_ms,
            } => Claim::Held {
                worker: worker.clone(),
                expires_at_ms: *expires_at_ms,
            },
            ClaimCellW::AlreadyDone => Claim::AlreadyDone,
            ClaimCellW::GaveUp { attempts } => Claim::GaveUp {
                attempts: *attempts,
            },
        })
    }
}

impl From<&Attempt> for AttemptW {
    fn from(a: &Attempt) -> Self {
        AttemptW {
            unit: a.unit.clone(),
            stage: a.stage.clone(),
            source_version: a.source_version,
            worker: a.worker.clone(),
            token: a.token,
        }
    }
}

impl From<&AttemptW> for Attempt {
    fn from(a: &AttemptW) -> Self {
        Attempt {
            unit: a.unit.clone(),
            stage: a.stage.clone(),
            source_version: a.source_version,
            worker: a.worker.clone(),
            token: a.token,
        }
    }
}

impl From<&FailOutcome> for FailOutcomeW {
    fn from(f: &FailOutcome) -> Self {
        match f {
            FailOutcome::Recorded {
                seq,
                attempts,
                gave_up,
            } => FailOutcomeW::Recorded {
                seq: *seq,
                attempts: *attempts,
                gave_up: *gave_up,
            },
            FailOutcome::Fenced {
                token,
                newest_token,
            } => FailOutcomeW::Fenced {
                token: *token,
                newest_token: *newest_token,
            },
            FailOutcome::Busy {
                worker,
                expires_at_ms,
            } => FailOutcomeW::Busy {
                worker: worker.clone(),
                expires_at_ms: *expires_at_ms,
            },
        }
    }
}

impl From<&FailOutcomeW> for FailOutcome {
    fn from(f: &FailOutcomeW) -> Self {
        match f {
            FailOutcomeW::Recorded {
                seq,
                attempts,
                gave_up,
            } => FailOutcome::Recorded {
                seq: *seq,
                attempts: *attempts,
                gave_up: *gave_up,
            },
            FailOutcomeW::Fenced {
                token,
                newest_token,
            } => FailOutcome::Fenced {
                token: *token,
                newest_token: *newest_token,
            },
            FailOutcomeW::Busy {
                worker,
                expires_at_ms,
            } => FailOutcome::Busy {
                worker: worker.clone(),
                expires_at_ms: *expires_at_ms,
            },
        }
    }
}
