// The test data folder (tests/data of the source tree), as an absolute path. It is compiled into
// one generated translation unit per build tree instead of into every test source, so the other
// test sources compile to the same objects in any clone (ccache hits across folders).
#pragma once

/// Absolute path of tests/data in the source tree this build was configured from.
const char* tpullm_test_data_dir();

#define TPULLM_TEST_DATA_DIR tpullm_test_data_dir()
