//! Fencing as a rule of the commit (SPEC R3's fenced and busy rows, R4, R9, I6), against callers
//! that do not behave: forged, foreign, superseded and released tokens, commits without a token
//! under a live lease, releases by the wrong worker, pipeline completions and failures — through the
//! library and through the command line.

use crate::bin::run as oncelake;
use crate::common;

use common::{granted, open_relaxed_with_clock as open};
use oncelake::pipeline::{Attempt, Claim, FailOutcome, Pipeline, PipelineDef};
use oncelake::{
    Batch, ClaimOutcome, FenceReason, Lease, ManualClock, Outcome, ReleaseOutcome, Store,
};
use std::process::Output;
use std::time::Duration;

const T0: u64 = 1_800_000_000_000;
const TTL: Duration = Duration::from_secs(600);

fn put(store: &Store, unit: &str, version: u64, bytes: &[u8], token: Option<u64>) -> Outcome {
    let staged = store.stage_bytes(bytes).unwrap();
    let batch = Batch::new().item(
        unit.to_string(),
        version,
        &staged,
        token,
        oncelake::Intent::Put,
    );
    store.commit(batch).unwrap().units[0].outcome
}

/// Puts, and fails unless the put committed.
#[track_caller]
fn commits(store: &Store, unit: &str, version: u64, bytes: &[u8], token: Option<u64>) {
    let outcome = put(store, unit, version, bytes, token);
    assert!(matches!(outcome, Outcome::Committed { .. }), "{outcome:?}");
}

/// Puts, and fails unless the put was a duplicate of the unit's newest commit.
#[track_caller]
fn is_duplicate(store: &Store, unit: &str, version: u64, bytes: &[u8], token: Option<u64>) {
    let outcome = put(store, unit, version, bytes, token);
    assert!(matches!(outcome, Outcome::Duplicate { .. }), "{outcome:?}");
}

/// Puts under `token`, and fails unless the put was fenced with `newest_token` as the unit's newest.
#[track_caller]
fn is_fenced(store: &Store, unit: &str, version: u64, bytes: &[u8], token: u64, newest_token: u64) {
    assert_eq!(
        put(store, unit, version, bytes, Some(token)),
        fenced(token, newest_token)
    );
}

/// `lease` as another `worker` hands it over (a release or renewal by the wrong worker).
fn handed_over(lease: &Lease, worker: &str) -> Lease {
    Lease {
        worker: worker.into(),
        ..lease.clone()
    }
}

fn fenced(token: u64, newest_token: u64) -> Outcome {
    Outcome::Fenced {
        token,
        newest_token,
    }
}

fn version_of(store: &Store, unit: &str) -> Option<u64> {
    store.get(unit).unwrap().map(|e| e.source_version)
}

/// Defect: with the unit's newest token at 4, a put with token 99 committed, and a put with a
/// token on a unit never claimed committed.
#[test]
fn tokens_never_issued_are_fenced_whatever_their_number() {
    let (_dir, _, store) = common::on_clock(T0, open);
    let mut newest = 0;
    for unit in ["x", "y", "z", "u"] {
        newest = granted(store.claim(unit, 1, "w1", TTL).unwrap()).token;
    }
    assert_eq!(newest, 4, "tokens come from one counter");
    assert_eq!(put(&store, "u", 5, b"forged", Some(99)), fenced(99, 4));
    assert_eq!(FenceReason::of(99, 4), FenceReason::NotIssued);
    is_fenced(&store, "never-claimed", 1, b"f", 12_345, 0);
    assert_eq!(put(&store, "never-claimed", 1, b"f", Some(1)), fenced(1, 0));
    assert_eq!(version_of(&store, "u"), None);
    assert_eq!(version_of(&store, "never-claimed"), None);
    // The holder is unaffected.
    commits(&store, "u", 5, b"mine", Some(4));
    assert_eq!(store.metrics().fenced_rejections, 3);
}

/// Defect: a token issued for unit `a` committed unit `b` while another worker held a live lease
/// on `b`, and the holder then got `conflict`.
#[test]
fn a_token_issued_for_another_unit_is_fenced_and_the_holder_commits() {
    let (_dir, _, store) = common::on_clock(T0, open);
    let on_b = granted(store.claim("b", 1, "w2", TTL).unwrap());
    let on_a = granted(store.claim("a", 1, "w1", TTL).unwrap());
    assert!(on_a.token > on_b.token);
    is_fenced(&store, "b", 1, b"from a", on_a.token, on_b.token);
    // An older token of another unit is fenced too.
    let on_c = granted(store.claim("c", 1, "w3", TTL).unwrap());
    is_fenced(&store, "c", 1, b"from b", on_b.token, on_c.token);
    commits(&store, "b", 1, b"w2's", Some(on_b.token));
    let snap = store.snapshot().unwrap();
    let entry = snap.get("b").unwrap().unwrap();
    assert_eq!(snap.read_object(&entry).unwrap(), b"w2's".to_vec());
}

/// Defect: after a claim, a put without a token committed and the holder's fenced put then got a
/// conflict. Now it is busy, naming the holder and when its lease ends.
#[test]
fn a_commit_without_a_token_under_a_live_lease_is_busy() {
    let (_dir, _, store) = common::on_clock(T0, open);
    let lease = granted(store.claim("unitA", 5, "w1", TTL).unwrap());
    let staged = store.stage_bytes(b"sneaky").unwrap();
    let r = store.commit(Batch::new().put("unitA", 5, &staged)).unwrap();
    assert_eq!(
        r.units[0].outcome,
        Outcome::Busy {
            expires_at_ms: lease.expires_at_ms
        }
    );
    assert_eq!(r.units[0].holder.as_deref(), Some("w1"));
    assert_eq!(r.seq, None);
    // Also the holder itself, without its token; also a correction.
    let staged = store.stage_bytes(b"fix").unwrap();
    let r = store
        .commit(Batch::new().correct("unitA", 5, &staged))
        .unwrap();
    assert!(matches!(r.units[0].outcome, Outcome::Busy { .. }));
    assert_eq!(version_of(&store, "unitA"), None);
    commits(&store, "unitA", 5, b"w1's", Some(lease.token));
    assert_eq!(store.metrics().busy_rejections, 2);
}

/// An expired lease no longer makes a commit without a token busy; that commit ends the lease, so
/// the old holder's token — still the newest — is fenced from then on.
#[test]
fn a_commit_without_a_token_after_expiry_fences_every_earlier_token() {
    let (_dir, clock, store) = common::on_clock(T0, open);
    let lease = granted(store.claim("u", 1, "w1", TTL).unwrap());
    clock.advance_ms(TTL.as_millis() as u64);
    commits(&store, "u", 1, b"anon", None);
    is_fenced(&store, "u", 2, b"late", lease.token, lease.token);
    assert_eq!(version_of(&store, "u"), Some(1));
    // After a release too.
    let l2 = granted(store.claim("u", 3, "w1", TTL).unwrap());
    assert!(store.release(&l2).unwrap().is_released());
    commits(&store, "u", 3, b"anon3", None);
    is_fenced(&store, "u", 4, b"late", l2.token, l2.token);
}

/// Safety never depends on clocks: an expired lease whose token is still the newest commits,
/// whatever the clock says, also after it jumped far ahead.
#[test]
fn an_expired_lease_whose_token_is_still_the_newest_commits() {
    let (_dir, clock, store) = common::on_clock(T0, open);
    let lease = granted(store.claim("u", 1, "w1", Duration::from_millis(1)).unwrap());
    clock.advance_ms(365 * 86_400_000);
    commits(&store, "u", 1, b"slow but newest", Some(lease.token));
    // Its commit ended the lease: a retry of the same bytes is a duplicate, other bytes fenced.
    is_duplicate(&store, "u", 1, b"slow but newest", Some(lease.token));
    is_fenced(&store, "u", 2, b"more", lease.token, lease.token);
}

/// Defect: `release` ignored the worker — w2 released w1's lease — and the released token still
/// committed afterwards.
#[test]
fn release_needs_the_holders_worker_and_token_and_a_released_token_never_commits() {
    let (_dir, _, store) = common::on_clock(T0, open);
    let lease = granted(store.claim("u", 1, "w1", TTL).unwrap());
    let by_w2 = handed_over(&lease, "w2");
    assert_eq!(
        store.release(&by_w2).unwrap(),
        ReleaseOutcome::NotHolder {
            holder: "w1".into()
        }
    );
    // Nothing changed: w1 still holds it, w2 cannot claim it.
    assert!(matches!(
        store.claim("u", 1, "w2", TTL).unwrap(),
        ClaimOutcome::Held { ref worker, .. } if worker == "w1"
    ));
    let wrong_token = Lease {
        token: lease.token + 7,
        ..lease.clone()
    };
    assert_eq!(
        store.release(&wrong_token).unwrap(),
        ReleaseOutcome::Lost {
            newest_token: lease.token
        }
    );
    assert_eq!(
        store
            .release(&Lease {
                unit: "never-claimed".into(),
                ..lease.clone()
            })
            .unwrap(),
        ReleaseOutcome::Lost { newest_token: 0 }
    );
    assert_eq!(store.metrics().claims_released, 0);
    assert_eq!(store.release(&lease).unwrap(), ReleaseOutcome::Released);
    assert_eq!(
        store.release(&lease).unwrap(),
        ReleaseOutcome::Lost {
            newest_token: lease.token
        }
    );
    is_fenced(&store, "u", 1, b"after release", lease.token, lease.token);
    assert_eq!(version_of(&store, "u"), None);
}

/// R4: busy and fenced units abort an all-or-nothing batch with every unit's reason; the partial
/// mode applies what it can and reports the rest per unit.
#[test]
fn a_released_token_is_fenced_even_for_an_exact_retry_but_a_committed_one_hears_duplicate() {
    let (dir, clock, store) = common::on_clock(T0, open);
    // Released by its holder, then someone commits exactly what the holder would have.
    let gave_up = granted(store.claim("r", 1, "w1", TTL).unwrap());
    assert_eq!(store.release(&gave_up).unwrap(), ReleaseOutcome::Released);
    commits(&store, "r", 1, b"same", None);
    assert_eq!(
        put(&store, "r", 1, b"same", Some(gave_up.token)),
        fenced(gave_up.token, gave_up.token),
        "a released token never gets through, not even as a duplicate"
    );
    // Ended by its own commit: a retry of that commit (a lost acknowledgement) is a duplicate,
    // anything else is fenced.
    let done = granted(store.claim("c", 1, "w1", TTL).unwrap());
    let first = put(&store, "c", 1, b"out", Some(done.token));
    let Outcome::Committed { seq, .. } = first else {
        panic!("{first:?}")
    };
    assert_eq!(
        put(&store, "c", 1, b"out", Some(done.token)),
        Outcome::Duplicate { seq }
    );
    is_fenced(&store, "c", 2, b"newer", done.token, done.token);
    // Both survive a reopen (the claim record says how the lease ended).
    drop(store);
    let store = open(&dir.path().join("s"), &clock);
    is_fenced(&store, "r", 1, b"same", gave_up.token, gave_up.token);
    assert_eq!(
        put(&store, "c", 1, b"out", Some(done.token)),
        Outcome::Duplicate { seq }
    );
}

#[test]
fn only_the_holder_renews_its_lease() {
    let (_dir, clock, store) = common::on_clock(T0, open);
    let lease = granted(store.claim("u", 1, "w1", TTL).unwrap());
    let by_w2 = handed_over(&lease, "w2");
    assert!(matches!(
        store.renew(&by_w2, TTL * 10).unwrap(),
        oncelake::RenewOutcome::Lost { newest_token } if newest_token == lease.token
    ));
    // Nothing changed: the lease still ends when w1's claim said, so w2 takes it over then.
    clock.advance_ms(TTL.as_millis() as u64 + 1);
    assert!(matches!(
        store.claim("u", 1, "w2", TTL).unwrap(),
        ClaimOutcome::Granted {
            took_over: true,
            ..
        }
    ));
    let renewed = store.renew(&lease, TTL).unwrap();
    assert!(
        matches!(renewed, oncelake::RenewOutcome::Lost { .. }),
        "{renewed:?}"
    );
}

#[test]
fn busy_and_fenced_units_abort_an_all_or_nothing_batch_and_are_reported_per_unit() {
    let (_dir, _, store) = common::on_clock(T0, open);
    let held = granted(store.claim("held", 1, "w9", TTL).unwrap());
    let mine = granted(store.claim("mine", 1, "w1", TTL).unwrap());
    let s = |b: &[u8]| store.stage_bytes(b).unwrap();
    let batch = |partial: bool| {
        let b = Batch::new()
            .put("free", 1, &s(b"free"))
            .put("held", 1, &s(b"held"))
            .put_fenced("forged", 1, &s(b"forged"), 10_000)
            .put_fenced("mine", 1, &s(b"mine"), mine.token);
        if partial {
            b.partial()
        } else {
            b
        }
    };
    let r = store.commit(batch(false)).unwrap();
    assert_eq!(r.seq, None);
    let outcomes: Vec<Outcome> = r.units.iter().map(|u| u.outcome).collect();
    assert_eq!(
        outcomes,
        vec![
            Outcome::Aborted,
            Outcome::Busy {
                expires_at_ms: held.expires_at_ms
            },
            fenced(10_000, 0),
            Outcome::Aborted,
        ]
    );
    assert_eq!(r.units[1].holder.as_deref(), Some("w9"));
    assert_eq!(r.rejected().count(), 2);
    assert!(store.snapshot().unwrap().iter().unwrap().next().is_none());
    // The aborted batch did not end w1's lease: its token still commits.
    let r = store.commit(batch(true)).unwrap();
    let names: Vec<&str> = r.units.iter().map(|u| u.outcome.name()).collect();
    assert_eq!(names, ["committed", "busy", "fenced", "committed"]);
    assert_eq!(version_of(&store, "free"), Some(1));
    assert_eq!(version_of(&store, "mine"), Some(1));
    assert_eq!(version_of(&store, "held"), None);
    let m = store.metrics();
    assert_eq!((m.busy_rejections, m.fenced_rejections), (2, 2));
    assert!(m
        .to_prometheus()
        .contains("oncelake_busy_rejections_total 2"));
}

fn pipeline() -> Pipeline {
    Pipeline::new(
        PipelineDef::parse(
            "[stage.ingest]\ncode_version = 1\n[stage.load]\ncode_version = 1\nupstream = [\"ingest\"]\n",
        )
        .unwrap(),
    )
}

fn attempt(stage: &str, worker: &str, token: Option<u64>) -> Attempt {
    Attempt {
        unit: "u".into(),
        stage: stage.into(),
        source_version: 4,
        worker: worker.into(),
        token,
    }
}

/// Pipeline completions and failures obey the same rules: without a token on a claimed cell busy,
/// with a token not the cell's fenced.
#[test]
fn pipeline_complete_and_fail_obey_the_lease_rules() {
    let (_dir, _, store) = common::on_clock(T0, open);
    let p = pipeline();
    p.set_source_version(&store, "u", 4, b"in").unwrap();
    let other = granted(store.claim("elsewhere", 1, "w3", TTL).unwrap());
    let ready = p.ready(&store, 10).unwrap();
    let Claim::Granted { lease, .. } = p.claim(&store, &ready[0], "w1", TTL).unwrap() else {
        panic!("claim");
    };
    let busy = p
        .complete(&store, &attempt("ingest", "cli", None), b"x")
        .unwrap();
    assert_eq!(
        busy.outcome,
        Outcome::Busy {
            expires_at_ms: lease.expires_at_ms
        }
    );
    assert_eq!(busy.holder.as_deref(), Some("w1"));
    assert_eq!(
        p.fail(&store, &attempt("ingest", "w2", None), "not mine")
            .unwrap(),
        FailOutcome::Busy {
            worker: "w1".into(),
            expires_at_ms: lease.expires_at_ms
        }
    );
    for token in [other.token, lease.token + 100, 0] {
        assert_eq!(
            p.complete(&store, &attempt("ingest", "w2", Some(token)), b"x")
                .unwrap()
                .outcome,
            fenced(token, lease.token)
        );
        assert_eq!(
            p.fail(&store, &attempt("ingest", "w2", Some(token)), "forged")
                .unwrap(),
            FailOutcome::Fenced {
                token,
                newest_token: lease.token
            }
        );
    }
    let e = p.explain(&store, "u").unwrap();
    assert_eq!(e.cells[0].state.name(), "running", "{e:?}");
    // The holder's failure is recorded and ends its lease; its token then fails nothing more.
    assert!(matches!(
        p.fail(&store, &attempt("ingest", "w1", Some(lease.token)), "boom")
            .unwrap(),
        FailOutcome::Recorded { attempts: 1, .. }
    ));
    assert_eq!(
        p.fail(&store, &attempt("ingest", "w1", Some(lease.token)), "again")
            .unwrap(),
        FailOutcome::Fenced {
            token: lease.token,
            newest_token: lease.token
        }
    );
    let m = store.metrics();
    assert_eq!((m.busy_rejections, m.fenced_rejections), (2, 7));
}

// ---- The command line ----

fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json(out: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().next().unwrap_or_else(|| {
        panic!("no output; stderr: {}", stderr(out));
    }))
    .unwrap()
}

fn claim_token(store: &str, unit: &str, worker: &str) -> String {
    let out = oncelake(
        &[
            "claim", store, unit, "5", "--worker", worker, "--ttl", "10m", "--json",
        ],
        None,
    );
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    json(&out)["token"].as_u64().unwrap().to_string()
}

fn ls_units(store: &str) -> Vec<String> {
    let out = oncelake(&["ls", store, "--json"], None);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["unit"].to_string())
        .collect()
}

/// A store made by `oncelake init` in a new directory (which must outlive it), and its path.
fn cli_store() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("c").to_str().unwrap().to_string();
    assert_eq!(code(&oncelake(&["init", &st], None)), Some(0));
    (dir, st)
}

/// The defects of the issue, as a user meets them on the command line.
#[test]
fn cli_puts_with_foreign_forged_or_missing_tokens_are_refused() {
    let (_dir, st) = cli_store();
    let st = st.as_str();
    let mut tokens = Vec::new();
    for unit in ["x", "y", "z", "unitA"] {
        tokens.push(claim_token(st, unit, "w1"));
    }
    assert_eq!(tokens[3], "4");
    // A token never issued, on a claimed unit and on a unit never claimed: fenced, exit 5.
    let forged = oncelake(&["put", st, "unitA", "5", "-", "--token", "99"], Some(b"f"));
    assert_eq!(code(&forged), Some(5), "{}", stderr(&forged));
    assert!(
        stderr(&forged).contains("never issued"),
        "{}",
        stderr(&forged)
    );
    let never = oncelake(
        &[
            "put",
            st,
            "never-claimed",
            "1",
            "-",
            "--token",
            "12345",
            "--json",
        ],
        Some(b"f"),
    );
    assert_eq!(code(&never), Some(5));
    assert_eq!(json(&never)["outcome"], "fenced");
    // Another unit's token on a unit another worker holds: fenced.
    let b_token = claim_token(st, "b", "w2");
    let foreign = oncelake(
        &["put", st, "b", "5", "-", "--token", &tokens[0]],
        Some(b"f"),
    );
    assert_eq!(code(&foreign), Some(5), "{}", stderr(&foreign));
    // No token while w1's lease on unitA is live: busy, exit 6, naming the holder.
    let busy = oncelake(&["put", st, "unitA", "5", "-", "--json"], Some(b"anon"));
    assert_eq!(code(&busy), Some(6), "{}", stderr(&busy));
    let v = json(&busy);
    assert_eq!(v["outcome"], "busy");
    assert_eq!(v["holder"], "w1");
    assert!(v["expires_at_ms"].as_u64().unwrap() > 0);
    let busy = oncelake(&["put", st, "unitA", "5", "-"], Some(b"anon"));
    assert_eq!(code(&busy), Some(6));
    assert!(stderr(&busy).contains("w1"), "{}", stderr(&busy));
    assert!(ls_units(st).is_empty(), "nothing was committed");
    // The holders commit.
    for (unit, token) in [("unitA", &tokens[3]), ("b", &b_token)] {
        let ok = oncelake(
            &["put", st, unit, "5", "-", "--token", token],
            Some(b"mine"),
        );
        assert_eq!(code(&ok), Some(0), "{}", stderr(&ok));
    }
}

#[test]
fn cli_release_needs_the_holder_and_a_released_token_never_commits() {
    let (_dir, st) = cli_store();
    let st = st.as_str();
    let token = claim_token(st, "u", "w1");
    let by_w2 = oncelake(
        &["release", st, "u", "--worker", "w2", "--token", &token],
        None,
    );
    assert_eq!(code(&by_w2), Some(5), "{}", stderr(&by_w2));
    assert!(stderr(&by_w2).contains("held by w1"), "{}", stderr(&by_w2));
    // Nothing changed: w2 cannot claim it.
    let held = oncelake(
        &["claim", st, "u", "5", "--worker", "w2", "--ttl", "10m"],
        None,
    );
    assert_eq!(code(&held), Some(6));
    let ok = oncelake(
        &[
            "release", st, "u", "--worker", "w1", "--token", &token, "--json",
        ],
        None,
    );
    assert_eq!(code(&ok), Some(0), "{}", stderr(&ok));
    assert_eq!(json(&ok)["outcome"], "released");
    let late = oncelake(
        &["put", st, "u", "5", "-", "--token", &token],
        Some(b"late"),
    );
    assert_eq!(code(&late), Some(5), "{}", stderr(&late));
    assert!(ls_units(st).is_empty());
}

#[test]
fn cli_pipeline_complete_without_a_token_is_busy_and_fail_refuses_a_blocked_cell() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("c");
    let st = st.to_str().unwrap();
    let def = dir.path().join("p.toml");
    std::fs::write(
        &def,
        "[stage.ingest]\ncode_version = 1\n[stage.load]\ncode_version = 1\nupstream = [\"ingest\"]\n",
    )
    .unwrap();
    let def = def.to_str().unwrap();
    assert_eq!(code(&oncelake(&["init", st], None)), Some(0));
    let set = oncelake(&["pipeline", "set-version", st, "u", "1", "-"], Some(b"in"));
    assert_eq!(code(&set), Some(0), "{}", stderr(&set));
    let claimed = oncelake(
        &[
            "pipeline",
            "ready",
            st,
            "--pipeline",
            def,
            "--claim",
            "--worker",
            "w1",
            "--json",
        ],
        None,
    );
    assert_eq!(code(&claimed), Some(0), "{}", stderr(&claimed));
    let token = json(&claimed)["token"].as_u64().unwrap().to_string();
    let complete = |token: Option<&str>, stage: &str| {
        let mut args = vec![
            "pipeline",
            "complete",
            st,
            "--pipeline",
            def,
            "u",
            stage,
            "-",
            "--json",
        ];
        if let Some(t) = token {
            args.extend(["--token", t]);
        }
        oncelake(&args, Some(b"out"))
    };
    let busy = complete(None, "ingest");
    assert_eq!(code(&busy), Some(6), "{}", stderr(&busy));
    assert_eq!(json(&busy)["holder"], "w1");
    let fail = |stage: &str, token: Option<&str>| {
        let mut args = vec![
            "pipeline",
            "fail",
            st,
            "--pipeline",
            def,
            "u",
            stage,
            "--error",
            "e",
            "--worker",
            "w2",
        ];
        if let Some(t) = token {
            args.extend(["--token", t]);
        }
        oncelake(&args, None)
    };
    let busy = fail("ingest", None);
    assert_eq!(code(&busy), Some(6), "{}", stderr(&busy));
    assert!(stderr(&busy).contains("w1"), "{}", stderr(&busy));
    let forged = fail("ingest", Some("777"));
    assert_eq!(code(&forged), Some(5), "{}", stderr(&forged));
    // `load` is blocked on `ingest`: neither completed nor failed.
    let blocked = fail("load", None);
    assert_eq!(code(&blocked), Some(2), "{}", stderr(&blocked));
    assert!(
        stderr(&blocked).contains("blocked on ingest"),
        "{}",
        stderr(&blocked)
    );
    let blocked = complete(None, "load");
    assert_eq!(code(&blocked), Some(2), "{}", stderr(&blocked));
    let ok = complete(Some(&token), "ingest");
    assert_eq!(code(&ok), Some(0), "{}", stderr(&ok));
    assert_eq!(json(&ok)["outcome"], "committed");
    // The retry of that very completion is a duplicate.
    let again = complete(Some(&token), "ingest");
    assert_eq!(code(&again), Some(0), "{}", stderr(&again));
    assert_eq!(json(&again)["outcome"], "duplicate");
}

/// I6 and the busy row from the commit log alone: replaying the claim records in log order, every
/// entry that carries a token carries its unit's newest token of a lease that has not ended, and
/// every entry without one was committed when no lease on its unit was live (by the record's own
/// time). Any applied commit ends its unit's lease. Returns the entries committed with a token.
fn check_fencing_in_log(store: &Store) -> usize {
    use oncelake::log::RecordBody;
    let snap = store.snapshot().unwrap();
    // unit -> (token, expires, ended)
    let mut leases: std::collections::HashMap<String, (u64, u64, bool)> = Default::default();
    let mut fenced_entries = 0;
    for rec in snap.changes_since(0).unwrap() {
        let rec = rec.unwrap();
        match rec.body {
            RecordBody::ClaimGranted(c) => {
                leases.insert(c.unit, (c.token, c.expires_at_ms, false));
            }
            RecordBody::ClaimReleased(c) => {
                let l = leases
                    .get_mut(&c.unit)
                    .expect("a release of a granted lease");
                assert!(l.0 == c.token && !l.2, "seq {}: bad release", rec.seq);
                l.2 = true;
            }
            RecordBody::Commit { entries } => {
                for e in entries {
                    let l = leases.get_mut(&e.unit);
                    match (e.token, l.as_deref()) {
                        (Some(t), Some(&(newest, _, ended))) => {
                            assert!(
                                t == newest && !ended,
                                "I6: seq {} committed {} with token {t}; newest {newest}, ended {ended}",
                                rec.seq,
                                e.unit
                            );
                            fenced_entries += 1;
                        }
                        (Some(t), None) => panic!(
                            "I6: seq {} committed {} with token {t}, never issued for it",
                            rec.seq, e.unit
                        ),
                        (None, Some(&(_, expires, ended))) => assert!(
                            ended || rec.time_ms >= expires,
                            "seq {} committed {} without a token under a live lease",
                            rec.seq,
                            e.unit
                        ),
                        (None, None) => {}
                    }
                    if let Some(l) = l {
                        l.2 = true;
                    }
                }
            }
            RecordBody::Extension { .. } => {}
        }
    }
    fenced_entries
}

/// Honest and hostile workers at once, through the group commit: holders commit under their
/// tokens while others commit without one, with forged, foreign, superseded and released tokens,
/// release each other's leases and move the clock. Whatever the interleaving, the log shows only
/// valid tokens and no token-less commit under a live lease, and every answer is one the rule
/// allows.
#[test]
fn hostile_workers_never_get_a_commit_past_the_rule() {
    let (_dir, clock, store) = common::on_clock(T0, open);
    // Which rows a round reaches depends on the interleaving (a busy answer needs a token-less
    // put while another thread's lease is live): rounds go on, on the same store, until every
    // row was reached, so that the check below is never vacuous and never flaky. Each round has
    // units of its own: once a unit's highest version is committed it can no longer be claimed
    // (`AlreadyDone`), so rounds on the same units would soon offer no lease to be busy on.
    for round in 0..MAX_HOSTILE_ROUNDS {
        let units = ["a", "b", "c", "d"].map(|u| format!("{u}{round}"));
        hostile_round(&store, &clock, &units, round);
        let m = store.metrics();
        if m.fenced_rejections > 0 && m.busy_rejections > 0 {
            break;
        }
    }
    let with_token = check_fencing_in_log(&store);
    let m = store.metrics();
    assert!(
        with_token > 0 && m.fenced_rejections > 0 && m.busy_rejections > 0,
        "the run must exercise every row: {with_token} token commits, {m:?}"
    );
}

const MAX_HOSTILE_ROUNDS: u64 = 50;

/// One round of six hostile workers (see above); `round` varies their random choices.
fn hostile_round(store: &Store, clock: &ManualClock, units: &[String; 4], round: u64) {
    std::thread::scope(|s| {
        for w in 0..6u64 {
            let (store, clock) = (store, clock);
            s.spawn(move || {
                let worker = format!("w{w}");
                let mut rng = (w + 6 * round).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                let mut next = move |n: u64| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng % n
                };
                let mut mine: Vec<Lease> = Vec::new();
                let mut seen: Vec<Lease> = Vec::new();
                for i in 0..120u64 {
                    let unit = units[next(4) as usize].as_str();
                    let version = 1 + next(6);
                    let body = format!("{unit}-{version}-{worker}-{i}");
                    match next(8) {
                        0 | 1 => {
                            let ttl = Duration::from_millis(1 + next(3_000));
                            if let ClaimOutcome::Granted { lease, .. } =
                                store.claim(unit, version, &worker, ttl).unwrap()
                            {
                                mine.push(lease.clone());
                                seen.push(lease);
                            }
                        }
                        2 if !mine.is_empty() => {
                            let l = mine.swap_remove(next(mine.len() as u64) as usize);
                            let o = put(
                                store,
                                &l.unit,
                                l.source_version,
                                body.as_bytes(),
                                Some(l.token),
                            );
                            assert!(!matches!(o, Outcome::Busy { .. }), "{o:?}");
                        }
                        3 => {
                            let o = put(store, unit, version, body.as_bytes(), None);
                            assert!(!matches!(o, Outcome::Fenced { .. }), "{o:?}");
                        }
                        4 if !seen.is_empty() => {
                            // Someone else's (or an old) token on any unit.
                            let l = &seen[next(seen.len() as u64) as usize];
                            put(store, unit, version, body.as_bytes(), Some(l.token));
                        }
                        5 => {
                            let forged = 1 + next(10_000);
                            put(store, unit, version, body.as_bytes(), Some(forged));
                        }
                        6 if !seen.is_empty() => {
                            let l = seen[next(seen.len() as u64) as usize].clone();
                            let by = if next(2) == 0 {
                                worker.clone()
                            } else {
                                l.worker.clone()
                            };
                            let r = store
                                .release(&Lease {
                                    worker: by.clone(),
                                    ..l.clone()
                                })
                                .unwrap();
                            if r.is_released() {
                                assert_eq!(by, l.worker, "only the holder releases");
                            }
                        }
                        _ => clock.advance_ms(next(1_000)),
                    }
                }
            });
        }
    });
}

/// The leader decides a unit's lease without reading the claims table while the store has never
/// recorded one (P1's commits); from the first lease on it finds every unit's wherever it is: in
/// the overlay while its group waits for the B-trees, in the applied table afterwards, and in the
/// table found at open. Defect guarded against: a lease only the claims table held (applied, or
/// there at open) was missed, and a put without a token committed under it.
#[test]
fn a_lease_is_found_in_the_overlay_in_the_applied_table_and_after_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let clock = ManualClock::new(T0);
    let busy = |o: Outcome| matches!(o, Outcome::Busy { .. });
    let token = {
        let store = common::open_with_clock(&path, &clock);
        commits(&store, "free", 1, b"a", None);
        let lease = granted(store.claim("held", 1, "w1", TTL).unwrap());
        assert!(busy(put(&store, "held", 1, b"b", None)), "from the overlay");
        store.flush().unwrap();
        assert!(busy(put(&store, "held", 1, b"b", None)), "from the table");
        let forged = lease.token + 1;
        is_fenced(&store, "held", 1, b"b", forged, lease.token);
        lease.token
    };
    let store = common::open_with_clock(&path, &clock);
    assert!(busy(put(&store, "held", 1, b"b", None)), "after a reopen");
    assert_eq!(put(&store, "held", 1, b"b", Some(0)), fenced(0, token));
    commits(&store, "never-claimed", 1, b"c", None);
    assert_eq!(version_of(&store, "held"), None);
}
