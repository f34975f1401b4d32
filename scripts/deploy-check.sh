#!/usr/bin/env bash
# Builds both deployments with the platforms' own tools, offline, and checks what they produce.
#   scripts/deploy-check.sh [STEP...]   steps: tools panic sam vercel (default: all, in that order)
#
#   tools   aws-sam-cli and cargo-zigbuild (with zig) from PyPI into a virtualenv of their own
#           ($DEPLOY_VENV, .venv/deploy: aws-sam-cli's pins would change the botocore, boto3 and
#           cfn-lint the rest of the machine uses); the vercel CLI from npm (tools/vercel,
#           its package-lock.json).
#   panic   tests/deploy/panic.rs's ignored tests: a Lambda binary built the way `sam build`
#           builds (scripts/lambda-build.sh) reports a panicking handler as an error and keeps
#           running; the same one with panic = "abort" dies.
#   sam     sam validate --lint; sam build (template.yaml's BuildMethod makefile: the Makefile's
#           build-<Function> targets, in the source tree as samconfig.toml says) into
#           .aws-sam/build; every function of the template has an x86_64 bootstrap.
#           Run before vercel, into the same target directory: its release build of the
#           dependencies is the one Vercel's builder then finds (the same command and target).
#   vercel  vercel build --yes with a hand-written .vercel/project.json (no login, no link) into
#           .vercel/output; config.json has vercel.json's crons, every function of vercel.json is
#           an executable built from api/, and the static output is exactly public/.
#
# Nothing here deploys, logs in or needs AWS or Vercel credentials; `vercel dev` needs a login
# and is not run. Settings: DEPLOY_VENV, PYTHON (python3), AWS_DEFAULT_REGION (us-east-1),
# DEPLOY_TARGET_DIR (the target directory of sam's and vercel's release builds; cargo's
# default, target/, when unset: .ci/run gives them one of their own, so that they can build
# while make test holds target/).
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
venv=${DEPLOY_VENV:-$root/.venv/deploy}
python=${PYTHON:-python3}
vercel_dir=$root/tools/vercel
vercel=$vercel_dir/node_modules/.bin/vercel

# The tools see the virtualenv first (sam's make targets and Vercel's Rust builder run
# `cargo zigbuild`, which finds zig through its python's ziglang package), and nothing reaches
# for real AWS.
export PATH="$venv/bin:$PATH"
export SAM_CLI_TELEMETRY=0
export VERCEL_TELEMETRY_DISABLED=1
export AWS_DEFAULT_REGION=${AWS_DEFAULT_REGION:-us-east-1}
export AWS_EC2_METADATA_DISABLED=true

# Runs a command with CARGO_TARGET_DIR=$DEPLOY_TARGET_DIR when that is set.
in_target_dir() {
  if [ -n "${DEPLOY_TARGET_DIR:-}" ]; then
    CARGO_TARGET_DIR=$DEPLOY_TARGET_DIR "$@"
  else
    "$@"
  fi
}

say() { printf '\n== deploy-check: %s\n' "$*"; }
fail() {
  printf 'deploy-check: FAILED: %s\n' "$*" >&2
  exit 1
}

# The ELF machine of a file (aarch64, x86_64, or what it is), from its header.
elf_machine() {
  local file=$1 magic machine
  magic=$(od -An -tx1 -N4 "$file" | tr -d ' \n')
  [ "$magic" = 7f454c46 ] || {
    echo "not-elf"
    return
  }
  machine=$(od -An -tx1 -j18 -N2 "$file" | tr -d ' \n')
  case $machine in
    b700) echo aarch64 ;;
    3e00) echo x86_64 ;;
    *) echo "elf-machine-$machine" ;;
  esac
}

step_tools() {
  say "tools"
  if ! [ -x "$venv/bin/sam" ] || ! [ -x "$venv/bin/cargo-zigbuild" ]; then
    echo "installing aws-sam-cli and cargo-zigbuild (PyPI) into $venv"
    "$python" -m venv "$venv"
    # --no-compile: no bytecode for the thousands of modules installed (botocore's above
    # all); Python compiles the few that sam imports when it first does (11 of 35 CPU-s here).
    "$venv/bin/python" -m pip install -q --no-compile --disable-pip-version-check \
      'aws-sam-cli>=1.170' 'cargo-zigbuild>=0.24' ||
      fail "pip could not install aws-sam-cli and cargo-zigbuild into $venv"
  fi
  if ! [ -x "$vercel" ] || [ "$vercel_dir/package-lock.json" -nt "$vercel_dir/node_modules/.package-lock.json" ]; then
    # The versions of package-lock.json; not `npm ci`, which refuses this lock: it lacks the
    # other platforms' optional @vercel/vc-native-* packages, absent from the registry here.
    echo "installing the vercel CLI (npm install in tools/vercel, from its package-lock.json)"
    npm install --prefix "$vercel_dir" --no-save --no-audit --no-fund --loglevel=error ||
      fail "npm could not install tools/vercel (the vercel CLI)"
  fi
  echo "sam:           $(sam --version)"
  echo "cargo-zigbuild: $(cargo-zigbuild --version)"
  echo "vercel:        $("$vercel" --version 2>/dev/null | tail -n 1)"
}

step_panic() {
  say "panic: a panicking handler built the way sam build builds is reported as an error"
  # Under make test's lint settings, so that this reuses make test's build (cargo
  # fingerprints them); the probe's own release build drops them (tests/deploy/panic.rs).
  (
    . scripts/lint-env.sh
    cargo test --workspace --test deploy -- --ignored
  ) ||
    fail "the panic tests (tests/deploy/panic.rs) failed: see above"
}

step_sam() {
  say "sam validate --lint"
  sam validate --lint || fail "sam validate --lint rejects template.yaml"

  say "sam build (make build-<Function>: cargo zigbuild, release, x86_64)"
  rm -rf .aws-sam
  in_target_dir sam build || fail "sam build failed"

  say "what sam build produced"
  find .aws-sam -type f -printf '%10s  %p\n' | sort -k2

  # Every function of the built template, with its build definition and its bootstrap.
  local functions
  functions=$("$venv/bin/python" - <<'EOF'
import sys, tomllib
from samcli.yamlhelper import yaml_parse

template = yaml_parse(open(".aws-sam/build/template.yaml").read())
names = sorted(n for n, r in template["Resources"].items() if r["Type"] == "AWS::Serverless::Function")
built = {}
for definition in tomllib.load(open(".aws-sam/build.toml", "rb"))["function_build_definitions"].values():
    for name in definition["functions"]:
        built[name] = definition["architecture"]
if not names:
    sys.exit("the built template has no functions")
if sorted(built) != names:
    sys.exit(f"functions of the template {names} != functions built {sorted(built)}")
for name in names:
    uri = template["Resources"][name]["Properties"].get("CodeUri")
    if uri != name:
        sys.exit(f"{name}: CodeUri {uri!r} in the built template, expected {name!r}")
    print(name, built[name])
EOF
) || fail "the SAM build output does not match template.yaml (above)"
  local name arch machine
  while read -r name arch; do
    local bootstrap=.aws-sam/build/$name/bootstrap
    [ -x "$bootstrap" ] || fail "$name: no executable $bootstrap"
    machine=$(elf_machine "$bootstrap")
    [ "$arch" = arm64 ] && arch=aarch64
    [ "$machine" = "$arch" ] || fail "$name: $bootstrap is $machine, the template says $arch"
    echo "ok: $name -> $bootstrap ($machine executable)"
  done <<<"$functions"
}

step_vercel() {
  say "vercel build --yes (no login: a hand-written .vercel/project.json)"
  mkdir -p .vercel
  # What `vercel link` would write; a local build needs no real project behind it.
  printf '%s\n' '{"projectId":"prj_deploy_check_local","orgId":"team_deploy_check_local","settings":{"framework":null}}' \
    >.vercel/project.json
  rm -rf .vercel/output
  in_target_dir "$vercel" build --yes || fail "vercel build failed"

  say "what vercel build produced"
  find .vercel/output -type f -printf '%10s  %p\n' | sort -k2

  say "checks of .vercel/output"
  node - <<'EOF' || fail ".vercel/output does not match vercel.json and public/ (above)"
const fs = require("fs");
const path = require("path");
const problems = [];
const read = (file) => JSON.parse(fs.readFileSync(file, "utf8"));
const vercel = read("vercel.json");
const config = read(".vercel/output/config.json");

// Crons: exactly vercel.json's.
const key = (c) => `${c.path} ${c.schedule}`;
const want = (vercel.crons || []).map(key).sort();
const got = (config.crons || []).map(key).sort();
if (want.length === 0) problems.push("vercel.json has no crons");
if (JSON.stringify(want) !== JSON.stringify(got))
  problems.push(`crons in config.json ${JSON.stringify(got)} != vercel.json's ${JSON.stringify(want)}`);
else console.log(`ok: crons ${got.join(", ")}`);

// Functions: one per vercel.json entry, an executable built from it; every cron reaches one.
const elfMachine = (file) => {
  const b = fs.readFileSync(file);
  if (b.readUInt32BE(0) !== 0x7f454c46) return "not-elf";
  return { 0xb7: "aarch64", 0x3e: "x86_64" }[b.readUInt16LE(18)] || `elf-machine-${b.readUInt16LE(18)}`;
};
const entries = Object.keys(vercel.functions || {});
if (entries.length === 0) problems.push("vercel.json declares no functions");
const built = fs.existsSync(".vercel/output/functions/api")
  ? fs.readdirSync(".vercel/output/functions/api").sort() : [];
const expected = entries.map((e) => `${path.basename(e, ".rs")}.func`).sort();
if (JSON.stringify(built) !== JSON.stringify(expected))
  problems.push(`functions built ${JSON.stringify(built)} != vercel.json's ${JSON.stringify(expected)}`);
for (const entry of entries) {
  const dir = `.vercel/output/functions/${entry.replace(/\.rs$/, "")}.func`;
  const file = `${dir}/.vc-config.json`;
  if (!fs.existsSync(file)) { problems.push(`${entry}: no ${file}`); continue; }
  const vc = read(file);
  const exe = (vc.filePathMap || {})[vc.handler] || path.join(dir, vc.handler);
  const arch = vc.architecture === "arm64" ? "aarch64" : vc.architecture;
  const wantDuration = vercel.functions[entry].maxDuration;
  if (vc.runtime !== "executable" || vc.runtimeLanguage !== "rust")
    problems.push(`${entry}: runtime ${vc.runtime}/${vc.runtimeLanguage}, expected executable/rust`);
  else if (!fs.existsSync(exe)) problems.push(`${entry}: its executable ${exe} does not exist`);
  else if (elfMachine(exe) !== arch) problems.push(`${entry}: ${exe} is ${elfMachine(exe)}, expected ${arch}`);
  else if (wantDuration !== undefined && vc.maxDuration !== wantDuration)
    problems.push(`${entry}: maxDuration ${vc.maxDuration}, vercel.json says ${wantDuration}`);
  else console.log(`ok: ${entry} -> ${exe} (${arch} executable, maxDuration ${vc.maxDuration})`);
}
for (const cron of vercel.crons || []) {
  const dir = `.vercel/output/functions${cron.path.split("?")[0]}.func`;
  if (!fs.existsSync(dir)) problems.push(`cron ${cron.path}: no function ${dir}`);
}

// Static files: exactly public/'s, byte for byte; nothing else of the repository is published.
const files = (dir) => {
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir, { recursive: true })
    .filter((f) => fs.statSync(path.join(dir, f)).isFile()).sort();
};
const published = files(".vercel/output/static");
const pub = files("public");
if (pub.length === 0) problems.push("public/ is missing or empty: Vercel would publish the whole repository");
const extra = published.filter((f) => !pub.includes(f));
const missing = pub.filter((f) => !published.includes(f));
if (extra.length)
  problems.push(`the static output publishes ${extra.length} file(s) not in public/: ` +
    extra.slice(0, 15).join(", ") + (extra.length > 15 ? ", ..." : ""));
if (missing.length) problems.push(`public/ files missing from the static output: ${missing.join(", ")}`);
for (const f of pub.filter((f) => published.includes(f)))
  if (!fs.readFileSync(path.join("public", f)).equals(fs.readFileSync(path.join(".vercel/output/static", f))))
    problems.push(`static ${f} differs from public/${f}`);
if (!extra.length && !missing.length && pub.length) console.log(`ok: static output is public/ only (${pub.join(", ")})`);

if (problems.length) {
  for (const p of problems) console.error(`problem: ${p}`);
  process.exit(1);
}
EOF
}

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tools panic sam vercel)
for step in "${steps[@]}"; do
  case $step in
    tools | panic | sam | vercel) ;;
    *) fail "unknown step '$step' (steps: tools panic sam vercel)" ;;
  esac
done
started=$SECONDS
for step in "${steps[@]}"; do
  begun=$SECONDS
  "step_$step"
  printf 'deploy-check: %s took %ss\n' "$step" $((SECONDS - begun))
done
say "passed (${steps[*]}) in $((SECONDS - started))s"
