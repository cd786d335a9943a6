"""DELETE: preconditions, graceful pod deletion, finalizers, namespace purge and garbage collection.

Garbage collection is synchronous here (a real cluster's collector runs moments later): when an
object goes, every object naming it in `ownerReferences` loses that reference and, with no owner
left, is deleted the way a DELETE would (a bound pod goes Terminating). `propagationPolicy=Orphan`
only removes the references.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tests.fakeapi import kinds
from tests.fakeapi.errors import ApiError, not_found
from tests.fakeapi.objects import Ref, format_time, success_status
from tests.fakeapi.resources import ResourceType, crd_to_type
from tests.fakeapi.store import DELETE, Delete, Obj, clone

if TYPE_CHECKING:
    from tests.fakeapi.api import Api


def _grace(body: Mapping[str, Any], query: Mapping[str, str]) -> int | None:
    text = query.get("gracePeriodSeconds")
    if text not in (None, ""):
        return int(str(text))
    value = body.get("gracePeriodSeconds")
    return int(value) if value is not None else None


def check_preconditions(old: Obj, pre: Mapping[str, Any]) -> None:
    for key in ("uid", "resourceVersion"):
        if pre.get(key) and pre[key] != old["metadata"].get(key):
            raise ApiError(
                409,
                f"Precondition failed: {key} in precondition: {pre[key]}, {key} in object meta: "
                f"{old['metadata'].get(key)}",
            )


def delete(api: Api, ref: Ref, body: Any, query: Mapping[str, str]) -> tuple[int, Obj]:
    """200 with the object (pods, custom resources, or anything left Terminating) or a Status."""
    options = body if isinstance(body, dict) else {}
    grace = _grace(options, query)
    orphan = (query.get("propagationPolicy") or options.get("propagationPolicy")) == "Orphan"
    removed: list[bool] = []

    def change(old: Obj | None) -> Obj | Delete:
        if old is None:
            raise not_found(ref.rt, ref.name)
        check_preconditions(old, options.get("preconditions") or {})
        result = kinds.delete(ref.rt, old, grace, api.clock(), format_time)
        removed.append(isinstance(result, Delete))
        return result

    stored = api.store.mutate(ref.rt, ref.namespace, ref.name, change)
    assert stored is not None
    if not removed[-1]:
        return 200, api.present(ref, stored)
    after_delete(api, ref.rt, stored, orphan)
    if ref.rt.plural == "pods" or not ref.rt.builtin:
        return 200, api.present(ref, stored)
    details = {"name": ref.name, "kind": ref.rt.plural, "uid": stored["metadata"].get("uid")}
    if ref.rt.group:
        details["group"] = ref.rt.group
    return 200, success_status(200, details)


def delete_collection(api: Api, ref: Ref, query: Mapping[str, str]) -> tuple[int, Obj]:
    if ref.rt.builtin and ref.rt.plural == "priorityclasses":
        raise NotImplementedError(
            "fake API server: deletecollection of priorityclasses (which a real server answers by "
            "deleting the system classes and re-creating them) is not modelled"
        )
    listed = api.list(ref, query)
    for item in listed["items"]:
        meta = item["metadata"]
        one = Ref(ref.rt, ref.version, meta.get("namespace", ""), meta["name"])
        try:
            delete(api, one, None, query)
        except ApiError as exc:
            if exc.code != 404:
                raise
    return 200, success_status(200)


def after_delete(api: Api, rt: ResourceType, obj: Obj, orphan: bool = False) -> None:
    """What follows an object's removal: CRD and namespace contents go, dependents are collected."""
    if rt.builtin and rt.plural == "customresourcedefinitions":
        gone = crd_to_type(obj)
        api.registry.remove(gone.group, gone.plural)
        api.store.drop(gone)
    elif rt.builtin and rt.group == "" and rt.plural == "namespaces":
        purge_namespace(api, obj["metadata"]["name"])
    uid = obj["metadata"].get("uid")
    if uid:
        collect_garbage(api, uid, orphan)


def purge_namespace(api: Api, ns: str) -> None:
    """Namespace deletion, simplified: every object in it goes at once."""
    for rt in api.registry.all():
        if not rt.namespaced:
            continue
        objects, _ = api.store.snapshot(rt, ns)
        for obj in objects:
            gone = api.store.mutate(
                rt, ns, obj["metadata"]["name"], lambda o: DELETE if o else None
            )
            if gone is not None and gone["metadata"].get("uid"):
                collect_garbage(api, gone["metadata"]["uid"], orphan=False)


def collect_garbage(api: Api, owner_uid: str, orphan: bool) -> None:
    for qualified, ns, name in api.store.dependents(owner_uid):
        try:
            rt = api.registry.resolve(qualified)
        except KeyError:
            continue
        removed: list[bool] = []

        def change(old: Obj | None, rt: ResourceType = rt, removed: list[bool] = removed) -> Any:
            if old is None:
                return None
            refs = old["metadata"].get("ownerReferences") or []
            left = [r for r in refs if r.get("uid") != owner_uid]
            if left or orphan:
                new = clone(old)
                new["metadata"]["ownerReferences"] = left
                return new
            result = kinds.delete(rt, old, None, api.clock(), format_time)
            removed.append(isinstance(result, Delete))
            return result

        gone = api.store.mutate(rt, ns, name, change)
        if removed and removed[-1] and gone is not None:
            after_delete(api, rt, gone)
