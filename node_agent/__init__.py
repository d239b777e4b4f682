"""The node agent: runs a Triton node's tritonserver and keeps the control plane told about it
(``llm-node``, the process a node container or pod runs)."""
