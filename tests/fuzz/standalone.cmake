# Used by run-fuzzers.sh (as CMAKE_PROJECT_INCLUDE) only while tests/CMakeLists.txt
# does not add_subdirectory(fuzz) itself: include()s tests/fuzz/CMakeLists.txt at
# the end of the top-level directory, once every library target exists.
# (EVAL CODE: the path is expanded now, not when the deferred call runs.)
cmake_language(EVAL CODE
  "cmake_language(DEFER DIRECTORY \"${CMAKE_SOURCE_DIR}\" CALL include \"${CMAKE_CURRENT_LIST_DIR}/CMakeLists.txt\")")
