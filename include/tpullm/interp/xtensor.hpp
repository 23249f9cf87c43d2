#pragma once
/// The xtensor headers the interpreter uses, and one fix that makes xtensor 0.24 (up to
/// 0.24.3, Debian 12's) correct under C++20 with GCC: include xtensor through this header.
///
/// xtensor picks the temporary type of a view or reducer from its shape type
/// (xt::detail::xtype_for_shape). For the dynamic shape xt::svector<std::size_t, 4, A, Init>
/// it has an xarray specialization, but guarded by `__cplusplus == 201703L`; under C++20, GCC's
/// relaxed template-template matching then selects the `S<X, N>` specialization meant for
/// std::array and yields a *rank-4 xtensor*. Every assignment through a temporary of a strided
/// view or an immediate reduction then writes nothing or allocates garbage sizes (seen as
/// std::bad_alloc / bad_array_new_length). Later xtensor keys the specialization on
/// __cpp_template_template_args instead; the same specialization is provided here for the
/// affected versions, and the static_assert below stops any other version that has the bug.
/// (A translation unit that instantiates such views before including this header would see the
/// unfixed types: include xtensor through this header first.)

#include <cstddef>
#include <type_traits>

#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#if defined(__GNUC__) && !defined(__clang__) && __cplusplus > 201703L &&                           \
    XTENSOR_VERSION_MAJOR == 0 && XTENSOR_VERSION_MINOR == 24 && XTENSOR_VERSION_PATCH <= 3
namespace xt::detail {
template <template <class, std::size_t, class, bool> class S, class X, std::size_t N, class A,
          bool Init>
struct xtype_for_shape<S<X, N, A, Init>> {
  template <class T, layout_type L>
  using type = xarray<T, L>;
};
} // namespace xt::detail
#endif

static_assert(std::is_same_v<xt::detail::xtype_for_shape<xt::svector<std::size_t, 4>>::type<
                                 double, xt::layout_type::row_major>,
                             xt::xarray<double, xt::layout_type::row_major>>,
              "this xtensor makes rank-4 temporaries of dynamic shapes under C++20 (see "
              "tpullm/interp/xtensor.hpp): extend the fix to this version");

#include <xtensor/xmanipulation.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xstrided_view.hpp>
#include <xtensor/xview.hpp>
