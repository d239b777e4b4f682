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
from vllm.platforms import current_platform
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.engine.exceptions import EngineDeadError
from vllm.v1.metrics.loggers import StatLoggerBase

from llm_backend.adapter_control import AdapterAction, AdapterControl, state_json
from llm_backend.adapters import (
    AdapterLimits,
    AdapterRegistry,
    LoadedAdapter,
    LoraTargets,
    inspect_adapter,
)
from llm_backend.chat import INPUT_FORMAT_PARAMETER, ChatMessage
from llm_backend.errors import BackendError, InvalidRequest, Unavailable
from llm_backend.logprobs import NOT_REQUESTED, cumulative, logprobs_json
from llm_backend.outputs import BackendMetrics, OutputChunk, ResponseSink, SequenceProgress
from llm_backend.preemption import resumable, resume_sampling
from llm_backend.request import GenerationRequest
from llm_backend.settings import SettingsError

log = logging.getLogger(__name__)

# Imported by vLLM in its worker process on the CPU platform with enable_lora (cpu_lora_ops.py).
CPU_LORA_EXTENSION = "llm_backend.cpu_lora_ops.SkipBaseTokensInCpuLoraOps"
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
    # The LoRA adapter the request names (its lora_name); None: the base model.
    adapter: LoadedAdapter | None = None
    # Told of the output tokens as they come (the tenant's fair-share service).
    on_tokens: Callable[[int], None] = lambda tokens: None
    # Preemption (preemption.py): told to stop for another tenant's request; whether it stopped
    # before finishing (it then waits to resume); the tokens it streamed, which a resumed run
    # appends to its prompt; tokens counted per sequence across runs.
    preempted: bool = False
    stopped_early: bool = False
    output_token_ids: list[int] = field(default_factory=list)
    progress: SequenceProgress = field(default_factory=SequenceProgress)
    runs: int = 0
    first_token_seen: bool = False

    @property
    def preemptible(self) -> bool:
        """Whether it can stop now and resume exactly: nothing sent yet (it starts over), or a
        stream that can continue where it was."""
        return not self.aborted and (not self.responded or resumable(self.request))


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


def with_cpu_lora_fix(args: AsyncEngineArgs, on_cpu: bool) -> AsyncEngineArgs:
    """On the CPU platform with LoRA: vLLM's worker loads our fix of its CPU LoRA ops."""
    if not (on_cpu and args.enable_lora):
        return args
    if args.worker_extension_cls not in ("", CPU_LORA_EXTENSION):
        raise SettingsError(
            f"model.json worker_extension_cls: {args.worker_extension_cls!r}; with enable_lora "
            f"on a CPU the backend needs it for {CPU_LORA_EXTENSION} (vLLM's CPU LoRA ops would "
            "give base-model requests an adapter); leave it out")
    args.worker_extension_cls = CPU_LORA_EXTENSION
    return args


class EngineHost:
    """The engine, its loop thread, and the requests it is generating."""

    def __init__(self, engine_args: dict[str, Any], metrics: BackendMetrics,
                 on_engine_dead: Callable[[BaseException], None],
                 stat_loggers: Sequence[Callable[[Any, int], StatLoggerBase]] = ()) -> None:
        """``stat_loggers``: further vLLM per-engine stat-logger factories, beside our own."""
        self._args = with_cpu_lora_fix(engine_args_from(engine_args), current_platform.is_cpu())
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
        # With engine arg enable_lora: the adapters loaded at run time (None: the engine has none).
        self.adapters: AdapterRegistry | None = None
        self._lora_targets: LoraTargets | None = None
        # One adapter load at a time, so two cannot both pass the registry's limit.
        self._adapter_loads = asyncio.Lock()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._build(), self._loop).result()

    async def _build(self) -> None:
        recorder = functools.partial(_SchedulerStatsRecorder, metrics=self._metrics)
        self._engine = AsyncLLM.from_engine_args(self._args,
                                                 stat_loggers=[recorder, *self._stat_loggers])
        lora_config = self._engine.vllm_config.lora_config
        if lora_config is not None:
            try:
                self._lora_targets = LoraTargets.from_hf_config(
                    self._engine.vllm_config.model_config.hf_config)
            except SettingsError:
                self._engine.shutdown()
                raise
            self.adapters = AdapterRegistry(AdapterLimits.from_lora_config(lora_config))
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

    def preempt(self, victim: GenerationJob, job: GenerationJob) -> None:
        """Stop ``victim`` (its ``on_done`` runs with ``stopped_early`` set unless it finished
        first), then start ``job``; returns at once."""
        self._loop.call_soon_threadsafe(self._start_preemption, victim, job)

    def _start_preemption(self, victim: GenerationJob, job: GenerationJob) -> None:
        # Decided here, on the loop that streams it: the scheduler chose the victim from another
        # thread, and it may have sent its first tokens since (then only a stream that can
        # continue may stop). One that may not runs to its end; vLLM holds the newcomer until then.
        if victim.request_id in self._jobs and victim.preemptible:
            victim.preempted = True
            # Its abort reaches the engine core before the next request is added (one ordered
            # channel), so the engine runs no more requests than its slots.
            self._track(self._loop.create_task(self._abort_then_start(victim, job)))
        else:
            self._start_job(job)

    async def _abort_then_start(self, victim: GenerationJob, job: GenerationJob) -> None:
        try:
            await self.engine.abort(victim.request_id)
        finally:
            self._start_job(job)

    def _start_job(self, job: GenerationJob) -> None:
        if job.runs:
            # A preempted job resuming: vLLM needs a fresh request id.
            job.request_id = uuid.uuid4().hex
            job.preempted = job.stopped_early = False
        job.runs += 1
        self._jobs[job.request_id] = job
        self._track(self._loop.create_task(self._generate(job)))

    def _engine_input(self, job: GenerationJob) -> tuple[list[int], Any]:
        """The prompt and sampling of this run: a resumed stream continues after what it sent;
        anything else runs from its start (it sent nothing)."""
        if job.output_token_ids:
            return (job.prompt_token_ids + job.output_token_ids,
                    resume_sampling(job.request.sampling, len(job.output_token_ids)))
        job.progress = SequenceProgress()
        return job.prompt_token_ids, job.request.sampling

    async def _watch_cancellations(self) -> None:
        while True:
            await asyncio.sleep(CANCEL_POLL_S)
            for job in list(self._jobs.values()):
                if not job.aborted and job.sink.is_cancelled():
                    job.aborted = True
                    await self.engine.abort(job.request_id)

    async def _generate(self, job: GenerationJob) -> None:
        request = job.request
        progress = job.progress
        last_token_at: float | None = None
        finished = False
        counted_on: LoadedAdapter | None = None
        if job.runs == 1:
            self._metrics.observe_prompt_tokens(len(job.prompt_token_ids))
        try:
            if job.adapter is not None and self.adapters is not None:
                # Counted from here, so an unload waits for it; refused if it was unloaded while
                # the request waited in the queue.
                self.adapters.acquire(job.adapter)
                counted_on = job.adapter
            prompt_token_ids, sampling = self._engine_input(job)
            # Only a stream that can continue after a preemption keeps its tokens for it.
            record_tokens = resumable(request)
            outputs = self.engine.generate(
                {"prompt_token_ids": prompt_token_ids},
                sampling,
                job.request_id,
                lora_request=None if counted_on is None else counted_on.lora,
                priority=request.priority,
            )
            async for output in outputs:
                # A preempted run drops what it has not passed on: the resumed run makes it
                # again after the tokens it did pass on.
                if job.aborted or job.preempted:
                    break
                now = time.monotonic()
                new_tokens = self._count_new_tokens(output, progress, request.streaming)
                if new_tokens:
                    job.on_tokens(new_tokens)
                    if not job.first_token_seen:
                        job.first_token_seen = True
                        self._metrics.observe_time_to_first_token(now - job.arrived)
                    elif last_token_at is not None:
                        self._metrics.observe_inter_token_latency((now - last_token_at) / new_tokens)
                    last_token_at = now
                    self._metrics.observe_generated_tokens(new_tokens)
                if record_tokens:
                    job.output_token_ids.extend(output.outputs[0].token_ids)
                if request.streaming or output.finished:
                    job.sink.send(self._chunk(job, output), final=output.finished)
                    job.responded = True
                finished = output.finished
            job.stopped_early = job.preempted and not finished and not job.aborted
            if job.stopped_early:
                # Again, in case the first abort reached vLLM before this run's request did.
                await self.engine.abort(job.request_id)
            if not finished and not job.aborted and not job.stopped_early:
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
            if counted_on is not None and self.adapters is not None:
                self.adapters.release(counted_on)
            if request.tenant is not None and not job.stopped_early:
                # Once per request, at its end: each metric update is a blocking message to
                # the Triton process.
                self._metrics.observe_tenant_request(request.tenant, sum(progress.tokens.values()))
            job.on_done()

    # -- LoRA adapters -----------------------------------------------------------------------
    def submit_adapter_control(self, control: AdapterControl, sink: ResponseSink,
                               drain_timeout_s: float) -> None:
        """Carry out ``control`` on the loop thread, then answer with the adapters' state;
        returns at once. An unload waits up to ``drain_timeout_s`` for the adapter's requests."""
        if self.adapters is None:
            raise RuntimeError("the engine was built without enable_lora")
        registry = self.adapters

        def start() -> None:
            self._track(self._loop.create_task(
                self._control_adapters(registry, control, sink, drain_timeout_s)))

        self._loop.call_soon_threadsafe(start)

    async def _control_adapters(self, registry: AdapterRegistry, control: AdapterControl,
                                sink: ResponseSink, drain_timeout_s: float) -> None:
        try:
            if control.action is AdapterAction.LOAD and control.name and control.path:
                await self._load_adapter(registry, control.name, control.path)
            elif control.action is AdapterAction.UNLOAD and control.name:
                await self._unload_adapter(registry, control.name, drain_timeout_s)
            state = state_json(registry.snapshot(), registry.limits)
            sink.send(OutputChunk(texts=[state], finish_reasons=[], num_output_tokens=[],
                                  num_input_tokens=0), final=True)
        except EngineDeadError as exc:
            self.dead = exc
            sink.fail(Unavailable(f"the vLLM engine died ({exc}); the model is being unloaded"))
            self._on_engine_dead(exc)
        except BackendError as exc:
            sink.fail(exc)
        except asyncio.CancelledError:
            sink.fail(Unavailable("the model is unloading"))
            raise
        except Exception as exc:
            log.exception("adapter %s failed", control.action.value)
            sink.fail(BackendError(f"adapter {control.action.value} failed: "
                                   f"{type(exc).__name__}: {exc}"))

    async def _load_adapter(self, registry: AdapterRegistry, name: str, path: str) -> None:
        async with self._adapter_loads:
            if registry.plan_load(name, path) is not None:
                return
            if self._lora_targets is None:
                raise RuntimeError("LoRA targets are unknown")
            started = time.monotonic()
            # Disk reads, off the loop: streams keep flowing meanwhile.
            files = await asyncio.to_thread(inspect_adapter, path, self._lora_targets,
                                            self.engine.vllm_config.lora_config)
            adapter = registry.new_adapter(name, files)
            if not await self.engine.add_lora(adapter.lora):
                raise BackendError(f"vLLM did not load adapter {name!r}: it already holds id "
                                   f"{adapter.lora.lora_int_id}")
            registry.register(adapter)
        log.info("LoRA adapter %s loaded from %s (rank %s) in %.0f ms", name, files.path,
                 files.rank, (time.monotonic() - started) * 1000)

    async def _unload_adapter(self, registry: AdapterRegistry, name: str,
                              drain_timeout_s: float) -> None:
        adapter = registry.begin_unload(name)
        if adapter is None:
            return
        deadline = time.monotonic() + drain_timeout_s
        while adapter.requests_in_flight and time.monotonic() < deadline:
            await asyncio.sleep(CANCEL_POLL_S)
        # Past the drain time: vLLM would reload a removed adapter from its path for a request
        # still naming it, so those requests end here.
        leftover = [job for job in self._jobs.values() if job.adapter is adapter and not job.aborted]
        for job in leftover:
            job.aborted = True
            job.sink.fail(Unavailable(f"adapter {name!r} was unloaded before the request "
                                      f"finished (drain_timeout_seconds {drain_timeout_s:g})"))
        if leftover:
            await self.engine.abort([job.request_id for job in leftover])
        async with self._adapter_loads:
            if registry.remove(adapter):
                await self.engine.remove_lora(adapter.lora.lora_int_id)
                log.info("LoRA adapter %s unloaded (%d requests cut at the drain time)", name,
                         len(leftover))

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
