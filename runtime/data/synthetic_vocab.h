// The vocabulary and task list of the built-in synthetic multi-task data.
//
// Token ids:
//   0  kPad        padding after the answer (never scored)
//   1  kSep        ends the input; the answer follows
//   2  kEos        ends the answer (scored: the model must learn where an answer stops)
//   3  kPlus       "+" between the operands of modular addition
//   8..12          one tag per task, the first token of every example (kTaskTagBase + task)
//   16 + s         symbol s, for s in [0, num_symbols). Symbols 0..9 double as the digits 0..9.
// Ids 4..7 and 13..15 are reserved. The vocabulary size is kFirstSymbol + num_symbols.
//
// An example is laid out as
//   tag  x_1 .. x_n  SEP  y_1 .. y_m  EOS  PAD ...
// and only the answer y_1 .. y_m EOS is scored.
//
// Tasks (each needs a different skill, so experts can specialise):
//   copy     y = x                          x: n random symbols
//   reverse  y = x reversed
//   sort     y = x sorted ascending
//   modadd   y = (a + b) mod p              x: digits(a) + digits(b), each `width` digits,
//                                           most significant first, width = digits of p - 1
//   markov   y = the chain's continuation   x: a walk of a fixed random sparse Markov chain over
//                                           the symbols (runtime/data/markov_chain.h)
// Thread-safety: constants.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace sy {

inline constexpr int32_t kPad = 0;
inline constexpr int32_t kSep = 1;
inline constexpr int32_t kEos = 2;
inline constexpr int32_t kPlus = 3;
inline constexpr int32_t kTaskTagBase = 8;
inline constexpr int32_t kFirstSymbol = 16;

enum class SyntheticTask : uint8_t { kCopy, kReverse, kSort, kModAdd, kMarkov };
inline constexpr int kNumSyntheticTasks = 5;

inline constexpr std::array<std::string_view, kNumSyntheticTasks> kSyntheticTaskNames = {
    "copy", "reverse", "sort", "modadd", "markov"};

inline constexpr int32_t TaskTag(SyntheticTask task) {
  return kTaskTagBase + static_cast<int32_t>(task);
}
inline constexpr int32_t SymbolToken(int symbol) { return kFirstSymbol + symbol; }
inline constexpr int32_t DigitToken(int digit) { return kFirstSymbol + digit; }

}  // namespace sy
