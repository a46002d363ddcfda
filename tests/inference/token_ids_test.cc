// ParseTokenIds / FormatTokenIds: token-id lists as typed on a command line.
#include "inference/token_ids.h"

#include <gtest/gtest.h>

#include <vector>

namespace sy {
namespace {

TEST(TokenIdsTest, ParsesCommaAndSpaceSeparatedIds) {
  EXPECT_EQ(*ParseTokenIds("8,19,23", "--ids"), (std::vector<int32_t>{8, 19, 23}));
  EXPECT_EQ(*ParseTokenIds(" 1 2\t3 ,4\n", "--ids"), (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(*ParseTokenIds("0,2147483647", "--ids"), (std::vector<int32_t>{0, 2147483647}));
  EXPECT_TRUE(ParseTokenIds("", "--ids")->empty());
  EXPECT_TRUE(ParseTokenIds(" , ", "--ids")->empty());
}

TEST(TokenIdsTest, RejectsWhatIsNotATokenId) {
  for (const char* bad : {"1,x", "1,-2", "12abc", "2147483648", "1.5", "+3"}) {
    Result<std::vector<int32_t>> ids = ParseTokenIds(bad, "--decode");
    ASSERT_FALSE(ids.ok()) << bad;
    EXPECT_EQ(ids.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(ids.status().message().find("--decode"), std::string::npos) << ids.status().message();
  }
}

TEST(TokenIdsTest, FormatsCommaSeparated) {
  EXPECT_EQ(FormatTokenIds(std::vector<int32_t>{19, 23, 16}), "19,23,16");
  EXPECT_EQ(FormatTokenIds(std::vector<int32_t>{7}), "7");
  EXPECT_EQ(FormatTokenIds({}), "");
}

}  // namespace
}  // namespace sy
