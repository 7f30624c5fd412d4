//! The text after each command's `--help`: examples, then what the command can answer and its exit
//! codes (SPEC R17). The examples run as written when pasted in order into an empty directory
//! after those of `oncelake --help` (tests/cli_examples.rs runs them, in the order of its
//! `HELP_WITH_EXAMPLES`); a line that shows a refusal asserts its exit code (`|| test $? = 3`).
//! Every code here is one of `exit::TABLE`; `tests/cli_examples.rs` checks that each command's
//! help has examples and names its exit codes.

/// The line every command shares: the failures that are not an outcome of the command itself.
macro_rules! failures {
    () => {
        "  1  I/O or internal failure (the message says what to do; `oncelake verify` for damage)\n  \
         2  bad arguments, a bad input file, not a store (`oncelake init` creates one)\n  \
         6  the store is locked by another process for longer than --wait (`oncelake serve`\n     \
         shares a store among processes)"
    };
}

pub(crate) const INIT: &str = concat!(
    "Examples:
  oncelake init ./lake2                  # a new store in a missing or empty directory
  oncelake init ./lake2 --json           # again: nothing changes, \"created\": false
  oncelake init ./node1 --lake file:///tmp/oncelake-help-lake   # a node of a shared lake
  oncelake init ./node2 --lake file:///tmp/oncelake-help-lake   # (s3://BUCKET/PREFIX: AWS_* vars)

Exit codes:
  0  created, or already a store (nothing changed)
",
    failures!()
);

pub(crate) const SYNC: &str = concat!(
    "Examples:
  oncelake sync ./node2                  # apply what other nodes committed to the lake
  oncelake sync ./node1 --json           # {\"lake\":...,\"seq\":N,\"store\":...}

Exit codes:
  0  in sync (a local store: nothing to do)
",
    failures!()
);

pub(crate) const CHECKPOINT: &str = concat!(
    "Examples:
  oncelake checkpoint ./node1            # new nodes of its lake start from it, not segment 1
  oncelake checkpoint ./node2 --json     # {\"bytes\":N,\"segment\":N,\"store\":...,\"written\":false}

Exit codes:
  0  written, or the lake holds it already and this node agrees with it
  1  also: this node's replica diverged from the lake (the message names what differs)
",
    failures!()
);

pub(crate) const PUT: &str = concat!(
    "Examples:
  echo 'day one' > part.csv
  oncelake put ./lake orders/date=2026-12-01 1 part.csv                  # committed
  oncelake put ./lake orders/date=2026-12-01 1 part.csv --json           # a retry: duplicate
  echo 'other' | oncelake put ./lake orders/date=2026-12-01 1 - || test $? = 3      # conflict
  echo 'old' | oncelake put ./lake orders/date=2026-12-01 0 - || test $? = 4        # stale
  echo 'fixed' | oncelake put ./lake orders/date=2026-12-01 1 - --correct          # revision 1

Outcomes and exit codes (under --json the outcome is the `outcome` field):
  0  committed   the output is now the unit's entry (a new unit, or a newer VERSION)
  0  duplicate   the same bytes are already committed at VERSION (a retry, a second worker):
                 nothing changed, nothing was written twice
  3  conflict    VERSION is committed with other bytes; the first commit wins (--correct
                 replaces it deliberately, as revision + 1)
  4  stale       a newer version of the unit is committed; nothing changed
  5  fenced      --token is not the unit's live lease (it expired and was taken over, was
                 released, or was never issued): drop this output, or claim the unit again
  6  busy        another worker holds a lease on the unit: commit with that lease's --token,
                 or after the lease ends
",
    failures!()
);

pub(crate) const GET: &str = concat!(
    "Examples:
  oncelake get ./lake orders/date=2026-11-29 -o day.parquet     # says on stderr what it wrote
  oncelake get ./lake orders/date=2026-11-29 --at 1 | wc -c     # as of seq 1, to standard output

Exit codes:
  0  written (to -o FILE, or standard output)
  2  the unit has no entry (now, or at --at; `not_found` under --json), a bad key, or --at
     outside the kept history
",
    failures!()
);

pub(crate) const LS: &str = concat!(
    "Examples:
  oncelake ls ./lake                                # unit, version, revision, size, seq, time
  oncelake ls ./lake --prefix orders/ --json        # one JSON object per entry

Exit codes:
  0  listed (also when nothing matches)
",
    failures!()
);

pub(crate) const LOG: &str = concat!(
    "Examples:
  oncelake log ./lake                               # every commit, claim and release
  oncelake log ./lake --since 2 --json              # the change feed after seq 2

Exit codes:
  0  listed
",
    failures!()
);

pub(crate) const CLAIM: &str = concat!(
    "Examples:
  oncelake claim ./lake orders/date=2026-12-02 1 --worker w2 --ttl 1m     # granted, with a token
  oncelake claim ./lake orders/date=2026-12-02 1 --worker w3 || test $? = 6   # held by w2
  oncelake claim ./lake orders/date=2026-11-29 7 --worker w3              # already done

Outcomes and exit codes:
  0  granted        the lease is yours until its end: commit with `oncelake put ... --token T`
  0  already_done   the unit is committed at this version or newer: nothing to do
  6  held           another worker holds a live lease (the message says whom and until when)
",
    failures!()
);

pub(crate) const RELEASE: &str = concat!(
    "Examples:
  oncelake claim ./lake orders/date=2026-12-03 1 --worker w4 --json > lease.json
  grep -o '\"token\":[0-9]*' lease.json | cut -d: -f2 > token         # the lease's fencing token
  oncelake release ./lake orders/date=2026-12-03 --worker w4 --token $(cat token)

Outcomes and exit codes:
  0  released     the lease ended; another worker may claim the unit at once
  5  not_holder   the token is another worker's
  5  fenced       the token is no longer the unit's live lease (expired, taken over, released)
",
    failures!()
);

pub(crate) const STATS: &str = concat!(
    "Examples:
  oncelake stats ./lake                  # units, bytes, the store's counters, this process's
  oncelake stats ./lake --json           # one object, one field per counter

Exit codes:
  0  printed
",
    failures!()
);

pub(crate) const SIMULATE: &str = "Examples:
  oncelake simulate --units 1000 --workers 4                      # both modes, side by side
  oncelake simulate --units 1000 --crash-rate 0.01 --mode coordinated --json

Units of work go to worker threads; a share of them (--overlap) is handed to two workers at
once, as a rebalancing scheduler does. The table ends with whether exactly-once held: one entry
per unit, none written twice, no orphan left, and the log replays to the manifest.

Exit codes:
  0  exactly-once held in every mode
  1  it did not (the last line says how), or an I/O failure
  2  bad arguments";

/// Examples, a blank line, then the exit codes: for the commands whose examples live with them.
pub(crate) fn join(examples: &str, codes: &str) -> String {
    format!("{examples}\n\n{codes}")
}

pub(crate) const GC: &str = concat!(
    "Examples:
  oncelake gc ./lake --dry-run           # what would be removed, with the defaults
  oncelake gc ./lake --retain 30d        # keep 30 days of history readable with --at
  oncelake gc ./lake --grace 0 --json    # also remove unknown staging files left just now

Exit codes:
  0  collected (or, with --dry-run, reported)
",
    failures!()
);

pub(crate) const VERIFY: &str = concat!(
    "Examples:
  oncelake verify ./lake                 # sizes and CRC32 of every referenced object, log replay
  oncelake verify ./lake --deep --json   # also BLAKE3 of every object against its name

Exit codes:
  0  no problem. Unreferenced objects (rejected puts) and staging files of writers that are
     gone are reported as reclaimable by `oncelake gc`, not as problems
  7  problems found: a referenced object missing or corrupt, a file in objects/ that is not an
     object, the log disagreeing with the manifest, a lake table's file wrong or missing
",
    failures!()
);

/// The exit codes of `reconcile` (after its examples).
pub(crate) const RECONCILE_CODES: &str = concat!(
    "Exit codes:
  0  the plan is complete (even with work to do)
  2  a bad listing (the error names the line)
",
    failures!()
);

/// The exit codes of `pipeline` (after its examples).
pub(crate) const PIPELINE_CODES: &str = concat!(
    "Exit codes:
  0  done: a source version set, a cell completed (or a duplicate) or its failure recorded,
     a status, the ready cells, an explanation
  3, 4, 5, 6  set-version or complete refused as a put would be: conflict, stale, fenced
     (a --token that is not the cell's live lease), busy (another worker holds it); see
     `oncelake put --help`. fail answers 5 and 6 likewise
",
    failures!()
);

/// The exit codes of `table` (after its examples).
pub(crate) const TABLE_CODES: &str = concat!(
    "Exit codes:
  0  created, listed or published (a publish with nothing new says why on stderr)
  2  a unit under the prefix is not Parquet or has the wrong key shape (the error names it and
     its seq; the versions before it are published), an unknown table, a bad prefix
",
    failures!()
);

/// The exit codes of `serve` (after its examples).
pub(crate) const SERVE_CODES: &str = "Exit codes:
  0  stopped by SIGTERM or Ctrl-C (in-flight commits finished)
  1  cannot listen, or an I/O failure
  2  bad arguments, not a store (`oncelake serve` serves an existing store: `oncelake init` first)
  6  another process holds the store (the message names it; a running server is named by its
     address and pid)";
