# dpt-train --backend cuda with no visible CUDA device (the test sets
# CUDA_VISIBLE_DEVICES=-1): must exit 1 (runtime failure, not usage, not a
# crash), quickly, saying there is no usable CUDA device and why.
execute_process(COMMAND ${TRAIN} --backend cuda --dataset synthetic --iterations 1
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE errout TIMEOUT 30)
message(STATUS "exit ${rc}; stderr: ${errout}")
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "dpt-train --backend cuda exited '${rc}', expected 1")
endif()
foreach(want "no usable CUDA device" "cudaGetDeviceCount" "--backend cpu")
  string(FIND "${errout}" "${want}" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "dpt-train's message lacks '${want}': ${errout}")
  endif()
endforeach()
