// mla: one program, many subcommands (demo, bench, info, tokenize, inspect, generate, serve).
// Errors a user can act on print one line and exit 1.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "core/error.h"
#include "tools/mla/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"mla.cpp: inference for Multi-head Latent Attention models (DeepSeek-V2/V3/R1)"};
  app.require_subcommand(1);
  mla::tools::add_demo_command(app);
  mla::tools::add_bench_command(app);
  mla::tools::add_info_command(app);
  mla::tools::add_tokenize_command(app);
  mla::tools::add_inspect_command(app);
  mla::tools::add_generate_command(app);
#if MLA_WITH_SERVER
  mla::tools::add_serve_command(app);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  } catch (const mla::Error& error) {
    std::fprintf(stderr, "mla: error: %s\n", error.what());
    return 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "mla: unexpected error: %s\n", error.what());
    return 2;
  }
  return 0;
}
