// Tests of the safetensors reader (storage/formats/safetensors.h): valid single and sharded
// checkpoints with every float dtype, and one test per malformed-file error.
#include "storage/formats/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace sy::storage {
namespace {

// Sized once and filled in place: growing an 8-byte vector with insert() trips GCC 12's
// -Warray-bounds at -O3 (a false positive on the reallocation path, GCC bug 107852).
std::vector<uint8_t> Image(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out(8 + header.size() + data.size());
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  std::copy(header.begin(), header.end(), out.begin() + 8);
  std::copy(data.begin(), data.end(), out.begin() + 8 + static_cast<std::ptrdiff_t>(header.size()));
  return out;
}

std::vector<uint8_t> FloatBytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

Status ParseError(const std::string& header, size_t data_bytes) {
  return ParseSafetensorsImage(Image(header, std::vector<uint8_t>(data_bytes)), "x.safetensors")
      .status();
}

void ExpectError(const Status& s, const std::string& needle) {
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("x.safetensors"), std::string::npos) << s.ToString();
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/sy_safetensors_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  void Write(const std::string& name, const std::vector<uint8_t>& bytes) const {
    std::ofstream f(path_ + "/" + name, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  }
  void WriteText(const std::string& name, const std::string& text) const {
    std::ofstream f(path_ + "/" + name);
    f << text;
  }

 private:
  std::string path_;
};

TEST(SafetensorsTest, ParsesTensorsAndMetadata) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]},)"
      R"("a":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]},)"
      R"("e":{"dtype":"I64","shape":[0,5],"data_offsets":[12,12]}}   )";
  Result<SafetensorsHeader> h = ParseSafetensorsImage(Image(header, std::vector<uint8_t>(12)), "f");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->tensors.size(), 3u);
  EXPECT_EQ(h->tensors[0].name, "a");  // sorted by name
  EXPECT_EQ(h->metadata.at("format"), "pt");
  const SafetensorsTensorInfo* b = h->Find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, SafetensorsDType::kBF16);
  EXPECT_EQ(b->begin, 8u);
  EXPECT_EQ(h->Find("e")->numel(), 0);
  EXPECT_EQ(h->Find("zz"), nullptr);
  EXPECT_EQ(h->data_offset, 8 + header.size());
}

TEST(SafetensorsTest, DTypeNames) {
  for (const char* name : {"BOOL", "U8", "I8", "F8_E4M3", "F8_E5M2", "I16", "U16", "F16", "BF16",
                           "I32", "U32", "F32", "F64", "I64", "U64"}) {
    Result<SafetensorsDType> d = ParseSafetensorsDType(name);
    ASSERT_TRUE(d.ok()) << name;
    EXPECT_EQ(SafetensorsDTypeName(*d), name);
  }
  EXPECT_EQ(SafetensorsDTypeSize(SafetensorsDType::kF64), 8u);
  EXPECT_FALSE(ParseSafetensorsDType("F4").ok());
}

TEST(SafetensorsTest, TooShort) {
  ExpectError(ParseSafetensorsImage({}, "x.safetensors").status(), "too short");
}

TEST(SafetensorsTest, HeaderLengthOverCap) {
  std::vector<uint8_t> image(16, 0);
  const uint64_t n = kSafetensorsMaxHeaderBytes + 1;
  std::memcpy(image.data(), &n, 8);
  ExpectError(ParseSafetensorsImage(image, "x.safetensors").status(), "cap");
}

TEST(SafetensorsTest, HeaderLengthPastEnd) {
  std::vector<uint8_t> image = Image("{}", {});
  image[0] = 200;
  ExpectError(ParseSafetensorsImage(image, "x.safetensors").status(), "truncated");
}

TEST(SafetensorsTest, HeaderNotAnObject) {
  ExpectError(ParseError(" {}", 0), "does not start with '{'");
  ExpectError(ParseError("{\"a\":", 0), "not valid JSON");
}

TEST(SafetensorsTest, DuplicateKey) {
  ExpectError(ParseError(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
                         R"("a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})",
                         4),
              "twice");
}

TEST(SafetensorsTest, TooDeep) {
  std::string deep = "{\"__metadata__\":" + std::string(100, '[') + std::string(100, ']') + "}";
  ExpectError(ParseError(deep, 0), "deeper");
}

TEST(SafetensorsTest, UnknownDType) {
  ExpectError(ParseError(R"({"w":{"dtype":"Q4_K","shape":[1],"data_offsets":[0,1]}})", 1), "Q4_K");
}

TEST(SafetensorsTest, BadShape) {
  ExpectError(ParseError(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
              "shape entry");
  ExpectError(ParseError(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4),
              "shape entry");
  ExpectError(ParseError(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4), "shape");
}

TEST(SafetensorsTest, SizeMismatch) {
  ExpectError(ParseError(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
              "needs 12 bytes but data_offsets span 8");
}

TEST(SafetensorsTest, ShapeOverflow) {
  ExpectError(ParseError(R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],)"
                         R"("data_offsets":[0,8]}})",
                         8),
              "more than 2^64");
}

TEST(SafetensorsTest, OffsetsReversedOrPastEnd) {
  ExpectError(ParseError(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", 4),
              "before begin");
  ExpectError(ParseError(R"({"w":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", 4),
              "past the data buffer");
  ExpectError(ParseError(R"({"w":{"dtype":"U8","shape":[8],"data_offsets":[0]}})", 8),
              "data_offsets");
}

TEST(SafetensorsTest, Overlap) {
  ExpectError(ParseError(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                         R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                         6),
              "overlaps");
}

TEST(SafetensorsTest, Gap) {
  ExpectError(ParseError(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                         R"("b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})",
                         6),
              "gap");
  ExpectError(ParseError(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", 4), "gap");
}

TEST(SafetensorsTest, TrailingBytes) {
  ExpectError(ParseError(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 5),
              "trailing");
}

TEST(SafetensorsTest, BadMetadata) {
  ExpectError(ParseError(R"({"__metadata__":{"k":1}})", 0), "__metadata__");
  ExpectError(ParseError(R"({"__metadata__":[]})", 0), "__metadata__");
}

TEST(SafetensorsTest, ShardNames) {
  EXPECT_TRUE(CheckShardName("model-00001-of-00002.safetensors", "t", "i").ok());
  EXPECT_TRUE(CheckShardName("sub/model.safetensors", "t", "i").ok());
  for (const char* bad :
       {"", "/etc/passwd", "../x.safetensors", "a/../../x", "a/./b", "a\\b", "a//b"}) {
    Status s = CheckShardName(bad, "t", "index.json");
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("index.json"), std::string::npos);
  }
  Result<std::map<std::string, std::string>> m =
      ParseSafetensorsIndex(R"({"weight_map":{"w":"../../secret.safetensors"}})", "index.json");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("\"..\""), std::string::npos);
  EXPECT_FALSE(ParseSafetensorsIndex(R"({"metadata":{}})", "index.json").ok());
  EXPECT_FALSE(ParseSafetensorsIndex(R"({"weight_map":{"w":3}})", "index.json").ok());
}

TEST(SafetensorsTest, SingleFileCheckpointConvertsEveryFloatDType) {
  TempDir dir;
  // a: F32 [2] = {1.5, -2}; b: F16 [2] = {1, -0.5}; c: BF16 [1] = {3}; d: F64 [1] = {0.25}
  std::vector<uint8_t> data = FloatBytes({1.5f, -2.0f});
  for (uint16_t bits : {uint16_t{0x3c00}, uint16_t{0xb800}, uint16_t{0x4040}}) {
    data.push_back(static_cast<uint8_t>(bits & 0xff));
    data.push_back(static_cast<uint8_t>(bits >> 8));
  }
  double quarter = 0.25;
  data.resize(data.size() + 8);
  std::memcpy(data.data() + 14, &quarter, 8);
  dir.Write("model.safetensors", Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                       R"("b":{"dtype":"F16","shape":[2],"data_offsets":[8,12]},)"
                                       R"("c":{"dtype":"BF16","shape":[1],"data_offsets":[12,14]},)"
                                       R"("d":{"dtype":"F64","shape":[1],"data_offsets":[14,22]},)"
                                       R"("i":{"dtype":"I32","shape":[],"data_offsets":[22,26]}})",
                                       [&] {
                                         data.resize(26);
                                         return data;
                                       }()));
  Result<std::unique_ptr<SafetensorsCheckpoint>> ckpt = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ((*ckpt)->TensorNames(), (std::vector<std::string>{"a", "b", "c", "d", "i"}));
  std::vector<float> two(2), one(1);
  ASSERT_TRUE(ConvertToF32(*(*ckpt)->Get("a"), two).ok());
  EXPECT_EQ(two, (std::vector<float>{1.5f, -2.0f}));
  ASSERT_TRUE(ConvertToF32(*(*ckpt)->Get("b"), two).ok());
  EXPECT_EQ(two, (std::vector<float>{1.0f, -0.5f}));
  ASSERT_TRUE(ConvertToF32(*(*ckpt)->Get("c"), one).ok());
  EXPECT_EQ(one[0], 3.0f);
  ASSERT_TRUE(ConvertToF32(*(*ckpt)->Get("d"), one).ok());
  EXPECT_EQ(one[0], 0.25f);
  Status s = ConvertToF32(*(*ckpt)->Get("i"), one);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("I32"), std::string::npos);
  EXPECT_FALSE(ConvertToF32(*(*ckpt)->Get("a"), one).ok());  // wrong element count
  Result<TensorBytes> missing = (*ckpt)->Get("zz");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(SafetensorsTest, ShardedCheckpoint) {
  TempDir dir;
  const std::string a = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  const std::string b = R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  dir.Write("m-1.safetensors", Image(a, FloatBytes({1.0f})));
  dir.Write("m-2.safetensors", Image(b, FloatBytes({2.0f})));
  dir.WriteText("model.safetensors.index.json",
                R"({"metadata":{"total_size":8},"weight_map":{"a":"m-1.safetensors",)"
                R"("b":"m-2.safetensors"}})");
  Result<std::unique_ptr<SafetensorsCheckpoint>> ckpt = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ((*ckpt)->files().size(), 2u);
  std::vector<float> v(1);
  ASSERT_TRUE(ConvertToF32(*(*ckpt)->Get("b"), v).ok());
  EXPECT_EQ(v[0], 2.0f);

  // The index names a tensor its shard does not hold.
  dir.WriteText("model.safetensors.index.json",
                R"({"weight_map":{"a":"m-1.safetensors","b":"m-1.safetensors"}})");
  Result<std::unique_ptr<SafetensorsCheckpoint>> bad = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"b\""), std::string::npos) << bad.status().ToString();

  // A shard holds a tensor the index does not list.
  dir.WriteText("model.safetensors.index.json", R"({"weight_map":{"a":"m-1.safetensors"}})");
  dir.Write("m-1.safetensors", Image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                     R"("z":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                     FloatBytes({1.0f, 9.0f})));
  bad = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"z\""), std::string::npos) << bad.status().ToString();

  // A missing shard.
  dir.WriteText("model.safetensors.index.json", R"({"weight_map":{"a":"gone.safetensors"}})");
  bad = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("gone.safetensors"), std::string::npos);

  // An escaping shard name is refused before anything is opened.
  dir.WriteText("model.safetensors.index.json", R"({"weight_map":{"a":"/etc/passwd"}})");
  bad = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("absolute"), std::string::npos);
}

TEST(SafetensorsTest, MissingAndMalformedFiles) {
  TempDir dir;
  Result<std::unique_ptr<SafetensorsCheckpoint>> none = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  dir.Write("model.safetensors", {1, 2, 3});
  Result<std::unique_ptr<SafetensorsCheckpoint>> bad = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("model.safetensors"), std::string::npos);
  dir.Write("model.safetensors", {});
  EXPECT_FALSE(SafetensorsCheckpoint::Open(dir.path()).ok());
}

}  // namespace
}  // namespace sy::storage
