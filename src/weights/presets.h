// Named model configurations (`--model-preset`): the config.json values of released DeepSeek
// checkpoints, for running a full-size model with dummy weights (`--load-format dummy`) where the
// checkpoint is not at hand. The values are those of the Hugging Face repositories'
// config.json files (deepseek-ai/DeepSeek-V2-Lite, deepseek-ai/DeepSeek-V3), parsed by the same
// parser as a checkpoint's.
#pragma once

#include <string>
#include <vector>

#include "weights/model_config.h"

namespace mla::weights {

std::vector<std::string> model_preset_names();  // "deepseek-v2-lite", "deepseek-v3"
// Throws mla::Error listing the known names for an unknown one.
ModelConfig model_preset(const std::string& name);

}  // namespace mla::weights
