# cmake -P script: the exported package config (cmake/tpullmConfig.cmake.in) must require
# exactly the packages whose headers the installed headers (include/tpullm) include (OpenMP:
# whose pragmas they use).
# Usage: cmake -DROOT=<source dir> -P dependencies_test.cmake
cmake_minimum_required(VERSION 3.25)
set(patterns
  "Eigen3=#include <Eigen/"
  "Boost=#include <boost/"
  "nlohmann_json=#include <nlohmann/"
  "xtensor=#include <xtensor/"
  "xtl=#include <xtl/"
  "xsimd=#include <xsimd/"
  "OpenMP=#pragma omp"
  "FlatBuffers=#include <flatbuffers/"
  "benchmark=#include <benchmark/"
  "Catch2=#include <catch2/")
# Found for the static core library's own link dependencies (PCRE2 and utf8proc through
# pkg-config, for the tokenizer), which no header includes.
set(link_only PkgConfig)
file(READ ${ROOT}/cmake/tpullmConfig.cmake.in config)
string(REGEX MATCHALL "find_dependency\\(([A-Za-z0-9_]+)" deps "${config}")
list(TRANSFORM deps REPLACE "find_dependency\\(" "")
file(GLOB_RECURSE headers ${ROOT}/include/tpullm/*.hpp)
list(FILTER headers EXCLUDE REGEX "/include/tpullm/devtools/") # not installed
set(sources "")
foreach(h IN LISTS headers)
  file(READ ${h} text)
  string(APPEND sources "${text}")
endforeach()
set(known "")
set(errors "")
foreach(entry IN LISTS patterns)
  string(REPLACE "=" ";" pair "${entry}")
  list(GET pair 0 package)
  list(GET pair 1 include)
  list(APPEND known ${package})
  string(FIND "${sources}" "${include}" at)
  list(FIND deps ${package} required)
  if(at GREATER -1 AND required EQUAL -1)
    string(APPEND errors "\n  headers include '${include}...' but the config does not require ${package}")
  elseif(at EQUAL -1 AND NOT required EQUAL -1)
    string(APPEND errors "\n  the config requires ${package} but no header includes '${include}...'")
  endif()
endforeach()
foreach(d IN LISTS deps)
  if(NOT d IN_LIST known AND NOT d IN_LIST link_only)
    string(APPEND errors "\n  the config requires ${d}, unknown to this test: add its include pattern")
  endif()
endforeach()
if(errors)
  message(FATAL_ERROR "dependencies do not tell the truth:${errors}")
endif()
message(STATUS "config requires exactly: ${deps}")
