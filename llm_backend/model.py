"""Triton Python-based backend hosting a vLLM engine: lifecycle only.

Parsing, sampling parameters, admission, priorities and streaming live in modules that import
nothing from Triton; this file wires them to ``triton_python_backend_utils``.
"""

from __future__ import annotations

import locale

# The stub's embedded Python runs with a C locale whatever LANG says, and importing vLLM (torch
# inductor templates) then fails with UnicodeDecodeError; set it before anything imports torch.
locale.setlocale(locale.LC_CTYPE, "C.UTF-8")

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import triton_python_backend_utils as pb_utils

from llm_backend.adapter_control import (
    REPOSITORY_KEY_ENV,
    ControlKey,
    is_control_request,
    parse_control,
)
from llm_backend.admission import Admission
from llm_backend.devices import engine_device_environment
from llm_backend.engine import EngineHost, GenerationJob
from llm_backend.errors import BackendError, InvalidRequest, Unavailable
from llm_backend.gateway_trust import GATEWAY_SECRET_ENV, GatewayTrust
from llm_backend.request import parse_parameters_json, parse_request
from llm_backend.scheduler import AdmissionScheduler, QueuePolicy, QueueRejected
from llm_backend.serving_watch import ServingWatch, may_stop
from llm_backend.settings import SettingsError, load_settings
from llm_backend.stock_metrics import StockMetricsFactory
from llm_backend.token_bytes import TokenBytes, UnboundedTokens, max_token_bytes
from llm_backend.triton_io import TritonResponseSink, read_raw_request
from llm_backend.triton_metrics import TritonBackendMetrics

log = logging.getLogger("llm_backend")
# Without back-pressure (the FCFS baseline), every request goes straight to the engine.
UNBOUNDED = 1 << 30
# How often waiting requests are checked for queue timeouts (and the request gauges published).
QUEUE_TICK_S = 0.05
# Every this many ticks, waiting requests are also checked for client cancellation.
CANCEL_SWEEP_TICKS = 10


def _log_to_triton_log() -> None:
    # The stub's stderr ends up in tritonserver's log; without a handler of its own, Python
    # would drop everything below WARNING there (the load line included).
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s [%(name)s] %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)


def _python_executable() -> str:
    for candidate in (sys.executable, str(Path(sys.prefix) / "bin" / "python3"), shutil.which("python3")):
        if candidate and Path(candidate).name.startswith("python") and Path(candidate).exists():
            return candidate
    raise RuntimeError("cannot find a python3 to run the engine reaper")


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        _log_to_triton_log()
        self._name = args["model_name"]
        self._version = args["model_version"]
        model_config = json.loads(args["model_config"])
        self._settings = load_settings(model_config, Path(args["model_repository"]) / self._version)
        self._levels = self._settings.levels
        self._closing = False
        self._unloading_self = threading.Lock()
        # Draining and stopping the engine happens once: on Triton's finalize, or earlier when
        # Triton stops serving this version but still holds it (serving_watch.py).
        self._retiring = threading.Lock()
        self._retired = False
        self._left_at: float | None = None  # when Triton was seen no longer serving this version
        self._last_request_at = time.monotonic()
        # Read once: tritonserver's environment, which the stub inherits.
        self._gateway = GatewayTrust.from_environment()
        self._control_key = ControlKey.from_environment()
        self._metrics = TritonBackendMetrics(pb_utils, self._name, self._version, self._levels.count)
        # The stock vLLM backend's vllm:* families, for dashboards built for it.
        self._stock_metrics = (StockMetricsFactory(pb_utils, self._name, self._version)
                               if self._settings.report_custom_metrics else None)
        # Started before the engine, so the engine processes are its owner's descendants.
        self._reaper = subprocess.Popen(
            [_python_executable(), "-m", "llm_backend.reaper",
             "--watch", str(os.getpid()), "--watch", str(os.getppid()), "--owner", str(os.getpid())],
            stdin=subprocess.PIPE, text=True,
        )
        # The GPUs placement chose, before anything starts CUDA (vLLM's engine process inherits
        # them).
        pinned = engine_device_environment(model_config, args["model_instance_kind"],
                                           int(args["model_instance_device_id"]))
        os.environ.update(pinned)
        if pinned:
            log.info("llm_backend %s/%s pinned to GPUs %s", self._name, self._version,
                     pinned["CUDA_VISIBLE_DEVICES"])
        self._engine = EngineHost(self._settings.engine_args, self._metrics, self._on_engine_dead,
                                  [self._stock_metrics] if self._stock_metrics else [])
        self._engine.start()
        self._scheduler = self._build_scheduler()
        bytes_bound, bytes_note = self._token_bytes_bound()
        self._admission = Admission(self._engine.max_model_len, bytes_bound)
        self._serving = ServingWatch(
            lambda: bool(pb_utils.is_model_ready(model_name=self._name,
                                                 model_version=self._version)),
            time.monotonic)
        self._ticker = threading.Thread(target=self._tick, name="queue-ticker", daemon=True)
        self._ticker.start()
        log.info("llm_backend %s/%s ready: %s engine slots (%s reserved for levels <= %s), "
                 "%s priority levels (default %s), fair-share preemption %s; %s; chat template: "
                 "%s; tenant parameter: %s",
                 self._name, self._version, self._scheduler.capacity, self._scheduler.reserved,
                 self._settings.urgent_level, self._levels.count, self._levels.default,
                 "on" if self._scheduler.preempt is not None else "off",
                 bytes_note, "yes" if self._engine.has_chat_template else "none",
                 f"trusted from the gateway ({GATEWAY_SECRET_ENV} set)" if self._gateway.configured
                 else f"refused ({GATEWAY_SECRET_ENV} not set)")
        if self._engine.adapters is not None:
            limits = self._engine.adapters.limits
            log.info("llm_backend %s/%s LoRA adapters: up to %s loaded, rank <= %s; adapter "
                     "control: %s", self._name, self._version, limits.max_adapters,
                     limits.max_lora_rank, f"with the node's {REPOSITORY_KEY_ENV}"
                     if self._control_key.key else f"refused ({REPOSITORY_KEY_ENV} not set)")

    def _token_bytes_bound(self) -> tuple[TokenBytes | None, str]:
        """The byte bound for early refusals, and how the load log describes it."""
        started = time.monotonic()
        try:
            bound = max_token_bytes(self._engine.tokenizer)
        except UnboundedTokens as exc:
            return None, f"prompts are tokenized before the length check ({exc})"
        limit = (self._engine.max_model_len - 1) * bound.max_bytes
        return bound, (f"max_token_bytes {bound.max_bytes} (prompts over {limit} bytes refused "
                       f"without tokenizing, {len(bound.dropped)} byte values the tokenizer "
                       f"drops aside; found in {time.monotonic() - started:.2f} s)")

    def _build_scheduler(self) -> AdmissionScheduler[GenerationJob]:
        settings = self._settings
        if not settings.back_pressure:
            # The stock backend's behaviour, kept as a baseline: everything goes to the engine.
            return AdmissionScheduler(
                capacity=UNBOUNDED, reserved=0, urgent_level=settings.urgent_level,
                policies={level: QueuePolicy() for level in range(1, self._levels.count + 1)},
                start=self._start_job, reject=self._reject_job,
            )
        capacity = settings.max_inflight or self._engine.max_num_seqs
        reserved = settings.reserved_urgent_slots
        if reserved is None:
            reserved = 1 if self._levels.count > 1 and capacity > 1 else 0
        if reserved >= capacity:
            raise SettingsError(
                f"parameters.reserved_urgent_slots: {reserved} leaves no engine slot for levels "
                f"above {settings.urgent_level} (the engine runs {capacity} requests at once)"
            )
        return AdmissionScheduler(
            capacity=capacity, reserved=reserved, urgent_level=settings.urgent_level,
            policies=settings.queue_policies, start=self._start_job, reject=self._reject_job,
            cancelled=self._client_gone,
            preempt=self._engine.preempt if settings.fair_share_preemption else None,
            preemptible=lambda job: job.preemptible,
        )

    def execute(self, requests: list[Any]) -> None:
        # Hands requests over and returns: nothing here waits for the engine, the queue or
        # another request, so Triton's instance is idle again within a millisecond.
        self._last_request_at = time.monotonic()
        for request in requests:
            sink = TritonResponseSink(pb_utils, request.get_response_sender())
            try:
                parameters = parse_parameters_json(request.parameters())
            except BackendError as exc:
                sink.fail(exc)
                continue
            if is_control_request(parameters):
                self._accept_control(parameters, sink)
            else:
                self._accept(request, parameters, sink)

    def _check_serving(self) -> None:
        if self._engine.dead is not None:
            raise Unavailable(f"the vLLM engine died ({self._engine.dead}); the model is being unloaded")
        if self._closing:
            raise Unavailable("the model is unloading")

    def _accept_control(self, parameters: dict[str, Any], sink: TritonResponseSink) -> None:
        # Not queued: a control request takes no engine slot, and runs on the engine's loop.
        try:
            self._check_serving()
            control = parse_control(parameters, self._control_key)
            if self._engine.adapters is None:
                raise InvalidRequest(
                    "adapter_control",
                    f"model {self._name} was loaded without enable_lora; its version's "
                    "engine_args must set enable_lora, max_loras and max_lora_rank")
        except BackendError as exc:
            sink.fail(exc)
            return
        self._engine.submit_adapter_control(control, sink, self._settings.drain_timeout_s)

    def _accept(self, request: Any, parameters: dict[str, Any], sink: TritonResponseSink) -> None:
        try:
            self._check_serving()
            generation = parse_request(read_raw_request(pb_utils, request, parameters),
                                       self._levels, self._gateway)
            if not self._settings.priority_passthrough:
                generation = replace(generation, priority=0)
            messages = generation.messages
            if messages is not None:
                generation = replace(generation, prompt=self._engine.render_chat(messages))
            sink.generation = generation
            adapter = None
            if generation.lora_name is not None:
                if self._engine.adapters is None:
                    raise InvalidRequest(
                        "sampling_parameters.lora_name",
                        f"{generation.lora_name!r}: model {self._name} serves no LoRA adapters; "
                        "send the request without lora_name")
                adapter = self._engine.adapters.lookup(generation.lora_name)
            truncate = generation.truncate_prompt_tokens
            if truncate is None:
                # A prompt that cannot fit is refused from its length, before costly tokenizing
                # (a prompt the client asked to truncate may be longer than the model takes).
                self._admission.check_prompt_bytes(generation.prompt.encode("utf-8"))
            # The chat template writes the model's special tokens itself (BOS included).
            prompt_ids = self._engine.tokenize(generation.prompt,
                                               add_special_tokens=messages is None)
            if truncate is not None:
                # vLLM's meaning: keep the last tokens; -1 keeps as many as the model takes.
                keep = self._engine.max_model_len if truncate == -1 else truncate
                prompt_ids = prompt_ids[-keep:]
            self._admission.check(len(prompt_ids), generation.sampling.max_tokens)
        except BackendError as exc:
            sink.fail(exc)
            return
        except Exception as exc:
            log.exception("request could not be prepared")
            sink.fail(BackendError(f"request could not be prepared: {type(exc).__name__}: {exc}"))
            return
        level = generation.priority or self._levels.default
        job = GenerationJob(generation, prompt_ids, sink, lambda: None, adapter=adapter)
        job.on_done = lambda: self._finished(level, job)
        job.on_tokens = lambda tokens: self._scheduler.generated(job, tokens)
        try:
            self._scheduler.submit(job, level, generation.queue_timeout_s,
                                   tenant=generation.tenant, weight=generation.tenant_weight,
                                   prompt_tokens=len(prompt_ids))
        except QueueRejected as exc:
            sink.fail(exc)

    def _start_job(self, job: GenerationJob, level: int) -> None:
        self._engine.submit(job)

    def _reject_job(self, job: GenerationJob, error: QueueRejected) -> None:
        job.sink.fail(error)

    def _finished(self, level: int, job: GenerationJob) -> None:
        self._scheduler.release(level, job, stopped_early=job.stopped_early)

    def _tick(self) -> None:
        # Queue timeouts are checked every tick; client cancellation of waiting requests less
        # often, as each check is a round trip to the Triton process and hundreds may wait (a
        # cancelled request is also dropped when its turn comes, see _build_scheduler).
        ticks = 0
        while not self._closing:
            time.sleep(QUEUE_TICK_S)
            ticks += 1
            sweep = ticks % CANCEL_SWEEP_TICKS == 0
            self._scheduler.expire(self._client_gone if sweep else None)
            self._publish_request_gauges()
            if not self._closing and self._serving.left():
                self._drain_left_version()

    def _drain_left_version(self) -> None:
        """Triton serves another version (or none) but has not finalized this one: finish what
        it still hands over, then stop the engine as finalize would."""
        now = time.monotonic()
        if self._left_at is None:
            self._left_at = now
            log.warning("llm_backend %s/%s: Triton no longer serves this version (replaced or "
                        "unloaded) but has not finalized it (a client's open gRPC stream may "
                        "hold it); stopping the engine once its requests are done",
                        self._name, self._version)
        running, waiting = self._scheduler.snapshot()
        left_for_s = now - self._left_at
        if may_stop(left_for_s, not any(running.values()) and not any(waiting.values()),
                    now - self._last_request_at, self._settings.drain_timeout_s):
            self._retire("the model version was replaced or unloaded",
                         max(0.0, self._settings.drain_timeout_s - left_for_s))

    @staticmethod
    def _client_gone(job: GenerationJob) -> bool:
        return job.sink.is_cancelled()

    def _publish_request_gauges(self) -> None:
        # Only this thread publishes, once a tick: a gauge update is a blocking message to the
        # Triton process, which neither execute() nor the engine loop should wait on during a
        # burst (the metrics send only values that changed, so an idle model sends none).
        self._metrics.set_requests(*self._scheduler.snapshot())
        self._metrics.set_tenant_requests(self._scheduler.tenant_snapshot())

    def _on_engine_dead(self, error: BaseException) -> None:
        # Only the first failing request unloads; r24.10 has no other way to mark a model
        # not ready, and explicit model control is what the platform runs.
        if not self._unloading_self.acquire(blocking=False):
            return
        log.error("vLLM engine died (%s): unloading %s", error, self._name)
        threading.Thread(target=pb_utils.unload_model, args=(self._name,), daemon=True).start()

    def _retire(self, reason: str, drain_s: float | None = None) -> None:
        """Take nothing more, let running requests finish (up to ``drain_s``, by default the
        drain timeout), stop the engine; the first call does it, later ones wait for it."""
        with self._retiring:
            if self._retired:
                return
            self._closing = True
            for job in self._scheduler.close():
                job.sink.fail(Unavailable("the model is unloading"))
            started = time.monotonic()
            drained = self._scheduler.wait_idle(
                self._settings.drain_timeout_s if drain_s is None else drain_s)
            waited_s = time.monotonic() - started
            self._engine.shutdown(reason + ("" if drained else " before the request finished"))
            self._retired = True
            log.info("llm_backend %s/%s engine stopped (%s): drain %.1f s%s, stop %.1f s",
                     self._name, self._version, reason, waited_s,
                     "" if drained else " (requests cut at drain_timeout_seconds "
                     f"{self._settings.drain_timeout_s:g})", time.monotonic() - started - waited_s)

    def finalize(self) -> None:
        self._retire("the model was unloaded")
        self._ticker.join(timeout=1)
        self._metrics.close()
        if self._stock_metrics is not None:
            # After the engine stopped: nothing records into it any more.
            self._stock_metrics.close()
        if self._reaper.poll() is None:
            self._reaper.stdin.write("stop\n")
            self._reaper.stdin.flush()
            self._reaper.wait(timeout=5)
