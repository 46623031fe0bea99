// One .safetensors file, memory-mapped and validated: the tensor index and views of the raw bytes.
//
// Layout: 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape,
// data_offsets: [begin, end)}, "__metadata__": {...}}, then the data; offsets count from the end
// of the header. Everything a malformed file could lie about (header length, offsets, byte counts
// against shape × dtype size) is checked when the file is opened, so a later read never leaves the
// mapping; every error names the file, and the tensor where there is one. The data is not aligned
// for its dtype in general: readers copy bytes (memcpy), never cast pointers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"

namespace mla::weights {

// The dtypes the safetensors format defines (names as they appear in the header).
enum class DType {
  kBool,
  kU8,
  kI8,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
  kF8_E4M3,
  kF8_E5M2
};

const char* dtype_name(DType dtype);
size_t dtype_size(DType dtype);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // inside the file's mapping (unaligned)
  size_t bytes = 0;
  const std::string* file = nullptr;  // path of the file holding it

  int64_t numel() const;
};

// "[1024, 512]"
std::string shape_string(const std::vector<int64_t>& shape);

class SafetensorsFile {
 public:
  // Maps and validates `path`; throws mla::Error on anything malformed.
  explicit SafetensorsFile(const std::string& path);
  SafetensorsFile(SafetensorsFile&&) = default;
  SafetensorsFile& operator=(SafetensorsFile&&) = default;

  const std::string& path() const { return *path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;  // nullptr when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  MappedFile mapping_;
  std::unique_ptr<std::string> path_;  // stable address for TensorInfo::file across moves
  std::vector<TensorInfo> tensors_;    // sorted by name
  std::map<std::string, std::string> metadata_;
};

// Converts a tensor of dtype BF16, F16, F32 or F8_E4M3 to fp32 (`out` holds numel() floats); any
// other dtype throws mla::Error naming the tensor, its file and its dtype.
void convert_to_f32(const TensorInfo& tensor, float* out);

}  // namespace mla::weights
