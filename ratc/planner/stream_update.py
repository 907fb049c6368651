"""The deadline state chain of a rank whose compute stream runs its updates (a host's one thread).

On a DSP cluster UpdateShard runs on the DDR engine beside the compute stream
(timing._deadline_tail). A host's rank is one thread: in the deadline order (the last
micro-batch's Backward of unit j, its GradSync, its UpdateShard, then the Backward of unit
j - 1) the update waits for its sync, and the next Backward waits for the update. So each
unit's update, and the part of its sync the thread waits for, delays everything after it.
"""

from __future__ import annotations

import numpy as np


def in_stream_tail(released, rs, upd, ag, window, due, real, holds_up: bool = True, inline=False) -> tuple:
    """(exposed tail, its comm part, its update part) [C, P] of the deadline state chain when
    the compute stream runs the updates. Arrays [C, P, U] in forward unit order: `released`
    the end of the last micro-batch's Backward of each unit relative to the stage's last
    (<= 0), `rs` its GradSync (and TieSum), `upd` its UpdateShard, `ag` its PrefetchW, `due`
    when the next step's Forward needs its view (relative to the stage's last Backward);
    `window` [C, P] how long after its last Backward the next step reaches the stage.

    Per stage, in release order (the last unit first): the sync is issued on the link when
    its Backward ends and the link is free; the update starts when both the thread and the
    sync are done; the next Backward starts after the update; the prefetch follows the
    update on the link. Under 1F1B (`holds_up`) the delay a stage adds holds up every stage
    before it as well: its gradient's send to the stage before it follows its last update.
    A zero-bubble schedule sends from its I tasks, ahead of the W tasks the updates follow.
    `inline` (broadcast to [C, P, 1]): the rank's collectives run in its compute stream too
    (Platform.collectives_in_compute_stream): the sync right after its Backward, the prefetch
    right after its update, each delaying what follows as the update does."""
    shape = np.broadcast_shapes(np.shape(released), np.shape(rs), np.shape(upd), np.shape(ag))
    released, rs, upd, ag, due, real = (np.broadcast_to(a, shape) for a in (released, rs, upd, ag, due, real))
    upd = np.where(real, upd, 0.0)
    C, P, U = shape
    delay = np.zeros((C, P))            # how much later the thread is than its Backwards alone
    waited = np.zeros((C, P))           # ... of it, waiting for a sync
    link = np.full((C, P), -np.inf)
    pref_end = np.full(shape, -np.inf)
    inline = np.broadcast_to(np.asarray(inline, dtype=bool), shape)[:, :, 0]
    for j in range(U - 1, -1, -1):
        b_end = released[:, :, j] + delay
        link = np.where(inline, b_end, np.maximum(link, b_end)) + rs[:, :, j]
        start = np.where(real[:, :, j] | inline, np.maximum(b_end, link), b_end)
        waited += start - b_end
        u_end = start + upd[:, :, j]
        link = np.where(ag[:, :, j] > 0, np.maximum(link, u_end) + ag[:, :, j], link)
        pref_end[:, :, j] = np.where(ag[:, :, j] > 0, link, -np.inf)
        thread = np.where(inline, np.maximum(u_end, link), u_end)
        waited += thread - u_end
        delay = thread - released[:, :, j]
    # the next step's first Forward reaches the stage once its thread is free and the step has come round
    start_next = np.maximum(delay, window)
    late = np.maximum(0.0, (pref_end - (start_next[:, :, None] + due - window[:, :, None])).max(axis=2))
    own = start_next - window + late
    # what the stages after p add before their gradient reaches p (the send follows the
    # stage's last update in the deadline order)
    def after(a):
        """Per stage p, the sum over the stages q > p (none where nothing is held up)."""
        return np.cumsum(a[:, ::-1], axis=1)[:, ::-1] - a if holds_up else np.zeros_like(a)
    total = own + after(delay)
    comm = np.minimum(total, np.minimum(own, waited) + after(waited))
    upd_part = np.minimum(total - comm, np.minimum(own, delay - waited) + after(delay - waited))
    return total, comm, upd_part
