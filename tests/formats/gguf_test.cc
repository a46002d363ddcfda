// Tests of the GGUF container (storage/formats/gguf.h, gguf_writer.h) and ggml's block formats
// (ggml_quants.h): every metadata type and tensor type written and read back, byte-exact round
// trips, hand-built Q8_0 / Q4_0 / Q4_K / Q6_K blocks against values worked out from ggml's
// layouts, and one test per malformed-file error.
#include "storage/formats/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/core/dtype.h"
#include "storage/formats/ggml_quants.h"
#include "storage/formats/gguf_writer.h"
#include "tests/temp_dir.h"

namespace sy::storage {
namespace {

using TempDir = sy::testing::TempDir;

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void WriteAll(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

template <typename T>
std::vector<uint8_t> AsBytes(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

uint16_t Half(float f) { return F32ToF16(f).bits; }

std::vector<GgufKeyValue> EveryType() {
  std::vector<GgufKeyValue> kv;
  auto add = [&](std::string key, GgufValue v) { kv.push_back({std::move(key), std::move(v)}); };
  GgufValue v;
  v.type = GgufValueType::kU8;
  v.u = 200;
  add("t.u8", v);
  v = {};
  v.type = GgufValueType::kI8;
  v.i = -100;
  add("t.i8", v);
  v = {};
  v.type = GgufValueType::kU16;
  v.u = 60000;
  add("t.u16", v);
  v = {};
  v.type = GgufValueType::kI16;
  v.i = -30000;
  add("t.i16", v);
  add("t.u32", GgufValue::U32(4000000000u));
  add("t.i32", GgufValue::I32(-2000000000));
  add("t.f32", GgufValue::F32(0.1f));
  add("t.bool", GgufValue::Bool(true));
  add("t.string", GgufValue::String("héllo"));
  add("t.u64", GgufValue::U64(1ull << 40));
  v = {};
  v.type = GgufValueType::kI64;
  v.i = -(1ll << 40);
  add("t.i64", v);
  v = {};
  v.type = GgufValueType::kF64;
  v.f = 0.1;
  add("t.f64", v);
  add("t.strings",
      GgufValue::Array(GgufValueType::kString,
                       {GgufValue::String("a"), GgufValue::String(""), GgufValue::String("ccc")}));
  add("t.floats",
      GgufValue::Array(GgufValueType::kF32, {GgufValue::F32(1.5f), GgufValue::F32(-2.0f)}));
  add("t.empty", GgufValue::Array(GgufValueType::kI32, {}));
  add("general.alignment", GgufValue::U32(64));
  return kv;
}

TEST(GgufTest, WritesAndReadsEveryValueTypeAndTensorType) {
  TempDir dir;
  const std::vector<float> f32 = {1.0f, -2.5f, 3.25f, 0.0f, 7.0f, -8.0f};
  std::vector<uint16_t> f16, bf16;
  for (float x : f32) f16.push_back(Half(x));
  for (float x : f32) bf16.push_back(F32ToBF16(x).bits);
  std::vector<uint8_t> q8(2 * 34, 3);
  std::vector<uint8_t> q4(18, 5);
  const auto f32b = AsBytes(f32), f16b = AsBytes(f16), bf16b = AsBytes(bf16);
  std::vector<GgufTensorToWrite> tensors = {
      {"a.f32", GgmlType::kF32, {3, 2}, f32b, {}},
      {"b.f16", GgmlType::kF16, {6}, f16b, {}},
      {"c.bf16", GgmlType::kBF16, {2, 1, 3}, bf16b, {}},
      {"d.q8", GgmlType::kQ8_0, {64}, q8, {}},
      {"e.q4",
       GgmlType::kQ4_0,
       {32, 1},
       {},
       [&](std::span<uint8_t> out) {
         EXPECT_EQ(out.size(), q4.size());
         std::memcpy(out.data(), q4.data(), out.size());
         return Status::Ok();
       }},
  };
  const std::vector<GgufKeyValue> kv = EveryType();
  const std::string path = dir / "x.gguf";
  ASSERT_TRUE(WriteGguf(path, kv, tensors).ok());
  Result<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const GgufHeader& h = (*file)->header();
  EXPECT_EQ(h.alignment, 64u);
  EXPECT_EQ(h.data_offset % 64, 0u);
  ASSERT_EQ(h.metadata.size(), kv.size());
  for (size_t i = 0; i < kv.size(); ++i) {
    EXPECT_EQ(h.metadata[i].key, kv[i].key);
    EXPECT_TRUE(h.metadata[i].value == kv[i].value)
        << kv[i].key << ": " << h.metadata[i].value.Describe();
  }
  EXPECT_FLOAT_EQ(static_cast<float>(h.Find("t.f32")->f), 0.1f);
  EXPECT_EQ(h.Find("t.strings")->array[2].s, "ccc");
  ASSERT_EQ(h.tensors.size(), 5u);
  EXPECT_EQ(h.tensors[2].shape(), (std::vector<int64_t>{3, 1, 2}));
  for (const GgufTensorInfo& t : h.tensors) EXPECT_EQ(t.offset % 64, 0u) << t.name;
  auto data = [&](const std::string& name) {
    Result<const GgufTensorInfo*> t = (*file)->Tensor(name);
    EXPECT_TRUE(t.ok());
    const auto span = (*file)->Data(**t);
    return std::vector<uint8_t>(span.begin(), span.end());
  };
  EXPECT_EQ(data("a.f32"), f32b);
  EXPECT_EQ(data("b.f16"), f16b);
  EXPECT_EQ(data("c.bf16"), bf16b);
  EXPECT_EQ(data("d.q8"), q8);
  EXPECT_EQ(data("e.q4"), q4);
  for (const char* name : {"a.f32", "b.f16", "c.bf16"}) {
    const GgufTensorInfo* t = h.FindTensor(name);
    std::vector<float> out(static_cast<size_t>(t->numel()));
    ASSERT_TRUE(DequantizeToF32(t->type, (*file)->Data(*t), out).ok());
    EXPECT_EQ(out, f32) << name;
  }
  Result<const GgufTensorInfo*> missing = (*file)->Tensor("nope");
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);
}

TEST(GgufTest, ReadThenWriteIsByteExact) {
  TempDir dir;
  std::vector<float> w(96);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(static_cast<float>(i));
  const auto wb = AsBytes(w);
  std::vector<GgufTensorToWrite> tensors = {{"w", GgmlType::kF32, {32, 3}, wb, {}},
                                            {"v", GgmlType::kF32, {5}, {wb.data(), 20}, {}}};
  std::vector<GgufKeyValue> kv = EveryType();
  kv.pop_back();  // the default alignment, 32
  const std::string first = dir / "a.gguf";
  ASSERT_TRUE(WriteGguf(first, kv, tensors).ok());
  Result<std::unique_ptr<GgufFile>> file = GgufFile::Open(first);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  std::vector<GgufTensorToWrite> again;
  for (const GgufTensorInfo& t : (*file)->header().tensors) {
    again.push_back({t.name, t.type, t.ne, (*file)->Data(t), {}});
  }
  const std::string second = dir / "b.gguf";
  ASSERT_TRUE(WriteGguf(second, (*file)->header().metadata, again).ok());
  EXPECT_EQ(ReadAll(first), ReadAll(second));
  // Tensor data padded: 5 floats = 20 bytes, the file ends at the next multiple of 32.
  EXPECT_EQ(ReadAll(first).size() % 32, 0u);
}

TEST(GgufTest, DequantizesHandBuiltBlocks) {
  // Q8_0: d = 0.5, qs = -128 .. 124 step 8 -> x = d * q.
  std::vector<uint8_t> q8(34);
  const uint16_t d = Half(0.5f);
  std::memcpy(q8.data(), &d, 2);
  for (int i = 0; i < 32; ++i) q8[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(-128 + 8 * i));
  std::vector<float> out(32);
  ASSERT_TRUE(DequantizeToF32(GgmlType::kQ8_0, q8, out).ok());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], 0.5f * static_cast<float>(-128 + 8 * i)) << i;
  // Q4_0: byte j holds value j in its low nibble and value j + 16 in its high nibble, minus 8.
  std::vector<uint8_t> q4(18);
  const uint16_t d4 = Half(-0.25f);
  std::memcpy(q4.data(), &d4, 2);
  for (int j = 0; j < 16; ++j) q4[2 + j] = static_cast<uint8_t>((j & 15) | ((15 - j) << 4));
  ASSERT_TRUE(DequantizeToF32(GgmlType::kQ4_0, q4, out).ok());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], -0.25f * static_cast<float>(j - 8)) << j;
    EXPECT_EQ(out[j + 16], -0.25f * static_cast<float>(7 - j)) << j;
  }
  // Q4_K: d = 1, dmin = 0.5; sub-block scales 1..8 and mins 8..1, 6-bit packed as
  // get_scale_min_k4 reads them (sub-blocks 0-3 in the low 6 bits of bytes 0-7; 4-7 split over
  // bytes 8-11 and the top bits of bytes 0-7); every quant q = (l % 16).
  std::vector<uint8_t> qk(144, 0);
  const uint16_t one = Half(1.0f), half = Half(0.5f);
  std::memcpy(qk.data(), &one, 2);
  std::memcpy(qk.data() + 2, &half, 2);
  const int sc[8] = {1, 2, 3, 4, 40, 50, 60, 63};
  const int mn[8] = {8, 7, 6, 5, 33, 20, 17, 1};
  uint8_t* s = qk.data() + 4;
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
  for (int l = 0; l < 128; ++l) {
    qk[16 + l] = static_cast<uint8_t>((l % 16) | (((l + 3) % 16) << 4));
  }
  std::vector<float> k(256);
  ASSERT_TRUE(DequantizeToF32(GgmlType::kQ4_K, qk, k).ok());
  for (int chunk = 0; chunk < 4; ++chunk) {
    for (int l = 0; l < 32; ++l) {
      const int byte = chunk * 32 + l;
      const int lo = byte % 16, hi = (byte + 3) % 16;
      EXPECT_EQ(k[chunk * 64 + l], 1.0f * sc[2 * chunk] * lo - 0.5f * mn[2 * chunk]);
      EXPECT_EQ(k[chunk * 64 + 32 + l], 1.0f * sc[2 * chunk + 1] * hi - 0.5f * mn[2 * chunk + 1]);
    }
  }
  // Q6_K: d = 0.5, int8 scales +-1..16 (one per 16 values), 6-bit quants L[i] = (7 i + 3) % 64
  // packed as ggml's quantize_row_q6_K packs them (4 low bits in ql, 2 high bits in qh, halves
  // of 128): x[i] = d * scales[i / 16] * (L[i] - 32).
  std::vector<uint8_t> q6(210, 0);
  int L[256];
  for (int i = 0; i < 256; ++i) L[i] = (7 * i + 3) % 64;
  int8_t scales[16];
  for (int j = 0; j < 16; ++j) scales[j] = static_cast<int8_t>(j % 2 == 1 ? -(j + 1) : j + 1);
  for (int h = 0; h < 2; ++h) {
    uint8_t* ql = q6.data() + 64 * h;
    uint8_t* qh = q6.data() + 128 + 32 * h;
    const int* q = L + 128 * h;
    for (int l = 0; l < 32; ++l) {
      ql[l] = static_cast<uint8_t>((q[l] & 0xF) | ((q[l + 64] & 0xF) << 4));
      ql[l + 32] = static_cast<uint8_t>((q[l + 32] & 0xF) | ((q[l + 96] & 0xF) << 4));
      qh[l] = static_cast<uint8_t>((q[l] >> 4) | ((q[l + 32] >> 4) << 2) | ((q[l + 64] >> 4) << 4) |
                                   ((q[l + 96] >> 4) << 6));
    }
  }
  std::memcpy(q6.data() + 192, scales, 16);
  std::memcpy(q6.data() + 208, &half, 2);
  ASSERT_TRUE(DequantizeToF32(GgmlType::kQ6_K, q6, k).ok());
  for (int i = 0; i < 256; ++i) {
    EXPECT_EQ(k[i], 0.5f * static_cast<float>(scales[i / 16]) * static_cast<float>(L[i] - 32)) << i;
  }
}

TEST(GgufTest, QuantizersStayWithinHalfAStep) {
  std::vector<float> x(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.37f * static_cast<float>(i)) * 3.0f;
  x[5] = 0.0f;
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_0}) {
    std::vector<uint8_t> q(2 * static_cast<size_t>(GgmlTypeSize(type)));
    ASSERT_TRUE(QuantizeFromF32(type, x, q).ok());
    std::vector<float> back(64);
    ASSERT_TRUE(DequantizeToF32(type, q, back).ok());
    for (size_t b = 0; b < 2; ++b) {
      float amax = 0;
      for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
      // Q4_0's codes run from -8 to 7 steps of the largest value's sign: a value of the other
      // sign near full size clips to 7 steps, one step off; everything else is within half.
      const float step = type == GgmlType::kQ8_0 ? amax / 127 : amax / 8;
      for (size_t i = 0; i < 32; ++i) {
        const bool clipped = type == GgmlType::kQ4_0 && std::fabs(x[b * 32 + i]) > 7.5f * step;
        EXPECT_LE(std::fabs(back[b * 32 + i] - x[b * 32 + i]),
                  (clipped ? 1.0f : 0.5f) * step * 1.01f + 1e-6f)
            << GgmlTypeName(type) << " " << b * 32 + i;
      }
    }
  }
  std::vector<uint8_t> q(34);
  EXPECT_FALSE(QuantizeFromF32(GgmlType::kQ4_K, std::span<const float>(x.data(), 32), q).ok());
  EXPECT_FALSE(QuantizeFromF32(GgmlType::kQ8_0, std::span<const float>(x.data(), 31), q).ok());
}

// ---- malformed files ----

// A valid two-tensor file to damage.
std::vector<uint8_t> ValidImage(const TempDir& dir) {
  std::vector<float> w(40, 1.0f);
  const auto wb = AsBytes(w);
  std::vector<GgufTensorToWrite> tensors = {
      {"blk.0.w", GgmlType::kF32, {8, 4}, {wb.data(), 128}, {}},
      {"blk.0.v", GgmlType::kF32, {8}, {wb.data(), 32}, {}}};
  std::vector<GgufKeyValue> kv = {{"general.architecture", GgufValue::String("llama")}};
  EXPECT_TRUE(WriteGguf(dir / "valid.gguf", kv, tensors).ok());
  return ReadAll(dir / "valid.gguf");
}

Status Parse(const std::vector<uint8_t>& image) { return ParseGgufImage(image, "x.gguf").status(); }

void ExpectError(const Status& s, const std::string& needle) {
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("x.gguf"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.ToString();
}

// Byte position of the first occurrence of `what` in `image`.
size_t Find(const std::vector<uint8_t>& image, const std::string& what) {
  auto it = std::search(image.begin(), image.end(), what.begin(), what.end());
  EXPECT_NE(it, image.end()) << what;
  return static_cast<size_t>(it - image.begin());
}

template <typename T>
void Poke(std::vector<uint8_t>& image, size_t at, T v) {
  std::memcpy(image.data() + at, &v, sizeof(T));
}

TEST(GgufTest, EveryTruncationIsAnError) {
  TempDir dir;
  const std::vector<uint8_t> image = ValidImage(dir);
  ASSERT_TRUE(Parse(image).ok());
  // Every prefix that cuts into the header or the tensor data fails (the last tensor's padding
  // may be cut: ggml needs only the tensor's own bytes).
  const size_t needed = image.size() - (32 - 32 % 32) % 32;
  for (size_t n = 0; n < needed; ++n) {
    const Status s = Parse(std::vector<uint8_t>(image.begin(), image.begin() + n));
    EXPECT_FALSE(s.ok()) << n;
    EXPECT_NE(s.message().find("x.gguf"), std::string::npos) << s.ToString();
  }
  // Cutting into the last tensor names it.
  ExpectError(Parse(std::vector<uint8_t>(image.begin(), image.end() - 4)), "blk.0.v");
}

TEST(GgufTest, RejectsHeadersPointingPastTheEnd) {
  TempDir dir;
  const std::vector<uint8_t> valid = ValidImage(dir);
  auto image = valid;
  Poke<uint64_t>(image, 8, 1ull << 60);  // tensor count
  ExpectError(Parse(image), "tensor count");
  image = valid;
  Poke<uint64_t>(image, 16, 1ull << 60);  // kv count
  ExpectError(Parse(image), "metadata count");
  image = valid;
  Poke<uint64_t>(image, 24, 1ull << 40);  // the first key's length
  ExpectError(Parse(image), "runs past the end");
  // The second tensor's offset: past the data.
  image = valid;
  const size_t v_name = Find(image, "blk.0.v");
  Poke<uint64_t>(image, v_name + 7 + 4 + 8 + 4, 4096);
  ExpectError(Parse(image), "blk.0.v");
  // The first tensor's dims: 8 x 2^40 floats.
  image = valid;
  const size_t w_name = Find(image, "blk.0.w");
  Poke<uint64_t>(image, w_name + 7 + 4 + 8, 1ull << 40);
  ExpectError(Parse(image), "blk.0.w");
  Poke<uint64_t>(image, w_name + 7 + 4 + 8, 1ull << 62);
  ExpectError(Parse(image), "overflows");
}

TEST(GgufTest, RejectsBadTypesDimsOffsetsAndKeys) {
  TempDir dir;
  const std::vector<uint8_t> valid = ValidImage(dir);
  const size_t w_name = Find(valid, "blk.0.w");
  const size_t w_type = w_name + 7 + 4 + 2 * 8;
  auto image = valid;
  Poke<uint32_t>(image, w_type, 99);  // wrong dtype
  ExpectError(Parse(image), "blk.0.w");
  ExpectError(Parse(image), "ggml type 99");
  image = valid;
  Poke<uint32_t>(image, w_type, static_cast<uint32_t>(GgmlType::kQ8_0));  // ne0 8 % 32 != 0
  ExpectError(Parse(image), "block size");
  image = valid;
  Poke<uint32_t>(image, w_name + 7, 5);  // n_dims
  ExpectError(Parse(image), "n_dims 5");
  image = valid;
  Poke<uint64_t>(image, w_type + 4, 8);  // offset of the first tensor
  ExpectError(Parse(image), "data offset 8");
  image = valid;
  Poke<uint32_t>(image, 0, 0x12345678);
  ExpectError(Parse(image), "magic");
  image = valid;
  Poke<uint32_t>(image, 4, 2);
  ExpectError(Parse(image), "version 2");
  image = valid;
  const size_t arch_type = Find(image, "general.architecture") + 20;
  Poke<uint32_t>(image, arch_type, 13);
  ExpectError(Parse(image), "unknown value type 13");
  // A duplicate tensor name.
  image = valid;
  const size_t v_name = Find(image, "blk.0.v");
  image[v_name + 6] = 'w';
  ExpectError(Parse(image), "appears twice");
}

TEST(GgufTest, RejectsBadAlignmentAndNestedArrays) {
  TempDir dir;
  std::vector<GgufKeyValue> kv = {{"general.alignment", GgufValue::U32(24)}};
  EXPECT_FALSE(WriteGguf(dir / "a.gguf", kv, {}).ok());
  kv = {{"general.alignment", GgufValue::U64(32)}};
  EXPECT_FALSE(WriteGguf(dir / "a.gguf", kv, {}).ok());
  GgufValue nested = GgufValue::Array(GgufValueType::kArray, {});
  kv = {{"x", nested}};
  EXPECT_FALSE(WriteGguf(dir / "a.gguf", kv, {}).ok());
  kv = {{"x", GgufValue::Array(GgufValueType::kU32, {GgufValue::String("s")})}};
  EXPECT_FALSE(WriteGguf(dir / "a.gguf", kv, {}).ok());
  // The reader: alignment 24 written by hand into a valid file's u32.
  kv = {{"general.alignment", GgufValue::U32(32)}};
  ASSERT_TRUE(WriteGguf(dir / "a.gguf", kv, {}).ok());
  auto image = ReadAll(dir / "a.gguf");
  Poke<uint32_t>(image, Find(image, "general.alignment") + 17 + 4, 24);
  ExpectError(Parse(image), "general.alignment");
}

TEST(GgufTest, WriterRefusesBadTensorsAndKeepsTheOldFileOnFailure) {
  TempDir dir;
  const std::string path = dir / "model.gguf";
  WriteAll(path, {1, 2, 3});
  std::vector<float> w(8, 1.0f);
  const auto wb = AsBytes(w);
  std::vector<GgufTensorToWrite> t = {{"w", GgmlType::kF32, {4}, wb, {}}};
  Status s = WriteGguf(path, {}, t);
  EXPECT_NE(s.message().find("\"w\""), std::string::npos) << s.ToString();
  t = {{"w", GgmlType::kF32, {8}, wb, {}}, {"w", GgmlType::kF32, {8}, wb, {}}};
  EXPECT_FALSE(WriteGguf(path, {}, t).ok());
  t = {{"w", GgmlType::kQ8_0, {8}, wb, {}}};
  EXPECT_FALSE(WriteGguf(path, {}, t).ok());
  t = {{"w", GgmlType::kF32, {8}, wb, {}},
       {"late", GgmlType::kF32, {8}, {}, [](std::span<uint8_t>) {
          return DataLossError("source went away");
        }}};
  s = WriteGguf(path, {}, t);
  EXPECT_NE(s.message().find("late"), std::string::npos) << s.ToString();
  EXPECT_EQ(ReadAll(path), (std::vector<uint8_t>{1, 2, 3}));
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1u);  // no temporary file left
}

}  // namespace
}  // namespace sy::storage
