"""The shape of lowered hand-written plans, as FileCheck expectations: where the lifecycle
passes put GradSync, UpdateShard, PrefetchW, reduce-scatters and Recovers in a stage's
program (paper Eq. 2-4 and 7). Each case is a small `life.plan` (tests/life_programs.py),
the action notation of its lowered stages (ratc.lifecycle.actions) or its printed IR, and a
few CHECK lines."""

import pytest

from ratc.ir import print_module
from ratc.lifecycle.actions import format_pipeline
from ratc.lifecycle.lowering import find_pipeline
from life_programs import Unit, filecheck, lowered, plan_text

LAYER = Unit(fwd=(10, 0), bwd=(20, 0), saved=100, act_in=10, param=50, grad=50, sync=5, update=5, prefetch=5)


def actions(text: str) -> str:
    return format_pipeline(find_pipeline(lowered(text)), comms=True)


# One stage of two layers (units 1, 2; 0 is the embedding, 3 the head), two micro-batches.
STATE_CASES = {
    # bulk: every GradSync after the whole backward (latest layer first), then the updates,
    # then the prefetches
    "bulk": """
        CHECK: stage 0: 0F0@0-3 0B0@3-0 0F1@0-3 0B1@3-0 0G@3-0 0U@{{[0-3]}}
        CHECK-NOT: 0G
        CHECK-NOT: 0P@{{[0-3]}}{{.*}} {{.*}}0U
    """,
    # layerwise: GradSync(l) right after layer l's last Backward, overlapping the backward of
    # the layers below it; update and prefetch stay at the step end
    "layerwise": """
        CHECK: stage 0: 0F0@0-3 0B0@3-0 0F1@0-3 0B1@3 0G@3 0B1@2 0G@2 0B1@1 0G@1 0B1@0 0G@0 0U@{{[0-3]}}
        CHECK-NOT: 0G
    """,
    # deadline: each layer's UpdateShard and PrefetchW follow its own GradSync, served
    # earliest deadline (next use) first: layer 1's prefetch, released with the free
    # embedding's, goes after it, as the next step's Forward uses the embedding first
    "deadline": """
        CHECK: stage 0: 0F0@0-3 0B0@3-0 0F1@0-3 0B1@3 0G@3 0U@3 0P@3 0B1@2 0G@2 0U@2 0P@2 0B1@1 0G@1 0U@1 0B1@0 0G@0 0U@0 0P@0-1{{$}}
    """,
}


@pytest.mark.parametrize("pref", sorted(STATE_CASES))
def test_state_policy_places_the_state_chain(pref, tmp_path):
    filecheck(actions(plan_text([[LAYER, LAYER]], M=2, D=2, Z=1, pref=pref)), STATE_CASES[pref], tmp_path)


def test_zero2_reduce_scatters_each_bucket_after_its_backward(tmp_path):
    # ZeRO-2: micro-batch m's bucket of layer l is reduce-scattered right after Backward(l, m);
    # the last micro-batch's by GradSync(l) itself, under bulk too
    checks = """
        CHECK: stage 0: 0F0@0-2 0B0@2 0RS0@2 0B0@1 0RS0@1 0B0@0 0RS0@0
        CHECK-SAME: 0F1@0-2 0B1@2 0G@2 0B1@1 0G@1 0B1@0 0G@0 0U
        CHECK-NOT: RS
    """
    filecheck(actions(plan_text([[LAYER]], M=2, D=2, Z=2, pref="bulk")), checks, tmp_path)


# Two stages of one layer (unit 1 on stage 0, unit 2 on stage 1), three micro-batches. On
# the last stage a Recover follows the head's Backward in both (no wait for a gradient to hide).
RECOVERY_CASES = {
    # backward-time recovery: Recover(l, m) waits for the gradient and runs right before its
    # Backward, on the compute engine
    "ckpt": """
        CHECK: stage 0: 0F0@0-1 0SEND_F0 0F1@0-1 0SEND_F1 0RECV_B0 0R0@1 0B0@1-0 0F2@0-1 0SEND_F2 0RECV_B1 0R1@1 0B1@1-0 0RECV_B2 0R2@1 0B2@1
        CHECK: stage 1: 1RECV_F0 1F0@2-3 1B0@3 1R0@2 1B0@2 1SEND_B0
    """,
    # FSR: a Backward's first Recover moves ahead of the wait for its gradient, next to the
    # Forward issued before it (in the cool-down, the previous Backward)
    "fsr": """
        CHECK: stage 0: 0F0@0-1 0SEND_F0 0F1@0-1 0R0@1 0SEND_F1 0RECV_B0 0B0@1-0 0F2@0-1 0R1@1 0SEND_F2 0RECV_B1 0B1@1-0 0R2@1 0RECV_B2 0B2@1
        CHECK: stage 1: 1RECV_F0 1F0@2-3 1B0@3 1R0@2 1B0@2 1SEND_B0
    """,
}


@pytest.mark.parametrize("act", sorted(RECOVERY_CASES))
def test_recovery_placement(act, tmp_path):
    text = plan_text([[LAYER]] * 2, M=3, act=act)
    filecheck(actions(text), RECOVERY_CASES[act], tmp_path)


def test_fsr_recovers_co_run_with_their_host(tmp_path):
    # Every Recover under FSR co-runs (placement "corun") with the compute task before it,
    # which is charged what the pair adds (`corun`); none stays backward-time.
    checks = """
        CHECK-LABEL: life.stage @s0
        CHECK: life.fwd({{.*}}corun = {{.*}}mb = 1{{.*}}unit = 1
        CHECK-NEXT: life.recover({{.*}}mb = 0, placement = "corun"{{.*}}unit = 1
        CHECK-NOT: placement = "bwd"
    """
    filecheck(print_module(lowered(plan_text([[LAYER]] * 2, M=3, act="fsr"))), checks, tmp_path)
