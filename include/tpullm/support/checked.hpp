#pragma once
/// Overflow-checked integer arithmetic for sizes, shapes and offsets. Signed overflow is
/// undefined behaviour in C++, so every size computed from outside data goes through these.

#include <concepts>
#include <optional>

namespace tpullm {

/// a + b, or nullopt when the exact result does not fit in T.
template <std::integral T>
constexpr std::optional<T> checked_add(T a, T b) noexcept {
  T r{};
  if (__builtin_add_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

/// a - b, or nullopt when the exact result does not fit in T.
template <std::integral T>
constexpr std::optional<T> checked_sub(T a, T b) noexcept {
  T r{};
  if (__builtin_sub_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

/// a * b, or nullopt when the exact result does not fit in T.
template <std::integral T>
constexpr std::optional<T> checked_mul(T a, T b) noexcept {
  T r{};
  if (__builtin_mul_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

} // namespace tpullm
