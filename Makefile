# Developer / CI entry points. CI runs `.ci/run`, which runs `make test`, then `make demo`,
# `make bench-smoke` and `make lint` side by side (`make test` under infra/ci/no-outside-reads:
# nothing outside the clone readable).
#
#   make test              all tests against a fresh local AWS (moto) server: the workspace's,
#                          the library's from its package (as package-check) and the examples'
#                          (as examples-check)
#   make up                the stack running locally until Ctrl-C (WATCH=1: functions as processes)
#   make check-invariants  the pipeline's invariants checked against the stack `make up` runs
#   make up-localstack     the same on LocalStack (needs Docker)
#   make up-ministack      template.yaml deployed with sam deploy on MiniStack (no Docker)
#   make lint              template-lint + rustfmt check + clippy with warnings denied + api-check
#                          + link-check
#   make link-check        the Markdown's relative links and anchors resolve, and every code block
#                          that rustdoc compiles names its language (docs/check-links.py)
#   make api-check         the library's docs without warnings, and its public API (every item,
#                          method, trait item and impl, with its signature, from rustdoc's JSON)
#                          as listed in shared/api/public-api.txt (make api-update rewrites it)
#   make publish-check     what publishing lambda-idempotency needs: publish dry run, docs
#                          without warnings, cargo-deny licenses and bans
#   make package-check     the packaged lambda-idempotency (cargo package), unpacked outside the
#                          workspace: its unit, integration and doc tests on a fresh local AWS
#   make examples-check    each example of examples/ copied out of the repository and built and
#                          tested there, against this repository's lambda-idempotency
#   make examples-lint     clippy with warnings denied on each example
#   make template-lint     sam validate --lint and cfn-lint on template.yaml and the examples'
#                          templates
#   make sam-build         sam build (cargo-lambda + zig, no Docker) into .aws-sam/build
#   make local-aws-start   start a long-running moto server (LOCAL_AWS_PORT, default 4566)
#   make local-aws-stop    stop it
#
# The local AWS harness lives in infra/local-aws/ (see `infra/local-aws/local-aws --help`);
# the pinned SAM CLI, cfn-lint, cargo-lambda and zig in infra/tools/ (`infra/tools/tools --help`).

SHELL := /bin/bash
.DEFAULT_GOAL := test

ROOT      := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
LOCAL_AWS := $(ROOT)/infra/local-aws/local-aws
TOOLS     := $(ROOT)/infra/tools/tools
TEMPLATE  := $(ROOT)/template.yaml
# The Rust target of the functions' `Architectures` in template.yaml (arm64).
LAMBDA_RUST_TARGET ?= aarch64-unknown-linux-gnu
CARGO     ?= cargo

.PHONY: api-check api-update link-check lint-code bench bench-streams bench-smoke demo up check-invariants up-localstack up-ministack test test-inner ensure-nextest lint publish-check package-check package-prepare package-test ensure-cargo-deny template-lint examples-check examples-prepare examples-test examples-lint examples-lock tools-install sam-build ensure-lambda-target \
        local-aws-install local-aws-start local-aws-stop local-aws-reset local-aws-env

# --- tests -------------------------------------------------------------------

# What `make test` builds and runs of the workspace: every target but the library's (its tests
# run from the packaged crate: test-inner).
TEST_BUILD := --workspace --exclude lambda-idempotency --all-targets

# Starts moto on a free port, exports AWS_ENDPOINT_URL & co., runs test-inner,
# and always stops the server (even on failure or Ctrl-C). The workspace is built while the
# pinned tools' and the local AWS's virtualenvs install (the first time), not after them.
test: ensure-nextest
	@rc=0; ($(TOOLS) install && $(LOCAL_AWS) install) & install=$$!; \
	(cd $(ROOT) && $(CARGO) build $(TEST_BUILD)) || rc=$$?; \
	wait $$install || rc=$$((rc ? rc : $$?)); \
	((rc == 0)) || exit $$rc; \
	$(LOCAL_AWS) run -- $(MAKE) --no-print-directory -C $(ROOT) test-inner

# Expects the AWS_* variables to point at a local endpoint (use `make test`,
# or `eval "$$($(LOCAL_AWS) env)"` after `make local-aws-start`).
# On the same local AWS:
# - The workspace but the library: every target is built first, the workspace's binaries among
#   them (the end-to-end tests run the functions' own binaries; nextest's build makes only those
#   a package's own integration tests name), all with the tests' dependency features: `cargo
#   build --bins` alone would compile every dependency a second time, for the features without
#   the dev-dependencies' (the SDKs' and tokio's test utilities). nextest's build is then fresh.
#   Then the doc tests, the library's among them (README.md and docs/*.md are its doc tests in
#   the workspace).
# - Outside the workspace, as their users get them (OUTSIDE, a temporary directory): the library
#   packaged (`cargo package`, the working tree's files, committed or not) with every test of it,
#   its fault exploration included; and each example (what package-check and examples-check do).
#   The library's tests run there only, not a second time in the workspace: the same code, from
#   the files the package holds, with the dependency features of the crate alone (the
#   workspace's members turn on more of them). What they build (their dependencies compile again,
#   for those features) is built meanwhile, beside the workspace's tests, at the lowest priority
#   (nice 19) and in a target directory of its own (OUTSIDE_TARGET): it takes the cores the tests
#   leave idle while they wait on the local AWS, and never their build lock.
# Each part runs even if the one before failed; the target fails if any did.
test-inner: ensure-nextest
	@rc=0; outside=$$(mktemp -d); trap 'rm -rf "$$outside"' EXIT; \
	(cd $(ROOT) && $(CARGO) package --quiet -p lambda-idempotency --no-verify --allow-dirty) && \
	$(MAKE) --no-print-directory -C $(ROOT) package-prepare examples-prepare OUTSIDE=$$outside || exit $$?; \
	started=$$SECONDS; \
	nice -n 19 $(MAKE) -k --no-print-directory -C $(ROOT) package-test examples-test OUTSIDE=$$outside NO_RUN=1 \
	  >"$$outside/build.log" 2>&1 & build=$$!; \
	$(CARGO) build $(TEST_BUILD) && \
	$(CARGO) nextest run $(TEST_BUILD) --no-fail-fast || rc=$$?; \
	$(CARGO) test --workspace --doc || rc=$$((rc ? rc : $$?)); \
	if wait $$build; then \
	  echo "the library's package and the examples: built in $$((SECONDS - started)) s, beside the workspace's tests"; \
	  $(MAKE) -k --no-print-directory -C $(ROOT) package-test examples-test OUTSIDE=$$outside || rc=$$((rc ? rc : $$?)); \
	else \
	  build_rc=$$?; cat "$$outside/build.log"; rc=$$((rc ? rc : build_rc)); \
	fi; \
	exit $$rc

ensure-nextest:
	@$(CARGO) nextest --version >/dev/null 2>&1 || $(CARGO) install cargo-nextest --locked

# --- lint --------------------------------------------------------------------

lint: template-lint lint-code

# lint but the templates' (Python, on one core: CI runs the two side by side).
lint-code: api-check link-check
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# README.md, docs/ and the crates' READMEs: every relative link and #anchor resolves (a file that
# exists, a heading as GitHub slugs it); README.md and docs/*.md are doc tests of the library
# (shared/src/lib.rs), so their code blocks name their language.
link-check:
	python3 $(ROOT)/docs/check-links.py

# The public API of lambda-idempotency (every feature, as docs.rs builds it) against the committed
# listing, so that any change of it shows in review: one line per public item with its whole
# signature, every method, trait item and trait impl included (shared/api/public-api.py, which
# walks rustdoc's JSON; its own tests, shared/api/test_public_api.py, run first). rustdoc's JSON
# output is unstable: RUSTC_BOOTSTRAP=1 lets the stable toolchain write it, and the walker refuses
# a format version it does not know, naming it. The HTML docs are built too, for their warnings.
# The JSON flags are set in RUSTDOCFLAGS, which cargo compares to tell whether the documentation
# is fresh: the JSON build is never taken for the HTML one.
API_JSON = RUSTC_BOOTSTRAP=1 RUSTDOCFLAGS="-D warnings -Z unstable-options --output-format json" \
	$(CARGO) rustdoc --quiet -p lambda-idempotency --all-features
api-check:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --quiet -p lambda-idempotency --no-deps --all-features
	$(API_JSON)
	python3 $(ROOT)/shared/api/public-api.py check

api-update:
	$(API_JSON)
	python3 $(ROOT)/shared/api/public-api.py update

# --- publishing the library --------------------------------------------------

# lambda-idempotency as crates.io would take it: the packaged crate builds on its own (and
# without its default features), its docs and the workspace's have no warning, and the
# dependency tree's licenses and duplicates pass deny.toml. Advisories are not checked: their
# database is on GitHub (`cargo deny check advisories` where it is reachable).
# PUBLISH_FLAGS=--allow-dirty checks uncommitted changes too.
PUBLISH_FLAGS ?=
publish-check: ensure-cargo-deny
	$(CARGO) publish --dry-run -p lambda-idempotency $(PUBLISH_FLAGS)
	$(CARGO) clippy -p lambda-idempotency --no-default-features -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc -p lambda-idempotency --no-deps --all-features
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps
	cd $(ROOT) && $(CARGO) deny check licenses bans

# The packaged crate tested on its own, as a user of crates.io gets it: `cargo package` (which
# also builds it), the `.crate` unpacked into a temporary directory outside the workspace, and
# there every test of it (nextest: unit, integration and the fault exploration; then the doc
# tests), with every feature, against a fresh local AWS and Redis (local-aws run). `make test`
# runs the same, on the working tree packaged with --allow-dirty: the library's tests run there
# and nowhere else. `test-util` is turned on by --all-features: cargo package drops the crate's
# dev-dependency on itself, which turns it on in the workspace. The crate's own nextest settings
# (shared/.config/nextest.toml: the Redis tests one at a time) are packaged with it. The
# dependencies are those of the Cargo.lock packaged with the crate (cargo package writes it from
# the workspace's), --locked, each of them checked to be in the workspace's Cargo.lock; they
# build in the workspace's target directory, with the crate's own features, not the
# workspace's (its members turn on more of tokio, serde_json, syn and others): they compile a
# second time, once. The files are unpacked with the time of the unpacking (tar -m), so that the
# crate builds again from the new directory (its tests read files under CARGO_MANIFEST_DIR, the
# sample events of tests/data/ among them).
# PUBLISH_FLAGS=--allow-dirty packages uncommitted changes too.
# The workspace's dev profile (Cargo.toml), which the unpacked crate does not have: with it, the
# dependencies whose features are the workspace's are reused instead of built again.
PACKAGE_PROFILE := --config 'profile.dev.debug="line-tables-only"' --config 'profile.dev.package."*".debug=false'

package-check: ensure-nextest
	cd $(ROOT) && $(CARGO) package -p lambda-idempotency --no-verify $(PUBLISH_FLAGS)
	@set -euo pipefail; outside=$$(mktemp -d); trap 'rm -rf "$$outside"' EXIT; \
	$(MAKE) --no-print-directory -C $(ROOT) package-prepare OUTSIDE=$$outside; \
	$(LOCAL_AWS) run -- $(MAKE) --no-print-directory -C $(ROOT) package-test OUTSIDE=$$outside

# What package-check, examples-check and `make test` build outside the workspace: in a target
# directory of its own, so that it can build while the workspace's tests run (their build lock is
# not its), with the workspace's dev profile (PACKAGE_PROFILE).
OUTSIDE_TARGET = $(TARGET_DIR)/outside
# `$(LOCK_IN_WORKSPACE) LOCK [HINT]` fails naming the registry crates of the Cargo.lock LOCK that
# the workspace's Cargo.lock does not hold (and HINT, how to mend it).
LOCK_IN_WORKSPACE = python3 -c 'import sys, tomllib; \
  lock = lambda path: {(p["name"], p["version"]) for p in tomllib.load(open(path, "rb"))["package"] if "source" in p}; \
  extra = sorted(lock(sys.argv[2]) - lock(sys.argv[1])); \
  sys.exit("%s: not in the workspace'"'"'s Cargo.lock: %s %s" % (sys.argv[2], extra, " ".join(sys.argv[3:])) if extra else 0)' \
  $(ROOT)/Cargo.lock
LIBRARY_VERSION = $$(cd $(ROOT) && $(CARGO) pkgid -p lambda-idempotency | sed 's/.*[@\#]//')

# The crate packaged in the target directory unpacked into OUTSIDE (a directory outside the
# workspace), its packaged Cargo.lock checked to hold only crates of the workspace's.
package-prepare:
	@set -euo pipefail; test -n "$(OUTSIDE)" || { echo "OUTSIDE: a directory outside the workspace" >&2; exit 2; }; \
	version=$(LIBRARY_VERSION); \
	tar -xzmf $(TARGET_DIR)/package/lambda-idempotency-$$version.crate -C $(OUTSIDE); \
	$(LOCK_IN_WORKSPACE) $(OUTSIDE)/lambda-idempotency-$$version/Cargo.lock

# Expects the AWS_* variables and REDIS_URL of a local endpoint (use `make package-check`), and
# the crate unpacked in OUTSIDE (package-prepare). NO_RUN=1 builds the tests without running
# them. Doc tests run even if nextest failed; the target fails if either did.
package-test: ensure-nextest
	@set -euo pipefail; \
	cd $(OUTSIDE)/lambda-idempotency-$(LIBRARY_VERSION); \
	export CARGO_TARGET_DIR=$(OUTSIDE_TARGET); rc=0; \
	if [[ -n "$(NO_RUN)" ]]; then \
	  exec $(CARGO) nextest run $(PACKAGE_PROFILE) --locked --all-features --all-targets --no-run; \
	fi; \
	echo "testing the packaged lambda-idempotency in $$PWD"; \
	$(CARGO) nextest run $(PACKAGE_PROFILE) --locked --all-features --all-targets --no-fail-fast \
	  || rc=$$?; \
	$(CARGO) test $(PACKAGE_PROFILE) --locked --all-features --doc || rc=$$((rc ? rc : $$?)); \
	exit $$rc

ensure-cargo-deny:
	@$(CARGO) deny --version >/dev/null 2>&1 || $(CARGO) install cargo-deny --locked

# --- examples ------------------------------------------------------------------

# Each example as a user gets it: its folder copied out of the repository into a temporary
# directory (so that neither the workspace nor examples/.cargo/config.toml applies), its
# `lambda-idempotency = "0.1"` patched to this repository's shared/ (--config patch.crates-io),
# and there rustfmt's check and its tests, with its own Cargo.lock (--locked), on a fresh local
# AWS (the examples whose effects are in DynamoDB or SQS test against it; inline-consumer's tests
# need none). Each lock may only hold crates of the workspace's Cargo.lock (make examples-lock
# writes them from it), and all build in the workspace's target directory with its dev profile
# (PACKAGE_PROFILE), so that the dependencies compile once across the examples (their features
# are not the workspace's, so few of the tests' compiled crates are reused).
EXAMPLES := $(notdir $(patsubst %/,%,$(wildcard $(ROOT)/examples/*/)))
EXAMPLE_FLAGS = $(PACKAGE_PROFILE) --config 'patch.crates-io.lambda-idempotency.path="$(ROOT)/shared"' --locked

examples-check:
	@set -euo pipefail; outside=$$(mktemp -d); trap 'rm -rf "$$outside"' EXIT; \
	$(MAKE) --no-print-directory -C $(ROOT) examples-prepare OUTSIDE=$$outside; \
	$(LOCAL_AWS) run -- $(MAKE) --no-print-directory -C $(ROOT) examples-test OUTSIDE=$$outside

# Each example copied into OUTSIDE (a directory outside the workspace), its Cargo.lock checked to
# hold only crates of the workspace's (make examples-lock writes them from it).
examples-prepare:
	@set -euo pipefail; test -n "$(OUTSIDE)" || { echo "OUTSIDE: a directory outside the workspace" >&2; exit 2; }; \
	for example in $(EXAMPLES); do \
	  $(LOCK_IN_WORKSPACE) $(ROOT)/examples/$$example/Cargo.lock '(make examples-lock)'; \
	  cp -R $(ROOT)/examples/$$example $(OUTSIDE)/; rm -rf $(OUTSIDE)/$$example/target; \
	done

# Expects the AWS_* variables of a local endpoint (use `make examples-check`) and the examples in
# OUTSIDE (examples-prepare). NO_RUN=1 builds their tests without running them.
examples-test:
	@set -euo pipefail; export CARGO_TARGET_DIR=$(OUTSIDE_TARGET); \
	for example in $(EXAMPLES); do \
	  cd $(OUTSIDE)/$$example; \
	  if [[ -n "$(NO_RUN)" ]]; then $(CARGO) test $(EXAMPLE_FLAGS) --no-run; continue; fi; \
	  echo "== $$example, in $$PWD"; \
	  $(CARGO) fmt --check; \
	  $(CARGO) test $(EXAMPLE_FLAGS); \
	done

# Clippy with warnings denied on each example, where it is (examples/.cargo/config.toml patches
# lambda-idempotency to shared/). Not part of examples-check: its dependencies would compile a
# second time, in check mode, for about a third more of that target's time.
examples-lint:
	@set -euo pipefail; export CARGO_TARGET_DIR=$(TARGET_DIR); \
	for example in $(EXAMPLES); do \
	  echo "== $$example"; \
	  (cd $(ROOT)/examples/$$example && \
	   $(CARGO) clippy $(PACKAGE_PROFILE) --locked --all-targets -- -D warnings); \
	done

# Each example's Cargo.lock written anew from the workspace's: the same versions, only the crates
# the example uses (run it after a change of the workspace's Cargo.lock or an example's
# dependencies).
examples-lock:
	@set -euo pipefail; for example in $(EXAMPLES); do \
	  cp $(ROOT)/Cargo.lock $(ROOT)/examples/$$example/Cargo.lock; \
	  (cd $(ROOT)/examples/$$example && $(CARGO) metadata --format-version 1 --offline >/dev/null); \
	done

# --- template: lint and build -----------------------------------------------

# The pinned tools, SAM's translator among them: local-aws reads template.yaml through it.
tools-install:
	$(TOOLS) install

# Both linters must report nothing (cfn-lint exits non-zero on warnings too).
# Offline: no AWS call is made; the dummy credentials only keep the SDK from
# looking for real ones.
EXAMPLE_TEMPLATES := $(wildcard $(ROOT)/examples/*/template.yaml)
template-lint: tools-install
	$(TOOLS) exec -- cfn-lint -- $(TEMPLATE) $(EXAMPLE_TEMPLATES)
	@for template in $(TEMPLATE) $(EXAMPLE_TEMPLATES); do \
	  echo "sam validate --lint $$template"; \
	  AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_EC2_METADATA_DISABLED=true \
	    $(TOOLS) exec -- sam validate --lint --region us-east-1 --template-file $$template || exit 1; \
	done

# `sam build` with the rust-cargolambda build method: cargo-lambda cross-compiles
# each function (--release, the template's architecture) with zig as the linker,
# both from the tools venv: no Docker. Output: .aws-sam/build (then `sam deploy --guided`).
# Not part of CI: a clean build took 18 minutes on 2 cores (the functions build one
# after another, the AWS SDK once per feature set); incremental ones take a few.
sam-build: tools-install ensure-lambda-target
	cd $(ROOT) && $(TOOLS) exec -- sam build --build-in-source --template-file $(TEMPLATE)

# The Rust standard library for the Lambda target (rustup downloads it once).
ensure-lambda-target:
	@cd $(ROOT) && if ! command -v rustup >/dev/null 2>&1; then \
	  echo "rustup not found: make sure the $(LAMBDA_RUST_TARGET) target of your Rust toolchain is installed"; \
	elif ! rustup target list --installed | grep -qx '$(LAMBDA_RUST_TARGET)'; then \
	  rustup target add $(LAMBDA_RUST_TARGET); \
	fi

# --- local AWS (moto) --------------------------------------------------------

local-aws-install:
	$(LOCAL_AWS) install

local-aws-start:
	$(LOCAL_AWS) start $(LOCAL_AWS_PORT)

local-aws-stop:
	$(LOCAL_AWS) stop

local-aws-reset:
	$(LOCAL_AWS) reset

local-aws-env:
	@$(LOCAL_AWS) env

# --- demo --------------------------------------------------------------------

# The main job: the payments pipeline end to end on a fresh local AWS (moto):
# provisions template.yaml's queues and tables, builds the workspace's binaries once and runs
# the four functions each as its own process under a Lambda Runtime API (the project's
# cargo-lambda, `cargo lambda watch --only-lambda-apis`), sends PAYMENTS payments by HTTP with
# retries, duplicates and injected failures, drains the pipeline, prints the report and exits
# non-zero if a check fails.
PAYMENTS ?= 200
TARGET_DIR := $(or $(CARGO_TARGET_DIR),$(ROOT)/target)
# What `make demo` and `make bench-smoke` build of the workspace before they run its binaries:
# the binaries (BUILD_TARGETS=bins, the default), or what `make test` builds (BUILD_TARGETS=test,
# as CI passes after `make test`): the binaries the tests were built with are then fresh, and no
# dependency is compiled again for the features of a build without the dev-dependencies (test
# utilities of the SDKs and tokio, which change no behaviour).
BUILD_TARGETS ?= bins
WORKSPACE_BUILD = $(if $(filter test,$(BUILD_TARGETS)),$(TEST_BUILD),--workspace --bins)
demo: tools-install
	cd $(ROOT) && $(CARGO) build --quiet $(WORKSPACE_BUILD)
	$(LOCAL_AWS) run -- $(TARGET_DIR)/debug/demo --no-build $(PAYMENTS)

# --- the stack, running --------------------------------------------------------

# `make up`: moto on a fixed port (UP_ENDPOINT_PORT), template.yaml provisioned under its own
# names, every function running (the API on UP_API_PORT), their JSON logs with each function's
# name in front, until Ctrl-C; it prints what to export in another terminal and writes it to
# .local/up.env. FAIL_PAYMENTS=MARKER:N[:ACTION] turns the failure switch on. WATCH=1 runs each function as its own process, its binary from one
# workspace build, under the Runtime API of `cargo lambda watch --only-lambda-apis` (the project's
# cargo-lambda, from infra/tools/).
UP_API_PORT      ?= 3000
UP_ENDPOINT_PORT ?= 4566
WATCH            ?=
# WATCH=1 (or yes, true) turns watch mode on; empty or anything else leaves it off.
UP_WATCH = $(filter 1 yes true,$(WATCH))
UP_ARGS = --api-port $(UP_API_PORT) --env-file $(ROOT)/.local/up.env $(if $(UP_WATCH),--watch) \
          $(if $(FAIL_PAYMENTS),--fail-payments '$(FAIL_PAYMENTS)')
up: tools-install
	@mkdir -p $(ROOT)/.local
	LOCAL_AWS_RUN_PORT=$(UP_ENDPOINT_PORT) $(LOCAL_AWS) run -- \
	  $(if $(UP_WATCH),$(TOOLS) exec --) $(CARGO) run --quiet -p payments-e2e --bin up -- $(UP_ARGS)

# The pipeline's invariants checked against the stack `make up` runs (its exports, in
# .local/up.env): waits for the pipeline to drain (at most CHECK_TIMEOUT seconds), prints every
# violation with the ids involved, and fails if there is one. No payment may fail unless
# EXPECT_FAILED names it: space-separated MARKER=KIND, the payments whose description contains
# MARKER failed as KIND (permanent or budget), e.g. EXPECT_FAILED='bad=permanent poison=budget'
# after FAIL_PAYMENTS='bad:1:permanent,poison:1000'.
CHECK_TIMEOUT ?= 30
EXPECT_FAILED ?=
check-invariants:
	@test -f $(ROOT)/.local/up.env || { echo "no .local/up.env: start the stack with make up first"; exit 1; }
	set -a && . $(ROOT)/.local/up.env && set +a && cd $(ROOT) && \
	  $(CARGO) run --quiet -p payments-e2e --bin check-invariants -- --timeout $(CHECK_TIMEOUT) \
	  $(foreach f,$(EXPECT_FAILED),--expect-failed '$(f)')

# The same stack on LocalStack (Docker): starts infra/localstack's container, runs `up` against
# it, and stops the container when `up` ends.
up-localstack: tools-install
	@mkdir -p $(ROOT)/.local
	$(ROOT)/infra/localstack/up -- \
	  $(if $(UP_WATCH),$(TOOLS) exec --) $(CARGO) run --quiet -p payments-e2e --bin up -- $(UP_ARGS)

# template.yaml deployed as it is (sam deploy, the project's SAM CLI) on MiniStack, the pinned
# LocalStack-style emulator of infra/ministack/ (no Docker, no licence), bound to 127.0.0.1 on a
# free port: the workspace's binaries built once and run by it as the functions' processes, the
# HTTP API's routes and JWT authorizer wired (MiniStack leaves them out), tokens from a local
# issuer; prints the same exports as `make up` (and writes them to .local/up.env), until Ctrl-C.
# Not for testing stream failure handling: see docs/local-development.md, "make up-ministack".
up-ministack:
	@mkdir -p $(ROOT)/.local
	$(ROOT)/infra/ministack/up --env-file $(ROOT)/.local/up.env \
	  $(if $(FAIL_PAYMENTS),--fail-payments '$(FAIL_PAYMENTS)')

# --- benchmarks ----------------------------------------------------------------

# The same handler with no idempotency (the floor), this project in each mode and
# AWS Lambda Powertools (Python) on the same workload and local endpoint, directly
# and through a +5 ms proxy, and each side's instructions per record under
# valgrind's callgrind; writes docs/benchmarks-figures.md, docs/benchmarks.json and
# the charts; then the same payments as a DynamoDB stream, a Kinesis stream and a
# Kafka partition (the stream section). Then each function's deploy package (its zip) and init under a Runtime
# API, beside Powertools' (bench-package: docs/package.json). About 50 minutes on
# 2 cores.
bench:
	$(ROOT)/bench/powertools/setup.sh >/dev/null
	$(CARGO) build --release --quiet -p bench --bins
	$(LOCAL_AWS) run -- $(CARGO) run --release --quiet -p bench --bin bench -- --records 2000
	$(CARGO) build --release --quiet -p payments-api -p payments-publisher -p payment-processor -p receipt-sender -p payments-operations --bins
	$(LOCAL_AWS) run -- $(CARGO) run --release --quiet -p bench --bin bench-package -- \
	  --bin-dir $(TARGET_DIR)/release --python $(ROOT)/.venv-bench/bin/python --out $(ROOT)/docs

# The stream scenarios alone (a DynamoDB stream, a Kinesis stream and a Kafka partition,
# beside Powertools' stream and Kafka processors), into docs/benchmarks.md's stream section
# and docs/benchmarks.json; the SQS figures there are kept. About 25 minutes on 2 cores.
bench-streams:
	$(ROOT)/bench/powertools/setup.sh >/dev/null
	$(CARGO) build --release --quiet -p bench --bins
	$(LOCAL_AWS) run -- $(CARGO) run --release --quiet -p bench --bin bench -- --only streams --records 2000

# The same with a tiny workload, so that the benchmark never rots (part of CI); the stream
# scenarios without callgrind (Powertools takes minutes under it).
# The workspace is built once, as for `make demo` (BUILD_TARGETS), and its binaries run from
# there.
bench-smoke:
	$(ROOT)/bench/powertools/setup.sh >/dev/null
	cd $(ROOT) && $(CARGO) build --quiet $(WORKSPACE_BUILD)
	$(LOCAL_AWS) run -- $(TARGET_DIR)/debug/bench --records 40 --publisher-messages 20 --callgrind-batches 1,2 --no-stream-callgrind --out $(ROOT)/target/bench-smoke
	$(LOCAL_AWS) run -- $(TARGET_DIR)/debug/bench-package --runs 2 \
	  --bin-dir $(TARGET_DIR)/debug --python $(ROOT)/.venv-bench/bin/python --out $(ROOT)/target/bench-smoke
