// PageAllocator: the shared pool of 64-token latent-cache pages, with reference counts, a free
// list, and the prefix cache (full pages found again by the hash of everything before and in them).
//
// A page is owned by every sequence whose block table lists it; its reference count is the number
// of such lists. Free pages (count 0) wait in one least-recently-freed-first list. The subtle
// thing: a freed page that holds a published full prefix page keeps its contents and its index
// entry while it waits, so a later prompt with the same prefix can take it back (a hit), until
// allocate() hands it out for new contents and forgets it. Published pages are never written
// again; a sequence that must write into a page it shares copies it first (copy-on-write, done by
// the scheduler). Not thread-safe: one engine thread owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace mla::kvcache {

constexpr int kPageSize = 64;

// The hash of a full page: its tokens chained onto the hash of the pages before it (0 for none),
// so equal hashes mean equal prefixes (the index also compares the tokens, so a collision of the
// 64-bit hash cannot share a wrong page).
uint64_t hash_page(uint64_t parent_hash, std::span<const int32_t> tokens);

struct PrefixCacheStats {
  int64_t evicted_pages = 0;  // cached pages handed out for new contents
};

class PageAllocator {
 public:
  explicit PageAllocator(int num_pages, int page_size = kPageSize);

  int num_pages() const { return static_cast<int>(ref_counts_.size()); }
  int page_size() const { return page_size_; }
  int num_free() const { return num_free_; }  // unowned pages (cached ones included)
  int num_used() const { return num_pages() - num_free_; }
  int num_cached() const { return static_cast<int>(index_.size()); }  // published, owned or not
  int ref_count(int32_t page) const;

  // An unowned page with reference count 1, or nothing when every page is owned.
  std::optional<int32_t> allocate();
  // One more owner: a free page leaves the free list.
  void retain(int32_t page);
  // One owner less: at zero the page joins the tail of the free list, its cached prefix kept.
  void release(int32_t page);

  // The published page with these tokens after the prefix `parent_hash`, if it is still cached;
  // the caller retains it to use it.
  std::optional<int32_t> find_cached(uint64_t parent_hash, std::span<const int32_t> tokens) const;
  // Publishes a full, owned page (its tokens written at positions [0, page_size)). A page that
  // is already published, or a prefix another page already holds, is left as it is.
  void publish(int32_t page, uint64_t parent_hash, std::span<const int32_t> tokens);
  bool is_published(int32_t page) const { return cached_[page].published; }

  const PrefixCacheStats& stats() const { return stats_; }

  // Checks every internal invariant and that the reference counts are exactly
  // `expected_ref_counts` (the number of block tables listing each page); throws
  // mla::InternalError naming the page otherwise.
  void check(std::span<const int> expected_ref_counts) const;

 private:
  struct CachedPage {
    bool published = false;
    uint64_t hash = 0;
    uint64_t parent_hash = 0;
    std::vector<int32_t> tokens;
  };
  void unlink_free(int32_t page);
  void forget(int32_t page);

  int page_size_;
  std::vector<int> ref_counts_;
  // The free list, doubly linked through two arrays (-1 ends it), oldest first.
  std::vector<int32_t> free_prev_, free_next_;
  int32_t free_head_ = -1, free_tail_ = -1;
  int num_free_ = 0;
  std::vector<CachedPage> cached_;
  std::unordered_map<uint64_t, int32_t> index_;  // hash → published page
  PrefixCacheStats stats_;
};

}  // namespace mla::kvcache
