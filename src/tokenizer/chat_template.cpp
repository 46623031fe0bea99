// The DeepSeek-V3 chat template (see chat_template.h). Each branch below is one `{% if %}` of the
// Jinja source, in its order; the flags mirror the template's `ns` namespace (is_tool,
// is_output_first). The marker strings are written into the template, not taken from the
// tokenizer, and so are written here.
#include "tokenizer/chat_template.h"

#include "core/error.h"

namespace mla::tokenizer {
namespace {

// fnv1a_64 of the chat_template string DeepSeek ships with DeepSeek-V3 (2,301 bytes, beginning
// "{% if not add_generation_prompt is defined %}").
constexpr uint64_t kDeepSeekV3TemplateFingerprint = 0xebe3604156dc466aull;

constexpr std::string_view kUser = "<｜User｜>";
constexpr std::string_view kAssistant = "<｜Assistant｜>";
constexpr std::string_view kEndOfSentence = "<｜end▁of▁sentence｜>";
constexpr std::string_view kToolOutputsBegin = "<｜tool▁outputs▁begin｜>";
constexpr std::string_view kToolOutputsEnd = "<｜tool▁outputs▁end｜>";
constexpr std::string_view kToolOutputBegin = "<｜tool▁output▁begin｜>";
constexpr std::string_view kToolOutputEnd = "<｜tool▁output▁end｜>";

}  // namespace

uint64_t fnv1a_64(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (char byte : bytes) {
    hash ^= static_cast<unsigned char>(byte);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

ChatTemplate ChatTemplate::from_config(const TokenizerConfig& config) {
  const std::string where =
      config.path.empty() ? "the tokenizer (no tokenizer_config.json)" : config.path;
  if (config.chat_template.empty())
    throw_error("{} has no chat_template, so chat messages cannot be rendered", where);
  if (fnv1a_64(config.chat_template) != kDeepSeekV3TemplateFingerprint)
    throw_error(
        "{}: the chat_template (fingerprint {:016x}) is not the DeepSeek-V3 template, the only "
        "one mla.cpp implements (fingerprint {:016x})",
        where, fnv1a_64(config.chat_template), kDeepSeekV3TemplateFingerprint);
  return ChatTemplate(config.bos_token);
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages,
                                 bool add_generation_prompt) const {
  std::string system_prompt;
  bool first_system = true;
  for (const ChatMessage& message : messages) {
    if (message.role != "system") continue;
    if (!first_system) system_prompt += "\n\n";
    system_prompt += message.content;
    first_system = false;
  }

  std::string text = bos_token_ + system_prompt;
  bool is_tool = false;
  bool is_output_first = true;
  for (const ChatMessage& message : messages) {
    if (message.role == "system") {
      continue;
    } else if (message.role == "user") {
      is_tool = false;
      text.append(kUser).append(message.content);
    } else if (message.role == "assistant") {
      text.append(is_tool ? kToolOutputsEnd : kAssistant)
          .append(message.content)
          .append(kEndOfSentence);
      is_tool = false;
    } else if (message.role == "tool") {
      is_tool = true;
      if (is_output_first)
        text.append(kToolOutputsBegin);
      else
        text.append("\n");
      text.append(kToolOutputBegin).append(message.content).append(kToolOutputEnd);
      is_output_first = false;
    } else {
      throw_error("chat message role must be system, user, assistant or tool; got \"{}\"",
                  message.role);
    }
  }
  if (is_tool) text.append(kToolOutputsEnd);
  if (add_generation_prompt && !is_tool) text.append(kAssistant);
  return text;
}

}  // namespace mla::tokenizer
