#!/usr/bin/env bash
# Starts or stops moto's server on loopback: a local stand-in for SQS for the sink tests.
#   scripts/moto.sh up     install moto[server,sqs] with pip if moto_server is missing, start, wait
#   scripts/moto.sh down   stop the server this script started
#   scripts/moto.sh status say whether one answers
# Settings: MOTO_PORT (5000), MOTO_DIR (.moto), PYTHON (python3), PIP ($PYTHON -m pip).
# Point the AWS SDK at it with AWS_ENDPOINT_URL_SQS=http://127.0.0.1:$MOTO_PORT, fake keys and
# AWS_EC2_METADATA_DISABLED=true.
set -euo pipefail

port=${MOTO_PORT:-5000}
dir=${MOTO_DIR:-$(pwd)/.moto}
python=${PYTHON:-python3}
pip=${PIP:-$python -m pip}

answers() {
  # moto's dashboard over bash's /dev/tcp; its page is titled "Moto". Succeeds when serving.
  local page
  page=$(
    exec 2>/dev/null
    exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 0
    printf 'GET /moto-api/ HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
    timeout 2 cat <&3 || true
  )
  [[ $page == *'<title>Moto</title>'* ]]
}

install() {
  if command -v moto_server >/dev/null; then return; fi
  echo "moto.sh: installing moto[server,sqs] with pip" >&2
  $pip install -q --disable-pip-version-check 'moto[server,sqs]'
}

server() {
  # The console script, or the module when pip put the script somewhere off PATH.
  if command -v moto_server >/dev/null; then echo moto_server; else echo "$python -m moto.server"; fi
}

up() {
  if answers; then echo "moto.sh: moto already answers on 127.0.0.1:$port"; return; fi
  install
  mkdir -p "$dir"
  echo '*' > "$dir/.gitignore" # pid and log stay out of git
  # shellcheck disable=SC2046 # server() is one or three words, split on purpose
  nohup $(server) -H 127.0.0.1 -p "$port" > "$dir/moto.log" 2>&1 &
  echo $! > "$dir/moto.pid"
  for _ in $(seq 1 100); do
    if answers; then echo "moto.sh: moto up on 127.0.0.1:$port (pid $(cat "$dir/moto.pid"))"; return; fi
    if ! kill -0 "$(cat "$dir/moto.pid")" 2>/dev/null; then break; fi
    sleep 0.2
  done
  echo "moto.sh: moto did not start; last log lines:" >&2
  tail -20 "$dir/moto.log" >&2
  exit 1
}

down() {
  [ -f "$dir/moto.pid" ] || { echo "moto.sh: no moto started from $dir"; return; }
  local pid; pid=$(cat "$dir/moto.pid")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  rm -f "$dir/moto.pid"
  echo "moto.sh: moto stopped"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) answers && echo "moto on 127.0.0.1:$port" || { echo "no moto on 127.0.0.1:$port"; exit 1; } ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
