//! Reconcile (SPEC R12) and the change feed (R8): plans checked against a BTreeMap model on real
//! stores, bad listings refused with the line named and the store untouched, and the CLI contract
//! of `oncelake reconcile` and `oncelake log --since`.

mod cli;
mod feed;
mod listings;
mod memory;
mod plans;

use oncelake::reconcile::{Action, ListingFormat, PlannedUnit};
use oncelake::{Batch, Durability, Options, Store};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

/// Unit keys the generators draw from: plain ones plus keys that stress the listing syntaxes
/// (commas, quotes, backslashes, spaces, non-ASCII) and the byte order of keys.
fn key_pool() -> Vec<String> {
    let mut keys: Vec<String> = (0..300).map(|i| format!("orders/c={i:03}")).collect();
    keys.extend(
        [
            "a,b",
            "\"quoted\"",
            "back\\slash",
            " lead space",
            "é/ü",
            "Z",
            "zz,1,2",
            "日本/語",
            "emoji😀",
            "orders/c=1",
        ]
        .map(String::from),
    );
    keys
}

fn open(dir: &Path) -> Store {
    Store::open_with(
        dir,
        Options {
            durability: Durability::Relaxed {
                max_delay: Duration::from_secs(60),
            },
            ..Options::default()
        },
    )
    .unwrap()
}

/// Commits `manifest` (unit -> version) in one batch; every unit shares one small object.
fn fill(store: &Store, manifest: &BTreeMap<String, u64>) {
    if manifest.is_empty() {
        return;
    }
    let staged = store.stage_bytes(b"out").unwrap();
    let mut batch = Batch::new();
    for (u, v) in manifest {
        batch = batch.put(u.clone(), *v, &staged);
    }
    assert!(store.commit(batch).unwrap().applied());
}

/// The model: what a plan must say, computed from two maps.
fn model_full(
    manifest: &BTreeMap<String, u64>,
    listing: &BTreeMap<String, u64>,
    list_up_to_date: bool,
) -> Vec<PlannedUnit> {
    let keys: BTreeSet<&String> = manifest.keys().chain(listing.keys()).collect();
    keys.into_iter()
        .filter_map(|k| model_one(k, listing.get(k).copied(), manifest.get(k).copied()))
        .filter(|p| list_up_to_date || p.action != Action::UpToDate)
        .collect()
}

fn model_one(unit: &str, source: Option<u64>, manifest: Option<u64>) -> Option<PlannedUnit> {
    let action = match (source, manifest) {
        (None, None) => return None,
        (None, Some(_)) => Action::Unknown,
        (Some(_), None) => Action::Missing,
        (Some(s), Some(m)) if s > m => Action::Behind,
        (Some(_), Some(_)) => Action::UpToDate,
    };
    Some(PlannedUnit {
        unit: unit.to_string(),
        action,
        source_version: source,
        manifest_version: manifest,
    })
}

fn csv_line(unit: &str, v: u64) -> String {
    if unit.contains('"') || unit.starts_with(' ') {
        format!("\"{}\",{v}", unit.replace('"', "\"\""))
    } else {
        format!("{unit},{v}")
    }
}

fn json_line(unit: &str, v: u64, escape_all: bool) -> String {
    let mut s = String::from("{\"unit\": \"");
    for c in unit.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '/' if escape_all => s.push_str("\\/"),
            c if escape_all && !c.is_ascii() => {
                let mut buf = [0u16; 2];
                for u in c.encode_utf16(&mut buf) {
                    s.push_str(&format!("\\u{u:04x}"));
                }
            }
            c => s.push(c),
        }
    }
    s.push_str(&format!("\", \"version\": {v}}}"));
    s
}

fn render(listing: &[(String, u64)], format: ListingFormat, header: bool, escape: bool) -> String {
    let mut out = String::new();
    if header && format == ListingFormat::Csv {
        out.push_str("unit,version\r\n");
    }
    for (u, v) in listing {
        out.push_str(&match format {
            ListingFormat::Csv => csv_line(u, *v),
            _ => json_line(u, *v, escape),
        });
        out.push('\n');
    }
    out
}

/// Everything observable of a store's state: its seq and every entry.
fn state(store: &Store) -> (u64, Vec<oncelake::Entry>) {
    let snap = store.snapshot().unwrap();
    let entries = snap.iter().unwrap().collect::<Result<Vec<_>, _>>().unwrap();
    (store.last_seq().unwrap(), entries)
}

/// A deterministic Fisher-Yates shuffle (xorshift).
fn shuffle<T>(v: &mut [T], seed: u64) {
    let mut x = seed | 1;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
}

fn sorted(mut v: Vec<PlannedUnit>) -> Vec<PlannedUnit> {
    v.sort();
    v
}

/// A listing as rows, in order.
type Rows = Vec<(String, u64)>;
