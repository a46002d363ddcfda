// ProgressLine: the progress of a long command on stderr (or any FILE), the one helper behind
// every command that runs for more than a few seconds outside training (which keeps its own bar
// with loss and tokens/s, launcher/training/training_loop.h). On a terminal it is one line
// rewritten in place:
//   loading model [##########..........] 52% 1.2/2.3 GiB 3s
// anywhere else plain lines, at most one every `line_interval_s` seconds plus the last:
//   loading model: 52% (1.2/2.3 GiB) 3s
//
//   ProgressLine progress(stderr, "loading model", ProgressUnit::kBytes);
//   for (...) progress.Update(done, total);
//   progress.Finish();
//
// Ownership: borrows `out`. Thread-safety: one thread at a time (a callback from one loader).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace sy {

enum class ProgressStyle : uint8_t {
  kAuto,   // a bar when `out` is a terminal, else lines
  kBar,    // rewritten in place
  kLines,  // plain lines
  kNone,   // nothing
};

// How done/total print: "1.2/2.3 GiB" or "12/40".
enum class ProgressUnit : uint8_t { kCount, kBytes };

class ProgressLine {
 public:
  ProgressLine(std::FILE* out, std::string label, ProgressUnit unit = ProgressUnit::kCount,
               ProgressStyle style = ProgressStyle::kAuto, double line_interval_s = 5.0);
  // Finishes the line when Update was called and Finish was not.
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // `done` of `total` (total > 0). A bar redraws at most 10 times a second; lines print every
  // line_interval_s seconds.
  void Update(int64_t done, int64_t total);
  // The final state (100% when done reached total), then a newline on a terminal; nothing when
  // Update was never called.
  void Finish();

  // The resolved style (kAuto replaced by what `out` is).
  ProgressStyle style() const { return style_; }

  // "52% 1.2/2.3 GiB" for people; exposed for the tests.
  static std::string Describe(int64_t done, int64_t total, ProgressUnit unit);

 private:
  void Print(bool last);

  std::FILE* out_;
  std::string label_;
  ProgressUnit unit_;
  ProgressStyle style_;
  double line_interval_s_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_print_;
  int64_t done_ = 0;
  int64_t total_ = 0;
  bool started_ = false;
  bool finished_ = false;
};

}  // namespace sy
