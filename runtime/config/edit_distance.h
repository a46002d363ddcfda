// Edit distance and "did you mean" suggestions for config keys and enum values.
//
// EditDistance is the optimal-string-alignment distance (Levenshtein plus adjacent
// transpositions), so the common typo "stpes" is one edit from "steps".
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace sy {

size_t EditDistance(std::string_view a, std::string_view b);

// The candidate nearest to `word`, or nullopt when none is close enough to be a plausible typo
// (distance at most max(2, word.size() / 3)). Ties go to the earliest candidate.
std::optional<std::string> NearestMatch(std::string_view word,
                                        std::span<const std::string> candidates);

}  // namespace sy
