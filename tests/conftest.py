"""Shared test setup: a private cache directory, and `gpu` tests skipped without a CUDA device."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

# Where the environment sets PYTHONDONTWRITEBYTECODE, every kerntune process the tests start (the
# evaluation workers, the gate's checks, spares, the command line) would compile every module it
# imports again, most of a second each: the suite lets Python keep its bytecode.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"


def _cuda_device() -> bool:
    try:
        from kerntune.engine.backends import cuda

        return cuda.device_count() > 0
    except Exception:
        return False


# Cases of a parametrized test that repeat what another case of it already covers, each costing
# 10-40 s on a 2-core machine: marked `slow`, which README's test command leaves out (so the suite
# fits in 5 minutes on 2 cores) and `python -m pytest -q -m slow` runs.
SLOW_CASES = {
    "test_builtin_cuda_templates_compile": ("softmax", "matmul", "merge_attn_states", "fused_add_rmsnorm_bf16",
                                            "silu_and_mul_bf16"),
    "test_library_configs_verify_on_the_cpu": ("matmul",),
    # softmax stays: a row kernel of the library, tuned (an element-wise one is tuned by the CLI's
    # silu_and_mul test and the naive residual_add's)
    "test_library_kernels_tune_on_the_cpu_and_their_sessions_load": ("matmul", "fused_add_rmsnorm",
                                                                     "merge_attn_states", "silu_and_mul",
                                                                     "vector_add"),
    # the softmax session's case stays: the model's search over a recorded space
    "test_the_model_comes_within_3_percent_of_a_recorded_best_in_few_evaluations": ("matmul-2048",),
    "test_the_rules_make_the_same_template_as_before": ("naive_matmul_batched",),
    "test_every_pass_alone_at_its_defaults_is_the_original_token_for_token": ("rowwise_chains-opencl",
                                                                              "rowwise_chains-cuda"),
    # residual_add stays: the pass's every step; FAST_MATH has tests of its own
    "test_a_naive_elementwise_kernel_is_rewritten_gated_tuned_and_reverified_on_pocl": (
        "gelu", "silu_mul", "silu_mul_f32", "adamw"),
    # every row kernel tunes here in 15-30 s (half rows cost PoCL 30 s of emulation); the row-wise
    # pass's templates are reproduced on PoCL by the gather and row-wise tests of the default suite
    "test_a_naive_row_kernel_is_spread_over_lanes_gated_tuned_and_reverified_on_pocl": (
        "rmsnorm", "softmax_2pass", "softmax_3pass", "rmsnorm_half", "cross_entropy", "softmax_online", "layernorm"),
    # the tile through loops over the neighbourhood: conv_cols and stencil1d hold its every form (the
    # 2-D stencils with halos on both axes: tests/test_rewrite_stencil.py reproduces them on PoCL);
    # one matrix product (naive) and one tree reduction (atomic) stay for the others; the transposes
    # are tests/test_rewrite_transpose.py's, reproduced on PoCL there
    "test_a_naive_cooperating_kernel_is_rewritten_gated_and_reproduced_on_pocl": (
        "stencil9", "conv_rows", "stencil5", "matmul_coalesced", "matmul_batched", "matmul_half", "reduce_nodivergence",
        "reduce_firstadd", "transpose"),
    # one matrix product, one tree and one stencil as published stay, and the textbook's tiled
    # convolution (a mask in constant memory, a tile the lifts take, its grid through a #define)
    "test_a_published_kernel_is_rewritten_gated_and_reproduced_on_pocl": (
        "sgemm/sgemm_naive", "sgemm/mygemm1", "reduction/reduce0", "reduction/reduce1", "reduction/reduce3",
        "stencils/jacobi_step", "stencils/stencil7_zloop", "stencils/stencil7", "llm/encoder1",
        "reduction/reduce5", "reduction/reduce6", "llm/gelu", "textbook/matmul", "textbook/matmul_tiled_bounds",
        "textbook/stencil1d", "textbook/stencil1d_global", "textbook/histo_private", "transpose/transpose_bounds",
        "textbook/histo", "textbook/histo_contiguous", "textbook/histo_interleaved", "oclsdk/reducefloat4",
        "oclsdk/dotproduct", "textbook/matmul_tiled", "transpose/transpose_nobank",
        "oclsdk/matrixmul", "textbook/reduce_segmented", "textbook/reduce_coarsened", "textbook/conv2d",
        # the trainer's matmul (a sum from a bias) holds the contraction; the heat step's stencil is
        # the naive stencils' and the textbook's convolution's
        "sgemm/sgemm_coalesce", "stencils/heat_step", "textbook/conv2d_tiled",
        # the products tiled by hand: their reading is tests/test_rewrite_cooperate.py's, the tiles the
        # naive products'
        "sgemm/sgemm_shared", "sgemm/mygemm2",
        # the transpose pass: the naive transpose (tests/data/naive) holds it
        "transpose/transpose_naive"),
    # nvcc builds the samples' reductions with their host code, 14 s each (the reduction's CUDA
    # kernels build in test_the_cuda_rewrites_compile_at_several_values): the template matrix product stays
    "test_a_published_cuda_kernel_is_rewritten_and_compiles_with_nvcc": (
        "sgemm/sgemm_naive", "reduction/reduce0", "reduction/reduce4", "reduction/reduce1", "reduction/reduce2", "reduction/reduce5",
        "reduction/reduce6", "stencils/heat_step", "stencils/stencil7_zloop", "stencils/stencil7", "llm/encoder1",
        "llm/encoder2", "llm/softmax4", "textbook/matmul", "textbook/conv2d_tiled", "transpose/transpose_nobank",
        "llm/matmul1", "samples/vectoradd", "textbook/reduce_segmented", "textbook/reduce_coarsened",
        "sgemm/sgemm_coalesce", "textbook/histo", "textbook/histo_private", "sgemm/sgemm_shared",
        "textbook/matmul_tiled_bounds", "samples/matrixmul",
        "transpose/transpose_naive", "textbook/histo_contiguous", "textbook/histo_interleaved",
        "byexample/histo_global", "byexample/histo_shared"),
    "test_a_constant_that_lays_out_the_grid_or_an_output_stays_and_the_original_path_verifies": (
        "reduce_nodivergence",),
    "test_a_grid_stride_original_is_rewritten_and_reproduces_itself": ("16",),
    # the half product's tensor-core tiles build and verify in the GPU tests, its warpgroup tiles build
    # here in tests/test_contraction_wgmma.py
    "test_the_cuda_rewrites_compile_at_several_values": ("conv_rows", "matmul_half"),
    # the largest recorded sessions: the reader's every form is in the others
    "test_the_fast_reader_reads_every_recorded_session_as_tomllib_does": (
        "matmul-2048", "silu_and_mul-llama7b-t2048", "softmax-llama-t2048", "silu_and_mul_bf16-llama7b-t2048"),
    # the passes that take longest to make; the element-wise, stencil and lifts' cases stay
    "test_a_comment_of_several_bytes_a_character_before_and_in_the_kernel_changes_nothing_else": (
        "naive/softmax_online", "naive/reduce_sequential", "naive/matmul_naive"),
}

# Whole tests that run several complete tunes each (in processes of their own, killed and resumed,
# on a cluster, through the agent loop), 10-40 s of CPU each on 2 cores, whose parts the default
# suite covers in smaller tests: `slow` too.
SLOW_TESTS = {
    # the byte histogram's PoCL run holds the histogram's kernel; the image's adds its flat index, the
    # bins a scalar argument counts their shared copy's size (test_rewrite_histogram.py reads both)
    "test_rewrite_histogram.py": ("test_the_image_histogram_reproduces_the_original_on_pocl",
                                  "test_bins_a_scalar_argument_counts_are_privatised_up_to_the_specs_largest_count"),
    # the column's loop marched through the tile: the 3-D march's machinery is the default suite's
    "test_rewrite_stencil.py": ("test_a_column_looping_over_z_marches_its_loops_planes_through_the_tile",),
    "test_session_writers.py": ("test_a_second_run_on_a_session_being_written_is_refused_and_a_killed_run_leaves_no_lock",
                                "test_tune_resume_on_a_session_cut_mid_event_repairs_it_and_says_so"),
    # a worker taken down by a kernel and replaced: the hostile kernels' tests (test_cheats.py,
    # test_selftest.py) take workers down; the spares' hand-over is the other standby tests'
    "test_standby.py": ("test_a_run_takes_the_spare_and_says_it_was_started_ahead",
                        "test_after_a_kernel_takes_a_worker_down_the_next_replacement_stands_ready"),
    "test_verify.py": ("test_verify_passes_a_correct_winner_and_fails_a_wrong_one_and_a_slower_one",),
    "test_loop.py": ("test_the_loop_measures_each_configuration_of_a_template_once",
                     "test_the_loop_stops_when_the_best_is_within_the_sol_target_and_the_planner_sees_sol"),
    "test_probe.py": ("test_readme_main_job_ranks_honest_configurations_none_suspect",
                      "test_probe_on_pocl_is_plausible_repeated_cached_and_refreshed"),
    "test_cluster.py": ("test_a_worker_killed_mid_run_loses_nothing_and_measures_nothing_twice",
                        "test_a_campaign_over_two_templates_and_two_sizes_each_runs_on_the_cluster"),
    "test_agent_rules.py": ("test_rules_loop_templates_the_original_and_ends_with_a_verified_best_at_least_as_fast",),
    "test_rewrite_fastmath.py": ("test_the_opencl_template_tunes_with_both_values_on_pocl_and_verifies",),
    "test_campaign.py": ("test_ctrl_c_ends_the_campaign_and_the_rerun_resumes_the_cut_pair",
                         "test_a_campaign_tunes_every_pair_resumes_a_cut_one_and_skips_finished_ones"),
    "test_includes.py": ("test_every_template_of_the_loop_builds_with_the_headers_beside_and_below_the_spec",),
    "test_lift_tiles.py": ("test_every_configuration_of_the_lifted_opencl_twin_transposes",
                           "test_a_square_tile_is_both_dimensions_of_the_block_and_every_tile_multiplies"),
    "test_cli.py": ("test_hostile_template_statuses_while_the_run_goes_on",
                    "test_a_grid_over_vector_add_finds_verified_configs",
                    "test_start_from_tries_another_sizes_fastest_first",
                    "test_a_killed_run_leaves_a_session_that_loads_and_resume_finishes_it"),
    "test_inputs_cache.py": ("test_the_agent_loop_never_computes_one_input_sets_reference_twice",),
    "test_serves.py": ("test_the_agent_loop_tunes_its_template_at_every_served_size",
                       "test_tune_of_a_served_spec_tunes_every_size_and_show_reports_each"),
    "test_export_exact.py": ("test_every_row_of_a_loop_session_exports_the_program_it_measured",),
    "test_agent_claude_rewrites.py": (
        "test_claude_makes_the_softmax_online_has_the_rules_spread_it_and_the_loop_tunes_it",),
    "test_retime.py": ("test_identical_programs_tuned_while_another_process_loads_a_core_are_all_tied",
                       "test_two_runs_of_one_command_examine_the_same_configurations_on_new_inputs"),
    "test_search.py": ("test_a_run_resumed_with_another_strategy_keeps_and_learns_from_its_results",),
    "test_dynamic_shared.py": ("test_the_rules_loop_runs_a_dynamic_local_memory_kernel_through_the_gate_on_opencl",),
    "test_agent_claude.py": ("test_five_hundreds_until_the_sdk_gives_up_hand_the_loop_to_the_rules_and_lose_nothing",
                             "test_malformed_replies_hand_the_loop_to_the_rules_which_finish_it",
                             "test_when_every_template_fails_the_gate_the_original_is_the_verified_best"),
}


def pytest_collection_modifyitems(config, items):
    slow = pytest.mark.slow
    for item in items:
        case = getattr(item, "callspec", None)
        named = set(map(str, case.params.values())) | set(case.id.split("-")) | {case.id} if case is not None else set()
        if named & set(SLOW_CASES.get(item.originalname, ())) or \
                item.originalname in SLOW_TESTS.get(item.path.name, ()):
            item.add_marker(slow)
    if _cuda_device():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    cache = tmp_path_factory.getbasetemp() / "kerntune-cache"
    monkeypatch.setenv("KERNTUNE_CACHE_DIR", str(cache))


@pytest.fixture(scope="session")
def opencl_backend():
    pytest.importorskip("pyopencl")
    from kerntune.engine.backends import BackendError, open_backend

    try:
        b = open_backend("opencl")
    except BackendError as e:
        pytest.skip(f"no OpenCL device: {e}")
    yield b
    b.close()


@pytest.fixture
def hostile_dir(tmp_path):
    d = tmp_path / "hostile"
    shutil.copytree(DATA / "hostile", d)
    return d


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


@pytest.fixture(autouse=True)
def _no_reference_left_running():
    """A reference call still running after its test (one that never returns, given up on after
    its time limit) would spin in this test process for the rest of the suite, taking its time
    from every later test: the test that left it fails."""
    import threading

    yield
    left = [t for t in threading.enumerate() if t.name.startswith("kerntune-reference")]
    for t in left:
        t.join(10)
    assert not [t for t in left if t.is_alive()], "a reference call was left running after the test"
