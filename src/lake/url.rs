//! A lake's URL (SPEC R23): parsing it and connecting to the object store it names.
//!
//! - `s3://BUCKET/PREFIX`: endpoint, region and credentials from the standard AWS environment
//!   variables, read the way `object_store`'s `AmazonS3Builder::from_env` reads them;
//! - `file:///PATH`: a directory shared by the nodes (conditional puts are hard-link based);
//! - `memory://NAME`: an in-memory store, shared by every node of this process that names the
//!   same `NAME` (tests, the simulation).

use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::prefix::PrefixStore;
use object_store::ObjectStore;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// What a lake URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LakeUrl {
    /// `s3://BUCKET/PREFIX`.
    S3 { bucket: String, prefix: String },
    /// `file:///PATH`.
    File { path: String },
    /// `memory://NAME`.
    Memory { name: String },
}

/// The shared in-memory lakes of this process, by name: in-process nodes that name the same
/// `memory://NAME` see one store, as nodes on several machines see one bucket.
fn memory_lakes() -> &'static Mutex<HashMap<String, Arc<InMemory>>> {
    static LAKES: OnceLock<Mutex<HashMap<String, Arc<InMemory>>>> = OnceLock::new();
    LAKES.get_or_init(|| Mutex::new(HashMap::new()))
}

impl LakeUrl {
    /// Parses `url`; the error says which forms are accepted.
    pub(crate) fn parse(url: &str) -> Result<LakeUrl, String> {
        let forms = "use s3://BUCKET/PREFIX, file:///ABSOLUTE/PATH or memory://NAME";
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(format!("{url:?} names no bucket; {forms}"));
            }
            return Ok(LakeUrl::S3 {
                bucket: bucket.to_string(),
                prefix: prefix.trim_matches('/').to_string(),
            });
        }
        if let Some(path) = url.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(format!("{url:?} is not an absolute path; {forms}"));
            }
            return Ok(LakeUrl::File {
                path: path.to_string(),
            });
        }
        if let Some(name) = url.strip_prefix("memory://") {
            return Ok(LakeUrl::Memory {
                name: name.to_string(),
            });
        }
        Err(format!("{url:?} is not a lake URL; {forms}"))
    }

    /// Connects to the object store the URL names (no request is sent yet).
    pub(crate) fn connect(&self) -> Result<Arc<dyn ObjectStore>, String> {
        match self {
            LakeUrl::S3 { bucket, prefix } => {
                let s3 = AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .build()
                    .map_err(|e| e.to_string())?;
                Ok(if prefix.is_empty() {
                    Arc::new(s3)
                } else {
                    Arc::new(PrefixStore::new(s3, prefix.as_str()))
                })
            }
            LakeUrl::File { path } => {
                std::fs::create_dir_all(path).map_err(|e| format!("create {path}: {e}"))?;
                let fs = LocalFileSystem::new_with_prefix(path).map_err(|e| e.to_string())?;
                Ok(Arc::new(fs))
            }
            LakeUrl::Memory { name } => {
                let mut lakes = memory_lakes()
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let store = lakes.entry(name.clone()).or_default().clone();
                Ok(match super::faults::plan_for(name) {
                    Some(plan) => Arc::new(super::faults::Faulty { inner: store, plan }),
                    None => store,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_forms_parse_and_others_are_refused_with_the_forms() {
        assert_eq!(
            LakeUrl::parse("s3://lake/sales/2026/").unwrap(),
            LakeUrl::S3 {
                bucket: "lake".into(),
                prefix: "sales/2026".into()
            }
        );
        assert_eq!(
            LakeUrl::parse("s3://lake").unwrap(),
            LakeUrl::S3 {
                bucket: "lake".into(),
                prefix: String::new()
            }
        );
        assert_eq!(
            LakeUrl::parse("file:///srv/lake").unwrap(),
            LakeUrl::File {
                path: "/srv/lake".into()
            }
        );
        assert_eq!(
            LakeUrl::parse("memory://t").unwrap(),
            LakeUrl::Memory { name: "t".into() }
        );
        for bad in ["s3://", "file://rel/path", "http://x", "lake"] {
            let e = LakeUrl::parse(bad).unwrap_err();
            assert!(e.contains("s3://BUCKET/PREFIX"), "{bad}: {e}");
        }
    }

    #[test]
    fn memory_lakes_of_one_name_are_one_store() {
        let a = LakeUrl::parse("memory://url-test-shared").unwrap();
        let s1 = a.connect().unwrap();
        let s2 = a.connect().unwrap();
        let other = LakeUrl::parse("memory://url-test-other")
            .unwrap()
            .connect()
            .unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            use object_store::ObjectStoreExt;
            let p = object_store::path::Path::from("k");
            s1.put(&p, b"v".to_vec().into()).await.unwrap();
            assert_eq!(&s2.get(&p).await.unwrap().bytes().await.unwrap()[..], b"v");
            assert!(other.get(&p).await.is_err());
        });
    }
}
