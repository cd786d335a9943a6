"""The verbs of the fake API server on stored objects, independent of HTTP."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tests.fakeapi import apply as ssa
from tests.fakeapi import deletion, kinds, pods, priority, workloads
from tests.fakeapi import patch as patches
from tests.fakeapi.errors import (
    ApiError,
    already_exists,
    bad_request,
    invalid,
    not_found,
    stale,
)
from tests.fakeapi.objects import (
    Ref,
    check_body,
    check_meta,
    format_time,
    paginate,
    parse_patch,
    sort_key,
    spec_part,
    success_status,
)
from tests.fakeapi.resources import Registry, ResourceType, crd_to_type
from tests.fakeapi.schema import prune
from tests.fakeapi.selectors import field_matcher, label_matcher
from tests.fakeapi.store import DELETE, Delete, Obj, Store, clone

_SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_KEPT_META = (
    "uid",
    "creationTimestamp",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)


class Api:
    """get, list, create, replace, patch, delete and bind, with a real API server's rules."""

    def __init__(self, registry: Registry, store: Store, clock: Callable[[], float]) -> None:
        self.registry = registry
        self.store = store
        self.clock = clock
        self._rand = random.Random()

    def now(self) -> str:
        return format_time(self.clock())

    def namespace_type(self) -> ResourceType:
        return self.registry.resolve("namespaces")

    @staticmethod
    def present(ref: Ref, obj: Obj) -> Obj:
        """The object as the requested version shows it."""
        return dict(obj, apiVersion=ref.rt.api_version(ref.version), kind=ref.rt.kind)

    def get(self, ref: Ref) -> Obj:
        obj = self.store.get(ref.rt, ref.namespace, ref.name)
        if obj is None:
            raise not_found(ref.rt, ref.name)
        return self.present(ref, obj)

    def list(self, ref: Ref, query: Mapping[str, str]) -> Obj:
        labels = label_matcher(query.get("labelSelector"))
        fields = field_matcher(query.get("fieldSelector"), ref.rt)
        objects, rv = self.store.snapshot(ref.rt, ref.namespace or None, fields.equalities)
        items = [o for o in objects if labels(o) and fields(o)]
        items.sort(key=sort_key)
        meta: Obj = {"resourceVersion": str(rv)}
        items, meta = paginate(items, meta, query, rv)
        if ref.rt.builtin:
            shown = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in items]
        else:
            shown = [self.present(ref, o) for o in items]
        kind = ref.rt.list_kind
        return {
            "kind": kind,
            "apiVersion": ref.rt.api_version(ref.version),
            "metadata": meta,
            "items": shown,
        }

    def priority_classes(self) -> Sequence[Obj]:
        """The stored PriorityClasses (what the Priority admission plugin's lister sees)."""
        objects, _ = self.store.snapshot(self.registry.resolve("priorityclasses"), None)
        return objects

    def _new_object(self, ref: Ref, body: Obj) -> Obj:
        obj = check_body(ref, body)
        meta = obj.setdefault("metadata", {})
        if ref.rt.builtin and ref.rt.group == "" and ref.rt.plural == "pods":
            priority.admit_pod(ref.rt, obj, self.priority_classes())
            workload_api = self.registry.lookup(
                workloads.GROUP, workloads.V1_35, workloads.WORKLOADS
            )
            workloads.admit_workload_ref(ref.rt, obj, served=workload_api is not None)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise invalid(
                    ref.rt, "", ["metadata.name: Required value: name or generateName is required"]
                )
            suffix = "".join(self._rand.choice(_SUFFIX_CHARS) for _ in range(5))
            meta["name"] = meta["generateName"] + suffix
        check_meta(ref.rt, meta)
        for key in (
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ):
            meta.pop(key, None)
        if ref.rt.namespaced:
            meta["namespace"] = ref.namespace
        else:
            meta.pop("namespace", None)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=self.now(), generation=1)
        obj["apiVersion"], obj["kind"] = ref.rt.api_version(ref.version), ref.rt.kind
        if ref.rt.status_subresource:
            obj.pop("status", None)
        return kinds.prepare_create(ref.rt, self._conform(ref, obj), self.priority_classes)

    @staticmethod
    def _conform(ref: Ref, obj: Obj) -> Obj:
        """A custom resource pruned to its CRD's schema; 422 when it breaks the schema."""
        if ref.rt.builtin:
            return obj
        pruned, problems = prune(obj, ref.rt.schemas.get(ref.version))
        if problems:
            raise invalid(ref.rt, obj["metadata"].get("name", ""), problems)
        return pruned

    def _tracked(self, old: Obj, new: Obj | Delete, manager: str) -> Obj | Delete:
        """`new` with `manager` recorded as the Update owner of what it changed."""
        if manager and isinstance(new, dict):
            ssa.record_update(old, new, manager, self.now())
        return new

    def _check_namespace(self, ref: Ref) -> None:
        if not ref.rt.namespaced:
            return
        ns = self.store.get(self.namespace_type(), "", ref.namespace)
        if ns is None:
            raise ApiError(
                404,
                f'namespaces "{ref.namespace}" not found',
                details={"name": ref.namespace, "kind": "namespaces"},
            )
        if ns["metadata"].get("deletionTimestamp"):
            raise ApiError(
                403,
                f"unable to create new content in namespace {ref.namespace} because it is being "
                "terminated",
            )

    def create(self, ref: Ref, body: Any, manager: str = "") -> tuple[int, Obj]:
        if ref.sub == "binding":
            return self.bind(ref, body)
        self._check_namespace(ref)
        obj = self._new_object(ref, body)
        if manager:
            ssa.record_update(None, obj, manager, self.now())
        name = obj["metadata"]["name"]

        def change(old: Obj | None) -> Obj:
            if old is not None:
                raise already_exists(ref.rt, name)
            return obj

        stored = self.store.mutate(ref.rt, ref.namespace, name, change)
        assert stored is not None
        self._after_write(ref.rt, stored)
        return 201, self.present(ref, stored)

    def _updated(self, ref: Ref, old: Obj, new: Obj) -> Obj | Delete:
        """`new` (a fresh dict) with what an update may not change carried over from `old`."""
        meta = new.setdefault("metadata", {})
        if meta.get("name", ref.name) != ref.name:
            raise bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL "
                f"({ref.name})"
            )
        rv = meta.get("resourceVersion")
        if rv not in (None, "") and rv != old["metadata"]["resourceVersion"]:
            raise stale(ref.rt, ref.name)
        meta["name"] = ref.name
        if ref.rt.namespaced:
            meta["namespace"] = ref.namespace
        for key in _KEPT_META:
            if key in old["metadata"]:
                meta[key] = old["metadata"][key]
            else:
                meta.pop(key, None)
        if "managedFields" not in meta and "managedFields" in old["metadata"]:
            meta["managedFields"] = old["metadata"]["managedFields"]
        meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        new["apiVersion"], new["kind"] = old.get("apiVersion"), ref.rt.kind
        check_meta(ref.rt, meta)
        new = self._conform(
            ref, kinds.prepare_update(ref.rt, old, new, ref.sub, self.priority_classes)
        )
        if spec_part(new) != spec_part(old):
            new["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1
        if kinds.finalized(new):
            return DELETE
        return new

    def replace(self, ref: Ref, body: Any, manager: str = "") -> tuple[int, Obj]:
        new = check_body(ref, body)

        def change(old: Obj | None) -> Obj | Delete:
            if old is None:
                raise not_found(ref.rt, ref.name)
            return self._tracked(old, self._updated(ref, old, clone(new)), manager)

        stored = self.store.mutate(ref.rt, ref.namespace, ref.name, change)
        assert stored is not None
        self._after_write(ref.rt, stored)
        return 200, self.present(ref, stored)

    def patch(
        self,
        ref: Ref,
        raw: bytes,
        content_type: str,
        query: Mapping[str, str],
        manager: str = "",
    ) -> tuple[int, Obj]:
        """PATCH in any content type; apply needs `fieldManager` in `query`."""
        kind = content_type.split(";", 1)[0].strip().lower()
        body = parse_patch(raw, kind, ref.rt)
        if kind == patches.APPLY_PATCH:
            return self._apply(ref, body, query)
        if not isinstance(body, dict | list) or (
            kind != patches.JSON_PATCH and not isinstance(body, dict)
        ):
            raise bad_request("the patch body has the wrong shape for its content type")

        def change(old: Obj | None) -> Obj | Delete:
            if old is None:
                raise not_found(ref.rt, ref.name)
            current = self.present(ref, old)
            if kind == patches.JSON_PATCH:
                patched = patches.json_patch(current, body)
            elif kind == patches.MERGE_PATCH:
                patched = patches.merge_patch(current, body)
            else:
                patched = patches.strategic_merge(current, body)
            if not isinstance(patched, dict):
                raise bad_request("the patched object is not a JSON object")
            return self._tracked(old, self._updated(ref, old, patched), manager)

        stored = self.store.mutate(ref.rt, ref.namespace, ref.name, change)
        assert stored is not None
        self._after_write(ref.rt, stored)
        return 200, self.present(ref, stored)

    def _apply(self, ref: Ref, config: Any, query: Mapping[str, str]) -> tuple[int, Obj]:
        manager = query.get("fieldManager", "")
        if not manager:
            raise bad_request("PATCH, fieldManager is required for apply requests")
        if not isinstance(config, dict) or not config.get("apiVersion") or not config.get("kind"):
            raise bad_request("apply patch must be an object with apiVersion and kind")
        if (config.get("metadata") or {}).get("name", ref.name) != ref.name:
            raise bad_request("the name of the object does not match the name on the URL")
        force = query.get("force", "").lower() == "true"
        created = []

        def change(old: Obj | None) -> Obj | Delete:
            if old is None:
                self._check_namespace(ref)
                applied = ssa.apply(None, config, manager, force, self.now())
                applied["metadata"]["name"] = ref.name
                created.append(True)
                return self._new_object(ref, applied)
            applied = ssa.apply(self.present(ref, old), config, manager, force, self.now())
            return self._updated(ref, old, applied)

        stored = self.store.mutate(ref.rt, ref.namespace, ref.name, change)
        assert stored is not None
        self._after_write(ref.rt, stored)
        return (201 if created else 200), self.present(ref, stored)

    def bind(self, ref: Ref, body: Any) -> tuple[int, Obj]:
        """`pods/binding`: 201 with a Status body, not the Binding (kubernetes-api-notes.md, 1)."""
        if not isinstance(body, dict):
            raise bad_request("the request body must be a Binding object")
        bound_name = (body.get("metadata") or {}).get("name", ref.name)
        if bound_name != ref.name:
            raise bad_request(
                f"the name of the binding ({bound_name}) does not match the pod ({ref.name})"
            )
        now = self.now()
        self.store.mutate(
            ref.rt, ref.namespace, ref.name, lambda old: pods.bind(old, body, ref.name, now)
        )
        return 201, success_status(201)

    def _after_write(self, rt: ResourceType, obj: Obj) -> None:
        if (
            rt.builtin
            and rt.plural == "customresourcedefinitions"
            and obj["metadata"].get("deletionTimestamp") is None
        ):
            self.registry.add(crd_to_type(obj))

    def delete(self, ref: Ref, body: Any, query: Mapping[str, str]) -> tuple[int, Obj]:
        return deletion.delete(self, ref, body, query)

    def delete_collection(self, ref: Ref, query: Mapping[str, str]) -> tuple[int, Obj]:
        return deletion.delete_collection(self, ref, query)
