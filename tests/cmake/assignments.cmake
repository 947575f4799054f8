# Course assignments (docs/assignments/README.md). One line per task: its points, its
# handout page in docs/assignments/ (DOC, without .md) and the tests that grade it. Each listed test gets
# the ctest label task.NAME; UNIT adds a test running those Catch2 cases of unit_tests
# (names, a trailing * allowed, no commas) under the same label. scripts/assignment reads this table; the code
# of each task is marked in the sources with BEGIN / END ASSIGNMENT NAME.
#
#   ctest -L task.tp.f_and_g          the tests of one task
#   scripts/assignment list                 every task, its points and handout
function(picotron_task name)
  cmake_parse_arguments(T "" "POINTS;DOC" "TESTS;UNIT" ${ARGN})
  foreach(t ${T_TESTS})
    if(TEST ${t})  # (the tests against Python libraries exist where scripts/setup.sh installed them)
      set_property(TEST ${t} APPEND PROPERTY LABELS task.${name})
    endif()
  endforeach()
  if(T_UNIT)
    string(JOIN "," spec ${T_UNIT})  # Catch2: a comma between test specs means "or"
    add_test(NAME task.${name}.unit COMMAND unit_tests "${spec}")
    set_tests_properties(task.${name}.unit PROPERTIES LABELS "task.${name};unit" TIMEOUT 120
      ENVIRONMENT "OMP_NUM_THREADS=1" FAIL_REGULAR_EXPRESSION "No tests ran")
  endif()
endfunction()

picotron_task(dp.naive_all_reduce POINTS 5 DOC data_parallel TESTS data_parallel.overlap_naive equivalence.dp2_naive_acc1 equivalence.dp4_naive_acc4 ledger.dp_naive)
picotron_task(dp.bucketed_all_reduce POINTS 15 DOC data_parallel TESTS equivalence.dp2_bucketed_acc1 equivalence.dp4_bucketed_acc4 equivalence.dp2_bucketed_uneven data_parallel.overlap_bucketed ledger.dp_bucketed)
picotron_task(tp.f_and_g POINTS 10 DOC tensor_parallel TESTS equivalence.tp2 equivalence.tp4 equivalence.tp2_dp2_acc2 ledger.tp)
picotron_task(tp.vocab_parallel_cross_entropy POINTS 15 DOC tensor_parallel TESTS tensor_parallel.np4 equivalence.tp2 equivalence.tp2_untied equivalence.tp4)
picotron_task(tp.sequence_parallel POINTS 10 DOC tensor_parallel TESTS equivalence.tp2_sp equivalence.tp4_sp equivalence.tp2_sp_untied ledger.tp_sp)
picotron_task(pp.one_f_one_b POINTS 10 DOC pipeline_parallel TESTS equivalence.pp2_1f1b_acc4 equivalence.pp4_1f1b_acc8 UNIT "1f1b: warm-up*" "every schedule: inputs exist*" "zb-h1: rank r lets*")
picotron_task(pp.send_recv POINTS 10 DOC pipeline_parallel TESTS equivalence.pp2_afab_acc4 equivalence.pp4_1f1b_acc4 ledger.pp_1f1b)
picotron_task(pp.dualpipev POINTS 10 DOC pipeline_parallel TESTS equivalence.pp2_dualpipev_acc4 equivalence.pp4_dualpipev_acc8 UNIT "dualpipev: the eight steps*" "dualpipev: every F before*" "dualpipev: dependencies across*")
picotron_task(pp.p2p_program POINTS 10 DOC pipeline_parallel TESTS equivalence.pp2_1f1b_acc4 equivalence.pp2_interleaved_acc4 UNIT "1f1b's program pairs*" "every schedule's program runs*")
picotron_task(cp.lse_merge POINTS 10 DOC context_parallel TESTS context_parallel.ring_2 equivalence.cp2_zigzag equivalence.cp4_contiguous)
picotron_task(cp.ring_step POINTS 10 DOC context_parallel TESTS context_parallel.ring_4 equivalence.cp2_zigzag equivalence.cp4_zigzag ledger.cp_ring)
picotron_task(cp.ulysses POINTS 10 DOC context_parallel TESTS context_parallel.ulysses_2 context_parallel.ulysses_4 equivalence.cp2_ulysses_zigzag equivalence.cp4_hybrid_zigzag ledger.cp_ulysses UNIT "ulysses order*")
picotron_task(zero.stage1 POINTS 15 DOC zero TESTS equivalence.zero1_dp2_acc1 equivalence.zero1_dp4_acc4 equivalence.zero1_dp3_uneven ledger.zero1)
picotron_task(zero.stage3_gather_release POINTS 15 DOC zero TESTS equivalence.zero3_dp2_acc1 equivalence.zero3_dp4_acc4 equivalence.zero3_dp3_uneven ledger.zero3)
picotron_task(zero.hsdp POINTS 5 DOC zero TESTS equivalence.hsdp_zero1_dp4 equivalence.hsdp_zero3_dp4_acc4 ledger.hsdp)
picotron_task(zero.slice_sums POINTS 10 DOC zero TESTS equivalence.zero2_dp2_tp2_sp equivalence.zero3_dp2_tp2_sp equivalence.zero2_dp2_pp2 equivalence.zero3_dp2_pp2_zb equivalence.mesh8_dp2_tp2_pp2_sp_zero3)
picotron_task(ep.dispatch_combine POINTS 15 DOC expert_parallel TESTS equivalence.moe_ep2_acc2 equivalence.moe_ep4 equivalence.moe_ep2_dp4_acc2)
picotron_task(moe.balancing_loss POINTS 10 DOC expert_parallel TESTS equivalence.moe_dp2_acc2 equivalence.moe_cp2 equivalence.moe_tp2_sp_acc2 equivalence.moe_pp2_acc2 UNIT "moe: the balancing loss*")
picotron_task(memory.recompute_layer POINTS 10 DOC memory TESTS recompute.full_1rank recompute.full_dp2 recompute.selective_1rank equivalence.recompute_full_dp2)
picotron_task(data.bpe_merge POINTS 5 DOC data TESTS data.tokenizer_vs_library data.text_end_to_end UNIT "tokenizer: BPE merges*")
picotron_task(kernels.rmsnorm_forward POINTS 5 DOC kernels UNIT "kernels: RMSNorm reference*" "kernels: a model with --kernels fused*")
picotron_task(kernels.fp8_scale POINTS 5 DOC kernels UNIT "fp8 scale*" "fp8 quantize*" "fp8 linear:*")
picotron_task(kernels.fp8_amax_sync POINTS 10 DOC kernels TESTS equivalence.fp8_tp2 equivalence.fp8_tp2_sp equivalence.fp8_cp2)
picotron_task(flight.diagnose POINTS 10 DOC flight_recorder TESTS flight.diagnose)
