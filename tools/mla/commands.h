// The subcommands of the `mla` program; each registers its CLI11 options and runs.
#pragma once

#include <CLI/CLI.hpp>

namespace mla::tools {

void add_demo_command(CLI::App& app);
void add_bench_command(CLI::App& app);
// `mla bench throughput` and `mla bench step` (cmd_bench_model.cpp), under `mla bench`.
void add_bench_model_commands(CLI::App* bench);
void add_info_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_serve_command(CLI::App& app);

}  // namespace mla::tools
