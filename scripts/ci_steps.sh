# shellcheck shell=bash
# Sourced by .ci/run: runs CI's steps one after another, times each, and prints one table of them at
# the end, so a log shows where the run's time went and which step drifts, long before the run meets
# CI's 90-minute limit. A failing step prints the table and ends the run with its own exit code; so
# does a TERM or INT (CI cancelling the job), with the step it stopped named.
#
#   ci_step NAME COMMAND [ARG...]   run one step; on failure, the table and exit with its code
#   ci_report                       the table, the total and, past CI_WARN_MINUTES, a warning
#
# CI_WARN_MINUTES (default 45): the total past which ci_report warns (a warning, not a failure);
# the budgets are 60 minutes for .ci/run on a fresh machine and 40 with its caches (docs/testing.md).
# ci_now is the clock, whole seconds; tests/test_ci_steps.py puts a fake one in its place.

CI_WARN_MINUTES=${CI_WARN_MINUTES:-45}
ci_names=()
ci_seconds=()
ci_results=()
ci_started=
ci_current=        # the step running now, for a TERM or INT
ci_current_start=

ci_now() { date +%s; }

# 754 -> "12 min 34 s"
ci_duration() {
  if (($1 >= 60)); then
    printf '%d min %d s' $(($1 / 60)) $(($1 % 60))
  else
    printf '%d s' "$1"
  fi
}

ci_record() {
  ci_names+=("$1")
  ci_seconds+=($(($(ci_now) - $2)))
  ci_results+=("$3")
}

ci_step() {
  local name=$1
  shift
  local start
  start=$(ci_now)
  [[ -n $ci_started ]] || ci_started=$start
  ci_current=$name
  ci_current_start=$start
  local code=0
  "$@" || code=$?
  ci_current=
  if ((code)); then
    ci_record "$name" "$start" "failed (exit $code)"
    ci_report
    exit "$code"
  fi
  ci_record "$name" "$start" ok
}

ci_report() {
  local total=0 i
  [[ -z $ci_started ]] || total=$(($(ci_now) - ci_started))
  printf '\n[ci] %-44s %14s  %s\n' step "wall time" result
  for i in "${!ci_names[@]}"; do
    printf '[ci] %-44s %14s  %s\n' "${ci_names[i]}" "$(ci_duration "${ci_seconds[i]}")" "${ci_results[i]}"
  done
  printf '[ci] %-44s %14s\n' ".ci/run in all" "$(ci_duration "$total")"
  if ((total > CI_WARN_MINUTES * 60)); then
    local budget="its budget is 60 min on a fresh machine and 40 with caches; CI stops it at 90"
    printf '[ci] warning: .ci/run took %s, past %d min: %s\n' "$(ci_duration "$total")" "$CI_WARN_MINUTES" \
      "$budget"
  fi
}

# CI cancelling the job: the table so far, the step it stopped in, and the signal's exit code.
ci_stopped() {
  if [[ -n $ci_current ]]; then
    ci_record "$ci_current" "$ci_current_start" "stopped by $1"
    ci_current=
  fi
  ci_report
  exit "$2"
}

trap 'ci_stopped TERM 143' TERM
trap 'ci_stopped INT 130' INT
