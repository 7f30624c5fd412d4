//! The operations of `stats` and `table` as one interface, [`StoreOps`], over the
//! store open in this process (here) and over the client of the server that holds it
//! (`served_ops`), so that each of those commands is written once, as the commands over the
//! engine's `UnitStore` are.
//!
//! A CLI trait rather than more `UnitStore` methods: the table calls fail with the engine's
//! `TableError` (not the store's error) and publish only with its `tables` feature, which a
//! client-only build does not compile; and `stats` of a served store adds the server's own
//! counters. (`reconcile` is the engine's `UnitStore::reconcile`.)

use super::CliError;
use oncelake::table::{PublishReport, TableFormat, TableStatus};
use oncelake::{Store, StoreStats, UnitStore};
use serde_json::Value;

/// What `stats` prints: the engine's answer and, for a served store, the serving process's own
/// counters.
pub(crate) struct Stats {
    /// What the store holds and its metrics (`UnitStore::stats`).
    pub store: StoreStats,
    /// The server's own counters: as JSON, and in the Prometheus text format.
    pub server: Option<(Value, String)>,
}

/// What a [`StoreOps`] call answers.
pub(crate) type Answer<T> = Result<T, CliError>;

/// The operations of `stats` and `table` on either store, with the engine's answers.
pub(crate) trait StoreOps {
    /// What the store holds and its metrics, with a server's own counters.
    fn stats(&self) -> Answer<Stats>;
    /// Defines a table; its status.
    fn create_table(&self, name: &str, prefix: &str, format: TableFormat) -> Answer<TableStatus>;
    /// Each table's status, to `each` in name order; how many tables there are.
    fn each_table(&self, each: &mut dyn FnMut(&TableStatus) -> Answer<()>) -> Answer<usize>;
    /// Publishes table `name`, or every table.
    fn publish(&self, name: Option<&str>) -> Answer<Vec<PublishReport>>;
    /// The unit-key prefix of table `name`.
    fn table_prefix(&self, name: &str) -> Answer<String>;
}

impl StoreOps for Store {
    fn stats(&self) -> Answer<Stats> {
        Ok(Stats {
            store: UnitStore::stats(self)?,
            server: None,
        })
    }

    fn create_table(&self, name: &str, prefix: &str, format: TableFormat) -> Answer<TableStatus> {
        let def = Store::create_table(self, name, prefix, format)?;
        Ok(self.table_status(&def)?)
    }

    fn each_table(&self, each: &mut dyn FnMut(&TableStatus) -> Answer<()>) -> Answer<usize> {
        let defs = self.tables()?;
        for d in &defs {
            each(&self.table_status(d)?)?;
        }
        Ok(defs.len())
    }

    fn publish(&self, name: Option<&str>) -> Answer<Vec<PublishReport>> {
        Ok(match name {
            Some(n) => vec![self.publish_table(n)?],
            None => self.publish_tables()?,
        })
    }

    fn table_prefix(&self, name: &str) -> Answer<String> {
        Ok(self.table(name)?.prefix)
    }
}
