# The reports of the real runs (report.run.*): valid, and saying what the runs did.
function(check_out file regex)
  execute_process(COMMAND ${TOOL} ${ARGN} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT "${out}" MATCHES "${regex}")
    message(FATAL_ERROR "dpt-report ${ARGN}: exit ${rc}, output does not match '${regex}':\n${out}\n${err}")
  endif()
endfunction()
check_out(train-np1 "report_minitrain report train-np1.json.*1 rank on 1 node.*via dpt-launch.*exit 0.*plan +digest [0-9a-f]+, 1 rank.*images/s total.*val top-1 [0-9.]+%.*errors +none"
          ${OUT}/train-np1.json)
check_out(train-np2 "2 ranks on 1 node.*exit 0.*mpi Open MPI.*scaling +vs train-np1.json \\(1 rank, [0-9.]+ images/s\\): speed-up [0-9.]+, efficiency [0-9.]+%.*\n +0 .*\n +1 "
          ${OUT}/train-np2.json)
check_out(fp16 "wire fp16" ${OUT}/train-np2-fp16.json)
check_out(fail "exit non-zero.*error +rank 1 on [^ ]+ at 20[0-9-]+T[0-9:.]+Z: runtime: injected failure on rank 1"
          ${OUT}/train-fail.json)
check_out(bench "dpt-bench report.*2 ranks.*allreduce 4.0 MiB on the wire fp32: measured [0-9.]+ [mu]s, predicted [0-9.]+ [mu]s.*bench +[0-9]+ measurements"
          ${OUT}/bench-np2.json)
check_out(bench-scaling "dpt-bench report.*3 ranks.*speed +[0-9.]+ images/s total.*scaling +vs bench-np2-ips.json \\(2 ranks, [0-9.]+ images/s\\): speed-up [0-9.]+, efficiency [0-9.]+%"
          ${OUT}/bench-np3-scaling.json)
check_out(topo "dpt-topo report.*32 ranks on 4 nodes, ring: n1 \\(8\\) -> n2 \\(8\\) -> n3 \\(8\\) -> n4 \\(8\\)"
          ${OUT}/topo-plan.json)
check_out(compare "train-np1.json .* 1 .*\ntrain-np2.json .* 2 .* ([0-9.]+) +([0-9]+)%"
          --compare ${OUT}/train-np1.json ${OUT}/train-np2.json ${OUT}/train-np2-fp16.json)
