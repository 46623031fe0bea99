# ctest's `format` test: clang-format --dry-run -Werror over the project's C++ and CUDA sources.
file(GLOB_RECURSE files RELATIVE "${SOURCE_DIR}"
     "${SOURCE_DIR}/src/*.h" "${SOURCE_DIR}/src/*.cpp"
     "${SOURCE_DIR}/kernels/*.h" "${SOURCE_DIR}/kernels/*.cpp" "${SOURCE_DIR}/kernels/*.cu"
     "${SOURCE_DIR}/kernels/*.cuh" "${SOURCE_DIR}/bench/*.h" "${SOURCE_DIR}/bench/*.cpp"
     "${SOURCE_DIR}/tools/*.h" "${SOURCE_DIR}/tools/*.cpp" "${SOURCE_DIR}/tests/*.h"
     "${SOURCE_DIR}/tests/*.cpp" "${SOURCE_DIR}/tests/*.cu" "${SOURCE_DIR}/dev/*.cu"
     "${SOURCE_DIR}/dev/*.cpp" "${SOURCE_DIR}/python/*.cpp" "${SOURCE_DIR}/python/*.h")
set(unformatted "")
foreach(file IN LISTS files)
  execute_process(COMMAND "${CLANG_FORMAT}" --dry-run -Werror "${file}"
                  WORKING_DIRECTORY "${SOURCE_DIR}" RESULT_VARIABLE result OUTPUT_QUIET ERROR_QUIET)
  if(NOT result EQUAL 0)
    list(APPEND unformatted "${file}")
  endif()
endforeach()
list(LENGTH files count)
if(unformatted)
  string(REPLACE ";" "\n  " listing "${unformatted}")
  message(FATAL_ERROR "not clang-formatted (run clang-format -i on them):\n  ${listing}")
endif()
message(STATUS "${count} files clang-formatted")
