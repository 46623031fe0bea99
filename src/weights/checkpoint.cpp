// Model directories, sharded weights and FP8 dequantisation; see checkpoint.h.
#include "weights/checkpoint.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <set>

#include <fmt/ranges.h>

#include "core/error.h"
#include "core/mapped_file.h"

namespace mla::weights {
namespace fs = std::filesystem;

Checkpoint Checkpoint::open(const std::string& model_dir) {
  if (!fs::is_directory(model_dir))
    throw_error(
        "{}: no such directory (a model is a Hugging Face directory: config.json, "
        "*.safetensors)",
        model_dir);
  Checkpoint checkpoint;
  checkpoint.dir_ = model_dir;
  checkpoint.config_ = load_model_config(model_dir);
  checkpoint.has_tokenizer_ = fs::exists(fs::path(model_dir) / "tokenizer.json");

  const fs::path index_path = fs::path(model_dir) / "model.safetensors.index.json";
  std::vector<std::pair<std::string, std::string>> index_entries;  // tensor, file
  std::vector<std::string> file_names;
  if (fs::exists(index_path)) {
    const nlohmann::json index =
        nlohmann::json::parse(read_text_file(index_path.string()), nullptr, false);
    if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
        !index["weight_map"].is_object())
      throw_error("{}: not valid JSON with a 'weight_map' object", index_path.string());
    std::set<std::string> distinct;
    for (const auto& [tensor, file] : index["weight_map"].items()) {
      if (!file.is_string())
        throw_error("{}: weight_map['{}'] is not a file name", index_path.string(), tensor);
      index_entries.emplace_back(tensor, file.get<std::string>());
      distinct.insert(file.get<std::string>());
    }
    file_names.assign(distinct.begin(), distinct.end());
    for (const std::string& name : file_names)
      if (!fs::exists(fs::path(model_dir) / name))
        throw_error("{}: names the shard '{}', which is not in {}", index_path.string(), name,
                    model_dir);
    checkpoint.weight_source_ = index_path.string();
  } else if (fs::exists(fs::path(model_dir) / "model.safetensors")) {
    file_names.push_back("model.safetensors");
  } else {
    for (const auto& entry : fs::directory_iterator(model_dir))
      if (entry.path().extension() == ".safetensors")
        file_names.push_back(entry.path().filename().string());
    std::sort(file_names.begin(), file_names.end());
  }
  if (file_names.empty())
    throw_error(
        "{}: no weights: expected model.safetensors, model.safetensors.index.json or "
        "*.safetensors",
        model_dir);
  if (checkpoint.weight_source_.empty())
    checkpoint.weight_source_ = fmt::format("{} ({})", model_dir, fmt::join(file_names, ", "));

  for (const std::string& name : file_names)
    checkpoint.files_.emplace_back((fs::path(model_dir) / name).string());
  for (const SafetensorsFile& file : checkpoint.files_) {
    for (const TensorInfo& tensor : file.tensors()) {
      auto [it, inserted] = checkpoint.by_name_.emplace(tensor.name, &tensor);
      if (!inserted)
        throw_error("{}: tensor '{}' is in both {} and {}", model_dir, tensor.name,
                    *it->second->file, file.path());
    }
  }
  for (const auto& [tensor, file] : index_entries) {
    const TensorInfo* info = checkpoint.find(tensor);
    if (info == nullptr || fs::path(*info->file).filename() != file)
      throw_error("{}: maps '{}' to {}, but that shard has no such tensor", index_path.string(),
                  tensor, file);
  }
  return checkpoint;
}

std::vector<const TensorInfo*> Checkpoint::tensors() const {
  std::vector<const TensorInfo*> all;
  for (const auto& [name, info] : by_name_) all.push_back(info);
  return all;
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const TensorInfo& Checkpoint::get(std::string_view name) const {
  const TensorInfo* info = find(name);
  if (info == nullptr)
    throw_error("checkpoint {}: tensor '{}' is missing (looked in {})", dir_, name, weight_source_);
  return *info;
}

std::vector<float> Checkpoint::read_f32(std::string_view name,
                                        const std::vector<int64_t>& expected_shape) const {
  const TensorInfo& tensor = get(name);
  if (tensor.shape != expected_shape)
    throw_error("{}: tensor '{}' has shape {}, expected {} (from config.json)", *tensor.file,
                tensor.name, shape_string(tensor.shape), shape_string(expected_shape));
  std::vector<float> values(static_cast<size_t>(tensor.numel()));
  convert_to_f32(tensor, values.data());
  if (tensor.dtype != DType::kF8_E4M3) return values;

  // FP8 block dequantisation.
  if (tensor.shape.size() != 2)
    throw_error("{}: FP8 tensor '{}' has shape {}: block scales need a matrix", *tensor.file,
                tensor.name, shape_string(tensor.shape));
  const std::string scale_name = tensor.name + "_scale_inv";
  const TensorInfo* scale = find(scale_name);
  if (scale == nullptr)
    throw_error("checkpoint {}: FP8 tensor '{}' has no block scales '{}'", dir_, tensor.name,
                scale_name);
  const int64_t rows = tensor.shape[0];
  const int64_t cols = tensor.shape[1];
  const int64_t block_rows = config_.fp8_block_rows;
  const int64_t block_cols = config_.fp8_block_cols;
  const std::vector<int64_t> scale_shape = {(rows + block_rows - 1) / block_rows,
                                            (cols + block_cols - 1) / block_cols};
  if (scale->shape != scale_shape)
    throw_error("{}: tensor '{}' has shape {}, expected {} (one scale per {}x{} block of {} {})",
                *scale->file, scale_name, shape_string(scale->shape), shape_string(scale_shape),
                block_rows, block_cols, tensor.name, shape_string(tensor.shape));
  std::vector<float> scales(static_cast<size_t>(scale->numel()));
  convert_to_f32(*scale, scales.data());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      values[i * cols + j] *= scales[(i / block_rows) * scale_shape[1] + j / block_cols];
  return values;
}

}  // namespace mla::weights
