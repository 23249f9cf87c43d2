// Included first by linalg_avx2.cpp and linalg_avx512.cpp (never elsewhere): every standard and
// intrinsic header that Eigen/Core includes, at the build's baseline target. What a unit
// includes after its `#pragma GCC target` is compiled for that level, so the standard library's
// templates (weak symbols that the linker may pick for the whole program) must be defined here,
// before it; only the unit's renamed Eigen namespace is compiled for the level.
// (No #pragma once: a unit includes it exactly once, as its first line.)
#include <algorithm>
#include <array>
#include <atomic>
#include <cassert>
#include <cerrno>
#include <climits>
#include <cmath>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iosfwd>
#include <iostream>
#include <limits>
#include <new>
#include <sstream>
#include <string>
#include <type_traits>
#include <immintrin.h>
#ifdef _OPENMP
#include <omp.h>
#endif
