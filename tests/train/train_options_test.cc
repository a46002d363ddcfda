// The train config: every block binds; unknown keys get a suggestion, wrong types and bad values
// name the file and the key.
#include "launcher/training/train_options.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

namespace sy::launcher {
namespace {

Status LoadError(const std::vector<std::string>& sets) {
  Result<TrainConfig> r = LoadTrainConfigFile(SY_TINY_CONFIG, sets);
  return r.status();
}

TEST(TrainOptionsTest, TinyAndSmallConfigsBind) {
  Result<TrainConfig> tiny = LoadTrainConfigFile(SY_TINY_CONFIG, {});
  ASSERT_TRUE(tiny.ok()) << tiny.status().message();
  EXPECT_EQ(tiny->model.num_experts, 4);
  EXPECT_EQ(tiny->model.top_k, 2);
  EXPECT_EQ(tiny->schedule_options().kind, LrScheduleKind::kWarmupCosine);
  EXPECT_EQ(tiny->schedule_options().total_steps, tiny->train.steps);
  Result<TrainConfig> small = LoadTrainConfigFile(SY_SMALL_CONFIG, {});
  ASSERT_TRUE(small.ok()) << small.status().message();
  EXPECT_GT(small->model.hidden_size, tiny->model.hidden_size);
}

// Issue 46: no example puts state in a fixed path under a world-writable directory, where another
// user could plant a link before the run creates it.
TEST(TrainOptionsTest, NoExampleKeepsStateUnderTmp) {
  const std::filesystem::path configs = std::filesystem::path(SY_TINY_CONFIG).parent_path();
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(configs)) {
    if (entry.path().extension() != ".json") continue;
    Result<TrainConfig> config = LoadTrainConfigFile(entry.path().string(), {});
    if (!config.ok()) continue;  // not a training config
    ++checked;
    for (const std::string* path : {&config->checkpoint.dir, &config->expert_store.dir,
                                    &config->log.metrics, &config->log.routing_trace}) {
      EXPECT_FALSE(path->starts_with("/tmp") || path->starts_with("/var/tmp") ||
                   path->starts_with("/dev/shm"))
          << entry.path() << ": " << *path;
    }
  }
  EXPECT_GE(checked, 5);
}

TEST(TrainOptionsTest, OverridesApply) {
  Result<TrainConfig> r =
      LoadTrainConfigFile(SY_TINY_CONFIG, {"train.steps=7", "optim.lr=0.5", "train.device=sim"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->train.steps, 7);
  EXPECT_EQ(r->optim.lr, 0.5);
  EXPECT_EQ(r->train.device, "sim");
  EXPECT_NE(r->effective_json.find("\"steps\": 7"), std::string::npos);
}

TEST(TrainOptionsTest, UnknownKeyHasSuggestion) {
  Status s = LoadError({"train.stpes=3"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unknown key 'train.stpes'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("did you mean 'train.steps'"), std::string::npos) << s.message();
  s = LoadError({"model.num_expert=3"});
  EXPECT_NE(s.message().find("did you mean 'model.num_experts'"), std::string::npos) << s.message();
  s = LoadError({"optimm.lr=3"});
  EXPECT_NE(s.message().find("optim"), std::string::npos) << s.message();
}

TEST(TrainOptionsTest, WrongTypeNamesKeyAndFile) {
  Status s = LoadError({"model.num_experts=\"eight\""});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'model.num_experts' must be an integer"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("--set model.num_experts"), std::string::npos) << s.message();
  s = LoadError({"optim.kind=adagrad"});
  EXPECT_NE(s.message().find("adamw"), std::string::npos) << s.message();
  s = LoadError({"train.steps=0"});
  EXPECT_NE(s.message().find("'train.steps' must be >= 1"), std::string::npos) << s.message();
}

TEST(TrainOptionsTest, BadDeviceAndBadModelAreClear) {
  Status s = LoadError({"train.device=tpu"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("train.device"), std::string::npos) << s.message();
  s = LoadError({"model.top_k=9"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("top_k"), std::string::npos) << s.message();
}

TEST(TrainOptionsTest, ParallelBlockDefaultsAndChecks) {
  Result<TrainConfig> tiny = LoadTrainConfigFile(SY_TINY_CONFIG, {});
  ASSERT_TRUE(tiny.ok()) << tiny.status().message();
  EXPECT_EQ(tiny->parallel.ep_size, 1);
  EXPECT_EQ(tiny->parallel.zero_stage, 0);
  EXPECT_FALSE(tiny->parallel.hierarchical_a2a);
  EXPECT_EQ(tiny->parallel.ranks_per_node, 0);
  Result<TrainConfig> ep =
      LoadTrainConfigFile(SY_TINY_CONFIG, {"parallel.ep_size=2", "parallel.hierarchical_a2a=true",
                                           "parallel.ranks_per_node=2", "parallel.zero_stage=3"});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  EXPECT_EQ(ep->parallel.ep_size, 2);
  EXPECT_TRUE(ep->parallel.hierarchical_a2a);
  EXPECT_EQ(ep->parallel.ranks_per_node, 2);
  EXPECT_EQ(ep->parallel.zero_stage, 3);
  EXPECT_NE(ep->effective_json.find("\"ep_size\": 2"), std::string::npos);

  Status s = LoadError({"parallel.ep_sise=2"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("did you mean 'parallel.ep_size'"), std::string::npos) << s.message();
  s = LoadError({"parallel.zero_stage=2"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("zero_stage"), std::string::npos) << s.message();
  s = LoadError({"parallel.ep_size=0"});
  EXPECT_NE(s.message().find("'parallel.ep_size' must be >= 1"), std::string::npos) << s.message();
  // The tiny model has 4 experts per MoE layer.
  s = LoadError({"parallel.ep_size=3"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'parallel.ep_size' 3 must divide model.num_experts (4)"),
            std::string::npos)
      << s.message();
}

TEST(TrainOptionsTest, MissingConfigFileIsNotFound) {
  Result<TrainConfig> r = LoadTrainConfigFile("/nonexistent/cfg.json", {});
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/cfg.json"), std::string::npos);
}

TEST(TrainOptionsTest, ExpertStoreBlockDefaultsAndChecks) {
  Result<TrainConfig> tiny = LoadTrainConfigFile(SY_TINY_CONFIG, {});
  ASSERT_TRUE(tiny.ok()) << tiny.status().message();
  EXPECT_FALSE(tiny->expert_store.enabled());
  EXPECT_EQ(tiny->expert_store.filesystem, StoreFileSystem::kUring);
  EXPECT_TRUE(tiny->expert_store.prefetch);
  EXPECT_FALSE(tiny->expert_store.sparse_adam);
  EXPECT_NE(tiny->effective_json.find("\"expert_store\""), std::string::npos);
  Result<TrainConfig> on = LoadTrainConfigFile(
      SY_TINY_CONFIG,
      {"expert_store.dir=\"/tmp/x\"", "expert_store.filesystem=posix", "expert_store.cache_mib=0.5",
       "expert_store.lfu_threshold=2", "expert_store.decay=0.25", "expert_store.decay_every=3",
       "expert_store.prefetch=false", "expert_store.sparse_adam=true"});
  ASSERT_TRUE(on.ok()) << on.status().message();
  EXPECT_TRUE(on->expert_store.enabled());
  EXPECT_EQ(on->expert_store.dir, "/tmp/x");
  EXPECT_EQ(on->expert_store.filesystem, StoreFileSystem::kPosix);
  EXPECT_EQ(StoreFileSystemName(on->expert_store.filesystem), "posix");
  EXPECT_EQ(on->expert_store.cache_mib, 0.5);
  EXPECT_EQ(on->expert_store.lfu_threshold, 2);
  EXPECT_EQ(on->expert_store.decay, 0.25);
  EXPECT_EQ(on->expert_store.decay_every, 3);
  EXPECT_FALSE(on->expert_store.prefetch);
  EXPECT_TRUE(on->expert_store.sparse_adam);

  Status s = LoadError({"expert_store.cache_mb=3"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unknown key 'expert_store.cache_mb'"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("did you mean 'expert_store.cache_mib'"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("tiny.json"), std::string::npos) << s.message();
  s = LoadError({"expert_store.filesystem=ext4"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("uring"), std::string::npos) << s.message();
  s = LoadError({"expert_store.decay=1.5"});
  EXPECT_NE(s.message().find("'expert_store.decay'"), std::string::npos) << s.message();
  s = LoadError({"expert_store.dir=\"/tmp/x\"", "expert_store.cache_mib=0"});
  EXPECT_NE(s.message().find("expert_store.cache_mib"), std::string::npos) << s.message();
  // The staging is part of the cache's budget: it cannot take all of it.
  s = LoadError(
      {"expert_store.dir=\"/tmp/x\"", "expert_store.cache_mib=64", "expert_store.staging_mib=64"});
  EXPECT_NE(s.message().find("expert_store.staging_mib"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("below cache_mib"), std::string::npos) << s.message();
  s = LoadError({"expert_store.dir=\"/tmp/x\"", "model.num_experts=0"});
  EXPECT_NE(s.message().find("expert_store.dir"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace sy::launcher
