// Out-of-line definitions of tpullm/runtime/embeddings.hpp (compiled once into tpullm_core).
#include "tpullm/runtime/embeddings.hpp"

#include <cmath>

namespace tpullm::runtime {

std::string_view to_string(Pooling p) noexcept {
  return p == Pooling::mean ? "mean" : "last";
}

Pooling parse_pooling(std::string_view s, std::string_view where) {
  if (s == "last")
    return Pooling::last;
  if (s == "mean")
    return Pooling::mean;
  throw Error(ErrorKind::invalid_input, std::string(where),
              str_cat("pooling must be 'last' or 'mean', got '", s, "'"));
}

std::vector<float> embed(Session& session, const std::vector<std::int32_t>& tokens,
                         const EmbedOptions& options) {
  Stages& exec = session.stages();
  check(exec.has_function("final_norm"), ErrorKind::unsupported, "embeddings",
        "this bundle has no final_norm stage; recompile it");
  const StageHandle norm = exec.resolve("final_norm");
  const std::int64_t H = session.dims().hidden;
  std::vector<float> normed(static_cast<std::size_t>(H));
  std::vector<double> sum(static_cast<std::size_t>(H), 0.0);
  std::int64_t rows = 0;
  session.reset();
  session.prefill_hidden(tokens, options.pooling == Pooling::mean,
                         [&](std::int64_t, std::span<const float> hidden) {
                           const ConstBytes in[] = {cbytes(hidden.data(), H)};
                           const MutBytes out[] = {mbytes(normed.data(), H)};
                           exec.run(norm, in, out);
                           for (std::size_t j = 0; j < sum.size(); ++j)
                             sum[j] += normed[j];
                           ++rows;
                         });
  double norm2 = 0;
  for (double& x : sum) {
    x /= static_cast<double>(rows);
    norm2 += x * x;
  }
  const double scale = options.normalize && norm2 > 0 ? 1.0 / std::sqrt(norm2) : 1.0;
  std::vector<float> out(sum.size());
  for (std::size_t j = 0; j < sum.size(); ++j)
    out[j] = static_cast<float>(sum[j] * scale);
  return out;
}

} // namespace tpullm::runtime
