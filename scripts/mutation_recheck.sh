#!/usr/bin/env bash
# Re-run surviving mutants of a kept mutation run against tests written after it.
#
#   MUTATION_KEEP=1 scripts/mutation.sh core/methods/mulo.py      # keeps mutation-results/<module>.work
#   cp tests/test_new.py mutation-results/core.methods.mulo.work/mutants/tests/
#   K="<pytest -k expression>" scripts/mutation_recheck.sh mutation-results/core.methods.mulo.work \
#       tests/test_new.py core.methods.mulo.x_run__mutmut_317 ...
#
# Run it with the project's environment active. Each named mutant is switched on (MUTANT_UNDER_TEST) in the kept copy and the tests run there once;
# prints "killed (<first failing test>)" or "SURVIVED". Check first that the tests pass with no mutant
# switched on (`MUTANT_UNDER_TEST=none`): any failure, an import error included, reads as a kill.
set -uo pipefail
work=$1; tests=$2; shift 2
cd "$work/mutants" || { echo "no mutants/ in $work" >&2; exit 2; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
log=$(mktemp)
for n in "$@"; do
  if MUTANT_UNDER_TEST=$n timeout "${MUTATION_TIMEOUT:-300}" python -m pytest -x -q -p no:cacheprovider $tests \
       ${K:+-k "$K"} > "$log" 2>&1; then
    echo "$n: SURVIVED"
  else
    echo "$n: killed ($(grep -m1 -o 'FAILED [^ ]*\|ERROR[: ][^ ]*' "$log" || echo timeout))"
  fi
done
rm -f "$log"
