// Eigen settings shared by the three vector levels of the interpreter's products
// (linalg_products.hpp), included right before each level's Eigen/Core.
//
// Deterministic sums: below this size Eigen evaluates a product coefficient by coefficient with
// vectorized dot products whose order of summation follows the operands' addresses (it peels
// elements until a packet is aligned). At 16-byte packets (the baseline) every heap block is
// aligned alike, but at 32- and 64-byte packets the same product could round differently from
// one run to the next. 0 sends every product through Eigen's packed GEMM / GEMV, whose order
// does not depend on alignment.
#define EIGEN_GEMM_TO_COEFFBASED_THRESHOLD 0

// One thread per product: linalg::matmul splits large products into column blocks itself
// (threads_for), and Eigen's own OpenMP split of the small ones (below that threshold, called
// outside any parallel region) cost up to ten times their work in fork, join and spin-waiting,
// worst when the cores are shared (tpullm-make-quant-models: 19 s of CPU with it, 2 s without).
#define EIGEN_DONT_PARALLELIZE
