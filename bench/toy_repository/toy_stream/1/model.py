"""A toy decoupled model for bench/batcher_stall.py: answers each request after ~20 ms of
"generation" on a thread, like the LLM backend, with the same batcher wake-up (or without it,
per the ``batcher_wakeup`` parameter). No vLLM, so the measurement shows Triton's batcher alone."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

from llm_backend.batcher_wakeup import (
    WAKEUP_PARAMETER,
    BatcherWakeup,
    is_wakeup,
    waited_behind_work,
)

WORK_S = 0.02


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self._name = args["model_name"]
        enabled = config["parameters"]["batcher_wakeup"]["string_value"] == "true"
        self._wakeup = BatcherWakeup(self._send_noop) if enabled else None
        if self._wakeup:
            self._wakeup.start()

    def execute(self, requests):
        real = False
        for request in requests:
            sender = request.get_response_sender()
            parameters = json.loads(request.parameters() or "{}")
            if is_wakeup(parameters):
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                if self._wakeup and waited_behind_work(int(parameters["sent_at_ns"])):
                    self._wakeup.poke_after_noop()
                continue
            real = True
            threading.Thread(target=self._answer, args=(sender,), daemon=True).start()
        if real and self._wakeup:
            self._wakeup.poke()

    def _answer(self, sender):
        time.sleep(WORK_S)
        out = pb_utils.Tensor("text_output", np.array([b"done"], dtype=np.object_))
        sender.send(pb_utils.InferenceResponse(output_tensors=[out]),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def _send_noop(self, sent_at_ns):
        noop = pb_utils.InferenceRequest(
            model_name=self._name,
            inputs=[pb_utils.Tensor("text_input", np.array([b""], dtype=np.object_))],
            requested_output_names=["text_output"],
            parameters={WAKEUP_PARAMETER: True, "sent_at_ns": sent_at_ns},
        )
        threading.Thread(target=lambda: list(noop.exec(decoupled=True)), daemon=True).start()

    def finalize(self):
        if self._wakeup:
            self._wakeup.stop()
