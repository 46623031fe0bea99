// Test support for the engine: FakeRunner, a ModelRunner whose "latent cache" stores the token
// and position written to each slot, and whose logits for a row are a fixed pseudo-random
// function of the tokens the row reads back through its block table. So a scheduler that maps a
// slot wrongly, shares a page it should have copied, or frees a page still in use changes the
// output (and a position read back that is not the one written throws at once), while a correct
// one gives every request exactly the tokens it gets alone; thousands of steps run in seconds.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/model_runner.h"

namespace mla::testing {

class FakeRunner final : public engine::ModelRunner {
 public:
  FakeRunner(int num_pages, int vocab_size, std::vector<int32_t> eos = {})
      : num_pages_(num_pages),
        vocab_(vocab_size),
        eos_(std::move(eos)),
        slot_tokens_(size_t(num_pages) * 64, -1),
        slot_positions_(size_t(num_pages) * 64, -1) {}

  int vocab_size() const override { return vocab_; }
  int num_pages() const override { return num_pages_; }
  int max_position_embeddings() const override { return 1 << 20; }
  std::vector<int32_t> eos_token_ids() const override { return eos_; }

  std::vector<float> run(std::span<const engine::PageCopy> copies,
                         const model::ForwardBatch& batch) override {
    ++steps;
    copied_pages += static_cast<int64_t>(copies.size());
    for (const engine::PageCopy& copy : copies)
      for (int i = 0; i < 64; ++i) {
        slot_tokens_[size_t(copy.dst) * 64 + i] = slot_tokens_[size_t(copy.src) * 64 + i];
        slot_positions_[size_t(copy.dst) * 64 + i] = slot_positions_[size_t(copy.src) * 64 + i];
      }
    max_batch_tokens = std::max(max_batch_tokens, static_cast<int>(batch.token_ids.size()));
    // Every token's "latent" is written before anything is read, as the model does.
    for (size_t row = 0; row < batch.token_ids.size(); ++row) {
      slot_tokens_.at(batch.slot_mapping[row]) = batch.token_ids[row];
      slot_positions_.at(batch.slot_mapping[row]) = batch.positions[row];
    }
    std::vector<float> logits;
    for (int32_t row : batch.logit_rows) {
      const model::SequenceSlice* slice = nullptr;
      for (const auto& s : batch.sequences)
        if (row >= s.first_token && row < s.first_token + s.num_tokens) slice = &s;
      MLA_CHECK(slice != nullptr);
      const int position = batch.positions[row];
      uint64_t hash = 0x1234;
      for (int p = 0; p <= position; ++p) {
        const int64_t slot = int64_t(slice->block_table.at(p / 64)) * 64 + p % 64;
        if (slot_positions_[slot] != p)
          throw std::runtime_error("fake runner: slot " + std::to_string(slot) +
                                   " holds position " + std::to_string(slot_positions_[slot]) +
                                   ", read as " + std::to_string(p));
        hash = mix(hash ^ uint64_t(slot_tokens_[slot] + 1));
      }
      for (int v = 0; v < vocab_; ++v) {
        hash = mix(hash + v);
        logits.push_back(float(hash >> 40) / float(1 << 24) * 8.0f);  // [0, 8): margins ~1e-7
      }
    }
    return logits;
  }

  int64_t steps = 0;
  int64_t copied_pages = 0;
  int max_batch_tokens = 0;

 private:
  static uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  }
  int num_pages_;
  int vocab_;
  std::vector<int32_t> eos_;
  std::vector<int32_t> slot_tokens_;
  std::vector<int32_t> slot_positions_;
};

}  // namespace mla::testing
