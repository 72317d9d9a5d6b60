"""The queues' policy: `fair_share` (recent use, decayed over time), `reclaim` (which
running units give GPUs back), `plan` (admission order, preemptions and the reason
each waiting unit waits, in one pass)."""
