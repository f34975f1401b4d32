#!/usr/bin/env bash
# make test after fmt: one build that also lints, the tests, then the core without default
# features.
#
# Clippy rides on the one build: with RUSTC_WORKSPACE_WRAPPER=clippy-driver, cargo compiles
# the workspace's own crates through clippy's driver, which lints them (-D warnings, from
# CLIPPY_ARGS) and then compiles them as rustc does; dependencies go to plain rustc. That is
# what `cargo clippy --workspace --all-targets -- -D warnings` checks, without a second pass
# over 370 dependencies in a target directory of its own. The tests, the benchmark's smoke
# run and the deploy check's panic step reuse that build only under the same two variables (cargo
# fingerprints the wrapper): scripts/lint-env.sh sets them for both.
# A lint is a build error here, so it stops `make test` before the tests.
# Exit status: 1 when the build, the tests or the lint of the core alone failed.
set -uo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}
# shellcheck source=scripts/lint-env.sh
. scripts/lint-env.sh

"$cargo" build --workspace --all-targets || {
  echo "test.sh: the build (and its lints: clippy -D warnings) failed (above)" >&2
  exit 1
}
# The book: its reference pages from the binary just built, links and anchors checked.
scripts/book/build.sh || {
  echo "test.sh: the book (make docs) failed (above)" >&2
  exit 1
}

"$cargo" nextest run --workspace --no-tests=fail
tests=$?
if [ "$tests" = 0 ]; then
  # The benchmark's smoke run: `cargo test` runs it without --bench (nextest lists only
  # libtest binaries).
  "$cargo" test --workspace --benches
  tests=$?
fi

# The core alone, as a library user without default features builds it: its own lints
# (dead code, imports only a feature uses).
"$cargo" build -p event-bridge --no-default-features --lib
lint=$?
[ "$lint" = 0 ] || echo "test.sh: the core without default features does not build clean (above)" >&2
[ "$tests" = 0 ] || echo "test.sh: tests failed (above)" >&2
[ "$tests" = 0 ] && [ "$lint" = 0 ]
