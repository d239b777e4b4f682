"""Start and stop a tritonserver process in explicit model-control mode."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from control_plane.triton import restricted_api
from control_plane.triton.runtime import CACHE_DIR, TritonRuntime, locate

# vLLM on a CPU: a KV cache of 1 GiB (the default refuses to start for lack of memory), no hub.
ENGINE_ENVIRONMENT = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_HOST_IP": "127.0.0.1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
# The backend takes LoRA adapter control requests only with the node's repository key
# (llm_backend/adapter_control.py reads it from its environment, tritonserver's).
REPOSITORY_KEY_VARIABLE = "LLM_REPOSITORY_KEY"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class TritonPorts:
    http: int = field(default_factory=free_port)
    grpc: int = field(default_factory=free_port)
    metrics: int = field(default_factory=free_port)


class TritonServer:
    """One tritonserver process; ``start()`` returns once it answers its liveness check.

    With a ``repository_key``, loading, unloading and listing models need that key (see
    ``restricted_api``); without one, the repository API is open, as in plain Triton.
    """

    def __init__(self, model_repository: Path, ports: TritonPorts | None = None,
                 log_path: Path | None = None, extra_args: list[str] | None = None,
                 runtime: TritonRuntime | None = None, repository_key: str | None = None,
                 environment: Mapping[str, str] | None = None,
                 bind_address: str = "127.0.0.1", log_to_stdout: bool = False) -> None:
        """``environment``: variables for this server's processes over the inherited ones (e.g.
        ``VLLM_CPU_OMP_THREADS_BIND`` to pin its engines to cores of their own).
        ``bind_address``: where its ports listen (a node in a container: ``0.0.0.0``; loopback
        answers either way). ``log_to_stdout``: its log goes to our standard output (a
        container's log) rather than a file."""
        self.model_repository = model_repository
        self.bind_address = bind_address
        self.log_to_stdout = log_to_stdout
        self.extra_environment = dict(environment or {})
        # Checked now, so a bad key fails here rather than as tritonserver's exit code later.
        self.repository_key = (None if repository_key is None
                               else restricted_api.check_key(repository_key))
        self.ports = ports or TritonPorts()
        # Ports free_port() chose are free when chosen, not when tritonserver binds them: start()
        # chooses again if another process took one meanwhile. Ports a caller gave never change.
        self._ports_chosen = ports is None
        self._given_log_path = log_path
        self.extra_args = extra_args or []
        self.runtime = runtime or locate()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        """The log the caller named, else one named after the HTTP port it has now (a start
        that chose new ports logs under the new name, the one a reader looks for)."""
        return self._given_log_path or CACHE_DIR / "logs" / f"tritonserver-{self.ports.http}.log"

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.ports.http}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.ports.grpc}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.metrics}/metrics"

    def command(self) -> list[str]:
        return [
            str(self.runtime.binary),
            f"--model-repository={self.model_repository}",
            "--model-control-mode=explicit",
            f"--backend-directory={self.runtime.backends_dir}",
            f"--cache-directory={self.runtime.cache_dir}",
            f"--http-address={self.bind_address}",
            f"--http-port={self.ports.http}",
            f"--grpc-address={self.bind_address}",
            f"--grpc-port={self.ports.grpc}",
            f"--metrics-address={self.bind_address}",
            f"--metrics-port={self.ports.metrics}",
            "--strict-readiness=true",
            "--exit-timeout-secs=10",
            # Auto-complete costs ~1 s per load and our configs are complete.
            "--disable-auto-complete-config",
            "--allow-gpu-metrics=false",
            "--pinned-memory-pool-byte-size=0",
            *(restricted_api.server_flags(self.repository_key)
              if self.repository_key is not None else []),
            *self.extra_args,
        ]

    def environment(self) -> dict[str, str]:
        env = self.runtime.environment()
        for key, value in ENGINE_ENVIRONMENT.items():
            env.setdefault(key, value)
        env.setdefault("LLM_MODELS_DIR", str(CACHE_DIR / "models"))
        # Never one inherited from our own environment: a node without a key takes no control.
        env.pop(REPOSITORY_KEY_VARIABLE, None)
        if self.repository_key is not None:
            env[REPOSITORY_KEY_VARIABLE] = self.repository_key
        env.update(self.extra_environment)
        return env

    def start(self, timeout: float = 60.0) -> None:
        tries = 3 if self._ports_chosen and not self.log_to_stdout else 1
        for attempt in range(1, tries + 1):
            logged = self.log_path.stat().st_size if self.log_path.exists() else 0
            try:
                self._start_once(timeout)
                return
            except RuntimeError:
                if attempt == tries or not self._port_taken_since(logged):
                    raise
                self.ports = TritonPorts()

    def _port_taken_since(self, offset: int) -> bool:
        """Whether tritonserver logged, past ``offset``, that a port was already in use."""
        with self.log_path.open("rb") as log:
            log.seek(offset)
            return b"already in use" in log.read()

    def _start_once(self, timeout: float) -> None:
        if self.log_to_stdout:
            log_file = None
        else:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            log_file = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.command(), stdout=log_file, stderr=subprocess.STDOUT, env=self.environment(),
            # Its own session, so a terminal's Ctrl-C reaches it only through us.
            start_new_session=True,
        )
        if log_file is not None:
            log_file.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"tritonserver exited with {self.process.returncode}; see {self._log_name}"
                )
            if self.is_live():
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"tritonserver was not live after {timeout:.0f} s; see {self._log_name}")

    @property
    def _log_name(self) -> str:
        return "its log above" if self.log_to_stdout else str(self.log_path)

    def is_live(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.http_url}/v2/health/live", timeout=1) as resp:
                status: int = resp.status
                return status == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM (Triton unloads models, our backend drains), then SIGKILL after ``timeout``."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(timeout=10)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
