#!/usr/bin/env bash
# Mutation score of the engine, one module at a time, each against the fast tests that exercise it.
#
#   scripts/mutation.sh                          every module of the table below
#   scripts/mutation.sh core/acceptance.py ...   the named modules only
#
# Needs mutmut 3 (`pip install mutmut`); not part of CI (hours on two cores for the whole table).
# Each module runs in a scratch copy of the working tree (tracked and untracked, not ignored files),
# so the tree itself is never touched; results land in mutation-results/<module>.txt and the table
# of scores is printed by scripts/mutation_summary.py. `MUTMUT_CHILDREN` sets parallel mutants (1).
# `MUTATION_KEEP=1` keeps the scratch copy as mutation-results/<module>.work: a survivor can then be
# run against tests written after the run (copy them in; `MUTANT_UNDER_TEST=<name> pytest ...` in its
# mutants/ folder switches that one mutant on).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

# module -> the tests (files or node ids) that run against its mutants: the fast ones that check the
# module against a definition or an oracle. Entries missing from the tree are skipped (older trees).
declare -A TESTS=(
  [core/acceptance.py]="tests/test_speculative.py tests/test_engine.py::test_accepted_exactly_when_pooled_reaches_tau
    tests/test_context.py::test_pooled_mass_of_a_later_band_equals_a_cache_free_forward
    tests/test_context.py::test_tau_one_with_every_neighbour_passes_every_cell
    tests/test_context.py::test_pooled_mass_and_verdicts_follow_k_as_the_definition_says"
  [core/islands.py]="tests/test_schedules.py tests/test_engine.py::test_the_resample_mask_follows_the_expansion_rule
    tests/test_engine.py::test_islands_are_the_8_connected_components_of_the_resample_mask"
  [core/schedules.py]="tests/test_schedules.py tests/test_engine.py::test_zipar_with_window_w_gives_ar_tokens
    tests/test_engine.py::test_trace_nfe_totals_equal_the_forward_passes_made"
  [core/sampling.py]="tests/test_sampling.py tests/test_speculative.py tests/test_engine.py::test_the_same_seed_gives_the_same_trace
    tests/test_llamagen_golden.py::test_top_k_and_top_p_filtering_equal_the_official_rule_bit_for_bit"
  [core/upsampling.py]="tests/test_upsampling.py tests/test_engine.py::test_tau_zero_accepts_every_proposal
    tests/test_context.py::test_pooled_mass_of_a_later_band_equals_a_cache_free_forward"
  [core/trace.py]="tests/test_trace_bounds.py tests/test_trace_safety.py::test_a_real_trace_replays_within_its_pair_s_limits
    tests/test_trace_safety.py::test_a_crafted_trace_is_refused_with_one_clear_message
    tests/test_trace_safety.py::test_an_html_method_is_not_echoed_as_markup
    tests/test_trace_safety.py::test_grids_are_checked_against_the_pair_before_the_tokens
    tests/test_trace_safety.py::test_a_trace_without_a_pair_is_bounded_by_its_own_grid
    tests/test_engine.py::test_trace_nfe_totals_equal_the_forward_passes_made
    tests/test_engine.py::test_a_trace_round_trips_through_json_with_the_contract_fields
    tests/test_engine.py::test_a_schema_1_trace_is_read_with_passed_and_kept_recounted
    tests/test_drafting.py::test_a_schema_2_trace_reads_with_its_levels"
  [core/decoding.py]="tests/test_context.py tests/test_engine.py
    tests/test_speculative.py::test_sd_trace_says_what_each_cycle_drafted_judged_and_kept
    tests/test_speculative.py::test_sjd_trace_says_what_each_pass_guessed_judged_and_kept
    tests/test_newer_methods.py::test_every_pjd_query_matches_a_cache_free_forward_over_what_its_row_may_read
    tests/test_drafting.py::test_a_cascades_nfe_totals_equal_the_forwards_counted"
  [core/methods/mulo.py]="tests/test_engine.py::test_tau_zero_accepts_every_proposal
    tests/test_engine.py::test_accepted_exactly_when_pooled_reaches_tau
    tests/test_engine.py::test_the_resample_mask_follows_the_expansion_rule
    tests/test_engine.py::test_raster_rejection_redrafts_and_reverifies_after_every_rejection
    tests/test_engine.py::test_islands_are_the_8_connected_components_of_the_resample_mask
    tests/test_engine.py::test_trace_nfe_totals_equal_the_forward_passes_made
    tests/test_context.py::test_every_query_reads_the_committed_tokens_computed_under_the_committed_prefix
    tests/test_context.py::test_multi_band_verification_reads_committed_bands_exactly_in_both_modes
    tests/test_context.py::test_pooled_mass_of_a_later_band_equals_a_cache_free_forward
    tests/test_context.py::test_tau_one_with_every_neighbour_passes_every_cell
    tests/test_context.py::test_pooled_mass_and_verdicts_follow_k_as_the_definition_says
    tests/test_drafting.py::test_draft_method_ar_reproduces_the_traces_mulo_made_before_it_existed
    tests/test_drafting.py::test_any_method_drafts_as_the_target_of_its_own_run
    tests/test_drafting.py::test_a_cascade_at_tau_zero_returns_each_levels_proposal
    tests/test_drafting.py::test_a_cascades_levels_keep_the_mulo_invariants
    tests/test_drafting.py::test_a_cascades_nfe_totals_equal_the_forwards_counted
    tests/test_drafting.py::test_jacobi_resampling_with_nothing_rejected_returns_the_proposal
    tests/test_drafting.py::test_jacobi_in_one_island_commits_a_token_per_pass_and_never_changes_one
    tests/test_drafting.py::test_greedy_jacobi_with_one_row_at_a_time_equals_greedy_serial_resampling
    tests/test_drafting.py::test_one_level_down_is_its_definition_on_every_phase_and_model
    tests/test_drafting.py::test_a_drafters_run_reports_its_own_steps_one_level_down
    tests/test_drafting.py::test_a_jacobi_resampling_run_is_a_function_of_its_seed_alone
    tests/test_drafting.py::test_jacobi_redraws_with_the_redraft_rule_named_and_the_guesses_q_it_drew_them_from
    tests/test_drafting.py::test_a_jacobi_pass_reports_the_target_forward_the_guesses_it_judged_and_what_it_kept
    tests/test_drafting.py::test_each_jacobi_guess_is_judged_under_its_own_cells_distribution
    tests/test_drafting.py::test_a_cascade_three_grids_deep_keeps_every_levels_grids
    tests/test_drafting.py::test_the_passed_share_is_the_accepted_verdicts_over_every_judged_cell_of_every_band
    tests/test_drafting.py::test_the_kept_share_and_island_count_are_what_the_verify_steps_report
    tests/test_drafting.py::test_a_pending_cell_a_resampling_forward_reads_stands_in_as_its_proposal
    tests/test_drafting.py::test_a_pending_cell_of_the_row_above_stands_in_as_its_current_jacobi_guess
    tests/test_engine.py::test_raster_rejection_refreshes_the_drafter_cells_whose_blocks_are_committed_and_drafts_the_rest
    tests/test_engine.py::test_a_verify_step_lists_exactly_the_cells_it_judged_and_its_masks_are_booleans
    tests/test_drafting.py::test_an_accepted_jacobi_guess_is_committed_as_the_guess_it_was"
  [core/methods/sd.py]="tests/test_speculative.py"
  [core/methods/sjd.py]="tests/test_speculative.py::test_sjd_trace_says_what_each_pass_guessed_judged_and_kept
    tests/test_speculative.py::test_sjd_samples_the_exact_joint[random]
    tests/test_speculative.py::test_at_temperature_zero_speculative_methods_give_ar_tokens
    tests/test_speculative.py::test_a_fresh_sjd_guess_copies_the_neighbour_its_init_names_else_draws_a_uniform_token
    tests/test_speculative.py::test_a_run_is_a_function_of_its_seed_alone
    tests/test_speculative.py::test_jacobi_reports_the_share_of_judged_guesses_that_passed
    tests/test_speculative.py::test_no_method_accepts_a_draft_its_target_gives_probability_zero_even_when_u_is_zero
    tests/test_newer_methods.py::test_scd_samples_the_exact_joint_of_a_toy_model"
  [core/methods/pjd.py]="tests/test_pjd_oracles.py tests/test_newer_methods.py tests/test_engine.py::test_trace_nfe_totals_equal_the_forward_passes_made"
  [core/methods/gsd.py]="tests/test_newer_methods.py tests/test_engine.py::test_trace_nfe_totals_equal_the_forward_passes_made"
  [core/methods/scd.py]="tests/test_speculative.py::test_a_run_is_a_function_of_its_seed_alone tests/test_newer_methods.py tests/test_engine.py::test_trace_nfe_totals_equal_the_forward_passes_made"
  [core/methods/cool.py]="tests/test_speculative.py::test_relaxed_methods_report_their_acceptance_probability_from_cache_free_forwards tests/test_newer_methods.py tests/test_engine.py::test_trace_nfe_totals_equal_the_forward_passes_made"
  [core/methods/lantern.py]="tests/test_speculative.py tests/test_engine.py::test_trace_nfe_totals_equal_the_forward_passes_made"
  [core/methods/zipar.py]="tests/test_engine.py::test_ar_and_zipar_decode_every_cell_once_and_return_what_they_sampled tests/test_engine.py::test_zipar_with_window_w_gives_ar_tokens tests/test_engine.py::test_trace_nfe_totals_equal_the_forward_passes_made
    tests/test_schedules.py"
  [core/methods/ar.py]="tests/test_engine.py tests/test_context.py::test_raster_and_zipar_orders_feed_every_cell_once_and_rewrite_nothing"
  [app/render.py]="tests/test_app_render_oracles.py tests/test_app_views.py"
  [app/plots.py]="tests/test_app_plots.py tests/test_app_views.py"
)
# (app/*: the oracle files and the views; test_app_render.py drives the handlers end to end at ~13 s a
# mutant, too slow to run per mutant, and checks wiring more than values)
# the slowest tests of those files stay out of the mutation runs: each would run per mutant (the raster
# fixture case of draft_method=ar alone takes 12 s; raster rejection keeps its own 0.2 s test)
DESELECT="not shipped and not old_refresh and not scd_drafts_settle and not verify_keeps and not sd_samples_the_target and not always_accept_rule and not (draft_method_ar and 0.02)"

present() {  # a file, or file::test[param] whose test function the file defines
  local f=${1%%::*} t=${1#*::}
  t=${t%%\[*}
  [ -f "$ROOT/$f" ] && { [ "$t" = "$1" ] || grep -q "def $t(" "$ROOT/$f"; }
}

MODULES=("$@")
[ ${#MODULES[@]} -gt 0 ] || MODULES=(core/acceptance.py core/islands.py core/schedules.py core/sampling.py
                                     core/upsampling.py core/trace.py core/decoding.py core/methods/mulo.py
                                     core/methods/sd.py core/methods/sjd.py core/methods/pjd.py core/methods/gsd.py
                                     core/methods/scd.py core/methods/cool.py core/methods/lantern.py
                                     core/methods/zipar.py core/methods/ar.py app/render.py app/plots.py)
mkdir -p "$ROOT/mutation-results"
for m in "${MODULES[@]}"; do
  [ -n "${TESTS[$m]:-}" ] || { echo "no test selection for $m" >&2; exit 2; }
  work=$(mktemp -d)
  (cd "$ROOT" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$work")
  {
    echo "[mutmut]"
    printf 'source_paths =\n    core\n    app\n'
    printf 'only_mutate =\n    %s\n' "$m"
    printf 'also_copy =\n    assets\n    app.py\n'
    printf 'timeout_multiplier = 3\ntimeout_constant = 10\n'   # a mutant that loops forever is stopped soon
    printf 'pytest_add_cli_args_test_selection =\n'
    for t in ${TESTS[$m]}; do present "$t" && printf '    %s\n' "$t"; done
    printf 'pytest_add_cli_args =\n    -p\n    no:cacheprovider\n    -k\n    %s\n' "$DESELECT"
  } > "$work/setup.cfg"
  name=$(echo "${m%.py}" | tr / .)
  (cd "$work" && nice -n 19 mutmut run --max-children "${MUTMUT_CHILDREN:-1}" > "$ROOT/mutation-results/$name.log" 2>&1 || true
   cd "$work" && mutmut results --all true > "$ROOT/mutation-results/$name.txt"
   for s in $(grep -v ': killed' "$ROOT/mutation-results/$name.txt" | sed 's/^ *//; s/:.*//'); do mutmut show "$s"; done \
     > "$ROOT/mutation-results/$name.survivors.diff" 2>&1 || true)
  if [ "${MUTATION_KEEP:-0}" = 1 ]; then
    rm -rf "$ROOT/mutation-results/$name.work" && mv "$work" "$ROOT/mutation-results/$name.work"
  else
    rm -rf "$work"
  fi
done
cat "$ROOT"/mutation-results/*.txt | python "$ROOT/scripts/mutation_summary.py"
