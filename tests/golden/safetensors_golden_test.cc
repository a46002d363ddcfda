// The golden safetensors file (tests/golden/tiny.safetensors; README.md), written by Hugging
// Face's safetensors library (make_safetensors_golden.py), the reference implementation: our
// reader (storage/formats/safetensors.h) must see in it exactly what the reference wrote.
// Switchyard has no safetensors writer yet, so there are no bytes of ours to compare; the layout
// checked below (tensor order by dtype size then name, an 8-byte aligned header padded with spaces)
// is the reference's.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "storage/formats/safetensors.h"
#include "tests/golden/golden_file.h"

namespace sy::golden {
namespace {

using storage::SafetensorsDType;
using storage::SafetensorsFile;

struct Expected {
  const char* name;
  SafetensorsDType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

// The values of make_safetensors_golden.py.
const std::vector<Expected>& ExpectedTensors() {
  static const std::vector<Expected> tensors = {
      {"embed.weight", SafetensorsDType::kF32, {2, 3}, 32, 56},
      {"flags", SafetensorsDType::kU8, {5}, 72, 77},
      {"norm.weight", SafetensorsDType::kBF16, {4}, 56, 64},
      {"proj.weight", SafetensorsDType::kF16, {2, 2}, 64, 72},
      {"scale", SafetensorsDType::kF64, {1}, 24, 32},
      {"steps", SafetensorsDType::kI64, {3}, 0, 24},
  };
  return tensors;
}

std::vector<float> AsF32(const SafetensorsFile& file, const std::string& name) {
  Result<storage::TensorBytes> t = file.Get(name);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return {};
  std::vector<float> out(static_cast<size_t>(t->info->numel()));
  const Status converted = storage::ConvertToF32(*t, out);
  EXPECT_TRUE(converted.ok()) << converted.ToString();
  return out;
}

TEST(SafetensorsGoldenTest, ReaderSeesWhatTheReferenceWrote) {
  const std::vector<uint8_t> bytes = ReadFileBytes(GoldenPath("tiny.safetensors"));
  ASSERT_EQ(bytes.size(), 533u);
  uint64_t prefix = 0;  // the header length, u64 little-endian
  for (int i = 7; i >= 0; --i) prefix = (prefix << 8) | bytes[static_cast<size_t>(i)];
  EXPECT_EQ(prefix, 448u);
  EXPECT_EQ(bytes[8], '{');
  EXPECT_EQ(bytes[455], ' ');  // padded with spaces to the alignment
  Result<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::Open(GoldenPath("tiny.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const storage::SafetensorsHeader& header = (*file)->header();
  EXPECT_EQ(header.header_bytes, 448u);  // 8-byte aligned by the reference writer
  EXPECT_EQ(header.data_offset, 456u);
  EXPECT_EQ(header.metadata.size(), 2u);
  EXPECT_EQ(header.metadata.at("format"), "pt");
  EXPECT_EQ(header.metadata.at("source"), "switchyard tests/golden");

  ASSERT_EQ(header.tensors.size(), ExpectedTensors().size());
  for (size_t i = 0; i < header.tensors.size(); ++i) {
    const storage::SafetensorsTensorInfo& got = header.tensors[i];
    const Expected& want = ExpectedTensors()[i];
    SCOPED_TRACE(want.name);
    EXPECT_EQ(got.name, want.name);
    EXPECT_EQ(got.dtype, want.dtype);
    EXPECT_EQ(got.shape, want.shape);
    EXPECT_EQ(got.begin, want.begin);
    EXPECT_EQ(got.end, want.end);
  }

  EXPECT_EQ(AsF32(**file, "embed.weight"),
            (std::vector<float>{-1.5f, 0.0f, 0.25f, 1.0f, 2.5f, -3.0f}));
  EXPECT_EQ(AsF32(**file, "norm.weight"), (std::vector<float>{1.0f, -2.0f, 0.5f, 3.140625f}));
  EXPECT_EQ(AsF32(**file, "proj.weight"),
            (std::vector<float>{0.5f, -0.25f, 65504.0f, 0.0009765625f}));
  EXPECT_EQ(AsF32(**file, "scale"), (std::vector<float>{0.1f}));

  // The integer tensors as raw little-endian bytes, where the reference put them.
  Result<storage::TensorBytes> steps = (*file)->Get("steps");
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->bytes.size(), 24u);
  int64_t values[3];
  std::memcpy(values, steps->bytes.data(), sizeof(values));
  EXPECT_EQ(values[0], -1);
  EXPECT_EQ(values[1], 0);
  EXPECT_EQ(values[2], int64_t{1} << 40);
  Result<storage::TensorBytes> flags = (*file)->Get("flags");
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(std::vector<uint8_t>(flags->bytes.begin(), flags->bytes.end()),
            (std::vector<uint8_t>{0, 1, 2, 254, 255}));
  // The same bytes sit in the file where the header says.
  EXPECT_EQ(std::memcmp(bytes.data() + 456 + 72, flags->bytes.data(), 5), 0);
  EXPECT_EQ(std::memcmp(bytes.data() + 456, steps->bytes.data(), 24), 0);
}

}  // namespace
}  // namespace sy::golden
