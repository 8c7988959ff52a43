# Planner tests (topology/dpt_plan.c, dpt-topo plan).  Included by
# tests/topology/CMakeLists.txt.
set(_plan ${CMAKE_CURRENT_SOURCE_DIR}/plan)

add_library(dpt_plan_testlib STATIC ${_plan}/plan_testlib.c)
target_link_libraries(dpt_plan_testlib PUBLIC dpt_topology)
target_include_directories(dpt_plan_testlib PUBLIC ${_plan})
dpt_target_warnings(dpt_plan_testlib)

foreach(_t test_plan_props test_plan_mn1 test_plan_node)
  add_executable(${_t} ${_plan}/${_t}.c)
  target_link_libraries(${_t} PRIVATE dpt_plan_testlib)
  dpt_target_warnings(${_t})
endforeach()
add_test(NAME plan_properties_random_trees COMMAND test_plan_props 400)
add_test(NAME plan_mn1_1024_ranks COMMAND test_plan_mn1)
add_test(NAME plan_node_gpu_order_binding COMMAND test_plan_node)

# Benchmark (not a timed test): bench_plan [iterations]
add_executable(bench_plan ${_plan}/bench_plan.c)
target_link_libraries(bench_plan PRIVATE dpt_plan_testlib)
dpt_target_warnings(bench_plan)
