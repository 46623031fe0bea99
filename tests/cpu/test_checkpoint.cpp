// Checkpoint loading: every malformed input a person can produce gives an mla::Error that names
// the file, the tensor, the expected and the actual value, never a crash. Malformed files are
// written into a fresh temporary directory per test.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/dtypes.h"
#include "core/error.h"
#include "model/cpu_backend.h"
#include "model/generate.h"
#include "model/model.h"
#include "weights/checkpoint.h"
#include "weights/safetensors.h"

namespace mla {
namespace {
namespace fs = std::filesystem;

struct FakeTensor {
  std::string name;
  std::string dtype = "F32";
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

FakeTensor f32_tensor(const std::string& name, std::vector<int64_t> shape, float value = 0.1f) {
  FakeTensor tensor{name, "F32", shape, {}};
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>()(name)));
  std::uniform_real_distribution<float> uniform(-value, value);
  for (int64_t i = 0; i < count; ++i) {
    const float v = uniform(rng);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    tensor.bytes.insert(tensor.bytes.end(), p, p + 4);
  }
  return tensor;
}

std::string header_json(const std::vector<FakeTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  size_t offset = 0;
  for (const FakeTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  header["__metadata__"] = {{"format", "pt"}};
  return header.dump();
}

void write_raw(const fs::path& path, const std::string& header, const std::vector<uint8_t>& data,
               uint64_t claimed_header_size) {
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((claimed_header_size >> (8 * i)) & 0xff));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

void write_safetensors(const fs::path& path, const std::vector<FakeTensor>& tensors) {
  const std::string header = header_json(tensors);
  std::vector<uint8_t> data;
  for (const FakeTensor& t : tensors) data.insert(data.end(), t.bytes.begin(), t.bytes.end());
  write_raw(path, header, data, header.size());
}

// A one-layer dense DeepSeek-V2 model small enough to write by hand.
nlohmann::json tiny_config() {
  return {{"architectures", {"DeepseekV2ForCausalLM"}},
          {"vocab_size", 16},
          {"hidden_size", 8},
          {"intermediate_size", 12},
          {"num_hidden_layers", 1},
          {"num_attention_heads", 2},
          {"q_lora_rank", nullptr},
          {"kv_lora_rank", 16},
          {"qk_nope_head_dim", 8},
          {"qk_rope_head_dim", 4},
          {"v_head_dim", 8},
          {"n_routed_experts", nullptr},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 10000.0}};
}

std::vector<FakeTensor> tiny_weights() {
  const std::string l = "model.layers.0.";
  return {f32_tensor("model.embed_tokens.weight", {16, 8}, 1.f),
          f32_tensor("model.norm.weight", {8}, 1.f),
          f32_tensor("lm_head.weight", {16, 8}, 1.f),
          f32_tensor(l + "input_layernorm.weight", {8}, 1.f),
          f32_tensor(l + "post_attention_layernorm.weight", {8}, 1.f),
          f32_tensor(l + "self_attn.q_proj.weight", {24, 8}),
          f32_tensor(l + "self_attn.kv_a_proj_with_mqa.weight", {20, 8}),
          f32_tensor(l + "self_attn.kv_a_layernorm.weight", {16}, 1.f),
          f32_tensor(l + "self_attn.kv_b_proj.weight", {32, 16}),
          f32_tensor(l + "self_attn.o_proj.weight", {8, 16}),
          f32_tensor(l + "mlp.gate_proj.weight", {12, 8}),
          f32_tensor(l + "mlp.up_proj.weight", {12, 8}),
          f32_tensor(l + "mlp.down_proj.weight", {8, 12})};
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mla_checkpoint_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write_config(const nlohmann::json& config) {
    std::ofstream(dir_ / "config.json") << config.dump(2);
  }
  void write_model(const std::vector<FakeTensor>& tensors,
                   const nlohmann::json& config = tiny_config()) {
    write_config(config);
    write_safetensors(dir_ / "model.safetensors", tensors);
  }
  // Loads the model; returns the error message ("" if it loaded).
  std::string load_error() {
    try {
      model::CpuBackend backend;
      model::Model::load(dir_.string(), backend);
    } catch (const Error& error) {
      return error.what();
    }
    return "";
  }
  std::string open_error(const fs::path& file) {
    try {
      weights::SafetensorsFile parsed(file.string());
    } catch (const Error& error) {
      return error.what();
    }
    return "";
  }

  fs::path dir_;
};

#define EXPECT_MENTIONS(message, text) \
  EXPECT_NE((message).find(text), std::string::npos) << "message: " << (message)

TEST_F(CheckpointTest, TinyModelLoadsAndRuns) {
  write_model(tiny_weights());
  ASSERT_EQ(load_error(), "");
  model::CpuBackend backend;
  auto model = model::Model::load(dir_.string(), backend);
  model::GenerateOptions options;
  options.max_tokens = 4;
  options.ignore_eos = true;
  const std::vector<int32_t> prompt = {1, 2, 3};
  EXPECT_EQ(model::generate(*model, prompt, options).ids.size(), 4u);
}

// tie_word_embeddings: no lm_head.weight, the embedding matrix serves; same logits as an untied
// checkpoint whose lm_head is a copy of it.
TEST_F(CheckpointTest, TiedEmbeddings) {
  std::vector<FakeTensor> weights = tiny_weights();
  weights[2].bytes = weights[0].bytes;  // lm_head := embed_tokens
  write_model(weights);
  auto logits_of = [&] {
    model::CpuBackend backend;
    auto model = model::Model::load(dir_.string(), backend);
    model::SequenceRunner sequence(*model, 8);
    const std::vector<int32_t> prompt = {4, 1, 15};
    return sequence.feed(prompt, true);
  };
  const std::vector<float> untied = logits_of();
  weights.erase(weights.begin() + 2);
  nlohmann::json config = tiny_config();
  config["tie_word_embeddings"] = true;
  write_model(weights, config);
  EXPECT_EQ(logits_of(), untied);
  config["tie_word_embeddings"] = false;
  write_model(weights, config);
  EXPECT_MENTIONS(load_error(), "'lm_head.weight' is missing");
}

TEST_F(CheckpointTest, MissingDirectory) {
  const std::string message = [&] {
    try {
      weights::Checkpoint::open((dir_ / "nope").string());
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string();
  }();
  EXPECT_MENTIONS(message, "nope");
  EXPECT_MENTIONS(message, "no such directory");
}

TEST_F(CheckpointTest, MissingConfig) {
  write_safetensors(dir_ / "model.safetensors", tiny_weights());
  const std::string message = load_error();
  EXPECT_MENTIONS(message, (dir_ / "config.json").string());
  EXPECT_MENTIONS(message, "no such file");
}

TEST_F(CheckpointTest, UnknownArchitecture) {
  nlohmann::json config = tiny_config();
  config["architectures"] = {"LlamaForCausalLM"};
  write_model(tiny_weights(), config);
  const std::string message = load_error();
  EXPECT_MENTIONS(message, "config.json");
  EXPECT_MENTIONS(message, "LlamaForCausalLM");
  EXPECT_MENTIONS(message, "DeepseekV3ForCausalLM");
}

TEST_F(CheckpointTest, ConfigKeyMissingOrOfTheWrongType) {
  nlohmann::json config = tiny_config();
  config.erase("kv_lora_rank");
  write_model(tiny_weights(), config);
  EXPECT_MENTIONS(load_error(), "'kv_lora_rank' is missing");
  config = tiny_config();
  config["hidden_size"] = "eight";
  write_model(tiny_weights(), config);
  EXPECT_MENTIONS(load_error(), "'hidden_size' must be an integer, got \"eight\"");
  write_config(nlohmann::json::object());
  std::ofstream(dir_ / "config.json") << "{ not json";
  EXPECT_MENTIONS(load_error(), "not valid JSON");
}

TEST_F(CheckpointTest, NoWeightFiles) {
  write_config(tiny_config());
  EXPECT_MENTIONS(load_error(), "no weights");
}

TEST_F(CheckpointTest, MissingTensorIsNamed) {
  std::vector<FakeTensor> weights = tiny_weights();
  weights.erase(weights.begin() + 8);  // kv_b_proj
  write_model(weights);
  const std::string message = load_error();
  EXPECT_MENTIONS(message, "'model.layers.0.self_attn.kv_b_proj.weight' is missing");
  EXPECT_MENTIONS(message, "model.safetensors");
}

TEST_F(CheckpointTest, WrongShapeNamesExpectedAndActual) {
  std::vector<FakeTensor> weights = tiny_weights();
  weights[6] = f32_tensor("model.layers.0.self_attn.kv_a_proj_with_mqa.weight", {21, 8});
  write_model(weights);
  const std::string message = load_error();
  EXPECT_MENTIONS(message, "model.safetensors");
  EXPECT_MENTIONS(message, "'model.layers.0.self_attn.kv_a_proj_with_mqa.weight'");
  EXPECT_MENTIONS(message, "has shape [21, 8], expected [20, 8]");
}

TEST_F(CheckpointTest, UnsupportedDtypeIsNamed) {
  std::vector<FakeTensor> weights = tiny_weights();
  weights[10].dtype = "I32";  // same byte count as F32
  write_model(weights);
  const std::string message = load_error();
  EXPECT_MENTIONS(message, "'model.layers.0.mlp.gate_proj.weight' has dtype I32");
  EXPECT_MENTIONS(message, "BF16, F16, F32, F8_E4M3");
  weights[10].dtype = "Q4_K";
  write_model(weights);
  EXPECT_MENTIONS(load_error(), "has dtype \"Q4_K\", which is not a safetensors dtype");
}

TEST_F(CheckpointTest, TruncatedHeaderLength) {
  std::ofstream(dir_ / "model.safetensors") << "abcde";
  const std::string message = open_error(dir_ / "model.safetensors");
  EXPECT_MENTIONS(message, (dir_ / "model.safetensors").string());
  EXPECT_MENTIONS(message, "5 bytes, shorter than the 8-byte header length");
  std::ofstream(dir_ / "empty.safetensors").close();
  EXPECT_MENTIONS(open_error(dir_ / "empty.safetensors"), "0 bytes");
}

TEST_F(CheckpointTest, HeaderLengthBeyondTheFile) {
  const std::string header = header_json({f32_tensor("x", {2})});
  write_raw(dir_ / "model.safetensors", header, std::vector<uint8_t>(8, 0), 1000);
  const std::string message = open_error(dir_ / "model.safetensors");
  EXPECT_MENTIONS(message, "the header claims 1000 bytes");
  EXPECT_MENTIONS(message, "truncated");
  write_raw(dir_ / "huge.safetensors", header, {}, ~0ull);
  EXPECT_MENTIONS(open_error(dir_ / "huge.safetensors"), "header claims 18446744073709551615");
}

TEST_F(CheckpointTest, CorruptHeader) {
  write_raw(dir_ / "model.safetensors", "{\"x\": {\"dtype\": ", {}, 16);
  EXPECT_MENTIONS(open_error(dir_ / "model.safetensors"), "is not valid JSON");
  write_raw(dir_ / "array.safetensors", "[1, 2]", {}, 6);
  EXPECT_MENTIONS(open_error(dir_ / "array.safetensors"), "not an object");
  write_raw(dir_ / "fields.safetensors", "{\"x\": {\"dtype\": \"F32\"}}", {}, 23);
  EXPECT_MENTIONS(open_error(dir_ / "fields.safetensors"), "tensor 'x' lacks dtype, shape or");
  write_raw(dir_ / "shape.safetensors",
            R"({"x": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", {}, 62);
  EXPECT_MENTIONS(open_error(dir_ / "shape.safetensors"), "tensor 'x' has shape [-2]");
}

TEST_F(CheckpointTest, TruncatedDataNamesTheTensor) {
  std::vector<FakeTensor> weights = tiny_weights();
  const std::string header = header_json(weights);
  std::vector<uint8_t> data;
  for (const FakeTensor& t : weights) data.insert(data.end(), t.bytes.begin(), t.bytes.end());
  data.erase(data.end() - 10, data.end());  // the last tensor loses its last 10 bytes
  write_config(tiny_config());
  write_raw(dir_ / "model.safetensors", header, data, header.size());
  const std::string message = load_error();
  EXPECT_MENTIONS(message, "model.safetensors: tensor 'model.layers.0.mlp.down_proj.weight'");
  EXPECT_MENTIONS(message, "truncated");
}

TEST_F(CheckpointTest, ByteCountDisagreesWithShape) {
  FakeTensor tensor = f32_tensor("x", {3, 4});
  tensor.shape = {3, 5};
  write_safetensors(dir_ / "model.safetensors", {tensor});
  EXPECT_MENTIONS(open_error(dir_ / "model.safetensors"),
                  "tensor 'x' (F32 [3, 5]) should take 60 bytes but data_offsets give 48");
}

// Every prefix of a real checkpoint file and many corrupted headers: an error or a valid file,
// never a crash or a read outside the mapping.
TEST_F(CheckpointTest, TruncationsAndBitFlipsNeverCrash) {
  const fs::path source =
      fs::path(MLA_TEST_FIXTURES_DIR) / "tiny-deepseek-v3" / "model-00002-of-00002.safetensors";
  std::ifstream in(source, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
  ASSERT_GT(bytes.size(), 1000u);
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  const fs::path target = dir_ / "damaged.safetensors";
  std::vector<size_t> cuts = {0,
                              1,
                              7,
                              8,
                              9,
                              100,
                              header_size + 7,
                              header_size + 8,
                              header_size + 9,
                              bytes.size() / 2,
                              bytes.size() - 1};
  for (size_t cut : cuts) {
    std::ofstream(target, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(cut));
    EXPECT_THROW(weights::SafetensorsFile file(target.string()), Error) << "cut at " << cut;
  }
  std::mt19937 rng(7);
  int rejected = 0;
  for (int trial = 0; trial < 150; ++trial) {
    std::vector<char> damaged = bytes;
    const size_t position = std::uniform_int_distribution<size_t>(0, header_size + 7)(rng);
    damaged[position] = static_cast<char>(damaged[position] ^ (1 << (trial % 8)));
    std::ofstream(target, std::ios::binary)
        .write(damaged.data(), static_cast<std::streamsize>(damaged.size()));
    try {
      weights::SafetensorsFile file(target.string());
      for (const weights::TensorInfo& tensor : file.tensors()) {
        std::vector<float> values(tensor.numel());
        if (tensor.dtype == weights::DType::kF32 || tensor.dtype == weights::DType::kBF16 ||
            tensor.dtype == weights::DType::kF8_E4M3)
          weights::convert_to_f32(tensor, values.data());
      }
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 50);
}

TEST_F(CheckpointTest, ShardedIndexErrors) {
  std::vector<FakeTensor> weights = tiny_weights();
  write_config(tiny_config());
  std::vector<FakeTensor> first(weights.begin(), weights.begin() + 6);
  std::vector<FakeTensor> second(weights.begin() + 6, weights.end());
  write_safetensors(dir_ / "model-00001-of-00002.safetensors", first);
  write_safetensors(dir_ / "model-00002-of-00002.safetensors", second);
  nlohmann::json index = {{"metadata", nlohmann::json::object()},
                          {"weight_map", nlohmann::json::object()}};
  for (const FakeTensor& t : first)
    index["weight_map"][t.name] = "model-00001-of-00002.safetensors";
  for (const FakeTensor& t : second)
    index["weight_map"][t.name] = "model-00002-of-00002.safetensors";
  std::ofstream(dir_ / "model.safetensors.index.json") << index.dump();
  EXPECT_EQ(load_error(), "");

  index["weight_map"]["model.norm.weight"] = "model-00002-of-00002.safetensors";
  std::ofstream(dir_ / "model.safetensors.index.json") << index.dump();
  EXPECT_MENTIONS(load_error(),
                  "maps 'model.norm.weight' to model-00002-of-00002.safetensors, "
                  "but that shard has no such tensor");

  index["weight_map"]["model.norm.weight"] = "model-00003-of-00003.safetensors";
  std::ofstream(dir_ / "model.safetensors.index.json") << index.dump();
  const std::string message = load_error();
  EXPECT_MENTIONS(message, "model.safetensors.index.json");
  EXPECT_MENTIONS(message, "names the shard 'model-00003-of-00003.safetensors'");
}

// FP8 E4M3 weights with block scales, blocks that do not divide the matrix (as V3's
// kv_a_proj_with_mqa: 576 rows in 128-row blocks).
TEST_F(CheckpointTest, Fp8BlockDequantisation) {
  nlohmann::json config = tiny_config();
  config["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {3, 5}}};
  write_config(config);
  FakeTensor weight{"w", "F8_E4M3", {4, 7}, {}};
  for (int i = 0; i < 28; ++i) weight.bytes.push_back(0x38);  // 1.0 in E4M3
  weight.bytes[0] = 0xc0;                                     // -2.0
  weight.bytes[27] = 0x7e;                                    // 448, the largest value
  FakeTensor scale = f32_tensor("w_scale_inv", {2, 2});
  const float scales[4] = {0.5f, 2.f, 4.f, 8.f};
  std::memcpy(scale.bytes.data(), scales, sizeof(scales));
  write_safetensors(dir_ / "model.safetensors", {weight, scale});
  const weights::Checkpoint checkpoint = weights::Checkpoint::open(dir_.string());
  const std::vector<float> values = checkpoint.read_f32("w", {4, 7});
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 7; ++j) {
      float expected = scales[(i / 3) * 2 + j / 5];
      if (i == 0 && j == 0) expected *= -2.f;
      if (i == 3 && j == 6) expected *= 448.f;
      EXPECT_EQ(values[i * 7 + j], expected) << i << "," << j;
    }
  }
  // A scale tensor of the wrong shape, and a missing one, are named.
  scale.shape = {1, 4};
  write_safetensors(dir_ / "model.safetensors", {weight, scale});
  try {
    weights::Checkpoint::open(dir_.string()).read_f32("w", {4, 7});
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_MENTIONS(std::string(error.what()), "'w_scale_inv' has shape [1, 4], expected [2, 2]");
  }
  write_safetensors(dir_ / "model.safetensors", {weight});
  try {
    weights::Checkpoint::open(dir_.string()).read_f32("w", {4, 7});
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_MENTIONS(std::string(error.what()), "FP8 tensor 'w' has no block scales 'w_scale_inv'");
  }
}

TEST(Dtypes, HalfAndFp8Decoding) {
  EXPECT_EQ(f16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_float(0xc000), -2.0f);
  EXPECT_EQ(f16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(f16_to_float(0x7c00)));
  EXPECT_TRUE(std::isnan(f16_to_float(0x7e00)));
  EXPECT_EQ(fp8_e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0xfe), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_float(0x3c), 1.5f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0x7f)));
  EXPECT_EQ(fp8_e4m3_to_float(0x00), 0.0f);
}

}  // namespace
}  // namespace mla
