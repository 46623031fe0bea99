"""Bad input: every malformed or impossible request gets an HTTP 4xx with an OpenAI-style error
body, and the server keeps serving; a randomized fuzz run over request bodies (mutated valid
bodies, random JSON, random bytes) never gets a 5xx or a dropped connection; the API key guards
every route but /health; a full queue answers 429 while queued requests still complete.
    python3 test_bad_input.py MLA FIXTURES_DIR TOKENIZER_DIR WORK_DIR
"""
import json
import os
import random
import sys
import threading
import time

import harness

mla, fixtures, tokenizer_dir, work = sys.argv[1:5]
check = harness.check
model = harness.copy_model(os.path.join(fixtures, "tiny-deepseek-v3"), tokenizer_dir,
                           os.path.join(work, "tiny-v3"))
GOOD = {"model": "tiny-v3", "prompt": "1 2 3", "max_tokens": 3, "temperature": 0}


def expect_error(server, body, status, fragment, path="/v1/completions", param=None):
    got_status, text = server.post(path, body)
    assert got_status == status, (body, got_status, text)
    error = json.loads(text)["error"]
    assert fragment in error["message"], (body, error)
    assert error["type"] and "code" in error and "param" in error, error
    if param is not None:
        assert error["param"] == param, (body, error)


def serving(server):
    status, text = server.post("/v1/completions", GOOD)
    assert status == 200 and json.loads(text)["choices"][0]["finish_reason"], (status, text)
    assert server.get("/health")[0] == 200


with harness.Server(mla, model, "--kv-cache-tokens", "4096", "--max-model-len", "512",
                    "--max-num-seqs", "8", "--check-invariants") as server:
    cases = [
        (b"{not json", 400, "not valid JSON", None),
        (b"[1, 2]", 400, "must be a JSON object", None),
        (b"", 400, "not valid JSON", None),
        ({**GOOD, "model": "gpt-4"}, 400, "does not exist", "model"),
        ({k: v for k, v in GOOD.items() if k != "model"}, 400, "'model' is required", "model"),
        ({**GOOD, "prompt": ""}, 400, "'prompt' is empty", "prompt"),
        ({**GOOD, "prompt": []}, 400, "'prompt' is empty", "prompt"),
        ({**GOOD, "prompt": [[]]}, 400, "is empty", "prompt[0]"),
        ({**GOOD, "prompt": 5}, 400, "must be a string", "prompt"),
        ({**GOOD, "prompt": [1, "a"]}, 400, "must be a token id", "prompt"),
        ({**GOOD, "prompt": [1, 256]}, 400, "not a token id of this model", "prompt"),
        ({**GOOD, "prompt": [-1]}, 400, "not a token id", "prompt"),
        ({**GOOD, "prompt": "hello"}, 400, "outside this model's vocabulary", "prompt"),
        ({**GOOD, "temperature": "hot"}, 400, "must be a number", "temperature"),
        ({**GOOD, "temperature": -1}, 400, "must be in [0, 2]", "temperature"),
        ({**GOOD, "top_p": 0}, 400, "top_p", "top_p"),
        ({**GOOD, "top_k": 1.5}, 400, "must be an integer", "top_k"),
        ({**GOOD, "max_tokens": "x"}, 400, "must be an integer", "max_tokens"),
        ({**GOOD, "max_tokens": 0}, 400, "must be in [1,", "max_tokens"),
        ({**GOOD, "max_tokens": -5}, 400, "must be in [1,", "max_tokens"),
        ({**GOOD, "max_tokens": 10 ** 12}, 400, "must be in [1,", "max_tokens"),
        ({**GOOD, "max_tokens": 510}, 400, "context of 512 tokens", "max_tokens"),
        ({**GOOD, "prompt": [1] * 600}, 400, "context of 512 tokens", "max_tokens"),
        ({**GOOD, "n": 0}, 400, "'n' must be in [1, 8]", "n"),
        ({**GOOD, "n": 100000}, 400, "'n' must be in [1, 8]", "n"),
        ({**GOOD, "n": 1.5}, 400, "must be an integer", "n"),
        ({**GOOD, "stop": 3}, 400, "'stop' must be", "stop"),
        ({**GOOD, "stop": [""]}, 400, "must not be empty", "stop"),
        ({**GOOD, "stream": "yes"}, 400, "true or false", "stream"),
        ({**GOOD, "seed": "s"}, 400, "'seed' must be an integer", "seed"),
        ({**GOOD, "logprobs": 50}, 400, "'logprobs' must be in [0, 20]", "logprobs"),
        ({**GOOD, "echo": True}, 400, "not supported", "echo"),
        ({**GOOD, "logit_bias": {"1": 5}}, 400, "not supported", "logit_bias"),
        ({**GOOD, "best_of": 3}, 400, "not supported", "best_of"),
        ({**GOOD, "stop_token_ids": [999]}, 400, "not a token id", "stop_token_ids"),
    ]
    chat_cases = [
        ({"model": "tiny-v3"}, 400, "'messages' is required", "messages"),
        ({"model": "tiny-v3", "messages": []}, 400, "non-empty list", "messages"),
        ({"model": "tiny-v3", "messages": "hi"}, 400, "non-empty list", "messages"),
        ({"model": "tiny-v3", "messages": [{"content": "1"}]}, 400, "role", "messages[0]"),
        ({"model": "tiny-v3", "messages": [{"role": "user", "content": 5}]}, 400,
         "must be a string or a list of text parts", "messages[0]"),
        ({"model": "tiny-v3", "messages": [{"role": "wizard", "content": "1"}]}, 400, "wizard",
         "messages"),
        ({"model": "tiny-v3", "messages": [{"role": "user", "content": "1"}]}, 400,
         "outside this model's vocabulary", "messages"),
    ]

    def each_bad_request_gets_a_400():
        for body, status, fragment, param in cases:
            expect_error(server, body, status, fragment, param=param)
        for body, status, fragment, param in chat_cases:
            expect_error(server, body, status, fragment, "/v1/chat/completions", param)
        status, text = server.get("/v1/nothing")
        assert status == 404 and "no route" in json.loads(text)["error"]["message"], text
        serving(server)

    def fuzzed_bodies_never_break_the_server():
        rng = random.Random(1234)
        values = [None, True, False, 0, -1, 1, 2, 3.5, -1e300, 1e300, 2 ** 63, -(2 ** 63), "",
                  "1 2", "\u00e9\u4e2d", [], [1], [[1, 2]], ["1", "2"], {}, {"a": 1}, [None],
                  [1.5], "x" * 300, [0] * 700]
        keys = list(GOOD) + ["n", "stop", "stream", "seed", "logprobs", "top_p", "top_k",
                             "min_p", "presence_penalty", "frequency_penalty",
                             "repetition_penalty", "stop_token_ids", "ignore_eos", "messages",
                             "stream_options", "best_of", "echo", "suffix", "logit_bias"]
        statuses = {}
        for i in range(400):
            kind = i % 4
            if kind == 0:  # a valid body with fields replaced or added
                body = dict(GOOD)
                for _ in range(rng.randint(1, 3)):
                    body[rng.choice(keys)] = rng.choice(values)
                body["max_tokens"] = body.get("max_tokens") if rng.random() < 0.5 else 2
                data = json.dumps(body).encode()
            elif kind == 1:  # bytes of a valid body flipped, cut or doubled
                data = bytearray(json.dumps(GOOD).encode())
                for _ in range(rng.randint(1, 4)):
                    at = rng.randrange(len(data))
                    data[at] = rng.randrange(256)
                data = bytes(data[:rng.randint(0, len(data))] if rng.random() < 0.3 else data)
            elif kind == 2:  # random JSON values
                data = json.dumps(rng.choice(values + [GOOD, [GOOD]])).encode()
            else:  # random bytes
                data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))
            path = "/v1/chat/completions" if rng.random() < 0.3 else "/v1/completions"
            status, text = server.post(path, data)
            statuses[status] = statuses.get(status, 0) + 1
            assert status in (200, 400), (data, status, text)
            assert text, (data, status)
            if status == 200 and text.startswith("data: "):  # streamed
                events = [line[6:] for line in text.split("\n\n") if line]
                assert events[-1] == "[DONE]", (data, text)
                assert all("error" not in json.loads(e) for e in events[:-1]), (data, text)
                continue
            reply = json.loads(text)
            assert ("error" in reply) == (status != 200), (data, text)
        assert statuses.get(400, 0) > 200 and statuses.get(200, 0) >= 5, statuses
        print(f"     fuzz: {statuses}")
        serving(server)

    check("bad requests get 400 with an OpenAI-style body", each_bad_request_gets_a_400)
    check("400 request fuzz run", fuzzed_bodies_never_break_the_server)

with harness.Server(mla, model, "--kv-cache-tokens", "4096", "--max-model-len", "512",
                    "--api-key", "sesame") as server:
    def api_key_guards_every_route_but_health():
        assert server.get("/health")[0] == 200
        for path in ("/v1/models", "/metrics"):
            status, text = server.get(path)
            assert status == 401 and "API key" in json.loads(text)["error"]["message"], text
            assert server.get(path, {"Authorization": "Bearer wrong"})[0] == 401
            assert server.get(path, {"Authorization": "Bearer sesame"})[0] == 200
        assert server.post("/v1/completions", GOOD)[0] == 401
        assert server.post("/v1/completions", GOOD, {"Authorization": "Bearer sesame"})[0] == 200

    check("--api-key", api_key_guards_every_route_but_health)

with harness.Server(mla, model, "--kv-cache-tokens", "4096", "--max-model-len", "512",
                    "--max-num-seqs", "1", "--max-queue", "2") as server:
    def full_queue_answers_429_and_queued_requests_finish():
        long = {**GOOD, "max_tokens": 200, "ignore_eos": True}
        results = []

        def post():
            results.append(server.post("/v1/completions", long))

        threads = [threading.Thread(target=post) for _ in range(3)]
        for thread in threads:
            thread.start()
            while server.metric("mla_requests_total") < threads.index(thread) + 1:
                time.sleep(0.01)
        status, text = server.post("/v1/completions", GOOD)
        assert status == 429, (status, text)
        assert "queue is full" in json.loads(text)["error"]["message"], text
        for thread in threads:
            thread.join()
        assert [status for status, _ in results] == [200, 200, 200], results
        serving(server)

    check("queue limit: 429", full_queue_answers_429_and_queued_requests_finish)

harness.finish()
