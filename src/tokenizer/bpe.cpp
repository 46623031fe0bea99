// The BPE merge loop (see bpe.h).
#include "tokenizer/bpe.h"

#include <queue>

namespace mla::tokenizer {
namespace {

// One token of the piece being merged, in a doubly linked list over positions; a symbol merged
// into its left neighbour is marked dead and unlinked.
struct Symbol {
  int32_t id;
  int32_t prev;  // -1 at the start
  int32_t next;  // -1 at the end
  bool alive;
};

// A pair that could merge: the left symbol's position and both ids as they were when queued.
// It is stale (skipped) once either symbol has changed.
struct Candidate {
  int32_t rank;
  int32_t position;
  int32_t left_id;
  int32_t right_id;
  int32_t merged_id;
};

struct LaterCandidate {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.position > b.position;
  }
};

}  // namespace

void BpeModel::add_merge(int32_t left_id, int32_t right_id, int32_t merged_id, int32_t rank) {
  merges_.insert_or_assign(pair_key(left_id, right_id), Merge{rank, merged_id});
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left_id, int32_t right_id) const {
  const auto found = merges_.find(pair_key(left_id, right_id));
  return found == merges_.end() ? nullptr : &found->second;
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>& ids) const {
  const auto count = static_cast<int32_t>(piece.size());
  if (count == 1) {
    ids.push_back(byte_token_ids_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  std::vector<Symbol> symbols(count);
  for (int32_t i = 0; i < count; ++i)
    symbols[i] = {byte_token_ids_[static_cast<unsigned char>(piece[i])], i - 1,
                  i + 1 < count ? i + 1 : -1, true};

  std::priority_queue<Candidate, std::vector<Candidate>, LaterCandidate> queue;
  auto queue_pair = [&](int32_t left) {
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    if (const Merge* merge = find_merge(symbols[left].id, symbols[right].id))
      queue.push({merge->rank, left, symbols[left].id, symbols[right].id, merge->merged_id});
  };
  for (int32_t i = 0; i + 1 < count; ++i) queue_pair(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.position];
    if (!left.alive || left.next < 0 || left.id != top.left_id) continue;
    Symbol& right = symbols[left.next];
    if (right.id != top.right_id) continue;

    left.id = top.merged_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.position;
    if (left.prev >= 0) queue_pair(left.prev);
    queue_pair(top.position);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
}

}  // namespace mla::tokenizer
