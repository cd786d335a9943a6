"""The verbs of the fake API server on stored objects, independent of HTTP."""

from __future__ import annotations

import base64
import json
import random
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml

from tests.fakeapi import apply as ssa
from tests.fakeapi import kinds, pods
from tests.fakeapi import patch as patches
from tests.fakeapi.errors import (
    ApiError,
    already_exists,
    bad_request,
    invalid,
    not_found,
    stale,
    unsupported_media_type,
)
from tests.fakeapi.resources import Registry, ResourceType, crd_to_type
from tests.fakeapi.selectors import field_matcher, label_matcher
from tests.fakeapi.store import DELETE, Delete, Obj, Store, clone

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_KEPT_META = (
    "uid",
    "creationTimestamp",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)


@dataclass(frozen=True, slots=True)
class Ref:
    """What a request addresses: a collection (`name` empty), an object, or a subresource of one."""

    rt: ResourceType
    version: str
    namespace: str = ""
    name: str = ""
    sub: str = ""


def format_time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def success_status(code: int, details: dict[str, Any] | None = None) -> Obj:
    status: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if details is not None:
        status["details"] = details
    status["code"] = code
    return status


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
        items.sort(key=_sort_key)
        meta: Obj = {"resourceVersion": str(rv)}
        items, meta = _paginate(items, meta, query, rv)
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

    def _check_body(self, ref: Ref, body: Any) -> Obj:
        if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
            raise bad_request("the request body must be a JSON object with a metadata object")
        if body.get("kind") not in (None, "", ref.rt.kind):
            raise bad_request(
                f"the kind of the object ({body['kind']}) does not match {ref.rt.kind}"
            )
        body_ns = (body.get("metadata") or {}).get("namespace")
        if ref.rt.namespaced and body_ns not in (None, "", ref.namespace):
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        return clone(body)

    def _check_meta(self, rt: ResourceType, meta: Obj) -> None:
        name = str(meta.get("name", ""))
        problems = []
        if len(name) > 253 or not _SUBDOMAIN.match(name):
            problems.append(
                f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain must "
                "consist of lower case alphanumeric characters, '-' or '.'"
            )
        for value in (meta.get("labels") or {}).values():
            if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
                problems.append(f"metadata.labels: Invalid value: {value!r}: a valid label value")
        for key, value in (meta.get("annotations") or {}).items():
            if not isinstance(value, str):
                problems.append(f"metadata.annotations: Invalid value: {key}: must be a string")
        if problems:
            raise invalid(rt, name, problems)

    def _new_object(self, ref: Ref, body: Obj) -> Obj:
        obj = self._check_body(ref, body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise invalid(
                    ref.rt, "", ["metadata.name: Required value: name or generateName is required"]
                )
            suffix = "".join(self._rand.choice(_SUFFIX_CHARS) for _ in range(5))
            meta["name"] = meta["generateName"] + suffix
        self._check_meta(ref.rt, meta)
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
        return kinds.prepare_create(ref.rt, obj)

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

    def create(self, ref: Ref, body: Any) -> tuple[int, Obj]:
        if ref.sub == "binding":
            return self.bind(ref, body)
        self._check_namespace(ref)
        obj = self._new_object(ref, body)
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
        self._check_meta(ref.rt, meta)
        new = kinds.prepare_update(ref.rt, old, new, ref.sub)
        if _spec_part(new) != _spec_part(old):
            new["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1
        if kinds.finalized(new):
            return DELETE
        return new

    def replace(self, ref: Ref, body: Any) -> tuple[int, Obj]:
        new = self._check_body(ref, body)

        def change(old: Obj | None) -> Obj | Delete:
            if old is None:
                raise not_found(ref.rt, ref.name)
            return self._updated(ref, old, clone(new))

        stored = self.store.mutate(ref.rt, ref.namespace, ref.name, change)
        assert stored is not None
        self._after_write(ref.rt, stored)
        return 200, self.present(ref, stored)

    def patch(
        self, ref: Ref, raw: bytes, content_type: str, query: Mapping[str, str]
    ) -> tuple[int, Obj]:
        kind = content_type.split(";", 1)[0].strip().lower()
        body = _parse_patch(raw, kind, ref.rt)
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
            return self._updated(ref, old, patched)

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

    def delete(self, ref: Ref, body: Any, query: Mapping[str, str]) -> tuple[int, Obj]:
        options = body if isinstance(body, dict) else {}
        grace_text = query.get("gracePeriodSeconds")
        grace = (
            int(grace_text) if grace_text not in (None, "") else options.get("gracePeriodSeconds")
        )
        pre = options.get("preconditions") or {}

        def change(old: Obj | None) -> Obj | Delete:
            if old is None:
                raise not_found(ref.rt, ref.name)
            for key in ("uid", "resourceVersion"):
                if pre.get(key) and pre[key] != old["metadata"].get(key):
                    raise ApiError(
                        409,
                        f"Precondition failed: {key} in precondition: {pre[key]}, {key} in object "
                        f"meta: {old['metadata'].get(key)}",
                    )
            return kinds.delete(ref.rt, old, grace, self.clock(), format_time)

        before = self.store.get(ref.rt, ref.namespace, ref.name)
        stored = self.store.mutate(ref.rt, ref.namespace, ref.name, change)
        assert stored is not None
        after = self.store.get(ref.rt, ref.namespace, ref.name)
        if after is not None:
            return 200, self.present(ref, after)
        self._after_delete(ref.rt, stored)
        if ref.rt.plural == "pods" or not ref.rt.builtin:
            return 200, self.present(ref, stored)
        uid = (before or stored)["metadata"].get("uid")
        details = {"name": ref.name, "kind": ref.rt.plural, "uid": uid}
        if ref.rt.group:
            details["group"] = ref.rt.group
        return 200, success_status(200, details)

    def delete_collection(self, ref: Ref, query: Mapping[str, str]) -> tuple[int, Obj]:
        listed = self.list(ref, query)
        for item in listed["items"]:
            meta = item["metadata"]
            one = Ref(ref.rt, ref.version, meta.get("namespace", ""), meta["name"])
            try:
                self.delete(one, None, query)
            except ApiError as exc:
                if exc.code != 404:
                    raise
        return 200, success_status(200)

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

    def _after_delete(self, rt: ResourceType, obj: Obj) -> None:
        if rt.builtin and rt.plural == "customresourcedefinitions":
            gone = crd_to_type(obj)
            self.registry.remove(gone.group, gone.plural)
            self.store.drop(gone)
        elif rt.builtin and rt.group == "" and rt.plural == "namespaces":
            self._purge_namespace(obj["metadata"]["name"])

    def _purge_namespace(self, ns: str) -> None:
        """Namespace deletion, simplified: every object in it goes at once."""
        for rt in self.registry.all():
            if not rt.namespaced:
                continue
            objects, _ = self.store.snapshot(rt, ns)
            for obj in objects:
                self.store.mutate(
                    rt, ns, obj["metadata"]["name"], lambda old: DELETE if old else None
                )


def _sort_key(obj: Obj) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


def _spec_part(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _paginate(
    items: list[Obj], meta: Obj, query: Mapping[str, str], rv: int
) -> tuple[list[Obj], Obj]:
    token = query.get("continue")
    if token:
        try:
            start = tuple(json.loads(base64.urlsafe_b64decode(token.encode())))
        except ValueError as exc:
            raise bad_request(f"continue key is not valid: {exc}") from exc
        items = [o for o in items if _sort_key(o) > start]
    limit = int(query.get("limit") or 0)
    if limit > 0 and len(items) > limit:
        last = _sort_key(items[limit - 1])
        meta["continue"] = base64.urlsafe_b64encode(json.dumps(list(last)).encode()).decode()
        meta["remainingItemCount"] = len(items) - limit
        items = items[:limit]
    return items, meta


def _parse_patch(raw: bytes, kind: str, rt: ResourceType) -> Any:
    accepted = [patches.JSON_PATCH, patches.MERGE_PATCH, patches.APPLY_PATCH]
    if rt.builtin:
        accepted.insert(2, patches.STRATEGIC_PATCH)
    if kind not in accepted:
        raise unsupported_media_type(kind, accepted)
    try:
        if kind == patches.APPLY_PATCH:
            return yaml.safe_load(raw.decode() or "null")
        return json.loads(raw or b"null")
    except (ValueError, yaml.YAMLError) as exc:
        raise bad_request(f"error decoding patch: {exc}") from exc
