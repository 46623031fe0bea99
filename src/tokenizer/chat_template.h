// The DeepSeek-V3 chat template in C++: the Jinja template of DeepSeek-V3's
// tokenizer_config.json, rendered for system, user, assistant and tool-output messages with plain
// text content. The result is meant for Tokenizer::encode(prompt, /*add_bos=*/false): the
// template writes the BOS token itself.
//
// The subtle thing: the template is recognised by a fingerprint of its source, and any other
// template (DeepSeek-R1's, which strips "</think>" reasoning; DeepSeek-V2's "User: ..." one) is
// refused rather than rendered wrongly. Two deliberate gaps: assistant tool calls (messages with
// `tool_calls` instead of content) are not implemented, since mla.cpp serves no tools yet; and a
// role the template does not know is an error here, where Jinja would silently drop the message.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace mla::tokenizer {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
};

class ChatTemplate {
 public:
  // Throws mla::Error when the config has no chat_template or one this class does not implement.
  static ChatTemplate from_config(const TokenizerConfig& config);

  // What the Jinja template renders for `messages`: the BOS text, every system message (joined
  // by blank lines, wherever they appear), the turns, and "<｜Assistant｜>" when
  // add_generation_prompt is set and the last message is not a tool output.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

 private:
  explicit ChatTemplate(std::string bos_token) : bos_token_(std::move(bos_token)) {}
  std::string bos_token_;
};

// 64-bit FNV-1a of the bytes: the fingerprint the template is recognised by.
uint64_t fnv1a_64(std::string_view bytes);

}  // namespace mla::tokenizer
