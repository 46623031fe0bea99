// Several sequences in one forward step (the shape continuous batching will use): decoding and
// prefilling sequences side by side in one flat batch over one shared latent cache, with
// interleaved pages, give each sequence the logits it gets when run alone.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "model/cpu_backend.h"
#include "model/generate.h"
#include "model/model.h"

namespace mla {
namespace {

struct Sequence {
  std::vector<int32_t> tokens;  // all of its tokens, in order
  std::vector<int32_t> pages;
  int cached = 0;
};

// Appends `count` new tokens of `seq` to the batch (logits wanted for all of them).
void add_to_batch(model::ForwardBatch& batch, Sequence& seq, int count) {
  model::SequenceSlice slice;
  slice.first_token = static_cast<int>(batch.token_ids.size());
  slice.num_tokens = count;
  slice.num_cached = seq.cached;
  slice.block_table = seq.pages;
  for (int j = 0; j < count; ++j) {
    const int position = seq.cached + j;
    batch.logit_rows.push_back(static_cast<int32_t>(batch.token_ids.size()));
    batch.token_ids.push_back(seq.tokens[position]);
    batch.positions.push_back(position);
    batch.slot_mapping.push_back(int64_t(seq.pages[position / 64]) * 64 + position % 64);
  }
  batch.sequences.push_back(slice);
  seq.cached += count;
}

TEST(Batch, MixedDecodeAndPrefillStepsEqualSeparateRuns) {
  const std::string dir = std::string(MLA_TEST_FIXTURES_DIR) + "/tiny-deepseek-v3";
  const nlohmann::json golden = nlohmann::json::parse(read_text_file(dir + "/golden.json"));
  const std::vector<int32_t> prompt = golden["prompt_ids"].get<std::vector<int32_t>>();
  model::CpuBackend backend;
  model::ModelOptions options;
  options.context_chunk_tokens = 48;  // context of two sequences shares and splits chunks
  const auto model = model::Model::load(dir, backend, options);
  const int vocab = model->config().vocab_size;

  // A: 90 tokens; B: 75 tokens; C: 60 tokens (different slices of the prompt).
  Sequence a{std::vector<int32_t>(prompt.begin(), prompt.begin() + 90), {6, 1}, 0};
  Sequence b{std::vector<int32_t>(prompt.begin() + 20, prompt.begin() + 95), {3, 0}, 0};
  Sequence c{std::vector<int32_t>(prompt.begin() + 90, prompt.begin() + 150), {5}, 0};
  // Reference: each sequence alone, whole.
  std::vector<std::vector<float>> alone;
  for (const Sequence* seq : {&a, &b, &c}) {
    model::SequenceRunner runner(*model, static_cast<int>(seq->tokens.size()));
    alone.push_back(runner.feed(seq->tokens, /*all_logits=*/true));
  }

  model::LatentCache cache = model->allocate_cache(8);
  for (model::Tensor& layer : cache.layers)
    backend.fill(layer, std::numeric_limits<float>::quiet_NaN());
  // Steps: (1) A and B prefill; (2) A decodes, B decodes, C prefills; (3) A decodes, B prefills
  // the rest with its context, C prefills more; (4) all three decode.
  const std::vector<std::vector<std::pair<Sequence*, int>>> steps = {{{&a, 70}, {&b, 40}},
                                                                     {{&a, 1}, {&b, 1}, {&c, 30}},
                                                                     {{&a, 1}, {&b, 30}, {&c, 25}},
                                                                     {{&a, 1}, {&b, 1}, {&c, 1}}};
  std::vector<Sequence*> order = {&a, &b, &c};
  float worst = 0.f;
  for (const auto& step : steps) {
    model::ForwardBatch batch;
    std::vector<std::pair<int, int>> rows;  // (sequence index, position) per logit row
    for (const auto& [seq, count] : step) {
      const int index =
          static_cast<int>(std::find(order.begin(), order.end(), seq) - order.begin());
      for (int j = 0; j < count; ++j) rows.emplace_back(index, seq->cached + j);
      add_to_batch(batch, *seq, count);
    }
    const model::Tensor logits = model->forward(batch, cache);
    std::vector<float> host(logits.numel());
    backend.copy_to_host(logits, host.data());
    for (size_t r = 0; r < rows.size(); ++r) {
      const auto& [index, position] = rows[r];
      for (int v = 0; v < vocab; ++v) {
        const float diff =
            std::fabs(host[r * vocab + v] - alone[index][size_t(position) * vocab + v]);
        worst = std::isnan(diff) ? std::numeric_limits<float>::infinity() : std::max(worst, diff);
      }
    }
  }
  std::printf("[ batch    ] max |batched - alone| = %.3g over 4 steps of 3 sequences\n", worst);
  EXPECT_EQ(a.cached, 73);
  EXPECT_EQ(b.cached, 72);
  EXPECT_EQ(c.cached, 56);
  EXPECT_LE(worst, 1e-4f) << "max |batched - alone| over every row of every step";
}

}  // namespace
}  // namespace mla
