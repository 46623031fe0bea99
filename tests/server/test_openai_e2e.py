"""End to end: `mla serve` on tiny fixtures driven by the official `openai` client.

Completions (text, token ids, streaming, n > 1, stop strings, logprobs, seeds) on
tiny-deepseek-v3 with DeepSeek-V3's tokenizer, compared with `mla generate` and with the Hugging
Face golden ids; chat (plain and streaming) on the widened tiny-deepseek-v2-lite (harness.py),
compared with `mla generate` on the chat template's ids.
    python3 test_openai_e2e.py MLA FIXTURES_DIR TOKENIZER_DIR WORK_DIR
"""
import json
import os
import sys

import harness

harness.require_openai()
import openai  # noqa: E402

mla, fixtures, tokenizer_dir, work = sys.argv[1:5]
check = harness.check


def generate(model_dir, *args):
    return json.loads(harness.run_mla(mla, "generate", model_dir, "--json", *args))


def decode(model_dir, ids):
    if not ids:
        return ""
    out = harness.run_mla(mla, "tokenize", model_dir, "--decode", ",".join(map(str, ids)),
                          "--skip-special", "--json")
    return json.loads(out)["text"]


v3 = harness.copy_model(os.path.join(fixtures, "tiny-deepseek-v3"), tokenizer_dir,
                        os.path.join(work, "tiny-v3"))
golden = json.load(open(os.path.join(fixtures, "tiny-deepseek-v3", "golden.json")))

with harness.Server(mla, v3, "--kv-cache-tokens", "8192", "--max-model-len", "2048",
                    "--check-invariants") as server:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)

    def models():
        listed = client.models.list()
        assert [m.id for m in listed.data] == ["tiny-v3"], listed

    def greedy_text_equals_mla_generate():
        for prompt in ["1 2 3 4", "7 7 7 0 1 9 8 2 3 4 5 6", "4 2"]:
            expected = generate(v3, "--prompt", prompt, "--max-tokens", "12", "--ignore-eos")
            got = client.completions.create(model="tiny-v3", prompt=prompt, max_tokens=12,
                                            temperature=0, extra_body={"ignore_eos": True})
            assert got.choices[0].text == expected["text"], (got.choices[0].text, expected)
            assert got.usage.prompt_tokens == len(expected["prompt_ids"])
            assert got.usage.completion_tokens == 12
            assert got.choices[0].finish_reason == "length"

    def token_id_prompt_gives_huggingface_ids():
        count = len(golden["generated_ids"])
        got = client.completions.create(model="tiny-v3", prompt=golden["prompt_ids"],
                                        max_tokens=count, temperature=0, logprobs=0,
                                        extra_body={"ignore_eos": True,
                                                    "skip_special_tokens": True})
        assert got.choices[0].text == decode(v3, golden["generated_ids"]), got.choices[0].text
        assert len(got.choices[0].logprobs.tokens) == count
        assert all(lp <= 0 for lp in got.choices[0].logprobs.token_logprobs)

    def streaming_equals_plain_and_ends_with_usage():
        plain = client.completions.create(model="tiny-v3", prompt="3 1 4 1 5", max_tokens=20,
                                          temperature=0)
        chunks = list(client.completions.create(model="tiny-v3", prompt="3 1 4 1 5",
                                                max_tokens=20, temperature=0, stream=True,
                                                stream_options={"include_usage": True}))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        assert text == plain.choices[0].text, (text, plain.choices[0].text)
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
        assert finishes[-1] == plain.choices[0].finish_reason and all(
            f is None for f in finishes[:-1]), finishes
        assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens

    def n_choices_fork_one_prompt():
        plain = client.completions.create(model="tiny-v3", prompt="5 5 5", max_tokens=16,
                                          temperature=0, extra_body={"ignore_eos": True})
        many = client.completions.create(model="tiny-v3", prompt="5 5 5", max_tokens=16,
                                         temperature=0, n=3, extra_body={"ignore_eos": True})
        assert [c.index for c in many.choices] == [0, 1, 2]
        assert all(c.text == plain.choices[0].text for c in many.choices)
        assert many.usage.completion_tokens == 48
        sampled = [client.completions.create(model="tiny-v3", prompt="5 5 5", max_tokens=16,
                                             temperature=1.0, n=2, seed=7)
                   for _ in range(2)]
        texts = [[c.text for c in s.choices] for s in sampled]
        assert texts[0] == texts[1], texts  # same seed, same output
        assert texts[0][0] != texts[0][1], texts  # choice i draws with seed + i
        streamed = {}
        for chunk in client.completions.create(model="tiny-v3", prompt="5 5 5", max_tokens=16,
                                               temperature=1.0, n=2, seed=7, stream=True):
            for choice in chunk.choices:
                streamed[choice.index] = streamed.get(choice.index, "") + choice.text
        assert [streamed[0], streamed[1]] == texts[0], (streamed, texts[0])

    def several_prompts_number_choices_prompt_major():
        got = client.completions.create(model="tiny-v3", prompt=["1 2", "3 4"], max_tokens=5,
                                        temperature=0, n=2, extra_body={"ignore_eos": True})
        assert [c.index for c in got.choices] == [0, 1, 2, 3]
        one = client.completions.create(model="tiny-v3", prompt="3 4", max_tokens=5,
                                        temperature=0, extra_body={"ignore_eos": True})
        assert got.choices[2].text == one.choices[0].text == got.choices[3].text

    def stop_strings_cut_the_text():
        full = client.completions.create(model="tiny-v3", prompt="9 8 7", max_tokens=30,
                                         temperature=0, extra_body={"ignore_eos": True})
        text = full.choices[0].text
        stop = text[5:8]
        expected = text[:text.find(stop)]
        for stream in (False, True):
            got = client.completions.create(model="tiny-v3", prompt="9 8 7", max_tokens=30,
                                            temperature=0, stop=[stop, "never-seen"],
                                            stream=stream, extra_body={"ignore_eos": True})
            if stream:
                chunks = list(got)
                got_text = "".join(c.choices[0].text for c in chunks)
                reason = chunks[-1].choices[0].finish_reason
            else:
                got_text, reason = got.choices[0].text, got.choices[0].finish_reason
            assert got_text == expected and reason == "stop", (stream, got_text, expected, stop)

    def top_logprobs():
        got = client.completions.create(model="tiny-v3", prompt="1 1", max_tokens=4,
                                        temperature=0, logprobs=3)
        logprobs = got.choices[0].logprobs
        assert len(logprobs.top_logprobs) == len(logprobs.tokens) == 4
        for token, logprob, top in zip(logprobs.tokens, logprobs.token_logprobs,
                                       logprobs.top_logprobs):
            assert len(top) >= 1 and max(top.values()) == logprob, (token, logprob, top)

    def prefix_cache_hits_are_reported():
        prompt = golden["prompt_ids"][:140]
        client.completions.create(model="tiny-v3", prompt=prompt, max_tokens=2, temperature=0)
        again = client.completions.create(model="tiny-v3", prompt=prompt, max_tokens=2,
                                          temperature=0)
        assert again.usage.prompt_tokens_details.cached_tokens == 128, again.usage
        assert server.metric("mla_prefix_cache_hit_tokens_total") >= 128

    def errors_raise_bad_request():
        try:
            client.completions.create(model="nope", prompt="1", max_tokens=2)
        except openai.BadRequestError as error:
            assert "does not exist" in str(error), error
        else:
            raise AssertionError("an unknown model was accepted")

    for name, function in [("models", models),
                           ("greedy text = mla generate", greedy_text_equals_mla_generate),
                           ("token ids = Hugging Face", token_id_prompt_gives_huggingface_ids),
                           ("streaming", streaming_equals_plain_and_ends_with_usage),
                           ("n > 1 and seeds", n_choices_fork_one_prompt),
                           ("several prompts", several_prompts_number_choices_prompt_major),
                           ("stop strings", stop_strings_cut_the_text),
                           ("logprobs", top_logprobs),
                           ("prefix cache", prefix_cache_hits_are_reported),
                           ("errors", errors_raise_bad_request)]:
        check(name, function)
    status, health = server.get("/health")
    check("healthy, no page used", lambda: (status == 200 and json.loads(health)[
        "kv_cache_pages_used"] == 0) or (_ for _ in ()).throw(AssertionError(health)))

chat_model = harness.make_chat_model(os.path.join(fixtures, "tiny-deepseek-v2-lite"),
                                     tokenizer_dir, os.path.join(work, "tiny-chat"))
with harness.Server(mla, chat_model, "--kv-cache-tokens", "4096", "--max-model-len", "1024",
                    "--served-model-name", "tiny-chat") as server:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    messages = [{"role": "system", "content": "1 2"}, {"role": "user", "content": "3 4 5"}]
    # What DeepSeek-V3's template renders for them (BOS, system, user turn, assistant cue).
    template_ids = [int(i) for i in harness.run_mla(
        mla, "tokenize", chat_model, "--text", "1 2<｜User｜>3 4 5<｜Assistant｜>").split(",")]

    def chat_equals_mla_generate():
        expected = generate(chat_model, "--prompt-ids", ",".join(map(str, template_ids)),
                            "--max-tokens", "10")
        got = client.chat.completions.create(model="tiny-chat", messages=messages, max_tokens=10,
                                             temperature=0)
        assert got.choices[0].message.role == "assistant"
        assert got.choices[0].message.content == expected["text"], (got, expected)
        assert got.usage.prompt_tokens == len(template_ids), (got.usage, template_ids)

    def chat_streaming():
        plain = client.chat.completions.create(model="tiny-chat", messages=messages,
                                               max_tokens=10, temperature=0)
        chunks = list(client.chat.completions.create(model="tiny-chat", messages=messages,
                                                     max_tokens=10, temperature=0, stream=True))
        assert chunks[0].choices[0].delta.role == "assistant"
        text = "".join(c.choices[0].delta.content or "" for c in chunks)
        assert text == plain.choices[0].message.content, (text, plain)
        assert chunks[-1].choices[0].finish_reason == plain.choices[0].finish_reason

    def chat_n_and_logprobs():
        got = client.chat.completions.create(model="tiny-chat", messages=messages, max_tokens=4,
                                             temperature=0, n=2, logprobs=True, top_logprobs=2)
        assert len(got.choices) == 2
        assert got.choices[0].message.content == got.choices[1].message.content
        content = got.choices[0].logprobs.content
        assert len(content) == got.usage.completion_tokens // 2
        assert len(content[0].top_logprobs) == 2

    def golden_ids_through_the_widened_vocabulary():
        g = json.load(open(os.path.join(fixtures, "tiny-deepseek-v2-lite", "golden.json")))
        got = client.completions.create(model="tiny-chat", prompt=g["prompt_ids"],
                                        max_tokens=len(g["generated_ids"]), temperature=0,
                                        extra_body={"ignore_eos": True})
        assert got.choices[0].text == decode(chat_model, g["generated_ids"]), got

    for name, function in [("chat = mla generate", chat_equals_mla_generate),
                           ("chat streaming", chat_streaming),
                           ("chat n and logprobs", chat_n_and_logprobs),
                           ("widened model = Hugging Face", golden_ids_through_the_widened_vocabulary)]:
        check(name, function)

harness.finish()
