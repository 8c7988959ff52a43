# Switch trees (topology/dpt_tree*.c): topology.conf, SLURM_TOPOLOGY_ADDR,
# ibnetdiscover -p, flat; unit tests, golden dumps, deterministic fuzzing.
set(DPT_TREE_TEST_DIR ${CMAKE_CURRENT_SOURCE_DIR}/tree)
set(DPT_TREE_DATA ${DPT_TREE_TEST_DIR}/data)
set(DPT_AVAKAS ${DPT_FIXTURES}/ibnet/avakas/ibnetdiscover-p.txt)

foreach(t tree_dump test_tree_conf test_tree_addr test_tree_ibnet test_tree_core test_tree_fuzz)
  add_executable(${t} ${DPT_TREE_TEST_DIR}/${t}.c)
  target_link_libraries(${t} PRIVATE dpt_topology)
  dpt_target_warnings(${t})
endforeach()

add_test(NAME tree_conf_parse_and_errors COMMAND test_tree_conf ${DPT_TREE_DATA})
add_test(NAME tree_addr_equals_conf COMMAND test_tree_addr ${DPT_TREE_DATA} ${CMAKE_SOURCE_DIR}/etc/mn1/topology.conf)
add_test(NAME tree_ibnet_avakas_groups COMMAND test_tree_ibnet ${DPT_AVAKAS})
add_test(NAME tree_core_builder_lookup_hostlist COMMAND test_tree_core)
# Every allocation of the three readers (ibnetdiscover, topology.conf, SLURM_TOPOLOGY_ADDR)
# fails in turn: the test wraps the allocator at link time.
add_executable(test_tree_nomem ${DPT_TREE_TEST_DIR}/test_tree_nomem.c)
target_link_libraries(test_tree_nomem PRIVATE dpt_topology)
target_link_options(test_tree_nomem PRIVATE
                    "LINKER:--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,--wrap=strndup")
dpt_target_warnings(test_tree_nomem)
add_test(NAME tree_readers_out_of_memory
         COMMAND test_tree_nomem ${DPT_AVAKAS} ${DPT_TREE_DATA} ${CMAKE_SOURCE_DIR}/etc/mn1/topology.conf)
add_test(NAME tree_fuzz_mutations COMMAND test_tree_fuzz ${DPT_TREE_DATA} ${DPT_AVAKAS} ${CMAKE_SOURCE_DIR}/etc/mn1/topology.conf)

dpt_golden_test(tree_golden_cluster_conf ${DPT_TREE_DATA}/cluster.conf.golden
                $<TARGET_FILE:tree_dump> conf ${DPT_TREE_DATA}/cluster.conf)
dpt_golden_test(tree_golden_cluster_addr ${DPT_TREE_DATA}/cluster.addr.golden
                $<TARGET_FILE:tree_dump> addr ${DPT_TREE_DATA}/cluster.addr)
dpt_golden_test(tree_golden_mn1_conf ${DPT_TREE_DATA}/mn1-topology.conf.golden
                $<TARGET_FILE:tree_dump> conf ${CMAKE_SOURCE_DIR}/etc/mn1/topology.conf)
dpt_golden_test(tree_golden_avakas ${DPT_TREE_DATA}/avakas.golden
                $<TARGET_FILE:tree_dump> ibnet ${DPT_AVAKAS})
dpt_golden_test(tree_golden_cluster_json ${DPT_TREE_DATA}/cluster.json.golden
                $<TARGET_FILE:tree_dump> conf ${DPT_TREE_DATA}/cluster.conf --json)

# libslurm leaks inside hostlist_create on invalid input (see lsan.supp).
set_tests_properties(tree_conf_parse_and_errors tree_addr_equals_conf tree_ibnet_avakas_groups
                     tree_core_builder_lookup_hostlist tree_fuzz_mutations tree_readers_out_of_memory
                     PROPERTIES ENVIRONMENT "LSAN_OPTIONS=suppressions=${DPT_TREE_TEST_DIR}/lsan.supp:print_suppressions=0")
