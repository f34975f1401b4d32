# event-bridge — the two commands a newcomer needs are `make demo` and `make test`.
# Everything they need (Debian's zookeeper, cargo-lambda, cfn-lint) is installed on demand.

SHELL := /bin/bash
ZK_PORT ?= 2181
export ZK_TEST_ADDRESS ?= 127.0.0.1:$(ZK_PORT)
export ZOOKEEPER_CONNECTION_STRING ?= 127.0.0.1:$(ZK_PORT)
# The SDKs must never reach for real AWS from here.
export AWS_EC2_METADATA_DISABLED := true
CARGO ?= cargo
PIP ?= python3 -m pip
# The book's builder, without its `serve` and `watch` (a web server and a file watcher).
MDBOOK_VERSION := 0.5.4

.PHONY: demo demo-rails packages docs test test-queue test-functions test-sinks test-interop test-deploy test-dashboard screenshot bench chaos soak zk-up zk-down moto-up moto-down tools tools-book lambda-build build-ProcessEventsFunction build-ReapLeasesFunction deploy-check clean

## zk-up: start a standalone ZooKeeper on 127.0.0.1:$(ZK_PORT) (installs Debian's package if missing)
zk-up:
	@ZK_PORT=$(ZK_PORT) scripts/zk.sh up

## zk-down: stop the ZooKeeper zk-up started
zk-down:
	@ZK_PORT=$(ZK_PORT) scripts/zk.sh down

## moto-up: start moto's SQS stand-in on 127.0.0.1:5000 for the sink tests (pip-installs moto)
moto-up:
	@scripts/moto.sh up

## moto-down: stop it
moto-down:
	@scripts/moto.sh down

## tools: what the tests use besides Rust: cargo-nextest (the test runner; crates.io, when
## missing), the book's tools (tools-book), cargo-lambda and cfn-lint (PyPI), build and
## hatchling (they build the Python
## package), prometheus-client (its text parser reads /metrics), the Standard Webhooks verifier
## (PyPI `standardwebhooks`, which checks the HTTP sink's standard signatures; npm's comes with
## the npm package), openapi-spec-validator (docs/openapi.yaml and the functions' replies
## against it), opentelemetry-proto (the OTLP receiver of the traces test and the contract
## checker decodes with it), Debian's chromium and chromium-driver for the dashboard's browser
## tests, Debian's ruby with
## ActiveJob, Rack and WEBrick for the gem and the Rails flow
tools: tools-book
	@command -v chromedriver >/dev/null && [ -x /usr/bin/chromium ] || { \
	  echo "make tools: installing Debian's chromium and chromium-driver" >&2; \
	  sudo=""; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	  $$sudo apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq chromium chromium-driver >/dev/null; }
	@command -v ruby >/dev/null && \
	  ruby -e 'require "active_job"; require "rack"; require "webrick"' 2>/dev/null || { \
	  echo "make tools: installing Debian's ruby, ruby-activejob, ruby-rack and ruby-webrick" >&2; \
	  sudo=""; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	  $$sudo apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq ruby ruby-activejob ruby-rack ruby-webrick >/dev/null; }
	@$(CARGO) nextest --version >/dev/null 2>&1 || { \
	  echo "make tools: installing cargo-nextest (crates.io; a few minutes, once)" >&2; \
	  $(CARGO) install --locked cargo-nextest; }
	@command -v cargo-lambda >/dev/null && command -v cfn-lint >/dev/null || \
	  $(PIP) install -q --disable-pip-version-check 'cargo-lambda>=1.8' 'cfn-lint>=1'
	@python3 -c 'import build, hatchling' 2>/dev/null || \
	  $(PIP) install -q --disable-pip-version-check 'build>=1' 'hatchling>=1.18'
	@python3 -c 'import prometheus_client' 2>/dev/null || \
	  $(PIP) install -q --disable-pip-version-check 'prometheus-client>=0.20'
	@python3 -c 'import standardwebhooks' 2>/dev/null || \
	  $(PIP) install -q --disable-pip-version-check 'standardwebhooks>=1.1'
	@python3 -c 'import openapi_spec_validator' 2>/dev/null || \
	  $(PIP) install -q --disable-pip-version-check 'openapi-spec-validator>=0.7'
	@python3 -c 'import opentelemetry.proto' 2>/dev/null || \
	  $(PIP) install -q --disable-pip-version-check 'opentelemetry-proto>=1.30'
	@command -v moto_server >/dev/null || \
	  $(PIP) install -q --disable-pip-version-check 'moto[server,sqs]'

## tools-book: what make docs needs: mdbook (crates.io, pinned, when missing: about two
## minutes, once) and PyYAML (PyPI; scripts/book/openapi.py reads docs/openapi.yaml with it)
tools-book:
	@command -v mdbook >/dev/null || { \
	  echo "make tools: installing mdbook $(MDBOOK_VERSION) (crates.io; about two minutes, once)" >&2; \
	  $(CARGO) install --locked mdbook --version $(MDBOOK_VERSION) --no-default-features --features search; }
	@python3 -c 'import yaml' 2>/dev/null || \
	  $(PIP) install -q --disable-pip-version-check 'pyyaml>=6'

## packages: event-bridge's Ruby gem, Python package and npm package (packages/), each built
## (gem build, python -m build, npm pack) into target/packages/dist and installed from that
## artifact into a fresh place under target/packages (a GEM_HOME, a venv, an empty npm project)
## that the interop tests use; the crate's version is theirs (scripts/packages.sh checks). Only
## a package whose files changed is built again: seconds each, nothing when none did
PACKAGES := target/packages
WORKSPACE_VERSION := $(shell sed -n '/^\[workspace\.package\]/,/^\[/ s/^version = "\(.*\)"$$/\1/p' Cargo.toml)
# Rewritten only when the version changes, so that another edit of Cargo.toml rebuilds nothing.
$(shell mkdir -p $(PACKAGES) && echo '$(WORKSPACE_VERSION)' | cmp -s - $(PACKAGES)/version || \
  echo '$(WORKSPACE_VERSION)' >$(PACKAGES)/version)
PACKAGE_FILES = $(shell find packages/$(1) -type f -not -name '*.gem' -not -name '*.tgz' \
  -not -path '*/dist/*' -not -path '*/node_modules/*' -not -path '*/__pycache__/*')
packages: tools $(PACKAGES)/ruby.installed $(PACKAGES)/python.installed $(PACKAGES)/node.installed
$(PACKAGES)/ruby.installed: $(call PACKAGE_FILES,ruby) $(PACKAGES)/version scripts/packages.sh
	@scripts/packages.sh ruby
$(PACKAGES)/python.installed: $(call PACKAGE_FILES,python) $(PACKAGES)/version scripts/packages.sh
	@PIP='$(PIP)' scripts/packages.sh python
$(PACKAGES)/node.installed: $(call PACKAGE_FILES,node) $(PACKAGES)/version scripts/packages.sh
	@scripts/packages.sh node

## demo: publish sample tasks, drain them with process_events' work, print the report and stats
demo: zk-up
	@scripts/demo.sh

## demo-rails: the Rails flow: Ruby's ActiveJob enqueues three jobs through the event_bridge
## adapter (HTTP publish to process_events' Vercel build, serving locally), drains deliver them
## signed to EventBridge::JobRunner behind WEBrick; prints what each job recorded
demo-rails: zk-up packages
	@examples/ruby/demo/demo.sh

## docs: the book (docs/book) into target/book, its reference pages generated from the built
## command's --help and from docs/openapi.yaml, every internal link and anchor checked, its
## Rust snippets tested (scripts/book/build.sh); open target/book/index.html
docs: tools-book
	$(CARGO) build -p event-bridge --bin event-bridge
	@scripts/book/build.sh

## test: fmt, then (scripts/test.sh) one build that clippy lints on the way (-D warnings:
## clippy's driver compiles the workspace's crates), the book (as make docs builds it, seconds),
## every test (unit, then each topic's target on a real ZooKeeper, the language packages as
## `packages` installed them) through cargo-nextest (each test its own process, all targets in
## one pool: .config/nextest.toml) and, beside them at nice 10, the benchmark's smoke run, the
## crate's doc-tests, `cargo package -p event-bridge` (built from the package), and the core
## built without default features (their log: target/test-checks.log). One build serves the tests and the binaries they run: `--all-targets` builds the
## binaries with the tests' features (a plain `build --bins` leaves out the dev-dependencies'
## and compiles the core twice)
test: zk-up moto-up tools packages
	$(CARGO) fmt --all -- --check
	@CARGO="$(CARGO)" scripts/test.sh

## test-TOPIC: one test target alone (queue, functions, sinks, interop, deploy, dashboard),
## with what it needs
test-queue test-functions: zk-up
test-sinks: zk-up moto-up packages
test-interop: zk-up packages
test-deploy test-dashboard: zk-up tools
test-queue test-functions test-sinks test-interop test-deploy test-dashboard:
	$(CARGO) build --workspace --all-targets
	$(CARGO) nextest run --workspace -E 'binary($(@:test-%=%))'

## bench: throughput as ratios to the raw create rate of the same run, and the scale curve
## from 10^3 to 10^6 queued tasks (BENCH_MAX=100000 stops early), on a ZooKeeper of its own
## (port 2182, 3 GB heap: a million tasks do not fit the tests' server; its data, some GB
## of snapshots after the 10^6 step, is deleted before and after)
BENCH_ZK := ZK_PORT=2182 ZK_DIR=$(CURDIR)/.zk-bench ZK_HEAP=3g
## The before/after row drains with a binary built from BASELINE_REV (the commit before
## ordered groups) in a git worktree under target/; BASELINE_REV= skips it.
BASELINE_REV ?= b8e60c0
BASELINE_DIR := $(CURDIR)/target/baseline-$(BASELINE_REV)
bench: moto-up
	@if [ -n "$(BASELINE_REV)" ] && [ ! -x $(BASELINE_DIR)/event-bridge ]; then \
	  rm -rf $(BASELINE_DIR)/src; git worktree prune; \
	  git worktree add --detach $(BASELINE_DIR)/src $(BASELINE_REV) && \
	  $(CARGO) build --release -p event-bridge --bin event-bridge \
	    --manifest-path $(BASELINE_DIR)/src/Cargo.toml --target-dir $(BASELINE_DIR)/target && \
	  cp $(BASELINE_DIR)/target/release/event-bridge $(BASELINE_DIR)/event-bridge && \
	  git worktree remove --force $(BASELINE_DIR)/src; fi
	$(CARGO) build --release --bin event-bridge --bin process_events
	@$(BENCH_ZK) scripts/zk.sh down >/dev/null 2>&1; rm -rf $(CURDIR)/.zk-bench/data
	@$(BENCH_ZK) scripts/zk.sh up
	$(if $(BASELINE_REV),BENCH_BASELINE_BIN=$(BASELINE_DIR)/event-bridge BASELINE_REV=$(BASELINE_REV)) \
	  ZK_TEST_ADDRESS=127.0.0.1:2182 $(CARGO) bench -p event-bridge-tests --bench bench; \
	  status=$$?; $(BENCH_ZK) scripts/zk.sh down; rm -rf $(CURDIR)/.zk-bench/data; exit $$status

## screenshot: docs/dashboard.png, the README's and the book's picture of `event-bridge serve`: a queue
## with a minute of traffic, drawn by headless Chromium (about a minute)
screenshot: zk-up tools
	$(CARGO) build -p event-bridge --bin event-bridge
	scripts/screenshot.sh docs/dashboard.png

## chaos: the contract checker (mixed traffic under faults) at twice the rate (8 000 tasks at
## 80/s, 100 s of traffic), printing its figures; it starts its own 3-server ZooKeeper ensemble
## (make test runs it at 2 800 tasks at 40/s)
chaos:
	$(CARGO) build --workspace --all-targets
	CHAOS_TASKS=8000 CHAOS_RATE=80 $(CARGO) test --workspace --test chaos -- --nocapture

## soak: the same checker for SOAK_MINUTES (30) of traffic at 40/s, faults and a pause every five
## minutes; prints each minute's publish-to-delivery latency of plain tasks and each worker's RSS,
## and at the end whether the RSS of the last ten minutes stays within 1.2x of minute five
SOAK_MINUTES ?= 30
soak:
	$(CARGO) build --workspace --all-targets
	SOAK_MINUTES=$(SOAK_MINUTES) $(CARGO) test --workspace --test chaos -- --nocapture

## lambda-build: release builds of both functions for Lambda (x86_64, cargo zigbuild), as
## `sam build` makes them: target/lambda/<function>/bootstrap
lambda-build: build-ProcessEventsFunction build-ReapLeasesFunction

## build-ProcessEventsFunction, build-ReapLeasesFunction: what `sam build` runs for each
## function of template.yaml (BuildMethod makefile; SAM gives ARTIFACTS_DIR)
build-ProcessEventsFunction:
	@scripts/lambda-build.sh process_events "$(or $(ARTIFACTS_DIR),target/lambda/process_events)"
build-ReapLeasesFunction:
	@scripts/lambda-build.sh reap_leases "$(or $(ARTIFACTS_DIR),target/lambda/reap_leases)"

## deploy-check: build both deployments with the real tools, offline, and check the output:
## sam validate --lint and sam build (.aws-sam/), vercel build (.vercel/output: functions,
## crons, static files only from public/), and that a panicking handler built the way sam
## builds is reported as an error. Installs aws-sam-cli and cargo-zigbuild (PyPI,
## in .venv/deploy) and the vercel CLI (npm, tools/vercel). About 8 minutes from scratch.
## (DEPLOY_STEPS names some of its steps: tools panic sam vercel; all by default)
deploy-check:
	@scripts/deploy-check.sh $(DEPLOY_STEPS)

clean: zk-down moto-down
	rm -rf .zk .zk-bench .moto
