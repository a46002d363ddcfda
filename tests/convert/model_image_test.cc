// Tests of launcher/convert/model_image.h and hf_format.h that need no files: the parameter list
// a config implies against the one MoeModel builds, the dtype conversions, the family an
// architecture exports as, the registered formats and which of them take a quantization.
#include "launcher/convert/model_image.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "launcher/convert/convert.h"
#include "launcher/convert/hf_format.h"
#include "runtime/backend/backend.h"
#include "runtime/model/moe_model.h"

namespace sy::convert {
namespace {

ModelConfig Small() {
  ModelConfig c;
  c.vocab_size = 32;
  c.hidden_size = 16;
  c.num_layers = 3;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.num_experts = 4;
  c.top_k = 2;
  c.moe_intermediate_size = 8;
  c.intermediate_size = 24;
  return c;
}

void ExpectSpecsMatchModel(const ModelConfig& config) {
  auto backend = CreateBackend(Device::Cpu());
  ASSERT_TRUE(backend.ok());
  ModelOptions options;
  options.with_grad = false;
  Result<std::unique_ptr<MoeModel>> model = MoeModel::Create(**backend, config, options);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const std::vector<ParameterSpec> specs = ModelParameterSpecs(config);
  size_t i = 0;
  for (const Parameter& p : (*model)->parameters()) {
    ASSERT_LT(i, specs.size()) << p.name;
    EXPECT_EQ(specs[i].name, p.name) << "parameter " << i;
    const auto dims = p.value.shape().dims();
    EXPECT_EQ(specs[i].shape, std::vector<int64_t>(dims.begin(), dims.end())) << p.name;
    ++i;
  }
  EXPECT_EQ(i, specs.size());
}

TEST(ModelParameterSpecsTest, MatchesMoeModelForEveryFeature) {
  ExpectSpecsMatchModel(Small());
  ModelConfig full = Small();
  full.qk_norm = true;
  full.attention_bias = true;
  full.attention_out_bias = true;
  full.first_k_dense = 1;
  full.num_shared_experts = 2;
  full.shared_expert_gate = true;
  full.tie_word_embeddings = true;
  full.head_dim = 8;
  ExpectSpecsMatchModel(full);
  ModelConfig olmoe = Small();
  olmoe.qk_norm = true;
  olmoe.qk_norm_per_head = false;
  olmoe.moe_every = 2;
  olmoe.first_k_dense = 1;
  olmoe.num_layers = 5;
  ExpectSpecsMatchModel(olmoe);
  ModelConfig pregate = Small();
  pregate.pregate = true;
  ExpectSpecsMatchModel(pregate);
}

TEST(ReadTensorAsTest, WidensExactlyAndNarrowsToNearestEven) {
  const std::vector<float> values = {1.0f, -2.5f, 1.00390625f, 3.0e-8f, 65504.0f};
  ImageTensor t;
  t.name = t.stored_name = "x";
  t.dtype = DType::kF32;
  t.shape = {5};
  t.read = [&](std::span<uint8_t> out) {
    std::memcpy(out.data(), values.data(), out.size());
    return Status::Ok();
  };
  std::vector<uint8_t> bf16(10), f16(10), f32(20);
  ASSERT_TRUE(ReadTensorAs(t, DType::kBF16, bf16).ok());
  ASSERT_TRUE(ReadTensorAs(t, DType::kF16, f16).ok());
  std::vector<BF16> want_bf16(5);
  ConvertF32ToBF16(values.data(), want_bf16.data(), 5);
  EXPECT_EQ(std::memcmp(bf16.data(), want_bf16.data(), 10), 0);
  // bf16 -> f32 is exact: widening the narrowed values gives their f32 images.
  ImageTensor narrow = t;
  narrow.dtype = DType::kBF16;
  narrow.read = [&](std::span<uint8_t> out) {
    std::memcpy(out.data(), bf16.data(), out.size());
    return Status::Ok();
  };
  ASSERT_TRUE(ReadTensorAs(narrow, DType::kF32, f32).ok());
  std::vector<float> widened(5);
  ConvertBF16ToF32(want_bf16.data(), widened.data(), 5);
  EXPECT_EQ(std::memcmp(f32.data(), widened.data(), 20), 0);
  ImageTensor steps = t;
  steps.dtype = DType::kI64;
  std::vector<uint8_t> out(10);
  EXPECT_FALSE(ReadTensorAs(steps, DType::kBF16, out).ok());
}

TEST(ChooseHfFamilyTest, EachArchitectureFindsItsFamilyOrNamesTheFeature) {
  ModelConfig mixtral = Small();
  EXPECT_EQ(*ChooseHfFamily(mixtral, std::nullopt), HfFamily::kMixtral);
  ModelConfig deepseek = Small();
  deepseek.norm_topk_prob = false;
  deepseek.first_k_dense = 1;
  deepseek.num_shared_experts = 2;
  EXPECT_EQ(*ChooseHfFamily(deepseek, std::nullopt), HfFamily::kDeepseek);
  // Mixtral's architecture fits DeepSeek too; the family it was read as wins.
  EXPECT_EQ(*ChooseHfFamily(mixtral, HfFamily::kDeepseek), HfFamily::kDeepseek);
  ModelConfig qwen2 = Small();
  qwen2.attention_bias = true;
  qwen2.num_shared_experts = 1;
  qwen2.shared_expert_gate = true;
  EXPECT_EQ(*ChooseHfFamily(qwen2, std::nullopt), HfFamily::kQwen2Moe);
  ModelConfig qwen3 = Small();
  qwen3.qk_norm = true;
  EXPECT_EQ(*ChooseHfFamily(qwen3, std::nullopt), HfFamily::kQwen3Moe);
  qwen3.qk_norm_per_head = false;
  EXPECT_EQ(*ChooseHfFamily(qwen3, std::nullopt), HfFamily::kOlmoe);

  ModelConfig pregate = Small();
  pregate.pregate = true;
  Result<HfFamily> r = ChooseHfFamily(pregate, std::nullopt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("pregate"), std::string::npos) << r.status().ToString();
  ModelConfig odd = Small();
  odd.qk_norm = true;
  odd.num_shared_experts = 1;  // qk_norm and an ungated shared expert: no family has both
  r = ChooseHfFamily(odd, std::nullopt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Qwen3-MoE has no"), std::string::npos)
      << r.status().ToString();
  EXPECT_NE(r.status().message().find("shared experts"), std::string::npos);
}

TEST(ModelFormatsTest, NativeHfAndGgufAreRegisteredAndOnlyGgufQuantizes) {
  std::vector<std::string> names;
  for (const ModelFormat* f : ModelFormats()) names.emplace_back(f->name());
  EXPECT_EQ(names, (std::vector<std::string>{"native", "hf", "gguf"}));
  Result<const ModelFormat*> gguf = FindModelFormat("gguf");
  ASSERT_TRUE(gguf.ok()) << gguf.status().ToString();
  EXPECT_EQ((*gguf)->quantizations(), (std::vector<std::string_view>{"q8_0", "q4_0"}));
  for (const char* other : {"native", "hf"}) {
    Result<const ModelFormat*> f = FindModelFormat(other);
    ASSERT_TRUE(f.ok());
    EXPECT_TRUE((*f)->quantizations().empty()) << other;
  }
  EXPECT_FALSE(FindModelFormat("safetensors").ok());
}

TEST(ConvertTest, ChecksTheQuantizationAgainstTheOutputFormatBeforeReadingAnything) {
  auto convert = [](const char* to, const char* quantization, bool dtype) {
    ConvertOptions options;
    options.in = "/nonexistent/model";  // read only after the options pass
    options.out = "/nonexistent/out";
    options.to = to;
    options.quantization = quantization;
    if (dtype) options.dtype = DType::kBF16;
    return Convert(options).status();
  };
  for (const char* to : {"native", "hf"}) {
    const Status s = convert(to, "q8_0", false);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("q8_0"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(to), std::string::npos) << s.ToString();
  }
  EXPECT_EQ(convert("gguf", "q5_1", false).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(convert("gguf", "q4_0", true).code(), StatusCode::kInvalidArgument);
  // Accepted: the conversion goes on to the input, which does not exist.
  EXPECT_EQ(convert("gguf", "q4_0", false).code(), StatusCode::kNotFound);
  EXPECT_EQ(convert("gguf", "", true).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace sy::convert
