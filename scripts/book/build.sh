#!/usr/bin/env bash
# make docs (and make test): the book in docs/book, built with mdBook into target/book.
#
# 1. the generated reference pages, into target/book-gen: the CLI's from the built
#    `event-bridge` binary's --help (cli.py), the HTTP API's from docs/openapi.yaml (openapi.py);
# 2. mdbook build (it fails on a missing chapter or a failed {{#include}});
# 3. every internal link and anchor of the built HTML (links.py, after its self-test);
# 4. mdbook test: the Rust snippets that are not marked `ignore` (those that need the
#    event-bridge crate include compiled code from elsewhere and are marked ignore; see
#    docs/book/src/integrations/rust-handler.md).
# The runnable shell examples are run by tests/functions/book.rs, against ZooKeeper.
# EVENT_BRIDGE_BIN names the binary (default target/debug/event-bridge).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${EVENT_BRIDGE_BIN:-target/debug/event-bridge}
[ -x "$bin" ] || { echo "book: $bin is missing: cargo build -p event-bridge --bin event-bridge" >&2; exit 1; }
command -v mdbook >/dev/null || { echo "book: mdbook is missing: make tools installs it" >&2; exit 1; }
mkdir -p target/book-gen
python3 scripts/book/cli.py "$bin" target/book-gen/cli.md
python3 scripts/book/openapi.py docs/openapi.yaml target/book-gen/http.md
# mdBook reports a failed include as a warning and goes on: a warning fails the build here.
mdbook build docs/book 2>&1 | tee target/book-gen/build.log
if grep -E '\b(WARN|ERROR)\b' target/book-gen/build.log >/dev/null; then
  echo "book: mdbook build warned (above)" >&2
  exit 1
fi
python3 scripts/book/links.py --self-test >/dev/null
python3 scripts/book/links.py target/book
mdbook test docs/book 2>&1 | tail -n 3
echo "book: target/book/index.html"
