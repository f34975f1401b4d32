# Sourced by scripts/test.sh and the deploy check's panic step: cargo compiles the workspace's own crates through
# clippy's driver, which lints them with -D warnings and then compiles them as rustc does.
# Every cargo command of one run must see the same two values, or cargo rebuilds the
# workspace's crates (it fingerprints the wrapper and clippy's arguments).
clippy_driver=$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver) || {
  echo "lint-env.sh: clippy-driver not found: rustup component add clippy" >&2
  return 1 2>/dev/null || exit 1
}
export RUSTC_WORKSPACE_WRAPPER=$clippy_driver
# clippy-driver splits CLIPPY_ARGS on this separator (what `cargo clippy -- -D warnings` passes).
export CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__
