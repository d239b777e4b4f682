"""Stream a generation over gRPC with tritonclient, as a client of Triton's stock vLLM backend does,
through the gateway (the API key goes as the ``authorization`` metadata).

    LLM_API_KEY=llmgw_... python -m control_plane.grpc_example --url 127.0.0.1:8001 --priority 1 "Write a haiku"
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys

import numpy as np
import tritonclient.grpc as grpcclient


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("prompt")
    parser.add_argument("--url", default="127.0.0.1:8001")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--priority", type=int, default=0, help="1 (most urgent) .. 3; 0: default")
    parser.add_argument("--api-key", default=os.environ.get("LLM_API_KEY"),
                        help="the gateway's API key (default: $LLM_API_KEY)")
    args = parser.parse_args()

    def tensor(name: str, value: object, dtype: str) -> grpcclient.InferInput:
        data = np.array([value], dtype=np.object_ if dtype == "BYTES" else bool)
        return grpcclient.InferInput(name, [1], dtype).set_data_from_numpy(data)

    inputs = [
        tensor("text_input", args.prompt.encode(), "BYTES"),
        tensor("stream", True, "BOOL"),
        tensor("sampling_parameters", json.dumps({"max_tokens": args.max_tokens}).encode(), "BYTES"),
        tensor("return_finish_reason", True, "BOOL"),
    ]
    # The result is None only beside an error.
    responses: queue.Queue[tuple[grpcclient.InferResult, Exception | None]] = queue.Queue()
    client = grpcclient.InferenceServerClient(args.url)
    headers = {"authorization": f"Bearer {args.api_key}"} if args.api_key else None
    client.start_stream(callback=lambda result, error: responses.put((result, error)),
                        headers=headers)
    # The gateway hands gRPC's own priority field to the backend as its level.
    client.async_stream_infer(args.model, inputs, enable_empty_final_response=True,
                              priority=args.priority)
    try:
        while True:
            result, error = responses.get(timeout=120)
            if error is not None:
                print(f"\nerror: {error}", file=sys.stderr)
                sys.exit(1)
            text = result.as_numpy("text_output")
            if text is not None:
                print(text[0].decode(), end="", flush=True)
            reason = result.as_numpy("finish_reason")
            if result.get_response().parameters["triton_final_response"].bool_param:
                print(f"\n[finish_reason: {reason[0].decode() if reason is not None else '-'}]")
                return
    finally:
        client.stop_stream()
        client.close()


if __name__ == "__main__":
    main()
