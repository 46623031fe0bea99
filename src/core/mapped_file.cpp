// POSIX mmap behind MappedFile; see mapped_file.h.
#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "core/error.h"

namespace mla {

MappedFile MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_error("cannot open {}: {}", path, std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int saved = errno;
    ::close(fd);
    throw_error("cannot stat {}: {}", path, std::strerror(saved));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    throw_error("{} is not a regular file", path);
  }
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<size_t>(info.st_size);
  if (file.size_ > 0) {
    void* address = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (address == MAP_FAILED) {
      const int saved = errno;
      ::close(fd);
      throw_error("cannot map {} ({} bytes): {}", path, file.size_, std::strerror(saved));
    }
    file.data_ = static_cast<const uint8_t*>(address);
  }
  ::close(fd);  // the mapping keeps the file open
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  release();
}

void MappedFile::release() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

std::string read_text_file(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error))
    throw_error("{} is a directory, not a file", path);
  std::ifstream stream(path, std::ios::binary);
  if (!stream) throw_error("cannot open {}: {}", path, std::strerror(errno));
  std::ostringstream contents;
  contents << stream.rdbuf();
  if (stream.bad()) throw_error("cannot read {}", path);
  return contents.str();
}

}  // namespace mla
