"""The reconciler's plan for the adapters of one deployment: a pure function from the adapters
wanted there and the ones its engine lists to actions. No I/O here."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from control_plane.adapters.orm import AdapterState


@dataclass(frozen=True)
class WantedAdapter:
    """One adapter wanted on the deployment, as the database says."""

    row_id: int
    name: str
    version: int  # the version it is registered under
    state: AdapterState


@dataclass(frozen=True)
class LoadAdapter:
    row_id: int
    name: str
    reason: str


@dataclass(frozen=True)
class UnloadAdapter:
    row_id: int
    name: str


@dataclass(frozen=True)
class MarkAdapterLoaded:
    row_id: int
    name: str


@dataclass(frozen=True)
class MarkAdapterFailed:
    row_id: int
    name: str
    reason: str


@dataclass(frozen=True)
class ForgetAdapter:
    row_id: int
    name: str


@dataclass(frozen=True)
class CarryAdapter:
    """Want the serving version's adapter of the same name instead, and load it."""

    row_id: int
    name: str
    to_version: int


AdapterAction = (LoadAdapter | UnloadAdapter | MarkAdapterLoaded | MarkAdapterFailed |
                 ForgetAdapter | CarryAdapter)


@dataclass(frozen=True)
class AdapterPlan:
    actions: tuple[AdapterAction, ...]
    # Adapters left alone, and why: shown so a plan explains itself.
    skipped: tuple[tuple[str, str], ...] = ()


def plan_adapters(serving_version: int, wanted: Sequence[WantedAdapter],
                  loaded: Collection[str], busy: Iterable[int] = (),
                  registered: Collection[str] = ()) -> AdapterPlan:
    """What to do for one READY deployment serving ``serving_version``.

    ``loaded`` holds the names its engine lists; ``busy`` the wanted adapters an operation is
    working on right now, which the plan leaves to it; ``registered`` the names of the adapters
    registered under the serving version, which carry over a swap those of the same name wanted
    from the version before. Adapters the engine holds that nobody wants here are left alone, as
    models on a node that are not ours are."""
    busy = set(busy)
    actions: list[AdapterAction] = []
    skipped: list[tuple[str, str]] = []
    for adapter in wanted:
        there = adapter.name in loaded
        if adapter.row_id in busy:
            skipped.append((adapter.name, "an operation is working on it"))
        elif adapter.state == AdapterState.UNLOADING:
            actions.append(UnloadAdapter(adapter.row_id, adapter.name) if there
                           else ForgetAdapter(adapter.row_id, adapter.name))
        elif adapter.version != serving_version:
            if adapter.name in registered:
                # A swap moved the deployment to a version that has an adapter of this name:
                # clients asking for it get the new version's.
                actions.append(CarryAdapter(adapter.row_id, adapter.name, serving_version))
            elif adapter.state != AdapterState.FAILED:
                # A swap moved the deployment to another version: its new engine started
                # without the old version's adapters, and they were not made for it.
                actions.append(MarkAdapterFailed(
                    adapter.row_id, adapter.name,
                    f"the deployment now serves version {serving_version}, and this adapter is "
                    f"registered under version {adapter.version}: register it under version "
                    f"{serving_version} and it is carried over"))
        elif there:
            if adapter.state != AdapterState.LOADED:
                actions.append(MarkAdapterLoaded(adapter.row_id, adapter.name))
        elif adapter.state == AdapterState.FAILED:
            # A load that failed is not retried in a loop; load it again through the API.
            skipped.append((adapter.name, "its last load failed; load it again"))
        else:
            actions.append(LoadAdapter(adapter.row_id, adapter.name,
                                       "not loaded in the engine (the node or the model "
                                       "restarted?)" if adapter.state == AdapterState.LOADED
                                       else "a load that did not finish"))
    return AdapterPlan(tuple(actions), tuple(skipped))
