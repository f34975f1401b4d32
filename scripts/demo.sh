#!/usr/bin/env bash
# The demo: publish sample tasks to a ZooKeeper on loopback, drain them by calling the real
# process_events function (its Vercel build, which serves HTTP locally), print the report, the
# stats and the dead letter.
set -euo pipefail
cd "$(dirname "$0")/.."

export ZOOKEEPER_CONNECTION_STRING=${ZOOKEEPER_CONNECTION_STRING:-127.0.0.1:2181}
export EVENT_BRIDGE_ROOT=${EVENT_BRIDGE_ROOT:-/event-bridge-demo/run-$(date +%s)}

echo "== building the event-bridge command and the process_events function (first time: a few minutes)"
cargo build -q -p event-bridge --bin event-bridge -p process_events --bin process_events_vercel
eb=target/debug/event-bridge
port=${DEMO_PORT:-3077}
export CRON_SECRET=${CRON_SECRET:-demo-secret}

echo "== publishing examples/demo-tasks.jsonl to $ZOOKEEPER_CONNECTION_STRING$EVENT_BRIDGE_ROOT/tasks"
$eb publish --type demo -f examples/demo-tasks.jsonl
echo "== a producer that knows nothing of the envelope writes plain JSON (the 000 design's Ruby producer does)"
$eb publish --raw --payload '{"user_id":7,"action":"resize_avatar"}'
echo "== and a broken producer writes a body that is not JSON: it will go to the dead letters, with the reason"
$eb publish --raw --payload 'user_id=7&action=oops'
echo
$eb stats
echo
echo "== starting process_events (Vercel build) on 127.0.0.1:$port; its log lines follow"
RUST_LOG=${RUST_LOG:-info,zookeeper_client=warn} VERCEL_DEV_PORT=$port target/debug/process_events_vercel &
function_pid=$!
trap 'kill $function_pid 2>/dev/null || true' EXIT
for _ in $(seq 1 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
echo "== a request without the cron secret is refused:"
curl -s -w ' (HTTP %{http_code})\n' "http://127.0.0.1:$port/api/process_events_vercel?drain=1"
echo "== draining: GET /api/process_events_vercel?drain=1 with Authorization: Bearer \$CRON_SECRET"
curl -s -H "Authorization: Bearer $CRON_SECRET" "http://127.0.0.1:$port/api/process_events_vercel?drain=1"
echo
sleep 0.2
kill $function_pid 2>/dev/null || true
echo
echo "== after the drain"
$eb stats
echo
echo "== the dead letter ($EVENT_BRIDGE_ROOT/dead)"
$eb dead list
