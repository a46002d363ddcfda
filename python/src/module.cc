// switchyard._switchyard: the C++ side of the Python package (python/switchyard/ wraps it; its
// docstrings are the API's documentation). Each function here converts its arguments, releases
// the interpreter's lock while Switchyard works, and turns a failed Status into an exception
// (status_exception.h).
//
// Thread-safety: the interpreter's lock is held on entry and released only around C++ work that
// touches no Python object; the training callbacks take it back.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "launcher/convert/convert.h"
#include "launcher/convert/inspect.h"
#include "launcher/training/training_job.h"
#include "launcher/training/training_loop.h"
#include "python/src/model.h"
#include "python/src/status_exception.h"
#include "runtime/core/build_info.h"
#include "runtime/core/dtype.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace sy::python {
namespace {

// The sampling fields generate() and chat() take, checked by the sampler.
SamplerOptions Sampling(int64_t max_tokens, float temperature, float top_p, int32_t top_k,
                        float min_p, float repetition_penalty, float presence_penalty,
                        float frequency_penalty, uint64_t seed,
                        std::vector<int32_t> stop_token_ids) {
  SamplerOptions s;
  s.max_new_tokens = max_tokens;
  s.temperature = temperature;
  s.top_p = top_p;
  s.top_k = top_k;
  s.min_p = min_p;
  s.repetition_penalty = repetition_penalty;
  s.presence_penalty = presence_penalty;
  s.frequency_penalty = frequency_penalty;
  s.seed = seed;
  s.stop_tokens = std::move(stop_token_ids);
  return s;
}

// An answer being drawn, read piece by piece (switchyard.Model.generate(stream=True)).
class StreamedAnswer {
 public:
  explicit StreamedAnswer(std::unique_ptr<AnswerStream> answer) : answer_(std::move(answer)) {}
  ~StreamedAnswer() {
    if (!finished_) answer_->Cancel();
  }

  // (text, ids, finish_reason or None) of what was drawn since the last call; waits (without
  // the interpreter's lock) until there is something, checking for Ctrl-C every 100 ms.
  std::tuple<std::string, std::vector<int32_t>, std::optional<std::string>> Next() {
    if (finished_) return {"", {}, finish_reason_};
    while (true) {
      AnswerPiece piece;
      {
        nb::gil_scoped_release release;
        piece = answer_->Next(std::chrono::milliseconds(100));
      }
      if (piece.finished) {
        finished_ = true;
        finish_reason_ = piece.finish_reason;
        ThrowIfError(piece.status);
        return {std::move(piece.text), std::move(piece.token_ids), finish_reason_};
      }
      if (!piece.text.empty() || !piece.token_ids.empty()) {
        return {std::move(piece.text), std::move(piece.token_ids), std::nullopt};
      }
      if (PyErr_CheckSignals() != 0) {
        answer_->Cancel();
        throw nb::python_error();
      }
    }
  }
  void Cancel() { answer_->Cancel(); }
  bool finished() const { return finished_; }

 private:
  std::unique_ptr<AnswerStream> answer_;
  bool finished_ = false;
  std::optional<std::string> finish_reason_;
};

// SIGINT and SIGTERM for the length of a training run: the first asks the run to stop after its
// step (with a checkpoint), as `switchyard train` does; a second one acts as if no handler were
// installed. The previous handlers (Python's) come back at the end.
std::atomic<int> g_stop{0};
extern "C" void RequestStop(int signal) {
  g_stop.store(signal);
  std::signal(signal, SIG_DFL);  // a second signal ends the process
}
class ScopedStopSignals {
 public:
  ScopedStopSignals() {
    g_stop.store(0);
    struct sigaction action = {};
    action.sa_handler = RequestStop;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &previous_int_);
    sigaction(SIGTERM, &action, &previous_term_);
  }
  ~ScopedStopSignals() {
    sigaction(SIGINT, &previous_int_, nullptr);
    sigaction(SIGTERM, &previous_term_, nullptr);
  }
  ScopedStopSignals(const ScopedStopSignals&) = delete;
  ScopedStopSignals& operator=(const ScopedStopSignals&) = delete;

 private:
  struct sigaction previous_int_ = {}, previous_term_ = {};
};

// switchyard.train: runs the job in this process (or this rank of an mpirun job). Returns the
// last evaluation record, a JSON text ("" when the run made none).
std::string Train(const std::string& config_path, const std::string& config_text,
                  std::vector<std::string> overrides, bool resume, const std::string& resume_from,
                  nb::object on_metrics) {
  launcher::TrainingJobOptions options;
  options.config_path = config_path;
  options.config_text = config_text;
  options.overrides = std::move(overrides);
  options.resume = resume;
  options.resume_from = resume_from;
  std::string last_eval;
  std::optional<nb::python_error> callback_error;
  options.on_metrics = [&](const std::string& line) {
    if (line.find("\"eval_loss\"") != std::string::npos) last_eval = line;
    if (on_metrics.is_none() || callback_error) return;
    nb::gil_scoped_acquire acquire;
    try {
      on_metrics(nb::module_::import_("json").attr("loads")(line));
    } catch (nb::python_error& e) {
      callback_error.emplace(std::move(e));
      g_stop.store(launcher::kStopRequestedByCaller);  // a checkpoint, then the error
    }
  };
  launcher::TrainingJobResult result;
  {
    ScopedStopSignals signals;
    options.stop = &g_stop;
    nb::gil_scoped_release release;
    result = launcher::RunTrainingJob(options);
  }
  if (callback_error) throw std::move(*callback_error);
  ThrowIfError(result.status);
  const int stopped_by = g_stop.load();
  if (stopped_by == SIGINT) {
    PyErr_SetString(PyExc_KeyboardInterrupt, "training stopped by Ctrl-C after its checkpoint");
    throw nb::python_error();
  }
  return last_eval;
}

// switchyard.convert: returns (from format, to format, tensors).
std::tuple<std::string, std::string, size_t> Convert(const std::string& in, const std::string& out,
                                                     const std::string& to,
                                                     const std::string& dtype, int64_t shard_mib,
                                                     int ep_size, nb::object progress) {
  convert::ConvertOptions options;
  options.in = in;
  options.out = out;
  options.to = to;
  ThrowIfError(convert::SetOutputDType(dtype, &options));
  if (shard_mib < 0) ThrowIfError(InvalidArgumentError("shard_mib must be 0 (one file) or more"));
  if (ep_size < 0) ThrowIfError(InvalidArgumentError("ep_size must be 0 (not given) or more"));
  options.shard_bytes = static_cast<uint64_t>(shard_mib) << 20;
  options.ep_size = ep_size;
  // A callback that raises is not called again; its exception is raised once the conversion has
  // ended (C++ code between here and it is not unwound by exceptions).
  std::optional<nb::python_error> callback_error;
  if (!progress.is_none()) {
    options.progress = [&progress, &callback_error](const std::string& line) {
      if (callback_error) return;
      nb::gil_scoped_acquire acquire;
      try {
        progress(line);
      } catch (nb::python_error& e) {
        callback_error.emplace(std::move(e));
      }
    };
  }
  Result<convert::ConvertSummary> done = InternalError("not run");
  {
    nb::gil_scoped_release release;
    done = convert::Convert(options);
  }
  if (callback_error) throw std::move(*callback_error);
  ThrowIfError(done.status());
  return {done->from, done->to, done->tensors};
}

// switchyard.inspect: the report as `switchyard inspect --json` prints it.
std::string Inspect(const std::string& path, bool checksums) {
  convert::InspectOptions options;
  options.checksums = checksums;
  Result<convert::InspectReport> report = InternalError("not run");
  {
    nb::gil_scoped_release release;
    report = convert::Inspect(path, options);
  }
  ThrowIfError(report.status());
  return convert::InspectJson(*report);
}

std::unique_ptr<Model> LoadModel(const std::string& path, const std::string& device,
                                 const std::string& dtype, const std::string& policy, int threads,
                                 int64_t ctx_size, int max_batch, const std::string& quantize,
                                 const std::string& quant_type) {
  ModelOptions options;
  options.inference.model_path = path;
  options.inference.device = device;
  options.inference.policy = policy;
  options.inference.threads = threads;
  options.flags.dtype = dtype;
  options.flags.quantize.quantize = quantize;
  options.flags.quantize.quant_type = quant_type;
  options.ctx_size = ctx_size;
  options.max_batch = max_batch;
  Result<std::unique_ptr<Model>> model = InternalError("not run");
  {
    nb::gil_scoped_release release;
    model = Model::Load(std::move(options));
  }
  return Unwrap(std::move(model));
}

// The logits as a numpy array that owns the vector's memory (no copy).
nb::ndarray<nb::numpy, float, nb::ndim<2>> Logits(Model& model, std::vector<int32_t> ids) {
  const size_t rows = ids.size();
  Result<std::vector<float>> logits = InternalError("not run");
  {
    nb::gil_scoped_release release;
    logits = model.Logits(std::move(ids));
  }
  auto* owned = new std::vector<float>(Unwrap(std::move(logits)));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  const size_t shape[2] = {rows, static_cast<size_t>(model.vocab_size())};
  return nb::ndarray<nb::numpy, float, nb::ndim<2>>(owned->data(), 2, shape, owner);
}

}  // namespace
}  // namespace sy::python

NB_MODULE(_switchyard, m) {
  using namespace sy;
  using namespace sy::python;
  m.doc() = "Switchyard's C++ core; use the switchyard package, which wraps it.";
  RegisterStatusExceptions(m);
  m.attr("__version__") = SY_VERSION;

  nb::class_<StreamedAnswer>(m, "Stream")
      .def("next", &StreamedAnswer::Next)
      .def("cancel", &StreamedAnswer::Cancel)
      .def_prop_ro("finished", &StreamedAnswer::finished);

  nb::class_<Model>(m, "Model")
      .def_static("load", &LoadModel, "path"_a, "device"_a, "dtype"_a, "policy"_a, "threads"_a,
                  "ctx_size"_a, "max_batch"_a, "quantize"_a, "quant_type"_a)
      .def_prop_ro("context", &Model::context)
      .def_prop_ro("vocab_size", &Model::vocab_size)
      .def_prop_ro("eos_token_ids", &Model::eos_token_ids)
      .def_prop_ro("path", &Model::path)
      .def_prop_ro("has_tokenizer", &Model::has_tokenizer)
      .def_prop_ro("has_chat_template", &Model::has_chat_template)
      .def("describe", &Model::Describe)
      .def("tokenize",
           [](const Model& model, const std::string& text) {
             nb::gil_scoped_release release;
             return Unwrap(model.Tokenize(text));
           })
      .def("detokenize",
           [](const Model& model, const std::vector<int32_t>& ids) {
             nb::gil_scoped_release release;
             return Unwrap(model.Detokenize(ids));
           })
      .def("render_chat",
           [](const Model& model, const std::vector<std::pair<std::string, std::string>>& messages,
              const std::string& kwargs_json) {
             std::vector<ChatMessageText> texts;
             for (const auto& [role, content] : messages) texts.push_back({role, content, {}});
             return Unwrap(model.RenderChat(texts, kwargs_json));
           })
      .def(
          "generate",
          [](Model& model, std::vector<int32_t> prompt, int64_t max_tokens, float temperature,
             float top_p, int32_t top_k, float min_p, float repetition_penalty,
             float presence_penalty, float frequency_penalty, uint64_t seed,
             std::vector<std::string> stop, std::vector<int32_t> stop_token_ids, bool ignore_eos,
             const std::string& response_format) {
            SamplerOptions sampling =
                Sampling(max_tokens, temperature, top_p, top_k, min_p, repetition_penalty,
                         presence_penalty, frequency_penalty, seed, std::move(stop_token_ids));
            Result<std::unique_ptr<AnswerStream>> answer = InternalError("not run");
            {
              nb::gil_scoped_release release;  // (the first response_format reads the vocabulary)
              answer = model.Generate(std::move(prompt), std::move(sampling), std::move(stop),
                                      ignore_eos, response_format);
            }
            return std::make_unique<StreamedAnswer>(Unwrap(std::move(answer)));
          },
          // The stream borrows the model's tokenizer: it keeps the model alive.
          nb::keep_alive<0, 1>())
      .def("logits", &Logits)
      .def("perplexity",
           [](Model& model, std::vector<int32_t> ids, int64_t context, int64_t max_chunks) {
             QualityOptions options;
             options.context = context;
             options.max_chunks = max_chunks;
             Result<QualityReport> report = InternalError("not run");
             {
               nb::gil_scoped_release release;
               report = model.Perplexity(std::move(ids), options);
             }
             const QualityReport r = Unwrap(std::move(report));
             return std::make_tuple(r.perplexity(), r.scored, r.chunks);
           });

  m.def("train", &Train, "config_path"_a, "config_text"_a, "overrides"_a, "resume"_a,
        "resume_from"_a, "on_metrics"_a.none());
  m.def("convert", &Convert, "input"_a, "output"_a, "to"_a, "dtype"_a, "shard_mib"_a, "ep_size"_a,
        "progress"_a.none());
  m.def("inspect", &Inspect, "path"_a, "checksums"_a);
}
