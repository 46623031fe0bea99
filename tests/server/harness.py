"""Test harness for `mla serve`: model directories, starting and stopping the server, checks.

A model directory for the server is a tiny fixture plus DeepSeek-V3's tokenizer (unpacked by
tests/CMakeLists.txt). `make_chat_model` widens tiny-deepseek-v2-lite's vocabulary to the
tokenizer's (129,280 ids) by repeating its 256 embedding and lm_head rows, so the chat
template's special tokens are in the vocabulary; repeated lm_head rows give equal logits, and
greedy picks the lowest id, so the widened model's greedy ids equal the tiny model's (and
Hugging Face's) for prompts of ids below 256.
"""
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
import urllib.request

FAILURES = []
PASSED = []


def check(name, function):
    """Runs one named check; a failure is recorded and printed, and the run goes on."""
    started = time.monotonic()
    try:
        function()
    except Exception as error:  # noqa: BLE001 - report every failure, keep going
        FAILURES.append(name)
        print(f"FAIL {name}: {type(error).__name__}: {error}", flush=True)
        return
    PASSED.append(name)
    print(f"ok   {name} ({time.monotonic() - started:.2f} s)", flush=True)


def finish():
    print(f"{len(PASSED)} passed, {len(FAILURES)} failed", flush=True)
    sys.exit(1 if FAILURES else 0)


def require_openai():
    try:
        import openai  # noqa: F401
    except ImportError:
        print("the Python package 'openai' is missing: run scripts/setup-deps.sh", flush=True)
        sys.exit(1)


def copy_model(fixture, tokenizer, work):
    """fixture's config and weights + the tokenizer's files, in `work`."""
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    for name in os.listdir(fixture):
        if name == "config.json" or name.startswith("model"):
            shutil.copy(os.path.join(fixture, name), work)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokenizer, name), work)
    return work


def make_chat_model(fixture, tokenizer, work, vocab=129280):
    """tiny-deepseek-v2-lite with its vocabulary repeated up to the tokenizer's size."""
    copy_model(fixture, tokenizer, work)
    path = os.path.join(work, "model.safetensors")
    with open(path, "rb") as file:
        data = file.read()
    header_size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + header_size])
    body = data[8 + header_size:]
    out_header, pieces, offset = {}, [], 0
    for name, info in header.items():
        if name == "__metadata__":
            out_header[name] = info
            continue
        begin, end = info["data_offsets"]
        piece = body[begin:end]
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            rows = info["shape"][0]
            assert vocab % rows == 0, (vocab, rows)
            piece = piece * (vocab // rows)
            info = dict(info, shape=[vocab, info["shape"][1]])
        out_header[name] = dict(info, data_offsets=[offset, offset + len(piece)])
        pieces.append(piece)
        offset += len(piece)
    encoded = json.dumps(out_header).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as file:
        file.write(struct.pack("<Q", len(encoded)) + encoded + b"".join(pieces))
    with open(os.path.join(work, "config.json")) as file:
        config = json.load(file)
    config["vocab_size"] = vocab
    with open(os.path.join(work, "config.json"), "w") as file:
        json.dump(config, file, indent=1)
    return work


class Server:
    """`mla serve MODEL --port 0 ...` started and stopped; its stderr is kept for failures."""

    def __init__(self, mla, model_dir, *args, env=None):
        # MLA_TEST_SERVE_ARGS (e.g. "--backend cuda") runs the same checks on another backend.
        extra = os.environ.get("MLA_TEST_SERVE_ARGS", "").split()
        self.command = [mla, "serve", model_dir, "--port", "0", *args, *extra]
        self.process = subprocess.Popen(self.command, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True,
                                        env={**os.environ, **(env or {})})
        self.stderr = []
        threading.Thread(target=self._read_stderr, daemon=True).start()
        line = self.process.stdout.readline()
        if "listening on" not in line:
            self.process.wait(timeout=10)
            time.sleep(0.2)  # the stderr reader's last lines
            reason = "".join(self.stderr)
            if extra and ("no CUDA GPU" in reason or "needs an sm_90 GPU" in reason):
                print(f"SKIPPED: {' '.join(extra)} needs an sm_90 GPU: {reason.strip()}", flush=True)
                sys.exit(0)
            raise RuntimeError(f"{' '.join(self.command)} did not start: {line!r} "
                               f"{''.join(self.stderr)}")
        self.url = line.strip().rsplit(" ", 1)[1]
        self.port = int(self.url.rsplit(":", 1)[1])

    def _read_stderr(self):
        for line in self.process.stderr:
            self.stderr.append(line)

    def get(self, path, headers=None):
        request = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def post(self, path, body, headers=None):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method="POST",
                                         headers={"Content-Type": "application/json",
                                                  **(headers or {})})
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def metric(self, name):
        status, text = self.get("/metrics")
        assert status == 200, status
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise RuntimeError("mla serve did not stop within 20 s of SIGTERM")
        return self.process.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        code = self.stop()
        if code != 0:
            print("mla serve stderr:\n" + "".join(self.stderr[-40:]), flush=True)
            raise RuntimeError(f"mla serve exited with {code}")


def run_mla(mla, *args):
    done = subprocess.run([mla, *args], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"mla {' '.join(args)} failed: {done.stderr}")
    return done.stdout
