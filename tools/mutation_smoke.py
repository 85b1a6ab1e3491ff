#!/usr/bin/env python3
"""Mutation smoke for CI: a fixed sample of mutmut's mutants of every core module must stay killed.

Runs mutmut (configured in pyproject.toml, see docs/mutation-testing.md) in a scratch copy of
the working tree, on a scope that fits CI's budget:

* MODULES_PER_RUN modules of pyproject's `only_mutate` list (the core), a window rotated by
  the hash of the tree under test (--modules 0: all of them), contribute PER_MODULE mutants
  each: evenly spaced over the module's measured sample (every function's mutants numbered
  1, 1 + MEASURED_STRIDE, ...; mutmut numbers a function's mutants in source order, so the
  sample is the same from run to run while the code is), i.e. a subset of what
  docs/mutation-testing.md's per-module figures measure;
* a module that changed since the merge base with the main branch contributes its whole
  sample at --stride (every function's mutants 1, 1 + stride, ...);
* the tests are those tools/test_map.json measured executing each module (TESTS_FOR's files
  where the map has none yet; each mutant runs only those that reach its function).

With --files, only those files are mutated, at --stride (the per-module measurement of
docs/mutation-testing.md), with --tests or TESTS_FOR's tests of those files.

The sample runs in a fixed order (`ordered`: every module's first sampled mutant, then every
module's second, ...) within a time budget (--budget seconds for the whole smoke, of which the
mutants get at least --min-mutant-seconds once mutmut starts them): what the budget leaves out
is named in that order, not scored. The score is killed (timeouts count as killed) / run,
without the mutants listed in tools/mutation_equivalents/. Exit status 1 when it is below
--threshold, when fewer than MIN_RUN ran, or when mutmut cannot run the clean tests; the
survivors are printed with their diffs.

Usage: python tools/mutation_smoke.py [--threshold 0.9] [--per-module 3] [--stride 8] [--base main]
       [--modules 21] [--offset N] [--budget 330] [--min-mutant-seconds 150]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The stride of the per-module figures in docs/mutation-testing.md; the smoke's sample of a
#: module is drawn from that module's measured sample.
MEASURED_STRIDE = 16
#: Mutants each sampled module contributes to a run.
PER_MODULE = 3
#: Core modules a run samples: a window of `only_mutate`, rotated by the tree's hash (`window`),
#: so that the same code always samples the same modules and successive changes cover them all
#: (each run's window holds a module with probability MODULES_PER_RUN / len(core), not on a
#: schedule). Mutants, their stats and clean runs, the stage's fixed costs, grow with the
#: modules mutated, so a window costs about MODULES_PER_RUN / len(core) of the whole core.
MODULES_PER_RUN = 21
#: Seconds CI gives the whole smoke; the sampled mutants run in ORDER (`ordered`) and those not
#: run by then are listed, not scored, so the job ends in a fixed time on a slower machine too.
BUDGET = 330.0
#: Seconds the mutants themselves always get once mutmut starts them, however long its fixed
#: steps took (generating the mutants, its stats and clean runs of the selected tests).
MIN_MUTANT_SECONDS = 150.0
#: Fewer sampled mutants run than this (the budget far too small for the machine) fails the
#: smoke: a score of a handful says nothing.
MIN_RUN = 20
#: The test files that kill a module's sample, by path prefix (the longest matching prefix
#: wins; a module matching none gets pyproject's whole test selection), written by hand: the
#: fallback for a module tools/test_map.json (measured) has no test file for yet (`tests_of`).
#: Tests that run the code
#: in another process (the CLI as a command, the HDF5 reader process, Enzyme's derivation child)
#: cannot see mutants, so these are in-process tests.
TESTS_FOR = {
    "juliabridge/bundle/": ["tests/test_pinned_security.py"],
    "juliabridge/bundle/bundle.py": [
        "tests/test_pinned_security.py",
        "tests/test_echo_claims.py",
        "tests/test_error_surface.py",
    ],
    "juliabridge/bundle/sources.py": ["tests/test_pinned_security.py", "tests/test_format2.py"],
    "juliabridge/bundle/files/atomic.py": ["tests/test_atomic_save.py"],
    "juliabridge/bundle/manifest/": [
        "tests/test_pinned_security.py",
        "tests/test_manifest.py",
        "tests/test_manifest_schema.py",
    ],
    "juliabridge/bundle/weights/": [
        "tests/test_pinned_security.py",
        "tests/test_pinned_libhdf5.py",
        "tests/test_pinned_fastread.py",
        "tests/test_pinned_h5parse.py",
        "tests/test_loading_h5parse.py",
    ],
    "juliabridge/bundle/write/": [
        "tests/test_upgrade.py",
        "tests/test_bundles.py",
        "tests/test_bundle_description.py",
        "tests/test_bundle_description_space.py",
    ],
    "juliabridge/bundle/write/vjp_bundle.py": ["tests/test_cli_usage.py"],
    "juliabridge/cli/": ["tests/test_pinned_cli.py", "tests/test_doctor.py"],
    "juliabridge/cli/commands.py": [
        "tests/test_pinned_cli.py",
        "tests/test_doctor.py",
        "tests/test_cli.py::test_demo_runs_the_shipped_example",
    ],
    "juliabridge/support/exitcodes.py": ["tests/test_pinned_cli.py"],
    "juliabridge/stablehlo/": [
        "tests/test_pinned_stablehlo.py",
        "tests/test_pinned_module.py",
        "tests/test_pinned_budget.py",
        "tests/test_echo_structure.py",
    ],
    "juliabridge/stablehlo/budget.py": [
        "tests/test_pinned_stablehlo.py",
        "tests/test_pinned_module.py",
        "tests/test_pinned_budget.py",
        "tests/test_echo_structure.py",
        "tests/test_work_budget_space.py",
        "tests/test_budget_expansion_space.py",
    ],
    "juliabridge/stablehlo/sanitize.py": [
        "tests/test_pinned_stablehlo.py",
        "tests/test_pinned_sanitize_report.py",
        "tests/test_load_mlir.py::test_sort_dimension_counted_from_the_end",
    ],
    "juliabridge/stablehlo/hlosharding.py": [
        "tests/test_pinned_stablehlo.py",
        "tests/test_pinned_module.py",
        "tests/test_pinned_budget.py",
        "tests/test_echo_structure.py",
        "tests/test_hlosharding_space.py",
    ],
    "juliabridge/stablehlo/artifact.py": ["tests/test_pinned_artifact.py"],
    "juliabridge/stablehlo/_artifact_child.py": ["tests/test_pinned_artifact.py"],
    # not tests/test_transforms.py: its `juliabridge vjp` test runs Enzyme's derivation child,
    # which dies under mutmut (docs/mutation-testing.md), so the clean run would fail
    "juliabridge/transforms/": [
        "tests/test_pinned_transforms.py",
        "tests/test_pinned_higher_order.py",
    ],
    "juliabridge/transforms/sharding.py": [
        "tests/test_pinned_sharding.py",
        "tests/test_recorded_shardings.py",
    ],
    "juliabridge/reactant_export/": [
        "tests/test_pinned_reactant_script.py",
        "tests/test_pinned_reactant_export.py",
        "tests/test_reactant_export.py",
    ],
    "juliabridge/reactant_export/luxmap.py": [
        "tests/test_pinned_reactant_script.py",
        "tests/test_pinned_reactant_export.py",
        "tests/test_reactant_export.py",
        "tests/test_echo_outputs_space.py",
    ],
    "juliabridge/verification.py": [
        "tests/test_pinned_verify.py",
        "tests/lax/test_matmul_precision_space.py",
        "tests/test_cli_usage.py::test_the_verify_api_refuses_a_tolerance_that_cannot_be_met",
    ],
    "juliabridge/lux/": ["tests/test_pinned_calls.py", "tests/test_pinned_batch.py"],
    "juliabridge/lux/options.py": [
        "tests/test_load_options.py",
        "tests/test_load_options_routes.py",
    ],
    "juliabridge/lux/params_io.py": [
        "tests/test_pinned_params.py",
        "tests/test_error_surface.py::test_save_params_creates_no_directory_and_replaces_no_file_unasked",
    ],
    "juliabridge/lux/parallel.py": ["tests/test_pinned_parallel.py"],
    "juliabridge/lux/batchsize.py": [
        "tests/test_pinned_calls.py",
        "tests/test_pinned_batch.py",
        "tests/test_recorded_shardings.py",
    ],
    "juliabridge/function.py": ["tests/test_pinned_calls.py", "tests/test_pinned_batch.py"],
    "juliabridge/support/dtypes.py": ["tests/test_pinned_calls.py", "tests/test_pinned_batch.py"],
    "juliabridge/backends/lax/": ["tests/test_pinned_lax.py", "tests/lax/test_framework.py"],
    "juliabridge/backends/lax/attrs.py": [
        "tests/test_pinned_lax.py",
        "tests/lax/test_framework.py",
        "tests/lax/test_dense_constant_space.py",
    ],
    "juliabridge/backends/lax/evaluate.py": [
        "tests/test_pinned_lax.py",
        "tests/lax/test_framework.py",
        "tests/lax/test_result_check_space.py",
    ],
    "juliabridge/backends/vjp_text.py": ["tests/test_cli_usage.py", "tests/test_cli_errors.py"],
    "juliabridge/backends/lax/ops/elementwise.py": [
        "tests/test_pinned_lax.py",
        "tests/lax/test_framework.py",
        "tests/lax/test_elementwise.py::test_unary_complex_ops",
    ],
    "juliabridge/backends/lax/rewrite.py": [
        "tests/test_pinned_lax.py",
        "tests/test_complex_order.py",
        "tests/lax/test_random.py::test_rng_bit_generator_signed_and_float_bits_on_every_backend",
    ],
    "juliabridge/backends/lax/ops/_sort": ["tests/lax/test_sort.py"],
    "juliabridge/backends/lax/ops/normalization.py": ["tests/lax/test_batchnorm.py"],
    "juliabridge/backends/lax/ops/random.py": ["tests/lax/test_random.py"],
    "juliabridge/backends/lax/ops/_indexing_util.py": ["tests/lax/test_indexing.py"],
    "juliabridge/backends/lax/ops/indexing.py": ["tests/lax/test_indexing.py"],
    "juliabridge/backends/lax/ops/_shape_util.py": ["tests/lax/test_shape.py"],
    "juliabridge/backends/lax/ops/conv.py": ["tests/lax/test_conv.py"],
    "juliabridge/backends/lax/ops/fft.py": ["tests/lax/test_fft.py"],
    "juliabridge/backends/lax/ops/dot.py": [
        "tests/lax/test_dot.py",
        "tests/lax/test_matmul_precision_space.py",
    ],
    "juliabridge/backends/lax/ops/_control_util.py": [
        "tests/lax/test_control.py",
        "tests/lax/test_counted_loop_space.py",
        "tests/lax/test_scan_carry_space.py",
    ],
    "juliabridge/backends/lax/ops/control.py": [
        "tests/lax/test_control.py",
        "tests/lax/test_scan_carry_space.py",
    ],
    "juliabridge/backends/lax/valtypes.py": [
        "tests/lax/test_control.py::test_barrier_tuple_and_tokens",
    ],
    "juliabridge/backends/lax/ops/chlo.py": ["tests/lax/test_chlo.py"],
    "juliabridge/backends/lax/ops/_select_scatter_util.py": [
        "tests/lax/test_reduction.py",
        "tests/lax/test_select_scatter_space.py",
    ],
    "juliabridge/backends/lax/ops/_reduction_util.py": ["tests/lax/test_reduction.py"],
    "juliabridge/backends/lax/ops/reduction.py": ["tests/lax/test_reduction.py"],
    "juliabridge/backends/lax/ops/_custom_call_util.py": ["tests/lax/test_custom_call.py"],
    "juliabridge/backends/lax/ops/custom_call.py": ["tests/lax/test_custom_call.py"],
    "juliabridge/backends/lax/ops/_linalg_targets.py": [
        "tests/lax/test_custom_call.py",
        "tests/lax/test_linalg.py",
    ],
    "juliabridge/backends/lax/ops/linalg.py": ["tests/lax/test_linalg.py"],
}

#: Tests that kill a sampled mutant the QUICKEST selection misses, by module: found by running
#: each survivor of a smoke (MUTANT_UNDER_TEST=NAME pytest -x) against the tests mutmut
#: recorded reaching its function. `--suggest-tests` adds them to the module's selection.
KILLERS = {
    "juliabridge/backends/lax/attrs.py": [
        "tests/lax/test_dense_constant_space.py::test_a_large_hex_constant_of_every_element_type_holds_numpy_s_reading_of_its_bytes",
    ],
    "juliabridge/backends/lax/backend.py": [
        "tests/test_pinned_lax.py::test_a_module_without_its_parse_is_lifted_from_its_text",
    ],
    "juliabridge/backends/lax/evaluate.py": [
        "tests/test_pinned_lax.py::test_a_lift_producing_the_wrong_type_is_caught_at_the_op",
    ],
    "juliabridge/backends/lax/ops/_control_util.py": [
        "tests/lax/test_counted_loop_space.py::test_an_inclusive_bound_at_the_type_s_end_is_an_endless_loop_never_counted",
        "tests/lax/test_control.py::test_counted_loop_with_the_constant_first_in_its_increment",
        "tests/lax/test_rule_space_edges.py::test_a_loop_walking_away_from_its_bound_runs_until_its_counter_wraps",
    ],
    "juliabridge/backends/lax/ops/_custom_call_util.py": [
        "tests/lax/test_linalg.py::test_gpu_solver_targets",
    ],
    "juliabridge/backends/lax/ops/_linalg_targets.py": [
        "tests/lax/test_linalg.py::test_potrf_info_of_a_semidefinite_matrix_with_an_exactly_zero_pivot",
        "tests/lax/test_linalg.py::test_gesdd_gesvd",
    ],
    "juliabridge/backends/lax/ops/chlo.py": [
        "tests/lax/test_chlo.py::test_missing_derivatives_are_typed_errors_naming_op_and_line",
    ],
    "juliabridge/backends/lax/ops/normalization.py": [
        "tests/lax/test_batchnorm.py::test_bf16_batch_norm_runs_in_f32_and_other_floats_in_their_own_type",
    ],
    "juliabridge/backends/lax/ops/dot.py": [
        "tests/lax/test_matmul_precision.py::test_default_precision_follows_jax_setting",
    ],
    "juliabridge/backends/vjp_text.py": [
        "tests/test_cli_usage.py::test_vjp_with_neither_lax_nor_the_fallback_says_what_would_work",
    ],
    "juliabridge/bundle/files/atomic.py": [
        "tests/test_atomic_save.py::test_fsync_dir_flushes_that_directory",
    ],
    "juliabridge/bundle/manifest/schema.py": [
        "tests/test_manifest.py::test_unsafe_file_names",
    ],
    "juliabridge/bundle/weights/_h5core.py": [
        "tests/test_pinned_libhdf5.py::test_a_filter_juliabridge_does_not_apply_is_refused_by_its_id[forced-this-process]",
        "tests/test_pinned_libhdf5.py::test_an_unexpected_failure_in_the_reader_is_reported_as_a_bug_and_retires_it",
        "tests/test_pinned_libhdf5.py::test_a_contiguous_dataset_libhdf5_must_refuse_is_named[virtual-forced-this-process]",
    ],
    "juliabridge/bundle/weights/h5parse.py": [
        "tests/test_loading_h5parse.py::test_links_and_storage_that_reach_other_files_are_refused",
    ],
    "juliabridge/bundle/sources.py": [
        "tests/test_format2.py::test_artifact_first_when_the_writer_is_newer",
        "tests/test_format2.py::test_writer_without_artifact",
    ],
    "juliabridge/bundle/write/upgrade.py": [
        "tests/test_upgrade.py::test_upgrade_format_2",
    ],
    "juliabridge/bundle/write/vjp_bundle.py": [
        "tests/test_cli_usage.py::test_add_vjp_keeps_a_vjp_module_the_bundle_has_unless_asked",
        "tests/test_cli_usage.py::test_add_vjp_failures_name_the_bundle_they_are_about",
    ],
    "juliabridge/bundle/write/writer.py": [
        "tests/test_atomic_save.py::test_a_bundle_in_a_folder_that_cannot_hold_one_is_a_save_error_saying_so",
    ],
    "juliabridge/cli/commands.py": [
        "tests/test_cli_help_space.py::test_choices_described_one_by_one_are_all_described_and_the_default_marked",
    ],
    "juliabridge/cli/export.py": [
        "tests/test_cli_help_space.py::test_every_argument_has_a_help_text_printed_by_its_command_s_help",
    ],
    "juliabridge/lux/batchsize.py": [
        "tests/test_pinned_batch.py::test_julia_layout_rank_and_shape_messages",
        "tests/test_pinned_batch.py::test_no_batch_section_messages_in_each_layout",
    ],
    "juliabridge/lux/parallel.py": [
        "tests/test_pinned_parallel.py::test_data_parallel_gradients_match_the_single_device_ones",
    ],
    "juliabridge/lux/params_io.py": [
        "tests/test_pinned_params.py::test_a_wrapped_model_saves_in_its_models_layout_unless_told",
        "tests/test_pinned_params.py::test_save_then_load_params_round_trips",
    ],
    "juliabridge/lux/trees.py": [
        "tests/test_pinned_calls.py::test_named_inputs_are_looked_up_by_name",
    ],
    "juliabridge/reactant_export/convert.py": [
        "tests/test_pinned_reactant_export.py::test_convert_keeps_metadata_and_refuses_to_overwrite",
    ],
    "juliabridge/reactant_export/directory.py": [
        "tests/test_pinned_reactant_export.py::test_script_found_in_the_directory",
        "tests/test_pinned_reactant_export.py::test_trust_passed_on_to_the_xla_backend",
        "tests/test_reactant_export.py::test_file_outside_directory_refused",
    ],
    "juliabridge/reactant_export/luxmap.py": [
        "tests/test_reactant_export_paths.py::test_batch_axis_on_an_export_that_echoes_its_input",
        "tests/test_reactant_export_paths.py::test_stateful_lux_layer_export",
    ],
    "juliabridge/reactant_export/npz.py": [
        "tests/test_pinned_reactant_export.py::test_npz_member_with_too_little_or_too_much_data",
        "tests/test_pinned_reactant_export.py::test_npz_members_must_be_the_expected_ones",
    ],
    "juliabridge/reactant_export/pyscript.py": [
        "tests/test_pinned_reactant_script.py::test_placements_not_the_template",
    ],
    "juliabridge/stablehlo/artifact.py": [
        "tests/test_pinned_artifact.py::test_child_that_stops_before_answering",
    ],
    "juliabridge/stablehlo/budget.py": [
        "tests/test_pinned_budget.py::test_device_memory_of_an_accelerator",
        "tests/test_reuse_budgets.py::test_attribute_data_counts_every_use_a_splat_as_one_element_and_a_blob_once",
    ],
    "juliabridge/stablehlo/nesting.py": [
        "tests/test_module_hardening.py::test_nesting_scan_agrees_with_a_byte_by_byte_lexer",
    ],
    "juliabridge/stablehlo/policy.py": [
        "tests/test_pinned_stablehlo.py::test_reactant_runtime_targets_get_the_reactant_hint",
    ],
    "juliabridge/verification.py": [
        "tests/test_cli_usage.py::test_the_verify_api_refuses_a_tolerance_that_cannot_be_met",
    ],
}

#: CI's selection per module: the QUICKEST tests, of the module's TESTS_FOR entries, that mutmut
#: recorded reaching each function holding one of the module's PER_MODULE sampled mutants
#: (`--suggest-tests` writes it from mutmut-stats.json files). mutmut's stats phase runs every
#: selected test once, under its tracing, before any mutant: with TESTS_FOR's files whole that
#: phase alone outlasted CI's budget (40 min on the 2-core machine).
SMOKE_TESTS = ROOT / "tools" / "mutation_smoke_tests.toml"
#: Tests kept per sampled function.
QUICKEST = 3


def smoke_tests(path: Path = SMOKE_TESTS) -> dict[str, list[str]]:
    """Module path -> its tests in CI's smoke, from `path` (empty where there is none)."""
    if not path.is_file():
        return {}
    return {k: list(v["tests"]) for k, v in tomllib.loads(path.read_text()).items()}


#: Mutants no test can kill because they do not change behaviour: one TOML file per module in
#: tools/mutation_equivalents/ (a table per mutant name: `line`, which `mutmut show` of it must
#: still contain, and `why`; docs/mutation-testing.md lists them). They leave the denominator
#: only while their mutated line is still the one named.
EQUIVALENTS_DIR = ROOT / "tools" / "mutation_equivalents"


def load_equivalents(folder: Path = EQUIVALENTS_DIR) -> dict[str, str]:
    """Mutant name -> the mutated line it must still show, from every file in `folder`."""
    out: dict[str, str] = {}
    for path in sorted(folder.glob("*.toml")):
        for name, entry in tomllib.loads(path.read_text()).items():
            if not name.startswith(path.stem + "."):
                raise SystemExit(f"mutation_smoke: {path.name} lists {name}, of another module")
            if not entry.get("line") or len(entry.get("why", "")) < 20:
                raise SystemExit(f"mutation_smoke: {path.name}: {name} needs `line` and `why`")
            out[name] = entry["line"]
    return out


EQUIVALENT = load_equivalents()

#: mutmut's exit codes: test failure, pytest error, timeouts, and the test process killed by
#: SIGSEGV or SIGABRT (-11, -6): the clean run passed, so the crash is the mutant's. SIGKILL
#: (-9, which mutmut also calls a segfault) ends a runaway process, as when a cycle check that
#: never fires lets callgraph.callees_first loop on a recursive module: it is a timeout, run
#: again with longer limits like the others.
KILLED = {1, 3, 24, -24, 36, 152, 255, -11, -6, -9}
TIMEOUTS = {24, -24, 36, 152, 255, -9}
#: mutmut also stops a mutant at a wall-clock limit (half its CPU limit), so on a loaded
#: machine a slow survivor can end as a timeout: each timeout is run once more with limits
#: this many times longer, and counts as killed only if it times out again.
RECHECK_FACTOR = 4
SURVIVED = {0, 5, 33, 35}  # survived, no tests, no tests, suspicious


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return out.stdout.strip() if out.returncode == 0 else ""


def changed_files(base: str, mutated: list[str]) -> list[str]:
    """Files of `mutated` that differ (committed or not) from the merge base with `base`."""
    merge_base = _git("merge-base", "HEAD", base)
    if not merge_base:
        return []
    names = set(_git("diff", "--name-only", merge_base).splitlines())
    return [f for f in mutated if f in names]


def tests_of(path: str, selection: list[str]) -> list[str]:
    """The test files of the module at `path`: those tools/test_map.json measured executing it
    in the test process (where mutmut's mutants live); for a module no measured test file
    executes yet (the map is refreshed in parts), TESTS_FOR's (its longest matching prefix),
    else `selection`."""
    measured = _map_tests(path)
    if measured:
        return measured
    prefixes = sorted((p for p in TESTS_FOR if path.startswith(p)), key=len, reverse=True)
    return list(TESTS_FOR[prefixes[0]]) if prefixes else list(selection)


def _map_tests(path: str) -> list[str]:
    """tools/test_map.json's test files for the module at `path` (empty when none measured)."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import test_map
    finally:
        sys.path.pop(0)
    return test_map.tests_for_module(path)


def tests_for(
    modules: list[str], selection: list[str], chosen: dict[str, list[str]] | None = None
) -> list[str]:
    """The union, in a stable order, of the tests of `modules`: `chosen`'s where it names the
    module, else TESTS_FOR's files."""
    tests: list[str] = []
    for f in modules:
        own = (chosen or {}).get(f) or tests_of(f, selection)
        tests += [t for t in own if t not in tests]
    return _without_repeats(tests)


def _without_repeats(tests: list[str]) -> list[str]:
    """`tests` without the node ids whose whole file is listed too (pytest would run them
    twice)."""
    return [t for t in tests if "::" not in t or t.split("::")[0] not in tests]


def scratch_copy(dest: Path) -> None:
    """The working tree's tracked and untracked (not ignored) files, as they are now."""
    listing = _git("ls-files", "--cached", "--others", "--exclude-standard", "-z")
    for rel in filter(None, listing.split("\0")):
        src = ROOT / rel
        if not src.is_file():
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)


def smoke_config(pyproject: Path, files: list[str], tests: list[str]) -> None:
    """Rewrite [tool.mutmut]'s scope in the scratch copy's pyproject.toml."""
    text = pyproject.read_text()
    for key, values in (("only_mutate", files), ("pytest_add_cli_args_test_selection", tests)):
        block = re.compile(rf"^{key} = \[.*?^\]", re.S | re.M)
        new = f"{key} = {json.dumps(values)}"
        text, n = block.subn(new, text)
        if n != 1:
            raise SystemExit(f"mutation_smoke: no multi-line {key} list in [tool.mutmut]")
    pyproject.write_text(text)


def longer_timeouts(pyproject: Path, factor: int) -> None:
    """Multiply [tool.mutmut]'s timeout_multiplier in the scratch copy's pyproject.toml (mutmut
    then resets only the timeouts' verdicts, keeping every other)."""
    text = pyproject.read_text()
    current = tomllib.loads(text)["tool"]["mutmut"].get("timeout_multiplier", 1.0)
    line = re.compile(r"^timeout_multiplier = .*$", re.M)
    new = f"timeout_multiplier = {float(current) * factor}"
    text, n = line.subn(new, text)
    if n != 1:
        text = text.replace("[tool.mutmut]\n", f"[tool.mutmut]\n{new}\n", 1)
    pyproject.write_text(text)


def module_name(path: str) -> str:
    """``juliabridge/lux/trees.py`` -> ``juliabridge.lux.trees`` (mutmut's prefix); a
    package's ``__init__.py`` is the package: ``juliabridge.bundle.weights``."""
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def link_shared(base: Path, work: Path) -> None:
    """Make ``../shared`` (the real Reactant fixtures beside the clone, where there is one)
    reachable from the scratch copy's tests, as they look for it: two folders above the test
    file, both where mutmut runs them (`work`/mutants/tests) and in `work`/tests."""
    shared = ROOT.parent / "shared"
    if shared.is_dir():
        for where in (base, work):
            (where / "shared").symlink_to(shared.resolve(), target_is_directory=True)


_LIST_MUTANTS = """
import io, json, multiprocessing, os, sys
from pathlib import Path
from mutmut.__main__ import write_all_mutants_to_file
def names(f):
    m = write_all_mutants_to_file(out=io.StringIO(), source=Path(f).read_text(), filename=Path(f))
    return list(m.mutant_names)
files = sys.argv[1:]
with multiprocessing.get_context("fork").Pool(min(len(files), os.cpu_count() or 1) or 1) as pool:
    listed = pool.map(names, files, chunksize=1)
print(json.dumps(dict(zip(files, listed))))
"""


def mutant_names(work: Path, files: list[str]) -> dict[str, list[str]]:
    """Each file's mutant names as mutmut generates them (source order), without running any.

    Uses mutmut 3's own generator (pyproject pins mutmut < 4), in the scratch copy so that its
    configuration is the one the run uses.
    """
    proc = subprocess.run(
        [sys.executable, "-c", _LIST_MUTANTS, *files],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"mutation_smoke: cannot list mutmut's mutants:\n{proc.stderr[-3000:]}")
    listed: dict[str, list[str]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return {f: [f"{module_name(f)}.{n}" for n in names] for f, names in listed.items()}


#: mutmut's own first steps of `mutmut run` (copy the tree to mutants/, write every mutant and
#: each file's .meta listing its mutants in source order), so that the run that follows finds
#: them written and does not generate them again.
_GENERATE = """
import os, sys
import mutmut.__main__ as m
os.makedirs("mutants", exist_ok=True)
m.copy_src_dir()
m.copy_also_copy_files()
m.setup_source_paths()
m.store_lines_covered_by_tests()
m.create_mutants(int(sys.argv[1]))
"""


def generate(work: Path, files: list[str], children: int) -> dict[str, list[str]]:
    """Generate the mutants of the scratch copy `work` as `mutmut run` would, and give each of
    `files`' mutant names in source order (from mutmut's .meta files)."""
    proc = subprocess.run(
        [sys.executable, "-c", _GENERATE, str(children)],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"mutation_smoke: mutmut cannot generate mutants:\n{proc.stderr[-3000:]}")
    return {
        f: list(json.loads((work / "mutants" / f"{f}.meta").read_text())["exit_code_by_key"])
        for f in files
    }


def window(core: list[str], k: int, offset: int) -> list[str]:
    """`k` modules of `core` (all when `k` is 0 or more than there are), from place `offset`
    on, wrapping around."""
    if not 0 < k < len(core):
        return list(core)
    return [core[(offset + i) % len(core)] for i in range(k)]


def tree_offset() -> int:
    """A place in the core's list from the hash of the tree under test (0 outside git): the
    same code, the same window."""
    tree = _git("rev-parse", "HEAD^{tree}")
    return int(tree[:8], 16) if tree else 0


def ordered(sample: dict[str, list[str]]) -> list[str]:
    """The order the sampled mutants run in, the same from run to run: round-robin over the
    modules (in `sample`'s order, each module's own list in its order), so that every module's
    first sampled mutant runs before any module's second, and a budget that runs out leaves
    out the same tail."""
    lists = list(sample.values())
    return [lst[i] for i in range(max(map(len, lists), default=0)) for lst in lists if i < len(lst)]


def stride_sample(names: list[str], stride: int) -> list[str]:
    """Every function's mutants 1, 1 + stride, ... of one module's `names`."""
    return [n for n in names if (int(n.rsplit("_", 1)[1]) - 1) % stride == 0]


def spread(names: list[str], stride: int, k: int) -> list[str]:
    """`k` names evenly spaced over the stride sample of one module's `names`."""
    sample = stride_sample(names, stride)
    if len(sample) <= k:
        return sample
    return [sample[(2 * i + 1) * len(sample) // (2 * k)] for i in range(k)]


#: `mutmut run` with the mutants started in the order of the JSON list in the file `argv[1]`:
#: mutmut starts them in the order of its estimate of each one's test time, which this sets to
#: the mutant's place in the list (mutmut 3, pinned < 4 in pyproject; mutmut drops a package's
#: "__init__." from its names before running them, so the names are compared without it).
_RUN_IN_ORDER = """
import json, sys
import mutmut.__main__ as m
rank = {n.replace("__init__.", ""): i for i, n in enumerate(json.load(open(sys.argv[1])))}
m.estimated_worst_case_time = lambda name: rank.get(name.replace("__init__.", ""), len(rank))
sys.argv = ["mutmut", "run", *sys.argv[2:]]
m.cli()
"""
#: mutmut's line when it starts the mutants (after generating them and its stats and clean runs).
_MUTANTS_START = "Running mutation testing"

#: mutmut's progress spinner, which fills its captured output.
_SPINNER = re.compile(r"^\s*[\u2800-\u28ff] ")


#: mutmut's exit status here when the smoke's time budget ran out.
OUT_OF_TIME = -9


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (from /proc; mutmut's fork server and its workers)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def mutmut(
    work: Path,
    children: int,
    *names: str,
    seconds: float | None = None,
    min_mutant_seconds: float = 0.0,
) -> int:
    """`mutmut run` of `names` in `work`, started in that order, stopped (with every process it
    started) after `seconds` (then OUT_OF_TIME) but never before its mutants have had
    `min_mutant_seconds`; its output without the spinner goes to `work`/mutmut-run.log, and the
    end of it to stderr when mutmut fails."""
    env = dict(os.environ)
    env.setdefault("JULIABRIDGE_HDF5_WORKER", "0")  # bundle/ is not mutated; skip the subprocess
    # one JAX compilation cache for every mutant's tests (tests/conftest.py): a mutant that
    # changes what is compiled misses it, the rest skip XLA's compile of unchanged programs.
    # mutmut's stats and clean runs fill it before the mutants, which then mostly read it; two
    # mutants at once write the same new entry only if both compile the same new program.
    cache = work / "jax-compilation-cache"
    cache.mkdir(exist_ok=True)
    env.setdefault("JULIABRIDGE_TEST_JAX_CACHE", str(cache))
    # several devices, whatever else XLA_FLAGS says: test_pinned_parallel's multi-device
    # tests skip on one
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    ).strip()
    order = work / "smoke-order.json"
    order.write_text(json.dumps(list(names)))
    cmd = [sys.executable, "-c", _RUN_IN_ORDER, str(order), "--max-children", str(children)]
    began = time.monotonic()
    proc = subprocess.Popen(
        [*cmd, *names],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,  # universal newlines: the spinner's carriage returns end lines too
    )
    lines: list[str] = []
    mutants_began: list[float] = []

    def read() -> None:
        for line in proc.stdout or ():
            if _MUTANTS_START in line and not mutants_began:
                mutants_began.append(time.monotonic())
            if line.strip() and not _SPINNER.match(line):
                lines.append(line.rstrip("\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    code: int | None = None
    while code is None:
        try:
            code = proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            now = time.monotonic()
            over = seconds is not None and now - began > seconds
            if over and mutants_began and now - mutants_began[0] >= min_mutant_seconds:
                for pid in [*_descendants(proc.pid), proc.pid]:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                proc.wait()
                code = OUT_OF_TIME
    reader.join(timeout=10)
    with open(work / "mutmut-run.log", "a") as log:
        log.write("\n".join(lines) + "\n")
    if code not in (0, OUT_OF_TIME):
        sys.stderr.write("\n".join(lines[-150:]) + "\n")
    return code


def results(work: Path) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for meta in (work / "mutants").rglob("*.py.meta"):
        out.update(json.loads(meta.read_text())["exit_code_by_key"])
    return out


def timeouts_to_recheck(sampled: dict[str, int | None], *, out_of_time: bool) -> list[str]:
    """The sampled mutants that timed out, to run again with longer limits.

    A timeout alone is no proof of a kill on a loaded machine; when the budget has run out
    there is no time to run them again, so they become not run (None, in place, listed and
    not scored like the rest the budget left out) and none is returned.
    """
    timed_out = sorted(n for n, c in sampled.items() if c in TIMEOUTS)
    if out_of_time:
        sampled.update(dict.fromkeys(timed_out))
        if timed_out:
            print(f"mutation smoke: {len(timed_out)} timeouts left unconfirmed (no budget left)")
        return []
    return timed_out


def show(work: Path, name: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "mutmut", "show", name],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout


def _within(test: str, entries: list[str]) -> bool:
    """Whether the node id `test` is one of TESTS_FOR's `entries` (a file or a node id)."""
    return any(test == e or test.startswith(e + "::") or test.startswith(e + "[") for e in entries)


def suggest_tests(stats_files: list[Path], core: list[str]) -> str:
    """CI's per-module selection (the SMOKE_TESTS file's text) from mutmut-stats.json files:
    for each of a module's PER_MODULE sampled mutants, the QUICKEST recorded tests of the
    module's TESTS_FOR entries reaching its function (those entries whole where none is
    recorded), and the module's KILLERS."""
    durations: dict[str, float] = {}
    reaching: dict[str, set[str]] = {}
    for f in stats_files:
        stats = json.loads(f.read_text())
        # a parametrized test is kept whole (its function's node id): ids of cases are long,
        # change with their parameters and may hold characters a command line mangles
        seen: dict[str, float] = {}
        for test, s in stats["duration_by_test"].items():
            node = test.split("[")[0]
            seen[node] = seen.get(node, 0.0) + s
        for node, s in seen.items():
            durations[node] = min(s, durations.get(node, s))
        for fn, tests in stats["tests_by_mangled_function_name"].items():
            reaching.setdefault(fn, set()).update(t.split("[")[0] for t in tests)
    lines = [
        "# CI's mutation-smoke tests per core module, written by",
        "# `python tools/mutation_smoke.py --suggest-tests STATS...` from the mutmut-stats.json of",
        "# runs with TESTS_FOR's files: for each sampled mutant the "
        f"{QUICKEST} quickest tests of its module's",
        "# TESTS_FOR entries reaching its function (those entries whole where none was recorded).",
        "# Regenerate after the sample moves (code changes renumber mutants).",
        "",
    ]
    for path, names in mutant_names(ROOT, core).items():
        entries = tests_of(path, [])
        tests: list[str] = []
        for name in spread(names, MEASURED_STRIDE, PER_MODULE):
            fn = name.partition("__mutmut_")[0]
            near = sorted(
                (t for t in reaching.get(fn, ()) if _within(t, entries)),
                key=lambda t: (durations.get(t, 0.0), t),
            )
            tests += [t for t in (near[:QUICKEST] or entries) if t not in tests]
        tests += [t for t in KILLERS.get(path, []) if t not in tests]
        lines += [f'["{path}"]', f"tests = {json.dumps(_without_repeats(tests), indent=4)}", ""]
    return "\n".join(lines)


def verdict(
    score: float,
    threshold: float,
    *,
    run: int,
    sampled: int,
    not_run: list[str],
    out_of_time: bool,
    budget: float,
) -> int:
    """The smoke's exit status: 0 when at least `threshold` of the sampled mutants that ran
    were killed. What the budget left out is named, not scored (CI's run must end in time), but
    fewer than MIN_RUN run (of a sample that large) fails, and so does a mutant not run while
    there was time."""
    if not_run and not out_of_time:
        print(f"mutation smoke: {len(not_run)} sampled mutants were not run")
        return 1
    if run < min(MIN_RUN, sampled):
        print(
            f"mutation smoke: the {budget:.0f} s budget ran out with only {run} sampled mutants "
            f"run (at least {min(MIN_RUN, sampled)} must); give it more with --budget"
        )
        return 1
    if not_run:
        print(
            f"mutation smoke: the {budget:.0f} s budget ran out; {len(not_run)} sampled mutants "
            "not run, in the order they would have run: " + ", ".join(not_run)
        )
    return 0 if score >= threshold else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threshold", type=float, default=0.9)
    parser.add_argument("--stride", type=int, default=8, help="for changed modules and --files")
    parser.add_argument("--per-module", type=int, default=PER_MODULE)
    parser.add_argument(
        "--modules",
        type=int,
        default=MODULES_PER_RUN,
        help="core modules to sample (0: every one)",
    )
    parser.add_argument(
        "--offset",
        type=int,
        help="first module of the window, a place in only_mutate (default: from the tree's hash)",
    )
    parser.add_argument("--base", default="main")
    parser.add_argument("--keep", action="store_true", help="keep the scratch copy")
    parser.add_argument("--files", nargs="*", help="mutate only these files, at --stride")
    parser.add_argument("--tests", nargs="*", help="run these tests instead of TESTS_FOR's")
    parser.add_argument("--children", type=int, default=os.cpu_count() or 2)
    parser.add_argument(
        "--budget",
        type=float,
        default=BUDGET,
        help="seconds for the whole smoke; mutants not run by then are listed, not scored",
    )
    parser.add_argument(
        "--min-mutant-seconds",
        type=float,
        default=MIN_MUTANT_SECONDS,
        help="seconds the mutants get once started, even past --budget",
    )
    parser.add_argument(
        "--suggest-tests",
        nargs="+",
        type=Path,
        metavar="STATS",
        help="print the per-module selection from these mutmut-stats.json files and stop",
    )
    args = parser.parse_args()
    start = time.monotonic()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    core = list(config["only_mutate"])
    selection = list(config["pytest_add_cli_args_test_selection"])
    if args.suggest_tests:
        print(suggest_tests(args.suggest_tests, core))
        return 0
    changed = [] if args.files else changed_files(args.base, core)
    whole = sorted(set(args.files or []) | set(changed))  # sampled at --stride
    offset = tree_offset() if args.offset is None else args.offset
    sampled_core = window(core, args.modules, offset % len(core))
    files = sorted(set(args.files or sampled_core) | set(changed))
    chosen = {} if args.files else {f: v for f, v in smoke_tests().items() if f not in whole}
    tests = args.tests or tests_for(files, selection, chosen)
    base = Path(tempfile.mkdtemp(prefix="jb-mutation-smoke-"))
    work = base / "repo"
    try:
        scratch_copy(work)
        link_shared(base, work)
        smoke_config(work / "pyproject.toml", files, tests)
        sample = {
            f: stride_sample(names, args.stride)
            if f in whole
            else spread(names, MEASURED_STRIDE, args.per_module)
            for f, names in generate(work, files, args.children).items()
        }
        wanted = ordered(sample)

        def left() -> float:
            return max(1.0, args.budget - (time.monotonic() - start))

        least = args.min_mutant_seconds
        code = mutmut(work, args.children, *wanted, seconds=left(), min_mutant_seconds=least)
        if code not in (0, OUT_OF_TIME):
            # mutmut stops when its clean run of the selection fails; its recorded stats are
            # kept, so a second try costs one clean run (and shows a flaky test as such)
            print("mutation smoke: mutmut failed (output above); trying once more")
            code = mutmut(work, args.children, *wanted, seconds=left(), min_mutant_seconds=least)
            if code not in (0, OUT_OF_TIME):
                print("mutation smoke: mutmut could not run (the clean tests must pass)")
                return 1
        done = results(work)
        unknown = [n for n in wanted if n not in done]
        if unknown:
            print(f"mutation smoke: mutmut has no mutants named {', '.join(unknown[:10])}")
        sampled = {n: done[n] for n in wanted if n in done}
        timed_out = timeouts_to_recheck(sampled, out_of_time=code == OUT_OF_TIME)
        if timed_out:
            longer_timeouts(work / "pyproject.toml", RECHECK_FACTOR)
            code = mutmut(work, args.children, *timed_out, seconds=left())
            if code not in (0, OUT_OF_TIME):
                print("mutation smoke: mutmut could not re-run the timeouts")
                return 1
            again = results(work)
            sampled |= {n: again.get(n) for n in timed_out}
            if code == OUT_OF_TIME:
                # mutmut rewrites a verdict only when the mutant's run ends: a timeout still on
                # record may never have been run again, so it is not run, not killed
                timeouts_to_recheck(sampled, out_of_time=True)
            print(
                f"mutation smoke: {len(timed_out)} timeouts run again with {RECHECK_FACTOR}x the "
                f"limits, {sum(again.get(n) in TIMEOUTS for n in timed_out)} timed out again"
            )
        equivalent = set()
        for name, line in EQUIVALENT.items():
            if name in sampled and line in show(work, name):
                equivalent.add(name)
        counted = {n: c for n, c in sampled.items() if n not in equivalent}
        killed = [n for n, c in counted.items() if c in KILLED]
        unchecked = [n for n, c in counted.items() if c is None]
        survivors = sorted(n for n in counted if n not in killed and n not in unchecked)
        total = len(killed) + len(survivors)
        score = len(killed) / total if total else 1.0
        by_file: dict[str, list[int]] = {}
        for n, c in counted.items():
            if c is None:
                continue
            mod = re.sub(r"\.x(_|ǁ).*", "", n)
            by_file.setdefault(mod, [0, 0])
            by_file[mod][0] += c in KILLED
            by_file[mod][1] += 1
        for mod, (k, t) in sorted(by_file.items()):
            print(f"  {mod:50s} {k:4d}/{t:<4d} killed")
        for n in survivors:
            print(show(work, n).rstrip() or n)
        if args.keep:
            (work / "smoke-results.json").write_text(json.dumps(counted, indent=1))
        scope = (
            f"{len(sampled_core)} of {len(core)} core modules from place {offset % len(core)} "
            f"({sampled_core[0]}), {args.per_module} each"
            + (f"; whole stride-{args.stride} sample of: {', '.join(whole)}" if whole else "")
            if not args.files
            else f"stride {args.stride} of {', '.join(whole)}"
        )
        print(
            f"mutation smoke: {len(killed)}/{total} of the sampled mutants run were killed "
            f"({score:.1%}; threshold {args.threshold:.0%}; {len(unchecked)} of "
            f"{len(counted)} not run; {len(equivalent)} equivalent left out; {scope}) "
            f"in {time.monotonic() - start:.0f} s"
        )
        return verdict(
            score,
            args.threshold,
            run=total,
            sampled=len(counted),
            not_run=sorted(unchecked, key=wanted.index),
            out_of_time=code == OUT_OF_TIME,
            budget=args.budget,
        )
    finally:
        if args.keep:
            print(f"scratch copy kept at {work}")
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
