# cmake -DFROM=DIR -DTO=DIR -P copy_fixture.cmake: TO becomes a copy of FROM, a fixture folder
# another build tree of the same sources has made (scripts/test.sh: the Release tree's, for the
# sanitizer tree), refused unless its maker finished it (FROM/.complete, written last).
if(NOT EXISTS "${FROM}/.complete")
  message(FATAL_ERROR "${FROM}: not a finished fixture (no .complete); run its tree's ctest first")
endif()
file(REMOVE_RECURSE "${TO}")
file(COPY "${FROM}/" DESTINATION "${TO}")
