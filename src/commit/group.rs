//! The leader's entry for one group: pin its objects, fail the store on a panic before anything
//! else is decided (SPEC I10), hand the group to the path that makes it durable — the local
//! write-ahead path ([`crate::commit::apply`]) or, on a lake node, the lake's log
//! ([`crate::commit::lake`]) — then publish the results and answer each member.

use crate::commit::apply::{self, Done, GroupResult, Op};
use crate::core::Core;
use crate::error::{Error, Result};
use crate::metrics::add;
use crate::stage::Staged;

/// Applies a group; called by the queue's leader with the group's operations, oldest first.
pub(crate) fn apply_group(inner: &Core, ops: Vec<Op>) -> Vec<Result<Done>> {
    if let Some(cause) = inner.failed.lock().clone() {
        return ops
            .iter()
            .map(|_| {
                Err(Error::Failed {
                    cause: cause.clone(),
                })
            })
            .collect();
    }
    let n = ops.len();
    #[cfg(debug_assertions)]
    crate::commit::invariants::assert_group_bound(&ops, inner.options.max_group_units);
    // The batches are consumed while the group is decided, before it is acknowledged; their
    // staged objects must stay pinned until it is (or until the failed state is set), or GC
    // could delete an object the commit is about to make visible (I8). From the acknowledgement
    // on, every snapshot sees the group (in its tail), and GC's second look, a reader of the
    // tables, waits for it to be applied.
    let pins = pins_of(&ops);
    // Declared after the pins, so that a panic fails the store before they drop (and before the
    // queue hands leadership on): GC must never act on an unpinned object of a group whose fate
    // is unknown, and no later group may be decided from the overlay and counters a panicked
    // leader left half-written (SPEC I10).
    let _fence = inner.fail_on_unwind("a commit leader panicked while deciding or writing a group");
    let result = match write_group(inner, ops) {
        Ok((dones, index, counts)) => {
            {
                let mut idx = inner.index.write();
                for (unit, new_unit, v) in &index {
                    idx.upsert(unit, *new_unit, v);
                }
            }
            inner.metrics.c.absorb(&counts);
            inner.metrics.group_units.record(group_units(&dones));
            dones.into_iter().map(Ok).collect()
        }
        Err(e) => {
            // Nothing of the group may be acknowledged, and nothing later may be written on top of
            // a state we no longer know: fail the store until it is reopened (SPEC R5).
            let cause = e.to_string();
            inner.fail(&cause);
            add(&inner.metrics.c.sync_failures, 1);
            // A damaged record the group read is reported as what it is (SPEC I9), to every
            // member; any other error as the failed state it caused.
            (0..n)
                .map(|_| {
                    Err(match &e {
                        Error::Corrupt { path, detail } => Error::Corrupt {
                            path: path.clone(),
                            detail: detail.clone(),
                        },
                        _ => Error::Failed {
                            cause: cause.clone(),
                        },
                    })
                })
                .collect()
        }
    };
    drop(pins);
    result
}

/// Clones of the staged handles of every commit in the group (each clone holds its object's pin).
fn pins_of(ops: &[Op]) -> Vec<Staged> {
    ops.iter()
        .filter_map(|o| match o {
            Op::Commit(b) => Some(b.items.iter().map(|i| i.staged.clone())),
            _ => None,
        })
        .flatten()
        .collect()
}

/// A lake node's groups are made durable in the lake's log (docs/lake.md); every other store's
/// by its own write-ahead path.
fn write_group(inner: &Core, ops: Vec<Op>) -> Result<GroupResult> {
    #[cfg(feature = "lake")]
    if let Some(lake) = &inner.lake {
        return crate::commit::lake::write_group(inner, lake, ops);
    }
    apply::write_group(inner, ops)
}

fn group_units(dones: &[Done]) -> u64 {
    dones
        .iter()
        .map(|d| match d {
            Done::Commit(r) => r.units.len() as u64,
            Done::ClaimMany(c) => c.len() as u64,
            _ => 1,
        })
        .sum()
}
