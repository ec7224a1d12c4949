#!/usr/bin/env bash
# run_local.sh: run the Powertools side of the benchmark on its own, end to end, on a local AWS.
#
#   bench/powertools/run_local.sh [--records N] [--duplicates F] [--groups G]
#                                 [--mode standard|fifo|both] [--out-dir DIR] [--seed S]
#
# Installs the venv (setup.sh), generates the workload (gen_events.py; defaults: 2000 records,
# 20% duplicates, 10 message groups for FIFO, both modes), starts a fresh moto server with
# infra/local-aws/local-aws run (free port, AWS_ENDPOINT_URL and dummy credentials exported,
# stopped afterwards), and for each mode: creates the two tables, runs bench.py, checks the run
# against the stored data (harness.py verify) and prints a summary. Results go to
# DIR/result-<mode>.json (default DIR: <repo>/.local/bench-powertools). Exits non-zero if a run
# fails or does not verify.
set -euo pipefail

SCRIPT_PATH=$(readlink -f -- "${BASH_SOURCE[0]}")
SCRIPT_DIR=$(dirname -- "$SCRIPT_PATH")
REPO_ROOT=$(cd -- "$SCRIPT_DIR/../.." && pwd -P)

die() { printf 'run_local: error: %s\n' "$*" >&2; exit 1; }

# The parent's wall clock in ns, read without forking (bash >= 5 has EPOCHREALTIME).
now_ns() {
  if [[ -n "${EPOCHREALTIME:-}" ]]; then
    local t=${EPOCHREALTIME/[.,]/}
    printf '%s000' "$t"
  else
    date +%s%N
  fi
}

# Inside `local-aws run`: AWS_ENDPOINT_URL points at the fresh moto server.
inner() {
  local py=$1 out_dir=$2
  shift 2
  local mode rc=0 results=()
  for mode in "$@"; do
    local events="$out_dir/events-$mode.json" result="$out_dir/result-$mode.json"
    local idem="bench-pt-$mode-idempotency" effects="bench-pt-$mode-effects"
    printf '\n== %s ==\n' "$mode" >&2
    "$py" "$SCRIPT_DIR/harness.py" create-tables --idempotency-table "$idem" --effects-table "$effects"
    local brc=0
    "$py" "$SCRIPT_DIR/bench.py" --events "$events" --idempotency-table "$idem" --effects-table "$effects" \
      "--$mode" --out "$result" --started-at-ns "$(now_ns)" || brc=$?
    if ((brc != 0 && brc != 2)); then
      echo "run_local: bench.py failed (exit $brc)" >&2
      rc=1
      continue
    fi
    "$py" "$SCRIPT_DIR/harness.py" verify --events "$events" --result "$result" \
      --idempotency-table "$idem" --effects-table "$effects" || rc=1
    results+=("$result")
  done
  if ((${#results[@]})); then
    printf '\n' >&2
    "$py" "$SCRIPT_DIR/harness.py" summary "${results[@]}"
    printf 'results: %s\n' "${results[*]}" >&2
  fi
  return "$rc"
}

main() {
  if [[ "${1:-}" == __inner ]]; then
    shift
    inner "$@"
    return
  fi

  local records=2000 duplicates=0.2 groups=10 mode=both seed=1
  local out_dir="$REPO_ROOT/.local/bench-powertools"
  while (($#)); do
    case "$1" in
      --records) records=${2:?}; shift 2 ;;
      --duplicates) duplicates=${2:?}; shift 2 ;;
      --groups) groups=${2:?}; shift 2 ;;
      --mode) mode=${2:?}; shift 2 ;;
      --out-dir) out_dir=${2:?}; shift 2 ;;
      --seed) seed=${2:?}; shift 2 ;;
      -h | --help) sed -n '2,14s/^# \{0,1\}//p' "$SCRIPT_PATH"; return 0 ;;
      *) die "unknown argument '$1' (see --help)" ;;
    esac
  done
  local modes
  case "$mode" in
    standard | fifo) modes=("$mode") ;;
    both) modes=(standard fifo) ;;
    *) die "--mode must be standard, fifo or both" ;;
  esac

  local py
  py=$("$SCRIPT_DIR/setup.sh")
  mkdir -p "$out_dir"
  out_dir=$(cd -- "$out_dir" && pwd -P)
  local m
  for m in "${modes[@]}"; do
    "$py" "$SCRIPT_DIR/gen_events.py" --records "$records" --duplicates "$duplicates" \
      --groups "$groups" "--$m" --seed "$seed" --out "$out_dir/events-$m.json"
  done
  "$REPO_ROOT/infra/local-aws/local-aws" run -- "$SCRIPT_PATH" __inner "$py" "$out_dir" "${modes[@]}"
}

main "$@"
