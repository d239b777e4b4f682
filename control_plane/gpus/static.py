"""GPU readings written in a file, for machines without GPUs, demos and simulated fleets.

The file is JSON (``.json``) or YAML (``.yaml``, ``.yml``)::

    nodes:
      gpu-node-a:
        - {index: 0, uuid: GPU-a0, name: "NVIDIA A100-SXM4-80GB", memory_total_mib: 81920,
           memory_used_mib: 0, utilization_percent: 0, temperature_c: 30, health: ok}

Memory is ``memory_total_mib``/``memory_used_mib`` or ``memory_total_bytes``/``memory_used_bytes``;
used defaults to 0 and free is total - used. ``health`` is ok (default), unhealthy or lost; a lost
GPU may leave its memory out. ``name``, ``utilization_percent``, ``temperature_c`` and ``detail``
are optional.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from control_plane.gpus.readings import MIB, GpuHealth, GpuReading, InventoryUnavailable

_FIELDS = frozenset({
    "index", "uuid", "name", "memory_total_mib", "memory_total_bytes", "memory_used_mib",
    "memory_used_bytes", "utilization_percent", "temperature_c", "health", "detail",
})


class StaticInventory:
    """One node's GPUs as a file lists them; the file is read again whenever it changes."""

    def __init__(self, path: Path, node: str) -> None:
        self.path = path
        self.node = node
        self._lock = threading.Lock()
        self._loaded_version: tuple[int, int] | None = None
        self._fleet: dict[str, list[GpuReading]] = {}

    def snapshot(self) -> list[GpuReading]:
        """The node's GPUs as the file lists them now, ordered by index."""
        with self._lock:
            try:
                stat = self.path.stat()
            except OSError as error:
                raise InventoryUnavailable(
                    f"static GPU inventory {self.path} (node {self.node!r}) cannot be read: "
                    f"{error.strerror or error}; create it or fix the path") from error
            # Size as well as mtime: two edits within the file system's mtime resolution differ
            # in size more often than not.
            version = (stat.st_mtime_ns, stat.st_size)
            if version != self._loaded_version:
                self._fleet = load_static_fleet(self.path)
                self._loaded_version = version
            fleet = self._fleet
        if self.node not in fleet:
            raise InventoryUnavailable(
                f"static GPU inventory {self.path} has no node {self.node!r} (it lists "
                f"{', '.join(sorted(fleet)) or 'none'}); add it under `nodes:`")
        return list(fleet[self.node])


def load_static_fleet(path: Path) -> dict[str, list[GpuReading]]:
    """Every node's GPUs in an inventory file, each node's ordered by index."""
    document = _parse(path)
    nodes = document.get("nodes") if isinstance(document, dict) else None
    if not isinstance(nodes, dict):
        raise InventoryUnavailable(
            f"static GPU inventory {path}: expected a mapping `nodes:` of node name to a list of "
            f"GPUs at the top level")
    fleet: dict[str, list[GpuReading]] = {}
    for node, entries in nodes.items():
        if not isinstance(entries, list):
            raise InventoryUnavailable(
                f"static GPU inventory {path}, node {node!r}: expected a list of GPUs, got "
                f"{type(entries).__name__}")
        gpus = [_reading(path, str(node), position, entry)
                for position, entry in enumerate(entries)]
        _check_unique(path, str(node), gpus)
        fleet[str(node)] = sorted(gpus, key=lambda gpu: gpu.index)
    return fleet


def _parse(path: Path) -> Any:
    suffix = path.suffix.lower()
    if suffix not in (".json", ".yaml", ".yml"):
        raise InventoryUnavailable(
            f"static GPU inventory {path}: unknown format {suffix or '(no suffix)'!r}; name it "
            f"*.json, *.yaml or *.yml")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise InventoryUnavailable(
            f"static GPU inventory {path} cannot be read: {error.strerror or error}; create it or "
            f"fix the path") from error
    try:
        return json.loads(text) if suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise InventoryUnavailable(
            f"static GPU inventory {path} is not valid {suffix[1:].upper()}: {error}") from error


class _BadField(Exception):
    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"field {field!r} {problem}")


def _reading(path: Path, node: str, position: int, entry: object) -> GpuReading:
    try:
        return _reading_of(entry)
    except _BadField as error:
        raise InventoryUnavailable(
            f"static GPU inventory {path}, node {node!r}, GPU entry {position}: {error}") from None


def _reading_of(entry: object) -> GpuReading:
    if not isinstance(entry, dict):
        raise _BadField("(entry)", f"must be a mapping of fields, not {type(entry).__name__}")
    unknown = sorted(str(key) for key in set(entry) - _FIELDS)
    if unknown:
        raise _BadField(unknown[0],
                        f"is not known; the fields are {', '.join(sorted(_FIELDS))}")
    # Identity first, so an entry missing everything is reported by what names it.
    index, uuid = _index(entry), _text(entry, "uuid", required=True)
    try:
        health = GpuHealth(entry.get("health", GpuHealth.OK.value))
    except ValueError:
        raise _BadField("health", f"is {entry['health']!r}; use ok, unhealthy or lost") from None
    total = _bytes(entry, "memory_total", required=health is not GpuHealth.LOST)
    used = _bytes(entry, "memory_used", required=False)
    if total is None:
        used = None
    elif used is None:
        used = 0
    elif used > total:
        given = "memory_used_mib" if "memory_used_mib" in entry else "memory_used_bytes"
        raise _BadField(given, f"({used} bytes) exceeds the total ({total} bytes)")
    return GpuReading(
        index=index,
        uuid=uuid,
        name=_text(entry, "name", required=False),
        memory_total_bytes=total,
        memory_used_bytes=used,
        memory_free_bytes=None if total is None or used is None else total - used,
        utilization_percent=_number(entry, "utilization_percent", 0, 100),
        temperature_c=_number(entry, "temperature_c", -273, 200),
        health=health,
        detail=_text(entry, "detail", required=False),
    )


def _bytes(entry: Mapping[str, Any], stem: str, *, required: bool) -> int | None:
    mib = _integer(entry, f"{stem}_mib")
    in_bytes = _integer(entry, f"{stem}_bytes")
    if mib is not None and in_bytes is not None:
        raise _BadField(f"{stem}_mib", f"and {stem}_bytes are both given; give one")
    if mib is None and in_bytes is None and required:
        raise _BadField(f"{stem}_mib", f"is missing; give it (or {stem}_bytes)")
    return mib * MIB if mib is not None else in_bytes


def _index(entry: Mapping[str, Any]) -> int:
    index = _integer(entry, "index")
    if index is None:
        raise _BadField("index", "is missing")
    return index


def _integer(entry: Mapping[str, Any], field: str) -> int | None:
    value = entry.get(field)
    if value is None:
        return None
    # bool is an int to Python, but `true` is never a GPU index or a memory size.
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _BadField(field, f"is {value!r}; it must be a whole number, 0 or more")
    return value


def _number(entry: Mapping[str, Any], field: str, low: float, high: float) -> float | None:
    value = entry.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise _BadField(field, f"is {value!r}; it must be a number from {low} to {high}")
    return float(value)


def _text(entry: Mapping[str, Any], field: str, *, required: bool) -> str:
    value = entry.get(field)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise _BadField(field, f"is {value!r}; it must be {'a non-empty' if required else 'a'} "
                               f"string")
    return value


def _check_unique(path: Path, node: str, gpus: list[GpuReading]) -> None:
    for field in ("index", "uuid"):
        seen: set[object] = set()
        for gpu in gpus:
            value = getattr(gpu, field)
            if value in seen:
                raise InventoryUnavailable(
                    f"static GPU inventory {path}, node {node!r}: field {field!r} {value!r} "
                    f"appears twice; each GPU needs its own")
            seen.add(value)
