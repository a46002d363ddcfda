// A process SIGKILLed in the middle of a large save never destroys the previous checkpoint, and
// the temporary file it leaves is removed by the next run (RemoveStaleTemporaryFiles).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "storage/hdf5/checkpoint_reader.h"
#include "storage/hdf5/checkpoint_writer.h"
#include "storage/hdf5/durable_replace.h"
#include "tests/hdf5/checkpoint_test_util.h"

namespace sy {
namespace {

using testing::Pattern;
using testing::ScratchDir;

constexpr size_t kTensorFloats = 1 << 18;  // 1 MiB per tensor
constexpr int kMaxTensors = 256;           // the child's whole save: 256 MiB
constexpr int kTensorsBeforeKill = 8;

void WriteCheckpoint(const std::string& path, int64_t step, float seed) {
  auto writer = CheckpointWriter::Create(path);
  SY_CHECK(writer.ok()) << writer.status().ToString();
  (*writer)->SetStep(step);
  for (int i = 0; i < 3; ++i) {
    std::vector<float> data = Pattern(kTensorFloats, seed + static_cast<float>(i));
    SY_CHECK_OK((*writer)->AddTensor("params/w" + std::to_string(i), DType::kF32, Shape{512, 512},
                                     data.data()));
  }
  SY_CHECK_OK((*writer)->SetText("config", "{\"step\": " + std::to_string(step) + "}"));
  SY_CHECK_OK((*writer)->Commit());
}

void ExpectCheckpoint(const std::string& path, int64_t step, float seed) {
  auto reader = CheckpointReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ((*reader)->step(), step);
  EXPECT_EQ((*reader)->TensorNames(),
            (std::vector<std::string>{"params/w0", "params/w1", "params/w2"}));
  std::vector<float> back(kTensorFloats);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(
        (*reader)
            ->ReadTensor("params/w" + std::to_string(i), DType::kF32, Shape{512, 512}, back.data())
            .ok());
    EXPECT_EQ(back, Pattern(kTensorFloats, seed + static_cast<float>(i))) << "tensor " << i;
  }
  EXPECT_EQ(*(*reader)->ReadText("config"), "{\"step\": " + std::to_string(step) + "}");
}

// In the child: starts a save over `path` and reports each tensor written through `report_fd`.
// It never commits; after kMaxTensors it waits to be killed.
[[noreturn]] void SaveUntilKilled(const std::string& path, int report_fd) {
  auto writer = CheckpointWriter::Create(path);
  if (!writer.ok()) _exit(2);
  std::vector<float> data = Pattern(kTensorFloats, 1000.0f);
  for (int i = 0; i < kMaxTensors; ++i) {
    if (!(*writer)
             ->AddTensor("params/big" + std::to_string(i), DType::kF32, Shape{512, 512},
                         data.data())
             .ok()) {
      _exit(3);
    }
    const char byte = 't';
    if (::write(report_fd, &byte, 1) != 1) _exit(4);
  }
  while (true) ::pause();
}

TEST(CheckpointCrashTest, SigkillMidSaveKeepsThePreviousCheckpoint) {
  ScratchDir dir;
  const std::string path = dir.File("ckpt.h5");
  WriteCheckpoint(path, 100, 1.0f);
  ExpectCheckpoint(path, 100, 1.0f);

  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(fds[0]);
    SaveUntilKilled(path, fds[1]);
  }
  ::close(fds[1]);
  // Wait until the child is well into writing tensors, then kill it without warning.
  int written = 0;
  char byte;
  while (written < kTensorsBeforeKill && ::read(fds[0], &byte, 1) == 1) ++written;
  ASSERT_EQ(written, kTensorsBeforeKill) << "the child died before writing its tensors";
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  while (::read(fds[0], &byte, 1) == 1) ++written;
  ::close(fds[0]);
  EXPECT_LT(written, kMaxTensors) << "the kill should land mid-save";

  // The interrupted save left its temporary file, partly written; the checkpoint is the old one.
  std::string temp;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    if (entry.path().string().starts_with(path + ".tmp." + std::to_string(child) + ".")) {
      temp = entry.path().string();
    }
  }
  ASSERT_FALSE(temp.empty()) << "the killed save left no temporary";
  EXPECT_EQ(TemporaryPathOwner(std::filesystem::path(temp).filename().string()), child);
  EXPECT_GT(std::filesystem::file_size(temp), kTensorsBeforeKill * kTensorFloats * sizeof(float));
  ExpectCheckpoint(path, 100, 1.0f);

  // The next run removes the dead writer's temporary file; then the save goes through normally.
  Result<std::vector<std::string>> removed = RemoveStaleTemporaryFiles(dir.path().string());
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, std::vector<std::string>{temp});
  EXPECT_FALSE(std::filesystem::exists(temp));
  ExpectCheckpoint(path, 100, 1.0f);
  WriteCheckpoint(path, 200, 5.0f);
  ExpectCheckpoint(path, 200, 5.0f);
}

TEST(CheckpointCrashTest, SigkillBeforeAnyCheckpointLeavesNone) {
  ScratchDir dir;
  const std::string path = dir.File("first.h5");
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(fds[0]);
    SaveUntilKilled(path, fds[1]);
  }
  ::close(fds[1]);
  char byte;
  ASSERT_EQ(::read(fds[0], &byte, 1), 1);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ::close(fds[0]);
  EXPECT_FALSE(std::filesystem::exists(path)) << "a half-written save is never visible at path";
  auto reader = CheckpointReader::Open(path);
  EXPECT_EQ(reader.status().code(), StatusCode::kNotFound);
}

// Only the temporaries of processes that are gone are removed: a live writer's (another
// process's, or this one's) and files of other names stay.
TEST(CheckpointCrashTest, RemovesOnlyTheTemporariesOfDeadProcesses) {
  ScratchDir dir;
  const pid_t alive = ::fork();
  ASSERT_GE(alive, 0);
  if (alive == 0) {
    while (true) ::pause();
  }
  const pid_t dead = ::fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) _exit(0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);

  auto touch = [&](const std::string& name) {
    std::ofstream(dir.File(name)) << "partial";
    return dir.File(name);
  };
  const std::string of_dead = touch("step-00000575.h5.tmp." + std::to_string(dead));
  const std::string of_dead_named = touch("step-00000580.h5.tmp." + std::to_string(dead) + ".0f3a");
  const std::string of_alive = touch("step-00000600.h5.tmp." + std::to_string(alive));
  const std::string of_self = touch("step-00000610.h5.tmp." + std::to_string(::getpid()));
  const std::string other_names[] = {touch("notes.tmp.x"),  touch("step-00000500.h5"),
                                     touch("x.tmp."),       touch("x.tmp.12a"),
                                     touch("x.tmp.12.xyz"), touch("x.tmp.12.")};

  Result<std::vector<std::string>> removed = RemoveStaleTemporaryFiles(dir.path().string());
  ::kill(alive, SIGKILL);
  ::waitpid(alive, nullptr, 0);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  std::vector<std::string> sorted = *removed;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<std::string>{of_dead, of_dead_named}));
  EXPECT_FALSE(std::filesystem::exists(of_dead));
  EXPECT_TRUE(std::filesystem::exists(of_alive));
  EXPECT_TRUE(std::filesystem::exists(of_self));
  for (const std::string& path : other_names) EXPECT_TRUE(std::filesystem::exists(path)) << path;

  EXPECT_EQ(RemoveStaleTemporaryFiles(dir.File("missing")).status().code(), StatusCode::kIOError);
}

// What a killed `convert` leaves next to its --out: a staging directory (hf) or a file (gguf,
// native). Only those of that output and of dead processes go.
TEST(CheckpointCrashTest, RemovesTheStaleTemporariesOfOneOutput) {
  ScratchDir dir;
  const pid_t dead = ::fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) _exit(0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  const std::string out = dir.File("hf");
  const std::string staging = out + ".tmp." + std::to_string(dead) + ".00ff";
  std::filesystem::create_directory(staging);
  std::ofstream(staging + "/model.safetensors.tmp." + std::to_string(dead)) << "partial";
  const std::string file = dir.File("model.gguf.tmp." + std::to_string(dead));
  std::ofstream(file) << "partial";
  const std::string of_self = out + ".tmp." + std::to_string(::getpid());
  std::ofstream(of_self) << "partial";
  const std::string kept[] = {file, of_self, dir.File("hf2.tmp." + std::to_string(dead)),
                              dir.File("xhf.tmp." + std::to_string(dead)), dir.File("hf.tmp.1x")};
  for (const std::string& path : kept) std::ofstream(path, std::ios::app) << "";

  Result<std::vector<std::string>> removed = RemoveStaleTemporariesOf(out);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, std::vector<std::string>{staging});
  EXPECT_FALSE(std::filesystem::exists(staging));
  for (const std::string& path : kept) EXPECT_TRUE(std::filesystem::exists(path)) << path;
  Result<std::vector<std::string>> gguf = RemoveStaleTemporariesOf(dir.File("model.gguf"));
  ASSERT_TRUE(gguf.ok());
  EXPECT_EQ(*gguf, std::vector<std::string>{file});
  EXPECT_TRUE(RemoveStaleTemporariesOf(dir.File("missing/out")).ok());
}

}  // namespace
}  // namespace sy
