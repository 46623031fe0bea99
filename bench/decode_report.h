// Printing and serialising `mla bench decode` results: a table for people, JSON for tools.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "bench/decode_bench.h"

namespace mla::bench {

struct BenchRunInfo {
  std::string gpu;
  std::string date;                // ISO 8601, UTC
  std::string commit;              // as given by the caller (--commit)
  std::string flashmla_reference;  // the reference file's provenance, or empty
};

std::string decode_table_header();
std::string decode_table_line(const DecodeBenchRow& row);
void print_decode_summary(std::FILE* out, const std::vector<DecodeBenchRow>& rows);

nlohmann::json decode_bench_json(const BenchRunInfo& info, const Ceilings& ceilings,
                                 const std::vector<DecodeBenchRow>& rows);

std::string utc_now_iso8601();

}  // namespace mla::bench
