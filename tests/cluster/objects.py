"""Typed access to the kubernetes client's models as the API server returns them.

The client's models declare every field optional (`metadata: V1ObjectMeta | None`, `name: str | None`), since a
request body may leave any out; an object read back from the API server always has its metadata, name, spec and
status. These helpers say so once, with an assert that names the object if one ever lacks it, so the tests read
`name_of(pod)` and `spec_of(pod).node_name` and the type checker knows the types.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from kubernetes.client import V1Container, V1ObjectMeta, V1Pod

_T = TypeVar("_T", covariant=True)


class _HasMetadata(Protocol):
    @property
    def metadata(self) -> V1ObjectMeta | None: ...


class _HasSpec(Protocol[_T]):
    @property
    def spec(self) -> _T | None: ...


class _HasStatus(Protocol[_T]):
    @property
    def status(self) -> _T | None: ...


def meta_of(obj: _HasMetadata) -> V1ObjectMeta:
    """The object's metadata (every object the API server returns has it)."""
    assert obj.metadata is not None, f"a {type(obj).__name__} without metadata"
    return obj.metadata


def name_of(obj: _HasMetadata) -> str:
    """The object's name."""
    value = meta_of(obj).name
    assert value is not None, f"a {type(obj).__name__} without a name"
    return value


def namespace_of(obj: _HasMetadata) -> str:
    """The namespaced object's namespace."""
    value = meta_of(obj).namespace
    assert value is not None, f"{type(obj).__name__} {name_of(obj)} without a namespace"
    return value


def labels_of(obj: _HasMetadata) -> dict[str, str]:
    """The object's labels ({} for none)."""
    return meta_of(obj).labels or {}


def spec_of(obj: _HasSpec[_T]) -> _T:
    """The object's spec (the API server fills it for every kind that has one)."""
    value = obj.spec
    assert value is not None, f"a {type(obj).__name__} without a spec"
    return value


def status_of(obj: _HasStatus[_T]) -> _T:
    """The object's status (the API server fills it for every kind that has one)."""
    value = obj.status
    assert value is not None, f"a {type(obj).__name__} without a status"
    return value


def node_of(pod: V1Pod) -> str:
    """The node the pod is bound to (the pods asked for are placed ones)."""
    value = spec_of(pod).node_name
    assert value is not None, f"pod {name_of(pod)} is not bound to a node"
    return value


def requests_of(container: V1Container) -> dict[str, str]:
    """The container's resource requests ({} for none)."""
    return (container.resources.requests if container.resources else None) or {}
