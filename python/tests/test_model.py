"""switchyard.Model against independent oracles: the float64 PyTorch forward of
tests/inference/hf_moe_oracle.py for logits, greedy decoding and perplexity; the Hugging Face
`tokenizers` library for tokenize/detokenize; transformers' chat template renderer for
apply_chat_template; and, when SWITCHYARD_BINARY is set, the CLI for sampled generation."""
import json
import math
import os
import subprocess
import threading
import time

import numpy as np
import pytest

import switchyard

from conftest import THREADS

PROMPT = [3, 17, 42, 5, 61, 0, 29, 8, 50, 11]
TOL = 1e-4


def oracle_logits(oracle, tiny_qwen3, ids):
    _, config, values = tiny_qwen3
    return oracle.Family("qwen3_moe", config, values).forward(list(ids)).numpy()


def test_logits_match_the_pytorch_oracle(qwen3_model, tiny_qwen3, oracle):
    ours = qwen3_model.logits(PROMPT)
    ref = oracle_logits(oracle, tiny_qwen3, PROMPT)
    assert isinstance(ours, np.ndarray) and ours.dtype == np.float32
    assert ours.shape == ref.shape == (len(PROMPT), qwen3_model.vocab_size)
    err = float(np.abs(ours - ref).max())
    assert err <= TOL * max(1.0, float(np.abs(ref).max())), err
    # The array owns the engine's buffer (no copy): it is not a view of another numpy array.
    assert ours.base is not None and not isinstance(ours.base, np.ndarray)


def test_greedy_generation_follows_the_oracle_argmax(qwen3_model, tiny_qwen3, oracle):
    done = qwen3_model.generate(PROMPT, max_tokens=6, ignore_eos=True)
    assert done.finish_reason == "length" and len(done.ids) == 6 and done.prompt_tokens == 10
    seq = list(PROMPT)
    for token in done.ids:  # each step the argmax of the oracle over the whole sequence
        assert token == int(np.argmax(oracle_logits(oracle, tiny_qwen3, seq)[-1]))
        seq.append(token)
    assert done.text == qwen3_model.detokenize(done.ids)


def test_tokenizer_matches_hugging_face_tokenizers(qwen3_model, tiny_qwen3):
    tokenizers = pytest.importorskip("tokenizers")
    theirs = tokenizers.Tokenizer.from_file(os.path.join(tiny_qwen3[0], "tokenizer.json"))
    for text in ["Hello there, the theme", " the  other\nline", "Grüße ✓ 日本", ""]:
        ids = qwen3_model.tokenize(text)
        assert ids == theirs.encode(text).ids, text
        assert qwen3_model.detokenize(ids) == theirs.decode(ids, skip_special_tokens=False)


def test_chat_template_matches_transformers(qwen3_model, tiny_qwen3):
    utils = pytest.importorskip("transformers.utils.chat_template_utils")
    import chat_templates

    template, bos, eos = chat_templates.FAMILIES["qwen3_moe"]
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello!"},
                {"role": "user", "content": "And now?"}]
    for kwargs in [None, {"enable_thinking": False}]:
        want = utils._compile_jinja_template(template).render(
            messages=messages, add_generation_prompt=True, bos_token=bos, eos_token=eos,
            **(kwargs or {}))
        assert qwen3_model.apply_chat_template(messages, kwargs) == want


def test_chat_answers_the_rendered_conversation(qwen3_model):
    messages = [{"role": "user", "content": "Hello"}]
    answer = qwen3_model.chat(messages, max_tokens=8)
    direct = qwen3_model.generate(qwen3_model.apply_chat_template(messages), max_tokens=8)
    assert answer == direct and answer.text and answer.finish_reason in ("stop", "length")
    streamed = list(qwen3_model.chat(messages, max_tokens=8, stream=True))
    assert "".join(c.text for c in streamed) == answer.text
    assert streamed[-1].finish_reason == answer.finish_reason


def test_stream_equals_the_whole_answer_and_can_be_left(qwen3_model):
    whole = qwen3_model.generate("The theme", max_tokens=12, temperature=0.9, seed=4)
    chunks = list(qwen3_model.generate("The theme", max_tokens=12, temperature=0.9, seed=4,
                                       stream=True))
    assert [t for c in chunks for t in c.ids] == whole.ids
    assert "".join(c.text for c in chunks) == whole.text
    assert all(c.finish_reason is None for c in chunks[:-1]) and chunks[-1].finish_reason
    # Leaving a stream early cancels it: the engine (max_batch 1) is free for the next request.
    stream = qwen3_model.generate("The theme", max_tokens=200, stream=True)
    next(stream)
    stream.close()
    started = time.monotonic()
    assert qwen3_model.generate("The theme", max_tokens=2).ids
    assert time.monotonic() - started < 30


def test_sampling_is_seeded_and_matches_the_cli(qwen3_model, tiny_qwen3):
    args = dict(max_tokens=10, temperature=1.3, top_p=0.9, top_k=40, ignore_eos=True)
    a = qwen3_model.generate(PROMPT, seed=7, **args)
    assert a.ids == qwen3_model.generate(PROMPT, seed=7, **args).ids
    assert any(qwen3_model.generate(PROMPT, seed=s, **args).ids != a.ids for s in range(8, 12))
    binary = os.environ.get("SWITCHYARD_BINARY")
    if not binary:
        pytest.skip("SWITCHYARD_BINARY is not set")
    out = subprocess.run(
        [binary, "generate", "-m", tiny_qwen3[0], "--prompt-ids", ",".join(map(str, PROMPT)),
         "-n", "10", "--temperature", "1.3", "--top-p", "0.9", "--top-k", "40", "-s", "7",
         "-t", str(THREADS)], capture_output=True, text=True, timeout=120, check=True).stdout
    assert [int(t) for t in out.strip().split(",")] == a.ids


def test_stop_strings_and_eos(qwen3_model):
    free = qwen3_model.generate("Hello", max_tokens=20, ignore_eos=True)
    assert len(free.text) > 4
    stop = free.text[2:4]
    cut = qwen3_model.generate("Hello", max_tokens=20, ignore_eos=True, stop=stop)
    assert cut.finish_reason == "stop" and cut.text == free.text[:free.text.index(stop)]
    import tiny_tokenizer

    assert qwen3_model.eos_token_ids == [tiny_tokenizer.special_id("<|im_end|>")]
    forced = qwen3_model.generate("Hello", max_tokens=5, stop_token_ids=[free.ids[1]],
                                  ignore_eos=True)
    first = free.ids.index(free.ids[1])  # the token may come earlier
    assert forced.ids == free.ids[:first + 1] and forced.finish_reason == "stop"


def test_response_format_constrains_the_answer(qwen3_model):
    jsonschema = pytest.importorskip("jsonschema")
    schema = {"type": "object", "additionalProperties": False, "required": ["answer", "n"],
              "properties": {"answer": {"enum": ["yes", "no"]}, "n": {"type": "integer"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    plain = qwen3_model.chat([{"role": "user", "content": "Hi"}], max_tokens=30)
    with pytest.raises(ValueError):
        json.loads(plain.text)  # the model's own answer is not JSON
    for seed in range(3):
        done = qwen3_model.chat([{"role": "user", "content": "Hi"}], max_tokens=200,
                                temperature=1.0, seed=seed, response_format=fmt)
        assert done.finish_reason == "stop"
        jsonschema.validate(json.loads(done.text), schema)
    obj = qwen3_model.generate("Hello", max_tokens=200, response_format={"type": "json_object"},
                               temperature=0.7, seed=1)
    assert obj.finish_reason == "length" or isinstance(json.loads(obj.text), dict)
    with pytest.raises(ValueError, match="'pattern' is not supported"):
        qwen3_model.generate("x", response_format={"type": "json_schema", "json_schema": {
            "schema": {"type": "string", "pattern": "a"}}})
    with pytest.raises(ValueError, match="ignore_eos"):
        qwen3_model.generate("x", ignore_eos=True, response_format={"type": "json_object"})


def test_perplexity_matches_the_oracle(qwen3_model, tiny_qwen3, oracle):
    ids = [int(t) for t in np.random.default_rng(3).integers(32, 127, size=64)]
    context = 16
    nll = []
    for start in range(0, len(ids) - context + 1, context):
        chunk = ids[start:start + context]
        logits = oracle_logits(oracle, tiny_qwen3, chunk)
        for j in range(context // 2, context - 1):  # the second half scored, as llama.cpp
            row = logits[j] - logits[j].max()
            nll.append(-(row[chunk[j + 1]] - math.log(np.exp(row).sum())))
    want = math.exp(sum(nll) / len(nll))
    assert abs(qwen3_model.perplexity(ids, context=context) - want) <= 1e-4 * want


def test_the_interpreter_runs_while_the_model_computes(qwen3_model):
    ids = [int(t) for t in np.random.default_rng(5).integers(32, 127, size=250 * 120)]
    seconds = []

    def one_long_call():
        started = time.monotonic()
        qwen3_model.perplexity(ids, context=250)
        seconds.append(time.monotonic() - started)

    thread = threading.Thread(target=one_long_call)
    last = time.monotonic()
    thread.start()
    iterations, longest_gap = 0, 0.0
    while thread.is_alive():
        now = time.monotonic()
        longest_gap = max(longest_gap, now - last)
        last = now
        iterations += 1
    # Holding the interpreter's lock through the call would stall this loop for all of it.
    assert seconds[0] > 0.05 and longest_gap < seconds[0] / 4, (seconds, longest_gap, iterations)


def test_errors_are_python_exceptions_with_the_message(qwen3_model, tiny_run, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        switchyard.Model.load(str(tmp_path / "absent"))
    with pytest.raises(ValueError, match="--dtype q9"):
        switchyard.Model.load(qwen3_model.path, dtype="q9")
    with pytest.raises(ValueError, match=r"prompt\[1\] = 100000 is outside the vocabulary"):
        qwen3_model.generate([1, 100000])
    with pytest.raises(ValueError, match="exceed the context of 256"):
        qwen3_model.generate([1, 2, 3], max_tokens=300)
    with pytest.raises(ValueError, match="temperature"):
        qwen3_model.generate([1, 2, 3], max_tokens=2, temperature=-1)
    with pytest.raises(TypeError, match="prompt must be text"):
        qwen3_model.generate(3.5)
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in os.listdir(qwen3_model.path):
        data = open(os.path.join(qwen3_model.path, name), "rb").read()
        if name.endswith(".safetensors"):
            data = data[:len(data) // 2]
        (broken / name).write_bytes(data)
    with pytest.raises(ValueError, match="model.safetensors.*the file is truncated"):
        switchyard.Model.load(str(broken))
    checkpoint = sorted(p for p in os.listdir(tiny_run[0]) if p.endswith(".h5"))[-1]
    data = open(os.path.join(tiny_run[0], checkpoint), "rb").read()
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF  # one byte of a tensor: its checksum no longer matches
    (tmp_path / checkpoint).write_bytes(bytes(flipped))
    with pytest.raises(switchyard.Error) as raised:
        switchyard.Model.load(str(tmp_path / checkpoint))
    assert raised.value.code == "DataLoss" and checkpoint in str(raised.value)
    tiny = switchyard.Model.load(str(tiny_run[0]), threads=THREADS)
    with pytest.raises(switchyard.Error, match="has no tokenizer") as raised:
        tiny.generate("text")
    assert raised.value.code == "FailedPrecondition"


def test_generate_from_the_tiny_training_run(tiny_run):
    model = switchyard.Model.load(str(tiny_run[0]), threads=THREADS)
    assert model.context == 16 and model.vocab_size == 28
    # Copy task: tag 8, symbols, SEP 1 -> the symbols, EOS 2 (runtime/data/synthetic_vocab.h).
    done = model.generate([8, 19, 23, 16, 27, 1], max_tokens=8, stop_token_ids=[2])
    assert done.ids[-1] == 2 or done.finish_reason == "length"
    binary = os.environ.get("SWITCHYARD_BINARY")
    if binary:
        out = subprocess.run([binary, "generate", "--model", str(tiny_run[0]), "--prompt-ids",
                              "8,19,23,16,27,1", "-n", "8", "--stop-tokens", "2", "-t",
                              str(THREADS)], capture_output=True, text=True, timeout=120,
                             check=True).stdout
        assert [int(t) for t in out.strip().split(",")] == done.ids
