// A Hugging Face model directory: config.json, the *.safetensors weights (one file, or shards named
// by model.safetensors.index.json), optionally tokenizer.json.
//
// All files are memory-mapped; nothing is read until a tensor is asked for. read_f32() is where a
// checkpoint's dtype stops mattering: BF16/F16/F32 convert exactly, and F8_E4M3 weights
// (DeepSeek-V3/R1) are dequantised with their `<name>_scale_inv` block scales: weight[i][j] =
// fp8[i][j] · scale_inv[i / block_rows][j / block_cols], the last block of a row or column being
// partial when the dimension is not a multiple of the block (kv_a_proj_with_mqa's 576 rows).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "weights/model_config.h"
#include "weights/safetensors.h"

namespace mla::weights {

class Checkpoint {
 public:
  // Reads config.json and maps the weight files; throws mla::Error naming what is missing/wrong.
  static Checkpoint open(const std::string& model_dir);

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  bool has_tokenizer() const { return has_tokenizer_; }
  const std::vector<SafetensorsFile>& files() const { return files_; }
  // Every tensor of every file, sorted by name.
  std::vector<const TensorInfo*> tensors() const;

  const TensorInfo* find(std::string_view name) const;  // nullptr when absent
  // As find(), but a missing tensor throws mla::Error naming it and where it was looked for.
  const TensorInfo& get(std::string_view name) const;

  // The tensor as fp32, after checking its shape against `expected_shape` (the error names the
  // tensor, its file, the expected and the actual shape). F8_E4M3 tensors are dequantised.
  std::vector<float> read_f32(std::string_view name,
                              const std::vector<int64_t>& expected_shape) const;

 private:
  std::string dir_;
  ModelConfig config_;
  bool has_tokenizer_ = false;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, const TensorInfo*, std::less<>> by_name_;  // into files_
  std::string weight_source_;  // "model.safetensors.index.json" or the file list, for messages
};

}  // namespace mla::weights
