#pragma once
/// Typed attribute values that op structs hold as members, and the enums they use.
/// The printer and parser handle exactly these member types:
///   bool -> `true`, std::int64_t -> `5 : i64`, float -> `1e-06 : f32`,
///   std::vector<std::int64_t> -> `[0, 2, 1]`, std::string -> `"text"`, SymbolRef -> `@name`,
///   DType -> `bf16`, and any enum with EnumNames -> its bare name (`halves`).

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tpullm/ir/dtype.hpp"

namespace tpullm::ir {

/// A reference to a module-level symbol (a weight), spelled `@name`.
struct SymbolRef {
  std::string name;
  friend bool operator==(const SymbolRef&, const SymbolRef&) = default;
};

/// Spelling table of an enum attribute; specialize with `static constexpr std::array items`.
template <class E>
struct EnumNames;

/// True for enums that have an EnumNames table.
template <class E>
concept NamedEnum = std::is_enum_v<E> && requires {
  EnumNames<E>::items;
};

/// Spelling of an enum attribute value.
template <NamedEnum E>
constexpr std::string_view enum_name(E e) {
  for (const auto& [v, n] : EnumNames<E>::items)
    if (v == e)
      return n;
  return "?";
}

/// Parses an enum attribute spelling; nullopt when not a valid name.
template <NamedEnum E>
constexpr std::optional<E> parse_enum(std::string_view s) {
  for (const auto& [v, n] : EnumNames<E>::items)
    if (n == s)
      return v;
  return std::nullopt;
}

/// How Rope pairs the elements of a head: `halves` rotates (x[i], x[i + d/2]) as HF
/// rotate_half does; `interleaved` rotates (x[2i], x[2i + 1]) as Meta / GPT-J do.
enum class RopeMode : std::uint8_t { halves, interleaved };
template <>
struct EnumNames<RopeMode> {
  static constexpr std::array<std::pair<RopeMode, std::string_view>, 2> items = {
      {{RopeMode::halves, "halves"}, {RopeMode::interleaved, "interleaved"}}};
};

/// Gate activation of a gated MLP: out = down(act(x * gate) * (x * up)).
enum class Activation : std::uint8_t { silu };
template <>
struct EnumNames<Activation> {
  static constexpr std::array<std::pair<Activation, std::string_view>, 1> items = {
      {{Activation::silu, "silu"}}};
};

} // namespace tpullm::ir
