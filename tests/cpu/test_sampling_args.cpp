// Boundary validation of the GPU sampler (host only, no GPU needed): the workspace size, and each
// bad argument rejected with a message naming it.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/error.h"
#include "mla/kernels/sampling.h"

namespace mla::kernels {
namespace {

template <typename T>
T* fake_pointer(uintptr_t address) {
  return reinterpret_cast<T*>(address);
}

SamplingParams valid_params() {
  SamplingParams p;
  p.rows = 7;
  p.vocab = 129280;
  p.logits = fake_pointer<const float>(0x10000);
  p.logits_row_stride = 129280 + 3;
  p.row_params = fake_pointer<const SamplingRowParams>(0x20000);
  p.context_tokens = fake_pointer<const int32_t>(0x30000);
  p.context_offsets = fake_pointer<const int64_t>(0x40000);
  p.prompt_lengths = fake_pointer<const int32_t>(0x50000);
  p.out_tokens = fake_pointer<int32_t>(0x60000);
  p.workspace = fake_pointer<void>(0x100000);
  p.workspace_bytes = sampling_workspace_size(7, 129280);
  return p;
}

void expect_rejected(const std::function<void(SamplingParams&)>& mutate, const std::string& what) {
  SamplingParams p = valid_params();
  mutate(p);
  try {
    check_sampling_params(p);
    ADD_FAILURE() << "accepted; expected an error mentioning '" << what << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(SamplingArgs, WorkspaceSizeIsEightBytesPerLogitRoundedPerRow) {
  EXPECT_EQ(sampling_workspace_size(0, 32000), 0u);
  EXPECT_EQ(sampling_workspace_size(1, 32000), 256000u);  // 8 · 32000, a multiple of 256
  EXPECT_EQ(sampling_workspace_size(3, 129280), 3u * 1034240u);
  EXPECT_EQ(sampling_workspace_size(2, 1), 2u * 256u);  // each row's slab stays 256-aligned
  EXPECT_EQ(sampling_workspace_size(256, 102401), 256u * 819456u);
  EXPECT_THROW(sampling_workspace_size(-1, 10), Error);
  EXPECT_THROW(sampling_workspace_size(1, 0), Error);
  EXPECT_THROW(sampling_workspace_size(1, int64_t(1) << 23), Error);
}

TEST(SamplingArgs, ValidParamsPass) {
  EXPECT_NO_THROW(check_sampling_params(valid_params()));
  SamplingParams empty = valid_params();
  empty.rows = 0;
  empty.logits = nullptr;
  empty.workspace = nullptr;
  empty.workspace_bytes = 0;
  EXPECT_NO_THROW(check_sampling_params(empty));  // nothing to do, nothing read
  SamplingParams no_context = valid_params();
  no_context.context_tokens = nullptr;  // no row penalises
  EXPECT_NO_THROW(check_sampling_params(no_context));
}

TEST(SamplingArgs, EachBadArgumentIsNamed) {
  expect_rejected([](SamplingParams& p) { p.rows = -1; }, "rows");
  expect_rejected([](SamplingParams& p) { p.vocab = 0; }, "vocab");
  expect_rejected([](SamplingParams& p) { p.vocab = int64_t(1) << 23; }, "vocab");
  expect_rejected([](SamplingParams& p) { p.logits = nullptr; }, "logits");
  expect_rejected([](SamplingParams& p) { p.logits_row_stride = 129279; }, "logits_row_stride");
  expect_rejected([](SamplingParams& p) { p.row_params = nullptr; }, "row_params");
  expect_rejected([](SamplingParams& p) { p.out_tokens = nullptr; }, "out_tokens");
  expect_rejected([](SamplingParams& p) { p.context_offsets = nullptr; }, "context_offsets");
  expect_rejected([](SamplingParams& p) { p.prompt_lengths = nullptr; }, "prompt_lengths");
  expect_rejected([](SamplingParams& p) { p.out_top_ids = fake_pointer<int32_t>(0x70000); },
                  "out_top_logprobs");
  expect_rejected([](SamplingParams& p) { p.workspace = nullptr; }, "workspace");
  expect_rejected([](SamplingParams& p) { p.workspace = fake_pointer<void>(0x100010); }, "aligned");
  expect_rejected([](SamplingParams& p) { p.workspace_bytes -= 1; }, "workspace too small");
}

}  // namespace
}  // namespace mla::kernels
