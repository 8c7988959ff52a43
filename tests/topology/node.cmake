# Node topology tests: dpt_node (hwloc discovery, path classes) and `dpt-topo show`.
# Golden files of the shared fixtures live in golden/ (shared/ is read-only); those of
# our own MN-1 style fixture live next to it in fixtures/.  Regenerate a golden with
# DPT_UPDATE_GOLDEN=1 ctest -R <name>, then review it against lstopo before committing.
set(_node_golden ${CMAKE_CURRENT_SOURCE_DIR}/golden)
set(_node_fix ${CMAKE_CURRENT_SOURCE_DIR}/fixtures)
set(_node_mn1 ${_node_fix}/mn1-8gpu-4hca.xml)
set(_node_expect ${CMAKE_CURRENT_SOURCE_DIR}/node/expect.cmake)
set(_node_hwloc_fixtures nvidia-dgx2-16v100 x86-2socket-k40-mlx5 power8-4p100-nvlink
    lassen-power9-4v100-4mlx5 aws-g4dn-metal-8t4 llnl-pascal-2p100-mlx5)

foreach(t test_node test_node_fuzz test_node_schema)
  add_executable(${t} ${CMAKE_CURRENT_SOURCE_DIR}/node/${t}.c)
  target_link_libraries(${t} PRIVATE dpt_topology)
  dpt_target_warnings(${t})
endforeach()

# Facts: NVIDIA's published DGX-2 matrix and NV6, NV2 on POWER8, MN-1 expectations,
# PCI-class fallback, synthetic nodes, the live machine, HWLOC_XMLFILE, bad buffers.
add_test(NAME node_facts COMMAND test_node ${DPT_FIXTURES}/hwloc ${_node_mn1})
add_test(NAME node_facts_live_machine COMMAND test_node --live)

# Live discovery goes through hwloc's dlopen()ed pci plugin, whose libpciaccess leaks
# ~1 KB that LeakSanitizer reports from an "<unknown module>" (hwloc unloads the plugin,
# so no suppression can name it): leak checking is off for the live-machine tests only
# (XML loads, which exercise all of our code, keep it).
set(_node_live_env "ASAN_OPTIONS=detect_leaks=0")
set_tests_properties(node_facts_live_machine PROPERTIES ENVIRONMENT "${_node_live_env}")

# Golden files: text view and JSON of every real fixture (run from the fixture's folder
# so that the recorded "source" does not depend on where the tree is checked out).
foreach(f ${_node_hwloc_fixtures})
  dpt_golden_test(node_golden_${f}_text ${_node_golden}/${f}.txt
    ${CMAKE_COMMAND} -E chdir ${DPT_FIXTURES}/hwloc $<TARGET_FILE:dpt-topo> --input ${f}.xml)
  dpt_golden_test(node_golden_${f}_json ${_node_golden}/${f}.json
    ${CMAKE_COMMAND} -E chdir ${DPT_FIXTURES}/hwloc $<TARGET_FILE:dpt-topo> show --input ${f}.xml --json)
  add_test(NAME node_schema_${f}
    COMMAND sh -c "\"$1\" --input \"$2\" --json > \"$4\" && \"$3\" \"$4\"" sh
            $<TARGET_FILE:dpt-topo> ${DPT_FIXTURES}/hwloc/${f}.xml $<TARGET_FILE:test_node_schema>
            ${CMAKE_CURRENT_BINARY_DIR}/node-schema-${f}.json)
endforeach()
# PCIe-only matrices (like nvidia-smi topo -mp) where NVLink hides them
foreach(f nvidia-dgx2-16v100 power8-4p100-nvlink)
  dpt_golden_test(node_golden_${f}_pcie ${_node_golden}/${f}-pcie.txt
    ${CMAKE_COMMAND} -E chdir ${DPT_FIXTURES}/hwloc $<TARGET_FILE:dpt-topo> --input ${f}.xml --pcie)
endforeach()
# HWLOC_XMLFILE selects the file like --input does (same golden)
dpt_golden_test(node_golden_hwloc_xmlfile_env ${_node_golden}/power8-4p100-nvlink.txt
  ${CMAKE_COMMAND} -E chdir ${DPT_FIXTURES}/hwloc
  ${CMAKE_COMMAND} -E env HWLOC_XMLFILE=power8-4p100-nvlink.xml $<TARGET_FILE:dpt-topo>)

# Our MN-1 / DGX-1 style node (the README demo runs exactly this path from the tree root)
dpt_golden_test(node_golden_mn1_text ${_node_fix}/mn1-8gpu-4hca.txt
  ${CMAKE_COMMAND} -E chdir ${DPT_TEST_DATA}/.. $<TARGET_FILE:dpt-topo> --input tests/topology/fixtures/mn1-8gpu-4hca.xml)
dpt_golden_test(node_golden_mn1_json ${_node_fix}/mn1-8gpu-4hca.json
  ${CMAKE_COMMAND} -E chdir ${DPT_TEST_DATA}/.. $<TARGET_FILE:dpt-topo> --input tests/topology/fixtures/mn1-8gpu-4hca.xml --json)
add_test(NAME node_schema_mn1
  COMMAND sh -c "\"$1\" --input \"$2\" --json > \"$4\" && \"$3\" \"$4\"" sh
          $<TARGET_FILE:dpt-topo> ${_node_mn1} $<TARGET_FILE:test_node_schema> ${CMAKE_CURRENT_BINARY_DIR}/node-schema-mn1.json)
# the generator script reproduces the committed fixture
add_test(NAME node_mn1_fixture_reproducible
  COMMAND sh -c "python3 \"$1\" | cmp - \"$2\"" sh ${_node_fix}/make-mn1-node.py ${_node_mn1})
# etc/mn1/mn1-node.xml (the MN-1 example node, 2 HCAs) comes from the same generator.
add_test(NAME node_mn1_example_node_reproducible
  COMMAND sh -c "python3 \"$1\" --hcas 2 | cmp - \"$2\"" sh ${_node_fix}/make-mn1-node.py
          ${CMAKE_SOURCE_DIR}/etc/mn1/mn1-node.xml)
# ... and is wired as its header says: GPUs 0,1 / 4,5 share a switch with the socket's HCA.
add_test(NAME node_mn1_example_node_hcas
  COMMAND $<TARGET_FILE:dpt-topo> --input ${CMAKE_SOURCE_DIR}/etc/mn1/mn1-node.xml)
set_tests_properties(node_mn1_example_node_hcas PROPERTIES PASS_REGULAR_EXPRESSION
  "8 GPUs, 2 HCAs, 2 sockets.*GPU2 +0000:3d:00.0[^\n]*nearest HCA: mlx5_0 \\(NODE\\).*GPU5 +0000:89:00.0[^\n]*nearest HCA: mlx5_1 \\(PIX\\)")

# The validator itself: it must reject documents with missing fields or wrong types.
add_test(NAME node_schema_validator_rejects_mutations
  COMMAND sh -c "\"$1\" --input \"$2\" --json > \"$4\" && \"$3\" --self-test \"$4\"" sh
          $<TARGET_FILE:dpt-topo> ${_node_mn1} $<TARGET_FILE:test_node_schema> ${CMAKE_CURRENT_BINARY_DIR}/node-schema-self.json)

# This machine (no GPU in CI): a correct topology that says 0 GPUs, exit 0, valid JSON.
add_test(NAME node_live_machine
  COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:dpt-topo>" -DEXPECT_EXIT=0
          "-DSTDOUT_REGEX=Summary: [0-9]+ GPUs?, [0-9]+ HCAs?, [0-9]+ sockets?" -P ${_node_expect})
set_tests_properties(node_live_machine PROPERTIES ENVIRONMENT "HWLOC_XMLFILE=;${_node_live_env}")
add_test(NAME node_live_machine_schema
  COMMAND sh -c "env -u HWLOC_XMLFILE \"$1\" --json > \"$3\" && \"$2\" \"$3\"" sh
          $<TARGET_FILE:dpt-topo> $<TARGET_FILE:test_node_schema> ${CMAKE_CURRENT_BINARY_DIR}/node-schema-live.json)
set_tests_properties(node_live_machine_schema PROPERTIES ENVIRONMENT "${_node_live_env}")

# Bad input: exit 2, nothing on stdout, a message naming the file and the problem.
set(_bad_cases
  "missing|${_node_fix}/bad/does-not-exist.xml|does-not-exist.xml: cannot open the topology file: No such file"
  "empty|${_node_fix}/bad/empty.xml|empty.xml: the file is empty"
  "truncated|${_node_fix}/bad/truncated.xml|truncated.xml: truncated XML: no closing </topology>"
  "svg|${_node_fix}/bad/drawing.svg|drawing.svg: not an hwloc topology: the root element is <svg>"
  "other_xml|${_node_fix}/bad/other-root.xml|other-root.xml: not an hwloc topology: the root element is <nodes>"
  "hwloc_v3|${_node_fix}/bad/hwloc-v3.xml|hwloc-v3.xml: hwloc XML format version \"3.0\" is not supported"
  "directory|${_node_fix}/bad|bad: cannot read the topology file")
foreach(c ${_bad_cases})
  string(REPLACE "|" ";" c "${c}")
  list(GET c 0 name)
  list(GET c 1 file)
  list(GET c 2 re)
  foreach(mode text json)
    set(extra "")
    if(mode STREQUAL "json")
      set(extra ";--json")
    endif()
    add_test(NAME node_bad_input_${name}_${mode}
      COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:dpt-topo>;--input;${file}${extra}" -DEXPECT_EXIT=2
              -DSTDOUT_EMPTY=1 "-DSTDERR_REGEX=${re}" -P ${_node_expect})
  endforeach()
endforeach()
add_test(NAME node_bad_input_env_missing
  COMMAND ${CMAKE_COMMAND} -E env HWLOC_XMLFILE=/nonexistent/node.xml
          ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:dpt-topo>" -DEXPECT_EXIT=2 -DSTDOUT_EMPTY=1
          "-DSTDERR_REGEX=/nonexistent/node.xml: cannot open" -P ${_node_expect})
add_test(NAME node_bad_usage
  COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:dpt-topo>;show;--frobnicate" -DEXPECT_EXIT=2 -DSTDOUT_EMPTY=1
          "-DSTDERR_REGEX=unknown argument '--frobnicate'" -P ${_node_expect})
add_test(NAME node_bad_usage_input_without_file
  COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:dpt-topo>;--input" -DEXPECT_EXIT=2 -DSTDOUT_EMPTY=1
          "-DSTDERR_REGEX=--input needs a file name" -P ${_node_expect})
add_test(NAME node_show_help
  COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:dpt-topo>;show;--help" -DEXPECT_EXIT=0
          "-DSTDOUT_REGEX=usage: dpt-topo \\[show\\] \\[--input FILE.xml\\]" -P ${_node_expect})

# Fuzz: a few thousand deterministic mutations of real dumps never crash (ASan build too).
add_test(NAME node_fuzz_mutated_xml
  COMMAND test_node_fuzz 3000 0x5eed ${DPT_FIXTURES}/hwloc/nvidia-dgx2-16v100.xml
          ${DPT_FIXTURES}/hwloc/power8-4p100-nvlink.xml ${DPT_FIXTURES}/hwloc/x86-2socket-k40-mlx5.xml
          ${_node_mn1})
# hwloc 2.9 leaks the objects of a half-imported XML when it rejects it; that is
# hwloc's, so the fuzz test suppresses leaks whose allocation stack is in libhwloc
# (ASan still checks every memory access, and our own leaks stay visible).
# Full unwinding (ASAN_OPTIONS) so that a leak inside hwloc's dlopen()ed libxml2 plugin is
# traced on to libhwloc.so (tests/fuzz/regress/FINDINGS.md, node_xml): every mutated file
# now reaches hwloc's parser, which alone decides what it reads.
set_tests_properties(node_fuzz_mutated_xml PROPERTIES TIMEOUT 900
  ENVIRONMENT "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/node/lsan-hwloc.supp;ASAN_OPTIONS=fast_unwind_on_malloc=0")

# The tool's own usage: --help and --version exit 0 on stdout; plan --help lists its inputs.
add_test(NAME node_tool_help
  COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:dpt-topo>;--help" -DEXPECT_EXIT=0
          "-DSTDOUT_REGEX=usage: dpt-topo \\[show\\].*dpt-topo plan .*--node-xml-dir DIR.*dpt-topo --help \\| --version"
          -P ${_node_expect})
add_test(NAME node_tool_version
  COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:dpt-topo>;--version" -DEXPECT_EXIT=0
          "-DSTDOUT_REGEX=^dpt-topo ${PROJECT_VERSION}\n$" -P ${_node_expect})
add_test(NAME node_tool_plan_help
  COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:dpt-topo>;plan;--help" -DEXPECT_EXIT=0
          "-DSTDOUT_REGEX=usage: dpt-topo plan .*--topology-conf FILE.*--ibnetdiscover FILE.*--addr-list FILE.*--node-xml-dir DIR"
          -P ${_node_expect})
add_test(NAME node_tool_bad_subcommand_option
  COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:dpt-topo>;plan;--frobnicate" -DEXPECT_EXIT=2 -DSTDOUT_EMPTY=1
          "-DSTDERR_REGEX=unknown option '--frobnicate'" -P ${_node_expect})

# ---------------------------------------------------------------------------------------
# Issue 18: only NVIDIA devices are GPUs; what hwloc 2.9 loads, dpt reads.
# Fixtures made by fixtures/make-hwloc1x-fixtures.py from hwloc's own 1.x exports, copied
# unchanged into hwloc-xml/ (README.md there): the HP SL390s with 3 Tesla M2070 and an ATI
# ES1000 VGA, and the Dell R910 whose Groups carry a cpuset only (as hwloc <= 1.7.2 wrote).
set(_node_hwloc1x ${_node_fix}/make-hwloc1x-fixtures.py)
foreach(_fx "es1000|sl390s-3m2070-es1000" "group-cpuset|r910-1x-group-cpuset-only")
  string(REPLACE "|" ";" _fx "${_fx}")
  list(GET _fx 0 _what)
  list(GET _fx 1 _name)
  add_test(NAME node_fixture_${_name}_reproducible
    COMMAND sh -c "python3 \"$1\" \"$2\" | cmp - \"$3\"" sh ${_node_hwloc1x} ${_what} ${_node_fix}/${_name}.xml)
  dpt_golden_test(node_golden_${_name}_text ${_node_fix}/${_name}.txt
    ${CMAKE_COMMAND} -E chdir ${DPT_TEST_DATA}/.. $<TARGET_FILE:dpt-topo> --input tests/topology/fixtures/${_name}.xml)
  add_test(NAME node_schema_${_name}
    COMMAND sh -c "\"$1\" --input \"$2\" --json > \"$4\" && \"$3\" \"$4\"" sh
            $<TARGET_FILE:dpt-topo> ${_node_fix}/${_name}.xml $<TARGET_FILE:test_node_schema>
            ${CMAKE_CURRENT_BINARY_DIR}/node-schema-${_name}.json)
endforeach()
dpt_golden_test(node_golden_sl390s-3m2070-es1000_json ${_node_fix}/sl390s-3m2070-es1000.json
  ${CMAKE_COMMAND} -E chdir ${DPT_TEST_DATA}/.. $<TARGET_FILE:dpt-topo> --input tests/topology/fixtures/sl390s-3m2070-es1000.xml --json)
# The ignored VGA is named on stderr too, in both output modes (stdout: the goldens above).
foreach(mode text json)
  set(extra "")
  if(mode STREQUAL "json")
    set(extra ";--json")
  endif()
  add_test(NAME node_es1000_warning_stderr_${mode}
    COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:dpt-topo>;--input;${_node_fix}/sl390s-3m2070-es1000.xml${extra}"
            -DEXPECT_EXIT=0 "-DSTDOUT_REGEX=(3 GPUs|\"busid\": \"0000:06:00.0\")"
            "-DSTDERR_REGEX=^dpt-topo: warning: ignored display controller 1002:515e \\(ATI Technologies Inc ES1000\\) at 0000:01:03.0: not an NVIDIA device, CUDA cannot drive it\n$"
            -P ${_node_expect})
endforeach()

# The plan: --node-xml-dir on mixed nodes gives each host its own GPU count; a node whose only
# display controller is a server VGA (hwloc's 96em64t-4n4d3ca2co-pci.xml: an ES1000) runs CPU ranks.
set(_mixed ${CMAKE_CURRENT_BINARY_DIR}/node-xml-dir-mixed)
file(MAKE_DIRECTORY ${_mixed})
file(COPY_FILE ${_node_fix}/sl390s-3m2070-es1000.xml ${_mixed}/n1.xml ONLY_IF_DIFFERENT)
file(COPY_FILE ${CMAKE_CURRENT_SOURCE_DIR}/hwloc-xml/hwloc-2.9.0/tests/hwloc/xml/96em64t-4n4d3ca2co-pci.xml
     ${_mixed}/n2.xml ONLY_IF_DIFFERENT)
file(COPY_FILE ${_node_mn1} ${_mixed}/n3.xml ONLY_IF_DIFFERENT)
add_test(NAME node_plan_node_xml_dir_mixed_gpus
  COMMAND $<TARGET_FILE:dpt-topo> plan --nodes n[1-3] --node-xml-dir ${_mixed} --no-report)
set_tests_properties(node_plan_node_xml_dir_mixed_gpus PROPERTIES PASS_REGULAR_EXPRESSION
  "12 ranks on 3 nodes.*\n +0 +n1 +flat +0-2 +3 +mlx4_0\n +1 +n2 +flat +3 +0 +-\n +2 +n3 +flat +4-11 +8 +mlx5_0.*\n +0 +n1 +0 +0 +0000:06:00.0 .*\n +2 +n1 +2 +2 +0000:14:00.0 .*\n +3 +n2 +0 +- +- ")

# The differential test against hwloc's own tools (Debian's hwloc 2.9: lstopo, hwloc-calc,
# hwloc-info): every hwloc XML the tests have, read alike; differences only where listed in
# the script, with their reason.  hwloc leaks a half-imported file it refuses (LSan, ASan build).
add_test(NAME topo_hwloc_diff
  COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/diff/hwloc_diff.py --dpt-topo $<TARGET_FILE:dpt-topo>
          --min-loaded 100 --manifest ${CMAKE_CURRENT_SOURCE_DIR}/hwloc-xml/MANIFEST
          ${CMAKE_CURRENT_SOURCE_DIR}/hwloc-xml ${DPT_FIXTURES}/hwloc ${_node_fix} ${CMAKE_SOURCE_DIR}/etc/mn1
          ${_node_fix}/bad/drawing.svg ${DPT_TEST_DATA}/fuzz/corpus/node_xml/hwloc-crash-no-complete-sets.xml)
set_tests_properties(topo_hwloc_diff PROPERTIES LABELS topology TIMEOUT 300
  ENVIRONMENT "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/node/lsan-hwloc.supp;ASAN_OPTIONS=fast_unwind_on_malloc=0")
