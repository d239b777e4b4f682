"""Hosts one vLLM ``AsyncLLM`` on its own asyncio loop thread and streams its outputs to sinks.

Triton calls ``execute()`` on the stub's main thread; generation runs on the loop thread, so
``execute()`` only hands requests over (decoupled responses keep the engine saturated).
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jinja2
from vllm import AsyncEngineArgs
from vllm.exceptions import VLLMClientError
from vllm.outputs import RequestOutput
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.engine.exceptions import EngineDeadError
from vllm.v1.metrics.loggers import StatLoggerBase

from llm_backend.chat import INPUT_FORMAT_PARAMETER, ChatMessage
from llm_backend.errors import BackendError, InvalidRequest, Unavailable
from llm_backend.logprobs import NOT_REQUESTED, cumulative, logprobs_json
from llm_backend.outputs import BackendMetrics, OutputChunk, ResponseSink, SequenceProgress
from llm_backend.request import GenerationRequest
from llm_backend.settings import SettingsError

log = logging.getLogger(__name__)

# How often in-flight requests are checked for client cancellation while no token arrives
# (a request still in prefill, or waiting in vLLM's own queue).
CANCEL_POLL_S = 0.05


@dataclass
class GenerationJob:
    request: GenerationRequest
    prompt_token_ids: list[int]
    sink: ResponseSink
    on_done: Callable[[], None]
    arrived: float = field(default_factory=time.monotonic)
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    aborted: bool = False
    # Whether a response went out yet: the prompt, when asked for, leads the first one only.
    responded: bool = False


class _SchedulerStatsRecorder(StatLoggerBase):
    """Passes vLLM's running/waiting counts on to our metrics after every engine step."""

    def __init__(self, vllm_config: Any, engine_index: int = 0, *, metrics: BackendMetrics) -> None:
        self._metrics = metrics

    def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None,
               engine_idx: int = 0) -> None:
        if scheduler_stats is not None:
            self._metrics.set_engine_requests(
                scheduler_stats.num_running_reqs, scheduler_stats.num_waiting_reqs
            )

    def log_engine_initialized(self) -> None:
        return None


def engine_args_from(raw: dict[str, Any]) -> AsyncEngineArgs:
    """Build vLLM's engine arguments, naming unknown keys with their closest matches."""
    known = set(AsyncEngineArgs.__dataclass_fields__)
    for key in raw:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise SettingsError(f"model.json: {key!r} is not a vLLM engine argument{hint}")
    return AsyncEngineArgs(**raw)


class EngineHost:
    """The engine, its loop thread, and the requests it is generating."""

    def __init__(self, engine_args: dict[str, Any], metrics: BackendMetrics,
                 on_engine_dead: Callable[[BaseException], None],
                 stat_loggers: Sequence[Callable[[Any, int], StatLoggerBase]] = ()) -> None:
        """``stat_loggers``: further vLLM per-engine stat-logger factories, beside our own."""
        self._args = engine_args_from(engine_args)
        self._metrics = metrics
        self._on_engine_dead = on_engine_dead
        self._stat_loggers = list(stat_loggers)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vllm-engine-loop",
                                        daemon=True)
        self._engine: AsyncLLM | None = None
        self._jobs: dict[str, GenerationJob] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.dead: BaseException | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._build(), self._loop).result()

    async def _build(self) -> None:
        recorder = functools.partial(_SchedulerStatsRecorder, metrics=self._metrics)
        self._engine = AsyncLLM.from_engine_args(self._args,
                                                 stat_loggers=[recorder, *self._stat_loggers])
        self._track(self._loop.create_task(self._watch_cancellations()))

    def _track(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def engine(self) -> AsyncLLM:
        if self._engine is None:
            raise RuntimeError("engine not started")
        return self._engine

    @property
    def max_num_seqs(self) -> int:
        return int(self.engine.vllm_config.scheduler_config.max_num_seqs)

    @property
    def max_model_len(self) -> int:
        return int(self.engine.vllm_config.model_config.max_model_len)

    @property
    def tokenizer(self) -> Any:
        """vLLM's tokenizer for the model (a Hugging Face fast tokenizer for most models)."""
        return self.engine.get_tokenizer()

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def tokenize(self, prompt: str, add_special_tokens: bool = True) -> list[int]:
        return list(self.tokenizer.encode(prompt, add_special_tokens=add_special_tokens))

    def render_chat(self, messages: Sequence[ChatMessage]) -> str:
        """The prompt the model's own chat template makes of ``messages``, ready for a reply."""
        if not self.has_chat_template:
            raise InvalidRequest(
                INPUT_FORMAT_PARAMETER,
                "'chat' needs the model's chat template, and this model's tokenizer has none; "
                "send input_format 'text' with a prompt formatted for the model",
            )
        try:
            prompt = self.tokenizer.apply_chat_template(
                [message.as_dict() for message in messages],
                add_generation_prompt=True, tokenize=False,
            )
        except jinja2.TemplateError as exc:
            raise InvalidRequest(
                "text_input", f"the model's chat template refused the messages: {exc}"
            ) from None
        return str(prompt)

    def shutdown(self, abort_message: str) -> None:
        """Fail what is still running, stop the engine and its processes, stop the loop."""
        if self._engine is not None and self._thread.is_alive():
            future = asyncio.run_coroutine_threadsafe(self._close(abort_message), self._loop)
            try:
                future.result(timeout=15)
            except Exception:
                log.exception("closing in-flight requests failed")
            self._engine.shutdown()
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        # Response senders must not outlive the stub's shared memory (they crash at exit).
        self._jobs.clear()

    async def _close(self, message: str) -> None:
        for job in list(self._jobs.values()):
            job.aborted = True
            job.sink.fail(Unavailable(message))
        if self._jobs:
            await self.engine.abort(list(self._jobs))
        for task in list(self._tasks):
            task.cancel()
        await asyncio.wait(list(self._tasks) or [asyncio.sleep(0)], timeout=10)

    # -- requests ----------------------------------------------------------------------------
    def submit(self, job: GenerationJob) -> None:
        """Start generating ``job`` on the loop thread; returns at once."""
        self._loop.call_soon_threadsafe(self._start_job, job)

    def _start_job(self, job: GenerationJob) -> None:
        self._jobs[job.request_id] = job
        self._track(self._loop.create_task(self._generate(job)))

    async def _watch_cancellations(self) -> None:
        while True:
            await asyncio.sleep(CANCEL_POLL_S)
            for job in list(self._jobs.values()):
                if not job.aborted and job.sink.is_cancelled():
                    job.aborted = True
                    await self.engine.abort(job.request_id)

    async def _generate(self, job: GenerationJob) -> None:
        request = job.request
        progress = SequenceProgress()
        last_token_at: float | None = None
        finished = False
        self._metrics.observe_prompt_tokens(len(job.prompt_token_ids))
        try:
            outputs = self.engine.generate(
                {"prompt_token_ids": job.prompt_token_ids},
                request.sampling,
                job.request_id,
                priority=request.priority,
            )
            async for output in outputs:
                if job.aborted:
                    break
                now = time.monotonic()
                new_tokens = self._count_new_tokens(output, progress, request.streaming)
                if new_tokens:
                    if last_token_at is None:
                        self._metrics.observe_time_to_first_token(now - job.arrived)
                    else:
                        self._metrics.observe_inter_token_latency((now - last_token_at) / new_tokens)
                    last_token_at = now
                    self._metrics.observe_generated_tokens(new_tokens)
                if request.streaming or output.finished:
                    job.sink.send(self._chunk(job, output), final=output.finished)
                    job.responded = True
                finished = output.finished
            if not finished and not job.aborted:
                job.sink.send(None, final=True)
        except EngineDeadError as exc:
            self.dead = exc
            job.sink.fail(Unavailable(f"the vLLM engine died ({exc}); the model is being unloaded"))
            self._on_engine_dead(exc)
        except VLLMClientError as exc:
            # vLLM refused the request itself (a schema or grammar that does not compile, more
            # logprobs than the model allows, an out-of-vocabulary token id): the client's error.
            job.sink.fail(refused_by_vllm(exc, request))
        except BackendError as exc:
            job.sink.fail(exc)
        except Exception as exc:
            log.exception("generation %s failed", job.request_id)
            job.sink.fail(BackendError(f"generation failed: {type(exc).__name__}: {exc}"))
        finally:
            if job.aborted and not finished:
                job.sink.send(None, final=True)
            self._jobs.pop(job.request_id, None)
            if request.tenant is not None:
                # Once per request, at its end: each metric update is a blocking message to
                # the Triton process.
                self._metrics.observe_tenant_request(request.tenant, sum(progress.tokens.values()))
            job.on_done()

    @staticmethod
    def _count_new_tokens(output: RequestOutput, progress: SequenceProgress, delta: bool) -> int:
        new = 0
        for seq in output.outputs:
            seen = progress.tokens.get(seq.index, 0)
            count = seen + len(seq.token_ids) if delta else len(seq.token_ids)
            new += count - seen
            progress.tokens[seq.index] = count
        return new

    @staticmethod
    def _chunk(job: GenerationJob, output: RequestOutput) -> OutputChunk:
        request = job.request
        first = not job.responded
        prefix = request.prompt if request.include_prompt_in_output and first else ""
        prompt_logprobs = None
        if first and request.sampling.prompt_logprobs is not None:
            prompt_logprobs = logprobs_json(output.prompt_logprobs)
        return OutputChunk(
            texts=[prefix + seq.text for seq in output.outputs],
            finish_reasons=[seq.finish_reason or "" for seq in output.outputs],
            num_output_tokens=[len(seq.token_ids) for seq in output.outputs],
            num_input_tokens=len(job.prompt_token_ids),
            # Deltas when streaming (vLLM's DELTA outputs), everything at the end otherwise.
            logprobs=[logprobs_json(seq.logprobs) if request.logprobs_requested else NOT_REQUESTED
                      for seq in output.outputs] if request.return_logprobs else [],
            cumulative_logprobs=[cumulative(seq.cumulative_logprob) for seq in output.outputs]
            if request.return_cumulative_logprob else [],
            prompt_logprobs=prompt_logprobs,
        )


def refused_by_vllm(error: VLLMClientError, request: GenerationRequest) -> InvalidRequest:
    """vLLM's refusal of a request, with the sampling parameter it concerns named."""
    # Grammar errors span lines (the spec, a caret under the fault): one line, whole.
    message = " ".join(str(error).split())[:1000]
    parameter = getattr(error, "parameter", None)
    if parameter is None and request.sampling.structured_outputs is not None and any(
            word in message.lower() for word in ("grammar", "regex", "schema", "json", "choice")):
        parameter = "structured_outputs"
    if parameter is None:
        parameter = next((name for name in ("prompt_logprobs", "logprobs", "logit_bias",
                                            "allowed_token_ids", "bad_words", "stop_token_ids")
                          if name in message), None)
    return InvalidRequest(f"sampling_parameters.{parameter}" if parameter else
                          "sampling_parameters", message)
