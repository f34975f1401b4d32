#!/usr/bin/env bash
# Draws docs/dashboard.png: a queue with a minute of traffic behind it (publishes, drains, a
# paused type, two cancelled tasks), its dashboard, and headless Chromium's screenshot of it.
# Needs a ZooKeeper on loopback (make screenshot starts one) and Debian's chromium.
set -euo pipefail
cd "$(dirname "$0")/.."

export ZOOKEEPER_CONNECTION_STRING=${ZOOKEEPER_CONNECTION_STRING:-127.0.0.1:2181}
export EVENT_BRIDGE_ROOT=/event-bridge-screenshot/run-$(date +%s)
export EVENT_BRIDGE_HANDLER=noop
eb=target/debug/event-bridge
port=${SCREENSHOT_PORT:-8091}
out=${1:-docs/dashboard.png}

lines() { # lines TYPE COUNT
  for i in $(seq 1 "$2"); do printf '{"type":"%s","payload":{"n":%d}}\n' "$1" "$i"; done
}
$eb init >/dev/null
lines mail.send 300 | $eb publish -f - >/dev/null
lines report.export 120 | $eb publish -f - >/dev/null
lines invoice.send 60 | $eb publish -f - >/dev/null

$eb serve --listen "127.0.0.1:$port" --sample-every 2s 2>/dev/null &
serve=$!
trap 'kill $serve 2>/dev/null || true' EXIT
for _ in $(seq 1 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done

echo "screenshot.sh: a minute of traffic under $EVENT_BRIDGE_ROOT"
for step in $(seq 1 30); do
  $eb process --drain --max-tasks $(( (step % 7) * 6 + 4 )) >/dev/null 2>&1
  lines mail.send $(( step % 5 + 1 )) | $eb publish -f - >/dev/null
  [ "$step" = 12 ] && $eb pause --type report.export >/dev/null
  sleep 2
done
for name in $($eb list --limit 2 --json | python3 -c 'import json,sys; print(" ".join(t["name"] for t in json.load(sys.stdin)))'); do
  $eb cancel "$name" >/dev/null 2>&1
done
sleep 2
chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,1180 \
  --screenshot="$out" "http://127.0.0.1:$port/" 2>/dev/null
echo "screenshot.sh: wrote $out"
