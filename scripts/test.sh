#!/usr/bin/env bash
# make test's second half, after its build: the tests, and clippy beside them.
#
# The tests mostly wait (on ZooKeeper, child processes, driven clocks), so clippy runs at the
# same time, in a target directory of its own (target/clippy: cargo locks a target directory
# for a whole command, and a check shares no artifacts with a build anyway). Its output is
# printed after the tests'. The tests must pass on a busy machine, and this is one.
# Exit status: 1 when the tests or clippy failed.
set -uo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}
log=target/clippy.log
mkdir -p target

(
  export CARGO_TARGET_DIR=target/clippy
  "$cargo" clippy --workspace --all-targets -- -D warnings &&
    "$cargo" clippy -p event-bridge --no-default-features --lib -- -D warnings
) >"$log" 2>&1 &
clippy=$!

"$cargo" nextest run --workspace --no-tests=fail
tests=$?
if [ "$tests" = 0 ]; then
  # The benchmark's smoke run: `cargo test` runs it without --bench (nextest lists only
  # libtest binaries).
  "$cargo" test --workspace --benches
  tests=$?
fi

wait "$clippy"
lint=$?
echo "== clippy (ran beside the tests)"
cat "$log"
[ "$lint" = 0 ] || echo "test.sh: clippy failed (above)" >&2
[ "$tests" = 0 ] || echo "test.sh: tests failed (above)" >&2
[ "$tests" = 0 ] && [ "$lint" = 0 ]
