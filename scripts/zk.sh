#!/usr/bin/env bash
# Starts or stops a standalone ZooKeeper on loopback for the demo, the tests and the benchmarks.
#   scripts/zk.sh up     install Debian's zookeeper package if missing, start, wait for imok
#   scripts/zk.sh down   stop the server this script started
#   scripts/zk.sh status say whether one answers
# Settings: ZK_PORT (2181), ZK_DIR (.zk), ZK_HEAP (512m), ZK_KEEP_DATA (unset).
# A scratch server: up starts from an empty data directory unless ZK_KEEP_DATA=1, because every
# test leaves its chroot behind and a directory kept across many runs outgrows the heap.
set -euo pipefail

port=${ZK_PORT:-2181}
dir=${ZK_DIR:-$(pwd)/.zk}
heap=${ZK_HEAP:-512m}
jar=/usr/share/java/zookeeper.jar

ruok() {
  # ZooKeeper's four-letter "ruok" over bash's /dev/tcp; prints imok when serving.
  (
    exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 0
    printf ruok >&3
    timeout 2 cat <&3 || true
  ) 2>/dev/null
}

install() {
  if [ -f "$jar" ] && command -v java >/dev/null; then return; fi
  echo "zk.sh: installing Debian's zookeeper package" >&2
  local sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq zookeeper >/dev/null
}

up() {
  if [ "$(ruok)" = imok ]; then echo "zk.sh: ZooKeeper already answers on 127.0.0.1:$port"; return; fi
  install
  [ -n "${ZK_KEEP_DATA:-}" ] || rm -rf "$dir/data"
  mkdir -p "$dir/data"
  cat > "$dir/zoo.cfg" <<CFG
tickTime=2000
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=*
extendedTypesEnabled=true
autopurge.purgeInterval=1
autopurge.snapRetainCount=3
CFG
  local cp="$jar"
  [ -f /usr/share/java/slf4j-simple.jar ] && cp="$cp:/usr/share/java/slf4j-simple.jar"
  nohup java "-Xmx$heap" -Dzookeeper.jmx.log4j.disable=true -cp "$cp" \
    org.apache.zookeeper.server.ZooKeeperServerMain "$dir/zoo.cfg" > "$dir/zookeeper.log" 2>&1 &
  echo $! > "$dir/zookeeper.pid"
  for _ in $(seq 1 100); do
    if [ "$(ruok)" = imok ]; then echo "zk.sh: ZooKeeper up on 127.0.0.1:$port (pid $(cat "$dir/zookeeper.pid"))"; return; fi
    sleep 0.2
  done
  echo "zk.sh: ZooKeeper did not start; last log lines:" >&2
  tail -20 "$dir/zookeeper.log" >&2
  exit 1
}

down() {
  [ -f "$dir/zookeeper.pid" ] || { echo "zk.sh: no ZooKeeper started from $dir"; return; }
  local pid; pid=$(cat "$dir/zookeeper.pid")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  rm -f "$dir/zookeeper.pid"
  echo "zk.sh: ZooKeeper stopped"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) [ "$(ruok)" = imok ] && echo "imok on 127.0.0.1:$port" || { echo "no ZooKeeper on 127.0.0.1:$port"; exit 1; } ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
