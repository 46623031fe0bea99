// `mla inspect MODEL_DIR`: the parsed config.json and a summary of the weights (count, bytes,
// dtypes), without loading any weight (the files are only mapped).
#include <fmt/format.h>

#include <map>
#include <string>

#include "tools/mla/commands.h"
#include "weights/checkpoint.h"

namespace mla::tools {
namespace {

struct InspectOptions {
  std::string model_dir;
  bool list_tensors = false;
};

std::string format_bytes(double bytes) {
  if (bytes >= 1e9) return fmt::format("{:.2f} GB", bytes / 1e9);
  if (bytes >= 1e6) return fmt::format("{:.2f} MB", bytes / 1e6);
  if (bytes >= 1e3) return fmt::format("{:.1f} kB", bytes / 1e3);
  return fmt::format("{} B", bytes);
}

void run_inspect(const InspectOptions& options) {
  const weights::Checkpoint checkpoint = weights::Checkpoint::open(options.model_dir);
  const weights::ModelConfig& config = checkpoint.config();
  fmt::print("model                   {}\n", checkpoint.dir());
  fmt::print("{}", weights::describe(config));
  const double latent_bytes = 2.0 * config.latent_dim() * config.num_hidden_layers;
  fmt::print("latent cache            {} B per token in BF16 ({} values x {} layers)\n",
             latent_bytes, config.latent_dim(), config.num_hidden_layers);

  struct DtypeTotal {
    int64_t tensors = 0;
    double bytes = 0;
    int64_t elements = 0;
  };
  std::map<std::string, DtypeTotal> by_dtype;
  double total_bytes = 0;
  int64_t scale_tensors = 0;
  const auto tensors = checkpoint.tensors();
  for (const weights::TensorInfo* tensor : tensors) {
    DtypeTotal& entry = by_dtype[weights::dtype_name(tensor->dtype)];
    ++entry.tensors;
    entry.bytes += static_cast<double>(tensor->bytes);
    entry.elements += tensor->numel();
    total_bytes += static_cast<double>(tensor->bytes);
    if (tensor->name.ends_with("_scale_inv")) ++scale_tensors;
  }
  fmt::print("weights                 {} tensors, {} in {} file(s){}\n", tensors.size(),
             format_bytes(total_bytes), checkpoint.files().size(),
             checkpoint.has_tokenizer() ? ", tokenizer.json present" : ", no tokenizer.json");
  for (const auto& [dtype, entry] : by_dtype)
    fmt::print("  {:<8}              {} tensors, {} values, {}\n", dtype, entry.tensors,
               entry.elements, format_bytes(entry.bytes));
  if (scale_tensors > 0)
    fmt::print(
        "  FP8 block scales      {} *_scale_inv tensors ({}x{} blocks), dequantised at load\n",
        scale_tensors, config.fp8_block_rows, config.fp8_block_cols);
  if (options.list_tensors)
    for (const weights::TensorInfo* tensor : tensors)
      fmt::print("{} {} {}\n", tensor->name, weights::dtype_name(tensor->dtype),
                 weights::shape_string(tensor->shape));
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* command =
      app.add_subcommand("inspect", "Print a model directory's config and weight summary");
  command->add_option("model_dir", options->model_dir, "Hugging Face model directory")->required();
  command->add_flag("--tensors", options->list_tensors, "List every tensor (name, dtype, shape)");
  command->callback([options] { run_inspect(*options); });
}

}  // namespace mla::tools
