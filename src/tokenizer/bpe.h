// The BPE model: a piece's bytes start as one-byte tokens, then the adjacent pair with the lowest
// merge rank is merged, again and again, until no adjacent pair has a merge.
//
// The subtle thing: pairs of equal rank merge leftmost first, and a merge can make the pair to its
// left or right newly mergeable, so the loop keeps a priority queue of (rank, position) over a
// linked list of symbols: O(n log n) per piece, where the textbook rescan is O(n²). Merges are
// keyed by token ids, never by strings, so tokens outside the byte-level alphabet cannot collide
// with byte-level ones that spell the same bytes.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mla::tokenizer {

class BpeModel {
 public:
  // byte_token_ids[b]: the id of the token that is the single byte b.
  explicit BpeModel(const std::array<int32_t, 256>& byte_token_ids)
      : byte_token_ids_(byte_token_ids) {}

  // Merges earlier in the list (lower rank) win; a pair listed twice keeps its last rank, as in
  // the reference.
  void add_merge(int32_t left_id, int32_t right_id, int32_t merged_id, int32_t rank);

  // Appends the ids of `piece` (raw bytes, at least one).
  void encode_piece(std::string_view piece, std::vector<int32_t>& ids) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  static uint64_t pair_key(int32_t left_id, int32_t right_id) {
    return (uint64_t(uint32_t(left_id)) << 32) | uint32_t(right_id);
  }
  const Merge* find_merge(int32_t left_id, int32_t right_id) const;

  std::array<int32_t, 256> byte_token_ids_;
  std::unordered_map<uint64_t, Merge> merges_;
};

}  // namespace mla::tokenizer
