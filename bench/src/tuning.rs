//! Engine options a commit benchmark may set instead of the defaults, to measure what they give,
//! and the floor runs that switch part of the commit path off (`--floor`).

/// Engine options a run may set instead of the defaults (`None`: the engine's default).
#[derive(Clone, Copy, Debug, Default)]
pub struct Tuning {
    /// `Options::backlog_bytes`.
    pub backlog_bytes: Option<usize>,
    /// `Options::apply_batch_bytes`.
    pub apply_batch_bytes: Option<usize>,
    /// `Options::cache_bytes` (redb's page cache).
    pub cache_bytes: Option<usize>,
    /// `Options::apply_min_bytes`.
    pub apply_min_bytes: Option<usize>,
    /// `Options::background_apply` (`None`: the engine's default, the store's applier thread).
    pub background_apply: Option<bool>,
    /// Part of the commit path switched off (the engine's `Options::floor`).
    pub floor: Floor,
}

/// Which part of the durable commit path a floor run switches off, to see what the rest costs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Floor {
    /// Nothing: the engine as it is.
    #[default]
    None,
    /// The backlog is never applied to the B-trees: the write-ahead log alone.
    WalOnly,
    /// The write-ahead log alone, and its append not synced either.
    WalOnlyNoSync,
}

impl Floor {
    /// The name `--floor` takes and the JSON rows carry.
    pub fn name(self) -> &'static str {
        match self {
            Floor::None => "none",
            Floor::WalOnly => "wal-only",
            Floor::WalOnlyNoSync => "wal-only-nosync",
        }
    }

    /// The floor named `s` (see [`Floor::name`]).
    pub fn parse(s: &str) -> Option<Floor> {
        [Floor::None, Floor::WalOnly, Floor::WalOnlyNoSync]
            .into_iter()
            .find(|f| f.name() == s)
    }
}

impl Tuning {
    /// Sets what this tuning names in `options`. A floor needs the engine's `testing` hooks,
    /// which this package enables with its `floor` feature only.
    pub fn set(&self, options: &mut oncelake::Options) -> Result<(), String> {
        if let Some(b) = self.backlog_bytes {
            options.backlog_bytes = b;
        }
        if let Some(b) = self.apply_batch_bytes {
            options.apply_batch_bytes = b;
        }
        if let Some(b) = self.cache_bytes {
            options.cache_bytes = b;
        }
        if let Some(b) = self.background_apply {
            options.background_apply = b;
        }
        if let Some(b) = self.apply_min_bytes {
            options.apply_min_bytes = b;
        }
        self.set_floor(options)
    }

    #[cfg(feature = "floor")]
    fn set_floor(&self, options: &mut oncelake::Options) -> Result<(), String> {
        options.floor = oncelake::Floor {
            skip_apply: self.floor != Floor::None,
            skip_wal_sync: self.floor == Floor::WalOnlyNoSync,
        };
        Ok(())
    }

    #[cfg(not(feature = "floor"))]
    fn set_floor(&self, _options: &mut oncelake::Options) -> Result<(), String> {
        match self.floor {
            Floor::None => Ok(()),
            f => Err(format!(
                "floor {:?} needs the benchmark built with its floor feature: \
                 cargo build --release -p oncelake-bench --features floor",
                f.name()
            )),
        }
    }
}
