#!/usr/bin/env python3
"""Writes tests/data/tokenizer/fixture.json: what the reference libraries make of a varied corpus
with the DeepSeek-V3 tokenizer (tests/data/tokenizer/deepseek-v3.tar.xz). mla.cpp's tokenizer
tests compare against it; nothing in it is written by hand or by mla.cpp.

    python3 -m venv /tmp/tokvenv
    /tmp/tokvenv/bin/pip install tokenizers==0.22.2 transformers==4.57.6 jinja2==3.1.6
    /tmp/tokvenv/bin/python tests/gen/gen_tokenizer_fixtures.py

- ids: `tokenizers` (Tokenizer.from_file), which adds nothing (the post-processor is ByteLevel).
- ids_with_bos: transformers' AutoTokenizer, which for this tokenizer_config.json is
  LlamaTokenizerFast and honours add_bos_token (transformers 5 loads a generic backend that
  ignores it; hence 4.57).
- decoded / decoded_skip_special: tokenizers' decode(ids, skip_special_tokens=False / True).
- chat: transformers' apply_chat_template (the Jinja template inside tokenizer_config.json).
- extra_added_tokens: the same tokenizer with a few added tokens that use lstrip/rstrip and a
  normalized token that contains a special one, which the shipped file does not exercise.
"""
import hashlib
import io
import json
import os
import random
import sys
import tarfile
import tempfile

import jinja2
import tokenizers
import transformers
from tokenizers import AddedToken, Tokenizer
from transformers import AutoTokenizer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARCHIVE = os.path.join(REPO, "tests", "data", "tokenizer", "deepseek-v3.tar.xz")
OUTPUT = os.path.join(REPO, "tests", "data", "tokenizer", "fixture.json")
PINNED = {"tokenizers": "0.22.2", "transformers": "4.57.6", "jinja2": "3.1.6"}

PYTHON_CODE = '''import numpy as np

def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax."""
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


if __name__ == "__main__":
    print(softmax(np.array([1.0, 2.0, 3.0])))  # [0.09 0.24 0.67]
'''

CPP_CODE = '''#include <cstdio>
#include <vector>

template <typename T>
T sum(const std::vector<T>& v) {
\tT total{};
\tfor (auto x : v) total += x;  // tabs, not spaces
\treturn total;
}

int main() { std::printf("%d\\n", sum(std::vector<int>{1, 2, 3})); }
'''

RUST_CODE = '''fn main() {
    let words: Vec<&str> = "the quick brown fox".split_whitespace().collect();
    for (i, w) in words.iter().enumerate() {
        println!("{i:>3}: {w}");
    }
    let _closure = |x: i32| -> i32 { x.pow(2) + 0x1F };
}
'''

JS_HTML_CODE = '''<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Test &amp; check</title></head>
<body>
  <script>
    const add = (a, b) => a + b; // arrow
    document.querySelector("#out").textContent = `${add(2, 3)}`;
  </script>
  <div id="out" class="a-b_c"></div>
</body></html>
'''

SQL_SHELL_CODE = '''SELECT u.id, COUNT(*) AS n FROM users u JOIN orders o ON o.user_id = u.id
WHERE o.created_at >= '2024-01-01' GROUP BY u.id HAVING n > 10 ORDER BY n DESC;
$ for f in *.log; do grep -c "ERROR" "$f" || true; done | sort -nr | head -n 3
{"name": "mla.cpp", "version": [0, 1, 0], "nested": {"ok": true, "pi": 3.14159e+00}}
'''

LONG_ENGLISH = (
    "Multi-head latent attention stores one compressed latent vector per token and layer, "
    "which shrinks the key-value cache by more than an order of magnitude. During decoding "
    "the up-projection is absorbed into the query, so attention runs directly over the latent "
    "cache; during prefill the latents are expanded again. "
) * 6

CORPUS = [
    "",
    "Hello world",
    "Hello, world! How are you today?",
    " leading space",
    "trailing space ",
    "   ",
    "\t",
    "\n",
    "\n\n\n",
    " \n \n ",
    "a  b   c    d",
    "line one\r\nline two\r\n\r\nline four",
    "tabs\tand\t\tmore\t\t\ttabs\t",
    "mixed \t \n\t  \n   end",
    "ideographic\u3000space and\u00a0nbsp and\u2003em space",
    "vowel\u180eseparator \u180e \u180e\u180e x",
    "next line\u0085and line\u2028separators\u2029here",
    "don't I'll we've they're she's it'd I'M YOU'LL",
    "\"quoted\" 'single' `backtick` «guillemets» „low“",
    "12345678901234567890",
    "3.14159 2.71828 -42 +7 1e10 0x1F 0b1010 1_000_000",
    "1,000,000.00 and 99.9% and $1,234.56 and €5",
    "07/04/2024 23:59:59.999",
    "０１２３４５ fullwidth digits",
    "٠١٢٣٤٥٦٧٨٩ Arabic-Indic digits",
    "Ⅻ roman numeral, ½ fraction, ²³ superscripts, ① circled",
    "1234567890" * 12,
    "12abc34def567",
    PYTHON_CODE,
    CPP_CODE,
    RUST_CODE,
    JS_HTML_CODE,
    SQL_SHELL_CODE,
    "机器学习是人工智能的一个分支。深度学习模型需要大量数据进行训练！",
    "日本語のテキスト：ひらがな、カタカナ、漢字を混ぜて書きます。",
    "한국어 텍스트도 잘 처리되어야 합니다.",
    "繁體中文：臺灣、香港。龘 and 㐀 (Ext A) and 𠀀 (Ext B) and 鿿",
    "مرحبا بالعالم! هذه جملة عربية.",
    "שלום עולם",
    "नमस्ते दुनिया, यह हिंदी में एक वाक्य है।",
    "สวัสดีชาวโลก",
    "Привет, мир! Ёжик в тумане.",
    "Γειά σου Κόσμε! αβγδε",
    "Tiếng Việt có dấu: Trường học, người, nghiêng",
    "decomposed e\u0301 and a\u0308 and n\u0303",
    "naïve café résumé coöperate Ångström",
    "😀",
    "Hello 😀 world 🌍!",
    "👍🏽👋🏿🧑🏻‍💻",
    "👨‍👩‍👧‍👦 family, 🏳️‍🌈 flag, ❤️‍🔥 heart on fire",
    "🇺🇸🇯🇵🇩🇪 flags",
    "1️⃣ #️⃣ *️⃣ keycaps",
    "❤️ ❤ ☺️ ✌🏼",
    "emoji🙂glued🙃together",
    "newer emoji: Hi 🫨! 🩷🪿🫎 and 🫩🫆, after Unicode 14",
    "newer scripts: \U000105c0\U000105c1 a\U000105c2 \u1b4e\u1b4f x \u2ffc\u31ef!",
    "<｜begin▁of▁sentence｜>",
    "<｜begin▁of▁sentence｜>Hello<｜end▁of▁sentence｜>",
    "<｜User｜>What is 2+2?<｜Assistant｜>4<｜end▁of▁sentence｜>",
    "text<｜end▁of▁sentence｜>more text",
    "<｜begin▁of▁sentence｜><｜begin▁of▁sentence｜>",
    "<｜User｜",
    "<|EOT|> and <|EOT|",
    "<<｜User｜>>",
    "<｜fim▁begin｜>def f(x):\n    <｜fim▁hole｜>\n<｜fim▁end｜>",
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather",
    "<｜place▁holder▁no▁17｜> placeholder",
    "<｜▁pad▁｜>",
    "\ufffd replacement char \ufffd\ufffd",
    "nul\u0000byte and \u0001\u0002\u001f\u007f controls",
    "\u0301 lone combining mark",
    "\ufeffbyte order mark",
    "zero\u200bwidth\u200cnon\u200djoiner",
    "private use \ue000\uf8ff and \U000f0000",
    "noncharacters \ufdd0 \uffff \U0010ffff",
    "tags \U000e0041\U000e0042 and variation\ufe0f selectors",
    "Hello世界123こんにちはworld456мир",
    "ÀÉÎÕÜ àéîõü ßẞ ﬁ ligature",
    "a" * 1000,
    "pneumonoultramicroscopicsilicovolcanoconiosis supercalifragilisticexpialidocious",
    "x" * 300 + "y" * 300,
    "https://example.com/some/very/long/path?query=string&with=parameters#and-a-fragment",
    "dGhpcyBpcyBhIGJhc2U2NCBibG9iIHRoYXQgZ29lcyBvbiBmb3IgYSB3aGlsZQ==",
    "deadbeefcafebabe0123456789abcdef" * 4,
    "机器学习" * 60,
    "!!!???...,,,;;;:::" * 5,
    "-" * 80,
    "=" * 40 + "\n" + "#" * 40,
    "    four spaces\n        eight spaces\n\t\ttwo tabs",
    "end with newline\n",
    "end with spaces   ",
    LONG_ENGLISH,
]

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are a helpful assistant."},
     {"role": "user", "content": "What is MLA?"}],
    [{"role": "system", "content": "Be brief."},
     {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Tell me a joke.\nMake it short."}],
    [{"role": "system", "content": "First system."},
     {"role": "user", "content": "Q1"},
     {"role": "system", "content": "Second system, mid-conversation."},
     {"role": "assistant", "content": "A1"}],
    [{"role": "user", "content": "你好，世界 🌍"},
     {"role": "assistant", "content": "你好！👋"}],
    [{"role": "user", "content": "What's the weather in Paris?"},
     {"role": "tool", "content": "{\"temp_c\": 18}"},
     {"role": "tool", "content": "{\"rain\": false}"},
     {"role": "assistant", "content": "18 °C and dry."},
     {"role": "user", "content": "And tomorrow?"},
     {"role": "tool", "content": "{\"temp_c\": 21}"}],
    [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}],
    [{"role": "user", "content": "  spaces around  \n\n"},
     {"role": "assistant", "content": "<｜end▁of▁sentence｜> inside content"}],
]


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def extract_tokenizer(directory):
    contents = {}
    with tarfile.open(ARCHIVE, "r:xz") as archive:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            contents[name] = archive.extractfile(name).read()
            with open(os.path.join(directory, name), "wb") as file:
                file.write(contents[name])
    return contents


def byte_level_alphabet():
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + \
        list(range(0xAE, 0x100))
    alphabet, next_char = {}, 0x100
    for byte in range(256):
        if byte in printable:
            alphabet[byte] = chr(byte)
        else:
            alphabet[byte] = chr(next_char)
            next_char += 1
    return alphabet


BYTE_LEVEL = byte_level_alphabet()


def random_decode_cases(tokenizer, rng):
    """Id sequences that split characters, end mid-character and mix in special ids."""
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    byte_ids = [tokenizer.token_to_id(BYTE_LEVEL[byte]) for byte in range(0x80, 0x100)]
    cases = [[], [byte_ids[0xE4 - 0x80]], [byte_ids[0xF0 - 0x80], byte_ids[0x9F - 0x80]],
             [19923, vocab_size, 10 ** 6, 2058], [0, 19923, 1]]
    for _ in range(40):
        ids = []
        for _ in range(rng.randint(1, 12)):
            kind = rng.random()
            if kind < 0.4:
                ids.append(rng.choice(byte_ids))
            elif kind < 0.5:
                ids.append(rng.choice([0, 1, 2, 128803, 128804, 128805]))
            else:
                ids.append(rng.randrange(0, vocab_size))
        cases.append(ids)
    return cases


def extra_added_token_cases(tokenizer_json_path):
    tokenizer = Tokenizer.from_file(tokenizer_json_path)
    first_new_id = tokenizer.get_vocab_size(with_added_tokens=True)
    tokenizer.add_tokens([
        AddedToken("[LS]", lstrip=True),
        AddedToken("[RS]", rstrip=True),
        AddedToken("[BOTH]", lstrip=True, rstrip=True),
        AddedToken("END<｜end▁of▁sentence｜>"),
    ])
    tokenizer.add_special_tokens([AddedToken("[SPL]", lstrip=True, normalized=False)])
    tokens = [token for token in json.loads(tokenizer.to_str())["added_tokens"]
              if token["id"] >= first_new_id]
    texts = ["a [LS] b", "a   [LS]b", "[LS]", "  [LS]", "[RS]   x", "x [BOTH]  y",
             "\n\t[BOTH]\n", "[LS][LS]  [LS]", "[RS] [LS]", "x\u3000[LS]", "x\u180e[LS]",
             "END<｜end▁of▁sentence｜>", "a [SPL] b", "a<｜User｜> [BOTH] [RS]"]
    cases = [{"text": text, "ids": tokenizer.encode(text).ids} for text in texts]
    return {"tokens": tokens, "cases": cases}


def main():
    versions = {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__,
                "jinja2": jinja2.__version__}
    if versions != PINNED:
        print(f"warning: reference versions {versions} differ from the pinned {PINNED}",
              file=sys.stderr)
    rng = random.Random(2026)
    with tempfile.TemporaryDirectory() as directory:
        contents = extract_tokenizer(directory)
        tokenizer_json_path = os.path.join(directory, "tokenizer.json")
        tokenizer = Tokenizer.from_file(tokenizer_json_path)
        auto = AutoTokenizer.from_pretrained(directory)
        if type(auto).__name__ != "LlamaTokenizerFast":
            sys.exit(f"expected LlamaTokenizerFast from transformers, got {type(auto).__name__}")

        encode_cases = []
        for text in CORPUS:
            ids = tokenizer.encode(text, add_special_tokens=True).ids
            ids_with_bos = auto(text)["input_ids"]
            assert ids_with_bos == [0] + ids, text
            encode_cases.append({
                "text": text, "ids": ids, "ids_with_bos": ids_with_bos,
                "decoded": tokenizer.decode(ids, skip_special_tokens=False),
                "decoded_skip_special": tokenizer.decode(ids, skip_special_tokens=True),
            })

        decode_cases = [{"ids": ids,
                         "text": tokenizer.decode(ids, skip_special_tokens=False),
                         "text_skip_special": tokenizer.decode(ids, skip_special_tokens=True)}
                        for ids in random_decode_cases(tokenizer, rng)]

        chat_cases = []
        for messages in CONVERSATIONS:
            for add_generation_prompt in (False, True):
                text = auto.apply_chat_template(messages, tokenize=False,
                                                add_generation_prompt=add_generation_prompt)
                ids = auto.apply_chat_template(messages, tokenize=True,
                                               add_generation_prompt=add_generation_prompt)
                chat_cases.append({"messages": messages,
                                   "add_generation_prompt": add_generation_prompt,
                                   "text": text, "ids": ids})

        fixture = {
            "generator": "tests/gen/gen_tokenizer_fixtures.py",
            "versions": versions,
            "tokenizer_json_sha256": sha256(contents["tokenizer.json"]),
            "tokenizer_config_json_sha256": sha256(contents["tokenizer_config.json"]),
            "encode": encode_cases,
            "decode": decode_cases,
            "chat": chat_cases,
            "extra_added_tokens": extra_added_token_cases(tokenizer_json_path),
        }
    with io.open(OUTPUT, "w", encoding="utf-8") as file:
        json.dump(fixture, file, ensure_ascii=False, indent=1)
        file.write("\n")
    print(f"wrote {OUTPUT}: {len(encode_cases)} encode, {len(decode_cases)} decode, "
          f"{len(chat_cases)} chat cases")


if __name__ == "__main__":
    main()
