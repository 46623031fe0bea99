// The plain-C++ half of the PyTorch binding (see bridge.h): error mapping and the device cache.
#include "bridge.h"

#include <optional>
#include <stdexcept>

#include "core/error.h"

namespace mla::python {
namespace {

// Runs one of the library's validations: its mla::Error is a bad argument.
template <typename Check>
void as_invalid_argument(Check&& check) {
  try {
    check();
  } catch (const InternalError&) {
    throw;
  } catch (const Error& error) {
    throw std::invalid_argument(error.what());
  }
}

}  // namespace

const kernels::DecodeDeviceFacts& decode_device_facts(int device_index) {
  // Called with the GIL held and the device current (the binding's CUDAGuard).
  static std::vector<std::optional<kernels::DecodeDeviceFacts>> cache;
  const auto index = static_cast<size_t>(device_index);
  if (cache.size() <= index) cache.resize(index + 1);
  if (!cache[index]) cache[index] = kernels::current_decode_device_facts();
  const kernels::DecodeDeviceFacts& facts = *cache[index];
  if (facts.compute_major != 9 || facts.compute_minor != 0)
    throw std::runtime_error(fmt::format(
        "mla_decode: needs an sm_90 GPU (H100/H200; the kernels are built for sm_90a), cuda:{} "
        "is sm_{}{}",
        device_index, facts.compute_major, facts.compute_minor));
  return facts;
}

MetadataLayout metadata_layout(int batch, int seqlen_q, int num_heads_q, int num_heads_kv,
                               int num_sms) {
  kernels::DecodeWorkspaceLayout layout;
  as_invalid_argument([&] {
    layout = kernels::decode_workspace_layout(batch, seqlen_q, num_heads_q, num_heads_kv, num_sms);
  });
  MetadataLayout result;
  result.ints = static_cast<int64_t>(layout.total_bytes / sizeof(int32_t));
  // The plan sits at the workspace's start: header, cost_begin[b + 1], split_begin[b + 1], ...
  result.num_splits_offset = static_cast<int64_t>(layout.plan_offset / sizeof(int32_t)) +
                             kernels::kDecodePlanHeaderInts + batch + 1;
  const kernels::DecodeLaunchShape shape =
      kernels::decode_launch_shape(seqlen_q, num_heads_q, num_heads_kv, num_sms);
  result.num_parts = shape.num_parts;
  result.rows_per_tile = shape.rows_per_tile;
  result.max_splits = layout.max_splits;
  return result;
}

void plan(const kernels::MlaDecodePlanParams& params, const kernels::DecodeDeviceFacts& device,
          cudaStream_t stream) {
  as_invalid_argument([&] { kernels::check_mla_decode_plan_args(params, device); });
  kernels::launch_mla_decode_plan(params, stream);
}

void decode(const kernels::MlaDecodeParams& params, const kernels::DecodeDeviceFacts& device,
            cudaStream_t stream) {
  as_invalid_argument([&] { kernels::check_mla_decode_args(params, device); });
  kernels::launch_mla_decode(params, stream);
}

}  // namespace mla::python
