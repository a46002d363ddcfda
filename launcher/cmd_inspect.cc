// `switchyard inspect`: what a model checkpoint holds (launcher/convert/inspect.h).
//
//   switchyard inspect PATH [--checksums] [--json]
// PATH: a step-*.h5 file, a checkpoint directory, a Hugging Face model directory or a GGUF file.
#include <cstdio>
#include <string>

#include "launcher/command.h"
#include "launcher/convert/inspect.h"

namespace sy::launcher {
namespace {

class InspectCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("path", path_, "Checkpoint file or directory")->required();
    app.add_flag("--checksums", checksums_, "Read every tensor and print its CRC-32C");
    AddJsonOptions(app, &json_);
  }

  int Run() override { return ExitCode(RunStatus()); }

 private:
  Status RunStatus() {
    convert::InspectOptions options;
    options.checksums = checksums_;
    SY_ASSIGN_OR_RETURN(convert::InspectReport report, convert::Inspect(path_, options));
    if (json_.print || !json_.file.empty()) {
      SY_ASSIGN_OR_RETURN(const bool printed, EmitJson(json_, convert::InspectJson(report)));
      if (printed) return Status::Ok();
    }
    const std::string text = convert::InspectText(report);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return Status::Ok();
  }

  std::string path_;
  bool checksums_ = false;
  JsonOutput json_;
};

}  // namespace

SY_REGISTER_COMMAND("inspect", "Show a checkpoint's format, config and tensors", InspectCommand);

}  // namespace sy::launcher
