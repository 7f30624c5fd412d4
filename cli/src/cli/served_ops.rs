//! [`StoreOps`] over the client of the server that holds the store (SPEC R20): the server
//! answers with the engine's own types, so `stats` and `table` print through the
//! same code as in-process (server/tests/serve/table.rs compares both outputs).

use super::error::client_error;
use super::store_ops::{Answer, Stats, StoreOps};
use oncelake::table::{PublishReport, TableFormat, TableStatus};
use oncelake_server::Client;

impl StoreOps for Client {
    /// One request: the engine's part and the server's own counters of the same moment.
    fn stats(&self) -> Answer<Stats> {
        let s = Client::stats(self).map_err(client_error)?;
        Ok(Stats {
            store: s.store_stats(),
            server: Some((s.server, s.server_prometheus)),
        })
    }

    fn create_table(&self, name: &str, prefix: &str, format: TableFormat) -> Answer<TableStatus> {
        self.table_create(name, prefix, &format.to_string())
            .map_err(client_error)
    }

    fn each_table(&self, each: &mut dyn FnMut(&TableStatus) -> Answer<()>) -> Answer<usize> {
        let all = self.table_ls().map_err(client_error)?;
        all.iter().try_for_each(each)?;
        Ok(all.len())
    }

    fn publish(&self, name: Option<&str>) -> Answer<Vec<PublishReport>> {
        self.table_publish(name).map_err(client_error)
    }

    fn table_prefix(&self, name: &str) -> Answer<String> {
        Ok(self
            .table_ls()
            .map_err(client_error)?
            .into_iter()
            .find(|t| t.def.name == name)
            .map(|t| t.def.prefix)
            .unwrap_or_default())
    }
}
