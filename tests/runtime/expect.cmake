# Run CMD; require exit status EXPECT_EXIT and stdout+stderr matching REGEX.
#   cmake -DCMD="prog;args" -DEXPECT_EXIT=2 -DREGEX="..." -P expect.cmake
execute_process(COMMAND ${CMD} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc
                TIMEOUT 120)
if(NOT rc STREQUAL "${EXPECT_EXIT}")
  message(FATAL_ERROR "exit status ${rc}, expected ${EXPECT_EXIT}\ncommand: ${CMD}\nstdout:\n${out}\nstderr:\n${err}")
endif()
if(DEFINED REGEX AND NOT "${out}${err}" MATCHES "${REGEX}")
  message(FATAL_ERROR "output does not match '${REGEX}'\ncommand: ${CMD}\nstdout:\n${out}\nstderr:\n${err}")
endif()
