"""Offline checks the deploy tests share: RBAC tables, CRD schemas, container flags (quantities:
`agent.quantity.parse_quantity`)."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jsonschema  # type: ignore[import-untyped]

Obj = dict[str, Any]

READ = frozenset({"get", "list", "watch"})
WRITE = frozenset({"create", "update", "patch", "delete", "deletecollection"})
ALL_VERBS = READ | WRITE
STATUS_VERBS = frozenset({"get", "update", "patch"})

# (apiGroup, resource) -> the verbs the API server serves for it; the built-in resources gputopo
# might name. CRD-backed resources are added from our CRD manifests (see `crd_resources`).
KNOWN_RESOURCES: dict[tuple[str, str], frozenset[str]] = {
    ("", "pods"): ALL_VERBS,
    ("", "pods/binding"): frozenset({"create"}),
    ("", "pods/status"): STATUS_VERBS,
    ("", "pods/eviction"): frozenset({"create"}),
    ("", "nodes"): ALL_VERBS,
    ("", "nodes/status"): STATUS_VERBS,
    ("", "events"): ALL_VERBS,
    ("", "namespaces"): ALL_VERBS,
    ("", "configmaps"): ALL_VERBS,
    ("", "persistentvolumeclaims"): ALL_VERBS,
    ("", "persistentvolumes"): ALL_VERBS,
    ("", "services"): ALL_VERBS,
    ("events.k8s.io", "events"): ALL_VERBS,
    ("coordination.k8s.io", "leases"): ALL_VERBS,
    ("storage.k8s.io", "storageclasses"): ALL_VERBS,
    ("storage.k8s.io", "csinodes"): ALL_VERBS,
    ("apps", "replicasets"): ALL_VERBS,
    ("policy", "poddisruptionbudgets"): ALL_VERBS,
    # Kubernetes' own gang API (1.36+, the GenericWorkload gate; DESIGN §15).
    ("scheduling.k8s.io", "podgroups"): ALL_VERBS,
    ("scheduling.k8s.io", "podgroups/status"): STATUS_VERBS,
    ("scheduling.k8s.io", "workloads"): ALL_VERBS,
    ("scheduling.k8s.io", "compositepodgroups"): ALL_VERBS,  # 1.37 alpha
    # DRA (resource.k8s.io/v1); `resourceclaims/binding` is synthetic: authorized on a write of a
    # claim's status that changes its allocation or reservedFor (1.36+).
    ("resource.k8s.io", "deviceclasses"): ALL_VERBS,
    ("resource.k8s.io", "resourceslices"): ALL_VERBS,
    ("resource.k8s.io", "resourceclaims"): ALL_VERBS,
    ("resource.k8s.io", "resourceclaims/status"): STATUS_VERBS,
    ("resource.k8s.io", "resourceclaims/binding"): frozenset({"update", "patch"}),
    ("resource.k8s.io", "devicetaintrules"): ALL_VERBS,  # v1 in 1.37
    ("resource.k8s.io", "devicetaintrules/status"): STATUS_VERBS,
    # scheduler-plugins' CapacityScheduling CRD: gputopo reads it where it is installed, never
    # ships it (DESIGN §10).
    ("scheduling.x-k8s.io", "elasticquotas"): ALL_VERBS,
    ("scheduling.x-k8s.io", "elasticquotas/status"): STATUS_VERBS,
}

# The two CRDs others ship in daemonset/crds/, for when those files are not in the tree yet.
EXPECTED_CRD_RESOURCES: dict[tuple[str, str], frozenset[str]] = {
    ("topology.node.k8s.io", "noderesourcetopologies"): ALL_VERBS,
    ("scheduling.x-k8s.io", "podgroups"): ALL_VERBS,
    ("scheduling.x-k8s.io", "podgroups/status"): STATUS_VERBS,
    ("scheduling.gputopo.io", "queues"): ALL_VERBS,
    ("scheduling.gputopo.io", "queues/status"): STATUS_VERBS,
}


def crd_resources(crds: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], frozenset[str]]:
    """(group, plural) and (group, plural/status) for every CRD, as RBAC rules must name them."""
    table: dict[tuple[str, str], frozenset[str]] = {}
    for crd in crds:
        spec = crd["spec"]
        group, plural = spec["group"], spec["names"]["plural"]
        table[(group, plural)] = ALL_VERBS
        if any("status" in (v.get("subresources") or {}) for v in spec["versions"]):
            table[(group, f"{plural}/status")] = STATUS_VERBS
    return table


def rule_problems(
    rules: Sequence[Mapping[str, Any]], known: Mapping[tuple[str, str], Any]
) -> list[str]:
    """Every (group, resource, verb) a rule grants that the API does not serve, or a wildcard."""
    problems = []
    for i, rule in enumerate(rules):
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                served = known.get((group, resource))
                if served is None:
                    problems.append(f"rule {i}: unknown resource {group or 'core'}/{resource}")
                    continue
                problems.extend(
                    f"rule {i}: {group or 'core'}/{resource} has no verb {verb!r}"
                    for verb in rule.get("verbs", [])
                    if verb not in served
                )
        if "nonResourceURLs" in rule:
            problems.append(f"rule {i}: nonResourceURLs are not expected")
    return problems


def expand_rules(rules: Sequence[Mapping[str, Any]], scope: str) -> set[tuple[str, str, str, str]]:
    """(scope, group, resource, verb) for every combination a list of rules grants."""
    return {
        (scope, group, resource, verb)
        for rule in rules
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    }


# -- CRD schemas -----------------------------------------------------------------------------


def crd_for(crds: Iterable[Mapping[str, Any]], obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The CRD that serves `obj` (same group and kind), or None."""
    group = str(obj["apiVersion"]).rpartition("/")[0]
    for crd in crds:
        spec = crd["spec"]
        if spec["group"] == group and spec["names"]["kind"] == obj["kind"]:
            return crd
    return None


def crd_schema(crd: Mapping[str, Any], version: str) -> Obj:
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            schema: Obj = entry["schema"]["openAPIV3Schema"]
            return schema
    raise KeyError(f"CRD {crd['metadata']['name']} serves no version {version!r}")


def to_json_schema(node: Any, *, root: bool = True) -> Any:
    """A structural OpenAPI v3 schema as a JSON Schema that also rejects unknown fields.

    The API server prunes unknown fields silently; here they fail, as `kubectl --validate=strict`
    would. `x-kubernetes-int-or-string`, `nullable` and `x-kubernetes-preserve-unknown-fields` are
    honoured.
    """
    if not isinstance(node, dict):
        return node
    out = _convert_children(copy.deepcopy(node))
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    if root:
        props = out.setdefault("properties", {})
        for field in ("apiVersion", "kind"):
            props.setdefault(field, {"type": "string"})
        props.setdefault("metadata", {"type": "object"})
    preserve = out.pop("x-kubernetes-preserve-unknown-fields", False)
    if "properties" in out and "additionalProperties" not in out and not preserve:
        out["additionalProperties"] = False
    return out


def _convert_children(out: Obj) -> Obj:
    for name in ("properties", "patternProperties"):
        if name in out:
            out[name] = {k: to_json_schema(v, root=False) for k, v in out[name].items()}
    for name in ("items", "additionalProperties", "not"):
        if isinstance(out.get(name), dict):
            out[name] = to_json_schema(out[name], root=False)
    for name in ("allOf", "anyOf", "oneOf"):
        if name in out:
            out[name] = [to_json_schema(v, root=False) for v in out[name]]
    return out


def crd_problems(crd: Mapping[str, Any], obj: Mapping[str, Any]) -> list[str]:
    """Why `obj` does not validate against its CRD's schema, one line per error ([] when valid)."""
    version = str(obj["apiVersion"]).rpartition("/")[2]
    schema = to_json_schema(crd_schema(crd, version))
    validator = jsonschema.Draft202012Validator(schema)
    return [
        f"{'.'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}"
        for err in validator.iter_errors(dict(obj))
    ]


# -- container flags -------------------------------------------------------------------------

_FLAG = re.compile(r"^(--[a-z0-9][a-z0-9-]*)(?:=(.*))?$")
_ENV_REF = re.compile(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def parse_flags(args: Sequence[str]) -> dict[str, str | None]:
    """`--name=value` / `--name` arguments by name; positional arguments are left out."""
    flags: dict[str, str | None] = {}
    for arg in args:
        match = _FLAG.match(arg)
        if match:
            flags[match.group(1)] = match.group(2)
    return flags


def flags_in_help(text: str) -> set[str]:
    """Every long option an argparse `--help` text mentions."""
    return set(re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9-]*", text))


def env_references(container: Mapping[str, Any]) -> set[str]:
    """Names used as `$(NAME)` in a container's command and args (`$$(NAME)` is an escape)."""
    words = [*container.get("command", []), *container.get("args", [])]
    return {name for word in words for name in _ENV_REF.findall(word)}


# -- CEL (ValidatingAdmissionPolicy) ---------------------------------------------------------
# No CEL compiler runs offline here; this is a lexer-level check: the tokens are CEL tokens, the
# brackets and quotes balance, and every field path on a root variable is listed (see
# `cel_field_paths`) so that a test can look each one up in the schemas.

_CEL_TOKEN = re.compile(
    r"""\s+|(?P<string>'(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*")|(?P<number>\d+(?:\.\d+)?)"""
    r"""|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>==|!=|<=|>=|&&|\|\||[-+*/%<>!?:.,()\[\]{}])"""
)
_CEL_CLOSE = {")": "(", "]": "[", "}": "{"}
CEL_ROOTS = frozenset({"object", "oldObject", "request", "variables", "params", "namespaceObject"})


def cel_tokens(expression: str) -> list[tuple[str, str]]:
    """(kind, text) per token; ValueError naming the offset of anything that is not CEL."""
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(expression):
        match = _CEL_TOKEN.match(expression, pos)
        if match is None:
            raise ValueError(f"not a CEL token at offset {pos}: {expression[pos : pos + 20]!r}")
        if match.lastgroup is not None:
            tokens.append((match.lastgroup, match.group()))
        pos = match.end()
    return tokens


def cel_syntax_problems(expression: str) -> list[str]:
    """Unbalanced brackets, an empty expression or a non-CEL character ([] when none)."""
    try:
        tokens = cel_tokens(expression)
    except ValueError as exc:
        return [str(exc)]
    if not tokens:
        return ["empty expression"]
    stack: list[str] = []
    for kind, text in tokens:
        if kind != "op":
            continue
        if text in ("(", "[", "{"):
            stack.append(text)
        elif text in _CEL_CLOSE and (not stack or stack.pop() != _CEL_CLOSE[text]):
            return [f"unbalanced {text!r}"]
    return [f"unclosed {stack[-1]!r}"] if stack else []


def cel_field_paths(expression: str) -> set[tuple[str, ...]]:
    """Every `root.field.field...` path on a root variable (`object`, `request`, ...); a path ends
    at an index `[...]`, a call, or the last field."""
    tokens = cel_tokens(expression)
    paths: set[tuple[str, ...]] = set()
    for i, (kind, text) in enumerate(tokens):
        after_dot = i > 0 and tokens[i - 1] == ("op", ".")
        if kind != "ident" or text not in CEL_ROOTS or after_dot:
            continue
        path = [text]
        j = i + 1
        while j + 1 < len(tokens) and tokens[j] == ("op", ".") and tokens[j + 1][0] == "ident":
            if j + 2 < len(tokens) and tokens[j + 2] == ("op", "("):
                break  # a method call (`.all(`, `.startsWith(`), not a field
            path.append(tokens[j + 1][1])
            j += 2
        paths.add(tuple(path))
    return paths


def schema_has_path(
    schema: Mapping[str, Any], path: Sequence[str], defs: Mapping[str, Any]
) -> bool:
    """Whether `path` names fields an OpenAPI/JSON schema declares (`$ref`s resolved in `defs`);
    a path into a map (additionalProperties) or preserved unknown fields is accepted."""
    node = _deref(schema, defs)
    for name in path:
        props = node.get("properties") or {}
        if name not in props:
            open_ended = node.get("additionalProperties") or node.get(
                "x-kubernetes-preserve-unknown-fields"
            )
            return bool(open_ended)
        node = _deref(props[name], defs)
    return True


def _deref(node: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any]:
    while "$ref" in node:
        node = defs[str(node["$ref"]).rpartition("/")[2]]
    for combined in ("allOf", "oneOf", "anyOf"):
        if combined in node and "properties" not in node:
            return _deref(node[combined][0], defs)
    return node


# -- Pod Security Standards ------------------------------------------------------------------
# The checks of the baseline and restricted levels that gputopo's pods could meet or break
# (https://kubernetes.io/docs/concepts/security/pod-security-standards/).

PSS_LEVELS = ("restricted", "baseline", "privileged")  # strictest first
_RESTRICTED_VOLUMES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim"}
    | {"projected", "secret"}
)
_BASELINE_CAPS = frozenset(
    [
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    ]
)


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


def baseline_problems(pod: Mapping[str, Any]) -> list[str]:
    problems = [f"{f}: true" for f in ("hostNetwork", "hostPID", "hostIPC") if pod.get(f)]
    problems += [f"hostPath volume {v['name']}" for v in pod.get("volumes", []) if "hostPath" in v]
    for c in _containers(pod):
        sec = c.get("securityContext") or {}
        if sec.get("privileged"):
            problems.append(f"{c['name']}: privileged")
        added = set((sec.get("capabilities") or {}).get("add", [])) - _BASELINE_CAPS
        problems += [f"{c['name']}: capability {cap}" for cap in sorted(added)]
        problems += [f"{c['name']}: hostPort" for p in c.get("ports", []) if p.get("hostPort")]
    return problems


def restricted_problems(pod: Mapping[str, Any]) -> list[str]:
    problems = baseline_problems(pod)
    problems += [
        f"volume {v['name']} of a type restricted forbids"
        for v in pod.get("volumes", [])
        if not set(v) - {"name"} <= _RESTRICTED_VOLUMES
    ]
    pod_sec = pod.get("securityContext") or {}
    for c in _containers(pod):
        sec = {**pod_sec, **(c.get("securityContext") or {})}
        problems += _restricted_container(str(c["name"]), sec)
    return problems


def _restricted_container(name: str, sec: Mapping[str, Any]) -> list[str]:
    problems = []
    if sec.get("allowPrivilegeEscalation") is not False:
        problems.append(f"{name}: allowPrivilegeEscalation not false")
    if sec.get("runAsNonRoot") is not True or sec.get("runAsUser") == 0:
        problems.append(f"{name}: may run as root")
    if (sec.get("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost"):
        problems.append(f"{name}: no RuntimeDefault/Localhost seccomp profile")
    caps = sec.get("capabilities") or {}
    if "ALL" not in caps.get("drop", []) or set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
        problems.append(f"{name}: capabilities not dropped to at most NET_BIND_SERVICE")
    return problems


def strictest_level(pod: Mapping[str, Any]) -> str:
    """The strictest Pod Security Standard level `pod` passes."""
    if not restricted_problems(pod):
        return "restricted"
    return "baseline" if not baseline_problems(pod) else "privileged"
