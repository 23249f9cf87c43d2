# cmake -P script: fails when any project C++ source differs from clang-format's output.
file(GLOB_RECURSE sources
  ${ROOT}/include/*.hpp ${ROOT}/tools/*.cpp ${ROOT}/tools/*.hpp ${ROOT}/bench/*.cpp
  ${ROOT}/bench/*.hpp ${ROOT}/tests/*.cpp ${ROOT}/tests/*.hpp ${ROOT}/examples/*.cpp)
list(FILTER sources EXCLUDE REGEX "/tests/data/")
execute_process(COMMAND ${CLANG_FORMAT} --dry-run --Werror ${sources}
  RESULT_VARIABLE rc ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "clang-format differences (run scripts/format.sh):\n${err}")
endif()
