// ResumeCommand (launcher/training/resume_command.h): the command printed for a job that lost a
// rank resumes on the largest world the config admits, with the settings that world needs.
#include "launcher/training/resume_command.h"

#include <gtest/gtest.h>

namespace sy::launcher {
namespace {

TrainConfig Ep4(const std::vector<std::string>& sets) {
  Result<TrainConfig> c = LoadTrainConfigFile(SY_EP4_CONFIG, sets);
  SY_CHECK(c.ok()) << c.status().message();
  return *c;
}

TEST(ResumeCommandTest, LargestAdmissibleWorld) {
  // ep4.json: 8 experts, EP 4, a global batch of 16. From 4 ranks: 3 does not divide the batch,
  // 2 does with EP 2.
  const std::vector<std::string> sets = {"checkpoint.dir=/tmp/run dir", "parallel.ep_size=4"};
  EXPECT_EQ(
      ResumeCommand(Ep4(sets), "/opt/sy/switchyard", "ep4.json", sets, 4),
      "mpirun -np 2 /opt/sy/switchyard train --config ep4.json --set 'checkpoint.dir=/tmp/run "
      "dir' --set parallel.ep_size=2 --resume");
  // Per-task batches under elastic placement fit any world up to their rows: 3 ranks, EP 1
  // (3 divides no power of two).
  const std::vector<std::string> elastic = {"checkpoint.dir=d", "train.placement=elastic",
                                            "data.tasks.copy.batch_size=8"};
  EXPECT_EQ(ResumeCommand(Ep4(elastic), "sy", "c.json", elastic, 4),
            "mpirun -np 3 sy train --config c.json --set checkpoint.dir=d --set "
            "train.placement=elastic --set data.tasks.copy.batch_size=8 --set parallel.ep_size=1 "
            "--resume");
  // From 2 ranks under ZeRO-3: one process, without EP or ZeRO-3.
  const std::vector<std::string> zero = {"checkpoint.dir=d", "parallel.ep_size=2",
                                         "parallel.zero_stage=3"};
  EXPECT_EQ(ResumeCommand(Ep4(zero), "sy", "c.json", zero, 2),
            "sy train --config c.json --set checkpoint.dir=d --set parallel.ep_size=1 --set "
            "parallel.zero_stage=0 --resume");
  // Without checkpoints there is nothing to resume.
  EXPECT_NE(ResumeCommand(Ep4({}), "sy", "c.json", {}, 4).find("checkpoint.dir"),
            std::string::npos);
  EXPECT_FALSE(CheckWorldSize(Ep4({"train.placement=per_task"}), 3).ok());
  EXPECT_TRUE(CheckWorldSize(Ep4({"train.placement=per_task", "parallel.ep_size=1"}), 5).ok());
}

}  // namespace
}  // namespace sy::launcher
