#!/usr/bin/env bash
# The demo: publish sample tasks to a ZooKeeper on loopback, drain them with process_events'
# work (the same library call the Lambda and Vercel functions make), print the report and stats.
set -euo pipefail
cd "$(dirname "$0")/.."

export ZOOKEEPER_CONNECTION_STRING=${ZOOKEEPER_CONNECTION_STRING:-127.0.0.1:2181}
export EVENT_BRIDGE_ROOT=${EVENT_BRIDGE_ROOT:-/event-bridge-demo/run-$(date +%s)}

echo "== building the event-bridge command (first time: a few minutes)"
cargo build -q -p event-bridge --bin event-bridge
eb=target/debug/event-bridge

echo "== publishing examples/demo-tasks.jsonl to $ZOOKEEPER_CONNECTION_STRING$EVENT_BRIDGE_ROOT/tasks"
$eb publish --type demo -f examples/demo-tasks.jsonl
echo "== a producer that knows nothing of the envelope writes plain JSON (the 000 design's Ruby producer does)"
$eb publish --raw --payload '{"user_id":7,"action":"resize_avatar"}'
echo "== and a broken producer writes a body that is not JSON: it will go to the dead letters, with the reason"
$eb publish --raw --payload 'user_id=7&action=oops'
echo
$eb stats
echo
echo "== draining: process_events' work in drain mode, logging each task (stderr)"
RUST_LOG=${RUST_LOG:-info} $eb process --drain
echo
echo "== after the drain"
$eb stats
echo
echo "== the dead letter ($EVENT_BRIDGE_ROOT/dead)"
$eb dead list
