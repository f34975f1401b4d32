#!/usr/bin/env bash
# Builds one Lambda function's bootstrap: a release build of binary BIN for x86_64 Linux, with
# the command Vercel's Rust builder runs for the Vercel binaries (cargo zigbuild --target
# x86_64-unknown-linux-gnu --release), so that one build of the dependencies serves both
# platforms: `sam build` runs this (template.yaml's BuildMethod makefile, the Makefile's
# build-<Function> targets), then `vercel build` finds everything but its own binaries built.
#   scripts/lambda-build.sh BIN OUT_DIR    -> OUT_DIR/bootstrap
# Runs in the current directory's cargo project (the workspace, or the panic probe of
# tests/deploy), into $CARGO_TARGET_DIR (target/ when unset). zig links against glibc 2.17,
# older than Lambda's provided.al2023 has. Needs cargo-zigbuild and zig (PyPI `cargo-zigbuild`,
# `ziglang`: scripts/deploy-check.sh tools installs both into .venv/deploy).
set -euo pipefail

[ $# = 2 ] || {
  echo "usage: scripts/lambda-build.sh BIN OUT_DIR" >&2
  exit 2
}
bin=$1
out=$2
target=x86_64-unknown-linux-gnu

command -v cargo-zigbuild >/dev/null || {
  echo "lambda-build.sh: cargo-zigbuild is not installed: run scripts/deploy-check.sh tools" \
    "(or pip install cargo-zigbuild ziglang) and put .venv/deploy/bin on PATH" >&2
  exit 1
}
cargo zigbuild --target "$target" --release --bin "$bin"
mkdir -p "$out"
cp "${CARGO_TARGET_DIR:-target}/$target/release/$bin" "$out/bootstrap"
echo "lambda-build.sh: $out/bootstrap ($bin, $target)"
