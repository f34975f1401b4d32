#!/usr/bin/env bash
# make test after fmt: one build that also lints, the tests, the crate's doc-tests and its
# package, then the core without default features.
#
# Clippy rides on the one build: with RUSTC_WORKSPACE_WRAPPER=clippy-driver, cargo compiles
# the workspace's own crates through clippy's driver, which lints them (-D warnings, from
# CLIPPY_ARGS) and then compiles them as rustc does; dependencies go to plain rustc. That is
# what `cargo clippy --workspace --all-targets -- -D warnings` checks, without a second pass
# over 370 dependencies in a target directory of its own. The tests, the benchmark's smoke
# run and the deploy check's panic step reuse that build only under the same two variables (cargo
# fingerprints the wrapper): scripts/lint-env.sh sets them for both.
# A lint is a build error here, so it stops `make test` before the tests.
# Exit status: 1 when the build, the tests, the doc-tests, the package or the lint of the core
# alone failed.
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

"$cargo" nextest run --workspace --no-tests=fail
tests=$?
if [ "$tests" = 0 ]; then
  # The benchmark's smoke run: `cargo test` runs it without --bench (nextest lists only
  # libtest binaries).
  "$cargo" test --workspace --benches
  tests=$?
fi
phase "the tests (nextest, then the benchmark's smoke run)"

# The crate's doc-tests: nextest runs no doc-tests. The examples of the crate's docs run
# against the ZooKeeper at ZK_TEST_ADDRESS, each in a chroot of its own. Over the whole
# workspace, so that its features resolve as the build's above did and its library serves here
# (`-p event-bridge` alone resolves them anew and compiles the crate again: 117 s in CI).
"$cargo" test --workspace --doc
doc=$?
[ "$doc" = 0 ] || echo "test.sh: the crate's doc-tests failed (above)" >&2
phase "the doc-tests"

# The crate as crates.io would take it: packaged (the file list, the manifest's fields) and
# built from the package (`cargo package` verifies by building its lib and binary). The packaged
# manifest has no [profile] (the workspace's root keeps it), so the verify build is given the
# workspace's dev profile (Cargo.toml, [profile.dev]): otherwise it builds all 370 dependencies
# again with full debug info (16 minutes here); with it, only the crate itself (about 2).
# --allow-dirty: a working tree with uncommitted changes is tested as it is.
"$cargo" package -p event-bridge --allow-dirty --quiet \
  --config 'profile.dev.debug="line-tables-only"' --config 'profile.dev.package."*".debug=false'
package=$?
[ "$package" = 0 ] || echo "test.sh: cargo package -p event-bridge failed (above)" >&2
phase "cargo package"

# The core alone, as a library user without default features builds it: its own lints
# (dead code, imports only a feature uses).
"$cargo" build -p event-bridge --no-default-features --lib
lint=$?
[ "$lint" = 0 ] || echo "test.sh: the core without default features does not build clean (above)" >&2
phase "the core without default features"
[ "$tests" = 0 ] || echo "test.sh: tests failed (above)" >&2
[ "$tests" = 0 ] && [ "$doc" = 0 ] && [ "$package" = 0 ] && [ "$lint" = 0 ]
