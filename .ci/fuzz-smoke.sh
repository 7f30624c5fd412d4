#!/usr/bin/env bash
# Fuzz smoke run (SPEC R19): every cargo-fuzz target for a short while on stable
# (--sanitizer none). Installs cargo-fuzz if it is missing. New corpus entries go to a scratch
# directory, so the committed seed corpus (fuzz/corpus/<target>/, replayed by
# `cargo test --test fuzz_corpus`) only changes when someone adds a file on purpose.
#
#   .ci/fuzz-smoke.sh            # 30 s per target
#   FUZZ_SECONDS=600 .ci/fuzz-smoke.sh
set -euo pipefail

cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-30}"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz-smoke: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

cd fuzz
targets="$(cargo fuzz list)"
status=0
# The R19 targets; a missing one (a [[bin]] dropped from fuzz/Cargo.toml in a merge) fails the run.
for t in log_record commit_rules listing_line pipeline_def; do
    if ! grep -qx "$t" <<<"$targets"; then
        echo "fuzz-smoke: target $t is missing from fuzz/Cargo.toml" >&2
        status=1
    fi
done
for t in $targets; do
    mkdir -p "$scratch/$t" "corpus/$t"
    echo "fuzz-smoke: $t for ${seconds}s" >&2
    if ! cargo fuzz run "$t" "$scratch/$t" "corpus/$t" --sanitizer none -- \
        -max_total_time="$seconds" -print_final_stats=1 2>"$scratch/$t.log"; then
        echo "fuzz-smoke: $t FAILED; the crashing input is in fuzz/artifacts/$t/ — add it to fuzz/corpus/$t/ once fixed" >&2
        tail -n 40 "$scratch/$t.log" >&2
        status=1
        continue
    fi
    grep -E '^(stat::number_of_executed_units|Done )' "$scratch/$t.log" >&2 || true
done
exit $status
