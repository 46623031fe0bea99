// The model setup shared by the model commands; see model_setup.h.
#include "tools/mla/model_setup.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "model/cpu_backend.h"
#include "model/memory_plan.h"
#include "model/roofline.h"
#include "model/synthetic_batch.h"
#include "weights/presets.h"
#if MLA_WITH_CUDA_BACKEND
#include "cuda/check.h"
#include "model/cuda_backend.h"
#include "model/cuda_memory_plan.h"
#endif

namespace mla::tools {
namespace {

namespace fs = std::filesystem;

class LoadProgressBar {
 public:
  LoadProgressBar(const char* who, double total_bytes, const model::CudaBackend* cuda)
      : who_(who), total_bytes_(total_bytes), cuda_(cuda), start_(Clock::now()) {}

  void operator()(int done, int total) {
    constexpr int kWidth = 30;
    const int filled = total > 0 ? done * kWidth / total : kWidth;
    double bytes = total > 0 ? total_bytes_ * done / total : 0.0;
#if MLA_WITH_CUDA_BACKEND
    if (cuda_ != nullptr) {
      // Dummy weights are filled asynchronously: the last rate waits for them.
      if (done == total) MLA_CUDA_CHECK(cudaStreamSynchronize(cuda_->stream()));
      bytes = static_cast<double>(cuda_->stats().weight_bytes);
    }
#endif
    const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    std::fprintf(stderr, "\r%s: loading weights [%s%s] %d/%d layers, %.1f GB, %.2f GB/s", who_,
                 std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(), done,
                 total, bytes / 1e9, seconds > 0 ? bytes / 1e9 / seconds : 0.0);
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  const char* who_;
  double total_bytes_;
  const model::CudaBackend* cuda_;
  Clock::time_point start_;
};

}  // namespace

bool have_cuda_backend() {
  return MLA_WITH_CUDA_BACKEND != 0;
}

void add_model_source_options(CLI::App* command, ModelSourceOptions& options, bool with_model_dir,
                              bool with_backend) {
  if (with_model_dir)
    command->add_option(
        "model_dir", options.model_dir,
        "Hugging Face model directory (or --model-preset with --load-format dummy)");
  command->add_option("--model-preset", options.model_preset,
                      fmt::format("A released model's config instead of MODEL_DIR (dummy weights "
                                  "only): {}",
                                  fmt::join(weights::model_preset_names(), ", ")));
  command
      ->add_option("--load-format", options.load_format,
                   "auto: the checkpoint's weights; dummy: random weights of the config's shapes")
      ->check(CLI::IsMember({"auto", "dummy"}))
      ->capture_default_str();
  if (with_backend)
    command->add_option("--backend", options.backend, "cpu or cuda")
        ->check(CLI::IsMember({"cpu", "cuda"}))
        ->capture_default_str();
  command
      ->add_option("--gpu-memory-utilization", options.gpu_memory_utilization,
                   "Fraction of the GPU's memory for weights, activations and the KV cache (cuda)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  command->add_flag("--eager", options.eager, "No CUDA graphs: every step eagerly (debugging)");
  command->add_flag("--unfold-shared-experts", options.unfold_shared_experts,
                    "Run the MoE shared experts as their own MLP instead of inside the routed "
                    "experts' grouped GEMM (A/B)");
  command->add_flag("--unfuse-input-projections", options.unfuse_input_projections,
                    "Run the MLA layer's q and kv_a projections as two GEMMs instead of one over "
                    "their stacked weights (A/B)");
}

ModelSource resolve_model_source(const ModelSourceOptions& options) {
  if (options.backend != "cpu" && options.backend != "cuda")
    throw_error("--backend must be cpu or cuda, got '{}'", options.backend);
  if (options.backend == "cuda" && !have_cuda_backend())
    throw_error(
        "--backend cuda: this build has no CUDA backend (configure with nvcc on PATH, "
        "MLA_CUDA=ON)");
  if (options.load_format != "auto" && options.load_format != "dummy")
    throw_error("--load-format must be auto or dummy, got '{}'", options.load_format);
  if (!(options.gpu_memory_utilization > 0.0 && options.gpu_memory_utilization <= 1.0))
    throw_error("--gpu-memory-utilization must be in (0, 1], got {}",
                options.gpu_memory_utilization);
  ModelSource source;
  source.dummy = options.load_format == "dummy";
  if (options.model_dir.empty() == options.model_preset.empty())
    throw_error("give either MODEL_DIR or --model-preset NAME (with --load-format dummy), not {}",
                options.model_dir.empty() ? "neither" : "both");
  if (!options.model_preset.empty()) {
    if (!source.dummy)
      throw_error(
          "--model-preset {} has no weights: add --load-format dummy (random weights of its "
          "shapes)",
          options.model_preset);
    source.config = weights::model_preset(options.model_preset);
    source.name = options.model_preset;
    return source;
  }
  if (!fs::is_directory(options.model_dir))
    throw_error("{} is not a directory (give a Hugging Face model directory)", options.model_dir);
  if (source.dummy && !fs::exists(fs::path(options.model_dir) / "config.json"))
    throw_error("--load-format dummy needs {}/config.json, which does not exist",
                options.model_dir);
  source.model_dir = options.model_dir;
  source.config = weights::load_model_config(options.model_dir);
  source.name = fs::path(options.model_dir).lexically_normal().filename().string();
  if (source.name.empty() || source.name == ".")
    source.name =
        fs::absolute(options.model_dir).lexically_normal().parent_path().filename().string();
  return source;
}

LoadedModel load_model(const ModelSource& source, const ModelSourceOptions& options,
                       model::ModelOptions model_options, const char* who) {
  LoadedModel loaded;
  model_options.step_graphs = model_options.step_graphs && !options.eager;
  model_options.fold_shared_experts =
      model_options.fold_shared_experts && !options.unfold_shared_experts;
  model_options.fuse_input_projections =
      model_options.fuse_input_projections && !options.unfuse_input_projections;
  if (options.backend == "cuda") {
#if MLA_WITH_CUDA_BACKEND
    auto cuda = std::make_unique<model::CudaBackend>();
    loaded.cuda = cuda.get();
    loaded.backend = std::move(cuda);
    // Refuse before loading anything when the weights cannot fit.
    size_t free_bytes = 0, total_bytes = 0;
    MLA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    model::check_weights_fit(static_cast<size_t>(model::model_weight_bytes(source.config).total()),
                             total_bytes, options.gpu_memory_utilization);
#endif
  } else {
    loaded.backend = std::make_unique<model::CpuBackend>();
  }
  std::fprintf(stderr, "%s: %s %s on the %s backend (%s)\n", who,
               source.dummy ? "making dummy weights for" : "loading", source.name.c_str(),
               loaded.backend->name().c_str(),
               options.eager || loaded.cuda == nullptr ? "eager" : "step graphs");
  LoadProgressBar progress(who, model::model_weight_bytes(source.config).total(), loaded.cuda);
  const auto start = std::chrono::steady_clock::now();
  if (source.dummy)
    loaded.model =
        model::Model::dummy(source.config, *loaded.backend, model_options, std::ref(progress));
  else
    loaded.model =
        model::Model::load(source.model_dir, *loaded.backend, model_options, std::ref(progress));
  loaded.load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return loaded;
}

PlannedMemory plan_memory(LoadedModel& loaded, const ModelSourceOptions& options,
                          const MemoryPlanRequest& request, const char* who) {
#if MLA_WITH_CUDA_BACKEND
  MLA_CHECK(loaded.cuda != nullptr);
  model::CudaMemoryPlanOptions plan_options;
  plan_options.gpu_memory_utilization = options.gpu_memory_utilization;
  plan_options.max_num_batched_tokens = request.max_num_batched_tokens;
  plan_options.max_num_seqs = request.max_num_seqs;
  plan_options.max_model_len = request.max_model_len;
  const model::CudaMemoryPlan plan =
      model::plan_cuda_memory(*loaded.model, *loaded.cuda, plan_options);
  std::fprintf(stderr, "%s: %s\n", who, model::describe(plan).c_str());
  PlannedMemory planned;
  planned.num_pages = plan.num_pages;
  planned.weight_bytes = static_cast<double>(plan.weight_bytes);
  planned.arena_bytes = static_cast<double>(plan.arena_bytes);
  planned.kv_cache_bytes = static_cast<double>(plan.kv_cache_bytes);
  planned.reserve_bytes = static_cast<double>(plan.reserve_bytes);
  planned.total_bytes = static_cast<double>(plan.total_memory_bytes);
  return planned;
#else
  throw_error("{}: this build has no CUDA backend", who);
#endif
}

int record_step_graphs(engine::ModelCacheRunner& runner, model::Model& model, int max_num_seqs,
                       const char* who) {
  std::vector<int> buckets;
  for (int rows = 1; rows <= max_num_seqs; ++rows) {
    const int bucket = model.graph_bucket(rows);
    if (bucket > 0 && bucket <= runner.num_pages() && (buckets.empty() || buckets.back() != bucket))
      buckets.push_back(bucket);
  }
  if (buckets.empty()) return 0;
#if MLA_WITH_CUDA_BACKEND
  const auto* cuda = dynamic_cast<const model::CudaBackend*>(&model.backend());
#endif
  auto captured = [&] {
#if MLA_WITH_CUDA_BACKEND
    if (cuda != nullptr) return cuda->stats().graphs_captured;
#endif
    return 0;
  };
  const int captured_before = captured();
  const auto start = std::chrono::steady_clock::now();
  for (auto it = buckets.rbegin(); it != buckets.rend(); ++it) {
    model::SyntheticBatchShape shape;
    shape.decode_rows = *it;
    const model::SyntheticBatch step =
        model::make_synthetic_batch(shape, model.config().vocab_size, 64);
    // A (cache, bucket)'s first step runs eagerly (first-use set-up); its second is recorded.
    runner.run({}, step.batch);
    runner.run({}, step.batch);
  }
  const int recorded = captured() - captured_before;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr,
               "%s: recorded %d step graphs for %zu buckets (decode batches of %d to %d rows) in "
               "%.2f s\n",
               who, recorded, buckets.size(), buckets.front(), buckets.back(), seconds);
  return recorded;
}

}  // namespace mla::tools
