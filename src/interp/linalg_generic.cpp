// The interpreter's f64 products at the build's baseline vector level (any CPU).
#include "linalg_eigen_config.hpp"
#include <Eigen/Core>

#include "linalg_products.hpp"

#define TPULLM_LINALG_PRODUCTS generic_products
#define TPULLM_LINALG_NAME "baseline"
#include "linalg_products.inc"
