// The page pool and the prefix index; see page_allocator.h. Freed pages that hold no published
// prefix go to the head of the free list (they are worth nothing), published ones to the tail, so
// allocate() reuses worthless pages first and evicts cached prefixes least recently freed first.
#include "kvcache/page_allocator.h"

#include <algorithm>

#include "core/error.h"

namespace mla::kvcache {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t hash_page(uint64_t parent_hash, std::span<const int32_t> tokens) {
  uint64_t hash = mix(parent_hash + 0x9e3779b97f4a7c15ull);
  for (int32_t token : tokens)
    hash = mix(hash ^ (uint64_t(uint32_t(token)) + 0x9e3779b97f4a7c15ull));
  return hash;
}

PageAllocator::PageAllocator(int num_pages, int page_size) : page_size_(page_size) {
  if (num_pages <= 0) throw_error("page allocator: need at least one page, got {}", num_pages);
  if (page_size <= 0) throw_error("page allocator: page size must be positive, got {}", page_size);
  ref_counts_.assign(num_pages, 0);
  free_prev_.resize(num_pages);
  free_next_.resize(num_pages);
  cached_.resize(num_pages);
  for (int32_t page = 0; page < num_pages; ++page) {
    free_prev_[page] = page - 1;
    free_next_[page] = page + 1 < num_pages ? page + 1 : -1;
  }
  free_head_ = 0;
  free_tail_ = num_pages - 1;
  num_free_ = num_pages;
}

int PageAllocator::ref_count(int32_t page) const {
  MLA_CHECK(page >= 0 && page < num_pages());
  return ref_counts_[page];
}

void PageAllocator::unlink_free(int32_t page) {
  const int32_t prev = free_prev_[page];
  const int32_t next = free_next_[page];
  (prev >= 0 ? free_next_[prev] : free_head_) = next;
  (next >= 0 ? free_prev_[next] : free_tail_) = prev;
  free_prev_[page] = free_next_[page] = -1;
  --num_free_;
}

void PageAllocator::forget(int32_t page) {
  CachedPage& cached = cached_[page];
  if (!cached.published) return;
  const auto it = index_.find(cached.hash);
  MLA_CHECK(it != index_.end() && it->second == page);
  index_.erase(it);
  cached = CachedPage{};
}

std::optional<int32_t> PageAllocator::allocate() {
  if (free_head_ < 0) return std::nullopt;
  const int32_t page = free_head_;
  unlink_free(page);
  if (cached_[page].published) {
    ++stats_.evicted_pages;
    forget(page);
  }
  ref_counts_[page] = 1;
  return page;
}

void PageAllocator::retain(int32_t page) {
  MLA_CHECK(page >= 0 && page < num_pages());
  if (ref_counts_[page]++ == 0) unlink_free(page);
}

void PageAllocator::release(int32_t page) {
  MLA_CHECK(page >= 0 && page < num_pages());
  MLA_CHECK_GT(ref_counts_[page], 0);
  if (--ref_counts_[page] > 0) return;
  ++num_free_;
  if (cached_[page].published) {  // keep it findable as long as possible: the tail
    free_prev_[page] = free_tail_;
    free_next_[page] = -1;
    (free_tail_ >= 0 ? free_next_[free_tail_] : free_head_) = page;
    free_tail_ = page;
  } else {
    free_prev_[page] = -1;
    free_next_[page] = free_head_;
    (free_head_ >= 0 ? free_prev_[free_head_] : free_tail_) = page;
    free_head_ = page;
  }
}

std::optional<int32_t> PageAllocator::find_cached(uint64_t parent_hash,
                                                  std::span<const int32_t> tokens) const {
  MLA_CHECK_EQ(static_cast<int>(tokens.size()), page_size_);
  const auto it = index_.find(hash_page(parent_hash, tokens));
  if (it == index_.end()) return std::nullopt;
  const CachedPage& cached = cached_[it->second];
  if (cached.parent_hash != parent_hash ||
      !std::equal(tokens.begin(), tokens.end(), cached.tokens.begin(), cached.tokens.end()))
    return std::nullopt;
  return it->second;
}

void PageAllocator::publish(int32_t page, uint64_t parent_hash, std::span<const int32_t> tokens) {
  MLA_CHECK(page >= 0 && page < num_pages());
  MLA_CHECK_GT(ref_counts_[page], 0);
  MLA_CHECK_EQ(static_cast<int>(tokens.size()), page_size_);
  CachedPage& cached = cached_[page];
  if (cached.published) return;
  const uint64_t hash = hash_page(parent_hash, tokens);
  if (!index_.emplace(hash, page).second) return;
  cached.published = true;
  cached.hash = hash;
  cached.parent_hash = parent_hash;
  cached.tokens.assign(tokens.begin(), tokens.end());
}

void PageAllocator::check(std::span<const int> expected_ref_counts) const {
  MLA_CHECK_EQ(static_cast<int>(expected_ref_counts.size()), num_pages());
  std::vector<int> times_in_free_list(num_pages(), 0);
  int walked = 0;
  int32_t prev = -1;
  for (int32_t page = free_head_; page >= 0; page = free_next_[page]) {
    MLA_CHECK_LT(walked++, num_pages());  // no cycle
    MLA_CHECK_EQ(free_prev_[page], prev);
    ++times_in_free_list[page];
    prev = page;
  }
  MLA_CHECK_EQ(free_tail_, prev);
  MLA_CHECK_EQ(walked, num_free_);
  for (int32_t page = 0; page < num_pages(); ++page) {
    if (ref_counts_[page] != expected_ref_counts[page])
      throw_internal_error(__FILE__, __LINE__,
                           fmt::format("page {} has reference count {} but {} block tables list it",
                                       page, ref_counts_[page], expected_ref_counts[page]));
    const int expected_in_free_list = ref_counts_[page] == 0 ? 1 : 0;
    if (times_in_free_list[page] != expected_in_free_list)
      throw_internal_error(
          __FILE__, __LINE__,
          fmt::format("page {} (reference count {}) is in the free list {} times, expected {}",
                      page, ref_counts_[page], times_in_free_list[page], expected_in_free_list));
    if (cached_[page].published) {
      const auto it = index_.find(cached_[page].hash);
      MLA_CHECK(it != index_.end() && it->second == page);
    }
  }
  for (const auto& [hash, page] : index_) {
    MLA_CHECK(cached_[page].published);
    MLA_CHECK_EQ(cached_[page].hash, hash);
  }
}

}  // namespace mla::kvcache
