// The engine's metrics as Prometheus text exposition (version 0.0.4): counters end in _total,
// histograms give cumulative _bucket{le=...} lines, then _sum and _count.
#pragma once

#include <string>

#include "engine/engine.h"

namespace mla::server {

std::string render_metrics(const engine::EngineMetrics& metrics,
                           const engine::EngineSnapshot& snapshot, const std::string& model_name);

}  // namespace mla::server
