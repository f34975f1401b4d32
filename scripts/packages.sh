#!/usr/bin/env bash
# Builds one of event-bridge's language packages (packages/LANG) and installs it from its
# artifact into a fresh place under target/packages/, where the tests use it:
#
#   ruby    gem build        dist/event_bridge-V.gem      gem install --local, GEM_HOME=target/packages/ruby
#   python  python -m build  dist/event_bridge-V-*.whl    a new venv, target/packages/python
#   node    npm pack         dist/event-bridge-V.tgz      npm install into an empty project, target/packages/node
#
# Usage: scripts/packages.sh ruby|python|node|versions   (`make packages` runs it when a package's
# files changed). `versions` only checks that each package carries the workspace's version.
#
# No download when the dependencies are already here: the gem's (ActiveJob, Rack) are Debian's;
# the wheel's (kazoo, standardwebhooks) come from a wheelhouse, target/packages/wheels, filled
# from PyPI only when it lacks one; npm installs --prefer-offline from its cache.
set -euo pipefail
cd "$(dirname "$0")/.."

out=target/packages
dist=$out/dist
PIP=${PIP:-python3 -m pip}
version=$(sed -n '/^\[workspace\.package\]/,/^\[/ s/^version = "\(.*\)"$/\1/p' Cargo.toml)
[ -n "$version" ] || { echo "packages.sh: no version under [workspace.package] in Cargo.toml" >&2; exit 1; }

# Each package's own statement of its version, and the file it is in.
declared() {
  case $1 in
    ruby) sed -n 's/^ *VERSION = "\(.*\)"$/\1/p' packages/ruby/lib/event_bridge/version.rb ;;
    python) sed -n 's/^version = "\(.*\)"$/\1/p' packages/python/pyproject.toml ;;
    node) sed -n 's/^  "version": "\(.*\)",$/\1/p' packages/node/package.json ;;
  esac
}
declare -A file=([ruby]=packages/ruby/lib/event_bridge/version.rb
  [python]=packages/python/pyproject.toml [node]=packages/node/package.json)

check_version() {
  local own
  own=$(declared "$1")
  if [ "$own" != "$version" ]; then
    echo "packages.sh: ${file[$1]} says version ${own:-(none)}, the workspace (Cargo.toml) $version:" \
      "one version for all; scripts/set-version.sh $version sets it everywhere" >&2
    exit 1
  fi
}

ruby_package() {
  local gem=$dist/event_bridge-$version.gem
  (cd packages/ruby && gem build --silent event_bridge.gemspec --output "$OLDPWD/$gem") >&2
  rm -rf $out/ruby
  # GEM_PATH unset: the dependencies resolve from Debian's gems, the gem itself from GEM_HOME.
  env -u GEM_PATH GEM_HOME=$out/ruby gem install --local --no-document --silent "$gem" >&2
  echo "$gem"
}

python_package() {
  rm -f $dist/event_bridge-*
  # --no-isolation: hatchling and build come from `make tools`, not a download per build.
  local log
  log=$(python3 -m build --no-isolation --outdir $dist packages/python 2>&1) || {
    echo "$log" >&2
    return 1
  }
  local wheel=$dist/event_bridge-$version-py3-none-any.whl
  rm -rf $out/python
  python3 -m venv --without-pip $out/python
  local install="$PIP --python $out/python/bin/python install -q --disable-pip-version-check"
  if ! $install --no-index --find-links $out/wheels "$wheel" 2>/dev/null; then
    echo "packages.sh: fetching the wheel's dependencies into $out/wheels (once)" >&2
    $PIP download -q --disable-pip-version-check -d $out/wheels "$wheel" >&2
    rm -f $out/wheels/event_bridge-*
    $install --no-index --find-links $out/wheels "$wheel" >&2
  fi
  echo "$wheel"
}

node_package() {
  rm -f $dist/event-bridge-*.tgz
  npm pack --silent --pack-destination $dist ./packages/node >/dev/null
  local tarball=$dist/event-bridge-$version.tgz
  rm -rf $out/node
  mkdir -p $out/node
  echo '{"name": "event-bridge-installed", "private": true}' >$out/node/package.json
  npm install --prefix $out/node --prefer-offline --no-audit --no-fund --loglevel=error \
    "$PWD/$tarball" >/dev/null
  echo "$tarball"
}

lang=${1:?usage: scripts/packages.sh ruby|python|node|versions}
case $lang in
  versions) for l in ruby python node; do check_version $l; done; exit 0 ;;
  ruby | python | node) check_version "$lang" ;;
  *) echo "packages.sh: no package $lang (ruby, python or node)" >&2; exit 2 ;;
esac
mkdir -p $dist
rm -f $out/$lang.installed
start=$EPOCHREALTIME
artifact=$(${lang}_package)
printf '%s\n' "$artifact" >$out/$lang.installed
awk -v lang="$lang" -v from="$artifact" -v start="$start" -v end="$EPOCHREALTIME" \
  'BEGIN { printf "packages: %s built and installed from %s in %.1f s\n", lang, from, end - start }'

