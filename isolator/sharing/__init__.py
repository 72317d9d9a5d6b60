"""Shared GPUs: several containers on one GPU (the operator's --shared_gpus).

Owns which GPUs are shared and how (plan.py: the flags, the slots a GPU is cut
into, the slots left) and the driver's MPS control daemon of each GPU shared
under MPS (mps_control.py: started, limited, watched and restarted).
Must not hold allocations of its own: who holds which share is the ledger's
(isolator/allocation/ledger.py), as for whole GPUs.
"""
