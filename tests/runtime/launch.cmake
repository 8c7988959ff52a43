# dpt-launch: usage errors, dry run, communicators through it, first failing
# rank, signals; the watchdog (kill / stop one rank mid-collective).
set(_launch $<TARGET_FILE:dpt-launch>)
set(_expect ${CMAKE_COMMAND} -P ${CMAKE_CURRENT_LIST_DIR}/expect.cmake)
function(dpt_launch_expect name code regex)
  add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} "-DCMD=${ARGN}" -DEXPECT_EXIT=${code}
                                "-DREGEX=${regex}" -P ${CMAKE_CURRENT_LIST_DIR}/expect.cmake)
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${DPT_RT_TEST_ENV}" TIMEOUT 120)
endfunction()

dpt_launch_expect(runtime.launch.usage.n0 2 "-n 0: expected a number of ranks >= 1"
                  ${_launch} -n 0 -- true)
dpt_launch_expect(runtime.launch.usage.nonnum 2 "-n x: expected a number" ${_launch} -n x -- true)
dpt_launch_expect(runtime.launch.usage.comm 2 "unknown communicator \"bogus\": choose one of auto, mpi, ring, hierarchical"
                  ${_launch} -n 2 --comm bogus -- true)
dpt_launch_expect(runtime.launch.usage.noprog 2 "missing program" ${_launch} -n 2)
dpt_launch_expect(runtime.launch.usage.badprog 2 "program \"no-such-program-dpt\" not found"
                  ${_launch} -n 2 -- no-such-program-dpt)
dpt_launch_expect(runtime.launch.usage.hostfile 2 "/nonexistent/hosts: cannot open the hostfile: No such file"
                  ${_launch} --hostfile /nonexistent/hosts -N 2 -- true)
dpt_launch_expect(runtime.launch.usage.hostfile_short 2 "-N 5 but hostfile .* lists only 1 host"
                  ${_launch} --hostfile ${CMAKE_CURRENT_LIST_DIR}/hosts.local -N 5 -- true)
dpt_launch_expect(runtime.launch.usage.noranks 2 "say how many ranks" ${_launch} -- true)
# No status directory (TMPDIR missing): exit 1 naming the directory and what to set; nothing starts.
dpt_launch_expect(runtime.launch.tmpdir 1
                  "dpt-launch: cannot create a status directory in /nonexistent-dpt-tmp: No such file or directory \\(set TMPDIR"
                  ${CMAKE_COMMAND} -E env TMPDIR=/nonexistent-dpt-tmp ${_launch} -n 1 -- true)
dpt_launch_expect(runtime.launch.dryrun 0
                  "dpt plan [0-9a-f]+.*bindings \\(plan digest [0-9a-f]+\\):.*rank 2  node .*local 2/3.*command: .*--exec-rank"
                  ${_launch} -n 3 --oversubscribe --dry-run --comm hierarchical -- true)
# --hostfile: each rank on its plan host -- without the node's topology (--gpus-per-node) by
# --host in its app context, unbound; with it (--input) by a rankfile on the plan's CPUs
dpt_launch_expect(runtime.launch.dryrun.hostfile 0
                  "command: [^\n]*--bind-to none -n 1 --host localhost -x RANK=0 [^\n]* : -n 1 --host localhost -x RANK=1 "
                  ${_launch} --hostfile ${CMAKE_CURRENT_LIST_DIR}/hosts.local -N 1
                  --gpus-per-node 2 --dry-run -- true)
dpt_launch_expect(runtime.launch.dryrun.hostfile_cpus 0
                  "rankfile .*rank 0=localhost slot=0\n.*rank 1=localhost slot=1\n.*--rankfile [^ ]+ --mca rmaps_rank_file_physical 1"
                  ${_launch} --hostfile ${CMAKE_CURRENT_LIST_DIR}/hosts.local -N 1 --input
                  ${CMAKE_SOURCE_DIR}/tests/launcher/node-2core.xml --gpus-per-node 2 --dry-run -- true)
# Exit status and name of the first failing rank.
dpt_launch_expect(runtime.launch.first_failure 3
                  "dpt-launch: rank 1 on [^ ]+ exited with status 3 \\(first failing rank"
                  ${_launch} -n 3 --oversubscribe -- sh -c "test \"$DPT_RANK\" != 1 || exit 3 && sleep 20")
# Every communicator through dpt-launch, the ring in the plan's order (--ctx).
foreach(np 1 2 3 4 7 8)
  dpt_launch_expect(runtime.comm.launch.np${np} 0 "test_comm: ${np} ranks, 3 communicator\\(s\\): ok"
                    ${_launch} -n ${np} --oversubscribe -- $<TARGET_FILE:test_comm> --ctx --large 100003)
endforeach()
# Across "nodes" with a hostfile and rankfile (this host only).
dpt_launch_expect(runtime.comm.launch.hostfile 0 "test_comm: 2 ranks, 1 communicator\\(s\\): ok"
                  ${_launch} --hostfile ${CMAKE_CURRENT_LIST_DIR}/hosts.local -N 1
                  --gpus-per-node 2 -- $<TARGET_FILE:test_comm> --ctx --comm ring)

add_executable(test_hang ${CMAKE_CURRENT_LIST_DIR}/test_hang.c)
target_link_libraries(test_hang PRIVATE dpt_runtime)
dpt_target_warnings(test_hang)
foreach(how mpirun launch)
  if(how STREQUAL "mpirun")
    set(_l mpirun)
  else()
    set(_l ${_launch})
  endif()
  foreach(sig KILL STOP)
    add_test(NAME runtime.watchdog.${how}.${sig}
             COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/kill_test.sh ${_l} ${sig} 4 4
                     $<TARGET_FILE:test_hang>)
    set_tests_properties(runtime.watchdog.${how}.${sig} PROPERTIES
                         ENVIRONMENT "${DPT_ASAN_ENV}"
                         TIMEOUT 60 PROCESSORS 2)
  endforeach()
endforeach()

# dpt-bench: runs under dpt-launch, JSON document, exact results; bad usage.
dpt_launch_expect(runtime.bench.json 0
                  "\"schema\": \"dpt.bench.allreduce/1\".*\"comm\": \"hierarchical\".*\"max_error\": 0.0"
                  ${_launch} -n 3 --oversubscribe -- $<TARGET_FILE:dpt-bench> allreduce --max-bytes 64K --iters 2
                  --warmup 1 --json)
dpt_launch_expect(runtime.bench.fp16 0 "fp16 on the wire.*ring +65536 +16384 +float"
                  ${_launch} -n 2 -- $<TARGET_FILE:dpt-bench> allreduce --comm ring --fp16
                  --min-bytes 64K --max-bytes 64K --iters 2)
dpt_launch_expect(runtime.bench.usage.comm 2 "unknown communicator \"bogus\""
                  $<TARGET_FILE:dpt-bench> allreduce --comm bogus)
dpt_launch_expect(runtime.bench.usage.size 2 "--max-bytes 12x: expected bytes"
                  $<TARGET_FILE:dpt-bench> allreduce --max-bytes 12x)
dpt_launch_expect(runtime.bench.usage.what 2 "unknown benchmark \"allgather\""
                  $<TARGET_FILE:dpt-bench> allgather)
# nccl is compiled and linked in GPU builds; without a GPU it fails cleanly on every rank.
if(TARGET dpt_nccl_kernels)
  dpt_launch_expect(runtime.comm.nccl.nogpu 1
                    "communicator nccl: no usable GPU on rank 0 .*cudaGetDeviceCount"
                    ${_launch} -n 2 -- $<TARGET_FILE:dpt-bench> allreduce --comm nccl --max-bytes 1K)
endif()

# DPT_COMM=auto, what srun --dpt passes by default: host buffers -> the plan's ring.
dpt_launch_expect(runtime.bench.comm_auto 0 "\"comm\": \"ring\".*\"max_error\": 0.0"
                  ${_launch} -n 2 --comm auto -- $<TARGET_FILE:dpt-bench> allreduce --max-bytes 4K --iters 2
                  --warmup 1 --json --report ${CMAKE_CURRENT_BINARY_DIR}/bench-comm-auto.report.json)
