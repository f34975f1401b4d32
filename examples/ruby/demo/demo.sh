#!/usr/bin/env bash
# The Rails flow (`make demo-rails`): Debian's Ruby and ActiveJob enqueue three jobs through
# the event_bridge adapter, which publishes them over HTTP to process_events (its Vercel build,
# serving locally); drains deliver them, signed as Standard Webhooks, to EventBridge::JobRunner
# behind WEBrick, which runs them. Prints what each job recorded when it ran.
set -euo pipefail
cd "$(dirname "$0")/../../.."

# The event_bridge gem as `make packages` installed it (from its .gem, into target/packages/ruby).
export GEM_HOME=$PWD/target/packages/ruby
unset GEM_PATH
ruby -e 'require "event_bridge/rails"' 2>/dev/null || {
  echo "the event_bridge gem is not installed in $GEM_HOME: run make packages" >&2; exit 1; }

export ZOOKEEPER_CONNECTION_STRING=${ZOOKEEPER_CONNECTION_STRING:-127.0.0.1:2181}
export EVENT_BRIDGE_ROOT=${EVENT_BRIDGE_ROOT:-/event-bridge-demo/rails-$(date +%s)}
port=${DEMO_PORT:-3078}
runner_port=${DEMO_RUNNER_PORT:-3079}
export CRON_SECRET=${CRON_SECRET:-demo-cron}
export PUBLISH_SECRET=${PUBLISH_SECRET:-demo-publish}
secret="whsec_$(head -c 24 /dev/urandom | base64)"
record=$(mktemp)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -f "$record"' EXIT
wait_for() { for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done; }

echo "== building the process_events function (first time: a few minutes)"
cargo build -q -p process_events --bin process_events_vercel

echo "== the job runner (examples/ruby/demo/serve.rb) on 127.0.0.1:$runner_port"
EVENT_BRIDGE_WEBHOOK_SECRET=$secret EVENT_BRIDGE_DEMO_RECORD=$record PORT=$runner_port \
  ruby examples/ruby/demo/serve.rb 2>/dev/null &
pids+=($!)
routes=$(printf '{"routes": {"active_job.default": {"sink": "http", "url": "http://127.0.0.1:%s/event_bridge/jobs", "signature": "standard", "secret_env": "RAILS_JOBS_SECRET"}}}' "$runner_port")
echo "== process_events (Vercel build) on 127.0.0.1:$port, ROUTES=$routes"
RAILS_JOBS_SECRET=$secret ROUTES=$routes BACKOFF_BASE_MS=500 RUST_LOG=${RUST_LOG:-warn} \
  VERCEL_DEV_PORT=$port target/debug/process_events_vercel >/dev/null &
pids+=($!)
wait_for "$runner_port"; wait_for "$port"

echo "== perform_later: WelcomeJob, ReminderJob.set(wait: 2), FlakyJob (fails on its first attempt)"
EVENT_BRIDGE_PUBLISH_URL=http://127.0.0.1:$port/api/process_events_vercel \
  EVENT_BRIDGE_PUBLISH_SECRET=$PUBLISH_SECRET ruby examples/ruby/demo/enqueue.rb
echo "== a forged delivery is refused:"
curl -s -w ' (HTTP %{http_code})\n' -H 'webhook-id: x' -H "webhook-timestamp: $(date +%s)" \
  -H 'webhook-signature: v1,Zm9yZ2Vk' -d '{}' "http://127.0.0.1:$runner_port/event_bridge/jobs"
echo "== draining every half second for 4 s (GET ?drain=1 with the cron secret)"
for _ in $(seq 1 8); do
  curl -s -o /dev/null -H "Authorization: Bearer $CRON_SECRET" "http://127.0.0.1:$port/api/process_events_vercel?drain=1"
  sleep 0.5
done
echo "== what the jobs recorded (at_ms: wall clock when it ran)"
cat "$record"
