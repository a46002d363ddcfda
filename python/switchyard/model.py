"""switchyard.Model: a MoE model opened for inference, from Python.

    import switchyard
    model = switchyard.Model.load("Qwen/Qwen1.5-MoE-A2.7B")        # or a directory, a .gguf,
    print(model.generate("The capital of France is", max_tokens=8).text)   # a checkpoint
    for chunk in model.chat([{"role": "user", "content": "Hi"}], stream=True):
        print(chunk.text, end="", flush=True)

The work runs in C++ (the same engine as `switchyard generate` and `switchyard serve`) with the
interpreter's lock released, so other Python threads run meanwhile; requests from several threads
share the engine's batch (`max_batch`). Errors raise ValueError (bad arguments), FileNotFoundError
(a missing file) or switchyard.Error, each with Switchyard's message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterator, List, Optional, Sequence, Union

from . import _switchyard

Prompt = Union[str, Sequence[int]]


@dataclass
class Completion:
    """A finished answer: its text (empty without a tokenizer), its token ids (an end-of-sequence
    token included, as `switchyard generate` prints it), why it ended ("stop": an end-of-sequence
    token or a stop string; "length": max_tokens or the context), and the prompt's length."""

    text: str
    ids: List[int]
    finish_reason: str
    prompt_tokens: int


@dataclass
class Chunk:
    """A piece of a streamed answer: the text and ids drawn since the previous chunk; the last
    chunk has the finish_reason (else None)."""

    text: str
    ids: List[int] = field(default_factory=list)
    finish_reason: Optional[str] = None


class Model:
    """A model opened for inference. Create it with Model.load."""

    def __init__(self, core: "_switchyard.Model") -> None:
        self._core = core

    @classmethod
    def load(
        cls,
        path: str,
        *,
        device: str = "cpu",
        dtype: str = "auto",
        policy: str = "resident",
        threads: int = 0,
        ctx_size: int = 0,
        max_batch: int = 1,
        quantize: Optional[str] = None,
    ) -> "Model":
        """Opens a model.

        path: a Hugging Face model directory (config.json + safetensors), a GGUF file, a
            Switchyard training checkpoint (a step-*.h5 file or its checkpoint.dir), or ORG/NAME
            of a model already in the Hugging Face cache.
        device: "cpu", "sim" or "cuda:N".
        dtype: "auto" (the model's torch_dtype, or the GGUF's types; f32 for an f32 checkpoint),
            "f32", "bf16" or "f16".
        policy: the expert policy ("resident", or an offload policy: docs/inference.md).
        threads: CPU threads (0: SY_NUM_THREADS or every core).
        ctx_size: tokens of context, prompt and answer (0: the model's own, at most 4096).
        max_batch: sequences the engine runs together.
        quantize: None, or "q8_0" or "q4_0" to quantize the routed experts ("q2_k" ...
            "q6_k": a GGUF's own blocks of that type).
        """
        core = _switchyard.Model.load(
            path=str(path),
            device=device,
            dtype=dtype,
            policy=policy,
            threads=int(threads),
            ctx_size=int(ctx_size),
            max_batch=int(max_batch),
            quantize="experts" if quantize else "",
            quant_type=quantize or "q8_0",
        )
        return cls(core)

    # What the model is.
    @property
    def context(self) -> int:
        """Tokens of context per sequence, prompt and answer."""
        return self._core.context

    @property
    def vocab_size(self) -> int:
        return self._core.vocab_size

    @property
    def eos_token_ids(self) -> List[int]:
        """The tokens that end an answer (generation_config.json's eos_token_id, or the GGUF's)."""
        return list(self._core.eos_token_ids)

    @property
    def path(self) -> str:
        return self._core.path

    def __repr__(self) -> str:
        return f"switchyard.Model({self._core.describe()})"

    # Text.
    def tokenize(self, text: str) -> List[int]:
        """The token ids of `text`, with the tokenizer's special tokens as it adds them."""
        return list(self._core.tokenize(text))

    def detokenize(self, ids: Sequence[int]) -> str:
        return self._core.detokenize([int(i) for i in ids])

    def apply_chat_template(self, messages: Sequence[dict],
                            chat_template_kwargs: Optional[dict] = None) -> str:
        """The prompt text of `messages` ([{"role": ..., "content": ...}]) through the model's chat
        template, ending with the assistant's header."""
        pairs = []
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or "role" not in message or "content" not in message:
                raise ValueError(f"messages[{i}] must be a dict with 'role' and 'content'")
            pairs.append((str(message["role"]), str(message["content"])))
        kwargs = json.dumps(chat_template_kwargs) if chat_template_kwargs else ""
        return self._core.render_chat(pairs, kwargs)

    # Generation.
    def generate(
        self,
        prompt: Prompt,
        *,
        max_tokens: Optional[int] = None,
        temperature: float = 0.0,
        top_p: float = 1.0,
        top_k: int = 0,
        min_p: float = 0.0,
        repetition_penalty: float = 1.0,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        stop: Union[None, str, Sequence[str]] = None,
        stop_token_ids: Optional[Sequence[int]] = None,
        ignore_eos: bool = False,
        seed: int = 0,
        response_format: Optional[dict] = None,
        stream: bool = False,
    ) -> Union[Completion, Iterator[Chunk]]:
        """Generates from `prompt` (text, or a list of token ids).

        max_tokens: None runs until an end-of-sequence token or the context is full.
        temperature: 0 is greedy (the default, as `switchyard generate`); top_p, top_k, min_p and
            the penalties as in the OpenAI API and transformers; seed makes sampling repeatable.
        stop: strings that end the answer (not part of its text); stop_token_ids: ids that end it
            (part of its ids); ignore_eos: do not stop at the model's end-of-sequence tokens.
        response_format: {"type": "json_object"} or {"type": "json_schema", "json_schema":
            {"schema": {...}}}, as the OpenAI API's: the answer is constrained to it while it is
            drawn (the schema subset and its refusals: docs/serving.md, "Structured output").
        stream: an iterator of Chunk as tokens are drawn, instead of a Completion at the end.
            Leaving the loop early cancels the rest.
        """
        ids = self._prompt_ids(prompt)
        if isinstance(stop, str):
            stop = [stop]
        core_stream = self._core.generate(
            ids,
            -1 if max_tokens is None else int(max_tokens),
            float(temperature),
            float(top_p),
            int(top_k),
            float(min_p),
            float(repetition_penalty),
            float(presence_penalty),
            float(frequency_penalty),
            int(seed),
            list(stop or []),
            [int(t) for t in (stop_token_ids or [])],
            bool(ignore_eos),
            json.dumps(response_format) if response_format else "",
        )
        if stream:
            return _chunks(core_stream)
        text, out_ids, reason = [], [], None
        for chunk in _chunks(core_stream):
            text.append(chunk.text)
            out_ids.extend(chunk.ids)
            reason = chunk.finish_reason or reason
        return Completion("".join(text), out_ids, reason or "length", len(ids))

    def chat(
        self,
        messages: Sequence[dict],
        *,
        chat_template_kwargs: Optional[dict] = None,
        **generate_args,
    ) -> Union[Completion, Iterator[Chunk]]:
        """Generates the assistant's answer to `messages` ([{"role": ..., "content": ...}])
        through the model's chat template; takes generate()'s keyword arguments."""
        prompt = self.apply_chat_template(messages, chat_template_kwargs)
        return self.generate(self.tokenize(prompt), **generate_args)

    # Scores.
    def logits(self, prompt: Prompt):
        """The logits of every position of `prompt` (text or ids): a float32 numpy array
        [len(ids), vocab_size], row j scoring the token after position j."""
        return self._core.logits(self._prompt_ids(prompt))

    def perplexity(self, text: Prompt, *, context: Optional[int] = None,
                   max_chunks: int = 0) -> float:
        """Perplexity of `text` (or ids), as llama.cpp's perplexity tool computes it: chunks of
        `context` tokens (default: the model's context, at most 512), the second half of each
        scored. The text must hold at least one chunk."""
        if context is None:
            context = min(self.context, 512)
        value, _scored, _chunks = self._core.perplexity(self._prompt_ids(text), int(context),
                                                        int(max_chunks))
        return value

    def _prompt_ids(self, prompt: Prompt) -> List[int]:
        if isinstance(prompt, str):
            return self.tokenize(prompt)
        try:
            return [int(t) for t in prompt]
        except TypeError:
            raise TypeError("prompt must be text (str) or token ids (a sequence of int)") from None


def _chunks(core_stream) -> Iterator[Chunk]:
    try:
        while True:
            text, ids, reason = core_stream.next()
            yield Chunk(text, list(ids), reason)
            if reason is not None:
                return
    finally:
        core_stream.cancel()
