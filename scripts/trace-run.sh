#!/usr/bin/env bash
# Counts the project's files one run of `event-bridge process` enters below `process::run`,
# for one plain task and for an idle queue, from a callgrind trace of a debug build (ARCHITECTURE,
# "One scheduled run"). Needs valgrind and the test ZooKeeper (`make zk-up`); about a minute.
#   scripts/trace-run.sh [out-dir]     (default target/trace-run; leaves its queue root,
#   /trace-run-<pid>, on the test server)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$here/target/trace-run}
mkdir -p "$out"
cargo build -q -p event-bridge --bin event-bridge
bin=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug/event-bridge
export ZOOKEEPER_CONNECTION_STRING=${ZK_TEST_ADDRESS:-127.0.0.1:2181}
export EVENT_BRIDGE_ROOT=/trace-run-$$
trace() {
  valgrind -q --tool=callgrind --collect-atstart=no \
    --toggle-collect='event_bridge::process::run::{{closure}}' \
    --callgrind-out-file="$out/$1.out" "$bin" process >/dev/null
  python3 "$here/scripts/callgrind_files.py" "$out/$1.out" "$here" >"$out/$1.txt"
  echo "$1: $(head -1 "$out/$1.txt") (list: $out/$1.txt)"
}
"$bin" init >/dev/null
"$bin" publish --type trace.plain --payload '{}' >/dev/null
trace one-task
trace idle
