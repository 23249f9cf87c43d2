# cmake -P script: fails when a lower layer includes a layer above it, so the arrows run one way
# (docs/architecture.md "Layers"): frontend -> compiler (returns data) -> bundle (writes and reads
# that data) -> runtime (opens bundles, makes the one executor) -> calibration (runs the runtime's
# Session to measure an int8 table); mpi (the MPI transport of pipeline runs) sits above the
# runtime, and nothing in the library includes it. Each rule names the areas
# (include/tpullm/<area>/ and src/<area>/) that must not include `tpullm/<forbidden>/`.
set(below_runtime bundle compiler frontend conversion ir codegen memory tiling pass rewrite target
    text interp kernels support grammar)
set(below_compiler frontend conversion ir codegen memory tiling pass rewrite target text interp
    kernels support grammar)
# A list cannot hold a list: a rule is "forbidden|area,area,...".
string(REPLACE ";" "," below_runtime "${below_runtime}")
string(REPLACE ";" "," below_compiler "${below_compiler}")
set(rules
  "mpi|calibration,runtime,${below_runtime}"
  "calibration|runtime,${below_runtime}"
  "runtime|${below_runtime}"
  "compiler|bundle,${below_compiler}"
  "bundle|compiler,${below_compiler}")
set(bad "")
foreach(rule IN LISTS rules)
  string(REPLACE "|" ";" parts "${rule}")
  list(GET parts 0 forbidden)
  list(GET parts 1 areas)
  string(REPLACE "," ";" areas "${areas}")
  foreach(area IN LISTS areas)
    file(GLOB_RECURSE files ${ROOT}/include/tpullm/${area}/* ${ROOT}/src/${area}/*)
    foreach(f IN LISTS files)
      if(NOT f MATCHES "\\.(hpp|cpp|h|inc|def)$")
        continue()
      endif()
      file(STRINGS ${f} hits REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]tpullm/${forbidden}/")
      foreach(h IN LISTS hits)
        file(RELATIVE_PATH rel ${ROOT} ${f})
        string(APPEND bad "  ${rel} (${area} must not include ${forbidden}/): ${h}\n")
      endforeach()
    endforeach()
  endforeach()
endforeach()
if(bad)
  message(FATAL_ERROR "include arrows that run upwards:\n${bad}")
endif()
