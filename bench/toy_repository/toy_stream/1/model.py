"""A toy decoupled model for bench/batcher_stall.py: execute() hands each request to a thread that
answers it after ~20 ms of "generation", like the LLM backend. No vLLM, so the measurement shows
Triton's batcher alone."""

from __future__ import annotations

import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

WORK_S = 0.02


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self._answer, args=(request.get_response_sender(),),
                             daemon=True).start()

    def _answer(self, sender):
        time.sleep(WORK_S)
        out = pb_utils.Tensor("text_output", np.array([b"done"], dtype=np.object_))
        sender.send(pb_utils.InferenceResponse(output_tensors=[out]),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
