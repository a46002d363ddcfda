#include "runtime/data/synthetic_dataset.h"

#include <algorithm>
#include <cmath>

#include "runtime/core/check.h"

namespace sy {
namespace {

// A split that redraws this many inputs in a row without finding one of its own is reported as
// misconfigured instead of looping forever (eval_fraction near 1, or a tiny input space).
constexpr int kMaxDraws = 10000;

constexpr uint64_t kSplitSalt[] = {0x747261696eull, 0x6576616cull};  // "train", "eval"
constexpr uint64_t kHoldOutSalt = 0x686f6c646f7574ull;               // "holdout"
constexpr uint64_t kTaskStreamSalt = 0x7461736bull;                  // "task"

int DecimalWidth(int max_value) {
  int width = 1;
  for (int v = max_value; v >= 10; v /= 10) ++width;
  return width;
}

std::string Text(int64_t v) { return std::to_string(v); }

}  // namespace

void PackExample(std::span<const int32_t> prompt, std::span<const int32_t> answer,
                 std::span<int32_t> tokens, std::span<int32_t> targets) {
  const size_t seq_len = tokens.size();
  SY_CHECK_EQ(targets.size(), seq_len);
  SY_CHECK(prompt.size() + answer.size() <= seq_len + 1)
      << "example of " << prompt.size() << " + " << answer.size() << " tokens past seq_len "
      << seq_len;
  SY_CHECK(!prompt.empty()) << "an example needs a prompt";
  size_t t = 0;
  for (int32_t token : prompt) {
    if (t < seq_len) tokens[t] = token;
    if (t > 0) targets[t - 1] = kIgnoreTarget;
    ++t;
  }
  for (int32_t token : answer) {
    if (t < seq_len) tokens[t] = token;
    targets[t - 1] = token;
    ++t;
  }
  for (; t <= seq_len; ++t) {
    if (t < seq_len) tokens[t] = kPad;
    targets[t - 1] = kIgnoreTarget;
  }
}

std::optional<ConfigIssue> CheckSyntheticOptions(const SyntheticOptions& o, int64_t seq_len,
                                                 double eval_fraction,
                                                 std::span<const double> task_weights) {
  if (o.num_symbols < 10 || o.num_symbols > 1 << 20) {
    return ConfigIssue{
        "synthetic.num_symbols",
        "must be in [10, 1048576] (symbols 0-9 are the digits), got " + Text(o.num_symbols)};
  }
  if (o.min_len < 1 || o.min_len > o.max_len) {
    return ConfigIssue{"synthetic.min_len", "must be in [1, synthetic.max_len = " +
                                                Text(o.max_len) + "], got " + Text(o.min_len)};
  }
  if (2 * static_cast<int64_t>(o.max_len) + 2 > seq_len) {
    return ConfigIssue{"synthetic.max_len",
                       "must be at most (seq_len - 2) / 2 = " + Text((seq_len - 2) / 2) +
                           " so a copy example (tag, input, SEP, answer, EOS) fits seq_len " +
                           Text(seq_len) + ", got " + Text(o.max_len)};
  }
  if (o.modulus < 2 || o.modulus > 1000000000) {
    return ConfigIssue{"synthetic.modulus", "must be in [2, 1000000000], got " + Text(o.modulus)};
  }
  const int64_t width = DecimalWidth(o.modulus - 1);
  if (3 * width + 3 > seq_len) {
    return ConfigIssue{"synthetic.modulus",
                       "needs " + Text(width) + " digits per number, so a modadd example takes " +
                           Text(3 * width + 4) + " tokens, more than seq_len + 1 = " +
                           Text(seq_len + 1) + "; lower the modulus or raise seq_len"};
  }
  if (o.markov_prefix_len < 1) {
    return ConfigIssue{"synthetic.markov_prefix_len",
                       "must be at least 1, got " + Text(o.markov_prefix_len)};
  }
  if (o.markov_answer_len < 1) {
    return ConfigIssue{"synthetic.markov_answer_len",
                       "must be at least 1, got " + Text(o.markov_answer_len)};
  }
  if (static_cast<int64_t>(o.markov_prefix_len) + o.markov_answer_len + 2 > seq_len) {
    return ConfigIssue{"synthetic.markov_answer_len",
                       "plus markov_prefix_len (" + Text(o.markov_prefix_len) +
                           ") must be at most seq_len - 2 = " + Text(seq_len - 2) + ", got " +
                           Text(o.markov_answer_len)};
  }
  if (o.markov_branching < 1 || o.markov_branching > o.num_symbols) {
    return ConfigIssue{"synthetic.markov_branching",
                       "must be in [1, num_symbols = " + Text(o.num_symbols) + "], got " +
                           Text(o.markov_branching)};
  }
  if (!(eval_fraction >= 0.0 && eval_fraction <= 0.9)) {
    return ConfigIssue{"eval_fraction",
                       "must be in [0, 0.9], got " + nlohmann::json(eval_fraction).dump()};
  }
  if (task_weights.size() != kNumSyntheticTasks) {
    return ConfigIssue{"tasks", "must have " + Text(kNumSyntheticTasks) + " weights, got " +
                                    Text(static_cast<int64_t>(task_weights.size()))};
  }
  double total = 0;
  for (int t = 0; t < kNumSyntheticTasks; ++t) {
    if (!(task_weights[t] >= 0.0) || !std::isfinite(task_weights[t])) {
      return ConfigIssue{"tasks." + std::string(kSyntheticTaskNames[t]) + ".weight",
                         "must be a finite number >= 0"};
    }
    total += task_weights[t];
  }
  if (!(total > 0.0)) {
    return ConfigIssue{"tasks", "must give at least one task a weight above 0"};
  }
  return std::nullopt;
}

SyntheticDataset::SyntheticDataset(const SyntheticOptions& options, int64_t seq_len, uint64_t seed,
                                   double eval_fraction)
    : options_(options),
      seq_len_(seq_len),
      seed_(seed),
      eval_fraction_(eval_fraction),
      modadd_width_(DecimalWidth(options.modulus - 1)),
      chain_(options.num_symbols, options.markov_branching, seed) {}

Result<std::unique_ptr<SyntheticDataset>> SyntheticDataset::Create(
    const SyntheticOptions& options, int64_t seq_len, uint64_t seed, double eval_fraction,
    std::span<const double> task_weights) {
  if (seq_len < 4) {
    return InvalidArgumentError("'data.seq_len' must be at least 4 for synthetic data, got " +
                                Text(seq_len));
  }
  if (auto issue = CheckSyntheticOptions(options, seq_len, eval_fraction, task_weights)) {
    return InvalidArgumentError("'data." + issue->key + "' " + issue->problem);
  }
  std::unique_ptr<SyntheticDataset> dataset(
      new SyntheticDataset(options, seq_len, seed, eval_fraction));
  SY_RETURN_IF_ERROR(dataset->SetTaskWeights(task_weights));
  return dataset;
}

std::string_view SyntheticDataset::task_name(int task) const {
  SY_CHECK(task >= 0 && task < kNumSyntheticTasks) << "task " << task;
  return kSyntheticTaskNames[task];
}

int64_t SyntheticDataset::size(Split split) const {
  if (split == Split::kEval && eval_fraction_ == 0.0) return 0;
  return kUnbounded;
}

Status SyntheticDataset::SetTaskWeights(std::span<const double> weights) {
  if (auto issue = CheckSyntheticOptions(options_, seq_len_, eval_fraction_, weights)) {
    return InvalidArgumentError("synthetic task weights: '" + issue->key + "' " + issue->problem);
  }
  double total = 0;
  for (int t = 0; t < kNumSyntheticTasks; ++t) total += weights[t];
  double running = 0;
  for (int t = 0; t < kNumSyntheticTasks; ++t) {
    weights_[t] = weights[t];
    running += weights[t] / total;
    cumulative_[t] = running;
  }
  // The last weighted task ends the table at exactly 1, so rounding can never reach a task after
  // it (zero-weight tasks elsewhere repeat the previous bound and are never drawn either).
  for (int t = kNumSyntheticTasks - 1; t >= 0; --t) {
    if (weights_[t] > 0.0) {
      cumulative_[t] = 1.0;
      break;
    }
  }
  return Status::Ok();
}

bool SyntheticDataset::IsEvalInput(SyntheticTask task, std::span<const int32_t> input) const {
  if (eval_fraction_ == 0.0) return false;
  uint64_t h = MixSeed(MixSeed(seed_, kHoldOutSalt), static_cast<uint64_t>(task));
  for (int32_t token : input) h = MixSeed(h, static_cast<uint64_t>(token));
  return static_cast<double>(h >> 11) * 0x1p-53 < eval_fraction_;
}

void SyntheticDataset::DrawInput(SyntheticTask task, SampleRng& rng,
                                 std::vector<int32_t>* input) const {
  input->clear();
  switch (task) {
    case SyntheticTask::kCopy:
    case SyntheticTask::kReverse:
    case SyntheticTask::kSort: {
      const int n =
          options_.min_len + static_cast<int>(rng.Uniform(options_.max_len - options_.min_len + 1));
      for (int i = 0; i < n; ++i) {
        input->push_back(SymbolToken(static_cast<int>(rng.Uniform(options_.num_symbols))));
      }
      return;
    }
    case SyntheticTask::kModAdd: {
      for (int operand = 0; operand < 2; ++operand) {
        if (operand == 1) input->push_back(kPlus);
        int value = static_cast<int>(rng.Uniform(options_.modulus));
        const size_t start = input->size();
        input->resize(start + modadd_width_);
        for (int d = modadd_width_ - 1; d >= 0; --d) {
          (*input)[start + d] = DigitToken(value % 10);
          value /= 10;
        }
      }
      return;
    }
    case SyntheticTask::kMarkov: {
      int state = static_cast<int>(rng.Uniform(options_.num_symbols));
      input->push_back(SymbolToken(state));
      for (int i = 1; i < options_.markov_prefix_len; ++i) {
        state = chain_.Sample(state, rng);
        input->push_back(SymbolToken(state));
      }
      return;
    }
  }
}

void SyntheticDataset::ComputeAnswer(SyntheticTask task, std::span<const int32_t> input,
                                     SampleRng& rng, std::vector<int32_t>* answer) const {
  answer->clear();
  switch (task) {
    case SyntheticTask::kCopy:
      answer->assign(input.begin(), input.end());
      break;
    case SyntheticTask::kReverse:
      answer->assign(input.rbegin(), input.rend());
      break;
    case SyntheticTask::kSort:
      answer->assign(input.begin(), input.end());
      std::sort(answer->begin(), answer->end());
      break;
    case SyntheticTask::kModAdd: {
      int64_t operands[2] = {0, 0};
      for (int operand = 0; operand < 2; ++operand) {
        for (int d = 0; d < modadd_width_; ++d) {
          operands[operand] =
              operands[operand] * 10 + (input[operand * (modadd_width_ + 1) + d] - kFirstSymbol);
        }
      }
      int64_t sum = (operands[0] + operands[1]) % options_.modulus;
      answer->resize(modadd_width_);
      for (int d = modadd_width_ - 1; d >= 0; --d) {
        (*answer)[d] = DigitToken(static_cast<int>(sum % 10));
        sum /= 10;
      }
      break;
    }
    case SyntheticTask::kMarkov: {
      int state = input.back() - kFirstSymbol;
      for (int i = 0; i < options_.markov_answer_len; ++i) {
        state = chain_.Sample(state, rng);
        answer->push_back(SymbolToken(state));
      }
      break;
    }
  }
  answer->push_back(kEos);
}

Result<int32_t> SyntheticDataset::Get(Split split, int64_t index, std::span<int32_t> tokens,
                                      std::span<int32_t> targets) const {
  SY_CHECK_EQ(static_cast<int64_t>(tokens.size()), seq_len_);
  SY_CHECK_EQ(static_cast<int64_t>(targets.size()), seq_len_);
  SY_CHECK_GE(index, 0);
  if (size(split) == 0) {
    return FailedPreconditionError(
        "synthetic data: the eval split is empty because data.eval_fraction is 0; set it above 0 "
        "to evaluate on held-out inputs");
  }
  SampleRng rng(
      MixSeed(MixSeed(seed_, kSplitSalt[static_cast<int>(split)]), static_cast<uint64_t>(index)));
  int task_index = 0;
  if (split == Split::kEval) {
    task_index = static_cast<int>(index % kNumSyntheticTasks);
  } else {
    const double u = rng.UniformDouble();
    while (task_index + 1 < kNumSyntheticTasks && !(u < cumulative_[task_index])) ++task_index;
  }
  return Generate(split, task_index, rng, tokens, targets);
}

Result<int32_t> SyntheticDataset::GetTaskExample(int task, int64_t index, std::span<int32_t> tokens,
                                                 std::span<int32_t> targets) const {
  SY_CHECK(task >= 0 && task < kNumSyntheticTasks) << "task " << task;
  SY_CHECK_EQ(static_cast<int64_t>(tokens.size()), seq_len_);
  SY_CHECK_EQ(static_cast<int64_t>(targets.size()), seq_len_);
  SY_CHECK_GE(index, 0);
  // A stream of its own per task, apart from the mixed train stream's.
  SampleRng rng(MixSeed(MixSeed(MixSeed(seed_, kSplitSalt[0]), kTaskStreamSalt + task),
                        static_cast<uint64_t>(index)));
  return Generate(Split::kTrain, task, rng, tokens, targets);
}

Result<int32_t> SyntheticDataset::Generate(Split split, int task_index, SampleRng& rng,
                                           std::span<int32_t> tokens,
                                           std::span<int32_t> targets) const {
  const SyntheticTask task = static_cast<SyntheticTask>(task_index);
  const bool want_eval = split == Split::kEval;

  std::vector<int32_t> input;
  for (int draw = 0; draw < kMaxDraws; ++draw) {
    DrawInput(task, rng, &input);
    if (IsEvalInput(task, input) != want_eval) continue;
    std::vector<int32_t> prompt;
    prompt.reserve(input.size() + 2);
    prompt.push_back(TaskTag(task));
    prompt.insert(prompt.end(), input.begin(), input.end());
    prompt.push_back(kSep);
    std::vector<int32_t> answer;
    ComputeAnswer(task, input, rng, &answer);
    PackExample(prompt, answer, tokens, targets);
    return static_cast<int32_t>(task_index);
  }
  return FailedPreconditionError(
      "synthetic data: found no " + std::string(SplitName(split)) + " input for task '" +
      std::string(kSyntheticTaskNames[task_index]) + "' in " + Text(kMaxDraws) +
      " draws; its inputs almost all fall in the other split. Change data.eval_fraction, or "
      "enlarge the input space (data.synthetic.num_symbols, max_len, modulus)");
}

nlohmann::json SyntheticDataset::Fingerprint() const {
  return {{"kind", "synthetic"},
          {"seq_len", seq_len_},
          {"seed", seed_},
          {"eval_fraction", eval_fraction_},
          {"num_symbols", options_.num_symbols},
          {"min_len", options_.min_len},
          {"max_len", options_.max_len},
          {"modulus", options_.modulus},
          {"markov_prefix_len", options_.markov_prefix_len},
          {"markov_answer_len", options_.markov_answer_len},
          {"markov_branching", options_.markov_branching}};
}

nlohmann::json SyntheticDataset::State() const {
  nlohmann::json weights = nlohmann::json::object();
  for (int t = 0; t < kNumSyntheticTasks; ++t) weights[kSyntheticTaskNames[t]] = weights_[t];
  return {{"task_weights", weights}};
}

Status SyntheticDataset::RestoreState(const nlohmann::json& state) {
  const auto bad = [&](const std::string& why) {
    return InvalidArgumentError(
        "data position: synthetic dataset state " +
        state.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + " " + why);
  };
  if (!state.is_object() || !state.contains("task_weights") || !state["task_weights"].is_object()) {
    return bad("has no \"task_weights\" object");
  }
  std::array<double, kNumSyntheticTasks> weights{};
  const nlohmann::json& saved = state["task_weights"];
  for (int t = 0; t < kNumSyntheticTasks; ++t) {
    auto it = saved.find(kSyntheticTaskNames[t]);
    if (it == saved.end() || !it->is_number()) {
      return bad("has no number for task '" + std::string(kSyntheticTaskNames[t]) + "'");
    }
    weights[t] = it->get<double>();
  }
  return SetTaskWeights(weights);
}

}  // namespace sy
