// What `mla generate`, `mla serve` and `mla bench throughput|step` share: where the model comes
// from (MODEL_DIR, or --model-preset with --load-format dummy), which backend runs it, loading it
// with a progress bar (stderr, with GB/s), and on the CUDA backend the start-up memory plan.
//
// The subtle thing: every option is validated (resolve_model_source) before anything touches the
// GPU or reads weights, so a bad flag is a one-line error at once, also on a machine with no GPU.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "engine/model_runner.h"
#include "model/backend.h"
#include "model/model.h"
#include "weights/model_config.h"

namespace mla::model {
class CudaBackend;
}

namespace mla::tools {

struct ModelSourceOptions {
  std::string model_dir;  // a Hugging Face model directory (or, with dummy, one with config.json)
  std::string model_preset;  // instead of model_dir: weights::model_preset(name), dummy only
  std::string load_format = "auto";  // auto: the checkpoint's weights; dummy: random weights
  std::string backend = "cpu";
  double gpu_memory_utilization = 0.90;
  bool eager = false;                     // no step graphs (CUDA backend)
  bool unfold_shared_experts = false;     // ModelOptions::fold_shared_experts off (A/B)
  bool unfuse_input_projections = false;  // ModelOptions::fuse_input_projections off (A/B)
};

// Adds [MODEL_DIR] (unless `with_model_dir` is false), --model-preset, --load-format, and when
// `with_backend` --backend; --gpu-memory-utilization, --eager, --unfold-shared-experts and
// --unfuse-input-projections always.
void add_model_source_options(CLI::App* command, ModelSourceOptions& options,
                              bool with_model_dir = true, bool with_backend = true);

struct ModelSource {
  bool dummy = false;
  std::string model_dir;  // empty for a preset
  std::string name;       // the preset's name or the directory's
  weights::ModelConfig config;
};

// Validates the combination (mla::Error with what to do): exactly one of MODEL_DIR and
// --model-preset; a preset only with --load-format dummy; dummy from a directory needs its
// config.json; --backend cpu or cuda (cuda only in a build with the CUDA backend);
// 0 < --gpu-memory-utilization <= 1.
ModelSource resolve_model_source(const ModelSourceOptions& options);

// True in builds with the CUDA backend (MLA_WITH_CUDA_BACKEND).
bool have_cuda_backend();

struct LoadedModel {
  std::unique_ptr<model::Backend> backend;
  model::CudaBackend* cuda = nullptr;  // backend as the CUDA backend, when it is one
  std::unique_ptr<model::Model> model;
  double load_seconds = 0;
};

// Makes the backend and loads (or makes, for dummy) the weights with a progress bar on stderr
// prefixed by `who` ("mla serve").
LoadedModel load_model(const ModelSource& source, const ModelSourceOptions& options,
                       model::ModelOptions model_options, const char* who);

// The CUDA backend's memory plan (sizes the arena; says how many KV-cache pages fit) and its one
// line on stderr. Only with a CUDA backend.
struct MemoryPlanRequest {
  int max_num_batched_tokens = 2048;
  int max_num_seqs = 64;
  int max_model_len = 4096;
};
struct PlannedMemory {
  int num_pages = 0;
  double weight_bytes = 0, arena_bytes = 0, kv_cache_bytes = 0, reserve_bytes = 0;
  double total_bytes = 0;
};
PlannedMemory plan_memory(LoadedModel& loaded, const ModelSourceOptions& options,
                          const MemoryPlanRequest& request, const char* who);

// Records the step graph of every decode batch bucket up to max_num_seqs rows on the runner's
// cache before the engine starts (one-token rows at position 0 in pages 0..rows-1, which the
// engine overwrites before it reads them), so no step of a run pays for a capture. Prints one
// line; returns the number of graphs recorded (0 with --eager or on the CPU backend).
int record_step_graphs(engine::ModelCacheRunner& runner, model::Model& model, int max_num_seqs,
                       const char* who);

}  // namespace mla::tools
