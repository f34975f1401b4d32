#!/usr/bin/env bash
# make test after fmt: one build that also lints, the book, then the tests and, beside them,
# the benchmark's smoke run, the crate's doc-tests and its package, and the core without
# default features.
#
# Clippy rides on the one build: with RUSTC_WORKSPACE_WRAPPER=clippy-driver, cargo compiles
# the workspace's own crates through clippy's driver, which lints them (-D warnings, from
# CLIPPY_ARGS) and then compiles them as rustc does; dependencies go to plain rustc. That is
# what `cargo clippy --workspace --all-targets -- -D warnings` checks, without a second pass
# over 370 dependencies in a target directory of its own. The tests, the benchmark's smoke
# run and the deploy check's panic step reuse that build only under the same two variables (cargo
# fingerprints the wrapper): scripts/lint-env.sh sets them for both.
# A lint is a build error here, so it stops `make test` before the tests.
# Exit status: 1 when the build, the book, the tests, the benchmark's smoke run, the doc-tests,
# the package or the lint of the core alone failed.
set -uo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}
# shellcheck source=scripts/lint-env.sh
. scripts/lint-env.sh
# Each phase's time, for the breakdown CI prints.
phase_started=$SECONDS
phase() {
  echo "test.sh: $1 took $((SECONDS - phase_started))s"
  phase_started=$SECONDS
}

"$cargo" build --workspace --all-targets || {
  echo "test.sh: the build (and its lints: clippy -D warnings) failed (above)" >&2
  exit 1
}
phase "the build"
# The book: its reference pages from the binary just built, links and anchors checked.
scripts/book/build.sh || {
  echo "test.sh: the book (make docs) failed (above)" >&2
  exit 1
}
phase "the book"

# The test binaries, built by the build above (nothing left to compile) and listed once, so
# that nextest runs them without calling cargo again: cargo's lock on target/ then stays free
# for the checks that compile (checks below), which run beside the tests instead of after them.
binaries=target/nextest-binaries.json
metadata=target/nextest-cargo-metadata.json
"$cargo" nextest list --workspace --list-type binaries-only --message-format json >"$binaries" &&
  "$cargo" metadata --format-version 1 --all-features --no-deps >"$metadata" || {
  echo "test.sh: cargo nextest list could not list the test binaries (above)" >&2
  exit 1
}

# The checks besides nextest's tests, in order, each with its status and time in the log;
# exit status 1 when any failed. At nice 10 while the tests run: they take the CPU the tests
# leave idle (most tests wait on ZooKeeper), and a tenth of it when both want it.
checks() {
  local failed=0
  # The benchmark's smoke run: `cargo test` runs it without --bench (nextest lists only
  # libtest binaries). `--bench bench`, not `--benches`, which also runs every library's and
  # binary's unit tests again (they are bench targets too), after nextest has run them.
  "$cargo" test --workspace --bench bench || {
    failed=1
    echo "test.sh: the benchmark's smoke run failed (above)"
  }
  phase "the benchmark's smoke run"
  # The crate's doc-tests: nextest runs no doc-tests. The examples of the crate's docs run
  # against the ZooKeeper at ZK_TEST_ADDRESS, each in a chroot of its own. Over the whole
  # workspace, so that its features resolve as the build's above did and its library serves
  # here (`-p event-bridge` alone resolves them anew and compiles the crate again).
  "$cargo" test --workspace --doc || {
    failed=1
    echo "test.sh: the crate's doc-tests failed (above)"
  }
  phase "the doc-tests"
  # The crate as crates.io would take it: packaged (the file list, the manifest's fields) and
  # built from the package (`cargo package` verifies by building its lib and binary). The
  # packaged manifest has no [profile] (the workspace's root keeps it), so the verify build is
  # given the workspace's dev profile (Cargo.toml, [profile.dev]): otherwise it builds all 370
  # dependencies again with full debug info (16 minutes here); with it, only the crate itself.
  # --allow-dirty: a working tree with uncommitted changes is tested as it is. Without
  # clippy's driver: the package's sources are the ones the build above linted, and the
  # unpacked package is a workspace of its own, whose crate the wrapper would lint again
  # (dependencies are not wrapped, so they are still the build's).
  env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS "$cargo" package -p event-bridge --allow-dirty --quiet \
    --config 'profile.dev.debug="line-tables-only"' --config 'profile.dev.package."*".debug=false' || {
    failed=1
    echo "test.sh: cargo package -p event-bridge failed (above)"
  }
  phase "cargo package"
  # The core alone, as a library user without default features builds it: its own lints
  # (dead code, imports only a feature uses).
  "$cargo" build -p event-bridge --no-default-features --lib || {
    failed=1
    echo "test.sh: the core without default features does not build clean (above)"
  }
  phase "the core without default features"
  return "$failed"
}
checks_log=target/test-checks.log
phase_started=$SECONDS
(
  renice -n 10 -p "$BASHPID" >/dev/null
  checks
) >"$checks_log" 2>&1 &
checks_pid=$!

"$cargo" nextest run --no-tests=fail \
  --binaries-metadata "$binaries" --cargo-metadata "$metadata"
tests=$?
phase "nextest's tests"
# The tests are done: what is left of the checks goes on at the usual priority, so that other
# work on the machine does not starve it. Lowering a nice value needs the right to (root, as in
# CI); without it they go on at nice 10.
renice_tree() {
  local child
  for child in $(pgrep -P "$1"); do renice_tree "$child"; done
  renice -n 0 -p "$1" >/dev/null 2>&1 || true
}
renice_tree "$checks_pid"
checks_status=0
wait "$checks_pid" || checks_status=$?
echo "test.sh: the checks that ran beside the tests (target/test-checks.log):"
cat "$checks_log"
phase "the rest of the checks, after the tests"
[ "$tests" = 0 ] || echo "test.sh: tests failed (above)" >&2
[ "$checks_status" = 0 ] || echo "test.sh: checks failed (target/test-checks.log, above)" >&2
[ "$tests" = 0 ] && [ "$checks_status" = 0 ]
