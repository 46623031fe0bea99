// Prometheus text for /metrics; see metrics_text.h.
#include "server/metrics_text.h"

#include <fmt/format.h>

namespace mla::server {
namespace {

void add(std::string& out, const char* name, const char* type, const char* help, double value,
         const std::string& labels) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{}{{{}}} {}\n", name, help, name, type, name,
                     labels, value);
}

void add_histogram(std::string& out, const char* name, const char* help,
                   const engine::Histogram& histogram, const std::string& labels) {
  const engine::Histogram::Snapshot snapshot = histogram.snapshot();
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < snapshot.bounds.size(); ++i) {
    cumulative += snapshot.counts[i];
    out +=
        fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, snapshot.bounds[i], cumulative);
  }
  out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, snapshot.count);
  out += fmt::format("{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, labels, snapshot.sum, name,
                     labels, snapshot.count);
}

}  // namespace

std::string render_metrics(const engine::EngineMetrics& m, const engine::EngineSnapshot& snapshot,
                           const std::string& model_name) {
  const std::string labels = fmt::format("model_name=\"{}\"", model_name);
  std::string out;
  add(out, "mla_requests_total", "counter", "Requests accepted", m.requests_received, labels);
  add(out, "mla_requests_rejected_total", "counter",
      "Requests refused at submission (invalid or queue full)", m.requests_rejected, labels);
  add(out, "mla_requests_finished_total", "counter", "Requests whose every choice ended",
      m.requests_finished, labels);
  out +=
      "# HELP mla_choices_finished_total Choices ended, by reason\n"
      "# TYPE mla_choices_finished_total counter\n";
  for (const auto& [reason, value] :
       {std::pair{"stop", m.choices_stop.load()}, std::pair{"length", m.choices_length.load()},
        std::pair{"cancelled", m.choices_cancelled.load()},
        std::pair{"error", m.choices_error.load()}})
    out +=
        fmt::format("mla_choices_finished_total{{{},reason=\"{}\"}} {}\n", labels, reason, value);
  add(out, "mla_prompt_tokens_total", "counter", "Prompt tokens of accepted requests",
      m.prompt_tokens, labels);
  add(out, "mla_generation_tokens_total", "counter", "Tokens generated", m.generated_tokens,
      labels);
  add(out, "mla_prefill_tokens_computed_total", "counter",
      "Prompt tokens run through the model (prefix-cache hits excluded, recomputation included)",
      m.prefill_tokens_computed, labels);
  add(out, "mla_engine_steps_total", "counter", "Forward steps", m.steps, labels);
  add(out, "mla_preemptions_total", "counter", "Sequences preempted for lack of cache pages",
      m.preemptions, labels);
  add(out, "mla_prefix_cache_queried_tokens_total", "counter",
      "Tokens of admitted sequences looked up in the prefix cache", m.prefix_cache_queried_tokens,
      labels);
  add(out, "mla_prefix_cache_hit_tokens_total", "counter",
      "Tokens of admitted sequences found in the prefix cache", m.prefix_cache_hit_tokens, labels);
  add(out, "mla_requests_waiting", "gauge", "Requests queued, not yet admitted (queue depth)",
      snapshot.waiting_requests, labels);
  add(out, "mla_requests_live", "gauge", "Requests submitted and not finished",
      snapshot.live_requests, labels);
  add(out, "mla_sequences_running", "gauge", "Sequences (choices) holding cache pages",
      snapshot.running_sequences, labels);
  add(out, "mla_kv_cache_pages_used", "gauge", "Latent-cache pages owned by sequences",
      snapshot.pages_used, labels);
  add(out, "mla_kv_cache_pages_total", "gauge", "Latent-cache pages (64 tokens each)",
      snapshot.pages_total, labels);
  add(out, "mla_kv_cache_pages_cached", "gauge", "Pages holding a published prefix", m.pages_cached,
      labels);
  add_histogram(out, "mla_time_to_first_token_seconds", "From arrival to the first token",
                m.time_to_first_token, labels);
  add_histogram(out, "mla_inter_token_latency_seconds", "Between tokens of one choice",
                m.inter_token_latency, labels);
  add_histogram(out, "mla_request_latency_seconds", "From arrival to the last choice's end",
                m.request_latency, labels);
  return out;
}

}  // namespace mla::server
