// The per-SM streaming diagnostic (mla/kernels/sm_stream.h) reads every word of its slice (the
// checksum equals the host twin's, for slices that are not a multiple of its stride), and records
// an SM id and a start before its end.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "cuda/device.h"
#include "gpu_test_support.h"
#include "mla/kernels/sm_stream.h"

namespace mla {
namespace {

TEST(SmStreamGpu, ChecksumsMatchTheHostTwinAndTimesAreOrdered) {
  MLA_REQUIRE_SM90_GPU();
  const int num_sms = cuda::current_device_info().num_sms;
  for (size_t words_per_cta : {size_t(2), size_t(2 * 1024 * 8 * 3 + 6), size_t(1) << 18}) {
    SCOPED_TRACE(::testing::Message() << words_per_cta << " words per CTA");
    const int ctas = num_sms;
    std::vector<uint64_t> words(words_per_cta * ctas);
    std::mt19937_64 rng(words_per_cta);
    for (uint64_t& w : words) w = rng();
    cuda::DeviceBuffer<uint64_t> src(words.size());
    src.copy_from_host(words);
    cuda::DeviceBuffer<uint64_t> records(size_t(ctas) * kernels::kSmStreamRecordWords);
    kernels::launch_sm_stream(src.data(), words_per_cta, ctas, records.data(), nullptr);
    const std::vector<uint64_t> got = records.to_host();
    for (int cta = 0; cta < ctas; ++cta) {
      const uint64_t* record = got.data() + size_t(cta) * kernels::kSmStreamRecordWords;
      // %smid need not be contiguous: a loose bound.
      EXPECT_LT(record[0], uint64_t(2 * num_sms)) << "CTA " << cta;
      EXPECT_GT(record[1], 0u) << "CTA " << cta;
      EXPECT_GE(record[2], record[1]) << "CTA " << cta;
      EXPECT_EQ(record[3],
                kernels::sm_stream_checksum_host(words.data() + cta * words_per_cta, words_per_cta))
          << "CTA " << cta;
    }
  }
}

}  // namespace
}  // namespace mla
