#pragma once
/// The canonicalization pattern set used by the `canonicalize` pass. Add a new canonical form
/// by writing its pattern in the file of its op family and listing it here.

#include "tpullm/rewrite/patterns/cast.hpp"
#include "tpullm/rewrite/patterns/concat.hpp"
#include "tpullm/rewrite/patterns/permute.hpp"
#include "tpullm/rewrite/patterns/reshape.hpp"
#include "tpullm/rewrite/patterns/slice.hpp"

namespace tpullm::rewrite::patterns {

/// Every canonicalization pattern: folds of no-op shape/dtype ops and chains of them.
inline PatternSet canonicalization_patterns() {
  PatternSet set;
  set.add<ReshapeToSameShape>();
  set.add<ReshapeOfReshape>();
  set.add<PermuteIdentity>();
  set.add<PermuteOfPermute>();
  set.add<SliceWhole>();
  set.add<ConcatSingle>();
  set.add<CastToSameType>();
  return set;
}

} // namespace tpullm::rewrite::patterns
