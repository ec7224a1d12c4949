#!/usr/bin/env bash
# setup.sh: install the Python side of the benchmark into <repo>/.venv-bench.
#
#   bench/powertools/setup.sh        create/refresh the venv, then print the
#                                    path of its python on stdout
#
# Idempotent: the venv is (re)built only when requirements.txt changed (its
# sha256 is kept in <repo>/.venv-bench/.bench-requirements.sha256), when the
# venv is broken, or when the repository moved. Messages go to stderr, so
#   PY=$(bench/powertools/setup.sh)
# gives the interpreter to run bench.py with.
#
# Environment knobs:
#   BENCH_PYTHON   interpreter used to create the venv (python3; >= 3.11)
set -euo pipefail

PROG=bench-setup
SCRIPT_PATH=$(readlink -f -- "${BASH_SOURCE[0]}")
SCRIPT_DIR=$(dirname -- "$SCRIPT_PATH")
REPO_ROOT=$(cd -- "$SCRIPT_DIR/../.." && pwd -P)

REQ_FILE="$SCRIPT_DIR/requirements.txt"
VENV_DIR="$REPO_ROOT/.venv-bench"
STAMP_FILE="$VENV_DIR/.bench-requirements.sha256"
LOCK_FILE="$REPO_ROOT/.local/bench-setup.lock"
PYTHON_BIN=${BENCH_PYTHON:-python3}

say() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }

sha256_of() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum "$1" | awk '{print $1}'
  else
    "$PYTHON_BIN" -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1"
  fi
}

# Two concurrent setups must not build the venv at the same time (flock is optional).
take_lock() {
  mkdir -p "$(dirname -- "$LOCK_FILE")"
  if command -v flock >/dev/null 2>&1; then
    exec 9>"$LOCK_FILE"
    flock -w 300 9 || die "timed out waiting for lock $LOCK_FILE"
  fi
}

# The venv's python runs, and its pip script points into this venv (it breaks if the repo moved).
venv_ok() {
  [[ -x "$VENV_DIR/bin/python" ]] && "$VENV_DIR/bin/python" -c 'import aws_lambda_powertools, boto3' >/dev/null 2>&1 &&
    [[ -f "$VENV_DIR/bin/pip" ]] && [[ "$(head -n1 "$VENV_DIR/bin/pip")" == "#!$VENV_DIR/bin/python"* ]]
}

check_python() {
  command -v "$PYTHON_BIN" >/dev/null 2>&1 ||
    die "'$PYTHON_BIN' not found; install Python >= 3.11 (or set BENCH_PYTHON)"
  "$PYTHON_BIN" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' ||
    die "$PYTHON_BIN is $("$PYTHON_BIN" -c 'import platform; print(platform.python_version())'); Python >= 3.11 is required (set BENCH_PYTHON)"
  "$PYTHON_BIN" -c 'import venv, ensurepip' >/dev/null 2>&1 ||
    die "$PYTHON_BIN lacks the venv/ensurepip modules (Debian: apt-get install python3-venv)"
}

main() {
  (( $# == 0 )) || die "usage: $0 (no arguments)"
  [[ -f "$REQ_FILE" ]] || die "missing $REQ_FILE"
  take_lock

  local want have=""
  want=$(sha256_of "$REQ_FILE")
  [[ -f "$STAMP_FILE" ]] && have=$(head -n1 "$STAMP_FILE")

  if [[ "$want" != "$have" ]] || ! venv_ok; then
    check_python
    if [[ -d "$VENV_DIR" ]]; then
      if [[ -n "$have" && "$want" != "$have" ]]; then
        say "requirements.txt changed; recreating $VENV_DIR"
      else
        say "$VENV_DIR is incomplete, broken or was moved; recreating it"
      fi
      "$PYTHON_BIN" -m venv --clear "$VENV_DIR" || die "could not recreate $VENV_DIR"
    else
      say "creating $VENV_DIR"
      "$PYTHON_BIN" -m venv "$VENV_DIR" || die "could not create $VENV_DIR"
    fi
    rm -f "$STAMP_FILE"
    say "pip-installing bench/powertools/requirements.txt"
    "$VENV_DIR/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
      -r "$REQ_FILE" >&2 || die "pip install -r $REQ_FILE failed (see the output above)"
    venv_ok || die "aws_lambda_powertools/boto3 not importable from $VENV_DIR after install"
    printf '%s\n' "$want" >"$STAMP_FILE"
    say "installed into $VENV_DIR"
  fi

  printf '%s\n' "$VENV_DIR/bin/python"
}

main "$@"
