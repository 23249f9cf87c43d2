#pragma once
/// Typed attribute values that op structs hold as members, and the enums they use.
/// The printer, the parser, equality and hashing handle exactly these member types:
///   bool -> `true`, std::int64_t -> `5 : i64`, float -> `1e-06 : f32`,
///   std::vector<std::int64_t> -> `[0, 2, 1]`, std::string -> `"text"`, SymbolRef -> `@name`,
///   DType -> `bf16`, any enum with EnumNames -> its bare name (`halves`),
///   a struct with `fields()` (AttrStruct) -> `{key = value, ...}`,
///   std::optional<T> -> the value when present, nothing (the key is left out) when absent,
///   std::vector<T> of any other member type -> `[v, v, ...]`.
/// Inside a struct, integers and floats print without their `: i64` / `: f32` suffix (the
/// parser accepts both spellings everywhere).

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

/// A structured attribute: a plain struct listing its members through
/// `template <class S, class F> static void fields(S& self, F&& f)` calling f("key", self.m)
/// for each (the pattern op structs use for `attrs`).
template <class T>
concept AttrStruct = requires(T& t) {
  T::fields(t, [](const char*, auto&) {});
};

/// True for std::optional<T>.
template <class T>
inline constexpr bool is_optional_v = false;
template <class T>
inline constexpr bool is_optional_v<std::optional<T>> = true;

/// True for std::vector<T>.
template <class T>
inline constexpr bool is_vector_v = false;
template <class T>
inline constexpr bool is_vector_v<std::vector<T>> = true;

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
