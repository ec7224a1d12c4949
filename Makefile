# Developer / CI entry points. CI runs `.ci/run`, which runs `make lint test`.
#
#   make test              all tests against a fresh local AWS (moto) server
#   make lint              rustfmt check + clippy with warnings denied
#   make local-aws-start   start a long-running moto server (LOCAL_AWS_PORT, default 4566)
#   make local-aws-stop    stop it
#
# The local AWS harness lives in infra/local-aws/ (see `infra/local-aws/local-aws --help`).

SHELL := /bin/bash
.DEFAULT_GOAL := test

ROOT      := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
LOCAL_AWS := $(ROOT)/infra/local-aws/local-aws
CARGO     ?= cargo

.PHONY: test test-inner ensure-nextest lint \
        local-aws-install local-aws-start local-aws-stop local-aws-reset local-aws-env

# --- tests -------------------------------------------------------------------

# Starts moto on a free port, exports AWS_ENDPOINT_URL & co., runs test-inner,
# and always stops the server (even on failure or Ctrl-C).
test: ensure-nextest
	$(LOCAL_AWS) run -- $(MAKE) --no-print-directory -C $(ROOT) test-inner

# Expects the AWS_* variables to point at a local endpoint (use `make test`,
# or `eval "$$($(LOCAL_AWS) env)"` after `make local-aws-start`).
# Doc tests run even if nextest failed; the target fails if either did.
test-inner: ensure-nextest
	@rc=0; \
	$(CARGO) nextest run --workspace --all-targets --no-fail-fast || rc=$$?; \
	$(CARGO) test --workspace --doc || rc=$$((rc ? rc : $$?)); \
	exit $$rc

ensure-nextest:
	@$(CARGO) nextest --version >/dev/null 2>&1 || $(CARGO) install cargo-nextest --locked

# --- lint --------------------------------------------------------------------

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

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
# RESERVED: the `demo` target is added by a later change. Define it here (and
# add it to .PHONY above); do not define `demo` anywhere else in this file.
