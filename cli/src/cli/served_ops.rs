//! [`StoreOps`] over the client of the server that holds the store (SPEC R20): the server
//! answers with the engine's own types, so `stats`, `reconcile` and `table` print through the
//! same code as in-process (server/tests/serve/table.rs compares both outputs).

use super::error::client_error;
use super::store_ops::{Answer, Listing, PlanForm, PlanTo, Planned, Stats, StoreOps};
use super::Progress;
use oncelake::table::{PublishReport, TableFormat, TableStatus};
use oncelake_server::{Client, PlanEnd, PlanEvent, ReconcileForm};
use std::io::Read;

/// Counts the lines of a listing as they are read (the rows the server plans from) and reports
/// them every 4096, as the in-process reconcile reports the rows it reads.
struct LineCounter<'p, R> {
    inner: R,
    rows: u64,
    reported: u64,
    progress: &'p Progress,
}

impl<R: Read> Read for LineCounter<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.rows += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        if self.rows >= self.reported + 4096 {
            self.reported = self.rows;
            self.progress.update(self.rows);
        }
        Ok(n)
    }
}

impl StoreOps for Client {
    /// One request: the engine's part and the server's own counters of the same moment.
    fn stats(&self) -> Answer<Stats> {
        let s = Client::stats(self).map_err(client_error)?;
        Ok(Stats {
            store: s.store_stats(),
            server: Some((s.server, s.server_prometheus)),
        })
    }

    /// The listing (file or standard input) is streamed as the request body; the plan comes
    /// back line by line.
    fn plan(&self, form: &PlanForm<'_>, input: Listing, to: PlanTo<'_>) -> Answer<Planned> {
        let mut input = LineCounter {
            inner: input,
            rows: 0,
            reported: 0,
            progress: to.progress,
        };
        let sort = form.sort_in.is_some();
        let served = ReconcileForm {
            changes_only: form.changes_only,
            format: form.format,
            list_up_to_date: form.list_up_to_date,
            // The server resolves a relative path against its own directory.
            sort_in: form
                .sort_in
                .map(|dir| std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf())),
        };
        let (mut sorted_seen, mut write_failed) = (false, None);
        let end = self
            .reconcile(&mut input, &served, |event| match event {
                PlanEvent::Sorted {
                    was_sorted,
                    rows,
                    spilled_runs,
                } => {
                    sorted_seen = true;
                    if !was_sorted {
                        (to.unsorted)(rows, spilled_runs);
                    }
                    true
                }
                PlanEvent::Item(item) => match (to.item)(item) {
                    Ok(()) => true,
                    Err(e) => {
                        write_failed = Some(e);
                        false
                    }
                },
            })
            .map_err(client_error)?;
        Ok(match end {
            // Only a failed write stops the plan early; without one, it ended as a closed pipe
            // does (nothing more to write, not an error).
            PlanEnd::Stopped => Planned::WriteFailed(
                write_failed.unwrap_or_else(|| std::io::ErrorKind::BrokenPipe.into()),
            ),
            PlanEnd::BadListing { kind, message } => Planned::BadListing {
                kind,
                message,
                // A listing the sort refused comes before any plan line, as in-process.
                printed: !sort || sorted_seen,
            },
            PlanEnd::Complete(summary) => Planned::Complete(summary),
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
