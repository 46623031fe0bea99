// A read-only memory map of a whole file (checkpoints are mapped, never read into memory).
//
// The subtle part: a mapping stays valid while the MappedFile lives, and every pointer into it
// dies with it, so the owners of views (safetensors files, checkpoints) keep their MappedFile.
// An empty file maps to data() == nullptr, size() == 0 (mmap of length 0 is an error on POSIX).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mla {

class MappedFile {
 public:
  // Maps `path`; throws mla::Error naming the file and the system's reason when it cannot.
  static MappedFile open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void release();

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Reads a whole (small) text file such as config.json; throws mla::Error if it cannot.
std::string read_text_file(const std::string& path);

}  // namespace mla
