//! Pipeline definitions: named stages, their upstream stages and code versions; validation (a DAG
//! of known, unique, well-named stages) and a small strict parser for the definition file.
//!
//! # The definition file
//!
//! A strict subset of TOML, so the library needs no TOML crate and any TOML tool reads it:
//!
//! ```text
//! # comments run to the end of the line
//! [stage.ingest]
//! code_version = 1
//!
//! [stage.transform]
//! code_version = 3
//! upstream = ["ingest"]
//! max_attempts = 5        # optional, default 3
//! ```
//!
//! - one `[stage.NAME]` table per stage; NAME is 1..=64 of `A-Z a-z 0-9 _ -`;
//! - keys: `code_version` (required, unsigned integer), `upstream` (optional, a one-line array of
//!   double-quoted stage names without escapes), `max_attempts` (optional, 1..=1000);
//! - anything else — other tables, other keys, a key given twice, keys before the first table —
//!   is an error naming the line.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// The longest stage name, in bytes.
pub const MAX_STAGE_NAME: usize = 64;
/// How many times a cell is tried before it counts as failed, unless the stage says otherwise.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// The largest `max_attempts` a stage may set.
pub const MAX_ATTEMPTS_LIMIT: u32 = 1000;

/// Why a pipeline definition was refused. Every variant names its culprit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PipelineError {
    /// The file is not in the documented format.
    #[error("pipeline definition line {line}: {msg}")]
    Syntax {
        /// 1-based line number.
        line: usize,
        /// What is wrong and what to write instead.
        msg: String,
    },
    /// A stage name breaks the naming rules.
    #[error(
        "stage name {name:?} is invalid: {reason} (a stage name is 1..=64 of A-Z a-z 0-9 _ -)"
    )]
    InvalidName {
        /// The name as given.
        name: String,
        /// Which rule it broke.
        reason: &'static str,
    },
    /// Two stages share a name.
    #[error("stage {0:?} is defined twice; give every stage a unique name")]
    DuplicateStage(String),
    /// A stage lists an upstream stage that is not defined.
    #[error("stage {stage:?} lists unknown upstream stage {upstream:?}; define it or remove it from `upstream`")]
    UnknownUpstream {
        /// The stage that lists it.
        stage: String,
        /// The missing stage.
        upstream: String,
    },
    /// A stage lists the same upstream stage twice.
    #[error("stage {stage:?} lists upstream stage {upstream:?} twice")]
    DuplicateUpstream {
        /// The stage that lists it.
        stage: String,
        /// The repeated stage.
        upstream: String,
    },
    /// The stages do not form a DAG.
    #[error("the stages form a cycle: {}; a pipeline must be acyclic", .0.join(" -> "))]
    Cycle(
        /// The stages on the cycle, the first repeated at the end.
        Vec<String>,
    ),
    /// A stage setting is out of range.
    #[error("stage {stage:?}: {msg}")]
    InvalidValue {
        /// The stage.
        stage: String,
        /// What is wrong.
        msg: String,
    },
    /// The definition has no stage at all.
    #[error("the pipeline defines no stages; add at least one [stage.NAME] table")]
    NoStages,
}

/// One stage of a pipeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageDef {
    /// Its name (unique in the pipeline).
    pub name: String,
    /// The version of the code that computes it; changing it re-runs this stage and everything
    /// downstream of it.
    pub code_version: u64,
    /// The stages whose outputs it reads, in the order given.
    pub upstream: Vec<String>,
    /// Runs of one cell (at one source version) before the cell counts as failed.
    pub max_attempts: u32,
}

/// A validated pipeline: a DAG of uniquely named stages.
///
/// ```
/// use oncelake::pipeline::PipelineDef;
/// let def = PipelineDef::parse(
///     "[stage.ingest]\ncode_version = 1\n\n[stage.transform]\ncode_version = 3\nupstream = [\"ingest\"]\n",
/// ).unwrap();
/// assert_eq!(def.stage("transform").unwrap().upstream, ["ingest"]);
/// let err = PipelineDef::builder().stage("a", 1, &["b"]).stage("b", 1, &["a"]).build();
/// assert_eq!(err.unwrap_err().to_string(), "the stages form a cycle: a -> b -> a; a pipeline must be acyclic");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipelineDef {
    /// Stages in declaration order.
    stages: Vec<StageDef>,
    /// Indices into `stages`, upstream before downstream (ties in declaration order).
    topo: Vec<usize>,
    /// Per stage (by index): the lineage, a hash of its code version and its upstream lineages.
    lineage: Vec<String>,
    /// Per stage: the indices of its direct downstream stages.
    downstream: Vec<Vec<usize>>,
    by_name: HashMap<String, usize>,
}

/// Builds a [`PipelineDef`] from code; [`PipelineDefBuilder::build`] validates it.
#[derive(Clone, Debug, Default)]
pub struct PipelineDefBuilder {
    stages: Vec<StageDef>,
}

impl PipelineDefBuilder {
    /// Adds a stage with the default `max_attempts`.
    pub fn stage(self, name: &str, code_version: u64, upstream: &[&str]) -> Self {
        self.stage_def(StageDef {
            name: name.to_string(),
            code_version,
            upstream: upstream.iter().map(|s| s.to_string()).collect(),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
        })
    }

    /// Adds a fully specified stage.
    pub fn stage_def(mut self, stage: StageDef) -> Self {
        self.stages.push(stage);
        self
    }

    /// Validates the stages and returns the pipeline.
    pub fn build(self) -> Result<PipelineDef, PipelineError> {
        PipelineDef::new(self.stages)
    }
}

/// Checks a stage name: 1..=64 of `A-Z a-z 0-9 _ -` (so it never contains the `/` that separates
/// it from the unit in a cell key).
pub fn validate_stage_name(name: &str) -> Result<(), PipelineError> {
    let reason = if name.is_empty() {
        "it is empty"
    } else if name.len() > MAX_STAGE_NAME {
        "it is longer than 64 bytes"
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        "it contains a character other than A-Z a-z 0-9 _ -"
    } else {
        return Ok(());
    };
    Err(PipelineError::InvalidName {
        name: crate::text::shorten(name, 80),
        reason,
    })
}

impl PipelineDef {
    /// Starts a definition in code.
    pub fn builder() -> PipelineDefBuilder {
        PipelineDefBuilder::default()
    }

    /// Validates `stages`: names, uniqueness, known upstream stages, acyclicity.
    pub fn new(stages: Vec<StageDef>) -> Result<PipelineDef, PipelineError> {
        if stages.is_empty() {
            return Err(PipelineError::NoStages);
        }
        let mut by_name = HashMap::with_capacity(stages.len());
        for (i, s) in stages.iter().enumerate() {
            validate_stage_name(&s.name)?;
            if by_name.insert(s.name.clone(), i).is_some() {
                return Err(PipelineError::DuplicateStage(s.name.clone()));
            }
            if s.max_attempts == 0 || s.max_attempts > MAX_ATTEMPTS_LIMIT {
                return Err(PipelineError::InvalidValue {
                    stage: s.name.clone(),
                    msg: format!(
                        "max_attempts is {}, it must be 1..={MAX_ATTEMPTS_LIMIT}",
                        s.max_attempts
                    ),
                });
            }
        }
        let mut downstream = vec![Vec::new(); stages.len()];
        // Indices seen in the current stage's list, so that the check is linear in the number of
        // edges (a scan of the list so far per name was quadratic: one stage listing 50,000
        // upstream stages took seconds, with a server's connection thread waiting on it).
        let mut listed = std::collections::HashSet::new();
        for (i, s) in stages.iter().enumerate() {
            listed.clear();
            for up in &s.upstream {
                let Some(&u) = by_name.get(up) else {
                    return Err(PipelineError::UnknownUpstream {
                        stage: s.name.clone(),
                        upstream: crate::text::shorten(up, 80),
                    });
                };
                if !listed.insert(u) {
                    return Err(PipelineError::DuplicateUpstream {
                        stage: s.name.clone(),
                        upstream: up.clone(),
                    });
                }
                downstream[u].push(i);
            }
        }
        let topo = topo_order(&stages, &by_name)?;
        let mut lineage = vec![String::new(); stages.len()];
        for &i in &topo {
            let s = &stages[i];
            let mut h = blake3::Hasher::new();
            h.update(b"oncelake pipeline lineage v1\0");
            h.update(s.name.as_bytes());
            h.update(b"\0");
            h.update(&s.code_version.to_le_bytes());
            // Sorted so the order upstream stages are listed in does not matter.
            let ups: BTreeMap<&str, &str> = s
                .upstream
                .iter()
                .map(|u| (u.as_str(), lineage[by_name[u]].as_str()))
                .collect();
            for (name, lin) in ups {
                h.update(name.as_bytes());
                h.update(b"\0");
                h.update(lin.as_bytes());
                h.update(b"\0");
            }
            lineage[i] = h.finalize().to_hex()[..16].to_string();
        }
        Ok(PipelineDef {
            stages,
            topo,
            lineage,
            downstream,
            by_name,
        })
    }

    /// Parses and validates a definition file (format in the [module docs](self)).
    pub fn parse(text: &str) -> Result<PipelineDef, PipelineError> {
        PipelineDef::new(parse_stages(text)?)
    }

    /// The definition in the file format; [`PipelineDef::parse`] reads it back to an equal value.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for s in &self.stages {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&format!(
                "[stage.{}]\ncode_version = {}\n",
                s.name, s.code_version
            ));
            if !s.upstream.is_empty() {
                let ups: Vec<String> = s.upstream.iter().map(|u| format!("\"{u}\"")).collect();
                out.push_str(&format!("upstream = [{}]\n", ups.join(", ")));
            }
            if s.max_attempts != DEFAULT_MAX_ATTEMPTS {
                out.push_str(&format!("max_attempts = {}\n", s.max_attempts));
            }
        }
        out
    }

    /// Stages in declaration order.
    pub fn stages(&self) -> &[StageDef] {
        &self.stages
    }

    /// Stages with every stage after all of its upstream stages.
    pub fn topo_order(&self) -> impl Iterator<Item = &StageDef> {
        self.topo.iter().map(|&i| &self.stages[i])
    }

    /// The stage called `name`.
    pub fn stage(&self, name: &str) -> Option<&StageDef> {
        self.by_name.get(name).map(|&i| &self.stages[i])
    }

    /// The stage's lineage: 16 hex digits hashing its code version and, transitively, those of
    /// all its upstream stages. A cell completed under another lineage is stale.
    pub fn lineage(&self, stage: &str) -> Option<&str> {
        self.by_name.get(stage).map(|&i| self.lineage[i].as_str())
    }

    /// The stage's direct downstream stages.
    pub fn downstream(&self, stage: &str) -> Vec<&str> {
        self.by_name
            .get(stage)
            .map(|&i| {
                self.downstream[i]
                    .iter()
                    .map(|&d| self.stages[d].name.as_str())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The stages downstream of `stage`, transitively (not including it), in topological order.
    pub fn downstream_closure(&self, stage: &str) -> Vec<&str> {
        let Some(&start) = self.by_name.get(stage) else {
            return Vec::new();
        };
        let mut reached = vec![false; self.stages.len()];
        let mut stack = vec![start];
        while let Some(i) = stack.pop() {
            for &d in &self.downstream[i] {
                if !reached[d] {
                    reached[d] = true;
                    stack.push(d);
                }
            }
        }
        self.topo
            .iter()
            .filter(|&&i| reached[i])
            .map(|&i| self.stages[i].name.as_str())
            .collect()
    }
}

impl fmt::Display for PipelineDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text())
    }
}

/// Orders the stages upstream-first by depth-first search; a back edge is a cycle, reported as
/// the path around it.
fn topo_order(
    stages: &[StageDef],
    by_name: &HashMap<String, usize>,
) -> Result<Vec<usize>, PipelineError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    let mut mark = vec![Mark::New; stages.len()];
    let mut order = Vec::with_capacity(stages.len());
    for root in 0..stages.len() {
        if mark[root] != Mark::New {
            continue;
        }
        // Iterative DFS over upstream edges (deep pipelines must not overflow the stack):
        // (stage, next upstream to visit).
        let mut path: Vec<(usize, usize)> = vec![(root, 0)];
        mark[root] = Mark::OnPath;
        while let Some(&mut (i, ref mut next)) = path.last_mut() {
            if let Some(up) = stages[i].upstream.get(*next) {
                *next += 1;
                let u = by_name[up];
                match mark[u] {
                    Mark::New => {
                        mark[u] = Mark::OnPath;
                        path.push((u, 0));
                    }
                    Mark::OnPath => {
                        // The path holds u ... i, each listing the next as upstream: the cycle,
                        // read downstream-first, is u's position to the end, back to u.
                        let from = path.iter().position(|&(p, _)| p == u).unwrap_or(0);
                        let mut cycle: Vec<String> = path[from..]
                            .iter()
                            .rev()
                            .map(|&(p, _)| stages[p].name.clone())
                            .collect();
                        cycle.rotate_right(1);
                        cycle.push(cycle[0].clone());
                        return Err(PipelineError::Cycle(cycle));
                    }
                    Mark::Done => {}
                }
            } else {
                mark[i] = Mark::Done;
                order.push(i);
                path.pop();
            }
        }
    }
    Ok(order)
}

fn syntax(line: usize, msg: impl Into<String>) -> PipelineError {
    PipelineError::Syntax {
        line,
        msg: msg.into(),
    }
}

/// A `[stage.NAME]` table while its keys are being read.
struct PartialStage {
    name: String,
    line: usize,
    code_version: Option<u64>,
    upstream: Option<Vec<String>>,
    max_attempts: Option<u32>,
}

impl PartialStage {
    fn new(name: &str, line: usize) -> Self {
        PartialStage {
            name: name.to_string(),
            line,
            code_version: None,
            upstream: None,
            max_attempts: None,
        }
    }

    /// Records one `key = value` line of this stage; a key given twice is an error.
    fn set(&mut self, key: &str, value: &str, line: usize) -> Result<(), PipelineError> {
        let dup = || syntax(line, format!("key {key:?} is given twice in this stage"));
        match key {
            "code_version" => {
                if self.code_version.is_some() {
                    return Err(dup());
                }
                self.code_version = Some(parse_uint(value, line, key)?);
            }
            "max_attempts" => {
                if self.max_attempts.is_some() {
                    return Err(dup());
                }
                let v = parse_uint(value, line, key)?;
                self.max_attempts = Some(u32::try_from(v).map_err(|_| {
                    syntax(
                        line,
                        format!("max_attempts must be 1..={MAX_ATTEMPTS_LIMIT}"),
                    )
                })?);
            }
            "upstream" => {
                if self.upstream.is_some() {
                    return Err(dup());
                }
                self.upstream = Some(parse_string_array(value, line)?);
            }
            _ => {
                return Err(syntax(
                    line,
                    format!(
                        "unknown key {key:?}; a stage has code_version, upstream and max_attempts"
                    ),
                ))
            }
        }
        Ok(())
    }

    /// The stage with its defaults filled in; `code_version` has none.
    fn finish(self) -> Result<StageDef, PipelineError> {
        Ok(StageDef {
            code_version: self.code_version.ok_or_else(|| {
                syntax(
                    self.line,
                    format!(
                        "stage {:?} has no code_version; add `code_version = 1`",
                        self.name
                    ),
                )
            })?,
            upstream: self.upstream.unwrap_or_default(),
            max_attempts: self.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS),
            name: self.name,
        })
    }
}

/// The stage name of a `[stage.NAME]` header line (`rest` is the line after its `[`).
fn parse_header(rest: &str, line: usize) -> Result<&str, PipelineError> {
    let inner = rest.strip_suffix(']').ok_or_else(|| {
        syntax(
            line,
            "a table header must end with `]`, e.g. [stage.ingest]",
        )
    })?;
    let name = inner.trim().strip_prefix("stage.").ok_or_else(|| {
        syntax(
            line,
            format!("unknown table [{inner}]; only [stage.NAME] tables are allowed"),
        )
    })?;
    validate_stage_name(name)?;
    Ok(name)
}

/// The stages of a definition file, before validation.
fn parse_stages(text: &str) -> Result<Vec<StageDef>, PipelineError> {
    let mut stages = Vec::new();
    let mut current: Option<PartialStage> = None;
    for (n, raw) in text.lines().enumerate() {
        let line = n + 1;
        let content = strip_comment(raw).trim();
        if content.is_empty() {
            continue;
        }
        if let Some(rest) = content.strip_prefix('[') {
            let name = parse_header(rest, line)?;
            if let Some(p) = current.take() {
                stages.push(p.finish()?);
            }
            current = Some(PartialStage::new(name, line));
            continue;
        }
        let (key, value) = content.split_once('=').ok_or_else(|| {
            syntax(
                line,
                "expected `key = value` or a [stage.NAME] table header",
            )
        })?;
        let (key, value) = (key.trim(), value.trim());
        let Some(p) = current.as_mut() else {
            return Err(syntax(
                line,
                format!("key {key:?} appears before any [stage.NAME] table"),
            ));
        };
        p.set(key, value, line)?;
    }
    if let Some(p) = current.take() {
        stages.push(p.finish()?);
    }
    Ok(stages)
}

/// The line without a trailing `#` comment (a `#` inside a double-quoted string is kept).
fn strip_comment(line: &str) -> &str {
    let mut in_str = false;
    for (i, c) in line.char_indices() {
        match c {
            '"' => in_str = !in_str,
            '#' if !in_str => return &line[..i],
            _ => {}
        }
    }
    line
}

fn parse_uint(value: &str, line: usize, key: &str) -> Result<u64, PipelineError> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(syntax(
            line,
            format!("{key} must be an unsigned integer, found {value:?}"),
        ));
    }
    value.parse().map_err(|_| {
        syntax(
            line,
            format!("{key} {value} does not fit an unsigned 64-bit integer"),
        )
    })
}

fn parse_string_array(value: &str, line: usize) -> Result<Vec<String>, PipelineError> {
    let inner = value
        .strip_prefix('[')
        .and_then(|v| v.strip_suffix(']'))
        .ok_or_else(|| {
            syntax(
                line,
                "upstream must be a one-line array of quoted names, e.g. upstream = [\"ingest\"]",
            )
        })?;
    let mut out = Vec::new();
    let mut rest = inner.trim();
    while !rest.is_empty() {
        let after_quote = rest.strip_prefix('"').ok_or_else(|| {
            syntax(
                line,
                format!("expected a double-quoted stage name in upstream, found {rest:?}"),
            )
        })?;
        let end = after_quote
            .find('"')
            .ok_or_else(|| syntax(line, "unterminated string in upstream"))?;
        let name = &after_quote[..end];
        if name.contains('\\') {
            return Err(syntax(
                line,
                "escapes are not supported in stage names; stage names need none",
            ));
        }
        out.push(name.to_string());
        rest = after_quote[end + 1..].trim_start();
        if let Some(r) = rest.strip_prefix(',') {
            rest = r.trim_start();
        } else if !rest.is_empty() {
            return Err(syntax(
                line,
                format!("expected `,` or `]` after {name:?} in upstream"),
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_err(text: &str) -> PipelineError {
        PipelineDef::parse(text).unwrap_err()
    }

    #[test]
    fn parses_the_documented_format() {
        let def = PipelineDef::parse(
            "# seed pipeline\n[stage.ingest]\ncode_version = 1\n\n[stage.transform] # middle\n\
             code_version = 3\nupstream = [\"ingest\"]\n[stage.store_b]\ncode_version=1\n\
             upstream=[\"transform\",]\nmax_attempts = 7\n[stage.store_c]\ncode_version = 2\n\
             upstream = [ \"transform\" , \"ingest\" ]\n",
        )
        .unwrap();
        let names: Vec<_> = def.topo_order().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["ingest", "transform", "store_b", "store_c"]);
        assert_eq!(def.stage("store_b").unwrap().max_attempts, 7);
        assert_eq!(
            def.stage("store_c").unwrap().upstream,
            ["transform", "ingest"]
        );
        assert_eq!(PipelineDef::parse(&def.to_text()).unwrap(), def);
        assert_eq!(
            def.downstream_closure("ingest"),
            ["transform", "store_b", "store_c"]
        );
        assert_eq!(def.downstream_closure("store_b"), Vec::<&str>::new());
    }

    #[test]
    fn lineage_changes_downstream_only() {
        // The chain a -> b -> c, with b's code at `version`.
        let chain = |version| {
            PipelineDef::builder()
                .stage("a", 1, &[])
                .stage("b", version, &["a"])
                .stage("c", 1, &["b"])
                .build()
                .unwrap()
        };
        let (a, b) = (chain(1), chain(2));
        assert_eq!(a.lineage("a"), b.lineage("a"));
        assert_ne!(a.lineage("b"), b.lineage("b"));
        assert_ne!(a.lineage("c"), b.lineage("c"));
    }

    #[test]
    fn refuses_bad_definitions_naming_the_culprit() {
        let cyc = PipelineDef::builder()
            .stage("x", 1, &[])
            .stage("a", 1, &["c", "x"])
            .stage("b", 1, &["a"])
            .stage("c", 1, &["b"])
            .build()
            .unwrap_err();
        assert_eq!(
            cyc,
            PipelineError::Cycle(vec!["a".into(), "b".into(), "c".into(), "a".into()])
        );
        assert!(matches!(
            PipelineDef::builder().stage("s", 1, &["s"]).build(),
            Err(PipelineError::Cycle(c)) if c == ["s", "s"]
        ));
        assert_eq!(
            parse_err("[stage.a]\ncode_version = 1\nupstream = [\"zz\"]\n"),
            PipelineError::UnknownUpstream {
                stage: "a".into(),
                upstream: "zz".into()
            }
        );
        assert_eq!(
            parse_err("[stage.a]\ncode_version = 1\n[stage.a]\ncode_version = 2\n"),
            PipelineError::DuplicateStage("a".into())
        );
        assert!(matches!(
            parse_err("[stage.]\ncode_version = 1\n"),
            PipelineError::InvalidName {
                reason: "it is empty",
                ..
            }
        ));
        assert!(matches!(
            PipelineDef::builder().stage("", 1, &[]).build(),
            Err(PipelineError::InvalidName { .. })
        ));
        assert!(matches!(
            parse_err("[stage.a/b]\ncode_version = 1\n"),
            PipelineError::InvalidName { .. }
        ));
        assert_eq!(parse_err(""), PipelineError::NoStages);
        for (text, line) in [
            ("code_version = 1\n", 1),
            ("[stage.a]\n", 1),
            ("[stage.a]\ncode_version = -1\n", 2),
            ("[stage.a]\ncode_version = 1\ncode_version = 2\n", 3),
            ("[stage.a]\ncode_version = 1\ncolour = 2\n", 3),
            ("[stages.a]\n", 1),
            ("[stage.a\n", 1),
            ("[stage.a]\ncode_version = 1\nupstream = \"b\"\n", 3),
            ("[stage.a]\ncode_version = 1\nupstream = [\"b\n", 3),
            ("[stage.a]\ncode_version = 1\nupstream = [b]\n", 3),
            ("[stage.a]\ncode_version = 99999999999999999999\n", 2),
            ("[stage.a]\ncode_version = 1\nmax_attempts = 0\n", 0),
            ("[stage.a]\njust words\n", 2),
        ] {
            match PipelineDef::parse(text) {
                Err(PipelineError::Syntax { line: l, .. }) => assert_eq!(l, line, "{text:?}"),
                Err(PipelineError::InvalidValue { .. }) if line == 0 => {}
                other => panic!("{text:?} gave {other:?}"),
            }
        }
    }

    proptest::proptest! {
        /// Text made of the format's own tokens: parsing never panics, and whatever parses
        /// survives a round trip through `to_text`.
        #[test]
        fn token_soup_never_panics_and_round_trips(parts in proptest::collection::vec(
            proptest::sample::select(vec![
                "[stage.a]", "[stage.b]", "[stage.c]", "[stage.]", "[x]", "\n", " ", "#", "=",
                "code_version", "upstream", "max_attempts", "1", "0", "7", "[", "]", "\"a\"",
                "\"b\"", "\"c\"", ",", "\"", "é", "\t", "-", "99999999999999999999",
            ]),
            0..60,
        )) {
            let text: String = parts.concat();
            if let Ok(def) = PipelineDef::parse(&text) {
                proptest::prop_assert_eq!(PipelineDef::parse(&def.to_text()), Ok(def));
            }
        }
    }

    proptest::proptest! {
        /// Random DAGs round-trip through the file format; adding one back edge makes a cycle,
        /// and the reported path is a real cycle of the graph.
        #[test]
        fn random_dags_round_trip_and_back_edges_are_named(
            n in 1usize..12,
            edges in proptest::collection::vec((0usize..12, 0usize..12), 0..30),
            back in (0usize..12, 0usize..12),
        ) {
            let name = |i: usize| format!("s{i}");
            let mut ups: Vec<Vec<String>> = vec![Vec::new(); n];
            for (a, b) in edges {
                let (a, b) = (a % n, b % n);
                if a < b && !ups[b].contains(&name(a)) {
                    ups[b].push(name(a));
                }
            }
            let stages = |ups: &Vec<Vec<String>>| -> Vec<StageDef> {
                (0..n).map(|i| StageDef {
                    name: name(i),
                    code_version: i as u64,
                    upstream: ups[i].clone(),
                    max_attempts: 1 + i as u32,
                }).collect()
            };
            let def = PipelineDef::new(stages(&ups)).unwrap();
            proptest::prop_assert_eq!(PipelineDef::parse(&def.to_text()), Ok(def.clone()));
            let order: Vec<&str> = def.topo_order().map(|s| s.name.as_str()).collect();
            for s in def.stages() {
                let at = order.iter().position(|x| *x == s.name).unwrap();
                for u in &s.upstream {
                    proptest::prop_assert!(order.iter().position(|x| x == u).unwrap() < at);
                }
            }
            // A back edge from a stage to one it (transitively) feeds, or to itself.
            let (a, b) = (back.0 % n, back.1 % n);
            let reachable = a == b || def.downstream_closure(&name(a)).contains(&name(b).as_str());
            if reachable {
                let mut ups2 = ups.clone();
                ups2[a].push(name(b));
                match PipelineDef::new(stages(&ups2)) {
                    Err(PipelineError::Cycle(c)) => {
                        proptest::prop_assert_eq!(c.first(), c.last());
                        for w in c.windows(2) {
                            // Each stage on the path feeds the next: the next lists it upstream.
                            let next = ups2[w[1][1..].parse::<usize>().unwrap()].clone();
                            proptest::prop_assert!(next.contains(&w[0]), "{:?}", c);
                        }
                    }
                    Err(PipelineError::DuplicateUpstream { .. }) => {}
                    other => proptest::prop_assert!(false, "expected a cycle, got {:?}", other),
                }
            }
        }
    }

    /// A stage may list tens of thousands of upstream stages: the checks stay linear in the
    /// number of edges (they scanned the list once per name, which took minutes here in a
    /// debug build). A bound far above the linear cost, not a speed measurement.
    #[test]
    fn a_stage_with_a_huge_upstream_list_is_checked_in_linear_time() {
        const N: usize = 100_000;
        let mut stages: Vec<StageDef> = (0..N)
            .map(|i| StageDef {
                name: format!("s{i}"),
                code_version: 1,
                upstream: Vec::new(),
                max_attempts: DEFAULT_MAX_ATTEMPTS,
            })
            .collect();
        let all: Vec<String> = stages.iter().map(|s| s.name.clone()).collect();
        stages.push(StageDef {
            name: "sink".into(),
            code_version: 1,
            upstream: all.clone(),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
        });
        let started = std::time::Instant::now();
        let def = PipelineDef::new(stages.clone()).unwrap();
        assert_eq!(def.stage("sink").unwrap().upstream.len(), N);
        // The same list with its last name repeated: found, and named.
        let last = stages.len() - 1;
        stages[last].upstream.push(all[N / 2].clone());
        assert_eq!(
            PipelineDef::new(stages).unwrap_err(),
            PipelineError::DuplicateUpstream {
                stage: "sink".into(),
                upstream: all[N / 2].clone()
            }
        );
        let took = started.elapsed();
        assert!(
            took < std::time::Duration::from_secs(20),
            "checking 2 x {N} edges took {took:?}"
        );
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let samples = [
            "[",
            "]",
            "[stage.",
            "=",
            "\"",
            "[stage.a]\nupstream = [\"",
            "[stage.é]\n",
            "[stage.a]\ncode_version = 1\nupstream = [\"a\" \"b\"]",
            "\u{feff}[stage.a]",
            "[stage.a]\ncode_version = 1 # \"quoted\n",
        ];
        for s in samples {
            let _ = PipelineDef::parse(s);
        }
    }
}
