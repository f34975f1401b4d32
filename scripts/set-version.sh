#!/usr/bin/env bash
# Sets event-bridge's one version everywhere it is written: the workspace (Cargo.toml
# `[workspace.package] version`, which every crate inherits and `event-bridge --version`
# prints), the gem, the Python package and the npm package. Add the release's section to
# CHANGELOG.md yourself: tests/interop/packages.rs checks that it is there.
#
# Usage: scripts/set-version.sh 0.2.0
set -euo pipefail
cd "$(dirname "$0")/.."
new=${1:?usage: scripts/set-version.sh VERSION}
[[ $new =~ ^[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$ ]] || {
  echo "set-version.sh: $new is not a version such as 0.2.0" >&2; exit 2; }

sed -i '/^\[workspace\.package\]/,/^\[/ s/^version = ".*"$/version = "'"$new"'"/' Cargo.toml
sed -i 's/^\( *VERSION = \)".*"$/\1"'"$new"'"/' packages/ruby/lib/event_bridge/version.rb
sed -i 's/^version = ".*"$/version = "'"$new"'"/' packages/python/pyproject.toml
sed -i 's/^  "version": ".*",$/  "version": "'"$new"'",/' packages/node/package.json
scripts/packages.sh versions
cargo update --workspace --offline --quiet # the lock file records the crates' own versions
grep -q "^## \[$new\]" CHANGELOG.md || echo "set-version.sh: CHANGELOG.md has no section for $new yet" >&2
