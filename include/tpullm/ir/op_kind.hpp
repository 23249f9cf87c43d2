#pragma once
/// Op kinds and the op variant, both expanded from ops.def so they cannot drift apart.

#include <array>
#include <concepts>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>
#include <variant>

#include "tpullm/ir/builtin_ops.hpp"
#include "tpullm/ir/op_policy.hpp"
#include "tpullm/ir/top_ops.hpp"
#include "tpullm/ir/tpu_ops.hpp"

namespace tpullm::ir {

/// Every op kind, in ops.def order (OpKind::top_MatMul, OpKind::tpu_MatMul, ...).
enum class OpKind : std::uint16_t {
#define TPULLM_OP(D, N) D##_##N,
#include "tpullm/ir/ops.def"
#undef TPULLM_OP
};

/// The op sets: neutral builtins, Top (model semantics) and Tpu (target decisions).
enum class Dialect : std::uint8_t { builtin, top, tpu };

/// Text prefix of a dialect ("builtin", "top", "tpu").
constexpr std::string_view dialect_name(Dialect d) {
  switch (d) {
  case Dialect::builtin:
    return "builtin";
  case Dialect::top:
    return "top";
  case Dialect::tpu:
    return "tpu";
  }
  return "?";
}

namespace detail {
template <class... Ts>
struct TypeList {};
struct EndOfOps {};
template <class Acc, class... Ts>
struct VariantDropLast;
template <class... Acc, class Last>
struct VariantDropLast<TypeList<Acc...>, Last> {
  using type = std::variant<Acc...>;
};
template <class... Acc, class T, class U, class... Rest>
struct VariantDropLast<TypeList<Acc...>, T, U, Rest...> {
  using type = typename VariantDropLast<TypeList<Acc..., T>, U, Rest...>::type;
};
} // namespace detail

/// One alternative per op kind, in ops.def order (variant index == OpKind value).
using OpVariant = typename detail::VariantDropLast<detail::TypeList<>,
#define TPULLM_OP(D, N) D::N##Op,
#include "tpullm/ir/ops.def"
#undef TPULLM_OP
                                                   detail::EndOfOps>::type;

/// Number of op kinds.
inline constexpr std::size_t kNumOpKinds = std::variant_size_v<OpVariant>;

/// Text names, indexed by OpKind ("top.MatMul", ...).
inline constexpr std::array<std::string_view, kNumOpKinds> kOpNames = {
#define TPULLM_OP(D, N) #D "." #N,
#include "tpullm/ir/ops.def"
#undef TPULLM_OP
};

/// Dialects, indexed by OpKind.
inline constexpr std::array<Dialect, kNumOpKinds> kOpDialects = {
#define TPULLM_OP(D, N) Dialect::D,
#include "tpullm/ir/ops.def"
#undef TPULLM_OP
};

/// The dialect op kind `k` belongs to.
constexpr Dialect dialect_of(OpKind k) {
  return kOpDialects[static_cast<std::size_t>(k)];
}

/// Text name of an op kind.
constexpr std::string_view op_name(OpKind k) {
  return kOpNames[static_cast<std::size_t>(k)];
}

/// Op kind from its text name; nullopt when unknown.
constexpr std::optional<OpKind> parse_op_name(std::string_view n) {
  for (std::size_t i = 0; i < kNumOpKinds; ++i)
    if (kOpNames[i] == n)
      return static_cast<OpKind>(i);
  return std::nullopt;
}

/// The OpKind of op struct T.
template <class T>
constexpr OpKind kind_of() {
  constexpr std::size_t idx = []<std::size_t... I>(std::index_sequence<I...>) {
    std::size_t r = 0;
    ((std::is_same_v<T, std::variant_alternative_t<I, OpVariant>> ? (r = I, 0) : 0), ...);
    return r;
  }
  (std::make_index_sequence<kNumOpKinds>{});
  static_assert(std::is_same_v<T, std::variant_alternative_t<idx, OpVariant>>, "not an op struct");
  return static_cast<OpKind>(idx);
}

/// A default-constructed op struct of kind `k` (the parser fills its attributes).
OpVariant make_op(OpKind k);

/// The dialect of op struct T.
template <class T>
constexpr Dialect dialect_of() {
  return dialect_of(kind_of<T>());
}

/// True when op struct T declares its policy (`static constexpr OpPolicy policy`).
template <class T>
concept DeclaresPolicy = requires {
  { T::policy } -> std::convertible_to<OpPolicy>;
};

/// True when op struct T can say where its result lies in its operand's bytes (an offset view).
template <class T>
concept HasViewOffset = requires(const T& op, const TensorType& t) {
  { op.view_offset(t) } -> std::same_as<std::int64_t>;
};

/// The policy of op struct T; builtin and Top ops have the empty one. A Tpu op without a
/// `policy` member fails to compile here (the instantiation names the op).
template <class T>
constexpr OpPolicy policy_of() {
  static_assert(dialect_of<T>() != Dialect::tpu || DeclaresPolicy<T>,
                "a Tpu op struct must declare `static constexpr OpPolicy policy{...}` "
                "(ir/op_policy.hpp)");
  if constexpr (DeclaresPolicy<T>) {
    // A KV op names its cache exactly when its policy says it touches one: a new op that
    // writes KV cannot be planned as an ordinary arena value for want of a policy field.
    constexpr bool names_cache = std::derived_from<T, KvCacheRef>;
    static_assert(names_cache == (T::policy.effect == MemoryEffect::writes_kv ||
                                  T::policy.kv_cache_operand >= 0),
                  "a Tpu op derives from KvCacheRef exactly when its policy writes KV "
                  "(effect = writes_kv) or names a kv_cache_operand");
    static_assert(!T::policy.offset_view || HasViewOffset<T>,
                  "a Tpu op whose policy is an offset_view declares "
                  "`std::int64_t view_offset(const TensorType&) const`");
    static_assert(T::policy.split != SplitRule::attention || T::policy.head_operand >= 0,
                  "an attention split names the operand that counts the heads (head_operand)");
    return T::policy;
  } else {
    return OpPolicy{};
  }
}

/// Policies, indexed by OpKind (expanding ops.def checks every Tpu op declares one).
inline constexpr std::array<OpPolicy, kNumOpKinds> kOpPolicies = {
#define TPULLM_OP(D, N) policy_of<D::N##Op>(),
#include "tpullm/ir/ops.def"
#undef TPULLM_OP
};

/// The policy of op kind `k`.
constexpr const OpPolicy& policy_of(OpKind k) {
  return kOpPolicies[static_cast<std::size_t>(k)];
}

/// Calls f(op struct) for the alternative held by v.
template <class V, class F>
decltype(auto) visit_op(V&& v, F&& f) {
  return std::visit(std::forward<F>(f), std::forward<V>(v));
}

/// The KV cache op `v` addresses (ops whose policy writes KV or names a kv_cache_operand), or
/// null.
inline const KvCacheRef* kv_cache_of(const OpVariant& v) {
  return visit_op(v, [](const auto& o) -> const KvCacheRef* {
    if constexpr (std::derived_from<std::decay_t<decltype(o)>, KvCacheRef>)
      return &o;
    else
      return nullptr;
  });
}

/// Where the result of an offset_view op lies in operand 0 (of type `in`): a byte offset, or -1
/// when the op must copy (ops that are no offset view: -1).
inline std::int64_t view_offset(const OpVariant& v, const TensorType& in) {
  return visit_op(v, [&](const auto& o) -> std::int64_t {
    if constexpr (HasViewOffset<std::decay_t<decltype(o)>>)
      return o.view_offset(in);
    else
      return -1;
  });
}

} // namespace tpullm::ir
