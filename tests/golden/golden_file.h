// Golden files (tests/golden/README.md): bytes our writers produced once, checked in beside this
// file, and compared byte for byte with what the writers produce now, so that a change of a file
// format fails a test instead of passing a round trip through the changed writer and reader.
//
// SY_UPDATE_GOLDEN=1 in the environment makes MatchesGolden write the new bytes over the golden
// file instead of comparing (a format change made on purpose; review the diff and commit it).
//
// Thread-safety: test-only helpers, one thread.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "runtime/core/env.h"

namespace sy::golden {

// The folder of the golden files (the source tree, tests/golden).
inline std::string GoldenPath(const std::string& name) {
  return std::string(SY_GOLDEN_DIR) + "/" + name;
}

inline bool UpdatingGoldens() { return EnvInt("SY_UPDATE_GOLDEN", 0) == 1; }

// The whole file, or an empty vector with a test failure when it cannot be read.
inline std::vector<uint8_t> ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// `produced` against the golden file `name`: equal sizes and bytes, else the first differing
// offset. With SY_UPDATE_GOLDEN=1: writes `produced` as the golden file and succeeds.
inline ::testing::AssertionResult MatchesGolden(std::span<const uint8_t> produced,
                                                const std::string& name) {
  const std::string path = GoldenPath(name);
  if (UpdatingGoldens()) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(produced.data()),
              static_cast<std::streamsize>(produced.size()));
    out.close();
    if (!out.good())
      return ::testing::AssertionFailure() << "SY_UPDATE_GOLDEN: cannot write " << path;
    std::printf("SY_UPDATE_GOLDEN: wrote %s (%zu bytes)\n", path.c_str(), produced.size());
    return ::testing::AssertionSuccess();
  }
  const std::vector<uint8_t> golden = ReadFileBytes(path);
  const size_t common = std::min(golden.size(), produced.size());
  size_t first = 0;
  while (first < common && golden[first] == produced[first]) ++first;
  if (first == common && golden.size() == produced.size()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "the bytes written now differ from the golden file " << path << " (" << produced.size()
         << " bytes against " << golden.size() << "; first difference at byte " << first
         << "). If the format changed on purpose, rerun with SY_UPDATE_GOLDEN=1 and "
         << "commit the new file (tests/golden/README.md); otherwise the writer broke the format";
}

}  // namespace sy::golden
