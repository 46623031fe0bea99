// `mla info`: what this build and this machine offer.
#include <fmt/format.h>

#include "tools/mla/commands.h"
#if MLA_WITH_CUDA
#include "cuda/device.h"
#endif

namespace mla::tools {

void add_info_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand("info", "Print the build and the GPUs found");
  command->callback([] {
    fmt::print("mla.cpp {}\n", MLA_VERSION);
#if MLA_WITH_CUDA
    const int count = cuda::device_count();
    fmt::print("CUDA: built in; {} GPU(s) found\n", count);
    for (int i = 0; i < count; ++i) {
      MLA_CUDA_CHECK(cudaSetDevice(i));
      fmt::print("  [{}] {}\n", i, cuda::describe(cuda::current_device_info()));
    }
#else
    fmt::print("CUDA: not built (CPU backend only)\n");
#endif
  });
}

}  // namespace mla::tools
