"""The CDI edits of a DRA share under MPS: sizes from the allocation, the user from the pods."""

from __future__ import annotations

import pytest

from agent.dra.devices import dra_devices
from deviceplugin.dra.claims import ClaimRef
from deviceplugin.dra.mps_edits import MpsEdits, share_size
from deviceplugin.errors import ClaimError
from tests.builders.deviceplugin import make_inventory

REF = ClaimRef(namespace="ml", name="share", uid="uid-1")
INVENTORY = make_inventory(1)
(SHARED,) = dra_devices(INVENTORY, [0], shared={0: 4})
ROOT = "/run/gputopo/mps"


def pod(*containers, run_as=None, claim_entry="gpu", claim_name="share"):
    spec = {
        "containers": [
            {
                "name": name,
                "securityContext": {} if uid is None else {"runAsUser": uid},
                "resources": {"claims": [{"name": c} for c in claims]},
            }
            for name, uid, claims in containers
        ],
        "resourceClaims": [{"name": claim_entry, "resourceClaimName": claim_name}],
    }
    if run_as is not None:
        spec["securityContext"] = {"runAsUser": run_as}
    return {"metadata": {"uid": "pod-1"}, "spec": spec}


@pytest.mark.parametrize(
    ("consumed", "memory_mib", "compute"),
    [
        pytest.param({"memory": "20Gi", "compute": "30"}, 20480, 30, id="both asked"),
        pytest.param({"memory": "20Gi"}, 20480, 25, id="memory only: the compute split"),
        pytest.param({}, SHARED.share_memory_mib, 25, id="nothing: the equal split"),
    ],
)
def test_share_size_comes_from_the_consumed_capacity(consumed, memory_mib, compute):
    size = share_size(SHARED, consumed)
    assert (size.memory_mib, size.compute_percent) == (memory_mib, compute)


def test_edits_carry_the_limits_pipe_and_shm_of_the_claims_user():
    edits = MpsEdits(ROOT, lambda: frozenset({0, 1000}))
    out = edits(
        REF,
        SHARED,
        {"memory": "20Gi", "compute": "30"},
        [pod(("main", 1000, ["gpu"]), ("sidecar", 2000, []))],  # the sidecar uses no claim
    )
    assert out.env == (
        f"CUDA_MPS_PIPE_DIRECTORY={ROOT}/1000/pipe",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30",
    )
    assert out.mounts == (
        (f"{ROOT}/1000/pipe", f"{ROOT}/1000/pipe"),
        (f"{ROOT}/1000/shm", "/dev/shm"),
    )


def test_the_pod_level_user_and_root_when_served():
    edits = MpsEdits(ROOT, lambda: frozenset({0, 1000}))
    assert edits(REF, SHARED, {}, [pod(("main", None, ["gpu"]), run_as=1000)]).mounts[0][0] == (
        f"{ROOT}/1000/pipe"
    )
    assert edits(REF, SHARED, {}, [pod(("main", None, ["gpu"]))]).mounts[0][0] == f"{ROOT}/0/pipe"


@pytest.mark.parametrize(
    ("pods", "users", "message"),
    [
        pytest.param(
            [pod(("a", 1000, ["gpu"]), ("b", 1001, ["gpu"]))],
            {1000, 1001},
            r"run as different users \(1000, 1001\)",
            id="two users",
        ),
        pytest.param(
            [pod(("a", None, ["gpu"]))],
            {1000},
            "sets no runAsUser and MPS does not serve root",
            id="no user, root not served",
        ),
        pytest.param(
            [pod(("a", 1001, ["gpu"]))],
            {1000},
            "uid 1001, which has no MPS daemon",
            id="user not served",
        ),
    ],
)
def test_a_claim_mps_cannot_serve_is_refused_naming_it(pods, users, message):
    edits = MpsEdits(ROOT, lambda: frozenset(users))
    with pytest.raises(ClaimError, match=message) as err:
        edits(REF, SHARED, {}, pods)
    assert "ResourceClaim ml/share" in str(err.value)


def test_a_bad_quantity_is_refused():
    edits = MpsEdits(ROOT, lambda: frozenset({0}))
    with pytest.raises(ClaimError, match="consumedCapacity of gpu-0: not a quantity"):
        edits(REF, SHARED, {"memory": "lots"}, [])
