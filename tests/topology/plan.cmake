# Planner tests (topology/dpt_plan*.c, dpt-topo plan).  Included by
# tests/topology/CMakeLists.txt.
set(_plan ${CMAKE_CURRENT_SOURCE_DIR}/plan)

add_library(dpt_plan_testlib STATIC ${_plan}/plan_testlib.c)
target_link_libraries(dpt_plan_testlib PUBLIC dpt_topology)
target_include_directories(dpt_plan_testlib PUBLIC ${_plan})
dpt_target_warnings(dpt_plan_testlib)

foreach(_t test_plan_props test_plan_mn1 test_plan_node test_plan_sources)
  add_executable(${_t} ${_plan}/${_t}.c)
  target_link_libraries(${_t} PRIVATE dpt_plan_testlib)
  dpt_target_warnings(${_t})
endforeach()
add_test(NAME plan_properties_random_trees COMMAND test_plan_props 400)
# Random trees only: no live hwloc, Slurm or MPI, so none of the third-party leaks that
# dpt_sanitizer_env's full unwinding is there to suppress.  Under ASan it keeps the fast
# (frame-pointer) unwinding at each malloc: 7 s instead of 92 s (2-core Xeon, 400 trees).
if(DPT_SANITIZE)
  set_tests_properties(plan_properties_random_trees PROPERTIES ENVIRONMENT
    "ASAN_OPTIONS=fast_unwind_on_malloc=1;LSAN_OPTIONS=suppressions=${DPT_TEST_DATA}/lsan-thirdparty.supp")
endif()
add_test(NAME plan_mn1_1024_ranks COMMAND test_plan_mn1)
add_test(NAME plan_node_gpu_order_binding COMMAND test_plan_node)
add_test(NAME plan_sources_conf_addr_avakas_mn1xml
         COMMAND test_plan_sources ${_plan}/data ${DPT_FIXTURES}
                 ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/mn1-8gpu-4hca.xml)

# dpt_job (topology/dpt_job.h): every tree and node source into the planner's inputs, the one
# oversubscription rule and its messages, the launchers' variables.
add_executable(test_job ${_plan}/test_job.c)
target_link_libraries(test_job PRIVATE dpt_topology)
dpt_target_warnings(test_job)
add_test(NAME plan_job_inputs_and_oversubscription
         COMMAND test_job ${_plan}/data ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/mn1-8gpu-4hca.xml
                 ${CMAKE_SOURCE_DIR}/tests/launcher/node-2core.xml ${CMAKE_SOURCE_DIR}/tests/launcher/node-2core-1gpu.xml
                 ${CMAKE_CURRENT_BINARY_DIR})

# Benchmark (not a timed test): bench_plan [iterations]
add_executable(bench_plan ${_plan}/bench_plan.c)
target_link_libraries(bench_plan PRIVATE dpt_plan_testlib)
dpt_target_warnings(bench_plan)

# dpt-topo plan: golden outputs (reviewed by hand; DPT_UPDATE_GOLDEN=1 rewrites them)
set(_topo $<TARGET_FILE:dpt-topo>)
set(_mn1xml ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/mn1-8gpu-4hca.xml)
set(_avakas ${DPT_FIXTURES}/ibnet/avakas/ibnetdiscover-p.txt)
file(READ ${_plan}/data/avakas-64.hostlist _avakas64)
string(STRIP "${_avakas64}" _avakas64)
dpt_golden_test(plan_cli_flat_golden ${_plan}/data/cli-flat-2gpu.txt
                ${_topo} plan --nodes n[1-4] --gpus-per-node 2)
dpt_golden_test(plan_cli_conf_mn1_nodes_golden ${_plan}/data/cli-cluster-mn1xml.txt
                ${_topo} plan --topology-conf ${_plan}/data/cluster.conf
                --nodes node[16,03,11,01,02,09] --node-xml ${_mn1xml})
dpt_golden_test(plan_cli_addr_json_golden ${_plan}/data/cli-cluster-addr.json
                ${_topo} plan --addr-list ${_plan}/data/cluster.addr --nodes node[01-04]
                --gpus-per-node 2 --ranks-per-node 1 --fp16 --seed 7 --json)
dpt_golden_test(plan_cli_avakas_64_golden ${_plan}/data/cli-avakas-64.txt
                ${_topo} plan --ibnetdiscover ${_avakas} --nodes ${_avakas64} --gpus-per-node 1)

# topology.conf and SLURM_TOPOLOGY_ADDR of one cluster: one plan
add_test(NAME plan_cli_conf_addr_same_digest
         COMMAND ${CMAKE_COMMAND}
                 "-DCMD_A=${_topo};plan;--topology-conf;${_plan}/data/cluster.conf;--nodes;node[01-16];--gpus-per-node;4"
                 "-DCMD_B=${_topo};plan;--addr-list;${_plan}/data/cluster.addr;--nodes;node[01-16];--gpus-per-node;4"
                 -P ${_plan}/same_digest.cmake)
add_test(NAME plan_cli_output_file_is_json
         COMMAND ${CMAKE_COMMAND}
                 "-DCMD_A=${_topo};plan;--nodes;n[1-3];--gpus-per-node;2;--output;${CMAKE_CURRENT_BINARY_DIR}/plan-out.json"
                 "-DCMD_B=${_topo};plan;--nodes;n[1-3];--gpus-per-node;2;--json"
                 -DOUTPUT=${CMAKE_CURRENT_BINARY_DIR}/plan-out.json
                 -P ${_plan}/same_digest.cmake)

# dpt-topo plan: bad input -> exit 2, nothing on stdout, a message naming it
function(plan_bad name regex)
  add_test(NAME plan_cli_bad_${name}
           COMMAND ${CMAKE_COMMAND} "-DCMD=${ARGN}" "-DREGEX=${regex}"
                   -P ${_plan}/expect_fail.cmake)
endfunction()
set(_conf --topology-conf ${_plan}/data/cluster.conf)
plan_bad(node_not_in_tree "'ghost9'.*no switch"
         ${_topo} plan ${_conf} --gpus-per-node 1 --nodes node[01-03],ghost9)
plan_bad(duplicate_node "'node02' appears twice"
         ${_topo} plan ${_conf} --gpus-per-node 1 --nodes node[01-03],node02)
plan_bad(more_ranks_than_gpus "'node01': 4 ranks per node.* 2 GPUs"
         ${_topo} plan ${_conf} --gpus-per-node 2 --ranks-per-node 4 --nodes node[01-02])
plan_bad(missing_tree_file "--topology-conf /nonexistent/topology.conf"
         ${_topo} plan --topology-conf /nonexistent/topology.conf --gpus-per-node 1 --nodes n1)
plan_bad(missing_addr_file "--addr-list /nonexistent/addrs"
         ${_topo} plan --addr-list /nonexistent/addrs --gpus-per-node 1 --nodes n1)
plan_bad(missing_node_xml "--node-xml /nonexistent/node.xml"
         ${_topo} plan --node-xml /nonexistent/node.xml --nodes n1)
plan_bad(two_tree_sources "--topology-conf and --addr-list"
         ${_topo} plan ${_conf} --addr-list ${_plan}/data/cluster.addr --gpus-per-node 1 --nodes n1)
plan_bad(no_nodes "--nodes HOSTLIST is required" ${_topo} plan --gpus-per-node 1)
plan_bad(no_gpu_count "--gpus-per-node N, --node-xml FILE or --node-xml-dir DIR" ${_topo} plan --nodes n1)
plan_bad(node_under_two_switches "bad-two-switches.conf:4: node 'node02' is under two switches: 'leaf1' \\(line 3\\) and 'leaf2'"
         ${_topo} plan --topology-conf ${_plan}/data/bad-two-switches.conf --gpus-per-node 1 --nodes node[01-03])
plan_bad(switches_cycle "bad-cycle.conf:2: cycle in Switches= .*s1 \\(line 2\\) -> s3 \\(line 4\\) -> s2 \\(line 3\\) -> s1"
         ${_topo} plan --topology-conf ${_plan}/data/bad-cycle.conf --gpus-per-node 1 --nodes node[01-02])

# --node-xml-dir DIR: DIR/<host>.xml per host (what etc/mn1/sbatch/topo-survey.sbatch collects).
# A directory made here: mn001 and mn003 are the 2-HCA example node, mn002 the 4-HCA fixture.
set(_xdir ${CMAKE_CURRENT_BINARY_DIR}/node-xml-dir)
file(MAKE_DIRECTORY ${_xdir} ${_xdir}/same)
file(COPY_FILE ${CMAKE_SOURCE_DIR}/etc/mn1/mn1-node.xml ${_xdir}/mn001.xml ONLY_IF_DIFFERENT)
file(COPY_FILE ${_mn1xml} ${_xdir}/mn002.xml ONLY_IF_DIFFERENT)
file(COPY_FILE ${CMAKE_SOURCE_DIR}/etc/mn1/mn1-node.xml ${_xdir}/mn003.xml ONLY_IF_DIFFERENT)
foreach(_h mn001 mn002 mn003)
  file(COPY_FILE ${_mn1xml} ${_xdir}/same/${_h}.xml ONLY_IF_DIFFERENT)
endforeach()
# every host with the same XML: the plan of --node-xml FILE
add_test(NAME plan_cli_node_xml_dir_same_as_node_xml
         COMMAND ${CMAKE_COMMAND}
                 "-DCMD_A=${_topo};plan;--topology-conf;${CMAKE_SOURCE_DIR}/etc/mn1/topology.conf;--nodes;mn[001-003];--node-xml;${_mn1xml};--no-report"
                 "-DCMD_B=${_topo};plan;--topology-conf;${CMAKE_SOURCE_DIR}/etc/mn1/topology.conf;--nodes;mn[001-003];--node-xml-dir;${_xdir}/same;--no-report"
                 -P ${_plan}/same_digest.cmake)
# each host its own XML: per-node HCA lists and GPU order
add_test(NAME plan_cli_node_xml_dir_per_host
         COMMAND ${_topo} plan --topology-conf ${CMAKE_SOURCE_DIR}/etc/mn1/topology.conf
                 --nodes mn[001-003] --node-xml-dir ${_xdir} --no-report)
set_tests_properties(plan_cli_node_xml_dir_per_host PROPERTIES PASS_REGULAR_EXPRESSION
  "mn001  ib-leaf01  0-7 +8  mlx5_0,mlx5_1\n[^\n]*mn002  ib-leaf01  8-15 +8  mlx5_0,mlx5_1,mlx5_2,mlx5_3\n[^\n]*mn003  ib-leaf01  16-23 +8  mlx5_0,mlx5_1\n")
plan_bad(node_xml_dir_missing_host "--node-xml-dir [^:]*: host mn004: .*mn004.xml"
         ${_topo} plan --nodes mn[001-004] --node-xml-dir ${_xdir})
plan_bad(node_xml_and_dir "--gpus-per-node, --node-xml and --node-xml-dir: give one of them"
         ${_topo} plan --nodes mn001 --node-xml ${_mn1xml} --node-xml-dir ${_xdir})
plan_bad(bad_size "--size '12x'" ${_topo} plan --nodes n1 --gpus-per-node 1 --size 12x)
plan_bad(oversubscribe_needs_rpn "--oversubscribe needs --ranks-per-node"
         ${_topo} plan --nodes n1 --gpus-per-node 1 --oversubscribe)
plan_bad(unwritable_output "--output '/nonexistent/dir/p.json'"
         ${_topo} plan --nodes n1 --gpus-per-node 1 --output /nonexistent/dir/p.json)
# last: an unbalanced '[' would glue the following list elements together
plan_bad(hostlist_syntax "--nodes 'node\\[01-'"
         ${_topo} plan ${_conf} --gpus-per-node 1 --nodes node[01-)

# etc/mn1/plan.txt is the plan of the MN-1 example (etc/mn1/topology.conf, 128 nodes of
# etc/mn1/mn1-node.xml: 8 GPUs, 2 HCAs): it must stay what dpt-topo prints.
dpt_golden_test(plan_etc_mn1_example ${CMAKE_SOURCE_DIR}/etc/mn1/plan.txt
                ${CMAKE_COMMAND} -E chdir ${CMAKE_SOURCE_DIR}
                ${_topo} plan --topology-conf etc/mn1/topology.conf
                --nodes mn[001-128] --node-xml etc/mn1/mn1-node.xml --no-report)

# NVLink inside a node: the POWER8 dump (4 P100, NVLink pairs GPU0-GPU1 and GPU2-GPU3, each
# pair on one socket) with its NVLinkBandwidth matrix relabelled so that the pairs are
# GPU0-GPU2 and GPU1-GPU3, across the sockets: bus order is then the worst ring (no NVLink
# edge) and the plan must put each NVLink pair next to each other: 0,2,3,1
# (NV2, NODE, NV2 -- not 0,2,1,3 with a SYS edge).  Made at configure time from ../shared.
set(_p8 ${DPT_FIXTURES}/hwloc/power8-4p100-nvlink.xml)
set(_p8x ${CMAKE_CURRENT_BINARY_DIR}/power8-nvlink-crossed.xml)
file(READ ${_p8} _p8_doc)
string(REPLACE "OSDev:332 OSDev:333 OSDev:334 OSDev:335" "OSDev:332 OSDev:334 OSDev:333 OSDev:335"
       _p8x_doc "${_p8_doc}")
if(_p8x_doc STREQUAL _p8_doc)
  message(FATAL_ERROR "${_p8}: its NVLinkBandwidth indexes changed; update tests/topology/plan.cmake")
endif()
file(WRITE ${_p8x} "${_p8x_doc}")
add_test(NAME plan_nvlink_crossed_pairs_matrix COMMAND ${_topo} --input ${_p8x})
set_tests_properties(plan_nvlink_crossed_pairs_matrix PROPERTIES PASS_REGULAR_EXPRESSION
  "GPU0 +X +NODE +NV2 +SYS [^\n]*\nGPU1 +NODE +X +SYS +NV2 ")
add_test(NAME plan_nvlink_pairs_adjacent_in_ring
  COMMAND ${_topo} plan --nodes a,b --node-xml ${_p8x} --no-report)
set_tests_properties(plan_nvlink_pairs_adjacent_in_ring PROPERTIES PASS_REGULAR_EXPRESSION
  "\n +0 +a +0 +0 +0002:01:00.0[^\n]*\n +1 +a +1 +2 +000a:01:00.0[^\n]*\n +2 +a +2 +3 +000b:01:00.0[^\n]*\n +3 +a +3 +1 +0003:01:00.0")
# ... and the unmodified dump keeps bus order, which already follows its NVLink pairs.
add_test(NAME plan_nvlink_pairs_bus_order
  COMMAND ${_topo} plan --nodes a,b --node-xml ${_p8} --no-report)
set_tests_properties(plan_nvlink_pairs_bus_order PROPERTIES PASS_REGULAR_EXPRESSION
  "\n +0 +a +0 +0 +0002:01:00.0[^\n]*\n +1 +a +1 +1 +0003:01:00.0[^\n]*\n +2 +a +2 +2 +000a:01:00.0[^\n]*\n +3 +a +3 +3 +000b:01:00.0")
